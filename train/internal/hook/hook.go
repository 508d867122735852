// Package hook is the one door between package train and package trainrt:
// trainrt builds and reads a train.Context, whose fields train keeps
// unexported, through the functions train hands over here in its init.
// Go's internal rule lets only train and the packages under it import this
// one. It lies beneath train, so it cannot name train.Context or train.Func:
// Hooks takes them as type parameters, and trainrt asserts them once.
package hook

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"

	"go.opentelemetry.io/otel/trace"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/collective"
)

// Info is what a Context is built from: trainrt.ContextInfo, field for
// field (its doc says what each one means).
type Info struct {
	RunName        string
	Attempt        int
	WorldRank      int
	WorldSize      int
	LocalRank      int
	LocalWorldSize int
	NodeRank       int
	Config         json.RawMessage
	Checkpoint     *api.Checkpoint
	ScratchDir     string
	Device         int
	Devices        []int
	CPUs           int
	Observer       Observer
	Datasets       map[string]api.DatasetSpec
	Preprocessors  []api.PreprocessorSpec
	Preempted      <-chan struct{}
	Host           string
	Python         *api.PythonSpec
}

// Reporter is trainrt.Reporter's method set, which a Context calls.
type Reporter interface {
	Report(ctx context.Context, metrics api.Metrics, ckpt *api.Checkpoint) error
}

// Observer is trainrt.Observer's method set, which a Context calls.
type Observer interface {
	Progress(epoch, step int)
	Report(ctx context.Context, metrics map[string]float64, checkpoint bool) (context.Context, func(error))
	Tracer() trace.Tracer
}

// ErrUnknownFunc is trainrt.ErrUnknownFunc, which train's registry wraps.
var ErrUnknownFunc = errors.New("unknown training function")

// Hooks are package train's functions that package trainrt calls. Ctx is
// *train.Context, Func is train.Func.
type Hooks[Ctx, Func any] struct {
	// NewContext builds a Context.
	NewContext func(ctx context.Context, info Info, comm *collective.Comm, r Reporter, logger *slog.Logger) Ctx
	// Samples reads the count a Context's AddSamples kept.
	Samples func(Ctx) int64
	// Lookup returns the function registered under a name, or an error
	// wrapping ErrUnknownFunc.
	Lookup func(name string) (Func, error)
	// Names lists the registered functions, sorted.
	Names func() []string
}

// set holds the Hooks train's init gave Set; nothing changes it after.
var set any

// Set is called once, by package train's init.
func Set[Ctx, Func any](h Hooks[Ctx, Func]) { set = h }

// Get returns what Set was given. Package trainrt calls it; its import of
// train has run train's init first.
func Get[Ctx, Func any]() Hooks[Ctx, Func] {
	h, ok := set.(Hooks[Ctx, Func])
	if !ok {
		panic("train/internal/hook: Get before package train's init, or with other types")
	}
	return h
}
