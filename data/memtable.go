package data

import (
	"unsafe"

	"github.com/tempotrain/tempotrain/data/format"
)

// table is rows in memory as a sequence of blocks.
type table struct {
	blocks []*format.Block
	starts []int // starts[i] is the first row of blocks[i]; len(blocks)+1 entries
}

func (t *table) rows() int {
	if len(t.starts) == 0 {
		return 0
	}
	return t.starts[len(t.starts)-1]
}

func (t *table) add(b *format.Block) {
	if len(t.starts) == 0 {
		t.starts = append(t.starts, 0)
	}
	t.blocks = append(t.blocks, b)
	t.starts = append(t.starts, t.starts[len(t.starts)-1]+b.N)
}

func (t *table) memBytes() int64 {
	var n int64
	for _, b := range t.blocks {
		n += b.MemBytes()
	}
	return n
}

// pack turns the table row-major (blocks with vals), for gathers of rows
// in random order: a row's values then share one or two cache lines, where
// a column each puts every value of a row in a line of its own. Blocks are
// packed into chunks of about chunkBytes or more (fewer blocks for a
// gather to find its rows in), one chunk at a time: the live memory grows
// by a chunk at most meanwhile. Tables of images stay as they are (a row is its
// pixels already).
func (t *table) pack(chunkBytes int64) {
	if len(t.blocks) == 0 || t.blocks[0].Px != nil || t.blocks[0].Width > 0 {
		return
	}
	w := len(t.blocks[0].Num)
	chunk := int(max(1, chunkBytes/int64(4*w)))
	var blocks []*format.Block
	starts := []int{0}
	for i := 0; i < len(t.blocks); {
		j, n := i, 0
		for j < len(t.blocks) && (j == i || n < chunk) {
			n += t.blocks[j].N
			j++
		}
		vals := make([]uint32, n*w)
		at := 0
		for k := i; k < j; k++ {
			transpose(t.blocks[k], vals[at*w:], w)
			at += t.blocks[k].N
			t.blocks[k] = nil
		}
		blocks = append(blocks, &format.Block{N: n, Num: make([][]float32, w), Cat: make([][]int32, w), Vals: vals, Width: w})
		starts = append(starts, starts[len(starts)-1]+n)
		i = j
	}
	t.blocks, t.starts = blocks, starts
}

// packRows is how many rows transpose and gather move at a time: their
// cache lines stay in L1 while every column is copied.
const packRows = 64

// packChunkBytes is about the most a packed block of a table holds (see
// table.pack).
const packChunkBytes = 8 << 20

// transpose writes block b's rows row-major into dst (w slots a row),
// packRows rows at a time: the columns' values for them stay in L1 and the
// rows are written one after the other.
func transpose(b *format.Block, dst []uint32, w int) {
	dst = dst[:b.N*w]
	cols := make([][]uint32, w)
	for j := range w {
		if c := b.Num[j]; c != nil {
			cols[j] = bitsOf(c)
		} else if c := b.Cat[j]; c != nil {
			cols[j] = bitsOf(c)
		} else {
			cols[j] = make([]uint32, b.N) // a slot not read: zeros
		}
	}
	part := make([][]uint32, w)
	for lo := 0; lo < b.N; lo += packRows {
		hi := min(b.N, lo+packRows)
		for j, c := range cols {
			part[j] = c[lo:hi]
		}
		for r := range hi - lo {
			row := dst[(lo+r)*w : (lo+r)*w+w]
			for j, c := range part[:len(row)] {
				row[j] = c[r]
			}
		}
	}
}

// bitsOf views float32s or int32s as their bits (the same memory).
func bitsOf[T float32 | int32](v []T) []uint32 {
	return unsafe.Slice((*uint32)(unsafe.Pointer(unsafe.SliceData(v))), len(v))
}
