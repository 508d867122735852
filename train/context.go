package train

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sort"
	"strings"
	"sync/atomic"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/collective"
	"github.com/tempotrain/tempotrain/data"
	"github.com/tempotrain/tempotrain/train/internal/hook"
)

// ErrPreempted is what a training function returns after it checkpointed
// because its group was preempted (Context.ShouldStop): the attempt ends as
// preempted, which does not count against max_failures, and the run goes on
// from that checkpoint on the workers that are left.
var ErrPreempted = errors.New("preempted: a worker of the group is stopping")

// Context is a rank's view of its run (Ray's train.get_context() together with
// train.report and train.get_checkpoint). One Context serves one rank of one
// attempt; its methods are safe for concurrent use. The runtime builds it
// (trainrt.NewContext, which a test of a training function may call too).
type Context struct {
	ctx      context.Context
	info     hook.Info
	comm     *collective.Comm
	reporter hook.Reporter
	logger   *slog.Logger

	epoch, step atomic.Int64
	samples     atomic.Int64
	ckptDirs    atomic.Int64
}

// newContext builds a Context; package trainrt's NewContext calls it
// (through package hook, set in registry.go's init).
func newContext(ctx context.Context, info hook.Info, comm *collective.Comm, r hook.Reporter, logger *slog.Logger) *Context {
	if logger == nil {
		logger = slog.Default()
	}
	logger = logger.With("run", info.RunName, "attempt", info.Attempt, "rank", info.WorldRank)
	c := &Context{ctx: ctx, info: info, comm: comm, reporter: r, logger: logger}
	c.epoch.Store(-1)
	c.step.Store(-1)
	return c
}

// WorldRank is this rank's index in [0, WorldSize).
func (c *Context) WorldRank() int { return c.info.WorldRank }

// WorldSize is the number of ranks of the run.
func (c *Context) WorldSize() int { return c.info.WorldSize }

// LocalRank is this rank's index among the ranks on the same node.
func (c *Context) LocalRank() int { return c.info.LocalRank }

// LocalWorldSize is the number of ranks on this rank's node.
func (c *Context) LocalWorldSize() int { return c.info.LocalWorldSize }

// NodeRank is the index of this rank's node among the run's nodes.
func (c *Context) NodeRank() int { return c.info.NodeRank }

// RunName is the run's name.
func (c *Context) RunName() string { return c.info.RunName }

// Attempt counts the run's attempts from 1; a restart after a failure, or a
// resumed run, has a higher attempt.
func (c *Context) Attempt() int { return c.info.Attempt }

// Device is the GPU ordinal of this rank, or -1 when it runs on the CPU.
// A rank given several GPUs (ScalingConfig.ResourcesPerWorker) has them
// all in Devices; Device is the first.
func (c *Context) Device() int { return c.info.Device }

// Devices are the GPU ordinals of this rank, all its own while it runs:
// one for a GPU rank, as many as ScalingConfig.ResourcesPerWorker's "GPU"
// asks for, none on the CPU. The caller may modify the slice.
func (c *Context) Devices() []int { return slices.Clone(c.info.Devices) }

// CPUs is how many CPUs this rank holds on its worker
// (ScalingConfig.ResourcesPerWorker's "CPU", rounded up): the number of
// threads it should use. 0 when the run does not ask for CPUs.
func (c *Context) CPUs() int { return c.info.CPUs }

// Comm is the collective group of this attempt: all-reduce, broadcast,
// all-gather, barrier among all ranks.
func (c *Context) Comm() *collective.Comm { return c.comm }

// Logger logs with the run, attempt and rank attached.
func (c *Context) Logger() *slog.Logger { return c.logger }

// Config decodes the run's JSON config into v. An empty config leaves v as is.
func (c *Context) Config(v any) error {
	if len(c.info.Config) == 0 || string(c.info.Config) == "null" {
		return nil
	}
	if err := json.Unmarshal(c.info.Config, v); err != nil {
		// A config that does not decode fails the same way on every restart.
		return NonRetryable(fmt.Errorf("decode config %s: %w", c.info.Config, err))
	}
	return nil
}

