package predict_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/tempotrain/tempotrain/builtin"
	"github.com/tempotrain/tempotrain/data/format"
	"github.com/tempotrain/tempotrain/predict"
	"github.com/tempotrain/tempotrain/storage"
	"github.com/tempotrain/tempotrain/train"
	"github.com/tempotrain/tempotrain/train/trainrt"
)

func needFashionMNIST(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(format.DefaultFashionMNISTDir, "t10k-images-idx3-ubyte.gz")); err != nil {
		if os.Getenv("TEMPOTRAIN_REQUIRE_FASHION_MNIST") == "1" {
			t.Fatalf("needs Fashion-MNIST (TEMPOTRAIN_REQUIRE_FASHION_MNIST=1): %v", err)
		}
		t.Skipf("needs Fashion-MNIST (apt-get install dataset-fashion-mnist): %v", err)
	}
}

// reporter keeps the last report and commits its checkpoint to a local run,
// as rank 0 of the runtime does.
type reporter struct {
	run *storage.Run
	seq int
	m   train.Metrics
	ck  *train.Checkpoint
}

func (r *reporter) Report(ctx context.Context, m train.Metrics, ck *train.Checkpoint) error {
	r.m = m
	if ck == nil {
		return nil
	}
	r.seq++
	man, err := r.run.CommitCheckpoint(ctx, r.seq, ck.Dir, storage.Manifest{Seq: r.seq, Attempt: 1, Metrics: m, Meta: ck.Meta})
	if err != nil {
		return err
	}
	r.ck = &train.Checkpoint{URI: r.run.CheckpointURI(r.seq), Seq: r.seq, Metrics: m, Meta: man.Meta}
	return nil
}

// trainOne trains a built-in model for one epoch on a single rank and
// returns its committed checkpoint and last metrics.
func trainOne(t *testing.T, model string, cfg map[string]any) (*train.Checkpoint, train.Metrics) {
	t.Helper()
	needFashionMNIST(t)
	ctx := context.Background()
	b, err := storage.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	rep := &reporter{run: storage.NewRun(b, "r")}
	raw, _ := json.Marshal(cfg)
	tc := trainrt.NewContext(ctx, trainrt.ContextInfo{RunName: "r", Attempt: 1, WorldSize: 1, LocalWorldSize: 1,
		Config: raw, ScratchDir: t.TempDir(), Device: -1}, nil, rep, nil)
	if err := builtin.Run(ctx, tc, nil, model, builtin.Options{}); err != nil {
		t.Fatal(err)
	}
	if rep.ck == nil {
		t.Fatal("no checkpoint reported")
	}
	return rep.ck, rep.m
}

// testImages is the first n test images as the predictor's input, and their
// labels.
func testImages(t *testing.T, n int) (predict.Tensor, []byte) {
	t.Helper()
	ds, err := format.LoadFashionMNIST(format.DefaultFashionMNISTDir, "t10k")
	if err != nil {
		t.Fatal(err)
	}
	ds = ds.Subset(n)
	px := make([]float32, len(ds.Images))
	for i, v := range ds.Images {
		px[i] = float32(v)
	}
	return predict.Tensor{Name: "pixels", Datatype: predict.FP32, Shape: []int{ds.N, 1, 28, 28}, FP32: px}, ds.Labels
}

// TestImagePredictorMatchesReportedAccuracy: the accuracy a predictor loaded
// from a committed checkpoint gets on the test split is exactly the
// test_accuracy the run reported with that checkpoint.
func TestImagePredictorMatchesReportedAccuracy(t *testing.T) {
	for _, model := range []string{"mlp", "cnn"} {
		t.Run(model, func(t *testing.T) {
			const testN = 1000
			ck, m := trainOne(t, model, map[string]any{"epochs": 1, "train_limit": 2048, "test_limit": testN, "batch_size": 64, "seed": 3})
			p, err := predict.Load(context.Background(), ck.URI)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			md := p.Metadata()
			if md.Name != "mnist-"+model || md.Checkpoint != ck.URI || md.Format != predict.StateFormat {
				t.Errorf("metadata %+v", md)
			}
			x, labels := testImages(t, testN)
			out, err := p.Predict(context.Background(), predict.Batch{Inputs: []predict.Tensor{x}})
			if err != nil {
				t.Fatal(err)
			}
			if len(out) != 2 || out[0].Name != "probabilities" || out[1].Name != "class" || len(out[1].INT64) != testN {
				t.Fatalf("outputs %+v", out)
			}
			correct := 0
			for i, c := range out[1].INT64 {
				if c == int64(labels[i]) {
					correct++
				}
				var sum float64
				for _, v := range out[0].FP32[i*10 : (i+1)*10] {
					sum += float64(v)
				}
				if math.Abs(sum-1) > 1e-5 {
					t.Fatalf("row %d: probabilities sum to %v", i, sum)
				}
			}
			acc := float64(correct) / testN
			if acc != m["test_accuracy"] {
				t.Errorf("predictor accuracy %v (%d/%d), the run reported %v", acc, correct, testN, m["test_accuracy"])
			}
			t.Logf("%s: accuracy %.4f, as reported", model, acc)
		})
	}
}

