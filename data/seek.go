package data

import (
	"fmt"
)

// splitAt is the split of the epoch from position start of its order
// under the shard's settings.
func (s *Shard) splitAt(start int64) split {
	return newSplit(s.total, start, s.GlobalBatchSize(), s.opt.WorldSize, s.spec.Remainder, s.spec.DropLastBatch)
}

// seek positions the shard at the start of a split of epoch e: in memory,
// the epoch's order from position start on shared among the ranks;
// streaming (start 0), the rows the earlier splits of the epoch, hist,
// left (see streamRest), or the whole epoch when none.
func (s *Shard) seek(e int, start int64, hist []PositionSplit) error {
	if e < 0 {
		return fmt.Errorf("data: epoch %d", e)
	}
	if start < 0 || start > 0 && !s.memory || len(hist) > 0 && s.memory {
		return fmt.Errorf("data: epoch %d from row %d of its order, after %d splits", e, start, len(hist))
	}
	s.stopPrefetch()
	s.spare.put(s.cur)
	s.cur = nil
	s.epoch, s.pos, s.local, s.batches, s.stepRows, s.rowsBase = e, 0, 0, 0, 0, 0
	s.hist, s.consumedBase = nil, 0
	s.sp = s.splitAt(start)
	var rest []sitem
	if len(hist) > 0 {
		var n int64
		rest, n = s.streamRest(e, hist)
		s.hist, s.consumedBase = append([]PositionSplit(nil), hist...), hist[len(hist)-1].Consumed
		s.sp = newSplit(n, 0, s.GlobalBatchSize(), s.opt.WorldSize, s.spec.Remainder, s.spec.DropLastBatch)
	}
	s.rows = s.sp.rows(s.opt.Rank)
	shuffled := *s.spec.Shuffle
	if s.memory {
		n := int(s.total)
		s.perm = grow(s.perm, n)
		perm := s.perm
		for i := range perm {
			perm[i] = int32(i)
		}
		if shuffled {
			shuffle(perm, s.opt.Seed, mix(uint64(e), 0))
		}
		s.order = s.order[:0]
		s.sp.offsets(s.opt.Rank, func(off int64) {
			s.order = append(s.order, perm[(s.sp.start+off)%int64(n)])
		})
	} else if len(hist) > 0 {
		s.wins, _ = s.layoutRank(rest, s.sp, s.opt.Rank, splitKey(e, len(hist)))
	} else {
		s.wins, _ = s.epochWindows(e, s.sp, s.opt.Rank)
	}
	return nil
}

// skipSteps moves past the rank's next k batches (without reading them).
func (s *Shard) skipSteps(k int64) {
	for ; k > 0; k-- {
		b := s.sp.batchAt(s.opt.Rank, s.pos)
		if b <= 0 {
			return
		}
		s.stepRows = s.sp.stepRows(s.opt.Rank, s.pos)
		s.pos += b
		s.local++
		s.batches++
	}
}
