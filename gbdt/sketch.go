package gbdt

// The quantile sketch: cut points that depend on the multiset of (value,
// weight) pairs of the whole table only, never on how its rows are split
// across ranks.
//
// Each float32 value maps to an order-preserving 32-bit key. Three rounds
// refine a global weighted histogram of the keys, each a pass over the
// rank's rows counting into dense tables (no sorting): round one counts the
// keys' top 16 bits, round two the next 8 bits within the round-one buckets
// that matter, round three the last 8 bits within the round-two buckets
// that matter, which gives exact values. A bucket matters when it holds one
// of the target ranks j·W/max_bin (W the feature's total weight; ranks 0
// and W-1 too, for the minimum and maximum), or when every bucket of the
// feature has been refined so far and there are at most max_bin of them (so
// that a feature with at most max_bin distinct values has every value known
// exactly and gets a bin per value, as XGBoost's sketch does). A round
// sends at most max_bin×256 entries per feature, usually far fewer. Each
// round is one AllGather of sparse (prefix, weight) lists, merged by
// summing integer weights: the merged lists, hence the cuts, are exactly the
// same for every world size. The cuts are the exact weighted quantiles of
// each feature.
//
// Weights are the instance weights in a fixed point (a power-of-two scale
// from the largest weight, at least one unit per row), or 1 per row.

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"sort"
)

// Cuts are every feature's bin boundaries, the same on every rank. Feature
// f has bins Ptr[f]..Ptr[f+1]-1; bin b (local index) holds the values x
// with Values[Ptr[f]+b-1] ≤ x < Values[Ptr[f]+b] (no lower bound for b = 0),
// as XGBoost's HistogramCuts. The last upper bound of a feature lies above
// its maximum; Min lies below its minimum. A feature with no values has no
// bins.
type Cuts struct {
	Ptr     []uint32
	Values  []float32
	Min     []float32
	Missing []bool // some row of some rank lacks the feature
}

// NumBins is feature f's number of bins.
func (c *Cuts) NumBins(f int) int { return int(c.Ptr[f+1] - c.Ptr[f]) }

// feature returns feature f's upper bounds.
func (c *Cuts) feature(f int) []float32 { return c.Values[c.Ptr[f]:c.Ptr[f+1]] }

