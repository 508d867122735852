package gbdt

import (
	"bytes"
	"context"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
)

// withGo runs f with the Go references instead of kern.c.
func withGo(f func()) { withValue(&useC, false, f) }

// someRows picks about 2/3 of the rows 0..n-1, ascending.
func someRows(rng *rand.Rand, n int) []uint32 {
	var rows []uint32
	for i := range n {
		if rng.IntN(3) > 0 {
			rows = append(rows, uint32(i))
		}
	}
	return rows
}

// withValue runs f with *p set to v, then restores it.
func withValue[T any](p *T, v T, f func()) {
	defer func(old T) { *p = old }(*p)
	*p = v
	f()
}

// TestKernelsMatchGoReference compares every C loop with its Go reference,
// bit for bit: binning (uint8 and uint16 codes), histograms (row-wise and
// column-wise), partitions, split finding and prediction.
func TestKernelsMatchGoReference(t *testing.T) {
	for _, maxBin := range []int{256, 1000} { // 1000: uint16 codes
		d := synth(3000, 9, RegSquaredError, 0, 21)
		cuts, err := sketch(context.Background(), Local(), d, maxBin)
		if err != nil {
			t.Fatal(err)
		}
		mc := newBinMatrix(cuts, d.X, d.Rows, d.Cols)
		var mg *binMatrix
		withGo(func() { mg = newBinMatrix(cuts, d.X, d.Rows, d.Cols) })
		if (mc.u8 != nil) != (maxBin <= 256) {
			t.Fatalf("max_bin %d: uint8 codes %v", maxBin, mc.u8 != nil)
		}
		if !reflect.DeepEqual(mc, mg) {
			t.Fatalf("max_bin %d: C and Go bin codes differ", maxBin)
		}
		rng := rand.New(rand.NewPCG(1, 2))
		rows := someRows(rng, d.Rows)
		gh := make([]float64, 2*d.Rows)
		for i := range gh {
			gh[i] = float64(rng.IntN(1 << 40))
			if i%2 == 0 {
				gh[i] -= 1 << 39
			}
		}
		want := make([]float64, 2*mc.slots())
		var wg, wh float64
		withGo(func() { wg, wh = mc.hist(rows, gh, want) })
		got := make([]float64, len(want))
		gg, gh2 := mc.hist(rows, gh, got)
		if !reflect.DeepEqual(got, want) || gg != wg || gh2 != wh {
			t.Fatalf("max_bin %d: C histogram differs from Go's", maxBin)
		}
		for f := range d.Cols {
			for _, s := range []int{-1, 0, cuts.NumBins(f) / 2} {
				for _, dl := range []bool{false, true} {
					a, b := append([]uint32(nil), rows...), append([]uint32(nil), rows...)
					tmp := make([]uint32, len(rows))
					na := mc.partition(a, f, s, dl, tmp)
					var nb int
					withGo(func() { nb = mc.partition(b, f, s, dl, tmp) })
					if na != nb || !reflect.DeepEqual(a, b) {
						t.Fatalf("partition on feature %d at %d (default left %v): C %d left, Go %d", f, s, dl, na, nb)
					}
				}
			}
		}
		// Split finding on a real histogram.
		p := DefaultParams()
		for _, variant := range []func(*Params){
			func(*Params) {},
			func(p *Params) { p.Alpha, p.Lambda = 0.7, 0 },
			func(p *Params) { p.MaxDeltaStep, p.MinChildWeight = 0.3, 5 },
		} {
			variant(&p)
			gr := &grower{p: &p, cuts: cuts, m: mc, sg: math.Ldexp(1, -10), sh: math.Ldexp(1, -12)}
			gr.feats = sampleFeatures(&p, d.Cols, 0, 0, 0, 1)
			n := &gnode{hist: want, g: 0, h: 0}
			for _, r := range rows {
				n.g += gh[2*r]
				n.h += gh[2*r+1]
			}
			var sg split
			withGo(func() { sg = gr.bestLocal(n) })
			sc := gr.bestLocal(n)
			if sc != sg || !sc.ok {
				t.Fatalf("best split: C %+v, Go %+v", sc, sg)
			}
		}
	}
	// Quantisation, ties included (x.5 rounds to even).
	g := []float64{0.5, 1.5, -2.5, 3.25, 1e-3, -7.75}
	h := []float64{2.5, 0.5, 1, 4.5, 0, 9.5}
	qc, qg := make([]float64, 2*len(g)), make([]float64, 2*len(g))
	quantise(g, h, len(g), 1, 0, 1, 1, qc)
	withGo(func() { quantise(g, h, len(g), 1, 0, 1, 1, qg) })
	if want := []float64{0, 2, 2, 0, -2, 1, 3, 4, 0, 0, -8, 10}; !reflect.DeepEqual(qc, want) || !reflect.DeepEqual(qg, want) {
		t.Fatalf("quantise: C %v, Go %v, want %v", qc, qg, want)
	}
	// Prediction.
	d := synth(2000, 8, MultiSoftprob, 3, 5)
	p := mustParams(t, `{"objective":"multi:softprob","num_class":3,"num_boost_round":6}`)
	m, _, err := Train(context.Background(), Local(), p, d)
	if err != nil {
		t.Fatal(err)
	}
	pc, _ := m.PredictMargin(d.X, d.Rows)
	var pg []float32
	withGo(func() { pg, _ = m.PredictMargin(d.X, d.Rows) })
	if !reflect.DeepEqual(pc, pg) {
		t.Fatal("C and Go predictions differ")
	}
}

