package data

import (
	"math"
	"sort"

	"github.com/tempotrain/tempotrain/data/format"
)

// gather copies rows ids of t into b from row at on, the slots in want
// (all when nil). It goes column by column: the loads of one column do not
// depend on each other, so the processor overlaps their cache misses (a
// row at a time, a row's columns are far apart and the misses queue). sc
// holds each row's block and place in it when t has several blocks.
func gather(t *table, ids []int32, b *format.Batch, at int, want []bool, sc *gatherScratch) {
	n := len(ids)
	if n == 0 {
		return
	}
	if t.blocks[0].Vals != nil {
		gatherPacked(t, ids, b, at, want, sc)
		return
	}
	if len(t.blocks) == 1 {
		blk := t.blocks[0]
		for j := range b.Columns {
			if want != nil && !want[j] {
				continue
			}
			if b.Num[j] != nil {
				gatherOne(b.Num[j][at:at+n], blk.Num[j], ids)
			} else {
				gatherOne(b.Cat[j][at:at+n], blk.Cat[j], ids)
			}
		}
		if p := b.PixelsPerRow; p > 0 {
			for i, id := range ids {
				d, r := at+i, int(id)
				copy(b.Pixels[d*p:(d+1)*p], blk.Px[r*p:(r+1)*p])
			}
		}
		return
	}
	sc.blk, sc.row = grow(sc.blk, n), grow(sc.row, n)
	k := 0
	for i, id := range ids {
		r := int(id)
		if r < t.starts[k] || r >= t.starts[k+1] {
			k = sort.SearchInts(t.starts, r+1) - 1
		}
		sc.blk[i], sc.row[i] = int32(k), int32(r-t.starts[k])
	}
	for j := range b.Columns {
		if want != nil && !want[j] {
			continue
		}
		if b.Num[j] != nil {
			sc.num = sc.num[:0]
			for _, blk := range t.blocks {
				sc.num = append(sc.num, blk.Num[j])
			}
			gatherMany(b.Num[j][at:at+n], sc.num, sc.blk, sc.row)
		} else {
			sc.cat = sc.cat[:0]
			for _, blk := range t.blocks {
				sc.cat = append(sc.cat, blk.Cat[j])
			}
			gatherMany(b.Cat[j][at:at+n], sc.cat, sc.blk, sc.row)
		}
	}
	if p := b.PixelsPerRow; p > 0 {
		for i := range ids {
			d, r := at+i, int(sc.row[i])
			copy(b.Pixels[d*p:(d+1)*p], t.blocks[sc.blk[i]].Px[r*p:(r+1)*p])
		}
	}
	clear(sc.num)
	clear(sc.cat)
}

// gatherPacked is gather from packed blocks (every block of t is): a row
// at a time, its values read from one or two cache lines.
func gatherPacked(t *table, ids []int32, b *format.Batch, at int, want []bool, sc *gatherScratch) {
	sc.numJ, sc.catJ = sc.numJ[:0], sc.catJ[:0]
	for j := range b.Columns {
		switch {
		case want != nil && !want[j]:
		case b.Num[j] != nil:
			sc.numJ = append(sc.numJ, j)
		default:
			sc.catJ = append(sc.catJ, j)
		}
	}
	w := t.blocks[0].Width
	// The rows, one after the other (the random reads), then column by
	// column out of that, packRows rows at a time (in L1).
	sc.stage = grow(sc.stage, packRows*w)
	k, vals := 0, t.blocks[0].Vals
	lo, hi := t.starts[0], t.starts[1]
	for c := 0; c < len(ids); c += packRows {
		chunk := ids[c:min(c+packRows, len(ids))]
		m := len(chunk)
		stage := sc.stage[:m*w]
		for i, id := range chunk {
			r := int(id)
			if r < lo || r >= hi {
				k = sort.SearchInts(t.starts, r+1) - 1
				vals, lo, hi = t.blocks[k].Vals, t.starts[k], t.starts[k+1]
			}
			r -= lo
			copy(stage[i*w:i*w+w], vals[r*w:r*w+w])
		}
		d := at + c
		for _, j := range sc.numJ {
			col := b.Num[j][d : d+m]
			for i := range col {
				col[i] = math.Float32frombits(stage[i*w+j])
			}
		}
		for _, j := range sc.catJ {
			col := b.Cat[j][d : d+m]
			for i := range col {
				col[i] = int32(stage[i*w+j])
			}
		}
	}
}

// gatherScratch is gather's memory.
type gatherScratch struct {
	blk, row   []int32
	num        [][]float32
	cat        [][]int32
	numJ, catJ []int
	stage      []uint32
}

func gatherOne[T any](dst, src []T, ids []int32) {
	dst = dst[:len(ids)]
	for i, id := range ids {
		dst[i] = src[id]
	}
}

func gatherMany[T any](dst []T, srcs [][]T, blk, row []int32) {
	dst, row = dst[:len(blk)], row[:len(blk)]
	for i, k := range blk {
		dst[i] = srcs[k][row[i]]
	}
}
