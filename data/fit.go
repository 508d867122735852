package data

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/data/format"
)

// Fit fits preprocessors (a chain, in order) on the dataset over all ranks
// and makes the shard's batches go through them. Each rank reads its fit
// share, every row in exactly one share, and the ranks combine what they
// found with one all-gather per pass: counts, sums and deviations (Chan's
// parallel variance), minima and maxima, category counts. Every rank then
// holds the same pipeline, the one a single process fits over the whole
// dataset: exactly for counts, minima, maxima and categories; means and
// deviations to float64 rounding. Steps that read a column an earlier step
// rewrites are fitted in a later pass, on the earlier steps' output (Ray's
// Chain). Fit is a collective call when the shard was opened with a Comm.
func (s *Shard) Fit(ctx context.Context, specs []api.PreprocessorSpec) (*Pipeline, error) {
	p, err := s.fit(ctx, specs)
	if err != nil {
		return nil, fmt.Errorf("fit preprocessors on dataset %s: %w", s.name, err)
	}
	if err := s.SetPipeline(p); err != nil {
		return nil, err
	}
	return p, nil
}

func (s *Shard) fit(ctx context.Context, specs []api.PreprocessorSpec) (*Pipeline, error) {
	if len(specs) > 0 && s.pixels > 0 {
		return nil, invalidf("preprocessors apply to tables (csv, parquet); images are normalised by image.mean and image.std")
	}
	var steps []Step
	for i, sp := range specs {
		sp = sp.WithDefaults()
		if err := sp.Validate(fmt.Sprintf("preprocessors[%d]", i)); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		steps = flatten(steps, sp)
	}
	for i, st := range steps {
		if st.Type == api.Concatenator && i != len(steps)-1 {
			return nil, invalidf("a concatenator must be the last preprocessor (it makes the feature matrix); it is step %d of %d", i+1, len(steps))
		}
	}
	p := newPipeline(s.columns(), s.own, nil)
	p.Steps = steps
	p.Features = nil
	cols := s.batchColumns()
	for lo := 0; lo < len(steps); {
		hi := stageEnd(steps, lo)
		if err := s.fitStage(ctx, p, cols, lo, hi); err != nil {
			return nil, err
		}
		lo = hi
	}
	tf, err := p.compile(cols, 0)
	if err != nil {
		return nil, err
	}
	p.Features = tf.featureNames()
	return p, nil
}

// flatten appends a spec's steps, chains unrolled.
func flatten(steps []Step, sp api.PreprocessorSpec) []Step {
	if sp.Type == api.Chain {
		for _, c := range sp.Steps {
			steps = flatten(steps, c)
		}
		return steps
	}
	st := Step{Type: sp.Type, Columns: slices.Clone(sp.Columns), Strategy: sp.Strategy, MaxCategories: sp.MaxCategories, Exclude: slices.Clone(sp.Exclude)}
	if sp.Type == api.SimpleImputer && sp.Strategy == "constant" {
		st.Fill = make([]any, len(sp.Columns))
		for i := range st.Fill {
			st.Fill[i] = sp.FillValue
		}
	}
	return append(steps, st)
}

// stageEnd returns the end of the pass that starts at step lo: steps that
// read no column an earlier step of the pass writes.
func stageEnd(steps []Step, lo int) int {
	written := map[string]bool{}
	for i := lo; i < len(steps); i++ {
		for _, c := range steps[i].Columns {
			if written[c] {
				return i
			}
		}
		for _, c := range steps[i].Columns {
			written[c] = true
		}
	}
	return len(steps)
}

// colStats is what a rank found in one column, to combine over ranks.
type colStats struct {
	N    int64   `json:"n"`
	Mean float64 `json:"mean,omitempty"`
	M2   float64 `json:"m2,omitempty"`
	Min  float64 `json:"min,omitempty"`
	Max  float64 `json:"max,omitempty"`
	// Counts of categories (categorical columns), or of values (numeric
	// most_frequent) as strconv formats them.
	Counts map[string]int64 `json:"counts,omitempty"`
	Many   bool             `json:"many,omitempty"`

	codes []int64           // counts by code of the shard's dictionary
	nums  map[float32]int64 // numeric most_frequent
	dict  *format.Dict      // the dictionary codes are in
	kind  wkind             // of the working column
}

// maxDistinct bounds the distinct values a most_frequent imputer counts in
// a numeric column.
const maxDistinct = 1 << 20