// TestTrainingWithGoReferencesIsIdentical trains the same model with the C
// loops and with the Go references: the files must be byte-identical.
func TestTrainingWithGoReferencesIsIdentical(t *testing.T) {
	for _, js := range []string{
		`{"objective":"binary:logistic","num_boost_round":4,"max_depth":5,"subsample":0.8,"seed":3}`,
		`{"objective":"multi:softmax","num_class":3,"num_boost_round":3,"grow_policy":"lossguide","max_leaves":10,"alpha":0.3,"max_delta_step":0.5}`,
	} {
		p := mustParams(t, js)
		d := synth(1500, 10, p.Objective, p.NumClass, 6)
		save := func() []byte {
			m, _, err := Train(context.Background(), Local(), p, d)
			if err != nil {
				t.Fatal(err)
			}
			var b bytes.Buffer
			if err := m.SaveJSON(&b); err != nil {
				t.Fatal(err)
			}
			return b.Bytes()
		}
		c := save()
		var g []byte
		withGo(func() { g = save() })
		if !bytes.Equal(c, g) {
			t.Fatalf("%s: C and Go models differ:\n%s", p.Objective, firstDiff(c, g))
		}
	}
}

// withUnpacked runs f with quantised training off (the fine double
// histograms only).
func withUnpacked(f func()) { withValue(&packedHist, false, f) }

// TestPackedHistogramMatchesDouble builds the packed histogram (C and its
// Go reference) of integer pairs and the double histogram of the same
// pairs: every slot and the totals must be equal, for uint8 and uint16
// codes, with every feature's most frequent code skipped (skipShare 0) and
// with the default share.
func TestPackedHistogramMatchesDouble(t *testing.T) {
	defer func(v float64) { skipShare = v }(skipShare)
	for _, c := range []struct {
		maxBin int
		share  float64
	}{{256, 0}, {1000, 0}, {256, skipShare}, {1000, skipShare}} {
		maxBin := c.maxBin
		skipShare = c.share
		d := synth(3000, 9, RegSquaredError, 0, 31)
		cuts, err := sketch(context.Background(), Local(), d, maxBin)
		if err != nil {
			t.Fatal(err)
		}
		m := newBinMatrix(cuts, d.X, d.Rows, d.Cols)
		rng := rand.New(rand.NewPCG(3, 4))
		rows := someRows(rng, d.Rows)
		gh := make([]float64, 2*d.Rows)
		ghp := make([]int64, d.Rows)
		for i := range ghp {
			// The extremes a row may take with 3000 rows (packedScales).
			g := int64(rng.IntN(1<<19)) - 1<<18
			h := int64(rng.IntN(1 << 20))
			gh[2*i], gh[2*i+1] = float64(g), float64(h)
			ghp[i] = g<<32 + h
		}
		want := make([]float64, 2*m.slots())
		wg, wh := m.hist(rows, gh, want)
		acc := make([]int64, m.slots())
		for _, c := range []bool{true, false} {
			got := make([]float64, len(want))
			var tot int64
			if c {
				tot = m.histPacked(rows, ghp, acc, got)
			} else {
				withGo(func() { tot = m.histPacked(rows, ghp, acc, got) })
			}
			g, h := unpack(tot)
			if !reflect.DeepEqual(got, want) || g != wg || h != wh {
				for s := range want {
					if got[s] != want[s] {
						t.Fatalf("max_bin %d, C %v: slot %d (g/h %d) is %v, double histogram %v", maxBin, c, s/2, s%2, got[s], want[s])
					}
				}
				t.Fatalf("max_bin %d, C %v: totals %v, %v, want %v, %v", maxBin, c, g, h, wg, wh)
			}
		}
		// The renewal's sums, C and Go.
		a, b := rowSums(gh, rows)
		var ga, gb float64
		withGo(func() { ga, gb = rowSums(gh, rows) })
		if a != ga || b != gb || a == 0 || b == 0 {
			t.Fatalf("rowSums: C %v, %v; Go %v, %v", a, b, ga, gb)
		}
	}
}