// RawConfig returns the run's JSON config.
func (c *Context) RawConfig() json.RawMessage { return c.info.Config }

// Checkpoint returns the latest committed checkpoint of the run, restored to a
// local directory, or nil on a fresh run (Ray's train.get_checkpoint()).
func (c *Context) Checkpoint() *Checkpoint { return c.info.Checkpoint }

// SetProgress records where the training loop is. It is cheap (two atomic
// stores); the runtime's heartbeat carries the latest values, so the step loop
// never has to heartbeat itself.
//
// With tracing on, SetProgress also marks the training loop's structure:
// each epoch value gets an epoch span, and the calls divide an epoch into
// steps (every Nth of which gets a span), so call it once per step.
func (c *Context) SetProgress(epoch, step int) {
	c.epoch.Store(int64(epoch))
	c.step.Store(int64(step))
	if o := c.info.Observer; o != nil {
		o.Progress(epoch, step)
	}
}

// AddSamples counts n training samples this rank has processed (a batch's
// rows). It is one atomic add; the runtime's heartbeat turns the count
// into samples/s, which the run's status and `starter status` show per
// rank.
func (c *Context) AddSamples(n int) { c.samples.Add(int64(n)) }

// Progress returns the last values given to SetProgress (-1 before any).
func (c *Context) Progress() (epoch, step int) {
	return int(c.epoch.Load()), int(c.step.Load())
}

// ScratchDir returns a local directory private to this rank and attempt,
// removed when the rank ends.
func (c *Context) ScratchDir() string {
	if c.info.ScratchDir == "" {
		return os.TempDir()
	}
	return c.info.ScratchDir
}

// NewCheckpointDir returns a new empty local directory to write a checkpoint
// into. It lives under the rank's scratch directory and is removed when the
// rank ends.
func (c *Context) NewCheckpointDir() (string, error) {
	base := c.info.ScratchDir
	if base == "" {
		base = os.TempDir()
	}
	n := c.ckptDirs.Add(1)
	dir := fmt.Sprintf("%s/report-%06d", base, n)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("new checkpoint dir: %w", err)
	}
	return dir, nil
}

// Report records metrics, and ckpt when it is not nil (Ray's train.report).
// Every rank should call it at the same points of the loop. Rank 0's metrics
// and checkpoint are recorded: Report returns once the checkpoint is committed
// to the run's storage, and the report goes to the workflow in the
// background, in order, exactly once; a report that failed to get there
// fails the next Report, or the run when the function has returned. A
// trial's report with the Tune's metric returns only with the Tune's
// decision on it. On the other ranks Report only updates progress.
func (c *Context) Report(metrics Metrics, ckpt *Checkpoint) error {
	if c.reporter == nil {
		return nil
	}
	o := c.info.Observer
	if o == nil {
		return c.reporter.Report(c.ctx, metrics, ckpt)
	}
	ctx, done := o.Report(c.ctx, metrics, ckpt != nil)
	err := c.reporter.Report(ctx, metrics, ckpt)
	done(err)
	return err
}

// DatasetOptions say how a rank reads its shard of a dataset.
type DatasetOptions struct {
	// BatchSize is the number of rows per batch. Default 32.
	BatchSize int
	// Seed and the epoch fix every shuffle; every rank must use the same.
	// Default 0.
	Seed uint64
	// Workers is the number of goroutines that parse and decode. Default
	// GOMAXPROCS.
	Workers int
	// Exact gives every row to exactly one rank, in file order, whatever
	// the spec's remainder and shuffle say: for evaluation, and for
	// algorithms that see every row once (boosted trees). Default false.
	Exact bool
	// Task, when set, overrides the spec's task ("classification" or
	// "regression"): a trainer whose objective fixes it. Default: the spec's.
	Task string
}

