// Package trainrt is the runtime's side of package train: what runs a
// training function rather than what a training function calls. Package
// activities uses it to run a rank (look the function up, build its
// Context, read its progress for the heartbeat); the commands list the
// functions a binary holds; tests and benchmarks of a training function
// build a Context with NewContext to call the function without a
// cluster. A training function and a program that starts runs need only
// package train.
//
// It reaches train's unexported parts through package train/internal/hook,
// which train fills in its init and which Go lets only train and the
// packages under it import: train shows its users no constructor or hook of
// the runtime's. internal/layout's test checks that only the worker side
// (activities, app) and the commands and benchmarks import trainrt
// outside tests.
package trainrt

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"

	"go.opentelemetry.io/otel/trace"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/collective"
	"github.com/tempotrain/tempotrain/train"
	"github.com/tempotrain/tempotrain/train/internal/hook"
)

// hooks are train's; its init, which this package's import of train runs
// first, set them.
var hooks = hook.Get[*train.Context, train.Func]()

// Reporter is what Context.Report hands a report to. The runtime (package
// activities) implements it: rank 0 commits the checkpoint to storage and
// tells the workflow; the other ranks record progress only. A test gives one
// that records the reports.
type Reporter interface {
	Report(ctx context.Context, metrics train.Metrics, ckpt *train.Checkpoint) error
}

// Observer watches a rank's training loop; the runtime's tracing and metrics
// (package tracing) hang off it. Its methods must be cheap and safe for
// concurrent use.
type Observer interface {
	// Progress is told of every SetProgress.
	Progress(epoch, step int)
	// Report is told of a Report as it starts, with its metrics and whether
	// it carries a checkpoint. It returns the context the report runs
	// under, and a function that is told how it ended.
	Report(ctx context.Context, metrics map[string]float64, checkpoint bool) (context.Context, func(error))
	// Tracer is what Context.Tracer returns.
	Tracer() trace.Tracer
}

// ContextInfo is what a rank knows about itself and its run. The runtime fills
// it; tests of training functions may too.
type ContextInfo struct {
	RunName        string
	Attempt        int
	WorldRank      int
	WorldSize      int
	LocalRank      int
	LocalWorldSize int
	NodeRank       int
	// Config is the run's JSON config, as given in FitInput.Config.
	Config json.RawMessage
	// Checkpoint is the latest committed checkpoint, restored to a local
	// directory, or nil on a fresh run.
	Checkpoint *train.Checkpoint
	// ScratchDir is a local directory private to this rank and attempt,
	// removed when the rank ends. Default: a new temporary directory.
	ScratchDir string
	// Device is the GPU ordinal given to this rank, or -1 for the CPU:
	// Devices[0] when Devices is given.
	Device int
	// Devices are all the GPU ordinals given to this rank
	// (scaling.resources_per_worker's GPU), Device first. Default: Device
	// alone when it is not -1, else none.
	Devices []int
	// CPUs is how many CPUs the rank holds (scaling.resources_per_worker's
	// CPU, rounded up): the threads it should use. 0: not counted.
	CPUs int
	// Observer, when set, watches the training loop. Default none.
	Observer Observer
	// Datasets are the run's datasets by name (FitInput.Datasets), opened
	// with Context.Dataset. Default none.
	Datasets map[string]train.DatasetSpec
	// Preprocessors are the run's preprocessors (FitInput.Preprocessors),
	// which a function fits on its "train" shard. Default none.
	Preprocessors []train.PreprocessorSpec
	// Preempted is closed when this rank's worker is told to stop (SIGTERM,
	// a drain): see Context.Preempted. Default: never.
	Preempted <-chan struct{}
	// Host is the host other ranks reach this rank's worker at (the
	// worker's advertise host), for a function that starts its own
	// server (torch's rendezvous store on rank 0). Default "127.0.0.1".
	Host string
	// Python is the run's Python function (FitInput.Python), for the
	// function that runs it. Default none.
	Python *api.PythonSpec
}

// NewContext builds the Context of one rank: info says who it is, comm is
// its collective group (nil for a single rank without one), r takes its
// reports (nil: Report does nothing), logger its logs (nil: slog's
// default, with the run, attempt and rank attached either way).
func NewContext(ctx context.Context, info ContextInfo, comm *collective.Comm, r Reporter, logger *slog.Logger) *train.Context {
	return hooks.NewContext(ctx, hook.Info{
		RunName: info.RunName, Attempt: info.Attempt,
		WorldRank: info.WorldRank, WorldSize: info.WorldSize,
		LocalRank: info.LocalRank, LocalWorldSize: info.LocalWorldSize, NodeRank: info.NodeRank,
		Config: info.Config, Checkpoint: info.Checkpoint, ScratchDir: info.ScratchDir, Device: info.Device,
		Devices: devices(info), CPUs: info.CPUs, Observer: info.Observer, Datasets: info.Datasets, Preprocessors: info.Preprocessors,
		Preempted: info.Preempted, Host: info.Host, Python: info.Python,
	}, comm, r, logger)
}

// devices is info's Devices with their default, a copy: the Context owns
// it.
func devices(info ContextInfo) []int {
	switch {
	case len(info.Devices) > 0:
		return slices.Clone(info.Devices)
	case info.Device >= 0:
		return []int{info.Device}
	}
	return nil
}

// Samples returns the count of training samples tc's function has given
// Context.AddSamples: the heartbeat turns it into samples/s.
func Samples(tc *train.Context) int64 { return hooks.Samples(tc) }

// ErrUnknownFunc is returned by Lookup for a name nobody registered.
var ErrUnknownFunc = hook.ErrUnknownFunc

// Lookup returns the function registered under name (train.Register), or
// an error wrapping ErrUnknownFunc that lists what this process has.
func Lookup(name string) (train.Func, error) { return hooks.Lookup(name) }

// Names lists the registered functions, sorted.
func Names() []string { return hooks.Names() }
