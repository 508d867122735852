package format

import (
	"errors"
	"fmt"
	"strings"
)

// ErrInvalid is wrapped by every error that a restart cannot fix: a spec
// that cannot work, a missing file or empty glob, a missing column, a value
// that does not parse, files whose schemas differ, an empty dataset, a
// classification label with one class, a preprocessor that does not fit its
// columns. The runtime makes such an error non-retryable (errors.Is(err,
// data.ErrInvalid)). Errors that do not wrap it (a broken connection, a
// storage outage, a cancelled context) may pass on a restart.
var ErrInvalid = errors.New("invalid dataset")

// ParseError is a value that does not parse, or is missing where it may not
// be: it names the file, where in it (a CSV line, a Parquet row group and
// row), the column and the value. It wraps ErrInvalid.
type ParseError struct {
	File string
	// Line is the CSV line (1-based), 0 for Parquet.
	Line int64
	// RowGroup and Row locate a Parquet value (Row within the row group);
	// RowGroup is -1 for CSV.
	RowGroup int
	Row      int64
	Column   string
	Value    string
	// Reason says what is wrong with the value.
	Reason string
}

func (e *ParseError) Error() string {
	var b strings.Builder
	b.WriteString(ErrInvalid.Error())
	b.WriteString(": ")
	b.WriteString(e.File)
	if e.RowGroup >= 0 {
		fmt.Fprintf(&b, ": row group %d, row %d", e.RowGroup, e.Row)
	} else {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	if e.Column != "" {
		fmt.Fprintf(&b, ": column %q", e.Column)
	}
	if e.Value != "" || e.Column != "" {
		v := e.Value
		if len(v) > 80 {
			v = v[:80] + "..."
		}
		fmt.Fprintf(&b, ": value %q", v)
	}
	b.WriteString(": ")
	b.WriteString(e.Reason)
	return b.String()
}

// Unwrap makes a ParseError an ErrInvalid.
func (e *ParseError) Unwrap() error { return ErrInvalid }

// invalidf returns an error wrapping ErrInvalid.
func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}

// formatSentinel is ErrFormat: a malformed IDX file is an invalid dataset.
type formatSentinel struct{}

func (formatSentinel) Error() string        { return "malformed IDX file" }
func (formatSentinel) Is(target error) bool { return target == ErrInvalid }

// listColumns formats column names for a message, at most 30 of them.
func listColumns(names []string) string {
	if len(names) > 30 {
		return fmt.Sprintf("%q ... (%d columns)", names[:30], len(names))
	}
	return fmt.Sprintf("%q", names)
}
