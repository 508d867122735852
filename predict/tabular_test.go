package predict_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/builtin"
	"github.com/tempotrain/tempotrain/compute"
	"github.com/tempotrain/tempotrain/compute/computetest"
	"github.com/tempotrain/tempotrain/data"
	"github.com/tempotrain/tempotrain/predict"
	"github.com/tempotrain/tempotrain/storage"
	"github.com/tempotrain/tempotrain/train"
	"github.com/tempotrain/tempotrain/train/trainrt"
)

// table is a generated table kept as the CSV's strings: numeric a and b
// (b sometimes missing), categorical kind, and the label (a class or a
// number).
type table struct {
	a, b, kind, label []string
}

func genTable(n int, seed uint64, task string) table {
	rng := rand.New(rand.NewPCG(seed, 3))
	var t table
	kinds := []string{"k1", "k2", "k3", "k4"}
	for range n {
		a, b := rng.NormFloat64()*3+10, rng.NormFloat64()
		k := rng.IntN(len(kinds))
		score := (a-10)/3 - b + float64(k)*0.7 - 1 + 0.2*rng.NormFloat64()
		bs := strconv.FormatFloat(b, 'g', 7, 64)
		if rng.IntN(15) == 0 {
			bs = ""
		}
		label := "no"
		if score > 0 {
			label = "yes"
		}
		if task == "regression" {
			label = strconv.FormatFloat(50+10*score, 'g', 7, 64)
		}
		t.a = append(t.a, strconv.FormatFloat(a, 'g', 7, 64))
		t.b = append(t.b, bs)
		t.kind = append(t.kind, kinds[k])
		t.label = append(t.label, label)
	}
	return t
}

