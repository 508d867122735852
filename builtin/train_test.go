package builtin

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/tempotrain/tempotrain/train"
	"github.com/tempotrain/tempotrain/train/trainrt"
)

// CI-sized accuracy checks; the full runs (5 epochs on all 60k) are in the
// package's closing note and bench/train.
func TestTrainsMLP(t *testing.T) {
	t.Parallel()
	needData(t)
	cfg := Config{Epochs: 2, BatchSize: 128, Seed: 1, TrainLimit: 12000, TestLimit: 2000}
	rec, err := attempt(t, tcpGroup, "mlp", 2, cfg, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range rec.metrics {
		t.Logf("%v", m)
	}
	first, last := rec.metrics[0], rec.metrics[len(rec.metrics)-1]
	if !(last["train_loss"] < first["train_loss"]) {
		t.Errorf("train loss did not fall: %v → %v", first["train_loss"], last["train_loss"])
	}
	if acc := last["test_accuracy"]; acc < 0.80 {
		t.Errorf("test accuracy %.4f after 2 epochs on 12k items, want ≥ 0.80", acc)
	}
}

func TestRegisterIdempotent(t *testing.T) {
	Register()
	Register()
	for name := range Functions {
		if _, err := trainrt.Lookup(name); err != nil {
			t.Errorf("after Register: %v", err)
		}
	}
}

// A single rank runs through the registered function with no collective
// group at all.
func TestSingleRankThroughRegistry(t *testing.T) {
	t.Parallel()
	needData(t)
	Register()
	fn, err := trainrt.Lookup("mnist-cnn")
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{dir: t.TempDir()}
	info := trainrt.ContextInfo{RunName: "single", Attempt: 1, WorldSize: 1, LocalWorldSize: 1, ScratchDir: t.TempDir(), Device: -1,
		Config: json.RawMessage(`{"epochs": 1, "batch_size": 32, "train_limit": 256, "test_limit": 64}`)}
	if err := fn(context.Background(), trainrt.NewContext(context.Background(), info, nil, rec, nil)); err != nil {
		t.Fatal(err)
	}
	if len(rec.ckpts) != 1 || rec.metrics[0]["epoch"] != 1 {
		t.Fatalf("reports %v, checkpoints %d; want one of each", rec.metrics, len(rec.ckpts))
	}
}

func TestBadConfigIsNonRetryable(t *testing.T) {
	t.Parallel()
	for _, c := range []string{`{"optimizer": "rmsprop"}`, `{"batch_size": -1}`, `{"lr_schedule": "linear"}`, `{"epochs": "five"}`,
		`{"data_dir": "/nonexistent"}`} {
		info := trainrt.ContextInfo{RunName: "bad", WorldSize: 1, ScratchDir: t.TempDir(), Config: json.RawMessage(c)}
		err := Func("mlp")(context.Background(), trainrt.NewContext(context.Background(), info, nil, nil, nil))
		if err == nil || !train.IsNonRetryable(err) {
			t.Errorf("config %s: err = %v, want a non-retryable error", c, err)
		}
	}
}

// mnist-resnet18 trains: the loss falls from one epoch to the next on a
// subset (the full run belongs on a GPU; see the package note).
func TestTrainsResNet18(t *testing.T) {
	t.Parallel()
	needData(t)
	if testing.Short() {
		t.Skip("ResNet-18 on the CPU takes ~20 s")
	}
	cfg := Config{Epochs: 2, BatchSize: 32, LR: 0.05, Seed: 1, TrainLimit: 1024, TestLimit: 128}
	rec, err := attempt(t, tcpGroup, "resnet18", 2, cfg, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range rec.metrics {
		t.Logf("%v", m)
	}
	if l0, l1 := rec.metrics[0]["train_loss"], rec.metrics[1]["train_loss"]; !(l1 < 0.9*l0) {
		t.Errorf("train loss %g → %g: want it to fall by at least 10%%", l0, l1)
	}
}
