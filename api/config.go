package api

import (
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Task queues used when an input leaves them empty.
const (
	// DefaultTaskQueue is where the Fit workflow and its bookkeeping
	// activities run.
	DefaultTaskQueue = "tempotrain"
	// DefaultCPUQueue receives the ranks of a run with UseGPU false.
	DefaultCPUQueue = "tempotrain-cpu"
	// DefaultGPUQueue receives the ranks of a run with UseGPU true.
	DefaultGPUQueue = "tempotrain-gpu"
	// WorkflowType is the registered name of the Fit workflow.
	WorkflowType = "Fit"
)

// Defaults of FailureConfig.
const (
	DefaultHeartbeatTimeout  = 60 * time.Second
	DefaultCollectiveTimeout = 5 * time.Minute
	DefaultStartTimeout      = 10 * time.Minute
)

// ScalingConfig says how many ranks a run has and where they run
// (Ray's ScalingConfig).
type ScalingConfig struct {
	// NumWorkers is the number of ranks (world size) of a fixed-size run:
	// every attempt waits for that many. Required unless MinWorkers and
	// MaxWorkers are given; with them it may only repeat MaxWorkers.
	NumWorkers int `json:"num_workers,omitempty"`
	// MinWorkers and MaxWorkers make the run elastic (Ray Train V2's
	// min/max workers, torchrun's --nnodes=MIN:MAX): an attempt starts with
	// as many ranks as workers take, between the two, waiting LastCall for
	// more once MinWorkers have started; after a lost rank the next attempt
	// goes on with the ranks it can get (at least MinWorkers), and when
	// capacity comes back the run grows toward MaxWorkers at its next
	// checkpoint. Both or neither; 1 <= MinWorkers <= MaxWorkers.
	MinWorkers int `json:"min_workers,omitempty"`
	MaxWorkers int `json:"max_workers,omitempty"`
	// LastCall is how long an elastic attempt, once MinWorkers ranks have
	// started, waits for more before it starts with those it has (torchrun's
	// rendezvous last_call). Default 5s; an attempt that has MaxWorkers
	// starts at once.
	LastCall Duration `json:"last_call,omitempty"`
	// UseGPU sends ranks to the GPU task queue and gives each a GPU.
	// Default false.
	UseGPU bool `json:"use_gpu,omitempty"`
	// TaskQueue overrides the task queue the ranks are sent to.
	// Default: DefaultCPUQueue, or DefaultGPUQueue when UseGPU.
	TaskQueue string `json:"task_queue,omitempty"`
	// ResourcesPerWorker is what each rank holds on its worker while it
	// runs, in Ray's names: {"CPU": 4, "GPU": 2}. CPU may be fractional;
	// GPU is a whole number and needs UseGPU (which, with no GPU or GPU 0
	// here, asks for 1, as in Ray). A rank goes to the queue of its shape
	// (RankQueue: the rank queue with "@cpu4-gpu2", each count rounded up
	// to a power of two), which only workers that have that much poll; the
	// worker gives it that many GPUs (all of them visible to it) and CPUs
	// (its threads: train.Context.CPUs). A run whose resources no worker has
	// fails after run.failure.start_timeout, naming them. Default none: the
	// plain rank queue, one GPU with UseGPU, CPUs not counted.
	ResourcesPerWorker map[string]float64 `json:"resources_per_worker,omitempty"`
	// RanksPerProcess is how many ranks of a fixed-size run one worker
	// process runs together, as one activity (torchrun's --nproc-per-node):
	// ranks [0,k), [k,2k), ... each go to one worker, as goroutines sharing
	// its memory, its Temporal connection and one heartbeat. An attempt is
	// then ceil(NumWorkers/k) activities instead of NumWorkers, which is
	// what the Temporal server spends its time on when a large run starts
	// (docs/scale.md, "Ranks per process"); the ranks themselves behave as
	// before (their own rendezvous, links, reports, failures). The worker
	// takes the whole bundle in one of its rank slots: size k to what one
	// worker process should run. A failure of any rank fails its attempt,
	// as always. Default 0 or 1: one activity per rank. Fixed-size runs
	// only.
	RanksPerProcess int `json:"ranks_per_process,omitempty"`
}

// Bundles is how many RunRank activities a fixed-size attempt of n ranks
// runs: n, or ceil(n/RanksPerProcess).
func (s ScalingConfig) Bundles(n int) int {
	if k := s.RanksPerProcess; k > 1 {
		return (n + k - 1) / k
	}
	return n
}

// DefaultLastCall is ScalingConfig.LastCall's default.
const DefaultLastCall = 5 * time.Second

// Elastic says whether the run's world size may change (MinWorkers and
// MaxWorkers given).
func (s ScalingConfig) Elastic() bool { return s.MaxWorkers > 0 || s.MinWorkers > 0 }

// Slots is how many ranks an attempt asks for: MaxWorkers when elastic,
// else NumWorkers.
func (s ScalingConfig) Slots() int {
	if s.Elastic() {
		return s.MaxWorkers
	}
	return s.NumWorkers
}

// Min is the fewest ranks an attempt may train with: MinWorkers when
// elastic, else NumWorkers.
func (s ScalingConfig) Min() int {
	if s.Elastic() {
		return s.MinWorkers
	}
	return s.NumWorkers
}

// RankQueue returns the task queue the ranks of this config go to: the
// plain rank queue, or its shape queue (ShapeQueue) when the config asks
// for resources.
func (s ScalingConfig) RankQueue() string {
	cpus, gpus := s.Resources().Shape()
	return ShapeQueue(s.plainQueue(), cpus, gpus)
}

func (s ScalingConfig) plainQueue() string {
	switch {
	case s.TaskQueue != "":
		return s.TaskQueue
	case s.UseGPU:
		return DefaultGPUQueue
	default:
		return DefaultCPUQueue
	}
}

// FailureConfig says how a run reacts to failures (Ray's FailureConfig) and
// how soon one is detected.
type FailureConfig struct {
	// MaxFailures is how many failed attempts are restarted from the latest
	// checkpoint before the run gives up. 0 (the default) restarts nothing,
	// -1 restarts without limit.
	MaxFailures int `json:"max_failures,omitempty"`
	// HeartbeatTimeout is how long a rank may go without a heartbeat before it
	// counts as dead. Ranks heartbeat from a background ticker, so this only
	// trips on a dead or frozen process. Default 60s. Past 64 ranks, where
	// ranks heartbeat less often than every second, the ranks get at least
	// three heartbeat intervals (RankHeartbeatTimeout).
	HeartbeatTimeout Duration `json:"heartbeat_timeout,omitempty"`
	// CollectiveTimeout bounds every collective operation (all-reduce,
	// broadcast, barrier...). A peer silent for longer fails the attempt.
	// Default 5m.
	CollectiveTimeout Duration `json:"collective_timeout,omitempty"`
	// StartTimeout bounds how long a rank may wait to be picked up by a worker
	// (schedule-to-start) and then for all ranks of its attempt to register
	// (rendezvous). Default 10m.
	StartTimeout Duration `json:"start_timeout,omitempty"`
	// AllowFreshStart: when the run has checkpoints and none of them
	// verifies (every one corrupt or missing), train from the start instead
	// of failing. Default false: the run fails, non-retryably, naming what
	// it tried, rather than silently throw its training away.
	AllowFreshStart bool `json:"allow_fresh_start,omitempty"`
}

// CheckpointConfig says which checkpoints are kept (Ray's CheckpointConfig).
type CheckpointConfig struct {
	// NumToKeep is how many committed checkpoints are kept. 0 (the default)
	// keeps all. The latest checkpoint is always kept, so a run can resume.
	NumToKeep int `json:"num_to_keep,omitempty"`
	// ScoreAttribute is the metric that ranks checkpoints for retention and
	// for Result.BestCheckpoints. Empty (the default) ranks by recency.
	ScoreAttribute string `json:"score_attribute,omitempty"`
	// ScoreOrder is "max" (the default: higher is better) or "min".
	ScoreOrder string `json:"score_order,omitempty"`
	// AsyncUpload makes Report return once rank 0 has a local snapshot of the
	// checkpoint; the upload to storage runs in the background (Ray's ASYNC
	// checkpoint upload mode). The next Report, or the end of the function,
	// waits for it, and a failed upload fails that call: nothing is lost
	// silently. The workflow hears of a checkpoint once it is committed.
	// Default false: Report returns after the checkpoint is committed.
	AsyncUpload bool `json:"async_upload,omitempty"`
}

// RunConfig names a run and says where it stores its state (Ray's RunConfig).
type RunConfig struct {
	// Name of the run: its directory under StoragePath. A Fit with the name of
	// an existing run resumes it from its latest checkpoint. Default: the
	// workflow ID.
	Name string `json:"name,omitempty"`
	// StoragePath is where runs live: an absolute directory ("/data/runs"),
	// "file:///data/runs", or "s3://bucket/prefix". Required.
	StoragePath string `json:"storage_path"`
	// Failure configures restarts and failure detection.
	Failure FailureConfig `json:"failure,omitempty"`
	// Checkpoint configures retention.
	Checkpoint CheckpointConfig `json:"checkpoint,omitempty"`
	// ResumeFrom is the URI of a committed checkpoint, of this run or
	// another (a Result's Checkpoint.URI), that a new run starts from: a warm
	// start (Ray's resume_from_checkpoint). A run that already has
	// checkpoints resumes from its own and ignores it. Default: none.
	//
	// ResumePreviousBest ("previous-best") in a run a Schedule started
	// names the best checkpoint of the schedule's last successful run,
	// resolved when the run starts: periodic retraining warm-starts from
	// the last model (the schedule's first run starts fresh).
	ResumeFrom string `json:"resume_from,omitempty"`
	// Schedule names the Temporal Schedule the run belongs to: its best
	// checkpoint is recorded for the schedule's next run (previous-best)
	// and promoted when it beats the promoted one ({storage}/{schedule}/
	// promoted.json). Default: the Schedule that started the workflow
	// (TemporalScheduledById), if any.
	Schedule string `json:"schedule,omitempty"`
}

// FitInput is the input of the Fit workflow. It is plain JSON, so a run can be
// started from the Temporal CLI:
//
//	temporal workflow start --type Fit --task-queue tempotrain --workflow-id fit-demo \
//	  --input '{"train_func":"mnist-mlp","config":{"epochs":2},"scaling":{"num_workers":2},"run":{"name":"demo","storage_path":"/tmp/tempotrain"}}'
type FitInput struct {
	// TrainFunc is the name a worker registered its training function under.
	TrainFunc string `json:"train_func"`
	// Config is handed to every rank as JSON (Context.Config). Optional.
	Config json.RawMessage `json:"config,omitempty"`
	// Scaling: how many ranks, where.
	Scaling ScalingConfig `json:"scaling"`
	// Run: name, storage, failures, retention.
	Run RunConfig `json:"run"`
	// Datasets the ranks read, by name ("train", "valid", ...): each rank
	// gets its shard of each (train.Context.Dataset). Optional.
	Datasets map[string]DatasetSpec `json:"datasets,omitempty"`
	// Preprocessors, applied in order (a chain), fitted on datasets.train
	// across all ranks and applied to every dataset; they are saved with
	// every checkpoint. Optional; they need datasets.train.
	Preprocessors []PreprocessorSpec `json:"preprocessors,omitempty"`
	// Python, when set, makes the training function a Python one (Ray's
	// train_loop_per_worker with PyTorch): train_func is then "python"
	// (PythonFunc, its default) and every rank runs the spec's entrypoint
	// in a child interpreter, on workers that allow Python.
	Python *PythonSpec `json:"python,omitempty"`
}

// WithDefaults returns a copy with every unset optional field at its default.
func (in FitInput) WithDefaults() FitInput {
	if in.Python != nil {
		p := *in.Python
		if p.Interpreter == "" {
			p.Interpreter = "python3"
		}
		in.Python = &p
		if in.TrainFunc == "" {
			in.TrainFunc = PythonFunc
		}
	}
	f := &in.Run.Failure
	if f.HeartbeatTimeout == 0 {
		f.HeartbeatTimeout = Duration(DefaultHeartbeatTimeout)
	}
	if f.CollectiveTimeout == 0 {
		f.CollectiveTimeout = Duration(DefaultCollectiveTimeout)
	}
	if f.StartTimeout == 0 {
		f.StartTimeout = Duration(DefaultStartTimeout)
	}
	if in.Run.Checkpoint.ScoreOrder == "" {
		in.Run.Checkpoint.ScoreOrder = "max"
	}
	if in.Scaling.Elastic() && in.Scaling.LastCall == 0 {
		in.Scaling.LastCall = Duration(DefaultLastCall)
	}
	// The maps and slices are copied: the caller's input stays as it was.
	in.Datasets = datasetsWithDefaults(in.Datasets)
	in.Scaling.ResourcesPerWorker = maps.Clone(in.Scaling.ResourcesPerWorker)
	if in.Preprocessors != nil {
		pre := make([]PreprocessorSpec, len(in.Preprocessors))
		for i, p := range in.Preprocessors {
			pre[i] = p.WithDefaults()
		}
		in.Preprocessors = pre
	}
	return in
}

// InvalidInputError says which field of a FitInput is wrong and why.
type InvalidInputError struct {
	Field  string
	Value  any
	Reason string
}

func (e *InvalidInputError) Error() string {
	return fmt.Sprintf("invalid Fit input: %s = %s: %s", e.Field, fmtValue(e.Value), e.Reason)
}

func fmtValue(v any) string {
	if s, ok := v.(string); ok {
		return fmt.Sprintf("%q", s)
	}
	return fmt.Sprint(v)
}

// ResumePreviousBest is RunConfig.ResumeFrom naming the best checkpoint of
// the schedule's last successful run.
const ResumePreviousBest = "previous-best"

// MaxRunName bounds RunConfig.Name's length in bytes: it names a directory,
// a workflow ID and search attributes.
const MaxRunName = 200

// MaxTrainFunc bounds FitInput.TrainFunc's length in bytes: it becomes the
// TempotrainFunc search attribute, a Keyword, which Temporal caps at 2 KiB
// (a longer value fails the workflow's upsert, after the run started).
const MaxTrainFunc = 200

// MaxConfigBytes bounds FitInput.Config: it travels in every rank's input of
// every attempt, in workflow history.
const MaxConfigBytes = 256 << 10

// MaxWorkers bounds NumWorkers and MaxWorkers: a typo (1e6) fails fast
// instead of flooding a task queue. Measured (docs/scale.md): 1,024 ranks
// form and survive a SIGKILL in rank groups of 128 on a 2-core machine. At
// 4,096, by the measured costs, a fixed-size attempt is 32 groups of ~600
// events each, and the Fit's own history gains ~100 events and the world's
// peer list once per group (~6 MiB an attempt: it continues as new between
// attempts), within Temporal's limits (51,200 events, 50 MiB an
// execution); past it the Fit's signals of the peer list grow as N²/128.
// An elastic attempt is one execution, measured to form at 256 ranks.
const MaxWorkers = 4096

// Validate checks an input after WithDefaults. The first problem found is
// returned as an *InvalidInputError naming the field and its value.
func (in FitInput) Validate() error {
	bad := func(field string, v any, reason string) error {
		return &InvalidInputError{Field: field, Value: v, Reason: reason}
	}
	switch {
	case strings.TrimSpace(in.TrainFunc) == "":
		return bad("train_func", in.TrainFunc, "must name a registered training function")
	case len(in.TrainFunc) > MaxTrainFunc:
		return bad("train_func", in.TrainFunc[:MaxTrainFunc]+"...", fmt.Sprintf("is %d bytes: at most %d (it is the TempotrainFunc search attribute)", len(in.TrainFunc), MaxTrainFunc))
	case !printable(in.TrainFunc):
		return bad("train_func", in.TrainFunc, "holds a control character or invalid UTF-8")
	}
	if in.Python != nil {
		if in.TrainFunc != PythonFunc {
			return bad("train_func", in.TrainFunc, fmt.Sprintf("must be %q (or left out) when python is given", PythonFunc))
		}
		if err := in.Python.validate(); err != nil {
			return err
		}
	} else if in.TrainFunc == PythonFunc {
		return bad("python", nil, fmt.Sprintf("must be given when train_func is %q: {\"entrypoint\": \"train.py:train_func\"}", PythonFunc))
	}
	if err := in.Scaling.validate(); err != nil {
		return err
	}
	switch {
	case strings.TrimSpace(in.Run.StoragePath) == "":
		return bad("run.storage_path", in.Run.StoragePath, `must be a directory ("/data/runs") or "s3://bucket/prefix"`)
	case !validStoragePath(in.Run.StoragePath):
		return bad("run.storage_path", in.Run.StoragePath, `must be an absolute directory, "file:///dir" or "s3://bucket/prefix"`)
	case in.Run.ResumeFrom != "" && in.Run.ResumeFrom != ResumePreviousBest && !validStoragePath(in.Run.ResumeFrom):
		return bad("run.resume_from", in.Run.ResumeFrom, `must be a checkpoint URI: "/dir/run/checkpoint_000003" or "s3://bucket/prefix/run/checkpoint_000003"`)
	case strings.ContainsAny(in.Run.Name, "/\\") || in.Run.Name == "." || in.Run.Name == "..":
		return bad("run.name", in.Run.Name, "must be a single path element (no '/', '\\', '.' or '..')")
	case strings.ContainsAny(in.Run.Schedule, "/\\") || in.Run.Schedule == "." || in.Run.Schedule == "..":
		return bad("run.schedule", in.Run.Schedule, "must be a single path element (a schedule ID)")
	case len(in.Run.Name) > MaxRunName:
		return bad("run.name", in.Run.Name, fmt.Sprintf("is %d bytes: at most %d", len(in.Run.Name), MaxRunName))
	case !printable(in.Run.Name):
		return bad("run.name", in.Run.Name, "holds a control character or invalid UTF-8")
	case in.Run.Failure.MaxFailures < -1:
		return bad("run.failure.max_failures", in.Run.Failure.MaxFailures, "must be -1 (unlimited) or at least 0")
	case in.Run.Failure.HeartbeatTimeout < 0:
		return bad("run.failure.heartbeat_timeout", in.Run.Failure.HeartbeatTimeout, "must be positive")
	case in.Run.Failure.HeartbeatTimeout > 0 && in.Run.Failure.HeartbeatTimeout.D() < time.Second:
		return bad("run.failure.heartbeat_timeout", in.Run.Failure.HeartbeatTimeout, "must be at least 1s")
	case in.Run.Failure.CollectiveTimeout < 0:
		return bad("run.failure.collective_timeout", in.Run.Failure.CollectiveTimeout, "must be positive")
	case in.Run.Failure.CollectiveTimeout > 0 && in.Run.Failure.CollectiveTimeout.D() < time.Second:
		return bad("run.failure.collective_timeout", in.Run.Failure.CollectiveTimeout, "must be at least 1s")
	case in.Run.Failure.StartTimeout < 0:
		return bad("run.failure.start_timeout", in.Run.Failure.StartTimeout, "must be positive")
	case in.Run.Failure.StartTimeout > 0 && in.Run.Failure.StartTimeout.D() < time.Second:
		return bad("run.failure.start_timeout", in.Run.Failure.StartTimeout, "must be at least 1s")
	case in.Run.Checkpoint.NumToKeep < 0:
		return bad("run.checkpoint.num_to_keep", in.Run.Checkpoint.NumToKeep, "must be 0 (keep all) or positive")
	case in.Run.Checkpoint.ScoreOrder != "" && in.Run.Checkpoint.ScoreOrder != "max" && in.Run.Checkpoint.ScoreOrder != "min":
		return bad("run.checkpoint.score_order", in.Run.Checkpoint.ScoreOrder, `must be "max" or "min"`)
	}
	if len(in.Config) > MaxConfigBytes {
		return bad("config", fmt.Sprintf("%d bytes", len(in.Config)), fmt.Sprintf(
			"at most %d bytes (it is copied into every rank's input, every attempt, in workflow history): put data in a dataset (\"datasets\") or a file the function reads, and its path in the config", MaxConfigBytes))
	}
	if len(in.Config) > 0 && !json.Valid(in.Config) {
		return bad("config", string(in.Config), "is not valid JSON")
	}
	return validateData(in.Datasets, in.Preprocessors)
}

func (s ScalingConfig) validate() error {
	bad := func(field string, v any, reason string) error {
		return &InvalidInputError{Field: field, Value: v, Reason: reason}
	}
	if err := s.validateResources(); err != nil {
		return err
	}
	if !s.Elastic() {
		switch {
		case s.NumWorkers < 1:
			return bad("scaling.num_workers", s.NumWorkers, "must be at least 1 (or give scaling.min_workers and scaling.max_workers for an elastic run)")
		case s.NumWorkers > MaxWorkers:
			return bad("scaling.num_workers", s.NumWorkers, fmt.Sprintf("must be at most %d", MaxWorkers))
		case s.LastCall != 0:
			return bad("scaling.last_call", s.LastCall, "applies to elastic runs only (scaling.min_workers and scaling.max_workers)")
		case s.RanksPerProcess < 0:
			return bad("scaling.ranks_per_process", s.RanksPerProcess, "must be at least 1 (or 0: one rank per activity)")
		case s.RanksPerProcess > s.NumWorkers:
			return bad("scaling.ranks_per_process", s.RanksPerProcess, fmt.Sprintf("must be at most scaling.num_workers (%d)", s.NumWorkers))
		}
		return nil
	}
	switch {
	case s.RanksPerProcess != 0:
		return bad("scaling.ranks_per_process", s.RanksPerProcess, "applies to fixed-size runs only (scaling.num_workers): an elastic run's slots each join on their own")
	case s.MinWorkers == 0:
		return bad("scaling.min_workers", s.MinWorkers, fmt.Sprintf("must be given with scaling.max_workers (%d): the fewest ranks an attempt may train with, at least 1", s.MaxWorkers))
	case s.MaxWorkers == 0:
		return bad("scaling.max_workers", s.MaxWorkers, fmt.Sprintf("must be given with scaling.min_workers (%d): the most ranks the run grows to", s.MinWorkers))
	case s.MinWorkers < 1:
		return bad("scaling.min_workers", s.MinWorkers, "must be at least 1")
	case s.MaxWorkers > MaxWorkers:
		return bad("scaling.max_workers", s.MaxWorkers, fmt.Sprintf("must be at most %d", MaxWorkers))
	case s.MinWorkers > s.MaxWorkers:
		return bad("scaling.min_workers", s.MinWorkers, fmt.Sprintf("must be at most scaling.max_workers (%d)", s.MaxWorkers))
	case s.NumWorkers != 0 && s.NumWorkers != s.MaxWorkers:
		return bad("scaling.num_workers", s.NumWorkers, fmt.Sprintf("conflicts with scaling.min_workers %d and scaling.max_workers %d: give num_workers for a fixed size, or min/max for an elastic run (num_workers may only repeat max_workers)", s.MinWorkers, s.MaxWorkers))
	case s.LastCall < 0:
		return bad("scaling.last_call", s.LastCall, "must be positive")
	case s.LastCall > 0 && s.LastCall.D() < time.Millisecond:
		return bad("scaling.last_call", s.LastCall, "must be at least 1ms")
	}
	return nil
}

// printable reports whether s is valid UTF-8 without control characters:
// what a name that becomes a search attribute, a log field and a path may hold.
func printable(s string) bool {
	return utf8.ValidString(s) && strings.IndexFunc(s, unicode.IsControl) < 0
}

func validStoragePath(p string) bool {
	switch {
	case strings.HasPrefix(p, "/"):
		return true
	case strings.HasPrefix(p, "file:///"):
		return true
	case strings.HasPrefix(p, "s3://"):
		return len(p) > len("s3://") && p[len("s3://")] != '/'
	}
	return false
}

// RankHeartbeatsPerSecond bounds how many heartbeats the ranks of one
// attempt send its Fit workflow a second, whatever the world size: each is a
// write of the workflow's state, under the lock its Updates and activity
// starts take too.
const RankHeartbeatsPerSecond = 64

// RankHeartbeatInterval is how often each rank of a world of n heartbeats:
// every base (a worker's setting, 1s by default), and no more often than
// n/RankHeartbeatsPerSecond seconds, so that a world past 64 ranks
// heartbeats every 2s at 128 ranks, 4s at 256, 16s at 1,024.
func RankHeartbeatInterval(base time.Duration, n int) time.Duration {
	return max(base, time.Duration(n)*time.Second/RankHeartbeatsPerSecond)
}

// RankHeartbeatTimeout is the heartbeat timeout the Fit gives the ranks of
// a world of n: the user's (run.failure.heartbeat_timeout), or three
// heartbeat intervals where the world is so large that its ranks heartbeat
// less often than every second (RankHeartbeatInterval) and the user's is
// shorter than that: 12s at 256 ranks, 48s at 1,024.
func RankHeartbeatTimeout(user time.Duration, n int) time.Duration {
	every := RankHeartbeatInterval(time.Second, n)
	if every <= time.Second {
		return user
	}
	return max(user, 3*every)
}