// TestKernelsMatchGoReferenceSkipping is TestKernelsMatchGoReference with
// every feature's most frequent code skipped by the histograms.
func TestKernelsMatchGoReferenceSkipping(t *testing.T) {
	withValue(&skipShare, 0, func() { TestKernelsMatchGoReference(t) })
}

// TestQuantisedHistogramWithinBound compares the packed histogram of real
// gradients, scaled back, with the float64 histogram of the unrounded
// values: each slot may differ by at most half a quantum per row in it.
func TestQuantisedHistogramWithinBound(t *testing.T) {
	d := synth(5000, 6, BinaryLogistic, 0, 32)
	cuts, err := sketch(context.Background(), Local(), d, 64)
	if err != nil {
		t.Fatal(err)
	}
	m := newBinMatrix(cuts, d.X, d.Rows, d.Cols)
	rng := rand.New(rand.NewPCG(5, 6))
	g, h := make([]float64, d.Rows), make([]float64, d.Rows)
	var maxG, maxH float64
	for i := range g {
		p := rng.Float64()
		g[i], h[i] = p-float64(d.Label[i]), math.Max(p*(1-p), 1e-16)
		maxG, maxH = max(maxG, math.Abs(g[i])), max(maxH, h[i])
	}
	sg, sh := packedScales(maxG, maxH, d.Rows)
	ghp := make([]int64, d.Rows)
	quantisePacked(g, h, d.Rows, 1, 0, sg, sh, ghp)
	rows := make([]uint32, d.Rows)
	for i := range rows {
		rows[i] = uint32(i)
	}
	got := make([]float64, 2*m.slots())
	m.histPacked(rows, ghp, make([]int64, m.slots()), got)
	exact := make([]float64, 2*m.slots())
	count := make([]int, m.slots())
	for i := range d.Rows {
		for f := range d.Cols {
			s := int(m.off[f]) + m.code(i, f)
			exact[2*s] += g[i]
			exact[2*s+1] += h[i]
			count[s]++
		}
	}
	// The scales leave 30 - log2(5000) ≈ 17 bits to a gradient (one more
	// to a hessian): a quantum is at most 2^-16 of the largest value.
	if 1/sg > maxG/(1<<16) || 1/sh > maxH/(1<<17) {
		t.Fatalf("quanta 1/sg %g (max |g| %g), 1/sh %g (max h %g): coarser than 2^-16, 2^-17 of the largest", 1/sg, maxG, 1/sh, maxH)
	}
	for s, n := range count {
		for j, scale := range []float64{sg, sh} {
			diff := math.Abs(got[2*s+j]/scale - exact[2*s+j])
			bound := float64(n)*0.5/scale + 1e-9
			if diff > bound {
				t.Fatalf("slot %d (%d rows), %s: quantised %v, exact %v: off by %g > %g", s, n, []string{"g", "h"}[j], got[2*s+j]/scale, exact[2*s+j], diff, bound)
			}
		}
	}
}

// TestPackedScalesDoNotOverflow puts every row at the largest magnitude on
// the largest table quantised training takes: the sums must still fit the
// packed halves (|Σg| < 2^31, Σh < 2^32).
func TestPackedScalesDoNotOverflow(t *testing.T) {
	for _, n := range []int{1, 3, 1000, 999_999, maxPackedRows} {
		for _, m := range []float64{1e-30, 0.25, 1, 3.7, 1e20} {
			sg, sh := packedScales(m, m, n)
			qg := math.RoundToEven(m * sg)
			qh := math.RoundToEven(m * sh)
			if sum := float64(n) * qg; sum >= 1<<31 || sum < 1<<29 {
				t.Fatalf("n %d, max %g: |Σg| = %g, want in [2^29, 2^31)", n, m, sum)
			}
			if sum := float64(n) * qh; sum >= 1<<32 || sum < 1<<30 {
				t.Fatalf("n %d, max %g: Σh = %g, want in [2^30, 2^32)", n, m, sum)
			}
		}
	}
}

