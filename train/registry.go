package train

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/tempotrain/tempotrain/train/internal/hook"
)

// Func is a training function. Every rank of a run calls it with its own
// Context. A returned error fails the rank, and with it the attempt; wrap it
// with NonRetryable to end the run without restarts.
type Func func(ctx context.Context, tc *Context) error

var (
	registryMu sync.RWMutex
	registry   = map[string]Func{}
)

// The runtime's side of this package (package trainrt) reaches the
// registry and builds Contexts through these.
func init() {
	hook.Set(hook.Hooks[*Context, Func]{
		NewContext: newContext,
		Samples:    func(c *Context) int64 { return c.samples.Load() },
		Lookup:     lookup,
		Names:      names,
	})
}

// Register makes fn runnable under name by the ranks of this process.
// An empty name, a nil fn and a name already taken are errors.
func Register(name string, fn Func) error {
	if strings.TrimSpace(name) == "" {
		return fmt.Errorf("train.Register: empty name")
	}
	if fn == nil {
		return fmt.Errorf("train.Register(%q): nil function", name)
	}
	registryMu.Lock()
	defer registryMu.Unlock()
	if _, ok := registry[name]; ok {
		return fmt.Errorf("train.Register(%q): name already registered", name)
	}
	registry[name] = fn
	return nil
}

// MustRegister is Register that panics on error, for package init.
func MustRegister(name string, fn Func) {
	if err := Register(name, fn); err != nil {
		panic(err)
	}
}

// lookup returns the function registered under name (trainrt.Lookup).
func lookup(name string) (Func, error) {
	registryMu.RLock()
	defer registryMu.RUnlock()
	fn, ok := registry[name]
	if !ok {
		return nil, fmt.Errorf("%w %q (this worker has: %s)", hook.ErrUnknownFunc, name, strings.Join(namesLocked(), ", "))
	}
	return fn, nil
}

// names lists the registered functions, sorted (trainrt.Names).
func names() []string {
	registryMu.RLock()
	defer registryMu.RUnlock()
	return namesLocked()
}

func namesLocked() []string {
	out := make([]string, 0, len(registry))
	for n := range registry {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// nonRetryable marks an error that must end the run without a restart.
type nonRetryable struct{ err error }

func (e *nonRetryable) Error() string { return e.err.Error() }
func (e *nonRetryable) Unwrap() error { return e.err }

// NonRetryable wraps err so that the run ends at once instead of restarting
// from a checkpoint: for errors a restart cannot fix (a bad config value).
func NonRetryable(err error) error {
	if err == nil {
		return nil
	}
	return &nonRetryable{err}
}

// IsNonRetryable reports whether err was wrapped by NonRetryable.
func IsNonRetryable(err error) bool {
	var nr *nonRetryable
	return errors.As(err, &nr)
}
