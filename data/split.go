package data

import "fmt"

// split is how the rest of an epoch is shared among the ranks, from
// position start of the epoch's order on: the way Loader and Shard (in
// memory) lay out an epoch, and what lets a checkpoint taken at one world
// size or batch size resume at another.
//
// The rest of the epoch, left rows, is taken a step at a time: step k of
// the split consumes the block of global rows [start+k·global,
// start+(k+1)·global) of the order, and rank r takes the block's rows at
// offsets r, r+world, r+2·world, ... So after k steps the rows consumed over
// all ranks are exactly a prefix of the order, start+k·global rows, whatever
// the world size: a split that starts there, with another world or batch,
// continues the epoch with every row still seen once. With per-rank batches
// of b rows (global = b·world) rank r takes rows r, r+world, ... of the
// order, the usual strided shard (DistributedSampler's). A global batch that
// the world does not divide spreads its remainder: ranks r < global%world
// take one row more per step.
//
// The last block, of L < global rows, is padded (remainder "pad": to the
// next multiple of world, with rows from the start of the order again, as
// DistributedSampler pads), cut (remainder "drop": to the multiple of world
// below), or split as it is (remainder "exact": ranks may then take
// different numbers of rows and steps); with dropLast it is dropped
// altogether unless it is still a whole global batch (under exact, each
// rank drops its own last batch unless it is whole, and all do when rank
// 0 does).
type split struct {
	start  int64 // position of the order the split starts at
	left   int64 // rows of the order from start to its end (≥ 0)
	global int64 // rows per step over all ranks
	world  int64
	rem    string // "pad", "drop" or "exact"
	// dropLast drops a last block smaller than global.
	dropLast bool
}

func newSplit(total, start int64, global, world int, rem string, dropLast bool) split {
	return split{start: start, left: max(0, total-start), global: int64(global), world: int64(world), rem: rem, dropLast: dropLast}
}

// full is the number of whole blocks.
func (p split) full() int64 { return p.left / p.global }

// last is the size of the last block, after padding or cutting (0: none).
func (p split) last() int64 {
	l := p.lastRaw()
	if p.dropLast && l < p.global && p.rem != "exact" {
		return 0
	}
	return l
}

// lastRaw is last before dropLast.
func (p split) lastRaw() int64 {
	l := p.left - p.full()*p.global
	switch p.rem {
	case "pad":
		l = (l + p.world - 1) / p.world * p.world
	case "drop":
		l = l / p.world * p.world
	}
	return l
}

// batch is rank r's rows in a whole block.
func (p split) batch(r int) int64 {
	b := p.global / p.world
	if int64(r) < p.global%p.world {
		b++
	}
	return b
}

// maxBatch is the largest number of rows a rank takes in a step.
func (p split) maxBatch() int64 { return (p.global + p.world - 1) / p.world }

// lastShare is rank r's rows in the last block.
func (p split) lastShare(r int) int64 {
	l := p.last()
	if int64(r) >= l {
		return 0
	}
	n := (l - int64(r) + p.world - 1) / p.world
	if p.dropLast && p.rem == "exact" && (n < p.batch(r) || (l+p.world-1)/p.world < p.batch(0)) {
		// A rank's own partial batch (the ranks' steps differ anyway), and
		// every rank's when rank 0's is: rank 0 takes the most steps, and
		// its position is the one saved.
		return 0
	}
	return n
}

// rows is the number of rows rank r takes.
func (p split) rows(r int) int64 { return p.full()*p.batch(r) + p.lastShare(r) }

// steps is the number of steps rank r takes.
func (p split) steps(r int) int64 {
	s := p.full()
	if p.lastShare(r) > 0 {
		s++
	}
	return s
}

// rangeRows is the number of rows rank r is given when the split's rows
// are cut into contiguous ranges (a stream): its rows, and those of a last
// batch dropLast drops.
func (p split) rangeRows(r int) int64 {
	n := p.full() * p.batch(r)
	if l := p.lastRaw(); int64(r) < l {
		n += (l - int64(r) + p.world - 1) / p.world
	}
	return n
}

// before is where rank r's contiguous range starts: the rows given to the
// ranks before it.
func (p split) before(r int) int64 {
	var n int64
	for q := range r {
		n += p.rangeRows(q)
	}
	return n
}

// batchAt is the size of rank r's batch after it took pos of its rows (0
// at the end).
func (p split) batchAt(r int, pos int64) int64 {
	if b := p.batch(r); pos < p.full()*b {
		return b
	}
	return max(0, p.rows(r)-pos)
}

// stepRows is the number of rows all ranks take in the step rank r takes
// after pos of its rows: global in a whole block, the last block's size in
// the last.
func (p split) stepRows(r int, pos int64) int64 {
	if pos < p.full()*p.batch(r) {
		return p.global
	}
	return p.last()
}

// consumed is the position of the order reached after rank r's first k
// steps: start plus the rows the ranks took, padding included; once r took
// all its steps, at least the order's length, so that a split started
// there has nothing left. (Under remainder exact a rank without rows in the
// last block ends a step before the others: rank 0's position is the one
// to save.)
func (p split) consumed(r int, k int64) int64 {
	if k < p.steps(r) {
		return p.start + k*p.global
	}
	return max(p.start+p.full()*p.global+p.last(), p.start+p.left)
}

// offsets calls fn with the positions of the order (from start, not
// wrapped) of rank r's rows, in the order the rank takes them.
func (p split) offsets(r int, fn func(off int64)) {
	b := p.batch(r)
	for k := int64(0); k < p.full(); k++ {
		base := k*p.global + int64(r)
		for j := int64(0); j < b; j++ {
			fn(base + j*p.world)
		}
	}
	base := p.full() * p.global
	for j := range p.lastShare(r) {
		fn(base + int64(r) + j*p.world)
	}
}

func (p split) String() string {
	return fmt.Sprintf("rows %d to %d of the order, %d per step over %d ranks", p.start, p.start+p.left, p.global, p.world)
}