// TestQuantisedTrainingMatchesUnquantised trains the same table with and
// without quantised histograms: the test AUCs must agree within 0.002,
// and quantised training must still give the same model on 1 and 3 ranks
// (TestWorldSizesGiveIdenticalModels covers the objectives).
func TestQuantisedTrainingMatchesUnquantised(t *testing.T) {
	d := synth(20_000, 12, BinaryLogistic, 0, 33)
	test := synth(10_000, 12, BinaryLogistic, 0, 34)
	p := mustParams(t, `{"objective":"binary:logistic","num_boost_round":30,"max_depth":6}`)
	auc := func(models [][]byte) float64 {
		m, err := LoadJSON(bytes.NewReader(models[0]))
		if err != nil {
			t.Fatal(err)
		}
		pred, err := m.Predict(test.X, test.Rows)
		if err != nil {
			t.Fatal(err)
		}
		v, err := exactAUC(context.Background(), Local(), &p, test, pred, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	quant, _ := trainRanks(t, p, d, []int{d.Rows}, nil)
	sizes := unevenSizes(d.Rows, 3)
	quant3, _ := trainRanks(t, p, d, sizes, nil)
	if !bytes.Equal(quant[0], quant3[0]) {
		t.Fatalf("quantised: 3 ranks' model differs from 1 rank's:\n%s", firstDiff(quant[0], quant3[0]))
	}
	var fine [][]byte
	withUnpacked(func() { fine, _ = trainRanks(t, p, d, []int{d.Rows}, nil) })
	if bytes.Equal(quant[0], fine[0]) {
		t.Fatal("quantised and unquantised training gave the same model bytes: the packed path did not run")
	}
	a, b := auc(quant), auc(fine)
	if math.Abs(a-b) > 0.002 || a < 0.8 {
		t.Fatalf("test AUC quantised %.5f, unquantised %.5f: want within 0.002 (and ≥ 0.8)", a, b)
	}
	t.Logf("test AUC quantised %.5f, unquantised %.5f", a, b)
}

// TestWorldSizesGiveIdenticalModelsUnquantised is the determinism test on
// the fine histograms (tables above maxPackedRows rows take them).
func TestWorldSizesGiveIdenticalModelsUnquantised(t *testing.T) {
	withUnpacked(func() { TestWorldSizesGiveIdenticalModels(t) })
}

// TestAUCMatchesSortedReferenceGo is TestAUCMatchesSortedReference on the
// Go references of the C loops (the unweighted list is gb_auc_local's).
func TestAUCMatchesSortedReferenceGo(t *testing.T) {
	withGo(func() { TestAUCMatchesSortedReference(t) })
}

// TestAUCLocalListCMatchesGo compares gb_auc_local's lists with the Go
// loop's for every class of a multi-class table and for binary labels,
// with ties: probabilities (0 and 1 included: the 32-bit sort) and values
// of both signs (the 64-bit one).
func TestAUCLocalListCMatchesGo(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, c := range []struct {
		k    int
		prob bool
	}{{1, true}, {4, true}, {1, false}, {4, false}} {
		k := c.k
		n := 5000
		d := &Dataset{Rows: n, Label: make([]float32, n)}
		pred := make([]float32, n*k)
		for i := range pred {
			switch {
			case c.prob && i%3 == 0:
				pred[i] = float32(rng.IntN(5)) / 4
			case c.prob:
				pred[i] = rng.Float32()
			case i%3 == 0:
				pred[i] = float32(rng.IntN(9)-4) / 4
			default:
				pred[i] = float32(rng.NormFloat64())
			}
		}
		for i := range d.Label {
			if k > 1 {
				d.Label[i] = float32(rng.IntN(k))
			} else {
				d.Label[i] = float32(rng.IntN(2))
			}
		}
		for cl := range k {
			var sc, sg aucScratch
			var lc, lg aucList
			sc.localList(&lc, d, pred, k, cl, 0)
			withGo(func() { sg.localList(&lg, d, pred, k, cl, 0) })
			if lc.byRow != c.prob || lg.byRow {
				t.Fatalf("k %d, prob %v: C list by row %v, Go's %v", k, c.prob, lc.byRow, lg.byRow)
			}
			if c.prob {
				for i := 1; i < len(lc.rows); i++ {
					if lc.rows[i]>>1 < lc.rows[i-1]>>1 {
						t.Fatalf("k %d, class %d: row %d out of order", k, cl, i)
					}
				}
				lc = lc.entries()
			}
			lc.rbuf, lg.rbuf = [2][]uint32{}, [2][]uint32{}
			if !reflect.DeepEqual(lc, lg) {
				t.Fatalf("k %d, prob %v, class %d: C list (%d entries, P %d N %d) differs from Go's (%d, P %d N %d)", k, c.prob, cl, len(lc.k), lc.P, lc.N, len(lg.k), lg.P, lg.N)
			}
			if lc.P == 0 || lc.N == 0 || len(lc.k) < 100 {
				t.Fatalf("k %d, class %d: degenerate list: %d entries, P %d, N %d", k, cl, len(lc.k), lc.P, lc.N)
			}
		}
	}
}

// TestAUCRowsAreaCMatchesGo compares gb_auc_rows_area with aucRowsArea
// and both with the merge of the lists' entries (gb_auc_merge2), on lists
// by row with ties within and across the lists, either one empty, and
// areas past 64 bits.
func TestAUCRowsAreaCMatchesGo(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	rows := func(n, keys int) []uint32 {
		r := make([]uint32, n)
		for i := range r {
			r[i] = uint32(rng.IntN(keys))<<1 | uint32(rng.IntN(2))
		}
		slices.SortFunc(r, func(a, b uint32) int { return int(a>>1) - int(b>>1) })
		return r
	}
	for _, c := range []struct {
		na, nb, keys int
		negBelow     uint64
	}{{0, 0, 1, 0}, {1000, 0, 50, 3}, {0, 700, 1 << 30, 0}, {3000, 2000, 100, 7}, {5000, 5000, 1 << 20, 1 << 62},
		{1, 900, 40, 0}, {901, 2, 40, 5}, {33, 32, 3, 1}, {20, 21, 1000, 0}, {1, 1, 1, 0}, {4001, 3000, 2, 9}} {
		a, b := rows(c.na, c.keys), rows(c.nb, c.keys)
		ch, cl := aucRowsAreaC(a, b, c.negBelow)
		gh, gl := aucRowsArea(a, b, c.negBelow)
		ea := (&aucList{byRow: true, rows: a}).entries()
		eb := (&aucList{byRow: true, rows: b}).entries()
		wh, wl := aucMerge2C(&ea, &eb, c.negBelow)
		if ch != wh || cl != wl || gh != wh || gl != wl {
			t.Fatalf("%+v: C (%d, %d), Go (%d, %d), the entries' merge (%d, %d)", c, ch, cl, gh, gl, wh, wl)
		}
		if c.na+c.nb > 2 && wh == 0 && wl == 0 {
			t.Fatalf("%+v: zero area", c)
		}
		if c.negBelow == 1<<62 && wh == 0 {
			t.Fatalf("%+v: the area fits 64 bits: no carry tested", c)
		}
	}
	// Any lengths (odd and even totals, one list used up first) and
	// numbers of keys (the halves meeting inside an entry or between two).
	for range 2000 {
		na, nb, keys := rng.IntN(200), rng.IntN(200), 1+rng.IntN(300)
		a, b := rows(na, keys), rows(nb, keys)
		ch, cl := aucRowsAreaC(a, b, 2)
		ea := (&aucList{byRow: true, rows: a}).entries()
		eb := (&aucList{byRow: true, rows: b}).entries()
		if wh, wl := aucMerge2C(&ea, &eb, 2); ch != wh || cl != wl {
			t.Fatalf("%d and %d rows, %d keys: C (%d, %d), the entries' merge (%d, %d)", na, nb, keys, ch, cl, wh, wl)
		}
	}
}

// TestAUCListWireFormGo is TestAUCListWireForm on the Go references of the
// tagging loops (gb_auc_tags, gb_auc_untag).
func TestAUCListWireFormGo(t *testing.T) {
	withGo(func() { TestAUCListWireForm(t) })
}
