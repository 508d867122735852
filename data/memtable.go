package data

import "github.com/tempotrain/tempotrain/data/format"

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
			t.blocks[k].Transpose(vals[at*w:], w)
			at += t.blocks[k].N
			t.blocks[k] = nil
		}
		blocks = append(blocks, &format.Block{N: n, Num: make([][]float32, w), Cat: make([][]int32, w), Vals: vals, Width: w})
		starts = append(starts, starts[len(starts)-1]+n)
		i = j
	}
	t.blocks, t.starts = blocks, starts
}
