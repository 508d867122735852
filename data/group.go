package data

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/tempotrain/tempotrain/data/format"
)

// Comm is what data needs of the ranks' collective group: a
// *collective.Comm is one. Open and Fit are collective calls when they are
// given a Comm: every rank calls them, in the same order, with the same spec.
// A nil Comm means a rank alone: it computes over the whole dataset what the
// group would have computed together, with the same result.
type Comm interface {
	Rank() int
	Size() int
	AllGather(ctx context.Context, in []byte) ([][]byte, error)
}

// group is a Comm or a rank alone.
type group struct {
	c Comm
}

func (g group) rank() int {
	if g.c == nil {
		return 0
	}
	return g.c.Rank()
}

func (g group) size() int {
	if g.c == nil {
		return 1
	}
	return g.c.Size()
}

// gathered is one rank's part of a gather: its value, or its error.
type gathered[T any] struct {
	Value   T      `json:"v"`
	Err     string `json:"err,omitempty"`
	Invalid bool   `json:"invalid,omitempty"`
}

// gatherJSON gives every rank every rank's value, in rank order. A rank
// that failed (err) takes part with its error, so that every rank fails at
// once, with the same message, instead of waiting for a rank that left:
// the failed rank returns its own error, the others an error naming it
// (an ErrInvalid when it was one).
func gatherJSON[T any](ctx context.Context, g group, v T, err error) ([]T, error) {
	if g.c == nil {
		if err != nil {
			return nil, err
		}
		return []T{v}, nil
	}
	mine := gathered[T]{Value: v}
	if err != nil {
		mine = gathered[T]{Err: err.Error(), Invalid: errors.Is(err, ErrInvalid)}
	}
	b, merr := json.Marshal(mine)
	if merr != nil {
		return nil, fmt.Errorf("data: encode a gather: %w", merr)
	}
	parts, gerr := g.c.AllGather(ctx, b)
	if err != nil {
		return nil, err
	}
	if gerr != nil {
		return nil, fmt.Errorf("data: gather over the ranks: %w", gerr)
	}
	out := make([]T, len(parts))
	for r, p := range parts {
		var got gathered[T]
		if err := json.Unmarshal(p, &got); err != nil {
			return nil, fmt.Errorf("data: decode rank %d's part of a gather: %w", r, err)
		}
		if got.Err != "" {
			if got.Invalid {
				return nil, fmt.Errorf("%w: rank %d: %s", ErrInvalid, r, got.Err)
			}
			return nil, fmt.Errorf("data: rank %d: %s", r, got.Err)
		}
		out[r] = got.Value
	}
	return out, nil
}

// share is rank r's part of n items split in contiguous ranges whose sizes
// differ by at most one: [lo, hi).
func share(n int64, r, w int) (lo, hi int64) {
	q, m := n/int64(w), n%int64(w)
	lo = int64(r)*q + min(int64(r), m)
	hi = lo + q
	if int64(r) < m {
		hi++
	}
	return lo, hi
}

// scanUnits lists src's units. A Scanner's scan is shared among the
// ranks: rank r scans files r, r+W, ..., and the ranks gather the units.
func scanUnits(ctx context.Context, src format.Source, g group, t format.UnitTarget) ([]int64, error) {
	sc, ok := src.(format.Scanner)
	if !ok {
		return src.Units(ctx, t)
	}
	type fileUnits struct {
		File  int              `json:"f"`
		Units []format.CSVUnit `json:"u"`
	}
	var mine []fileUnits
	var err error
	for i := g.rank(); i < sc.Files() && err == nil; i += g.size() {
		var us []format.CSVUnit
		us, err = sc.ScanFile(ctx, i, t)
		mine = append(mine, fileUnits{File: i, Units: us})
	}
	parts, err := gatherJSON(ctx, g, mine, err)
	if err != nil {
		return nil, err
	}
	byFile := make([][]format.CSVUnit, sc.Files())
	for _, p := range parts {
		for _, fu := range p {
			byFile[fu.File] = fu.Units
		}
	}
	return sc.SetUnits(byFile), nil
}
