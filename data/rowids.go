package data

import "fmt"

// RowIDs returns, for this epoch, the index in the dataset (file order, from
// 0) of each row Next gives this rank, in the order Next gives them. Row ids
// do not depend on the world size: a model whose sampling draws from row ids
// (gbdt's subsample) learns the same whatever the number of ranks. A
// streamed shuffled shard mixes rows inside its windows, and is refused.
func (s *Shard) RowIDs() ([]int64, error) {
	if s.memory {
		ids := make([]int64, len(s.order))
		for i, r := range s.order {
			ids[i] = int64(r)
		}
		return ids, nil
	}
	if *s.spec.Shuffle {
		return nil, fmt.Errorf("data: dataset %s: row ids of a shuffled stream: open it with shuffle off", s.name)
	}
	ids := make([]int64, 0, s.rows)
	var win []int64
	for _, w := range s.wins {
		win = win[:0]
		for _, p := range w.pieces {
			for r := p.lo; r < p.hi; r++ {
				win = append(win, s.unitOff[p.u]+r)
			}
		}
		if w.keep == nil {
			ids = append(ids, win...)
			continue
		}
		for _, i := range w.keep {
			ids = append(ids, win[i])
		}
	}
	return ids, nil
}
