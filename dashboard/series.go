package dashboard

import (
	"math"
	"sort"

	"github.com/tempotrain/tempotrain/api"
)

// columns holds a run's reports by metric: what the charts need, in less
// memory than the records (a run of 100,000 reports is kept per run the
// dashboard shows, and extended with the reports that came since).
type columns struct {
	// attempt[i] is the attempt of report i.
	attempt []int32
	metrics map[string]*column
}

// column is one metric's reports: value[k] was reported by report
// index[k], index ascending.
type column struct {
	index []int
	value []float64
}

func newColumns() *columns { return &columns{metrics: map[string]*column{}} }

// add appends report r, which must be report len(c.attempt).
func (c *columns) add(r api.ReportRecord) {
	c.attempt = append(c.attempt, int32(r.Attempt))
	for k, v := range r.Metrics {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			continue // JSON has no NaN: a gap in the curve
		}
		col := c.metrics[k]
		if col == nil {
			col = &column{}
			c.metrics[k] = col
		}
		col.index = append(col.index, r.Index)
		col.value = append(col.value, v)
	}
}

// Series is one metric's curve: Value[k] was reported by report Index[k].
type Series struct {
	Name  string    `json:"name"`
	Index []int     `json:"index"`
	Value []float64 `json:"value"`
	// Points is how many reports have the metric in the range asked;
	// more than len(Index) when the series was downsampled.
	Points int `json:"points"`
}

// Restart marks where an attempt after the first started: before report
// Index (the attempt's first report; the number of reports when it has
// none yet), and why its predecessor ended.
type Restart struct {
	Attempt int    `json:"attempt"`
	Index   int    `json:"index"`
	Reason  string `json:"reason"`
	// Kind is failure, preempted, grown (an elastic run restarting with
	// more ranks) or resumed (a later Fit of the same run).
	Kind string `json:"kind"`
}

// seriesOf is a metric's curve between reports from and to (inclusive),
// at most maxPoints points (0: all of them).
func (col *column) seriesOf(name string, from, to, maxPoints int) Series {
	lo := sort.SearchInts(col.index, from)
	hi := sort.SearchInts(col.index, to+1)
	s := Series{Name: name, Points: hi - lo}
	keep := downsample(col.value[lo:hi], maxPoints)
	s.Index, s.Value = make([]int, len(keep)), make([]float64, len(keep))
	for k, p := range keep {
		s.Index[k], s.Value[k] = col.index[lo+p], col.value[lo+p]
	}
	return s
}

// downsample picks at most maxPoints positions of values to draw, in
// order: every position when there are few enough (or maxPoints is 0),
// else the first and the last, and the lowest and the highest of each of
// (maxPoints-2)/2 runs of equal length between them, so that every spike
// stays in the curve. The points kept are reports as they are: nothing
// is averaged.
func downsample(values []float64, maxPoints int) []int {
	n := len(values)
	if maxPoints <= 0 || n <= maxPoints {
		out := make([]int, n)
		for i := range out {
			out[i] = i
		}
		return out
	}
	buckets := max((maxPoints-2)/2, 1)
	out := make([]int, 0, 2*buckets+2)
	out = append(out, 0)
	inner := n - 2
	for b := range buckets {
		lo := 1 + b*inner/buckets
		hi := 1 + (b+1)*inner/buckets
		if lo >= hi {
			continue
		}
		mn, mx := lo, lo
		for i := lo + 1; i < hi; i++ {
			if values[i] < values[mn] {
				mn = i
			}
			if values[i] > values[mx] {
				mx = i
			}
		}
		if mn > mx {
			mn, mx = mx, mn
		}
		out = append(out, mn)
		if mx != mn {
			out = append(out, mx)
		}
	}
	return append(out, n-1)
}

// restartsOf marks the restarts of a run whose attempts are history and
// whose reports' attempts are attempt.
func restartsOf(history []api.AttemptRecord, attempt []int32) []Restart {
	var out []Restart
	for i, h := range history {
		if i == 0 || h.Attempt <= 1 {
			continue
		}
		prev := history[i-1]
		r := Restart{Attempt: h.Attempt, Index: firstReportOf(attempt, h.Attempt)}
		switch {
		case prev.Grown:
			r.Kind, r.Reason = "grown", "more workers came back: the run grew at a checkpoint"
		case prev.Preempted:
			r.Kind, r.Reason = "preempted", "a worker was stopping: the ranks checkpointed and the group restarted"
		case prev.Error != "":
			r.Kind, r.Reason = "failure", prev.Error
		default: // it ended well: a later Fit resumed the run
			r.Kind, r.Reason = "resumed", "a later Fit of the run resumed it"
		}
		out = append(out, r)
	}
	return out
}

// firstReportOf is the index of the first report of attempt a or later;
// the number of reports when there is none.
func firstReportOf(attempt []int32, a int) int {
	return sort.Search(len(attempt), func(i int) bool { return int(attempt[i]) >= a })
}

// worldSizes is the world size over the reports: at each attempt's first
// report, the ranks it trained with (attempts whose group never formed
// are left out).
func worldSizes(history []api.AttemptRecord, attempt []int32) Series {
	s := Series{Name: "world_size"}
	for _, h := range history {
		if h.WorldSize == 0 {
			continue
		}
		i := firstReportOf(attempt, h.Attempt)
		if n := len(s.Index); n > 0 && s.Index[n-1] == i {
			s.Value[n-1] = float64(h.WorldSize) // an attempt without reports
			continue
		}
		s.Index = append(s.Index, i)
		s.Value = append(s.Value, float64(h.WorldSize))
	}
	s.Points = len(s.Index)
	return s
}
