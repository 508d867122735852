package gbdt

import (
	"context"
	"encoding/json"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// trainForest trains a model on a generated table of rows × cols with
// missing values and a column of few distinct values.
func trainForest(t testing.TB, params map[string]any, rows, cols int, classes int) (*Model, []float32) {
	t.Helper()
	rng := rand.New(rand.NewPCG(7, uint64(rows)))
	d := &Dataset{Rows: rows, Cols: cols}
	for range rows {
		var s float64
		for f := range cols {
			v := float32(rng.NormFloat64())
			if f%3 == 1 {
				v = float32(rng.IntN(5))
			}
			s += float64(v) * float64(f%4-1)
			if rng.IntN(9) == 0 {
				v = float32(math.NaN())
			}
			d.X = append(d.X, v)
		}
		switch {
		case classes > 2:
			d.Label = append(d.Label, float32(min(classes-1, max(0, int(s/2)+classes/2))))
		case classes == 2:
			if s > 0 {
				d.Label = append(d.Label, 1)
			} else {
				d.Label = append(d.Label, 0)
			}
		default:
			d.Label = append(d.Label, float32(math.Abs(s)))
		}
	}
	raw, _ := json.Marshal(params)
	p, err := ParseParams(raw)
	if err != nil {
		t.Fatal(err)
	}
	m, _, err := Train(context.Background(), Local(), p, d)
	if err != nil {
		t.Fatal(err)
	}
	return m, d.X
}

// referenceMargins are the margins of the plain Go walk (predictGo).
func referenceMargins(m *Model, x []float32, rows int) []float32 {
	out := make([]float32, rows*m.NumGroups())
	for i := range out {
		out[i] = baseMargin(m.Objective, m.BaseScore)
	}
	predictGo(m.Trees, m.TreeInfo, x, rows, m.NumFeature, m.NumGroups(), out)
	return out
}

// chain is a tree of depth levels: node 2i splits feature 0 at i, 2i+1 is
// its left leaf, 2i+2 the next split.
func chain(depth int) *Tree {
	var left, right []int32
	var feat []uint32
	var cond []float32
	var dl []bool
	for i := range depth {
		left = append(left, int32(2*i+1), -1)
		right = append(right, int32(2*i+2), -1)
		feat = append(feat, 0, 0)
		cond = append(cond, float32(i), -float32(i))
		dl = append(dl, i%2 == 0, false)
	}
	left, right, feat, cond, dl = append(left, -1), append(right, -1), append(feat, 0), append(cond, 99), append(dl, false)
	n := len(left)
	return &Tree{Left: left, Right: right, Feature: feat, Cond: cond, DefaultLeft: dl, Parent: make([]int32, n),
		BaseWeight: make([]float32, n), LossChange: make([]float32, n), SumHess: make([]float32, n)}
}

// The forest's margins are the Go reference walk's, bit for bit: depthwise and deep lossguide trees, trees deeper
// than the lockstep walk takes, one and several output groups, missing
// values, infinities and values equal to split conditions, any row count
// (the 8-row groups and their remainder, blocks of rows).
func TestForestMatchesReference(t *testing.T) {
	for _, tt := range []struct {
		name    string
		params  map[string]any
		cols    int
		classes int
		depth   int // at least
	}{
		{"binary", map[string]any{"objective": "binary:logistic", "num_boost_round": 20, "max_depth": 6}, 12, 2, 6},
		{"multi", map[string]any{"objective": "multi:softprob", "num_class": 4, "num_boost_round": 8, "max_depth": 4}, 7, 4, 4},
		{"lossguide", map[string]any{"objective": "reg:squarederror", "num_boost_round": 6, "grow_policy": "lossguide",
			"max_depth": 0, "max_leaves": 200, "min_child_weight": 0, "eta": 0.5}, 5, 0, 12},
		{"poisson", map[string]any{"objective": "count:poisson", "num_boost_round": 5, "max_depth": 3, "base_score": 2.5}, 3, 0, 3},
		{"wide", map[string]any{"objective": "reg:squarederror", "num_boost_round": 4, "max_depth": 5}, 800, 0, 5},
		{"deep", map[string]any{"objective": "reg:squarederror", "num_boost_round": 3, "max_depth": 2}, 4, 0, lockstepDepth + 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m, x := trainForest(t, tt.params, 3000, tt.cols, tt.classes)
			if tt.name == "deep" {
				// A chain deeper than the lockstep walk between trained trees.
				m.Trees = append(m.Trees[:1], chain(lockstepDepth+2), m.Trees[1])
				m.TreeInfo = append(m.TreeInfo[:1], 0, 0)
				for i := 0; i < 3000; i += 2 {
					x[i*tt.cols] = float32(i%140) - 3.5
				}
			}
			f, err := NewForest(m)
			if err != nil {
				t.Fatal(err)
			}
			if d := int(maxOf(f.depth)); d < tt.depth {
				t.Errorf("deepest tree %d levels, want at least %d: the case does not test what it says", d, tt.depth)
			}
			// Rows that hit split conditions exactly, and infinities.
			rng := rand.New(rand.NewPCG(1, 2))
			for i := 0; i < 3000; i += 3 {
				tr := m.Trees[rng.IntN(len(m.Trees))]
				n := rng.IntN(len(tr.Left))
				if tr.Left[n] >= 0 {
					x[i*tt.cols+int(tr.Feature[n])] = tr.Cond[n]
				}
				if i%21 == 0 {
					x[i*tt.cols+rng.IntN(tt.cols)] = float32(math.Inf(1 - 2*rng.IntN(2)))
				}
			}
			for _, rows := range []int{0, 1, 7, 8, 9, 63, 64, 65, 3000} {
				xr := x[:rows*tt.cols]
				want := referenceMargins(m, xr, rows)
				got := make([]float32, len(want))
				f.Margins(xr, rows, got)
				pm, err := m.PredictMargin(xr, rows)
				if err != nil {
					t.Fatal(err)
				}
				for i := range want {
					w := math.Float32bits(want[i])
					if math.Float32bits(got[i]) != w || math.Float32bits(pm[i]) != w {
						t.Fatalf("%d rows: margin %d: forest %v, PredictMargin %v, Go reference %v", rows, i, got[i], pm[i], want[i])
					}
				}
			}
		})
	}
}

