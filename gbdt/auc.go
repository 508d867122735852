package gbdt

// Exact AUC over all ranks, as XGBoost's exact binary AUC (ties count one
// half); multi-class AUC is the mean of the one-vs-rest AUCs weighted by
// each class's positive weight (XGBoost's MultiClassOVR).
//
// Every rank sorts its own rows by prediction (a radix sort of the keys,
// linear: no comparison sort of every row each round) into a list of
// distinct predictions with the positive and negative weights (integers: 1
// a row, or the weight in a fixed point) at each, and all-gathers the lists.
// Unweighted probabilities (every unweighted AUC but of NaN predictions)
// keep the sorted rows as the list (aucList.byRow): a key's rows are its
// entry, summed as the merge meets them, so nothing is built, tagged or
// decoded, and a row takes 4 bytes on the wire. (Carrying the last round's
// order over instead, split by the new tree's leaves and merged, is exact
// only in the order of the margins, not of the keys, whose ties the new
// values may undo; and the split alone, one pass gathering each row's
// leaf, prediction and label, cost more than the whole 2-pass radix sort:
// 2.9 against 2.3-2.5 ms on 250k rows.)
// The key range is cut into one part per rank (at quantiles of the longest
// list, the same cuts on every rank): rank r merges only the lists' entries
// in its part and sums its part of the area,
//
//	area2 = Σ over entries e in key order of pos(e)·(2·negBelow(e) + neg(e)),
//
// in 128-bit integers, and the ranks all-gather their parts. AUC is
// area2 / (2·P·N). Every term is an integer, so the value has the same bits
// on every rank, every world size and every split of the rows. From the
// second call on (the rounds of training, one aucScratch an evaluation
// set) the cuts are the last call's, known before the exchange: a rank
// sends only its entries outside its own part (half its list on 2 ranks)
// and the negatives below each cut.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"sort"
	"unsafe"
)

// aucList is the distinct prediction keys of some rows, ascending, with the
// positive and negative weight at each; or (byRow) the rows themselves.
type aucList struct {
	k        []uint32
	pos, neg []uint64
	// P, N are the sums of pos and neg (the positive and negative rows).
	P, N uint64
	// byRow: the list is rows, not entries (k, pos and neg unused), as
	// gb_auc_rows sorts them: x = key<<1 | positive, keys 10xx… (key =
	// 1<<31 + x>>1), ascending by key, the rows of one key in any order.
	// Unweighted probabilities take this form: no entries to build, to tag
	// and to decode; partArea sums a key's rows as they come.
	byRow bool
	rows  []uint32
	rbuf  [2][]uint32 // localList's buffers of rows
}

func (l *aucList) reset() {
	l.k, l.pos, l.neg, l.P, l.N = l.k[:0], l.pos[:0], l.neg[:0], 0, 0
	l.byRow, l.rows = false, nil
}

// size is the number of entries (rows when byRow).
func (l *aucList) size() int {
	if l.byRow {
		return len(l.rows)
	}
	return len(l.k)
}

// keyAt is the key of entry (or row) i.
func (l *aucList) keyAt(i int) uint32 {
	if l.byRow {
		return 1<<31 | l.rows[i]>>1
	}
	return l.k[i]
}

// lower is the first index whose key is >= cut.
func (l *aucList) lower(cut uint64) int {
	if !l.byRow {
		return lowerBound(l.k, cut)
	}
	if cut <= 1<<31 {
		return 0
	}
	t := cut - 1<<31
	return sort.Search(len(l.rows), func(i int) bool { return uint64(l.rows[i]>>1) >= t })
}

// negIn is the negative weight of entries (or rows) [i, j).
func (l *aucList) negIn(i, j int) uint64 {
	var nb uint64
	if l.byRow {
		for _, x := range l.rows[i:j] {
			nb += uint64(^x & 1)
		}
		return nb
	}
	for _, x := range l.neg[i:j] {
		nb += x
	}
	return nb
}

// slice is entries (or rows) [i, j) of l, without P and N.
func (l *aucList) slice(i, j int) aucList {
	if l.byRow {
		return aucList{byRow: true, rows: l.rows[i:j:j]}
	}
	return aucList{k: l.k[i:j:j], pos: l.pos[i:j:j], neg: l.neg[i:j:j]}
}