// DatasetNames lists the run's datasets, sorted.
func (c *Context) DatasetNames() []string {
	names := make([]string, 0, len(c.info.Datasets))
	for n := range c.info.Datasets {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Dataset opens this rank's shard of the run's dataset name (Ray's
// train.get_dataset_shard): every row in exactly one rank's shard per epoch
// (or padded / dropped as the spec says), reshuffled by SetEpoch. Every rank
// must open the same datasets in the same order: opening is collective (the
// ranks agree on the files and the label's classes). A dataset that cannot
// work (no files, a missing column, a value that does not parse) is an error
// wrapped with NonRetryable. The caller closes the shard.
func (c *Context) Dataset(ctx context.Context, name string, o DatasetOptions) (*data.Shard, error) {
	spec, ok := c.info.Datasets[name]
	if !ok {
		return nil, NonRetryable(fmt.Errorf("no dataset %q in this run (it has: %s)", name, strings.Join(c.DatasetNames(), ", ")))
	}
	if o.Exact {
		off := false
		spec.Remainder, spec.Shuffle = "exact", &off
	}
	if o.Task != "" {
		spec.Task = o.Task
	}
	var comm data.Comm
	if c.comm != nil {
		comm = c.comm
	}
	sh, err := data.Open(ctx, spec, data.ShardOptions{Name: name, Rank: c.info.WorldRank, WorldSize: c.info.WorldSize,
		Seed: o.Seed, BatchSize: o.BatchSize, Workers: o.Workers}, comm)
	if err != nil {
		err = fmt.Errorf("dataset %s: %w", name, err)
		if errors.Is(err, data.ErrInvalid) {
			return nil, NonRetryable(err)
		}
		return nil, err
	}
	return sh, nil
}

// Preprocessors returns the run's preprocessors (FitInput.Preprocessors), to
// fit on the "train" shard: shard.Fit(ctx, tc.Preprocessors()).
func (c *Context) Preprocessors() []PreprocessorSpec { return c.info.Preprocessors }

// Preempted is closed when this rank's worker is stopping (SIGTERM, a
// drain), which leaves it a grace period (cmd/worker -stop-timeout, 30 s by
// default) before its ranks are cancelled. Ray Train's preemption notice.
// A data-parallel function should not act on it alone (the other ranks go
// on): it calls ShouldStop at its step boundaries.
func (c *Context) Preempted() <-chan struct{} { return c.info.Preempted }

// ShouldStop says whether any rank of the group has been preempted, with
// the same answer on every rank: every rank calls it at the same step
// boundaries (it is a collective call: a one-number all-reduce). When it
// says true, the function checkpoints where it is (the step, the data
// position) and returns ErrPreempted, losing no finished step.
func (c *Context) ShouldStop(ctx context.Context) (bool, error) {
	mine := 0.0
	select {
	case <-c.info.Preempted:
		mine = 1
	default:
	}
	if c.comm == nil || c.info.WorldSize < 2 {
		return mine > 0, nil
	}
	buf := []float64{mine}
	if err := c.comm.AllReduceFloat64(ctx, buf, collective.Sum); err != nil {
		return false, err
	}
	return buf[0] > 0, nil
}

// Host is the host the other ranks reach this rank's worker at (the
// worker's advertise host), for a function that starts a server of its own
// (rank 0 of a Python function hosts torch's rendezvous store there).
func (c *Context) Host() string {
	if c.info.Host == "" {
		return "127.0.0.1"
	}
	return c.info.Host
}

// Python returns the run's Python function (FitInput.Python), or nil: what
// the runtime's Python runner (registered as api.PythonFunc) starts.
func (c *Context) Python() *api.PythonSpec { return c.info.Python }

// Tracer returns a tracer for the training function's own spans. A span
// started with the function's context goes into the current step, if that
// step is traced, else into the current epoch:
//
//	ctx, span := tc.Tracer().Start(ctx, "evaluate")
//	defer span.End()
//
// Without tracing it records nothing.
func (c *Context) Tracer() trace.Tracer {
	if o := c.info.Observer; o != nil {
		return o.Tracer()
	}
	return noop.NewTracerProvider().Tracer("")
}
