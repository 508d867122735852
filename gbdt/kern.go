package gbdt

/*
#cgo CFLAGS: -O3
#cgo LDFLAGS: -lm
#include "kern.h"
*/
import "C"

import (
	"math"
	"unsafe"
)

// Each hot loop has a C version (kern.c) and a Go reference (…Go) that
// kern_test.go compares bit for bit. useC selects the C ones.
var useC = true

// binMatrix holds every row's bin codes, row-major, in uint8 when every
// feature's codes (bins, plus the missing code when it has missing values)
// fit, else uint16. A histogram has one slot per code: feature f's code c
// is slot off[f]+c.
type binMatrix struct {
	rows, cols int
	u8         []uint8
	u16        []uint16
	off        []uint32 // len cols+1
	miss       []int32  // per feature: its missing code (NumBins), or -1 without missing values
	// skip is each feature's most frequent code on this rank, which the C
	// histogram leaves out and recovers by subtraction (kern.c), when it
	// has at least skipShare of the rows; else 0xffff (none).
	skip []uint16
	// meta[f] is off[f] | skip[f] << 32 (0xffffffff for none), what the C
	// histograms read per feature.
	meta []uint64
	// c8, c16 are the codes column-major (feature f's at [f*rows:]), for
	// the C partition.
	c8  []uint8
	c16 []uint16
}

func newBinMatrix(cuts *Cuts, x []float32, rows, cols int) *binMatrix {
	m := &binMatrix{rows: rows, cols: cols, off: make([]uint32, cols+1), miss: make([]int32, cols)}
	wide := false
	for f := range cols {
		nb := cuts.NumBins(f)
		codes := nb
		m.miss[f] = -1
		if cuts.Missing[f] {
			codes++
			m.miss[f] = int32(nb)
		}
		if codes > 256 {
			wide = true
		}
		m.off[f+1] = m.off[f] + uint32(codes)
	}
	if wide {
		m.u16 = make([]uint16, rows*cols)
	} else {
		m.u8 = make([]uint8, rows*cols)
	}
	if useC {
		m.fillC(cuts, x)
		m.transposeC()
	} else {
		m.fillGo(cuts, x)
		m.transposeGo()
	}
	m.skip = make([]uint16, cols)
	var count []int
	for f := range cols {
		n := int(m.off[f+1] - m.off[f])
		if n < 2 {
			m.skip[f] = 0xffff // nothing to gain
			continue
		}
		count = append(count[:0], make([]int, n)...)
		for i := range rows {
			count[m.code(i, f)]++
		}
		best := 0
		for c, k := range count {
			if k > count[best] {
				best = c
			}
		}
		m.skip[f] = uint16(best)
		if float64(count[best]) < skipShare*float64(rows) {
			// A code of a smaller share costs more in mispredicted
			// branches than the additions it saves.
			m.skip[f] = 0xffff
		}
	}
	m.meta = make([]uint64, cols)
	for f := range cols {
		sk := uint64(m.skip[f])
		if m.skip[f] == 0xffff {
			sk = 0xffffffff
		}
		m.meta[f] = uint64(m.off[f]) | sk<<32
	}
	return m
}

// skipShare is the least share of a rank's rows a feature's most frequent
// code needs for the histogram kernels to skip it (binMatrix.skip): the
// branch on it is mispredicted for about 1 - share of the rows, about 15
// cycles each, against an addition of 1-2 saved for share of them.
var skipShare = 0.875

// slots is the number of histogram slots (bins and missing codes).
func (m *binMatrix) slots() int { return int(m.off[m.cols]) }

// code returns row i's code of feature f.
func (m *binMatrix) code(i, f int) int {
	if m.u8 != nil {
		return int(m.u8[i*m.cols+f])
	}
	return int(m.u16[i*m.cols+f])
}

func (m *binMatrix) fillGo(cuts *Cuts, x []float32) {
	F := m.cols
	for i := range m.rows {
		for f := range F {
			b := cuts.Bin(f, x[i*F+f])
			if m.u8 != nil {
				m.u8[i*F+f] = uint8(b)
			} else {
				m.u16[i*F+f] = uint16(b)
			}
		}
	}
}

