package gbdt

import (
	"errors"
	"fmt"
	"math"
)

// Dataset is one rank's shard of a table: Rows rows of Cols float32
// features, row-major in X (len Rows*Cols), NaN meaning missing. Label has
// one entry per row (a class index 0..num_class-1 for multi-class
// objectives); Weight, when not nil, one non-negative instance weight per
// row. RowID, when not nil, gives each row's index in the whole table
// (unique across ranks); when nil, rows are numbered in rank order (rank 0's
// first, then rank 1's, ...), which is the table's order when the shards are
// its consecutive slices. Row ids seed subsample, so they are what makes a
// run with subsample < 1 independent of how rows are split across ranks.
//
// A training Dataset is read by NewTrainer (or Resume), which keeps a binned
// copy and no reference to it. An evaluation Dataset is read at every round
// (each new tree is applied to its rows): keep it unchanged while the
// Trainer is in use.
type Dataset struct {
	X      []float32
	Rows   int
	Cols   int
	Label  []float32
	Weight []float32
	RowID  []uint64
}

// check validates shapes and values: no infinite feature, finite labels and
// weights, labels that fit the objective.
func (d *Dataset) check(name string, p Params) error {
	if d == nil {
		return fmt.Errorf("gbdt: %s: nil Dataset", name)
	}
	if d.Rows < 0 || d.Cols < 0 {
		return fmt.Errorf("gbdt: %s: Rows = %d, Cols = %d: must not be negative", name, d.Rows, d.Cols)
	}
	if len(d.X) != d.Rows*d.Cols {
		return fmt.Errorf("gbdt: %s: len(X) = %d, want Rows×Cols = %d×%d = %d", name, len(d.X), d.Rows, d.Cols, d.Rows*d.Cols)
	}
	if len(d.Label) != d.Rows {
		return fmt.Errorf("gbdt: %s: len(Label) = %d, want Rows = %d", name, len(d.Label), d.Rows)
	}
	if d.Weight != nil && len(d.Weight) != d.Rows {
		return fmt.Errorf("gbdt: %s: len(Weight) = %d, want Rows = %d", name, len(d.Weight), d.Rows)
	}
	if d.RowID != nil && len(d.RowID) != d.Rows {
		return fmt.Errorf("gbdt: %s: len(RowID) = %d, want Rows = %d", name, len(d.RowID), d.Rows)
	}
	for i, x := range d.X {
		if math.IsInf(float64(x), 0) {
			return fmt.Errorf("gbdt: %s: X[row %d, feature %d] = %v: features must be finite or NaN (missing)", name, i/d.Cols, i%d.Cols, x)
		}
	}
	for i, w := range d.Weight {
		if !(w >= 0) || math.IsInf(float64(w), 0) {
			return fmt.Errorf("gbdt: %s: Weight[%d] = %v: weights must be finite and ≥ 0", name, i, w)
		}
	}
	for i, y := range d.Label {
		if err := checkLabel(p, y); err != nil {
			return fmt.Errorf("gbdt: %s: Label[%d] = %v: %v", name, i, y, err)
		}
	}
	return nil
}

// checkLabel says why y does not fit the objective, or nil.
func checkLabel(p Params, y float32) error {
	if math.IsNaN(float64(y)) || math.IsInf(float64(y), 0) {
		return fmt.Errorf("labels must be finite")
	}
	switch p.Objective {
	case RegLogistic, BinaryLogistic:
		if y < 0 || y > 1 {
			return fmt.Errorf("%s needs labels in [0, 1]", p.Objective)
		}
	case CountPoisson:
		if y < 0 {
			return fmt.Errorf("count:poisson needs non-negative labels")
		}
	case MultiSoftprob, MultiSoftmax:
		if y < 0 || y >= float32(p.NumClass) || y != float32(math.Trunc(float64(y))) {
			return fmt.Errorf("%s with num_class = %d needs integer labels in [0, %d]", p.Objective, p.NumClass, p.NumClass-1)
		}
	}
	return nil
}

// weight returns row i's weight (1 without weights).
func (d *Dataset) weight(i int) float64 {
	if d.Weight == nil {
		return 1
	}
	return float64(d.Weight[i])
}

// ErrInvalid is wrapped by the errors about the caller's input (parameters,
// labels, features, evaluation sets): errors no retry can fix.
var ErrInvalid = errors.New("invalid input")

// invalidError is an input error: its message is the cause's, and it is
// both the cause and ErrInvalid for errors.Is.
type invalidError struct{ error }

func (e invalidError) Unwrap() []error { return []error{e.error, ErrInvalid} }

// invalid marks err (when not nil) as the caller's input's fault.
func invalid(err error) error {
	if err == nil {
		return nil
	}
	return invalidError{err}
}
