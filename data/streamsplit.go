package data

// A streamed epoch resumed at another world size or batch size.
//
// A streaming rank takes a contiguous range of the epoch's sequence of
// units, cut into shuffle windows, each taken in an order drawn from
// (seed, key). After k steps of a split, a rank has taken the windows
// before the one it is in, and that window's rows in its order up to the
// rank's count. What the split leaves is, for each of its ranks in rank
// order: the rest of the window it was in (in the order it would have
// taken them), then its later windows' rows; then the rows no rank was
// given (remainder drop, or a last step dropped). Padding (the rows a rank
// range wrapped around to) is left out: it repeats rows that are in the
// rest already, or were taken. A split after it shares those rows among
// its ranks exactly as a fresh epoch shares the sequence of units
// (contiguous ranges, padded by wrapping around), each rank's range cut
// into windows: runs of whole pieces as cutWindows cuts them, and each
// partly taken window's rest a window of its own (read whole, only the rows
// left taken). So every row of the epoch is taken once over all splits,
// but for the last one's padding and the rows that splits' ranks padded
// with before their rows ran out. The earlier splits, kept in the
// position (Position.Splits), replay to the same layout on any rank.

// PositionSplit is a split of an epoch that a streamed shard's Seek to
// another world size or batch size ended: its ranks, the rows of a step
// over all of them, and the epoch's rows consumed when it ended
// (Position.Consumed then).
type PositionSplit struct {
	WorldSize   int   `json:"world_size"`
	RowsPerStep int   `json:"rows_per_step"`
	Consumed    int64 `json:"consumed"`
}

// sitem is a run of rows of a streamed epoch: the rows of pieces, in
// order, or, when keep is set, those of the pieces' rows it lists.
type sitem struct {
	pieces []piece
	keep   []int32
}

func piecesRows(ps []piece) int64 {
	var n int64
	for _, p := range ps {
		n += p.hi - p.lo
	}
	return n
}

func (it sitem) rows() int64 {
	if it.keep != nil {
		return int64(len(it.keep))
	}
	return piecesRows(it.pieces)
}

// sub is rows [a, b) of the item.
func (it sitem) sub(a, b int64) sitem {
	if it.keep != nil {
		return sitem{pieces: it.pieces, keep: it.keep[a:b]}
	}
	return sitem{pieces: subPieces(it.pieces, a, b)}
}

// subPieces is rows [a, b) of pieces.
func subPieces(ps []piece, a, b int64) []piece {
	var out []piece
	var at int64
	for _, p := range ps {
		if at >= b {
			break
		}
		n := p.hi - p.lo
		if lo, hi := max(a, at), min(b, at+n); lo < hi {
			out = append(out, piece{u: p.u, lo: p.lo + lo - at, hi: p.lo + hi - at})
		}
		at += n
	}
	return out
}

// take is n rows of items (total rows in all, none empty) from position lo
// on, wrapping around to their start.
func take(items []sitem, total, lo, n int64) []sitem {
	if total == 0 || n <= 0 {
		return nil
	}
	lo %= total
	i, at := 0, int64(0)
	for at+items[i].rows() <= lo {
		at += items[i].rows()
		i++
	}
	off := lo - at
	var out []sitem
	for n > 0 {
		it := items[i]
		if k := min(it.rows()-off, n); k > 0 {
			out = append(out, it.sub(off, off+k))
			n -= k
		}
		off = 0
		i = (i + 1) % len(items)
	}
	return out
}

// splitKey is the base of the window keys of the k-th split (from 1) of
// epoch e.
func splitKey(e, k int) uint64 {
	return mix(mix(uint64(e), 2), mix(0x73706c6974, uint64(k)))
}

