package data

import (
	"context"
	"fmt"
	"sort"
	"sync"

	"github.com/tempotrain/tempotrain/data/format"
)

// piece is rows [lo, hi) of unit u.
type piece struct {
	u      int
	lo, hi int64
}

// win is a shuffle window of a streaming rank: rows [start, end) of its
// epoch, from pieces, shuffled together (their order drawn from (seed,
// key)). When keep is set the window's rows are those of the pieces' rows
// it lists, in that order (a window of rows that an earlier split of the
// epoch left: see streamRest).
type win struct {
	idx        int
	start, end int64
	pieces     []piece
	keep       []int32
	key        uint64
}

// unitOrder is the order of the units in epoch e: drawn from (seed, e).
func (s *Shard) unitOrder(e int) []int32 {
	order := make([]int32, len(s.units))
	for i := range order {
		order[i] = int32(i)
	}
	if *s.spec.Shuffle {
		shuffle(order, s.opt.Seed, mix(uint64(e), 1))
	}
	return order
}

// epochWindows lays out rank r's rows of epoch e under sp (a split from
// the epoch's start): the units in an order drawn from (seed, e),
// concatenated; the rank's contiguous range of that sequence (wrapping to
// its start for padding); cut into windows. real is how many of the
// range's rows come before the wrap (the others pad).
func (s *Shard) epochWindows(e int, sp split, r int) (wins []win, real int64) {
	// The ranks' contiguous ranges, in rank order (under remainder exact,
	// as share cuts them; pad's wrap to the start).
	lo, n := sp.before(r), sp.rangeRows(r)
	if n > 0 {
		wins = cutWindows(s.piecesOf(s.unitOrder(e), lo, n), int64(s.window))
	}
	for i := range wins {
		wins[i].key = mix(mix(uint64(e), 2), mix(uint64(r), uint64(wins[i].idx)))
	}
	return wins, min(n, max(0, s.total-lo))
}

// piecesOf maps n rows from position lo of the sequence of units in order
// (wrapping around) to pieces.
func (s *Shard) piecesOf(order []int32, lo, n int64) []piece {
	var pieces []piece
	lo %= s.total
	// Find the unit holding position lo.
	i, at := 0, int64(0)
	for at+s.units[order[i]] <= lo {
		at += s.units[order[i]]
		i++
	}
	off := lo - at
	for n > 0 {
		u := int(order[i])
		k := min(s.units[u]-off, n)
		if k > 0 {
			pieces = append(pieces, piece{u: u, lo: off, hi: off + k})
			n -= k
		}
		off = 0
		i = (i + 1) % len(order)
	}
	return pieces
}

// cutWindows cuts a rank's pieces, in order, into shuffle windows of at
// most size rows, at piece boundaries where it can: a piece that does not
// fit in the room a window has left starts the next window, so that a unit
// is read by one window (a Parquet unit's pages decoded once); only a piece
// larger than a window is cut, filling the room left first.
func cutWindows(pieces []piece, size int64) []win {
	var wins []win
	cur := win{}
	var pos int64
	for _, p := range pieces {
		if k := p.hi - p.lo; k <= size && pos-cur.start+k > size {
			cur.end = pos
			wins = append(wins, cur)
			cur = win{idx: len(wins), start: pos}
		}
		for p.lo < p.hi {
			room := size - (pos - cur.start)
			k := min(room, p.hi-p.lo)
			cur.pieces = append(cur.pieces, piece{u: p.u, lo: p.lo, hi: p.lo + k})
			p.lo += k
			pos += k
			if pos-cur.start == size {
				cur.end = pos
				wins = append(wins, cur)
				cur = win{idx: len(wins), start: pos}
			}
		}
	}
	if pos > cur.start {
		cur.end = pos
		wins = append(wins, cur)
	}
	return wins
}

// spareRows keeps the packed rows of the window consumed last for the
// next window read (no new memory to clear and collect per window).
type spareRows struct {
	mu   sync.Mutex
	vals []uint32
}

func (p *spareRows) put(l *loaded) {
	if l == nil || len(l.t.blocks) != 1 || l.t.blocks[0].Vals == nil {
		return
	}
	p.mu.Lock()
	p.vals = l.t.blocks[0].Vals
	p.mu.Unlock()
}

func (p *spareRows) take() []uint32 {
	p.mu.Lock()
	defer p.mu.Unlock()
	v := p.vals
	p.vals = nil
	return v
}

// loaded is a window in memory with its order.
type loaded struct {
	w    win
	t    *table
	perm []int32
}

type prefetch struct {
	idx    int
	cancel context.CancelFunc
	done   chan struct{}
	l      *loaded
	err    error
}

// advance makes the window holding row pos of the epoch current, and
// starts reading the one after it in the background.
func (s *Shard) advance(ctx context.Context, pos int64) error {
	k := sort.Search(len(s.wins), func(i int) bool { return s.wins[i].end > pos })
	if k == len(s.wins) {
		return fmt.Errorf("data: row %d is past the epoch's %d rows", pos, s.rows)
	}
	var l *loaded
	if p := s.pre; p != nil && p.idx == k {
		select {
		case <-p.done:
		case <-ctx.Done():
			return ctx.Err()
		}
		s.pre = nil
		if p.err != nil {
			return p.err
		}
		l = p.l
	} else {
		s.stopPrefetch()
		s.spare.put(s.cur)
		s.cur = nil // its memory goes before the next window comes
		var err error
		if l, err = s.loadWindow(ctx, s.wins[k]); err != nil {
			return err
		}
	}
	s.spare.put(s.cur)
	s.cur = l
	if k+1 < len(s.wins) {
		s.startPrefetch(k + 1)
	}
	return nil
}