// entries is l as entries (a copy when byRow).
func (l *aucList) entries() aucList {
	if !l.byRow {
		return *l
	}
	e := aucList{P: l.P, N: l.N}
	for _, x := range l.rows {
		kk := 1<<31 | x>>1
		if m := len(e.k) - 1; m < 0 || e.k[m] != kk {
			e.k, e.pos, e.neg = append(e.k, kk), append(e.pos, 0), append(e.neg, 0)
		}
		m := len(e.k) - 1
		e.pos[m] += uint64(x & 1)
		e.neg[m] += uint64(^x & 1)
	}
	return e
}

// aucScratch holds exactAUC's buffers from round to round.
type aucScratch struct {
	a, b  []uint64
	lists []aucList // per class, this rank's rows
	enc   []byte
	subs  []aucList
	at    []int
	wire  [][]uint64 // per rank: decodeAUCLists' buffer
	cuts  [][]uint64 // per class: the last call's cuts (several ranks)
	cnt   []uint32   // gb_auc_local's counters
}

// exactAUC computes the AUC of pred (rows × k probabilities) over all ranks.
func exactAUC(ctx context.Context, c Collective, p *Params, d *Dataset, pred []float32, wscale float64, sc *aucScratch) (float64, error) {
	if sc == nil {
		sc = &aucScratch{}
	}
	k := p.groups()
	for len(sc.lists) < k {
		sc.lists = append(sc.lists, aucList{})
	}
	size := c.Size()
	parts := [][]aucList{sc.lists[:k]}
	for cl := range k {
		sc.localList(&sc.lists[cl], d, pred, k, cl, wscale)
	}
	me := c.Rank()
	// The key range's cuts: rank r merges [cuts[r], cuts[r+1]) of every
	// list. Quantiles of the longest list (the lowest rank's of equal
	// lengths): this call's on one rank; the last call's (the same on every
	// rank) on several, so that a rank sends only the parts of its list
	// the others merge.
	cuts := make([][]uint64, k)
	negBelow := make([]uint64, k)
	if size == 1 {
		for cl := range k {
			cuts[cl] = quantileCuts(&sc.lists[cl], 1)
		}
	} else {
		partial := len(sc.cuts) == k
		// Per class: n, P, N, the list's size-1 quantile keys, and with
		// the last cuts the negatives below each of them (size+1); then
		// the list, or its entries outside this rank's part (two lists).
		hdr := 3 + size - 1
		if partial {
			hdr += size + 1
		}
		sc.enc = sc.enc[:0]
		for cl := range k {
			l := &sc.lists[cl]
			sc.enc = binary.LittleEndian.AppendUint64(sc.enc, uint64(l.size()))
			sc.enc = binary.LittleEndian.AppendUint64(sc.enc, l.P)
			sc.enc = binary.LittleEndian.AppendUint64(sc.enc, l.N)
			for j := 1; j < size; j++ {
				var q uint64
				if l.size() > 0 {
					q = uint64(l.keyAt(j * l.size() / size))
				}
				sc.enc = binary.LittleEndian.AppendUint64(sc.enc, q)
			}
			if partial {
				var nb uint64
				at := 0
				for _, cut := range sc.cuts[cl] {
					if cut > math.MaxUint32 {
						nb = l.N // the last cut: no scan
					} else {
						i := max(at, l.lower(cut))
						nb += l.negIn(at, i)
						at = i
					}
					sc.enc = binary.LittleEndian.AppendUint64(sc.enc, nb)
				}
			}
		}
		for cl := range k {
			l := &sc.lists[cl]
			if !partial {
				sc.enc = appendAUCList(sc.enc, l)
				continue
			}
			i, j := partRange(l, sc.cuts[cl][me], sc.cuts[cl][me+1])
			below, above := l.slice(0, i), l.slice(j, l.size())
			sc.enc = appendAUCList(sc.enc, &below)
			sc.enc = appendAUCList(sc.enc, &above)
		}
		all, err := c.AllGather(ctx, sc.enc)
		if err != nil {
			return 0, fmt.Errorf("gbdt: AUC: all-gather: %w", err)
		}
		nlists := k
		if partial {
			nlists = 2 * k
		}
		parts = make([][]aucList, size)
		heads := make([][]uint64, size)
		for r, b := range all {
			if len(b) < 8*hdr*k {
				return 0, fmt.Errorf("gbdt: AUC: rank %d sent %d bytes, fewer than the %d of the headers", r, len(b), 8*hdr*k)
			}
			h := make([]uint64, hdr*k)
			for i := range h {
				h[i] = binary.LittleEndian.Uint64(b[8*i:])
			}
			heads[r] = h
			if r == me {
				parts[r] = sc.lists[:k]
				continue
			}
			for len(sc.wire) <= r {
				sc.wire = append(sc.wire, nil)
			}
			ls, buf, err := decodeAUCLists(b[8*hdr*k:], nlists, sc.wire[r])
			sc.wire[r] = buf
			if err != nil {
				return 0, fmt.Errorf("gbdt: AUC: rank %d's lists: %w", r, err)
			}
			if partial {
				// The list holding this rank's part: below the sender's
				// part or above it.
				for cl := range k {
					i := 2*cl + 1
					if me < r {
						i = 2 * cl
					}
					ls[cl] = ls[i]
				}
				ls = ls[:k]
			}
			for cl := range k {
				ls[cl].P, ls[cl].N = h[hdr*cl+1], h[hdr*cl+2]
			}
			parts[r] = ls
		}
		// This call's cuts and the negatives below this rank's part.
		next := make([][]uint64, k)
		for cl := range k {
			longest := 0
			for r := range size {
				if heads[r][hdr*cl] > heads[longest][hdr*cl] {
					longest = r
				}
			}
			q := make([]uint64, size+1)
			q[size] = math.MaxUint32 + 1
			copy(q[1:size], heads[longest][hdr*cl+3:hdr*cl+3+size-1])
			if heads[longest][hdr*cl] > 0 {
				next[cl] = q
			}
			if !partial {
				cuts[cl] = next[cl]
				if cuts[cl] != nil {
					for _, ls := range parts {
						negBelow[cl] += ls[cl].negIn(0, ls[cl].lower(cuts[cl][me]))
					}
				}
				continue
			}
			cuts[cl] = sc.cuts[cl]
			for r := range size {
				negBelow[cl] += heads[r][hdr*cl+3+size-1+me]
			}
		}
		sc.cuts = next
		for _, q := range next {
			if q == nil {
				sc.cuts = nil // an empty class: every list whole next time
			}
		}
	}
	// This rank's part of every class's area, then everyone's.
	areas := make([]byte, 0, 16*k)
	for cl := range k {
		var hi, lo uint64
		if cuts[cl] != nil {
			hi, lo = sc.partArea(parts, cl, cuts[cl][me], cuts[cl][me+1], negBelow[cl])
		}
		areas = binary.LittleEndian.AppendUint64(areas, hi)
		areas = binary.LittleEndian.AppendUint64(areas, lo)
	}
	all := [][]byte{areas}
	if size > 1 {
		var err error
		if all, err = c.AllGather(ctx, areas); err != nil {
			return 0, fmt.Errorf("gbdt: AUC: all-gather of areas: %w", err)
		}
	}
	var num, den float64
	for cl := range k {
		var hi, lo uint64
		var P, N uint64
		for r, b := range all {
			if len(b) != 16*k {
				return 0, fmt.Errorf("gbdt: AUC: rank %d sent %d bytes of areas, want %d", r, len(b), 16*k)
			}
			var carry uint64
			lo, carry = bits.Add64(lo, binary.LittleEndian.Uint64(b[16*cl+8:]), 0)
			hi, _ = bits.Add64(hi, binary.LittleEndian.Uint64(b[16*cl:]), carry)
			P += parts[r][cl].P
			N += parts[r][cl].N
		}
		if P == 0 || N == 0 {
			if k == 1 {
				return math.NaN(), nil
			}
			continue
		}
		area := float64(hi)*0x1p64 + float64(lo)
		auc := area / (2 * float64(P) * float64(N))
		if k == 1 {
			return auc, nil
		}
		num += auc * float64(P)
		den += float64(P)
	}
	if den == 0 {
		return math.NaN(), nil
	}
	return num / den, nil
}

