package data

import (
	"context"
	"errors"
	"sort"
	"strconv"
	"strings"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/data/format"
)

// fitShare is this rank's part of the dataset for fitting (labels,
// preprocessors): contiguous, every row in exactly one rank's part. A rank
// alone (no Comm) fits over everything.
func (s *Shard) fitShare() (lo, hi int64) {
	return share(s.total, s.g.rank(), s.g.size())
}

// LabelInfo describes a dataset's label.
type LabelInfo struct {
	// Column is the label column; empty when the dataset has none.
	Column string `json:"column,omitempty"`
	// Task is "classification" or "regression".
	Task string `json:"task,omitempty"`
	// Classes of a classification label, in class-number order: sorted
	// strings, or numbers in increasing order as strconv formats them.
	Classes []string `json:"classes,omitempty"`
	// Numeric says the label column is numeric (Classes are numbers).
	Numeric bool `json:"numeric,omitempty"`
}

// maxClasses bounds the classes of a classification label: a label with
// more distinct values is a regression target or an id.
const maxClasses = 65536

type labelPart struct {
	Strings []string  `json:"s,omitempty"`
	Numbers []float32 `json:"n,omitempty"`
	Rows    int64     `json:"rows"`
	Many    bool      `json:"many,omitempty"`
}

// fitLabel finds the label's classes over all ranks.
func (s *Shard) fitLabel(ctx context.Context) error {
	if fixed := s.src.FixedClasses(); fixed != nil {
		s.own = LabelInfo{Column: "label", Task: "classification", Classes: fixed, Numeric: true}
		return nil
	}
	if !s.hasLabel() {
		return nil
	}
	j := len(s.slots) - 1
	lab := s.slots[j]
	s.own = LabelInfo{Column: lab.Name, Task: s.spec.Task, Numeric: lab.Kind == format.Numeric}
	if s.spec.Task != "classification" {
		if lab.Kind != format.Numeric {
			return invalidf("label %q is categorical (strings), but task is regression: a regression label must be numeric", lab.Name)
		}
		return nil
	}
	want := make([]bool, len(s.slots))
	want[j] = true
	var part labelPart
	lo, hi := s.fitShare()
	nums := map[float32]struct{}{}
	codes := map[int32]struct{}{}
	err := s.scan(ctx, lo, hi, want, func(b *format.Batch) error {
		part.Rows += int64(b.N)
		if lab.Kind == format.Numeric {
			for _, v := range b.Num[j][:b.N] {
				nums[v] = struct{}{}
			}
			if len(nums) > maxClasses {
				part.Many = true
				return errStop
			}
		} else {
			for _, c := range b.Cat[j][:b.N] {
				codes[c] = struct{}{}
			}
		}
		return nil
	})
	if err != nil && !errors.Is(err, errStop) {
		part = labelPart{}
	} else {
		err = nil
	}
	for v := range nums {
		part.Numbers = append(part.Numbers, v)
	}
	for c := range codes {
		part.Strings = append(part.Strings, s.dicts[j].String(c))
	}
	parts, err := gatherJSON(ctx, s.g, part, err)
	if err != nil {
		return err
	}
	allN := map[float32]struct{}{}
	allS := map[string]struct{}{}
	for _, p := range parts {
		if p.Many {
			return invalidf("label %q has more than %d distinct values: a classification label is a class; for a numeric target set task regression", lab.Name, maxClasses)
		}
		for _, v := range p.Numbers {
			allN[v] = struct{}{}
		}
		for _, v := range p.Strings {
			allS[v] = struct{}{}
		}
	}
	if lab.Kind == format.Numeric {
		vals := make([]float32, 0, len(allN))
		for v := range allN {
			if v != v {
				return invalidf("label %q has a missing value (NaN)", lab.Name)
			}
			vals = append(vals, v)
		}
		sort.Slice(vals, func(a, b int) bool { return vals[a] < vals[b] })
		for _, v := range vals {
			s.own.Classes = append(s.own.Classes, strconv.FormatFloat(float64(v), 'g', -1, 32))
		}
		if len(allN) > maxClasses {
			return invalidf("label %q has more than %d distinct values: a classification label is a class; for a numeric target set task regression", lab.Name, maxClasses)
		}
	} else {
		for v := range allS {
			s.own.Classes = append(s.own.Classes, v)
		}
		sort.Strings(s.own.Classes)
	}
	if len(s.own.Classes) < 2 && s.name == api.TrainDataset {
		return invalidf("label %q has one class (%s) in %d rows: a classifier needs at least two (or set task regression)",
			lab.Name, strings.Join(quoteAll(s.own.Classes), ", "), s.total)
	}
	return nil
}

var errStop = errors.New("stop")

func quoteAll(l []string) []string {
	out := make([]string, len(l))
	for i, s := range l {
		out[i] = strconv.Quote(s)
	}
	return out
}