func (m *binMatrix) fillC(cuts *Cuts, x []float32) {
	if m.rows == 0 || m.cols == 0 {
		return
	}
	vals := cuts.Values
	if len(vals) == 0 {
		vals = []float32{0}
	}
	xp := (*C.float)(unsafe.Pointer(&x[0]))
	vp := (*C.float)(unsafe.Pointer(&vals[0]))
	pp := (*C.uint32_t)(unsafe.Pointer(&cuts.Ptr[0]))
	if m.u8 != nil {
		C.gb_bin_u8(xp, C.long(m.rows), C.long(m.cols), vp, pp, (*C.uint8_t)(unsafe.Pointer(&m.u8[0])))
	} else {
		C.gb_bin_u16(xp, C.long(m.rows), C.long(m.cols), vp, pp, (*C.uint16_t)(unsafe.Pointer(&m.u16[0])))
	}
}

// transposeGo is transposeC's reference.
func (m *binMatrix) transposeGo() {
	if m.rows == 0 || m.cols == 0 {
		return
	}
	if m.u8 != nil {
		m.c8 = make([]uint8, len(m.u8))
	} else {
		m.c16 = make([]uint16, len(m.u16))
	}
	for i := range m.rows {
		for f := range m.cols {
			if m.u8 != nil {
				m.c8[f*m.rows+i] = m.u8[i*m.cols+f]
			} else {
				m.c16[f*m.rows+i] = m.u16[i*m.cols+f]
			}
		}
	}
}

// transposeC fills the column-major copy.
func (m *binMatrix) transposeC() {
	if m.rows == 0 || m.cols == 0 {
		return
	}
	if m.u8 != nil {
		m.c8 = make([]uint8, len(m.u8))
		C.gb_transpose_u8((*C.uint8_t)(unsafe.Pointer(&m.u8[0])), C.long(m.rows), C.long(m.cols), (*C.uint8_t)(unsafe.Pointer(&m.c8[0])))
	} else {
		m.c16 = make([]uint16, len(m.u16))
		C.gb_transpose_u16((*C.uint16_t)(unsafe.Pointer(&m.u16[0])), C.long(m.rows), C.long(m.cols), (*C.uint16_t)(unsafe.Pointer(&m.c16[0])))
	}
}

// hist adds rows' (g, h) pairs (gh[2r], gh[2r+1]) into hist (2 per slot)
// and returns their totals.
func (m *binMatrix) hist(rows []uint32, gh, hist []float64) (g, h float64) {
	if !useC {
		return m.histGo(rows, gh, hist)
	}
	if len(rows) == 0 || m.cols == 0 {
		for _, r := range rows {
			g += gh[2*r]
			h += gh[2*r+1]
		}
		return g, h
	}
	var tot [2]float64
	rp := (*C.uint32_t)(unsafe.Pointer(&rows[0]))
	gp := (*C.double)(unsafe.Pointer(&gh[0]))
	op := (*C.uint32_t)(unsafe.Pointer(&m.off[0]))
	sp := (*C.uint64_t)(unsafe.Pointer(&m.meta[0]))
	hp := (*C.double)(unsafe.Pointer(&hist[0]))
	tp := (*C.double)(unsafe.Pointer(&tot[0]))
	if m.u8 != nil {
		C.gb_hist_u8((*C.uint8_t)(unsafe.Pointer(&m.u8[0])), C.long(m.cols), rp, C.long(len(rows)), gp, op, sp, hp, tp)
	} else {
		C.gb_hist_u16((*C.uint16_t)(unsafe.Pointer(&m.u16[0])), C.long(m.cols), rp, C.long(len(rows)), gp, op, sp, hp, tp)
	}
	return tot[0], tot[1]
}

// histGo is hist's reference: every row into every feature's slot.
func (m *binMatrix) histGo(rows []uint32, gh, hist []float64) (tg, th float64) {
	F := m.cols
	for _, r := range rows {
		g, h := gh[2*r], gh[2*r+1]
		tg += g
		th += h
		for f := range F {
			s := 2 * (int(m.off[f]) + m.code(int(r), f))
			hist[s] += g
			hist[s+1] += h
		}
	}
	return tg, th
}

// partition reorders rows stably into those going left at a split on
// feature f after bin split (missing rows go left iff dleft), then those
// going right, and returns the number going left. scratch holds len(rows).
func (m *binMatrix) partition(rows []uint32, f, split int, dleft bool, scratch []uint32) int {
	if len(rows) == 0 {
		return 0
	}
	if !useC || m.c8 == nil && m.c16 == nil {
		return m.partitionGo(rows, f, split, dleft, scratch)
	}
	dl := C.int(0)
	if dleft {
		dl = 1
	}
	rp := (*C.uint32_t)(unsafe.Pointer(&rows[0]))
	sp := (*C.uint32_t)(unsafe.Pointer(&scratch[0]))
	if m.c8 != nil {
		return int(C.gb_partition_col_u8((*C.uint8_t)(unsafe.Pointer(&m.c8[f*m.rows])), rp, C.long(len(rows)), C.long(split), C.long(m.miss[f]), dl, sp))
	}
	return int(C.gb_partition_col_u16((*C.uint16_t)(unsafe.Pointer(&m.c16[f*m.rows])), rp, C.long(len(rows)), C.long(split), C.long(m.miss[f]), dl, sp))
}

