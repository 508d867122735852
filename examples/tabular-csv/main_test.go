package main

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/tempotrain/tempotrain/examples/internal/local"
	"github.com/tempotrain/tempotrain/train"
)

// TestExample runs the example as `go run ./examples/tabular-csv` does
// from the repository root: fit.json is a valid Fit input, the run
// learns the table, and the best checkpoint is kept.
func TestExample(t *testing.T) {
	in, err := input("../data", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := in.WithDefaults().Validate(); err != nil {
		t.Fatalf("fit.json: %v", err)
	}
	res := local.Run(t, 3*time.Minute, func(ctx context.Context, out io.Writer) (*train.Result, error) {
		return run(ctx, out, "../data", t.TempDir())
	})
	if res.Reports != 8 {
		t.Errorf("reports = %d, want 8 (one per epoch)", res.Reports)
	}
	if acc := res.Metrics["valid_accuracy"]; acc < 0.8 {
		t.Errorf("valid_accuracy = %v, want at least 0.8 (the table has a clear signal)", acc)
	}
	if len(res.BestCheckpoints) == 0 || len(res.BestCheckpoints) > 2 {
		t.Errorf("%d best checkpoints, want 1 or 2 (num_to_keep 2)", len(res.BestCheckpoints))
	}
}
