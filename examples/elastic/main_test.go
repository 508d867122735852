package main

import (
	"bytes"
	"context"
	"slices"
	"testing"
	"time"
)

// TestExample runs the example as `go run ./examples/elastic` does from
// the repository root: the run shrinks from two ranks to one when a worker
// stops, counts no failure, grows back to two, and finishes.
func TestExample(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out bytes.Buffer
	res, err := run(ctx, &out, "../data", 30, t.TempDir())
	t.Log(out.String())
	if err != nil {
		t.Fatal(err)
	}
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