// add folds one batch's values of a numeric column in: Chan's combination
// of the batch's own mean and deviation with the running ones.
func (c *colStats) addNums(vals []float32, col string) error {
	var n int64
	var sum float64
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, v := range vals {
		if v != v {
			continue
		}
		f := float64(v)
		if math.IsInf(f, 0) {
			return invalidf("column %q holds an infinite value", col)
		}
		n++
		sum += f
		lo, hi = min(lo, f), max(hi, f)
	}
	if n == 0 {
		return nil
	}
	mean := sum / float64(n)
	var m2 float64
	for _, v := range vals {
		if v == v {
			d := float64(v) - mean
			m2 += d * d
		}
	}
	c.merge(colStats{N: n, Mean: mean, M2: m2, Min: lo, Max: hi})
	return nil
}

// merge combines o into c (Chan, Golub and LeVeque).
func (c *colStats) merge(o colStats) {
	if o.N == 0 {
		return
	}
	if c.N == 0 {
		c.N, c.Mean, c.M2, c.Min, c.Max = o.N, o.Mean, o.M2, o.Min, o.Max
		return
	}
	n := c.N + o.N
	d := o.Mean - c.Mean
	c.Mean += d * float64(o.N) / float64(n)
	c.M2 += o.M2 + d*d*float64(c.N)*float64(o.N)/float64(n)
	c.Min, c.Max = min(c.Min, o.Min), max(c.Max, o.Max)
	c.N = n
}

// fitStage fits steps [lo, hi) in one pass over the fit share.
func (s *Shard) fitStage(ctx context.Context, p *Pipeline, cols []format.ColumnInfo, lo, hi int) error {
	prefix, err := p.compileSteps(cols, 0, lo, false)
	if err != nil {
		return err
	}
	// Which working columns each step reads, and what it needs of them.
	type job struct {
		step  int
		ks    []int
		stats []colStats
	}
	var jobs []*job
	for i := lo; i < hi; i++ {
		st := p.Steps[i]
		var kinds []wkind
		switch st.Type {
		case api.StandardScaler, api.MinMaxScaler:
			kinds = []wkind{wNumeric}
		case api.SimpleImputer:
			kinds = []wkind{wNumeric, wCategorical}
		case api.OneHotEncoder, api.OrdinalEncoder:
			kinds = []wkind{wCategorical}
		case api.Concatenator:
			continue
		}
		ks, err := prefix.colsOf(st, kinds...)
		if err != nil {
			return fmt.Errorf("%w: preprocessor %d (%s): %w", ErrInvalid, i, st.Type, err)
		}
		if st.Type == api.SimpleImputer && st.Strategy == "constant" {
			for n, k := range ks {
				if prefix.cols[k].kind == wNumeric {
					if _, ok := toFloat(st.Fill[n]); !ok {
						return invalidf("preprocessor %d (simple_imputer): column %q is numeric, fill_value %v is not a number", i, st.Columns[n], st.Fill[n])
					}
				} else if _, ok := st.Fill[n].(string); !ok {
					p.Steps[i].Fill[n] = formatAny(st.Fill[n])
				}
			}
			continue
		}
		j := &job{step: i, ks: ks, stats: make([]colStats, len(ks))}
		for n, k := range ks {
			j.stats[n].kind = prefix.cols[k].kind
		}
		jobs = append(jobs, j)
	}
	if len(jobs) == 0 {
		return nil
	}
	from, to := s.fitShare()
	err = s.scan(ctx, from, to, nil, func(b *format.Batch) error {
		if err := prefix.run(b); err != nil {
			return err
		}
		for _, j := range jobs {
			st := p.Steps[j.step]
			for n, k := range j.ks {
				w := &prefix.cols[k]
				c := &j.stats[n]
				if w.kind == wNumeric {
					if st.Type == api.SimpleImputer && st.Strategy == "most_frequent" {
						if c.nums == nil {
							c.nums = map[float32]int64{}
						}
						for _, v := range w.buf[:b.N] {
							if v == v {
								c.nums[v]++
							}
						}
						if len(c.nums) > maxDistinct {
							return invalidf("preprocessor %d (simple_imputer most_frequent): column %q has more than %d distinct values", j.step, w.name, maxDistinct)
						}
						continue
					}
					if err := c.addNums(w.buf[:b.N], w.name); err != nil {
						return err
					}
					continue
				}
				// Categorical: count codes; a missing value counts as the
				// fill of an imputer before, if any.
				c.dict = w.dict
				for _, code := range w.codes[:b.N] {
					if code < 0 {
						if w.hasFill {
							if c.Counts == nil {
								c.Counts = map[string]int64{}
							}
							c.Counts[w.fill]++
						}
						continue
					}
					if int(code) >= len(c.codes) {
						c.codes = append(c.codes, make([]int64, int(code)+1-len(c.codes))...)
					}
					c.codes[code]++
				}
			}
		}
		return nil
	})
	// What this rank found, as strings for the gather.
	part := make([][]colStats, len(jobs))
	if err == nil {
		for x, j := range jobs {
			part[x] = j.stats
			for n := range j.stats {
				c := &j.stats[n]
				if c.codes != nil {
					if c.Counts == nil {
						c.Counts = map[string]int64{}
					}
					for code, cnt := range c.codes {
						if cnt > 0 {
							c.Counts[c.dict.String(int32(code))] += cnt
						}
					}
				}
				if c.nums != nil {
					c.Counts = map[string]int64{}
					for v, cnt := range c.nums {
						c.Counts[strconv.FormatFloat(float64(v), 'g', -1, 32)] += cnt
					}
				}
			}
		}
	}
	parts, err := gatherJSON(ctx, s.g, part, err)
	if err != nil {
		return err
	}
	for x, j := range jobs {
		st := &p.Steps[j.step]
		total := make([]colStats, len(j.ks))
		for _, rp := range parts {
			for n := range total {
				o := rp[x][n]
				total[n].merge(o)
				if o.Counts != nil {
					if total[n].Counts == nil {
						total[n].Counts = map[string]int64{}
					}
					for k, v := range o.Counts {
						total[n].Counts[k] += v
					}
				}
			}
		}
		if err := finish(st, j.step, total, j.stats); err != nil {
			return err
		}
	}
	return nil
}