func (tb table) write(t *testing.T, path string) {
	t.Helper()
	var s strings.Builder
	s.WriteString("a,b,kind,label\n")
	for i := range tb.a {
		fmt.Fprintf(&s, "%s,%s,%s,%s\n", tb.a[i], tb.b[i], tb.kind[i], tb.label[i])
	}
	if err := os.WriteFile(path, []byte(s.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// inputs are the table's columns as the predictor's input tensors.
func (tb table) inputs(t *testing.T) predict.Batch {
	t.Helper()
	n := len(tb.a)
	num := func(name string, vals []string) predict.Tensor {
		x := make([]float32, n)
		for i, s := range vals {
			if s == "" {
				x[i] = float32(math.NaN())
				continue
			}
			v, err := strconv.ParseFloat(s, 32)
			if err != nil {
				t.Fatal(err)
			}
			x[i] = float32(v)
		}
		return predict.Tensor{Name: name, Datatype: predict.FP32, Shape: []int{n}, FP32: x}
	}
	return predict.Batch{Inputs: []predict.Tensor{num("a", tb.a), num("b", tb.b),
		{Name: "kind", Datatype: predict.BYTES, Shape: []int{n}, Bytes: tb.kind}}}
}

// trainRanks runs a built-in function on datasets with world ranks over the
// real TCP collective; rank 0 commits its checkpoints to a local run. It
// returns the last checkpoint and metrics.
func trainRanks(t *testing.T, fn string, world int, cfg any, datasets map[string]api.DatasetSpec) (*train.Checkpoint, train.Metrics) {
	t.Helper()
	ctx := context.Background()
	b, err := storage.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	rep := &reporter{run: storage.NewRun(b, "r")}
	raw, _ := json.Marshal(cfg)
	comms := computetest.ConnectTCP(t, world)
	errs := make([]error, world)
	var wg sync.WaitGroup
	for r := range world {
		var rp trainrt.Reporter = rep
		if r > 0 {
			rp = nil
		}
		tc := trainrt.NewContext(ctx, trainrt.ContextInfo{RunName: "r", Attempt: 1, WorldRank: r, WorldSize: world, LocalRank: r, LocalWorldSize: world,
			Config: raw, ScratchDir: t.TempDir(), Device: -1, Datasets: datasets}, comms[r], rp, nil)
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = builtin.Func(builtin.Functions[fn])(ctx, tc)
			if errs[r] != nil {
				for _, c := range comms {
					c.Abort()
				}
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if rep.ck == nil {
		t.Fatal("no checkpoint reported")
	}
	return rep.ck, rep.m
}

// Issue 14 item 5: the predictor of a tabular-mlp checkpoint, given the
// valid table's raw columns, is right exactly as often as the run
// reported (valid_accuracy), and says the classes' values; a regression's
// RMSE is the reported valid_rmse. Two ranks, and the valid set under the
// default remainder (pad), with a row count the ranks do not divide.
func TestTabularPredictorMatchesReportedMetrics(t *testing.T) {
	for _, task := range []string{"classification", "regression"} {
		t.Run(task, func(t *testing.T) {
			dir := t.TempDir()
			trainT, validT := genTable(1200, 1, task), genTable(301, 2, task)
			trainT.write(t, filepath.Join(dir, "train.csv"))
			validT.write(t, filepath.Join(dir, "valid.csv"))
			ds := map[string]api.DatasetSpec{
				"train": {URI: filepath.Join(dir, "train.csv"), Label: "label", Task: task},
				"valid": {URI: filepath.Join(dir, "valid.csv"), Label: "label", Task: task},
			}
			ck, m := trainRanks(t, builtin.TabularMLP, 2, map[string]any{"epochs": 4, "seed": 9}, ds)
			t.Logf("reported %v", m)
			p, err := predict.Load(context.Background(), ck.URI)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			md := p.Metadata()
			var in []string
			for _, s := range md.Inputs {
				in = append(in, fmt.Sprintf("%s %s %v", s.Name, s.Datatype, s.Shape))
			}
			if md.Name != builtin.TabularMLP || strings.Join(in, ", ") != "a FP32 [-1], b FP32 [-1], kind BYTES [-1]" {
				t.Errorf("metadata %s, inputs %s", md.Name, strings.Join(in, ", "))
			}
			out, err := p.Predict(context.Background(), validT.inputs(t))
			if err != nil {
				t.Fatal(err)
			}
			n := len(validT.a)
			if task == "classification" {
				if len(out) != 3 || out[0].Name != "probabilities" || !slices.Equal(out[0].Shape, []int{n, 2}) || out[2].Name != "label" {
					t.Fatalf("outputs %v", out)
				}
				correct := 0
				for i, l := range out[2].Bytes {
					if want := []string{"no", "yes"}[out[1].INT64[i]]; l != want {
						t.Fatalf("row %d: class %d, label %q; want %q", i, out[1].INT64[i], l, want)
					}
					if l == validT.label[i] {
						correct++
					}
				}
				acc := float64(correct) / float64(n)
				if acc != m["valid_accuracy"] {
					t.Errorf("predictor accuracy %v (%d/%d), the run reported %v", acc, correct, n, m["valid_accuracy"])
				}
				if acc < 0.85 {
					t.Errorf("accuracy %v, want ≥ 0.85", acc)
				}
				return
			}
			if len(out) != 1 || out[0].Name != "value" || !slices.Equal(out[0].Shape, []int{n}) {
				t.Fatalf("outputs %v", out)
			}
			var sq float64
			for i, v := range out[0].FP32 {
				y, _ := strconv.ParseFloat(validT.label[i], 32)
				d := float64(v) - float64(float32(y))
				sq += d * d
			}
			// The run sums in another order, and un-standardises in float64
			// before rounding: agreement to float32's precision.
			rmse := math.Sqrt(sq / float64(n))
			if math.Abs(rmse-m["valid_rmse"]) > 1e-5*m["valid_rmse"] {
				t.Errorf("predictor RMSE %v, the run reported %v", rmse, m["valid_rmse"])
			}
			// Noise 2, and b (a tenth of the signal) missing in a 15th of
			// the rows: about 3.5.
			if rmse > 5 {
				t.Errorf("RMSE %v on a target of std ≈ 13, want ≤ 5", rmse)
			}
		})
	}
}

func TestTabularPredictorInputs(t *testing.T) {
	dir := t.TempDir()
	genTable(300, 1, "classification").write(t, filepath.Join(dir, "train.csv"))
	ck, _ := trainRanks(t, builtin.TabularMLP, 1, map[string]any{"epochs": 1}, map[string]api.DatasetSpec{
		"train": {URI: filepath.Join(dir, "train.csv"), Label: "label"}})
	p, err := predict.Load(context.Background(), ck.URI)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	// A missing value and an unseen category predict (imputed, all-zero
	// one-hot); one row alone gives what it gives in a batch of 600 (the
	// class; the probabilities to float32 rounding, as the GEMM's blocking
	// differs with the batch).
	tb := genTable(600, 5, "classification")
	tb.kind[3], tb.b[4] = "k9", ""
	whole, err := p.Predict(context.Background(), tb.inputs(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{0, 3, 4, 257, 599} {
		one := table{a: tb.a[i : i+1], b: tb.b[i : i+1], kind: tb.kind[i : i+1], label: tb.label[i : i+1]}
		out, err := p.Predict(context.Background(), one.inputs(t))
		if err != nil {
			t.Fatal(err)
		}
		if out[1].INT64[0] != whole[1].INT64[i] || math.Abs(float64(out[0].FP32[0]-whole[0].FP32[2*i])) > 1e-6 {
			t.Errorf("row %d alone: %v %v, in the batch %v %v", i, out[1].INT64[0], out[0].FP32[0], whole[1].INT64[i], whole[0].FP32[2*i])
		}
	}
	checkTableInputErrors(t, p, tb)
}

// checkTableInputErrors checks that p, a predictor of the generated
// table's columns, rejects a missing input, a wrong datatype, inputs of
// different row counts and an unknown input, naming each.
func checkTableInputErrors(t *testing.T, p predict.Predictor, tb table) {
	t.Helper()
	ok := tb.inputs(t)
	n := len(tb.a)
	for _, tt := range []struct {
		name string
		b    predict.Batch
		want string
	}{
		{"missing input", predict.Batch{Inputs: ok.Inputs[:2]}, `missing input "kind"`},
		{"wrong type", predict.Batch{Inputs: []predict.Tensor{ok.Inputs[0], ok.Inputs[1], {Name: "kind", Datatype: predict.FP32, Shape: []int{n}, FP32: make([]float32, n)}}}, `input "kind" has datatype FP32`},
		{"rows differ", predict.Batch{Inputs: []predict.Tensor{ok.Inputs[0], {Name: "b", Datatype: predict.FP32, Shape: []int{2}, FP32: make([]float32, 2)}, ok.Inputs[2]}}, "has 2 rows"},
		{"unknown input", predict.Batch{Inputs: append(slices.Clone(ok.Inputs), predict.Tensor{Name: "label", Datatype: predict.BYTES, Shape: []int{n}, Bytes: tb.label})}, `unknown input "label"`},
	} {
		if _, err := p.Predict(context.Background(), tt.b); !errors.Is(err, predict.ErrInvalidInput) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want ErrInvalidInput saying %q", tt.name, err, tt.want)
		}
	}
}

// A CNN trained on an image folder predicts from the images' bytes (FP32
// pixels in [0, 255] at the training size) with the accuracy the run
// reported on its "test" dataset.
func TestImageFolderPredictorMatchesReportedAccuracy(t *testing.T) {
	dir := t.TempDir()
	writeImages(t, filepath.Join(dir, "train"), 40, 1)
	writeImages(t, filepath.Join(dir, "test"), 15, 2)
	im := api.ImageOptions{Width: 12, Height: 10, Channels: 3, Mean: []float64{0.5, 0.5, 0.5}, Std: []float64{0.3, 0.3, 0.3}}
	ds := map[string]api.DatasetSpec{
		"train": {URI: filepath.Join(dir, "train") + "/", Format: "images", Image: im},
		"test":  {URI: filepath.Join(dir, "test") + "/", Format: "images", Image: im, Remainder: "exact"},
	}
	ck, m := trainRanks(t, "mnist-cnn", 2, map[string]any{"epochs": 1, "batch_size": 16, "lr": 0.02, "seed": 4}, ds)
	p, err := predict.Load(context.Background(), ck.URI)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	md := p.Metadata()
	if md.Name != "mnist-cnn" || len(md.Inputs) != 1 || !slices.Equal(md.Inputs[0].Shape, []int{-1, 3, 10, 12}) || !slices.Equal(md.Outputs[0].Shape, []int{-1, 3}) {
		t.Errorf("metadata %+v", md)
	}
	// The test images as the dataset reads them: resized bytes.
	spec := ds["test"]
	s, err := data.Open(context.Background(), spec, data.ShardOptions{Name: "test", BatchSize: 45}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	b, err := s.NextBatch(context.Background())
	if err != nil || b.N != 45 {
		t.Fatal(b.N, err)
	}
	px := make([]float32, len(b.Pixels[:45*360]))
	for i, v := range b.Pixels[:45*360] {
		px[i] = float32(v)
	}
	out, err := p.Predict(context.Background(), predict.Batch{Inputs: []predict.Tensor{{Name: "pixels", Datatype: predict.FP32, Shape: []int{45, 3, 10, 12}, FP32: px}}})
	if err != nil {
		t.Fatal(err)
	}
	correct := 0
	for i, c := range out[1].INT64 {
		if float32(c) == b.Num[0][i] {
			correct++
		}
		if out[2].Bytes[i] != []string{"blue", "green", "red"}[c] {
			t.Errorf("row %d: class %d label %q", i, c, out[2].Bytes[i])
		}
	}
	acc := float64(correct) / 45
	if acc != m["test_accuracy"] {
		t.Errorf("predictor accuracy %v, the run reported %v", acc, m["test_accuracy"])
	}
	if acc < 0.8 {
		t.Errorf("accuracy %v, want ≥ 0.8", acc)
	}
	t.Logf("accuracy %.4f, as reported", acc)
	px[7] = 3.5
	if _, err := p.Predict(context.Background(), predict.Batch{Inputs: []predict.Tensor{{Name: "pixels", Datatype: predict.FP32, Shape: []int{45, 3, 10, 12}, FP32: px}}}); !errors.Is(err, predict.ErrInvalidInput) {
		t.Errorf("pixel 3.5: %v, want ErrInvalidInput", err)
	}
}

// writeImages writes perClass PNGs of each class: a square of the class's
// colour channel, bright, at a random place on a noisy ground.
func writeImages(t *testing.T, dir string, perClass int, seed uint64) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 1))
	for ci, class := range []string{"red", "green", "blue"} {
		os.MkdirAll(filepath.Join(dir, class), 0o755)
		for i := range perClass {
			w, h := 10+rng.IntN(10), 10+rng.IntN(10)
			img := image.NewRGBA(image.Rect(0, 0, w, h))
			x0, y0 := rng.IntN(w/2), rng.IntN(h/2)
			for y := range h {
				for x := range w {
					c := [3]uint8{uint8(rng.IntN(90)), uint8(rng.IntN(90)), uint8(rng.IntN(90))}
					if x >= x0 && x < x0+w/2 && y >= y0 && y < y0+h/2 {
						c[ci] = 255
					}
					img.Set(x, y, color.RGBA{c[0], c[1], c[2], 255})
				}
			}
			f, err := os.Create(filepath.Join(dir, class, fmt.Sprintf("%02d.png", i)))
			if err != nil {
				t.Fatal(err)
			}
			if err := png.Encode(f, img); err != nil {
				t.Fatal(err)
			}
			f.Close()
		}
	}
}

// Issue 30 rule 1 for the model info a checkpoint's state holds: what it
// declares (outputs, input shape, hidden sizes) is checked against bounds,
// against the pipeline and against the parameters the state holds before
// a network of that size is built; the error names the field and value.
func TestDatasetPredictorChecksModelInfo(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	genTable(200, 1, "classification").write(t, filepath.Join(dir, "train.csv"))
	ck, _ := trainRanks(t, builtin.TabularMLP, 1, map[string]any{"epochs": 1}, map[string]api.DatasetSpec{
		"train": {URI: filepath.Join(dir, "train.csv"), Label: "label"}})
	sc, err := storage.OpenCheckpoint(ctx, ck.URI)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		edit func(mi *api.ModelInfo)
		says string
	}{
		{"as trained", func(*api.ModelInfo) {}, ""},
		{"outputs", func(mi *api.ModelInfo) { mi.Outputs = 10_000_000_000 }, "outputs 10000000000"},
		{"classes", func(mi *api.ModelInfo) { mi.Classes = mi.Classes[:1] }, "names 1 classes"},
		{"input", func(mi *api.ModelInfo) { mi.Input = []int{1 << 40} }, "input shape [1099511627776]"},
		{"pipeline", func(mi *api.ModelInfo) { mi.Input = []int{mi.Input[0] + 1} }, "the pipeline makes"},
		{"parameters", func(mi *api.ModelInfo) { mi.Hidden = []int{65536, 65536} }, "parameters, the checkpoint holds"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d := t.TempDir()
			if err := sc.Download(ctx, d); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(d, builtin.CheckpointFile)
			st, err := compute.LoadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			mi, err := api.ParseModelInfo(st.Blobs[api.ModelInfoBlob])
			if err != nil {
				t.Fatal(err)
			}
			tt.edit(&mi)
			if st.Blobs[api.ModelInfoBlob], err = json.Marshal(mi); err != nil {
				t.Fatal(err)
			}
			if err := st.SaveFile(path); err != nil {
				t.Fatal(err)
			}
			p, err := predict.LoadDir(ctx, d, ck.Meta)
			if tt.says == "" {
				if err != nil {
					t.Fatal(err)
				}
				p.Close()
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.says) {
				t.Errorf("Load: %v, want an error saying %q", err, tt.says)
			}
		})
	}
}