// localList fills l with this rank's rows of class cl.
func (sc *aucScratch) localList(l *aucList, d *Dataset, pred []float32, k, cl int, wscale float64) {
	n := d.Rows
	l.reset()
	weighted := wscale > 0
	if useC && !weighted && n > 0 {
		if sc.cnt == nil {
			sc.cnt = make([]uint32, 1<<16)
		}
		if cap(l.rbuf[0]) < n {
			l.rbuf = [2][]uint32{make([]uint32, n), make([]uint32, n)}
		}
		if rows, P, ok := aucRowsC(pred, d.Label, n, k, cl, l.rbuf[0][:n], l.rbuf[1][:n], sc.cnt); ok {
			l.byRow, l.rows, l.P, l.N = true, rows, P, uint64(n)-P
			return
		}
	}
	if cap(sc.a) < n {
		sc.a, sc.b = make([]uint64, n), make([]uint64, n)
	}
	if cap(l.k) < n {
		l.k, l.pos, l.neg = make([]uint32, n), make([]uint64, n), make([]uint64, n)
	}
	if useC && !weighted && n > 0 {
		m := aucLocalC(pred, d.Label, n, k, cl, sc.a[:n], sc.b[:n], l.k[:n], l.pos[:n], l.neg[:n], sc.cnt)
		l.k, l.pos, l.neg = l.k[:m], l.pos[:m], l.neg[:m]
		l.sums()
		return
	}
	a := sc.a[:n]
	// Unweighted, the low half carries whether the row is positive;
	// weighted, the row (for its label and weight).
	for i := range n {
		low := uint64(i)
		if !weighted {
			low = 0
			if positive(d.Label[i], k, cl) {
				low = 1
			}
		}
		a[i] = uint64(key(pred[i*k+cl]))<<32 | low
	}
	a = radixSortHi(a, sc.b[:n])
	ks, ps, ns := l.k[:n], l.pos[:n], l.neg[:n]
	m := -1 // the last entry
	for _, x := range a {
		kk := uint32(x >> 32)
		if m < 0 || ks[m] != kk {
			m++
			ks[m], ps[m], ns[m] = kk, 0, 0
		}
		if !weighted {
			// x&1: positive. Branch-free: most neighbours differ.
			p := x & 1
			ps[m] += p
			ns[m] += 1 - p
			continue
		}
		i := int(uint32(x))
		w := uint64(math.RoundToEven(d.weight(i) * wscale))
		if positive(d.Label[i], k, cl) {
			ps[m] += w
		} else {
			ns[m] += w
		}
	}
	l.k, l.pos, l.neg = ks[:m+1], ps[:m+1], ns[:m+1]
	l.sums()
}