// finish sets a step's fitted state from the combined statistics.
func finish(st *Step, i int, total, local []colStats) error {
	st.Count = make([]int64, len(total))
	for n, c := range total {
		col := st.Columns[n]
		st.Count[n] = c.N
		empty := func() error {
			return invalidf("preprocessor %d (%s): column %q has no values (all missing)", i, st.Type, col)
		}
		switch st.Type {
		case api.StandardScaler:
			if c.N == 0 {
				return empty()
			}
			st.Mean = append(st.Mean, c.Mean)
			st.Std = append(st.Std, math.Sqrt(c.M2/float64(c.N)))
		case api.MinMaxScaler:
			if c.N == 0 {
				return empty()
			}
			st.Min = append(st.Min, c.Min)
			st.Max = append(st.Max, c.Max)
		case api.SimpleImputer:
			switch {
			case st.Strategy == "mean":
				if local[n].kind != wNumeric {
					return invalidf("preprocessor %d (simple_imputer mean): column %q is categorical: use most_frequent or constant", i, col)
				}
				if c.N == 0 {
					return empty()
				}
				st.Fill = append(st.Fill, c.Mean)
			case st.Strategy == "most_frequent":
				best, ok := mostFrequent(c.Counts, local[n].kind == wNumeric)
				if !ok {
					return empty()
				}
				if local[n].kind == wNumeric {
					f, _ := strconv.ParseFloat(best, 32)
					st.Fill = append(st.Fill, f)
				} else {
					st.Fill = append(st.Fill, best)
				}
				st.Count[n] = sumCounts(c.Counts)
			}
		case api.OneHotEncoder, api.OrdinalEncoder:
			st.Categories = append(st.Categories, categories(c.Counts, st.MaxCategories))
			st.Count[n] = sumCounts(c.Counts)
		}
	}
	return nil
}

func sumCounts(m map[string]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

// mostFrequent returns the most frequent value, the smallest of ties
// (sklearn's rule): numerically for numbers.
func mostFrequent(counts map[string]int64, numeric bool) (string, bool) {
	less := func(a, b string) bool {
		if numeric {
			fa, _ := strconv.ParseFloat(a, 64)
			fb, _ := strconv.ParseFloat(b, 64)
			return fa < fb
		}
		return a < b
	}
	best, n := "", int64(-1)
	for v, c := range counts {
		if c > n || c == n && less(v, best) {
			best, n = v, c
		}
	}
	return best, n > 0
}

// categories are the sorted categories, or the max most frequent ones
// (ties: the smaller), sorted.
func categories(counts map[string]int64, maxCats int) []string {
	all := make([]string, 0, len(counts))
	for v := range counts {
		all = append(all, v)
	}
	if maxCats > 0 && len(all) > maxCats {
		sort.Slice(all, func(a, b int) bool {
			if counts[all[a]] != counts[all[b]] {
				return counts[all[a]] > counts[all[b]]
			}
			return all[a] < all[b]
		})
		all = all[:maxCats]
	}
	sort.Strings(all)
	return all
}

func formatAny(v any) string {
	if f, ok := toFloat(v); ok {
		return strconv.FormatFloat(f, 'g', -1, 64)
	}
	return fmt.Sprint(v)
}

// featureNames names the output columns.
func (tf *transform) featureNames() []string {
	var out []string
	for _, k := range tf.out {
		w := tf.cols[k]
		if w.kind == wOneHot {
			for _, c := range tf.p.stepOf(w.name).categoriesOf(w.name) {
				out = append(out, w.name+"="+c)
			}
			continue
		}
		out = append(out, w.name)
	}
	return out
}