// layoutRank lays out rank r's rows under sp of the rows rest that earlier
// splits left (sp.left of them): the rank's contiguous range of them
// (wrapping to their start for padding), cut into windows whose orders are
// drawn from key. real is how many of the range's rows come before the
// wrap.
func (s *Shard) layoutRank(rest []sitem, sp split, r int, key uint64) (wins []win, real int64) {
	lo, n := sp.before(r), sp.rangeRows(r)
	var pos int64
	var run []piece
	flush := func() {
		for _, w := range cutWindows(run, int64(s.window)) {
			w.start += pos
			w.end += pos
			w.idx = len(wins)
			wins = append(wins, w)
		}
		pos += piecesRows(run)
		run = nil
	}
	for _, it := range take(rest, sp.left, lo, n) {
		if it.keep == nil {
			run = append(run, it.pieces...)
			continue
		}
		flush()
		k := int64(len(it.keep))
		wins = append(wins, win{idx: len(wins), start: pos, end: pos + k, pieces: it.pieces, keep: it.keep})
		pos += k
	}
	flush()
	for i := range wins {
		wins[i].key = mix(key, mix(uint64(r), uint64(wins[i].idx)))
	}
	return wins, min(n, max(0, sp.left-lo))
}

// windowPerm is the order a window's rows are taken in, as indices into
// them (0 to end-start).
func (s *Shard) windowPerm(w win) []int32 {
	perm := make([]int32, w.end-w.start)
	for i := range perm {
		perm[i] = int32(i)
	}
	if *s.spec.Shuffle {
		shuffle(perm, s.opt.Seed, w.key)
	}
	return perm
}

// rankRest is what a rank with windows wins (real of their rows before the
// padding) leaves after taking c rows: the rest of the window it is in, in
// the order it takes them, then its later windows' rows.
func (s *Shard) rankRest(wins []win, real, c int64) []sitem {
	var out []sitem
	for _, w := range wins {
		if w.end <= c || w.start >= real {
			continue
		}
		n := min(w.end, real) - w.start // real rows: a prefix of the window's
		if w.start >= c {
			if w.keep != nil {
				out = append(out, sitem{pieces: w.pieces, keep: w.keep[:n]})
			} else {
				out = append(out, sitem{pieces: subPieces(w.pieces, 0, n)})
			}
			continue
		}
		var keep []int32
		for _, i := range s.windowPerm(w)[c-w.start:] {
			if int64(i) >= n {
				continue
			}
			if w.keep != nil {
				i = w.keep[i]
			}
			keep = append(keep, i)
		}
		if len(keep) > 0 {
			out = append(out, sitem{pieces: w.pieces, keep: keep})
		}
	}
	return out
}

// streamRest replays the splits hist of epoch e (every one of its ranks'
// layout, and what it took) and returns the rows they left, and how many.
func (s *Shard) streamRest(e int, hist []PositionSplit) ([]sitem, int64) {
	rest := []sitem{{pieces: s.piecesOf(s.unitOrder(e), 0, s.total)}}
	total, base := s.total, int64(0)
	for k, h := range hist {
		sp := newSplit(total, 0, h.RowsPerStep, h.WorldSize, s.spec.Remainder, s.spec.DropLastBatch)
		if h.Consumed-base >= sp.consumed(0, sp.steps(0)) {
			return nil, 0 // that split ended the epoch
		}
		steps := max(0, (h.Consumed-base)/int64(h.RowsPerStep))
		var next []sitem
		var given int64
		for q := range h.WorldSize {
			var wins []win
			var real int64
			if k == 0 {
				wins, real = s.epochWindows(e, sp, q)
			} else {
				wins, real = s.layoutRank(rest, sp, q, splitKey(e, k))
			}
			took := min(steps, sp.full()) * sp.batch(q)
			if steps > sp.full() {
				took += sp.lastShare(q)
			}
			next = append(next, s.rankRest(wins, real, took)...)
			given += sp.rangeRows(q)
		}
		if given < total {
			next = append(next, take(rest, total, given, total-given)...)
		}
		rest, total, base = rest[:0:0], 0, h.Consumed
		for _, it := range next {
			if n := it.rows(); n > 0 {
				rest = append(rest, it)
				total += n
			}
		}
	}
	return rest, total
}
