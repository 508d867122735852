package gbdt

import (
	"context"
	"math"
	"math/big"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// pairAUC is the AUC by its definition: over all (positive, negative) pairs,
// the weight of those ranked right plus half of the ties.
func pairAUC(pred []float32, pos []bool, w []float64) float64 {
	var num, den float64
	for i := range pred {
		if !pos[i] {
			continue
		}
		for j := range pred {
			if pos[j] {
				continue
			}
			ww := w[i] * w[j]
			den += ww
			switch {
			case pred[i] > pred[j]:
				num += ww
			case pred[i] == pred[j]:
				num += ww / 2
			}
		}
	}
	return num / den
}

// TestMetrics checks every metric on 1, 2 and 3 ranks against its formula
// computed directly over all rows, and that the ranks agree bit for bit.
func TestMetrics(t *testing.T) {
	const n = 400
	rng := rand.New(rand.NewPCG(3, 3))
	for _, tc := range []struct {
		obj     string
		classes int
		metrics []string
	}{
		{BinaryLogistic, 0, []string{"logloss", "error", "auc", "rmse", "mae"}},
		{MultiSoftprob, 3, []string{"mlogloss", "merror", "auc"}},
		{CountPoisson, 0, []string{"poisson-nloglik", "rmse"}},
	} {
		p := DefaultParams()
		p.Objective, p.NumClass, p.EvalMetric = tc.obj, tc.classes, tc.metrics
		k := p.groups()
		d := synth(n, 2, tc.obj, tc.classes, 8)
		d.Weight = make([]float32, n)
		margins := make([]float32, n*k)
		for i := range margins {
			// Coarse margins: many ties for AUC.
			margins[i] = float32(rng.IntN(9)-4) / 2
		}
		for i := range d.Weight {
			d.Weight[i] = float32(1 + rng.IntN(3))
		}
		pred := transform(probObjective(tc.obj), k, margins)
		want := map[string]float64{}
		var sw float64
		sums := map[string]float64{}
		for i := range n {
			w := float64(d.Weight[i])
			y := float64(d.Label[i])
			pr := float64(pred[i*k])
			sw += w
			sums["rmse"] += w * (pr - y) * (pr - y)
			sums["mae"] += w * math.Abs(pr-y)
			c := min(max(pr, 1e-16), 1-1e-16)
			sums["logloss"] += w * (-y*math.Log(c) - (1-y)*math.Log(1-c))
			if (pr > 0.5) != (y == 1) {
				sums["error"] += w
			}
			lg, _ := math.Lgamma(y + 1)
			sums["poisson-nloglik"] += w * (lg + pr - math.Log(pr)*y)
			if k > 1 {
				sums["mlogloss"] += w * -math.Log(float64(pred[i*k+int(y)]))
				if argmax(pred[i*k:(i+1)*k]) != int(y) {
					sums["merror"] += w
				}
			}
		}
		for m, s := range sums {
			want[m] = s / sw
		}
		want["rmse"] = math.Sqrt(want["rmse"])
		w := make([]float64, n)
		for i := range w {
			w[i] = float64(d.Weight[i])
		}
		if k == 1 {
			pos := make([]bool, n)
			for i := range pos {
				pos[i] = d.Label[i] == 1
			}
			want["auc"] = pairAUC(pred, pos, w)
		} else {
			var num, den float64
			for c := range k {
				pos := make([]bool, n)
				pc := make([]float32, n)
				var wp float64
				for i := range pos {
					pos[i] = int(d.Label[i]) == c
					pc[i] = pred[i*k+c]
					if pos[i] {
						wp += w[i]
					}
				}
				num += pairAUC(pc, pos, w) * wp
				den += wp
			}
			want["auc"] = num / den
		}
		var ref []MetricValue
		for ranks := 1; ranks <= 3; ranks++ {
			sizes := unevenSizes(n, ranks)
			comms := group(t, ranks)
			shards := shard(d, sizes...)
			got := make([][]MetricValue, ranks)
			wmax := []float64{3, 1}
			_, e := math.Frexp(wmax[0])
			wscale := math.Ldexp(1, 31-e)
			if err := firstErr(each(ranks, func(r int) error {
				at := 0
				for _, s := range sizes[:r] {
					at += s
				}
				var err error
				got[r], err = evalMetrics(context.Background(), comms[r], &p, "valid", shards[r], margins[at*k:(at+shards[r].Rows)*k], n, wscale, nil)
				return err
			})); err != nil {
				t.Fatal(err)
			}
			for r := range ranks {
				for j, mv := range got[r] {
					if mv.Name != "valid_"+tc.metrics[j] {
						t.Fatalf("metric %d named %s", j, mv.Name)
					}
					if math.Abs(mv.Value-want[mv.Metric]) > 1e-9*math.Max(1, math.Abs(want[mv.Metric])) {
						t.Errorf("%s %s, %d ranks: %v, want %v", tc.obj, mv.Metric, ranks, mv.Value, want[mv.Metric])
					}
					if ref != nil && mv != ref[j] {
						t.Errorf("%s %s: %d ranks give %v, 1 rank %v", tc.obj, mv.Metric, ranks, mv.Value, ref[j].Value)
					}
				}
			}
			if ref == nil {
				ref = got[0]
			}
		}
	}
}

// aucEntry is one distinct prediction with its positive and negative
// weights in fixed point.
type aucEntry struct {
	k        uint32
	pos, neg uint64
}

// mergeAUC sorts entries by prediction and sums those with equal ones
// (the reference of exactAUC's radix sort and merge).
func mergeAUC(l []aucEntry) []aucEntry {
	slices.SortFunc(l, func(a, b aucEntry) int {
		switch {
		case a.k < b.k:
			return -1
		case a.k > b.k:
			return 1
		}
		return 0
	})
	m := l[:0]
	for _, e := range l {
		if n := len(m); n > 0 && m[n-1].k == e.k {
			m[n-1].pos += e.pos
			m[n-1].neg += e.neg
		} else {
			m = append(m, e)
		}
	}
	return m
}

// aucOfSorted is the AUC of entries sorted by ascending prediction (the
// former float accumulation; the reference here). ok is false without
// positives or negatives.
func aucOfSorted(l []aucEntry) (auc float64, ok bool) {
	var P, N float64
	for _, e := range l {
		P += float64(e.pos)
		N += float64(e.neg)
	}
	if P == 0 || N == 0 {
		return 0, false
	}
	var area, negBelow float64
	for _, e := range l {
		area += float64(e.pos) * (negBelow + float64(e.neg)/2)
		negBelow += float64(e.neg)
	}
	return area / (P * N), true
}

// sortedAUC is exactAUC's value by a comparison sort of all rows of one
// rank (the reference of the radix sorts, the lists by row and the ranks'
// merge): per class the rows' keys sorted, a key's rows one entry, area2 =
// Σ pos·(2·negBelow + neg) in a big integer, AUC = area2 / (2·P·N) rounded
// as exactAUC rounds it; several classes: the mean weighted by P.
func sortedAUC(d *Dataset, pred []float32, k int, wscale float64) float64 {
	var num, den float64
	for cl := range k {
		all := make([]aucEntry, d.Rows)
		for i := range all {
			w := uint64(1)
			if wscale > 0 {
				w = uint64(math.RoundToEven(d.weight(i) * wscale))
			}
			all[i] = aucEntry{k: key(pred[i*k+cl])}
			if positive(d.Label[i], k, cl) {
				all[i].pos = w
			} else {
				all[i].neg = w
			}
		}
		area := new(big.Int)
		var negBelow, P, N uint64
		for _, e := range mergeAUC(all) {
			t := new(big.Int).SetUint64(2*negBelow + e.neg)
			area.Add(area, t.Mul(t, new(big.Int).SetUint64(e.pos)))
			negBelow += e.neg
			P += e.pos
			N += e.neg
		}
		if P == 0 || N == 0 {
			if k == 1 {
				return math.NaN()
			}
			continue
		}
		lo := new(big.Int).And(area, new(big.Int).SetUint64(math.MaxUint64)).Uint64()
		hi := new(big.Int).Rsh(area, 64).Uint64()
		auc := (float64(hi)*0x1p64 + float64(lo)) / (2 * float64(P) * float64(N))
		if k == 1 {
			return auc
		}
		num += auc * float64(P)
		den += float64(P)
	}
	if den == 0 {
		return math.NaN()
	}
	return num / den
}

// TestAUCMatchesSortedReference checks exactAUC's radix-sorted lists
// against a comparison sort of all rows, and its AUC on 1, 2 and 3 ranks
// (the same bits on each) against the sorted list's, with ties, weights or
// none, and keys that differ in every byte.
func TestAUCMatchesSortedReference(t *testing.T) {
	const n = 5000
	rng := rand.New(rand.NewPCG(5, 5))
	d := &Dataset{Rows: n, Cols: 1, X: make([]float32, n), Label: make([]float32, n), Weight: make([]float32, n)}
	pred := make([]float32, n)
	for i := range n {
		switch i % 3 {
		case 0:
			pred[i] = float32(rng.IntN(7)) / 8 // ties
		case 1:
			pred[i] = rng.Float32()
		default:
			pred[i] = float32(rng.NormFloat64() * 1e3) // both signs, wide exponents
		}
		if rng.IntN(2) == 0 {
			d.Label[i] = 1
		}
		d.Weight[i] = float32(1 + rng.IntN(5))
	}
	p := DefaultParams()
	p.Objective = BinaryLogistic
	for _, weighted := range []bool{false, true} {
		wscale := 0.0
		if weighted {
			_, e := math.Frexp(5)
			wscale = math.Ldexp(1, 31-e)
		}
		var all []aucEntry
		for i := range n {
			w := uint64(1)
			if weighted {
				w = uint64(math.RoundToEven(float64(d.Weight[i]) * wscale))
			}
			en := aucEntry{k: key(pred[i])}
			if d.Label[i] == 1 {
				en.pos = w
			} else {
				en.neg = w
			}
			all = append(all, en)
		}
		ref := mergeAUC(all)
		want, _ := aucOfSorted(ref)
		var sc aucScratch
		var l aucList
		sc.localList(&l, d, pred, 1, 0, wscale)
		if len(l.k) != len(ref) {
			t.Fatalf("localList has %d entries, the sorted reference %d", len(l.k), len(ref))
		}
		for i, e := range ref {
			if l.k[i] != e.k || l.pos[i] != e.pos || l.neg[i] != e.neg {
				t.Fatalf("localList's entry %d is (%x %d %d), the reference's %+v", i, l.k[i], l.pos[i], l.neg[i], e)
			}
		}
		var first float64
		for _, ranks := range []int{1, 2, 3} {
			sizes := unevenSizes(n, ranks)
			comms := group(t, ranks)
			shards := shard(d, sizes...)
			if !weighted {
				for _, s := range shards {
					s.Weight = nil
				}
			}
			aucs := make([]float64, ranks)
			if err := firstErr(each(ranks, func(r int) error {
				at := 0
				for _, s := range sizes[:r] {
					at += s
				}
				var err error
				aucs[r], err = exactAUC(context.Background(), comms[r], &p, shards[r], pred[at:at+shards[r].Rows], wscale, nil)
				return err
			})); err != nil {
				t.Fatal(err)
			}
			if ranks == 1 {
				first = aucs[0]
			}
			for r, a := range aucs {
				if a != first {
					t.Fatalf("weighted %v, %d ranks: rank %d's AUC %v, 1 rank's %v", weighted, ranks, r, a, first)
				}
			}
			if math.Abs(first-want) > 1e-12 {
				t.Fatalf("weighted %v: AUC %v, the sorted reference's %v", weighted, first, want)
			}
		}
	}
}

func TestAUCListWireForm(t *testing.T) {
	ls := []aucList{{k: []uint32{1, 5, 9, 12}, pos: []uint64{1, 0, 7, 0}, neg: []uint64{0, 2, 3, 1}, P: 8, N: 6}, {}, {k: []uint32{4}, pos: []uint64{2}, neg: []uint64{0}, P: 2}}
	var enc []byte
	for i := range ls {
		enc = appendAUCList(enc, &ls[i])
	}
	// Tags: entries (1, 0) and (0, 1) take 5 bytes, the others 21.
	if want := 3*32 + (5*4 + 4 + 2*16) + (5 + 3 + 16); len(enc) != want {
		t.Fatalf("%d bytes, want %d", len(enc), want)
	}
	got, _, err := decodeAUCLists(enc[:len(enc):len(enc)], 3, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range ls {
		if !slices.Equal(got[i].k, ls[i].k) || !slices.Equal(got[i].pos, ls[i].pos) || !slices.Equal(got[i].neg, ls[i].neg) || got[i].P != ls[i].P || got[i].N != ls[i].N {
			t.Fatalf("list %d: %+v, want %+v", i, got[i], ls[i])
		}
	}
	// Lists by row: 4 bytes a row, padded to 8.
	rl := []aucList{{byRow: true, rows: []uint32{2, 3, 3, 8, 9}, P: 3, N: 2}, {byRow: true}, {byRow: true, rows: []uint32{6}, N: 1}}
	var renc []byte
	for i := range rl {
		renc = appendAUCList(renc, &rl[i])
	}
	if want := 3*32 + 24 + 8; len(renc) != want {
		t.Fatalf("lists by row: %d bytes, want %d", len(renc), want)
	}
	rgot, _, err := decodeAUCLists(renc, 3, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range rl {
		if g := rgot[i]; !g.byRow || !slices.Equal(g.rows, rl[i].rows) || g.P != rl[i].P || g.N != rl[i].N {
			t.Fatalf("list by row %d: %+v, want %+v", i, g, rl[i])
		}
	}
	bad := slices.Clone(renc)
	bad[32+4*1] = 10 // row 1: key 5 > row 2's 1
	if _, _, err := decodeAUCLists(bad, 3, nil); err == nil || !strings.Contains(err.Error(), "row 2 of class 0 is out of order") {
		t.Fatalf("rows out of order: error %v", err)
	}
	if _, _, err := decodeAUCLists(renc[:len(renc)-8], 3, nil); err == nil {
		t.Fatal("a list by row cut short decoded without an error")
	}
	// Unaligned input is copied, not misread.
	un := append([]byte{0}, enc...)[1:]
	if got, _, err := decodeAUCLists(un, 3, make([]uint64, 1)); err != nil || !slices.Equal(got[0].pos, ls[0].pos) {
		t.Fatalf("unaligned: %v %v", got, err)
	}
	for _, bad := range [][]byte{enc[:len(enc)-8], enc[:10], append(slices.Clone(enc), 0, 0, 0, 0, 0, 0, 0, 0)} {
		if _, _, err := decodeAUCLists(bad, 3, nil); err == nil {
			t.Fatalf("%d bytes decoded without an error", len(bad))
		}
	}
	for _, c := range []struct {
		at   int
		v    byte
		want string
	}{
		{32 + 16 + 1, 2, "1 escaped entries, header says 2"}, // entry 1: tag 3 → 2
		{32 + 16 + 0, 3, "3 escaped entries, header says 2"}, // entry 0: tag 1 → 3
		{32 + 16 + 3, 7, "has tag 7"},
		{32 + 16 + 3, 0, "has tag 0"},
		{32 + 0, 6, "out of order"}, // k[0] = 6 > k[1] = 5
	} {
		b := slices.Clone(enc)
		b[c.at] = c.v
		if _, _, err := decodeAUCLists(b, 3, nil); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("byte %d set to %d: error %v, want %q", c.at, c.v, err, c.want)
		}
	}
}

func TestRadixSortHi(t *testing.T) {
	rng := rand.New(rand.NewPCG(6, 6))
	for _, n := range []int{0, 1, 2, 1000} {
		for _, mask := range []uint64{0xffffffff, 0x00ff0000, 0} {
			a := make([]uint64, n)
			for i := range a {
				a[i] = (rng.Uint64()&mask)<<32 | uint64(i)
			}
			want := slices.Clone(a)
			slices.SortStableFunc(want, func(x, y uint64) int { return int(x>>32) - int(y>>32) })
			if got := radixSortHi(a, make([]uint64, n)); !slices.Equal(got, want) {
				t.Fatalf("n %d mask %x: not the stable sort by the upper half", n, mask)
			}
		}
	}
}

// TestAUCLaterCallsSendParts calls exactAUC several times with the same
// scratch, as the rounds of training do: from the second call on, a rank
// sends only the parts of its list the others merge (cut at the last
// call's quantiles). Every call's AUC must equal one rank's and, bit for
// bit, a comparison sort's (sortedAUC), for binary and multi-class
// predictions that move between calls (ties; unweighted probabilities: the
// lists by row), weighted or not, on 1, 2 and 3 ranks.
func TestAUCLaterCallsSendParts(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	for _, k := range []int{1, 3} {
		for _, weighted := range []bool{false, true} {
			n := 3000
			d := &Dataset{Rows: n, Cols: 1, X: make([]float32, n), Label: make([]float32, n)}
			if weighted {
				d.Weight = make([]float32, n)
			}
			for i := range n {
				d.Label[i] = float32(rng.IntN(max(k, 2)))
				if weighted {
					d.Weight[i] = float32(1 + rng.IntN(4))
				}
			}
			wscale := 0.0
			if weighted {
				wscale = math.Ldexp(1, 31-3)
			}
			p := DefaultParams()
			p.Objective, p.NumClass = BinaryLogistic, 0
			if k > 1 {
				p.Objective, p.NumClass = MultiSoftprob, k
			}
			calls := make([][]float32, 4)
			for c := range calls {
				calls[c] = make([]float32, n*k)
				for i := range calls[c] {
					// Drifting probabilities with ties; the last call's
					// cuts fit the next one badly.
					calls[c][i] = float32(rng.IntN(200+300*c)) / float32(200+300*c)
				}
			}
			var want []float64
			var one aucScratch
			for _, pred := range calls {
				v, err := exactAUC(context.Background(), Local(), &p, d, pred, wscale, &one)
				if err != nil {
					t.Fatal(err)
				}
				if ref := sortedAUC(d, pred, k, wscale); v != ref {
					t.Fatalf("k %d, weighted %v, 1 rank, call %d: AUC %v, the comparison sort's %v", k, weighted, len(want), v, ref)
				}
				if got := one.lists[0].byRow; got != (useC && !weighted) {
					t.Fatalf("k %d, weighted %v: list by row %v", k, weighted, got)
				}
				want = append(want, v)
			}
			for _, ranks := range []int{2, 3} {
				sizes := unevenSizes(n, ranks)
				comms := group(t, ranks)
				shards := shard(d, sizes...)
				scs := make([]aucScratch, ranks)
				for c, pred := range calls {
					got := make([]float64, ranks)
					if err := firstErr(each(ranks, func(r int) error {
						at := 0
						for _, s := range sizes[:r] {
							at += s
						}
						var err error
						got[r], err = exactAUC(context.Background(), comms[r], &p, shards[r], pred[at*k:(at+shards[r].Rows)*k], wscale, &scs[r])
						return err
					})); err != nil {
						t.Fatal(err)
					}
					for r, v := range got {
						if v != want[c] {
							t.Fatalf("k %d, weighted %v, %d ranks, call %d: rank %d's AUC %v, 1 rank's %v", k, weighted, ranks, c, r, v, want[c])
						}
					}
					if c > 0 && len(scs[0].cuts) != k {
						t.Fatalf("k %d, %d ranks, call %d: no cuts kept from the last call", k, ranks, c)
					}
				}
			}
		}
	}
}

// FuzzDecodeAUCLists feeds decodeAUCLists arbitrary bytes (what another
// rank sends): it must return an error or lists whose keys ascend and whose
// counts are as many as the keys, never panic.
func FuzzDecodeAUCLists(f *testing.F) {
	ls := []aucList{{k: []uint32{1, 5, 9, 12}, pos: []uint64{1, 0, 7, 0}, neg: []uint64{0, 2, 3, 1}, P: 8, N: 6}, {}}
	var enc []byte
	for i := range ls {
		enc = appendAUCList(enc, &ls[i])
	}
	f.Add(enc, 2)
	rl := aucList{byRow: true, rows: []uint32{2, 3, 3, 8, 9}, P: 3, N: 2}
	f.Add(appendAUCList(nil, &rl), 1)
	f.Add(enc[:40], 1)
	f.Add([]byte{}, 0)
	f.Fuzz(func(t *testing.T, b []byte, k int) {
		if k < 0 || k > 8 {
			return
		}
		got, _, err := decodeAUCLists(b, k, nil)
		if err != nil {
			return
		}
		for cl, l := range got {
			for i := 1; i < len(l.rows); i++ {
				if l.rows[i]>>1 < l.rows[i-1]>>1 {
					t.Fatalf("class %d: rows out of order at %d", cl, i)
				}
			}
			if len(l.pos) != len(l.k) || len(l.neg) != len(l.k) {
				t.Fatalf("class %d: %d keys, %d pos, %d neg", cl, len(l.k), len(l.pos), len(l.neg))
			}
			for i := 1; i < len(l.k); i++ {
				if l.k[i] <= l.k[i-1] {
					t.Fatalf("class %d: keys out of order at %d", cl, i)
				}
			}
		}
	})
}
