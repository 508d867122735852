package app

import (
	"fmt"
	"testing"
)

// TestShapeQueues: a worker polls its rank queue, then every shape it can
// hold, each taking at most as many ranks as fit in the worker at once.
func TestShapeQueues(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		slots, cpus, gpus int
		want              string
	}{
		{4, 2, 0, "[{q 4} {q@cpu1 2} {q@cpu2 1}]"},
		{4, 3, 0, "[{q 4} {q@cpu1 3} {q@cpu2 1}]"},
		{2, 8, 0, "[{q 2} {q@cpu1 2} {q@cpu2 2} {q@cpu4 2} {q@cpu8 1}]"},
		{2, 2, 2, "[{q 2} {q@gpu1 2} {q@gpu2 1} {q@cpu1 2} {q@cpu1-gpu1 2} {q@cpu1-gpu2 1} {q@cpu2 1} {q@cpu2-gpu1 1} {q@cpu2-gpu2 1}]"},
	} {
		if got := fmt.Sprint(shapeQueues("q", tt.slots, tt.cpus, tt.gpus)); got != tt.want {
			t.Errorf("%d slots, %d CPUs, %d GPUs: %s, want %s", tt.slots, tt.cpus, tt.gpus, got, tt.want)
		}
	}
}