// Bin returns the bin of value x of feature f: the number of upper bounds
// ≤ x, at most NumBins(f)-1; NaN gives NumBins(f), the missing code.
func (c *Cuts) Bin(f int, x float32) int {
	u := c.feature(f)
	if x != x {
		return len(u)
	}
	lo, hi := 0, len(u)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if u[m] <= x {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo >= len(u) && len(u) > 0 {
		lo = len(u) - 1
	}
	return lo
}

// key maps a float32 to a uint32 in the same order (-0 as +0).
func key(x float32) uint32 {
	if x == 0 {
		x = 0
	}
	b := math.Float32bits(x)
	if b&(1<<31) != 0 {
		return ^b
	}
	return b | 1<<31
}

// unkey inverts key.
func unkey(k uint32) float32 {
	if k&(1<<31) != 0 {
		return math.Float32frombits(k &^ (1 << 31))
	}
	return math.Float32frombits(^k)
}

// sketchShifts are the rounds' resolutions: a round keeps key >> shift.
var sketchShifts = [...]uint{16, 8, 0}

// entry is a bucket (or, in the last round, a value): its key prefix and
// its weight.
type entry struct {
	k uint32
	w uint64
}

type featState struct {
	active   []uint32 // prefixes at the previous round's shift, sorted
	base     []uint64 // global weight below each active prefix
	complete bool     // every non-empty bucket has been refined so far
	total    uint64
}

// sketchChunkFeatures is how many features are sketched at once (their
// round-one tables take 512 KiB each).
const sketchChunkFeatures = 32

// sketch computes the cuts of d's features over all ranks (collective).
func sketch(ctx context.Context, c Collective, d *Dataset, maxBin int) (*Cuts, error) {
	F := d.Cols
	// Global flags: which features miss values; the largest weight; whether
	// any rank has weights.
	flags := make([]float64, F+2)
	for i := range d.Rows {
		row := d.X[i*F : (i+1)*F]
		for f, x := range row {
			if x != x {
				flags[f] = 1
			}
		}
	}
	for _, w := range d.Weight {
		flags[F] = max(flags[F], float64(w))
	}
	if d.Weight != nil {
		flags[F+1] = 1
	}
	if err := allMax(ctx, c, flags); err != nil {
		return nil, err
	}
	// Row weights in fixed point (nil: one unit per row).
	var wq []uint64
	if flags[F+1] > 0 && flags[F] > 0 {
		_, e := math.Frexp(flags[F])
		scale := math.Ldexp(1, 31-e) // weights below 2^31 units
		wq = make([]uint64, d.Rows)
		for i := range wq {
			wq[i] = max(1, uint64(math.RoundToEven(d.weight(i)*scale)))
		}
	}
	// A feature with missing values needs a code for them: with max_bin =
	// 256 it gets 255 bins, so that its codes still fit a byte.
	bins := make([]int, F)
	for f := range bins {
		bins[f] = maxBin
		if flags[f] > 0 && maxBin == 256 {
			bins[f] = 255
		}
	}
	cuts := &Cuts{Ptr: make([]uint32, F+1), Min: make([]float32, F), Missing: make([]bool, F)}
	for f0 := 0; f0 < F; f0 += sketchChunkFeatures {
		f1 := min(F, f0+sketchChunkFeatures)
		if err := sketchChunk(ctx, c, d, f0, f1, wq, bins[f0:f1], cuts); err != nil {
			return nil, err
		}
	}
	for f := range F {
		cuts.Missing[f] = flags[f] > 0
	}
	return cuts, nil
}

// sketchChunk computes the cuts of features f0..f1-1 and appends them to
// cuts.
func sketchChunk(ctx context.Context, c Collective, d *Dataset, f0, f1 int, wq []uint64, maxBins []int, cuts *Cuts) error {
	nf := f1 - f0
	st := make([]featState, nf)
	for j := range st {
		st[j] = featState{active: []uint32{0}, base: []uint64{0}, complete: true}
	}
	cols := columns(d, f0, f1, wq)
	prev := uint(32)
	var merged [][]entry
	for round, shift := range sketchShifts {
		enc := countRound(cols, st, prev, shift)
		parts := [][]byte{enc}
		if c.Size() > 1 {
			var err error
			parts, err = c.AllGather(ctx, enc)
			if err != nil {
				return fmt.Errorf("gbdt: sketch of features %d..%d, round %d: all-gather: %w", f0, f1-1, round+1, err)
			}
		}
		var err error
		merged, err = mergeLists(parts, nf)
		if err != nil {
			return fmt.Errorf("gbdt: sketch of features %d..%d, round %d: %w", f0, f1-1, round+1, err)
		}
		last := round == len(sketchShifts)-1
		for j := range st {
			s := &st[j]
			L := merged[j]
			maxBin := maxBins[j]
			if round == 0 {
				for _, e := range L {
					s.total += e.w
				}
			}
			if s.total == 0 {
				s.active, s.base = nil, nil
				continue
			}
			starts := bucketStarts(L, s, prev-shift)
			if last {
				s.base = starts
				continue
			}
			all := s.complete && len(L) <= maxBin
			targets := targetRanks(s.total, maxBin)
			var na []uint32
			var nb []uint64
			t := 0
			for i, e := range L {
				hit := false
				for t < len(targets) && targets[t] < starts[i]+e.w {
					if targets[t] >= starts[i] {
						hit = true
					}
					t++
				}
				if hit || all {
					na = append(na, e.k)
					nb = append(nb, starts[i])
				}
			}
			s.active, s.base, s.complete = na, nb, all
		}
		prev = shift
	}
	for j := range st {
		f := f0 + j
		maxBin := maxBins[j]
		s := &st[j]
		L := merged[j]
		if s.total == 0 || len(L) == 0 {
			cuts.Ptr[f+1] = uint32(len(cuts.Values))
			continue
		}
		starts := s.base
		// at returns the value holding rank t: every entry weighs at least
		// one unit, so starts increase strictly.
		at := func(t uint64) float32 {
			i := sort.Search(len(starts), func(i int) bool { return starts[i] > t }) - 1
			return unkey(L[max(i, 0)].k)
		}
		mn, mx := at(0), at(s.total-1)
		var vals []float32
		if s.complete && len(L) <= maxBin {
			// Few distinct values: each has its own bin.
			for _, e := range L[1:] {
				vals = append(vals, unkey(e.k))
			}
		} else {
			for _, t := range targetRanks(s.total, maxBin)[1:maxBin] {
				v := at(t)
				if v > mn && (len(vals) == 0 || v > vals[len(vals)-1]) {
					vals = append(vals, v)
				}
			}
		}
		// The closing bound lies above the maximum (XGBoost's).
		vals = append(vals, mx+(float32(math.Abs(float64(mx)))+1e-5))
		cuts.Values = append(cuts.Values, vals...)
		cuts.Min[f] = mn - (float32(math.Abs(float64(mn))) + 1e-5)
		cuts.Ptr[f+1] = uint32(len(cuts.Values))
	}
	return ctx.Err()
}

// column is one feature's non-missing values on this rank, as keys, with
// their rows' weights (nil: one unit each).
type column struct {
	keys []uint32
	w    []uint64
}

// columns extracts features f0..f1-1 of d.
func columns(d *Dataset, f0, f1 int, wq []uint64) []column {
	nf, F := f1-f0, d.Cols
	cols := make([]column, nf)
	for j := range cols {
		cols[j].keys = make([]uint32, 0, d.Rows)
		if wq != nil {
			cols[j].w = make([]uint64, 0, d.Rows)
		}
	}
	for i := range d.Rows {
		row := d.X[i*F+f0 : i*F+f1]
		for j, x := range row {
			if x != x {
				continue
			}
			cols[j].keys = append(cols[j].keys, key(x))
			if wq != nil {
				cols[j].w = append(cols[j].w, wq[i])
			}
		}
	}
	return cols
}

// countRound counts this rank's weights per prefix key>>shift within the
// active prefixes (key>>prev), one feature at a time in a dense table, and
// encodes the non-empty buckets, per feature in prefix order. The table is
// reused across features: only the buckets a feature touched are read back
// (sorted when they are few) and cleared.
func countRound(cols []column, st []featState, prev, shift uint) []byte {
	sub := uint(1) << (prev - shift) // sub-buckets per active bucket
	var enc []byte
	var top []int32
	if prev < 32 {
		top = make([]int32, 1<<16)
		for i := range top {
			top[i] = -1
		}
	}
	var counts []uint64
	var touched []int32
	for j, col := range cols {
		act := st[j].active
		if need := len(act) * int(sub); cap(counts) < need {
			counts = make([]uint64, need)
		} else {
			counts = counts[:need]
		}
		touched = touched[:0]
		// Rounds two and three find a value's active bucket through its
		// 16-bit prefix: top[p16] is the index of the active bucket (round
		// two) or of the first active bucket under p16 (round three), -1
		// for none.
		if prev < 32 {
			for a := len(act) - 1; a >= 0; a-- {
				top[act[a]>>(16-prev)] = int32(a) // prev is 16 or 8
			}
		}
		mask := uint32(sub - 1)
		for i, k := range col.keys {
			a := 0
			if prev < 32 {
				a = int(top[k>>16])
				if a < 0 {
					continue
				}
				if prev < 16 {
					// The active prefixes under k's 16-bit one are
					// consecutive from a.
					p := k >> prev
					for a < len(act) && act[a] < p {
						a++
					}
					if a == len(act) || act[a] != p {
						continue
					}
				}
			}
			w := uint64(1)
			if col.w != nil {
				w = col.w[i]
			}
			at := a*int(sub) + int((k>>shift)&mask)
			if counts[at] == 0 {
				touched = append(touched, int32(at))
			}
			counts[at] += w
		}
		if prev < 32 {
			for _, p := range act {
				top[p>>(16-prev)] = -1
			}
		}
		enc = binary.LittleEndian.AppendUint32(enc, uint32(len(touched)))
		emit := func(at int) {
			a, q := at/int(sub), at%int(sub)
			enc = appendEntry(enc, entry{k: uint32(uint64(act[a])<<(prev-shift)) | uint32(q), w: counts[at]})
			counts[at] = 0
		}
		if len(touched) < len(counts)/16 {
			slices.Sort(touched)
			for _, at := range touched {
				emit(int(at))
			}
		} else {
			for at, w := range counts {
				if w != 0 {
					emit(at)
				}
			}
		}
	}
	return enc
}

// targetRanks returns the ranks j·W/B for j = 0..B-1, then W-1 (sorted).
func targetRanks(total uint64, maxBin int) []uint64 {
	out := make([]uint64, 0, maxBin+1)
	for j := range maxBin {
		// floor(j·total/maxBin) without overflow.
		out = append(out, mulDiv(uint64(j), total, uint64(maxBin)))
	}
	out = append(out, total-1)
	return out
}

func mulDiv(a, b, c uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	q, _ := bits.Div64(hi, lo, c)
	return q
}

// bucketStarts returns the global weight below each entry of L (sorted
// prefixes at the new resolution), from the active parents' bases; the
// parent of a prefix p is p >> step.
func bucketStarts(L []entry, s *featState, step uint) []uint64 {
	starts := make([]uint64, len(L))
	a := -1
	var run uint64
	for i, e := range L {
		p := uint32(uint64(e.k) >> step)
		if a < 0 || s.active[a] != p {
			for a++; a < len(s.active) && s.active[a] != p; a++ {
			}
			if a == len(s.active) {
				// Cannot happen: ranks only send prefixes of active
				// buckets.
				a = len(s.active) - 1
			}
			run = s.base[a]
		}
		starts[i] = run
		run += e.w
	}
	return starts
}

const entryBytes = 12

func appendEntry(b []byte, e entry) []byte {
	b = binary.LittleEndian.AppendUint32(b, e.k)
	return binary.LittleEndian.AppendUint64(b, e.w)
}

// mergeLists decodes every rank's per-feature lists (each sorted) and
// merges them per feature, summing weights.
func mergeLists(parts [][]byte, F int) ([][]entry, error) {
	out := make([][]entry, F)
	offs := make([]int, len(parts))
	lists := make([][]entry, len(parts))
	for f := range F {
		for r, p := range parts {
			o := offs[r]
			if o+4 > len(p) {
				return nil, fmt.Errorf("rank %d's lists end at feature %d", r, f)
			}
			n := int(binary.LittleEndian.Uint32(p[o:]))
			o += 4
			if o+entryBytes*n > len(p) {
				return nil, fmt.Errorf("rank %d's list of feature %d is cut short", r, f)
			}
			l := make([]entry, n)
			for i := range l {
				l[i] = entry{k: binary.LittleEndian.Uint32(p[o:]), w: binary.LittleEndian.Uint64(p[o+4:])}
				o += entryBytes
			}
			offs[r] = o
			lists[r] = l
		}
		m := lists[0]
		for _, l := range lists[1:] {
			m = mergeTwo(m, l)
		}
		out[f] = m
	}
	for r, p := range parts {
		if offs[r] != len(p) {
			return nil, fmt.Errorf("rank %d sent %d bytes past its lists", r, len(p)-offs[r])
		}
	}
	return out, nil
}

// mergeTwo merges two lists sorted by key.
func mergeTwo(a, b []entry) []entry {
	out := make([]entry, 0, len(a)+len(b))
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		switch {
		case a[i].k < b[j].k:
			out = append(out, a[i])
			i++
		case a[i].k > b[j].k:
			out = append(out, b[j])
			j++
		default:
			out = append(out, entry{k: a[i].k, w: a[i].w + b[j].w})
			i++
			j++
		}
	}
	out = append(out, a[i:]...)
	return append(out, b[j:]...)
}
