package main

import (
	"context"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/tempotrain/tempotrain/examples/internal/local"
	"github.com/tempotrain/tempotrain/train"
)

// TestExample runs the example as `go run ./examples/elastic` does from
// the repository root: the run shrinks from two ranks to one when a worker
// stops, counts no failure, grows back to two, and finishes.
func TestExample(t *testing.T) {
	res := local.Run(t, 3*time.Minute, func(ctx context.Context, out io.Writer) (*train.Result, error) {
		return run(ctx, out, "../data", 30, t.TempDir())
	})
	if res.Failures != 0 {
		t.Errorf("failures = %d, want 0: a stopping worker is a preemption, not a failure", res.Failures)
	}
	if !slices.Equal(res.WorldSizes, []int{2, 1, 2}) {
		t.Errorf("world sizes %v, want [2 1 2]", res.WorldSizes)
	}
	if res.Reports < 30 {
		t.Errorf("reports = %d, want at least 30 (one per epoch; a grown attempt may repeat none)", res.Reports)
	}
}