// sums sets P and N.
func (l *aucList) sums() {
	var P, N uint64
	for e := range l.k {
		P += l.pos[e]
		N += l.neg[e]
	}
	l.P, l.N = P, N
}

func positive(y float32, k, cl int) bool {
	if k > 1 {
		return int(y) == cl
	}
	return y >= 0.5
}

// radixSortHi sorts a by the upper 32 bits of its elements (a stable LSD
// radix sort in three passes of 11, 11 and 10 bits, skipping the passes
// whose digit every element shares), using tmp (len(a)) as its other
// buffer; it returns the sorted slice, which is a or tmp.
func radixSortHi(a, tmp []uint64) []uint64 {
	if len(a) < 2 {
		return a
	}
	const bits = 11
	var cnt [3][1 << bits]int
	for _, x := range a {
		cnt[0][(x>>32)&(1<<bits-1)]++
		cnt[1][(x>>(32+bits))&(1<<bits-1)]++
		cnt[2][x>>(32+2*bits)]++
	}
	for pass := range 3 {
		shift := 32 + bits*uint(pass)
		c := &cnt[pass]
		if c[(a[0]>>shift)&(1<<bits-1)] == len(a) {
			continue
		}
		sum := 0
		for d, v := range c {
			c[d] = sum
			sum += v
		}
		for _, x := range a {
			d := (x >> shift) & (1<<bits - 1)
			tmp[c[d]] = x
			c[d]++
		}
		a, tmp = tmp, a
	}
	return a
}

