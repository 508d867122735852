package data

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/data/format"
)

func (s *Shard) open(ctx context.Context) error {
	src, err := format.Open(ctx, s.spec, format.Options{Workers: s.opt.Workers, FashionMNISTDir: s.opt.FashionMNISTDir})
	if err != nil {
		return err
	}
	s.src = src
	s.slots = src.Slots()
	s.nfeat = len(s.slots)
	if s.spec.Label != "" || src.FixedClasses() != nil {
		s.nfeat--
	}
	s.dicts = make([]*format.Dict, len(s.slots))
	for j, sl := range s.slots {
		if sl.Kind == format.Categorical {
			s.dicts[j] = format.NewDict()
		}
	}
	if c, h, w := src.ImageShape(); c > 0 {
		s.pixels = c * h * w
		s.shape = []int{c, h, w}
	}
	// Memory a row costs: its values, its places in the orders of an epoch.
	s.rowBytes = int64(4*len(s.slots)+s.pixels) + 8
	rows, _ := src.EstimateRows()
	need := rows * s.rowBytes
	switch s.spec.Mode {
	case "memory":
		if need > s.budget {
			return invalidf("mode memory: the data needs about %d MiB in memory (%d rows × %d bytes), more than memory_budget_mib %d: raise it, or stream (mode stream)",
				need>>20, rows, s.rowBytes, s.spec.MemoryBudgetMiB)
		}
		s.memory = true
	case "stream":
		s.memory = !src.CanStream()
	default:
		s.memory = need <= s.budget/2 || !src.CanStream()
		if s.memory && need > s.budget {
			return invalidf("the data needs about %d MiB in memory and cannot be streamed; raise memory_budget_mib (%d)", need>>20, s.spec.MemoryBudgetMiB)
		}
	}
	if s.memory {
		if err := s.load(ctx); err != nil {
			return err
		}
	} else {
		if err := s.prepareStream(ctx); err != nil {
			return err
		}
	}
	if s.total == 0 {
		return invalidf("the dataset has no rows")
	}
	if s.spec.Remainder == "drop" && s.total < int64(s.opt.WorldSize) {
		return invalidf("remainder drop: %d rows for %d ranks leaves every rank without rows", s.total, s.opt.WorldSize)
	}
	if err := s.fitLabel(ctx); err != nil {
		return err
	}
	// The identity: categorical features make it fail, later, at Next
	// (until Fit or SetPipeline installs encoders).
	p := newPipeline(s.columns(), s.own, s.imageInfo())
	lm, err := newLabelMap(p.Label, s)
	if err != nil {
		return err
	}
	s.pipeline, s.labels = p, lm
	if s.tf, s.tfErr = p.compile(s.batchColumns(), s.pixels); s.tfErr != nil {
		if !errors.Is(s.tfErr, ErrInvalid) {
			return s.tfErr
		}
		s.tf = &transform{p: p}
	}
	s.batch = s.newBatch(s.opt.BatchSize)
	return s.SetEpoch(0)
}

// load reads everything into memory (mode memory).
func (s *Shard) load(ctx context.Context) error {
	s.tbl = &table{}
	var scratch []int32
	err := s.src.LoadAll(ctx, nil, func(b *format.Block) error {
		scratch = b.MergeDicts(s.dicts, scratch)
		s.tbl.add(b)
		if m := s.tbl.memBytes(); m > s.budget {
			return invalidf("the data takes more than memory_budget_mib %d once read (%d MiB after %d rows): raise it, or stream (mode stream)",
				s.spec.MemoryBudgetMiB, m>>20, s.tbl.rows())
		}
		return nil
	})
	if err != nil {
		return err
	}
	// Packed: an epoch's order reads rows all over the table, a row's
	// values in one or two cache lines rather than a line per column
	// (3-5x fewer CPU per row); the memory this takes meanwhile is a chunk
	// of the table: an eighth of the budget, or a block as read (a row
	// group) when larger. A stream packs each window (readWindow).
	s.tbl.pack(min(packChunkBytes, s.budget/8))
	s.total = int64(s.tbl.rows())
	if s.total > math.MaxInt32 {
		return invalidf("%d rows: more than mode memory holds (2^31-1); stream it", s.total)
	}
	return nil
}

// prepareStream finds the units and sizes the windows (mode stream).
func (s *Shard) prepareStream(ctx context.Context) error {
	units, err := scanUnits(ctx, s.src, s.g, s.unitTarget())
	if err != nil {
		return err
	}
	s.units = units
	s.unitOff = make([]int64, len(units)+1)
	for i, n := range units {
		s.unitOff[i+1] = s.unitOff[i] + n
	}
	s.total = s.unitOff[len(units)]
	s.layout = layoutOf(units)
	s.window = int(min(int64(math.MaxInt32), max(1, s.budget/windowShare/s.rowBytes)))
	if w := s.spec.ShuffleWindowRows; w > 0 {
		if int64(w)*s.rowBytes > s.budget/windowShare {
			return invalidf("shuffle_window_rows %d takes %d MiB, more than a fifth of memory_budget_mib %d (a window is read while the one before is consumed, and read buffers need room)",
				w, int64(w)*s.rowBytes>>20, s.spec.MemoryBudgetMiB)
		}
		s.window = w
	}
	return nil
}

// windowShare: a shuffle window takes at most budget/windowShare. Two are
// held (the one consumed, the one read ahead into the memory of the one
// before); while a window is read, the columns of the piece being read
// too; CSV units read whole at windows' ends, read buffers, pages being
// decoded and parse outputs take the rest.
const windowShare = 5

// unitTarget is the size of a unit of streaming: rows for row-group
// formats (Parquet groups whole pages up to it), bytes for CSV. Units
// small against a window let a window mix rows from several places of the
// files, and keep CSV units, read whole where a rank's range cuts them, a
// small share of memory.
func (s *Shard) unitTarget() format.UnitTarget {
	w := max(int64(1), s.budget/windowShare/s.rowBytes)
	if r := s.spec.ShuffleWindowRows; r > 0 {
		w = int64(r)
	}
	return format.UnitTarget{Rows: max(1, w/8), Bytes: int(min(8<<20, max(64<<10, s.budget/32)))}
}

// Check makes the checks of Open that need no rank and no data: the spec is
// valid, its files exist (a glob matches some), their format is known and
// their schemas hold the columns the spec names (CSV headers and first
// rows, Parquet footers, image folders). The runtime calls it when a run
// starts, so that a dataset that cannot work fails the run before any rank
// is placed. Errors wrap ErrInvalid when no retry can fix them.
func Check(ctx context.Context, spec api.DatasetSpec) error {
	spec = spec.WithDefaults()
	if err := spec.Validate("dataset"); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	src, err := format.Open(ctx, spec, format.Options{FashionMNISTDir: format.DefaultFashionMNISTDir})
	if err != nil {
		return err
	}
	return src.Close()
}
