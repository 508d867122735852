package predict

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/tempotrain/tempotrain/gbdt"
)

// trainForest trains a gbdt model on a generated table of rows × cols with
// missing values.
func trainForest(t testing.TB, params map[string]any, rows, cols int, classes int) (*gbdt.Model, []float32) {
	t.Helper()
	rng := rand.New(rand.NewPCG(7, uint64(rows)))
	d := &gbdt.Dataset{Rows: rows, Cols: cols}
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
			d.Label = append(d.Label, b2f(s > 0))
		default:
			d.Label = append(d.Label, float32(math.Abs(s)))
		}
	}
	raw, _ := json.Marshal(params)
	p, err := gbdt.ParseParams(raw)
	if err != nil {
		t.Fatal(err)
	}
	m, _, err := gbdt.Train(context.Background(), gbdt.Local(), p, d)
	if err != nil {
		t.Fatal(err)
	}
	return m, d.X
}

func b2f(b bool) float32 {
	if b {
		return 1
	}
	return 0
}

// The forest's margins are gbdt's PredictMargin's, bit for bit: depthwise
// and deep lossguide trees, one and several output groups, missing values,
// infinities and values equal to split conditions, any row count (the
// 8-row groups and their remainder, blocks of rows).
func TestForestMatchesPredictMargin(t *testing.T) {
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
	} {
		t.Run(tt.name, func(t *testing.T) {
			m, x := trainForest(t, tt.params, 3000, tt.cols, tt.classes)
			f, err := newForest(m)
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
				want, err := m.PredictMargin(x[:rows*tt.cols], rows)
				if err != nil {
					t.Fatal(err)
				}
				got := make([]float32, len(want))
				f.margins(x[:rows*tt.cols], rows, got)
				for i := range want {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						t.Fatalf("%d rows: margin %d = %v, PredictMargin %v", rows, i, got[i], want[i])
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

// A model whose trees are deeper than the forest lays out predicts through
// gbdt's PredictMargin, with the same answers.
func TestForestTooDeepFallsBack(t *testing.T) {
	// A chain: node 2i splits at depth i, 2i+1 is its left leaf, 2i+2 the
	// next split.
	const depth = maxForestDepth + 2
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
	tr := &gbdt.Tree{Left: left, Right: right, Feature: feat, Cond: cond, DefaultLeft: dl, Parent: make([]int32, n),
		BaseWeight: make([]float32, n), LossChange: make([]float32, n), SumHess: make([]float32, n)}
	m := &gbdt.Model{Objective: "reg:squarederror", NumFeature: 1, BaseScore: 0.5, Trees: []*gbdt.Tree{tr}, TreeInfo: []int{0}}
	buf, err := m.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	p, err := LoadXGBoost(bytes.NewReader(buf))
	if err != nil {
		t.Fatal(err)
	}
	if p.(*gbdtPredictor).forest != nil {
		t.Fatalf("a tree of %d levels got a forest", depth)
	}
	x := []float32{-1, 0.5, 3.5, 30, 65.5, float32(math.NaN())}
	out, err := p.Predict(context.Background(), Batch{Inputs: []Tensor{{Name: "features", Datatype: FP32, Shape: []int{len(x), 1}, FP32: x}}})
	if err != nil {
		t.Fatal(err)
	}
	want, _ := m.PredictMargin(x, len(x))
	for i := range x {
		if out[0].FP32[i] != want[i] {
			t.Errorf("x = %v: %v, PredictMargin %v", x[i], out[0].FP32[i], want[i])
		}
	}
}

// BenchmarkForest: margins of 100 depth-6 trees over 28 features (the
// shape of bench/predict -gbdt's binary table), per row.
func BenchmarkForest(b *testing.B) {
	m, x := trainForest(b, map[string]any{"objective": "binary:logistic", "num_boost_round": 100, "max_depth": 6}, 20000, 28, 2)
	f, err := newForest(m)
	if err != nil {
		b.Fatal(err)
	}
	out := make([]float32, 20000)
	b.Run("forest", func(b *testing.B) {
		for range b.N {
			f.margins(x, 20000, out)
		}
		b.ReportMetric(float64(b.N)*20000/b.Elapsed().Seconds(), "rows/s")
	})
	b.Run("gbdt", func(b *testing.B) {
		for range b.N {
			if _, err := m.PredictMargin(x, 20000); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)*20000/b.Elapsed().Seconds(), "rows/s")
	})
}
