package gbdt

import (
	"bytes"
	"context"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
)

// withGo runs f with the Go references instead of kern.c.
func withGo(f func()) {
	defer func(v bool) { useC = v }(useC)
	useC = false
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
		var rows []uint32
		for i := range d.Rows {
			if rng.IntN(3) > 0 {
				rows = append(rows, uint32(i))
			}
		}
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