func (m *binMatrix) partitionGo(rows []uint32, f, split int, dleft bool, scratch []uint32) int {
	nl, nr := 0, 0
	miss := int(m.miss[f])
	for _, r := range rows {
		c := m.code(int(r), f)
		left := c <= split
		if c == miss {
			left = dleft
		}
		if left {
			rows[nl] = r
			nl++
		} else {
			scratch[nr] = r
			nr++
		}
	}
	copy(rows[nl:], scratch[:nr])
	return nl
}

// goesLeft is the split rule on codes, for one row.
func (m *binMatrix) goesLeft(r, f, split int, dleft bool) bool {
	c := m.code(r, f)
	if c == int(m.miss[f]) {
		return dleft
	}
	return c <= split
}

// predictGo is the Forest's reference (forest.go): the same additions in
// the same order.
func predictGo(trees []*Tree, groups []int, x []float32, rows, cols, ngroup int, out []float32) {
	for i := range rows {
		xi := x[i*cols : (i+1)*cols]
		for t, tr := range trees {
			out[i*ngroup+groups[t]] += tr.leafValue(xi)
		}
	}
}

// bestSplitC is bestLocal's scan in C.
func (gr *grower) bestSplitC(n *gnode) split {
	if len(gr.feats) == 0 {
		return split{}
	}
	m := gr.m
	if len(gr.cfeats) != len(gr.feats) {
		gr.cfeats = make([]int64, len(gr.feats))
	}
	for i, f := range gr.feats {
		gr.cfeats[i] = int64(f)
	}
	prm := C.gb_params{mcw: C.double(gr.p.MinChildWeight), lambda: C.double(gr.p.Lambda), alpha: C.double(gr.p.Alpha), mds: C.double(gr.p.MaxDeltaStep)}
	var out C.gb_split
	C.gb_best_split((*C.double)(unsafe.Pointer(&n.hist[0])), (*C.uint32_t)(unsafe.Pointer(&m.off[0])),
		(*C.uint32_t)(unsafe.Pointer(&gr.cuts.Ptr[0])), (*C.int32_t)(unsafe.Pointer(&m.miss[0])), (*C.int64_t)(unsafe.Pointer(&gr.cfeats[0])), C.long(len(gr.feats)),
		C.double(n.g), C.double(n.h), C.double(gr.sg), C.double(gr.sh), &prm, &out)
	return split{gain: float64(out.gain), feat: int(out.feat), bin: int(out.bin), dleft: out.dleft != 0,
		gl: float64(out.gl), hl: float64(out.hl), ok: out.ok != 0}
}

// sub computes dst -= src.
func sub(dst, src []float64) {
	if len(dst) == 0 {
		return
	}
	if !useC {
		for i := range dst {
			dst[i] -= src[i]
		}
		return
	}
	C.gb_sub((*C.double)(unsafe.Pointer(&dst[0])), (*C.double)(unsafe.Pointer(&src[0])), C.long(len(dst)))
}

// quantise writes gh[2i], gh[2i+1] = the integers nearest g[i*k+j]·sg and
// h[i*k+j]·sh (ties to even).
func quantise(g, h []float64, n, k, j int, sg, sh float64, gh []float64) {
	if n == 0 {
		return
	}
	if !useC {
		for i := range n {
			gh[2*i] = math.RoundToEven(g[i*k+j] * sg)
			gh[2*i+1] = math.RoundToEven(h[i*k+j] * sh)
		}
		return
	}
	C.gb_quantise((*C.double)(unsafe.Pointer(&g[0])), (*C.double)(unsafe.Pointer(&h[0])), C.long(n), C.long(k), C.long(j),
		C.double(sg), C.double(sh), (*C.double)(unsafe.Pointer(&gh[0])))
}

// unpack splits a packed sum (g·2^32 + h, 0 ≤ h < 2^32) into g and h.
func unpack(v int64) (g, h float64) { return float64(v >> 32), float64(uint32(v)) }