// quantileCuts is the cuts of one rank's part of the key range of l: all
// of it (nil when l is empty).
func quantileCuts(l *aucList, size int) []uint64 {
	if l.size() == 0 {
		return nil
	}
	q := make([]uint64, size+1)
	for j := 1; j < size; j++ {
		q[j] = uint64(l.keyAt(j * l.size() / size))
	}
	q[size] = math.MaxUint32 + 1
	return q
}

// partRange is the index range of l's entries with keys in [from, to).
func partRange(l *aucList, from, to uint64) (i, j int) {
	i = l.lower(from)
	return i, max(i, l.lower(to))
}

// partArea merges the entries of class cl's lists (one a rank) with keys
// in [from, to), above negBelow negatives, and returns their part of area2
// (hi, lo).
func (sc *aucScratch) partArea(parts [][]aucList, cl int, from, to, negBelow uint64) (hi, lo uint64) {
	subs := sc.subs[:0]
	for _, ls := range parts {
		l := &ls[cl]
		i, j := partRange(l, from, to)
		if i < j {
			subs = append(subs, l.slice(i, j))
		}
	}
	sc.subs = subs
	byRow := len(subs) <= 2
	for s := range subs {
		byRow = byRow && subs[s].byRow
	}
	if byRow {
		var a, b []uint32
		if len(subs) > 0 {
			a = subs[0].rows
		}
		if len(subs) > 1 {
			b = subs[1].rows
		}
		if useC {
			return aucRowsAreaC(a, b, negBelow)
		}
		return aucRowsArea(a, b, negBelow)
	}
	for s := range subs {
		if subs[s].byRow {
			subs[s] = subs[s].entries() // several ranks' rows: entries
		}
	}
	if useC && len(subs) == 2 {
		return aucMerge2C(&subs[0], &subs[1], negBelow)
	}
	// Walk the lists in key order at once: the smallest head key, the
	// weights of every list at it.
	var at []int
	if len(subs) <= len(sc.at) {
		at = sc.at[:len(subs)]
		clear(at)
	} else {
		at = make([]int, len(subs))
		sc.at = at
	}
	for {
		kmin := uint64(math.MaxUint32 + 1)
		for s := range subs {
			if at[s] < len(subs[s].k) {
				kmin = min(kmin, uint64(subs[s].k[at[s]]))
			}
		}
		if kmin > math.MaxUint32 {
			break
		}
		var pos, neg uint64
		for s := range subs {
			if i := at[s]; i < len(subs[s].k) && uint64(subs[s].k[i]) == kmin {
				pos += subs[s].pos[i]
				neg += subs[s].neg[i]
				at[s]++
			}
		}
		if pos != 0 {
			h, l := bits.Mul64(pos, 2*negBelow+neg)
			var carry uint64
			lo, carry = bits.Add64(lo, l, 0)
			hi += h + carry
		}
		negBelow += neg
	}
	return hi, lo
}

// aucRowsArea is partArea's merge of two lists of rows (b may be empty):
// the rows of one key are one entry, area2 += pos·(2·negBelow + neg).
func aucRowsArea(a, b []uint32, negBelow uint64) (hi, lo uint64) {
	var cp, cn uint64 // the current key's positives and negatives
	var ck uint32
	flush := func() {
		h, l := bits.Mul64(cp, 2*negBelow+cn)
		var carry uint64
		lo, carry = bits.Add64(lo, l, 0)
		hi += h + carry
		negBelow += cn
		cp, cn = 0, 0
	}
	add := func(x uint32) {
		if x>>1 != ck {
			flush()
		}
		cp += uint64(x & 1)
		cn += uint64(^x & 1)
		ck = x >> 1
	}
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		if a[i]>>1 <= b[j]>>1 {
			add(a[i])
			i++
		} else {
			add(b[j])
			j++
		}
	}
	for _, x := range a[i:] {
		add(x)
	}
	for _, x := range b[j:] {
		add(x)
	}
	flush()
	return hi, lo
}