func TestImagePredictorConcurrentAndSplit(t *testing.T) {
	ck, _ := trainOne(t, "mlp", map[string]any{"epochs": 1, "train_limit": 512, "test_limit": 256, "batch_size": 64})
	p, err := predict.Load(context.Background(), ck.URI)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	// 600 rows go through in three forward passes; any row alone gives the
	// same answer as in the batch.
	x, _ := testImages(t, 600)
	whole, err := p.Predict(context.Background(), predict.Batch{Inputs: []predict.Tensor{x}})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < 600; i += 37 {
				one := predict.Tensor{Name: "pixels", Datatype: predict.FP32, Shape: []int{1, 1, 28, 28}, FP32: x.FP32[i*784 : (i+1)*784]}
				out, err := p.Predict(context.Background(), predict.Batch{Inputs: []predict.Tensor{one}})
				if err != nil {
					t.Error(err)
					return
				}
				if out[1].INT64[0] != whole[1].INT64[i] {
					t.Errorf("row %d alone: class %d, in the batch %d", i, out[1].INT64[0], whole[1].INT64[i])
				}
			}
		}()
	}
	wg.Wait()
}

func TestImagePredictorRejectsBadInput(t *testing.T) {
	ck, _ := trainOne(t, "mlp", map[string]any{"epochs": 1, "train_limit": 256, "test_limit": 64, "batch_size": 64})
	p, err := predict.Load(context.Background(), ck.URI)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for _, tt := range []struct {
		in   predict.Tensor
		want string
	}{
		{predict.Tensor{Name: "image", Datatype: predict.FP32, Shape: []int{1, 1, 28, 28}, FP32: make([]float32, 784)}, `missing input "pixels"`},
		{predict.Tensor{Name: "pixels", Datatype: predict.INT64, Shape: []int{1, 1, 28, 28}, INT64: make([]int64, 784)}, `input "pixels" has datatype INT64`},
		{predict.Tensor{Name: "pixels", Datatype: predict.FP32, Shape: []int{1, 784}, FP32: make([]float32, 784)}, `input "pixels" has shape [1 784]`},
		{predict.Tensor{Name: "pixels", Datatype: predict.FP32, Shape: []int{2, 1, 28, 28}, FP32: make([]float32, 784)}, "1568 elements) but 784"},
	} {
		_, err := p.Predict(context.Background(), predict.Batch{Inputs: []predict.Tensor{tt.in}})
		if !errors.Is(err, predict.ErrInvalidInput) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: error %v, want ErrInvalidInput saying %q", tt.in.Shape, err, tt.want)
		}
	}
}

func TestLoadErrors(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	if _, err := predict.Load(ctx, filepath.Join(dir, "r", "checkpoint_000001")); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("missing checkpoint: %v, want ErrNotFound", err)
	}
	// A committed checkpoint of a format nobody registered.
	b, _ := storage.Open(ctx, dir)
	src := t.TempDir()
	os.WriteFile(filepath.Join(src, "w"), []byte("x"), 0o644)
	if _, err := storage.NewRun(b, "r").CommitCheckpoint(ctx, 1, src, storage.Manifest{Seq: 1, Meta: map[string]string{"format": "onnx"}}); err != nil {
		t.Fatal(err)
	}
	_, err := predict.Load(ctx, filepath.Join(dir, "r", "checkpoint_000001"))
	if !errors.Is(err, predict.ErrUnknownFormat) || !strings.Contains(err.Error(), `"onnx"`) || !strings.Contains(err.Error(), predict.StateFormat) {
		t.Errorf("unknown format: %v", err)
	}
	// A user's format, registered as a training function is.
	predict.MustRegister("test-constant", func(_ context.Context, dir string, meta map[string]string) (predict.Predictor, error) {
		return constant{v: meta["value"]}, nil
	})
	if _, err := storage.NewRun(b, "r").CommitCheckpoint(ctx, 2, src, storage.Manifest{Seq: 2, Meta: map[string]string{"format": "test-constant", "value": "7"}}); err != nil {
		t.Fatal(err)
	}
	p, err := predict.Load(ctx, filepath.Join(dir, "r", "checkpoint_000002"))
	if err != nil {
		t.Fatal(err)
	}
	if md := p.Metadata(); md.Name != "constant 7" || !strings.HasSuffix(md.Checkpoint, "checkpoint_000002") {
		t.Errorf("metadata %+v", md)
	}
	p.Close()
	if err := predict.Register("test-constant", func(context.Context, string, map[string]string) (predict.Predictor, error) { return nil, nil }); err == nil {
		t.Error("a format registered twice")
	}
}

type constant struct{ v string }

func (c constant) Metadata() predict.Metadata {
	return predict.Metadata{Name: fmt.Sprintf("constant %s", c.v)}
}
func (c constant) Predict(context.Context, predict.Batch) ([]predict.Tensor, error) {
	return nil, nil
}
func (c constant) Close() error { return nil }