// histPacked is hist on packed pairs (quantised training, gb_hist_packed_u8):
// it writes every slot's unpacked (g, h) into hist (2 per slot; acc, one
// int64 per slot, is its scratch) and returns the packed total.
func (m *binMatrix) histPacked(rows []uint32, gh []int64, acc []int64, hist []float64) int64 {
	if !useC || len(rows) == 0 || m.cols == 0 {
		return m.histPackedGo(rows, gh, acc, hist)
	}
	var tot int64
	rp := (*C.uint32_t)(unsafe.Pointer(&rows[0]))
	gp := (*C.int64_t)(unsafe.Pointer(&gh[0]))
	op := (*C.uint32_t)(unsafe.Pointer(&m.off[0]))
	sp := (*C.uint64_t)(unsafe.Pointer(&m.meta[0]))
	ap := (*C.int64_t)(unsafe.Pointer(&acc[0]))
	hp := (*C.double)(unsafe.Pointer(&hist[0]))
	tp := (*C.int64_t)(unsafe.Pointer(&tot))
	if m.u8 != nil {
		C.gb_hist_packed_u8((*C.uint8_t)(unsafe.Pointer(&m.u8[0])), C.long(m.cols), rp, C.long(len(rows)), gp, op, sp, ap, hp, tp)
	} else {
		C.gb_hist_packed_u16((*C.uint16_t)(unsafe.Pointer(&m.u16[0])), C.long(m.cols), rp, C.long(len(rows)), gp, op, sp, ap, hp, tp)
	}
	return tot
}

// histPackedGo is histPacked's reference: every row into every feature's
// slot.
func (m *binMatrix) histPackedGo(rows []uint32, gh []int64, acc []int64, hist []float64) int64 {
	acc = acc[:m.slots()]
	clear(acc)
	var tot int64
	for _, r := range rows {
		v := gh[r]
		tot += v
		for f := range m.cols {
			acc[int(m.off[f])+m.code(int(r), f)] += v
		}
	}
	for s, a := range acc {
		hist[2*s], hist[2*s+1] = unpack(a)
	}
	return tot
}

// quantisePacked writes gh[i] = g·2^32 + h, g and h the integers nearest
// g[i*k+j]·sg and h[i*k+j]·sh (ties to even; h ≥ 0).
func quantisePacked(g, h []float64, n, k, j int, sg, sh float64, gh []int64) {
	if n == 0 {
		return
	}
	if !useC {
		for i := range n {
			gh[i] = int64(math.RoundToEven(g[i*k+j]*sg))<<32 + int64(math.RoundToEven(h[i*k+j]*sh))
		}
		return
	}
	C.gb_quantise_packed((*C.double)(unsafe.Pointer(&g[0])), (*C.double)(unsafe.Pointer(&h[0])), C.long(n), C.long(k), C.long(j),
		C.double(sg), C.double(sh), (*C.int64_t)(unsafe.Pointer(&gh[0])))
}

// rowSums returns the sums over rows of gh[2r] and gh[2r+1].
func rowSums(gh []float64, rows []uint32) (g, h float64) {
	if !useC || len(rows) == 0 {
		for _, r := range rows {
			g += gh[2*r]
			h += gh[2*r+1]
		}
		return g, h
	}
	var out [2]float64
	C.gb_row_sums((*C.double)(unsafe.Pointer(&gh[0])), (*C.uint32_t)(unsafe.Pointer(&rows[0])), C.long(len(rows)), (*C.double)(unsafe.Pointer(&out[0])))
	return out[0], out[1]
}

// aucLocalC is localList's unweighted list in C (gb_auc_local): it fills
// ks, ps, ns and returns the number of entries; a, b and cnt (2^16) are its
// buffers.
func aucLocalC(pred, label []float32, n, k, cl int, a, b []uint64, ks []uint32, ps, ns []uint64, cnt []uint32) int {
	return int(C.gb_auc_local((*C.float)(unsafe.Pointer(&pred[0])), (*C.float)(unsafe.Pointer(&label[0])), C.long(n), C.long(k), C.long(cl),
		(*C.uint64_t)(unsafe.Pointer(&a[0])), (*C.uint64_t)(unsafe.Pointer(&b[0])), (*C.uint32_t)(unsafe.Pointer(&ks[0])),
		(*C.uint64_t)(unsafe.Pointer(&ps[0])), (*C.uint64_t)(unsafe.Pointer(&ns[0])), (*C.uint32_t)(unsafe.Pointer(&cnt[0]))))
}

