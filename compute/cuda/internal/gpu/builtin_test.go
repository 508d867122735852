package gpu_test

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"testing"

	"github.com/tempotrain/tempotrain/builtin"
	"github.com/tempotrain/tempotrain/compute"
	"github.com/tempotrain/tempotrain/compute/cuda/internal/emu"
	"github.com/tempotrain/tempotrain/compute/cuda/internal/gpu"
	"github.com/tempotrain/tempotrain/train"
	"github.com/tempotrain/tempotrain/train/trainrt"
)

type reports []train.Metrics

func (r *reports) Report(_ context.Context, m train.Metrics, _ *train.Checkpoint) error {
	*r = append(*r, m)
	return nil
}

// runBuiltin trains mnist-mlp with o for one small epoch as a single rank
// given device (-1: the CPU backend) and returns its report.
func runBuiltin(t *testing.T, o builtin.Options, device int) train.Metrics {
	t.Helper()
	cfg, _ := json.Marshal(map[string]any{"epochs": 1, "batch_size": 32, "train_limit": 128, "test_limit": 64, "seed": 3, "lr": 0.05})
	var rep reports
	tc := trainrt.NewContext(context.Background(), trainrt.ContextInfo{
		RunName: "gpu-hook", Attempt: 1, WorldSize: 1, LocalWorldSize: 1, Config: cfg, Device: device, ScratchDir: t.TempDir(),
	}, nil, &rep, nil)
	if err := builtin.FuncWith("mlp", o)(context.Background(), tc); err != nil {
		t.Fatalf("device %d: %v", device, err)
	}
	if len(rep) != 1 {
		t.Fatalf("device %d: %d reports", device, len(rep))
	}
	return rep[0]
}

// TestBuiltinTrainsOnTheGPUBackend runs a built-in training function
// through builtin.Options.GPUBackend on the kernel emulator: the option a
// cuda worker passes, end to end, against the CPU backend's result.
func TestBuiltinTrainsOnTheGPUBackend(t *testing.T) {
	if _, err := os.Stat("/usr/share/datasets/fashion-mnist"); err != nil {
		if os.Getenv("TEMPOTRAIN_REQUIRE_FASHION_MNIST") == "1" {
			t.Fatal("Fashion-MNIST not installed (Debian dataset-fashion-mnist), and TEMPOTRAIN_REQUIRE_FASHION_MNIST=1")
		}
		t.Skip("Fashion-MNIST not installed (Debian dataset-fashion-mnist)")
	}
	var opened, closed int
	o := builtin.Options{GPUBackend: func(device int) (compute.Backend, error) {
		d, err := emu.New()
		if err != nil {
			return nil, err
		}
		opened++
		return closer{gpu.New(d, gpu.Options{}), &closed}, nil
	}}
	onGPU := runBuiltin(t, o, 0)
	onCPU := runBuiltin(t, o, -1)
	if opened != 1 || closed != 1 {
		t.Errorf("GPU backend opened %d and closed %d times, want once each", opened, closed)
	}
	if d := math.Abs(onGPU["train_loss"] - onCPU["train_loss"]); d > 1e-3*math.Abs(onCPU["train_loss"]) {
		t.Errorf("train loss on the GPU backend %v, on the CPU %v", onGPU["train_loss"], onCPU["train_loss"])
	}
	if onGPU["test_accuracy"] != onCPU["test_accuracy"] {
		t.Errorf("test accuracy on the GPU backend %v, on the CPU %v", onGPU["test_accuracy"], onCPU["test_accuracy"])
	}
}

func TestBuiltinWithoutGPUBuildFailsClearly(t *testing.T) {
	cfg, _ := json.Marshal(map[string]any{"epochs": 1, "train_limit": 32, "test_limit": 32})
	tc := trainrt.NewContext(context.Background(), trainrt.ContextInfo{WorldSize: 1, Config: cfg, Device: 1}, nil, nil, nil)
	err := builtin.Func("mlp")(context.Background(), tc)
	if err == nil || !train.IsNonRetryable(err) {
		t.Fatalf("err %v, want a non-retryable error", err)
	}
	t.Log(err)
}

// closer counts Close calls of the backend it wraps.
type closer struct {
	*gpu.Backend
	n *int
}

func (c closer) Close() error {
	*c.n++
	return c.Backend.Close()
}
