package predict

import "testing"

// TestBatcherTarget: a batch waits for the requests lately in flight shared
// among the workers, and never for more than can still come: requests in a
// running batch cannot join another.
func TestBatcherTarget(t *testing.T) {
	for _, c := range []struct {
		peak, running, conc int64
		want                int64
	}{
		{1, 0, 2, 1},
		{64, 0, 2, 32},
		{64, 32, 2, 32},
		{16, 0, 2, 8},
		{3, 0, 2, 2},
		{3, 2, 2, 1}, // 2 in a running batch: the third must not wait for a second
		{3, 3, 2, 1},
		{5, 0, 1, 5},
		{7, 0, 4, 2},
	} {
		b := &Batcher{opts: BatcherOptions{Concurrency: int(c.conc)}, peakCur: c.peak}
		b.running.Store(c.running)
		if got := b.target(); got != c.want {
			t.Errorf("peak %d, %d running, %d workers: target %d, want %d", c.peak, c.running, c.conc, got, c.want)
		}
	}
}
