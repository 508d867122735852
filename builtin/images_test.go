package builtin

import (
	"bytes"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/compute"
	"github.com/tempotrain/tempotrain/train"
)

// writeImageFolder writes perClass images of each of three classes under
// dir/<class>/, PNG and JPEG of random sizes: "bars" has vertical
// stripes, "dots" a bright square on a dark ground, "flat" a flat colour;
// colours and positions vary, so the class is in the shapes.
func writeImageFolder(t testing.TB, dir string, perClass int, seed uint64) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 7))
	for _, class := range []string{"bars", "dots", "flat"} {
		if err := os.MkdirAll(filepath.Join(dir, class), 0o755); err != nil {
			t.Fatal(err)
		}
		for i := range perClass {
			w, h := 12+rng.IntN(12), 12+rng.IntN(12)
			img := image.NewRGBA(image.Rect(0, 0, w, h))
			base := color.RGBA{uint8(rng.IntN(256)), uint8(rng.IntN(256)), uint8(rng.IntN(256)), 255}
			cx, cy := rng.IntN(w/2), rng.IntN(h/2)
			for y := range h {
				for x := range w {
					c := base
					switch class {
					case "bars":
						if (x/3)%2 == 0 {
							c = color.RGBA{255 - base.R, 255 - base.G, 255 - base.B, 255}
						}
					case "dots":
						c = color.RGBA{base.R / 4, base.G / 4, base.B / 4, 255}
						if x >= cx && x < cx+w/2 && y >= cy && y < cy+h/2 {
							c = color.RGBA{255, 255, 255, 255}
						}
					}
					img.Set(x, y, c)
				}
			}
			path := filepath.Join(dir, class, fmt.Sprintf("%03d.png", i))
			var b bytes.Buffer
			var err error
			if i%3 == 2 {
				path = path[:len(path)-4] + ".jpg"
				err = jpeg.Encode(&b, img, &jpeg.Options{Quality: 95})
			} else {
				err = png.Encode(&b, img)
			}
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func imageDatasets(t testing.TB, trainPer, testPer int) map[string]api.DatasetSpec {
	dir := t.TempDir()
	writeImageFolder(t, filepath.Join(dir, "train"), trainPer, 1)
	writeImageFolder(t, filepath.Join(dir, "test"), testPer, 2)
	im := api.ImageOptions{Width: 16, Height: 16, Channels: 3, Mean: []float64{0.5, 0.5, 0.5}, Std: []float64{0.25, 0.25, 0.25}}
	return map[string]api.DatasetSpec{
		"train": {URI: filepath.Join(dir, "train") + "/", Format: "images", Image: im},
		"test":  {URI: filepath.Join(dir, "test") + "/", Format: "images", Image: im, Remainder: "exact"},
	}
}

// Issue 14 item 1: mnist-cnn on an image folder. The model's input is the
// spec's 3×16×16, its outputs the folder's three classes; the "test"
// dataset gives test_accuracy. A run interrupted mid-epoch resumes to the
// same bits.
func TestCNNOnImageFolder(t *testing.T) {
	t.Parallel()
	ds := imageDatasets(t, 60, 20)
	cfg := Config{Epochs: 6, BatchSize: 16, LR: 0.02, Seed: 2, CheckpointEverySteps: 3}
	run := dsRun{model: "cnn", world: 2, cfg: cfg, datasets: ds}
	full, err := run.attempt(t)
	if err != nil {
		t.Fatal(err)
	}
	reps := epochReports(full)
	for _, m := range reps {
		t.Logf("%v", m)
	}
	if len(reps) != 6 {
		t.Fatalf("%d epoch reports, want 6", len(reps))
	}
	if acc := reps[5]["test_accuracy"]; acc < 0.9 {
		t.Errorf("test accuracy %.4f after 6 epochs, want ≥ 0.9", acc)
	}
	st, err := compute.LoadFile(full.last().Path(CheckpointFile))
	if err != nil {
		t.Fatal(err)
	}
	mi, ok, err := ReadModelInfo(st)
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	if mi.Model != "cnn" || mi.Function != "mnist-cnn" || !slices.Equal(mi.Input, []int{3, 16, 16}) || mi.Outputs != 3 ||
		!slices.Equal(mi.Classes, []string{"bars", "dots", "flat"}) || string(st.Blobs["model"]) != "cnn" {
		t.Errorf("model info %+v", mi)
	}
	if w, ok := st.Tensor("param.conv1.weight"); !ok || !slices.Equal(w.Shape, []int{32, 3, 3, 3}) {
		t.Errorf("conv1.weight %v", w.Shape)
	}

	// 180 images, 2 ranks, batches of 16: 6 steps an epoch, a checkpoint
	// after step 3. Rank 0 fails at step 5 of epoch 3.
	failing := run
	failing.o.AfterStep = func(tc *train.Context, epoch, step int) error {
		if tc.WorldRank() == 0 && epoch == 2 && step == 5 {
			return errInterrupted
		}
		return nil
	}
	first, err := failing.attempt(t)
	if !errors.Is(err, errInterrupted) {
		t.Fatalf("interrupted attempt: %v", err)
	}
	resume := run
	resume.ck = first.last()
	second, err := resume.attempt(t)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(stateBytes(t, full.last()), stateBytes(t, second.last())) {
		t.Fatal("the resumed run's final state differs from the uninterrupted run's")
	}
}

// Fashion-MNIST's IDX files as a dataset (fashion-mnist:train) give
// mnist-mlp the same shape and classes as without datasets.
func TestMLPOnFashionMNISTDataset(t *testing.T) {
	t.Parallel()
	needData(t)
	ds := map[string]api.DatasetSpec{
		"train": {URI: "fashion-mnist:test", Image: api.ImageOptions{Mean: []float64{0.2860}, Std: []float64{0.3530}}},
	}
	rec, err := dsRun{model: "mlp", world: 2, cfg: Config{Epochs: 1, BatchSize: 128, Seed: 1}, datasets: ds}.attempt(t)
	if err != nil {
		t.Fatal(err)
	}
	m := epochReports(rec)[0]
	t.Logf("%v", m)
	if m["train_accuracy"] < 0.5 {
		t.Errorf("train accuracy %v after one epoch on 10k images", m["train_accuracy"])
	}
	st, _ := compute.LoadFile(rec.last().Path(CheckpointFile))
	mi, _, _ := ReadModelInfo(st)
	if !slices.Equal(mi.Input, []int{1, 28, 28}) || mi.Outputs != 10 {
		t.Errorf("model info %+v", mi)
	}
}

// mnist-resnet18 on an image folder: a 3-channel stem, three classes, and
// its BatchNorm statistics in the checkpoint.
func TestResNet18OnImageFolder(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("ResNet-18 on the CPU")
	}
	ds := imageDatasets(t, 20, 6)
	rec, err := dsRun{model: "resnet18", world: 2, cfg: Config{Epochs: 2, BatchSize: 16, LR: 0.02, Seed: 1}, datasets: ds}.attempt(t)
	if err != nil {
		t.Fatal(err)
	}
	reps := epochReports(rec)
	t.Logf("%v\n%v", reps[0], reps[1])
	if _, ok := reps[1]["test_accuracy"]; !ok {
		t.Errorf("no test_accuracy in %v", reps[1])
	}
	st, err := compute.LoadFile(rec.last().Path(CheckpointFile))
	if err != nil {
		t.Fatal(err)
	}
	if w, ok := st.Tensor("param.conv1.weight"); !ok || !slices.Equal(w.Shape, []int{64, 3, 7, 7}) {
		t.Errorf("conv1.weight %v", w.Shape)
	}
	if w, ok := st.Tensor("param.fc.weight"); !ok || !slices.Equal(w.Shape, []int{3, 512}) {
		t.Errorf("fc.weight %v", w.Shape)
	}
	if _, ok := st.Tensor("buffer.bn1.running_mean"); !ok {
		t.Error("no BatchNorm running mean in the checkpoint")
	}
}
