package data

import (
	"fmt"

	"github.com/tempotrain/tempotrain/data/format"
)

// ErrInvalid is wrapped by every error that a restart cannot fix (see
// format.ErrInvalid, the same error: the readers' bad input and the
// shards' alike). The runtime makes such an error non-retryable
// (errors.Is(err, data.ErrInvalid)).
var ErrInvalid = format.ErrInvalid

// invalidf returns an error wrapping ErrInvalid.
func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}

// listColumns formats column names for a message, at most 30 of them.
func listColumns(names []string) string {
	if len(names) > 30 {
		return fmt.Sprintf("%q ... (%d columns)", names[:30], len(names))
	}
	return fmt.Sprintf("%q", names)
}

func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}