// lowerBound is the first index of k whose key is >= x.
func lowerBound(k []uint32, x uint64) int {
	i, _ := slices.BinarySearchFunc(k, x, func(a uint32, b uint64) int {
		switch {
		case uint64(a) < b:
			return -1
		case uint64(a) > b:
			return 1
		}
		return 0
	})
	return i
}

// The wire form of a list, little-endian: n, P, N, e (uint64), k[n]
// (uint32), tag[n] (a byte: pos | neg << 1 for one positive or one
// negative, 3 for the next of the e other entries), zeros to a multiple of
// 8 bytes, then those e entries' pos[e] and neg[e] (uint64). Unweighted
// rows of distinct predictions take 5 bytes an entry instead of 20. A list
// by row has e = 2^64-1 and its rows (uint32, x = key<<1 | positive),
// zeros to a multiple of 8 bytes: 4 bytes a row, nothing to tag or decode.

var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

const byRowTag = math.MaxUint64

func appendAUCList(enc []byte, l *aucList) []byte {
	n := l.size()
	enc = binary.LittleEndian.AppendUint64(enc, uint64(n))
	enc = binary.LittleEndian.AppendUint64(enc, l.P)
	enc = binary.LittleEndian.AppendUint64(enc, l.N)
	if l.byRow {
		enc = binary.LittleEndian.AppendUint64(enc, byRowTag)
		if n == 0 {
			return enc
		}
		return append(appendUint32s(enc, l.rows), make([]byte, (8-(4*n)%8)%8)...)
	}
	head := len(enc)
	enc = binary.LittleEndian.AppendUint64(enc, 0) // e, below
	if n == 0 {
		return enc
	}
	enc = appendUint32s(enc, l.k)
	at := len(enc)
	need := n + (8-(5*n)%8)%8
	enc = slices.Grow(enc, need)[:at+need]
	clear(enc[at+n:])
	tags := enc[at : at+n]
	pos, neg := l.pos[:n], l.neg[:n]
	e := 0
	if useC {
		e = aucTagsC(pos, neg, tags)
	} else {
		for i := range tags {
			p, q := pos[i], neg[i]
			if p+q == 1 && p <= 1 {
				tags[i] = byte(p | q<<1)
			} else {
				tags[i] = 3
				e++
			}
		}
	}
	binary.LittleEndian.PutUint64(enc[head:], uint64(e))
	if e > 0 {
		for _, x := range [][]uint64{pos, neg} {
			for i, t := range enc[at : at+n] {
				if t == 3 {
					enc = binary.LittleEndian.AppendUint64(enc, x[i])
				}
			}
		}
	}
	return enc
}

// appendUint32s appends v little-endian (a copy of its bytes on a
// little-endian machine).
func appendUint32s(enc []byte, v []uint32) []byte {
	if len(v) == 0 {
		return enc
	}
	if littleEndian {
		return append(enc, unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 4*len(v))...)
	}
	for _, x := range v {
		enc = binary.LittleEndian.AppendUint32(enc, x)
	}
	return enc
}