func (s *Shard) startPrefetch(k int) {
	ctx, cancel := context.WithCancel(context.Background())
	p := &prefetch{idx: k, cancel: cancel, done: make(chan struct{})}
	s.pre = p
	w := s.wins[k]
	go func() {
		defer close(p.done)
		p.l, p.err = s.loadWindow(ctx, w)
	}()
}

func (s *Shard) stopPrefetch() {
	if p := s.pre; p != nil {
		p.cancel()
		<-p.done
		s.pre = nil
	}
}

// loadWindow reads a window's pieces and draws its order from (seed,
// epoch, rank, window): w.key.
func (s *Shard) loadWindow(ctx context.Context, w win) (*loaded, error) {
	t, err := s.readWindow(ctx, w)
	if err != nil {
		return nil, err
	}
	return &loaded{w: w, t: t, perm: s.windowOrder(w)}, nil
}

// windowOrder is the order a window's rows are taken in: indices into its
// pieces' rows.
func (s *Shard) windowOrder(w win) []int32 {
	perm := s.windowPerm(w)
	if w.keep != nil {
		for i, j := range perm {
			perm[i] = w.keep[j]
		}
	}
	return perm
}

// readWindow reads a window's rows into one packed block (as table.pack:
// the window's order reads them at random), in the memory of the window
// consumed last when it is free (spare), each piece packed as soon as it
// is read so that its columns go before the next piece comes. Images stay
// in their blocks.
func (s *Shard) readWindow(ctx context.Context, w win) (*table, error) {
	if s.pixels > 0 {
		return s.readPieces(ctx, w.pieces, nil)
	}
	n, width := int(piecesRows(w.pieces)), len(s.slots)
	buf := s.spare.take()
	if cap(buf) < n*width {
		buf = make([]uint32, max(n, s.window)*width)
	}
	buf = buf[:n*width]
	rc, _ := s.src.(format.Recycler)
	at := 0
	err := s.eachPiece(ctx, w.pieces, nil, func(b *format.Block) {
		if at+b.N <= n {
			transpose(b, buf[at*width:], width)
		}
		at += b.N
		if rc != nil {
			rc.Recycle(b)
		}
	})
	if err != nil {
		return nil, err
	}
	if at != n {
		return nil, fmt.Errorf("data: window %d: read %d rows, want %d", w.idx, at, n)
	}
	blk := &format.Block{N: n, Num: make([][]float32, width), Cat: make([][]int32, width), Vals: buf, Width: width}
	return &table{blocks: []*format.Block{blk}, starts: []int{0, n}}, nil
}

// readPieces reads pieces into a table, their rows in order.
func (s *Shard) readPieces(ctx context.Context, pieces []piece, want []bool) (*table, error) {
	t := &table{}
	err := s.eachPiece(ctx, pieces, want, t.add)
	if err != nil {
		return nil, err
	}
	return t, nil
}

// eachPiece reads pieces and calls fn with their rows in order, in blocks
// whose codes are the dataset's.
func (s *Shard) eachPiece(ctx context.Context, pieces []piece, want []bool, fn func(*format.Block)) error {
	var scratch []int32
	for _, p := range pieces {
		blocks, from, err := s.src.ReadUnit(ctx, p.u, p.lo, p.hi, want)
		if err != nil {
			return err
		}
		at := from
		for _, b := range blocks {
			scratch = b.MergeDicts(s.dicts, scratch)
			lo, hi := max(p.lo, at), min(p.hi, at+int64(b.N))
			if lo < hi {
				fn(b.Slice(int(lo-at), int(hi-at)))
			}
			at += int64(b.N)
		}
		// A source reads the rows asked for, or the unit whole.
		if from > p.lo || at < p.hi || at > s.units[p.u] || at > p.hi && (from != 0 || at != s.units[p.u]) {
			return fmt.Errorf("data: unit %d of the dataset held %d rows when scanned, and rows %d to %d of it were read for rows %d to %d: did a file change?",
				p.u, s.units[p.u], from, at, p.lo, p.hi)
		}
	}
	return nil
}

// scan calls fn with the rows [lo, hi) of the dataset in file order, in
// batches of at most 4096 rows, reading only the slots in want (all when
// nil). Memory stays within a window's.
func (s *Shard) scan(ctx context.Context, lo, hi int64, want []bool, fn func(b *format.Batch) error) error {
	const step = 4096
	b := s.newBatch(step)
	var sc gatherScratch
	ids := make([]int32, 0, step)
	each := func(t *table, from, to int) error {
		for i := from; i < to; i += step {
			k := min(step, to-i)
			ids = ids[:0]
			for r := i; r < i+k; r++ {
				ids = append(ids, int32(r))
			}
			b.Resize(k)
			gather(t, ids, b, 0, want, &sc)
			if err := fn(b); err != nil {
				return err
			}
		}
		return nil
	}
	if lo >= hi {
		return nil
	}
	if s.memory {
		return each(s.tbl, int(lo), int(hi))
	}
	order := make([]int32, len(s.units))
	for i := range order {
		order[i] = int32(i)
	}
	for _, w := range cutWindows(s.piecesOf(order, lo, hi-lo), int64(s.window)) {
		if err := ctx.Err(); err != nil {
			return err
		}
		t, err := s.readPieces(ctx, w.pieces, want)
		if err != nil {
			return err
		}
		if err := each(t, 0, t.rows()); err != nil {
			return err
		}
	}
	return nil
}
