package main

import (
	"context"
	"io"
	"math"
	"testing"
	"time"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/examples/internal/local"
)

// TestExample runs the example as `go run ./examples/schedule-promotion`
// does: the first run is promoted, the second warm-starts from it, ends
// with a lower loss (15 approached from 11.25 instead of from 0) and is
// promoted in its place.
func TestExample(t *testing.T) {
	p := local.Run(t, 2*time.Minute, func(ctx context.Context, out io.Writer) ([]api.Pointer, error) {
		return run(ctx, out, t.TempDir())
	})
	if len(p) != 2 || p[0].Run == p[1].Run {
		t.Fatalf("promoted after each run: %+v; want the first run, then the second", p)
	}
	// 0 -> 7.5 -> 11.25 (loss 3.75²); warm start: -> 13.125 -> 14.0625 (loss 0.9375²).
	for i, want := range []float64{3.75 * 3.75, 0.9375 * 0.9375} {
		if p[i].Score == nil || math.Abs(*p[i].Score-want) > 1e-4 {
			t.Errorf("promoted after run %d: %+v, want loss %v", i+1, p[i], want)
		}
	}
}