func maxOf(v []int32) int32 {
	m := int32(0)
	for _, x := range v {
		m = max(m, x)
	}
	return m
}

// A tree the walk could not follow safely (a child out of range, a cycle,
// a feature the model lacks, a group it lacks) is refused with an error
// that says what, not walked.
func TestForestRefusesBrokenTrees(t *testing.T) {
	leaf := func() *Tree { return chain(0) }
	split := func(l, r int32, feat uint32) *Tree {
		tr := chain(1)
		tr.Left[0], tr.Right[0], tr.Feature[0] = l, r, feat
		return tr
	}
	for _, tt := range []struct {
		name  string
		tree  *Tree
		group int
		says  string
	}{
		{"no nodes", &Tree{}, 0, "no nodes"},
		{"short arrays", &Tree{Left: []int32{1, -1, -1}, Right: []int32{2}}, 0, "different lengths"},
		{"child out of range", split(1, 7, 0), 0, "children 1 and 7"},
		{"negative right child", split(1, -3, 0), 0, "children 1 and -3"},
		{"cycle", split(0, 0, 0), 0, "cycle"},
		{"feature", split(1, 2, 5), 0, "feature 5, the model has 2"},
		{"group", leaf(), 3, "group 3, the model has 1"},
	} {
		m := &Model{Objective: RegSquaredError, NumFeature: 2, BaseScore: 0.5, Trees: []*Tree{tt.tree}, TreeInfo: []int{tt.group}}
		if _, err := NewForest(m); err == nil || !strings.Contains(err.Error(), tt.says) {
			t.Errorf("%s: NewForest: %v, want an error saying %q", tt.name, err, tt.says)
		}
		if _, err := m.PredictMargin([]float32{1, 2}, 1); err == nil || !strings.Contains(err.Error(), tt.says) {
			t.Errorf("%s: PredictMargin: %v, want an error saying %q", tt.name, err, tt.says)
		}
	}
}

// BenchmarkPredictMargin: margins of 100 depth-6 trees over 28 features
// (the shape of bench/predict -gbdt's binary table), 20,000 rows, through
// PredictMargin (a Forest laid out per call), a Forest laid out once, and
// the Go reference walk (rows/s of each).
func BenchmarkPredictMargin(b *testing.B) {
	m, x := trainForest(b, map[string]any{"objective": "binary:logistic", "num_boost_round": 100, "max_depth": 6}, 20000, 28, 2)
	out := make([]float32, 20000)
	rate := func(b *testing.B) { b.ReportMetric(float64(b.N)*20000/b.Elapsed().Seconds(), "rows/s") }
	b.Run("PredictMargin", func(b *testing.B) {
		for b.Loop() {
			if _, err := m.PredictMargin(x, 20000); err != nil {
				b.Fatal(err)
			}
		}
		rate(b)
	})
	b.Run("Forest", func(b *testing.B) {
		f, err := NewForest(m)
		if err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			f.Margins(x, 20000, out)
		}
		rate(b)
	})
	b.Run("Go", func(b *testing.B) {
		for b.Loop() {
			predictGo(m.Trees, m.TreeInfo, x, 20000, m.NumFeature, 1, out)
		}
		rate(b)
	})
}
