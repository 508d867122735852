package gbdt

import (
	"context"
	"math"
	"math/rand/v2"
	"reflect"
	"sort"
	"testing"
)

// refCuts is the sketch's definition computed by sorting one column: the
// exact weighted quantiles j·W/maxBin (or every distinct value when there
// are at most maxBin), the closing bound above the maximum, and Min.
func refCuts(vals []float32, wq []uint64, maxBin int) (cuts []float32, mn float32) {
	type vw struct {
		v float32
		w uint64
	}
	var all []vw
	for i, v := range vals {
		if v != v {
			continue
		}
		if v == 0 {
			v = 0
		}
		w := uint64(1)
		if wq != nil {
			w = wq[i]
		}
		all = append(all, vw{v, w})
	}
	if len(all) == 0 {
		return nil, 0
	}
	sort.Slice(all, func(i, j int) bool { return all[i].v < all[j].v })
	var dv []float32
	var dw []uint64
	for _, e := range all {
		if n := len(dv); n > 0 && dv[n-1] == e.v {
			dw[n-1] += e.w
		} else {
			dv, dw = append(dv, e.v), append(dw, e.w)
		}
	}
	var total uint64
	for _, w := range dw {
		total += w
	}
	at := func(t uint64) float32 {
		var c uint64
		for i, w := range dw {
			if t < c+w {
				return dv[i]
			}
			c += w
		}
		return dv[len(dv)-1]
	}
	lo, hi := dv[0], dv[len(dv)-1]
	if len(dv) <= maxBin {
		cuts = append(cuts, dv[1:]...)
	} else {
		for j := 1; j < maxBin; j++ {
			v := at(mulDiv(uint64(j), total, uint64(maxBin)))
			if v > lo && (len(cuts) == 0 || v > cuts[len(cuts)-1]) {
				cuts = append(cuts, v)
			}
		}
	}
	cuts = append(cuts, hi+(float32(math.Abs(float64(hi)))+1e-5))
	return cuts, lo - (float32(math.Abs(float64(lo))) + 1e-5)
}