// aucMerge2C is partArea's merge of two lists in C (gb_auc_merge2).
func aucMerge2C(a, b *aucList, negBelow uint64) (hi, lo uint64) {
	var out [2]uint64
	var z uint32
	var z64 uint64
	ka, pa, na := &z, &z64, &z64
	if len(a.k) > 0 {
		ka, pa, na = &a.k[0], &a.pos[0], &a.neg[0]
	}
	kb, pb, nb := &z, &z64, &z64
	if len(b.k) > 0 {
		kb, pb, nb = &b.k[0], &b.pos[0], &b.neg[0]
	}
	C.gb_auc_merge2((*C.uint32_t)(unsafe.Pointer(ka)), (*C.uint64_t)(unsafe.Pointer(pa)), (*C.uint64_t)(unsafe.Pointer(na)), C.long(len(a.k)),
		(*C.uint32_t)(unsafe.Pointer(kb)), (*C.uint64_t)(unsafe.Pointer(pb)), (*C.uint64_t)(unsafe.Pointer(nb)), C.long(len(b.k)),
		C.uint64_t(negBelow), (*C.uint64_t)(unsafe.Pointer(&out[0])))
	return out[0], out[1]
}

// aucTagsC is appendAUCList's tagging in C (gb_auc_tags); it returns the
// number of escaped entries.
func aucTagsC(pos, neg []uint64, tags []byte) int {
	return int(C.gb_auc_tags((*C.uint64_t)(unsafe.Pointer(&pos[0])), (*C.uint64_t)(unsafe.Pointer(&neg[0])), C.long(len(tags)),
		(*C.uint8_t)(unsafe.Pointer(&tags[0]))))
}

// aucUntagC is decodeAUCLists' reading of the tags 1 and 2 and its key
// order check in C (gb_auc_untag).
func aucUntagC(tags []byte, keys []uint32, pos, neg []uint64) int {
	return int(C.gb_auc_untag((*C.uint8_t)(unsafe.Pointer(&tags[0])), (*C.uint32_t)(unsafe.Pointer(&keys[0])), C.long(len(tags)),
		(*C.uint64_t)(unsafe.Pointer(&pos[0])), (*C.uint64_t)(unsafe.Pointer(&neg[0]))))
}

// aucRowsC is localList's list by row in C (gb_auc_rows): it sorts the
// rows' x = key << 1 | label into a or b and returns the sorted slice and
// the positive rows, or ok false when some prediction is outside [0, 2).
// cnt (2^16) is its buffer.
func aucRowsC(pred, label []float32, n, k, cl int, a, b, cnt []uint32) (rows []uint32, P uint64, ok bool) {
	var p C.uint64_t
	switch C.gb_auc_rows((*C.float)(unsafe.Pointer(&pred[0])), (*C.float)(unsafe.Pointer(&label[0])), C.long(n), C.long(k), C.long(cl),
		(*C.uint32_t)(unsafe.Pointer(&a[0])), (*C.uint32_t)(unsafe.Pointer(&b[0])), (*C.uint32_t)(unsafe.Pointer(&cnt[0])), &p) {
	case 0:
		return a[:n], uint64(p), true
	case 1:
		return b[:n], uint64(p), true
	}
	return nil, 0, false
}

// aucRowsAreaC is aucRowsArea in C (gb_auc_rows_area).
func aucRowsAreaC(a, b []uint32, negBelow uint64) (hi, lo uint64) {
	var out [2]uint64
	var z uint32
	pa, pb := &z, &z
	if len(a) > 0 {
		pa = &a[0]
	}
	if len(b) > 0 {
		pb = &b[0]
	}
	C.gb_auc_rows_area((*C.uint32_t)(unsafe.Pointer(pa)), C.long(len(a)), (*C.uint32_t)(unsafe.Pointer(pb)), C.long(len(b)),
		C.uint64_t(negBelow), (*C.uint64_t)(unsafe.Pointer(&out[0])))
	return out[0], out[1]
}

// aucRowsOrder is the first row of rows whose key is below the row
// before's, or -1 when they ascend (gb_auc_rows_order; Go without useC).
func aucRowsOrder(rows []uint32) int {
	if !useC || len(rows) == 0 {
		for i := 1; i < len(rows); i++ {
			if rows[i]>>1 < rows[i-1]>>1 {
				return i
			}
		}
		return -1
	}
	return int(C.gb_auc_rows_order((*C.uint32_t)(unsafe.Pointer(&rows[0])), C.long(len(rows))))
}