// decodeAUCLists reads k lists; their pos and neg live in buf (grown as
// needed and returned: the lists are valid until buf is reused). On a
// little-endian machine the keys are views of b.
func decodeAUCLists(b []byte, k int, buf []uint64) ([]aucList, []uint64, error) {
	if len(b) > 0 && uintptr(unsafe.Pointer(&b[0]))%8 != 0 {
		b = append(make([]byte, 0, len(b)+8), b...)
	}
	out := make([]aucList, k)
	type span struct{ n, e, keys, tags, esc int }
	spans := make([]span, k)
	o, total := 0, 0
	for cl := range k {
		if len(b)-o < 32 {
			return nil, buf, errors.New("cut short")
		}
		n64, e64 := binary.LittleEndian.Uint64(b[o:]), binary.LittleEndian.Uint64(b[o+24:])
		l := &out[cl]
		l.P, l.N = binary.LittleEndian.Uint64(b[o+8:]), binary.LittleEndian.Uint64(b[o+16:])
		o += 32
		if e64 == byRowTag {
			if n64 > uint64(len(b)-o)/4 {
				return nil, buf, fmt.Errorf("cut short: %d rows in %d bytes", n64, len(b)-o)
			}
			n := int(n64)
			l.byRow = true
			switch {
			case n == 0:
			case littleEndian:
				l.rows = unsafe.Slice((*uint32)(unsafe.Pointer(&b[o])), n)
			default:
				l.rows = make([]uint32, n)
				for i := range n {
					l.rows[i] = binary.LittleEndian.Uint32(b[o+4*i:])
				}
			}
			if i := aucRowsOrder(l.rows); i >= 0 {
				return nil, buf, fmt.Errorf("row %d of class %d is out of order", i, cl)
			}
			o += 4*n + (8-(4*n)%8)%8
			if o > len(b) {
				return nil, buf, errors.New("cut short")
			}
			continue
		}
		if n64 > uint64(len(b)-o)/5 || e64 > n64 {
			return nil, buf, fmt.Errorf("cut short: %d entries (%d escaped) in %d bytes", n64, e64, len(b)-o)
		}
		n, e := int(n64), int(e64)
		if n == 0 {
			continue
		}
		sp := span{n: n, e: e, keys: o, tags: o + 4*n}
		o += 5*n + (8-(5*n)%8)%8
		sp.esc = o
		o += 16 * e
		if o > len(b) {
			return nil, buf, errors.New("cut short")
		}
		spans[cl] = sp
		total += 2 * n
	}
	if o != len(b) {
		return nil, buf, fmt.Errorf("%d bytes after the lists", len(b)-o)
	}
	if cap(buf) < total {
		buf = make([]uint64, total)
	}
	buf = buf[:total]
	at := 0
	for cl, sp := range spans {
		if sp.n == 0 {
			continue
		}
		l := &out[cl]
		n := sp.n
		if littleEndian {
			l.k = unsafe.Slice((*uint32)(unsafe.Pointer(&b[sp.keys])), n)
		} else {
			l.k = make([]uint32, n)
			for i := range n {
				l.k[i] = binary.LittleEndian.Uint32(b[sp.keys+4*i:])
			}
		}
		l.pos, l.neg = buf[at:at+n:at+n], buf[at+n:at+2*n:at+2*n]
		at += 2 * n
		tags := b[sp.tags : sp.tags+n]
		pos, neg := l.pos[:n], l.neg[:n]
		if useC {
			e := aucUntagC(tags, l.k, pos, neg)
			switch {
			case e < -n:
				return nil, buf, fmt.Errorf("entry %d of class %d is out of order", -1-n-e, cl)
			case e < 0:
				return nil, buf, fmt.Errorf("class %d: entry %d has tag %d", cl, -1-e, tags[-1-e])
			case e != sp.e:
				return nil, buf, fmt.Errorf("class %d: %d escaped entries, header says %d", cl, e, sp.e)
			}
			if e > 0 {
				j := 0
				for i, t := range tags {
					if t == 3 {
						pos[i] = binary.LittleEndian.Uint64(b[sp.esc+8*j:])
						neg[i] = binary.LittleEndian.Uint64(b[sp.esc+8*(sp.e+j):])
						j++
					}
				}
			}
			continue
		}
		j := 0
		for i, t := range tags {
			if t-1 < 2 { // 1 or 2
				pos[i], neg[i] = uint64(t&1), uint64(t>>1)
				continue
			}
			if t != 3 {
				return nil, buf, fmt.Errorf("class %d: entry %d has tag %d", cl, i, t)
			}
			if j == sp.e {
				return nil, buf, fmt.Errorf("class %d: %d escaped entries, header says %d", cl, j+1, sp.e)
			}
			pos[i] = binary.LittleEndian.Uint64(b[sp.esc+8*j:])
			neg[i] = binary.LittleEndian.Uint64(b[sp.esc+8*(sp.e+j):])
			j++
		}
		if j != sp.e {
			return nil, buf, fmt.Errorf("class %d: %d escaped entries, header says %d", cl, j, sp.e)
		}
		for i := 1; i < n; i++ {
			if l.k[i] <= l.k[i-1] {
				return nil, buf, fmt.Errorf("entry %d of class %d is out of order", i, cl)
			}
		}
	}
	return out, buf, nil
}