// TestSketchIsExactQuantiles checks the distributed sketch against refCuts
// on columns of many shapes (continuous, heavy-tailed, few distinct values,
// negative zero, constant, all missing, tiny ranges, huge magnitudes), with
// and without weights, for 1, 2 and 3 ranks with uneven shards.
func TestSketchIsExactQuantiles(t *testing.T) {
	const rows = 3000
	rng := rand.New(rand.NewPCG(4, 4))
	gens := []func(i int) float32{
		func(int) float32 { return float32(rng.NormFloat64()) },
		func(int) float32 { return float32(rng.ExpFloat64() * 1e4) },
		func(int) float32 { return float32(rng.IntN(7)) - 3 },
		func(int) float32 { return float32(rng.IntN(256)) },          // exactly max_bin distinct values
		func(int) float32 { return float32(rng.IntN(300)) },          // just over
		func(i int) float32 { return float32(math.Copysign(0, -1)) }, // -0 only
		func(int) float32 { return 42 },
		func(int) float32 { return float32(math.NaN()) },
		func(int) float32 { return 1 + float32(rng.IntN(1000))*1e-6 }, // a tiny range
		func(int) float32 { return float32(rng.NormFloat64() * 1e30) },
		func(i int) float32 { // half missing
			if i%2 == 0 {
				return float32(math.NaN())
			}
			return float32(rng.Float64())
		},
	}
	F := len(gens)
	d := &Dataset{X: make([]float32, rows*F), Rows: rows, Cols: F, Label: make([]float32, rows), Weight: make([]float32, rows)}
	for i := range rows {
		for f, g := range gens {
			d.X[i*F+f] = g(i)
		}
		d.Weight[i] = float32(rng.Float64() * 3)
	}
	for _, weighted := range []bool{false, true} {
		dd := *d
		if !weighted {
			dd.Weight = nil
		}
		var wq []uint64
		if weighted {
			mx := 0.0
			for _, w := range dd.Weight {
				mx = max(mx, float64(w))
			}
			_, e := math.Frexp(mx)
			s := math.Ldexp(1, 31-e)
			for _, w := range dd.Weight {
				wq = append(wq, max(1, uint64(math.RoundToEven(float64(w)*s))))
			}
		}
		for _, maxBin := range []int{256, 16} {
			want := &Cuts{Ptr: []uint32{0}, Min: make([]float32, F), Missing: make([]bool, F)}
			for f := range F {
				col := make([]float32, rows)
				for i := range rows {
					col[i] = dd.X[i*F+f]
					if col[i] != col[i] {
						want.Missing[f] = true
					}
				}
				mb := maxBin
				if want.Missing[f] && maxBin == 256 {
					mb = 255
				}
				c, mn := refCuts(col, wq, mb)
				want.Values = append(want.Values, c...)
				want.Min[f] = mn
				want.Ptr = append(want.Ptr, uint32(len(want.Values)))
			}
			for n := 1; n <= 3; n++ {
				comms := group(t, n)
				shards := shard(&dd, unevenSizes(rows, n)...)
				got := make([]*Cuts, n)
				if err := firstErr(each(n, func(r int) error {
					var err error
					got[r], err = sketch(context.Background(), comms[r], shards[r], maxBin)
					return err
				})); err != nil {
					t.Fatal(err)
				}
				for r := range n {
					if !reflect.DeepEqual(got[r], want) {
						for f := range F {
							g := got[r].Values[got[r].Ptr[f]:got[r].Ptr[f+1]]
							w := want.Values[want.Ptr[f]:want.Ptr[f+1]]
							if !reflect.DeepEqual(g, w) || got[r].Min[f] != want.Min[f] {
								t.Fatalf("weighted=%v max_bin=%d, %d ranks, rank %d, feature %d: cuts %v (min %v), want %v (min %v)",
									weighted, maxBin, n, r, f, g, got[r].Min[f], w, want.Min[f])
							}
						}
						t.Fatalf("weighted=%v max_bin=%d, %d ranks, rank %d: cuts differ: %+v", weighted, maxBin, n, r, got[r])
					}
				}
			}
			// Few distinct values get a bin each; constant and all-missing
			// columns one and none; 300 distinct values near max_bin (some
			// quantiles coincide).
			if maxBin == 256 {
				for f, nb := range map[int]int{2: 7, 3: 256, 5: 1, 6: 1, 7: 0} {
					if got := want.NumBins(f); got != nb {
						t.Errorf("feature %d: %d bins, want %d", f, got, nb)
					}
				}
				if nb := want.NumBins(4); nb < 230 || nb > 256 {
					t.Errorf("feature 4 (300 values): %d bins, want 230..256", nb)
				}
			}
		}
	}
}

// TestBinsAgreeWithSplitConditions: a value's bin is ≤ b exactly when the
// value is < the upper bound of bin b, which is what makes training on bins
// and predicting on raw values agree.
func TestBinsAgreeWithSplitConditions(t *testing.T) {
	d := synth(2000, 6, RegSquaredError, 0, 8)
	cuts, err := sketch(context.Background(), Local(), d, 32)
	if err != nil {
		t.Fatal(err)
	}
	for i := range d.Rows {
		for f := range d.Cols {
			x := d.X[i*d.Cols+f]
			if x != x {
				if cuts.Bin(f, x) != cuts.NumBins(f) {
					t.Fatalf("NaN is not the missing code")
				}
				continue
			}
			b := cuts.Bin(f, x)
			for s, u := range cuts.feature(f) {
				if (b <= s) != (x < u) {
					t.Fatalf("feature %d value %v: bin %d, bound %d = %v", f, x, b, s, u)
				}
			}
			if !(cuts.Min[f] < x) {
				t.Fatalf("feature %d value %v below Min %v", f, x, cuts.Min[f])
			}
		}
	}
}
