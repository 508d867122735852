package dashboard

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/tempotrain/tempotrain/api"
)

func TestDownsampleKeepsExtremesAndEnds(t *testing.T) {
	t.Parallel()
	for _, n := range []int{0, 1, 2, 3, 10, 999, 1000, 1001, 100_000} {
		for _, maxPoints := range []int{0, 4, 5, 1000} {
			values := make([]float64, n)
			r := rand.New(rand.NewPCG(uint64(n), 1))
			for i := range values {
				values[i] = r.Float64()
			}
			if n > 10 {
				values[n/3] = 100 // a spike
				values[n/2] = -100
			}
			keep := downsample(values, maxPoints)
			if maxPoints == 0 || n <= maxPoints {
				if len(keep) != n {
					t.Fatalf("n %d, max %d: kept %d points, want all", n, maxPoints, len(keep))
				}
				continue
			}
			if len(keep) > maxPoints {
				t.Errorf("n %d, max %d: kept %d points", n, maxPoints, len(keep))
			}
			if keep[0] != 0 || keep[len(keep)-1] != n-1 {
				t.Errorf("n %d, max %d: the first and last kept are %d and %d", n, maxPoints, keep[0], keep[len(keep)-1])
			}
			if !slices.IsSorted(keep) || len(slices.Compact(slices.Clone(keep))) != len(keep) {
				t.Errorf("n %d, max %d: positions not strictly ascending", n, maxPoints)
			}
			if n > 10 && (!slices.Contains(keep, n/3) || !slices.Contains(keep, n/2)) {
				t.Errorf("n %d, max %d: a spike was dropped", n, maxPoints)
			}
		}
	}
}

func TestSeriesRangeAndRestarts(t *testing.T) {
	t.Parallel()
	c := newColumns()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	// Attempt 1 reports 0-2, attempt 2 fails before reporting, attempt 3
	// (elastic, 3 ranks) reports 3-5; valid_loss every other report.
	for i := range 6 {
		a := 1
		if i >= 3 {
			a = 3
		}
		m := api.Metrics{"train_loss": float64(10 - i)}
		if i%2 == 0 {
			m["valid_loss"] = float64(20 - i)
		}
		if i == 4 {
			m["train_loss"] = math.NaN()
		}
		c.add(api.ReportRecord{Index: i, Attempt: a, Time: t0, Metrics: m})
	}
	s := c.metrics["train_loss"].seriesOf("train_loss", 0, 1<<30, 0)
	if !slices.Equal(s.Index, []int{0, 1, 2, 3, 5}) || !slices.Equal(s.Value, []float64{10, 9, 8, 7, 5}) {
		t.Errorf("train_loss: %+v (NaN left out)", s)
	}
	s = c.metrics["valid_loss"].seriesOf("valid_loss", 1, 3, 0)
	if !slices.Equal(s.Index, []int{2}) || s.Points != 1 {
		t.Errorf("valid_loss of reports 1-3: %+v", s)
	}
	hist := []api.AttemptRecord{
		{Attempt: 1, WorldSize: 2, End: t0, Error: "rank 1: injected failure in epoch 3"},
		{Attempt: 2, End: t0, Error: "no workers"},
		{Attempt: 3, WorldSize: 3, End: t0, Grown: true},
		{Attempt: 4, WorldSize: 4},
	}
	got := restartsOf(hist, c.attempt)
	want := []Restart{
		{Attempt: 2, Index: 3, Kind: "failure", Reason: "rank 1: injected failure in epoch 3"},
		{Attempt: 3, Index: 3, Kind: "failure", Reason: "no workers"},
		{Attempt: 4, Index: 6, Kind: "grown", Reason: "more workers came back: the run grew at a checkpoint"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("restarts\n got %+v\nwant %+v", got, want)
	}
	ws := worldSizes(hist, c.attempt)
	if !slices.Equal(ws.Index, []int{0, 3, 6}) || !slices.Equal(ws.Value, []float64{2, 3, 4}) {
		t.Errorf("world sizes %+v", ws)
	}
}

// BenchmarkMetricsView100kReports is the metrics route's work for a run
// of 100,000 reports of 4 metrics, decoded already: the curves cut to
// DefaultMaxPoints points each.
func BenchmarkMetricsView100kReports(b *testing.B) {
	c := newColumns()
	for i := range 100_000 {
		c.add(api.ReportRecord{Index: i, Attempt: 1 + i/50_000, Metrics: api.Metrics{
			"train_loss": 1 / float64(i+1), "valid_loss": 2 / float64(i+1), "accuracy": float64(i) / 1e5, "samples_per_s": 1000}})
	}
	b.ResetTimer()
	for b.Loop() {
		for name, col := range c.metrics {
			if s := col.seriesOf(name, 0, 1<<30, DefaultMaxPoints); len(s.Index) > DefaultMaxPoints {
				b.Fatal(len(s.Index))
			}
		}
	}
}
