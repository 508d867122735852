package workflows

import (
	"errors"
	"fmt"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/tempotrain/tempotrain/api"
)

// BatchPredict, Ray's BatchPredictor made durable:
//
//  1. PlanBatchPredict (on the predict task queue, where the shards run)
//     loads the checkpoint's predictor, checks the dataset's columns against
//     its inputs and the output against what it may overwrite, and cuts the
//     dataset into shards: a CSV file, or a range of a Parquet file's rows.
//     A bad input ends the run at once, non-retryably, naming what is wrong.
//  2. At most Concurrency PredictShard activities run at once, one per
//     shard, each retried by Temporal (heartbeat timeout, MaxAttempts) and
//     committing its output file with one atomic write, so that a shard
//     whose worker died mid-way and ran again leaves exactly one file.
//  3. CommitBatchPredict writes the _SUCCESS manifest, last, after deleting
//     part files of an earlier unfinished run that are not this run's.
//
// Workflow state holds the plan (shards as row ranges) and, per shard,
// rows, bytes and attempts: a few numbers, never rows. A long run continues
// as new when Temporal suggests it, once the shards in flight are done.

// PredictOptions configure the BatchPredict workflows a worker runs. The
// zero value is what production runs.
type PredictOptions struct {
	// ContinueAsNewAfterShards, when positive, makes a BatchPredict continue
	// as new once that many shards completed in its run, as if Temporal had
	// suggested it: tests exercise continue-as-new with a few shards.
	// Default 0: only Temporal's suggestion triggers it.
	ContinueAsNewAfterShards int
}

// BatchPredictor runs BatchPredict workflows with its Options.
type BatchPredictor struct{ o PredictOptions }

// NewBatchPredictor returns a BatchPredictor with o.
func NewBatchPredictor(o PredictOptions) *BatchPredictor { return &BatchPredictor{o: o} }

// Register registers p's BatchPredict on a worker under
// api.BatchPredictWorkflowType.
func (p *BatchPredictor) Register(r worker.WorkflowRegistry) {
	r.RegisterWorkflowWithOptions(p.BatchPredict, workflow.RegisterOptions{Name: api.BatchPredictWorkflowType})
}

// PredictCarry is what a BatchPredict hands to its continuation across
// continue-as-new; a BatchPredict started by a caller has none.
type PredictCarry struct {
	Plan  api.PredictPlan `json:"plan"`
	Start time.Time       `json:"start"`
	// Per shard: rows and bytes written, and the attempt that committed it
	// (0: not done).
	Rows     []int64 `json:"rows"`
	Bytes    []int64 `json:"bytes"`
	Attempts []int   `json:"attempts"`
}

// BatchPredict with the default Options.
func BatchPredict(ctx workflow.Context, in api.BatchPredictInput, carry *PredictCarry) (*api.BatchPredictResult, error) {
	return NewBatchPredictor(PredictOptions{}).BatchPredict(ctx, in, carry)
}

// batchPredict is the state of one BatchPredict run.
type batchPredict struct {
	o       PredictOptions
	in      api.BatchPredictInput
	phase   string
	c       PredictCarry
	running int
	// doneThisRun counts shards completed in this run (continue-as-new).
	doneThisRun int
	err         string
}

// BatchPredict predicts every row of a dataset with a checkpoint's model
// and writes the predictions to an output directory. See the package doc
// and api.BatchPredictInput. A run whose shard failed for good ends with an
// api.ErrBatchPredictFailed application error whose details carry the
// BatchPredictResult so far.
func (p *BatchPredictor) BatchPredict(ctx workflow.Context, in api.BatchPredictInput, carry *PredictCarry) (*api.BatchPredictResult, error) {
	in = in.WithDefaults()
	if err := in.Validate(); err != nil {
		return nil, temporal.NewNonRetryableApplicationError(err.Error(), api.ErrInvalidInput.String(), err)
	}
	s := &batchPredict{o: p.o, in: in, phase: "plan"}
	if err := workflow.SetQueryHandler(ctx, api.QueryBatchPredictStatus, s.status); err != nil {
		return nil, err
	}
	logger := workflow.GetLogger(ctx)
	if carry != nil {
		s.c = *carry
	} else {
		s.c.Start = workflow.Now(ctx)
		if err := s.plan(ctx); err != nil {
			s.phase, s.err = "failed", err.Error()
			return nil, err
		}
		n := len(s.c.Plan.Shards)
		s.c.Rows, s.c.Bytes, s.c.Attempts = make([]int64, n), make([]int64, n), make([]int, n)
		logger.Info("batch predict planned", "shards", n, "files", len(s.c.Plan.Files), "rows", s.c.Plan.RowsIn)
	}
	s.phase = "predict"
	stopped, err := s.predict(ctx)
	switch {
	case ctx.Err() != nil:
		s.phase, s.err = "failed", "cancelled"
		return nil, temporal.NewCanceledError(s.result(ctx, "cancelled"))
	case err != nil:
		s.phase, s.err = "failed", err.Error()
		return nil, temporal.NewNonRetryableApplicationError(err.Error(), api.ErrBatchPredictFailed.String(), nil, s.result(ctx, err.Error()))
	case stopped:
		logger.Info("continuing as new", "done", s.done(), "shards", len(s.c.Plan.Shards))
		return nil, workflow.NewContinueAsNewError(ctx, api.BatchPredictWorkflowType, s.in, &s.c)
	}
	s.phase = "commit"
	if err := s.commit(ctx); err != nil {
		s.phase, s.err = "failed", err.Error()
		return nil, temporal.NewNonRetryableApplicationError(err.Error(), api.ErrBatchPredictFailed.String(), nil, s.result(ctx, err.Error()))
	}
	s.phase = "done"
	res := s.result(ctx, "")
	res.Manifest = strings.TrimSuffix(s.in.Output, "/") + "/" + api.PredictManifestName
	logger.Info("batch predict done", "shards", res.Shards, "rows", res.RowsOut, "retried", res.Retried)
	return res, nil
}

// ioOptions are the options of the planning and commit activities: on the
// predict task queue, retried with backoff for transient errors, never for
// a bad input or an unusable storage path.
func (s *batchPredict) ioOptions(ctx workflow.Context) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue:              s.in.PredictQueue(),
		ScheduleToStartTimeout: s.in.StartTimeout.D(),
		StartToCloseTimeout:    30 * time.Minute,
		HeartbeatTimeout:       api.BookkeepingHeartbeatTimeout,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:        time.Second,
			BackoffCoefficient:     2,
			MaximumInterval:        30 * time.Second,
			MaximumAttempts:        10,
			NonRetryableErrorTypes: []string{api.ErrInvalidInput.String(), api.ErrStorage.String()},
		},
	})
}

// plan runs PlanBatchPredict.
func (s *batchPredict) plan(ctx workflow.Context) error {
	var plan api.PredictPlan
	err := workflow.ExecuteActivity(s.ioOptions(ctx), api.ActivityPlanBatchPredict, api.PredictPlanInput{Input: s.in}).Get(ctx, &plan)
	if err != nil {
		return s.activityFailure("plan", err)
	}
	if len(plan.Shards) == 0 {
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf("invalid BatchPredict input: dataset %q has no rows", s.in.Dataset.URI), api.ErrInvalidInput.String(), nil)
	}
	s.c.Plan = plan
	if plan.Checkpoint != "" && plan.Checkpoint != s.in.Checkpoint {
		workflow.GetLogger(ctx).Info("checkpoint resolved", "from", s.in.Checkpoint, "to", plan.Checkpoint)
		s.in.Checkpoint = plan.Checkpoint
	}
	return nil
}

// activityFailure turns the error of the planning or commit activity into
// the workflow's: a bad input or storage path keeps its kind, non-retryably.
func (s *batchPredict) activityFailure(what string, err error) error {
	var app *temporal.ApplicationError
	var timeout *temporal.TimeoutError
	switch {
	case errors.As(err, &app):
		switch kind := api.ErrorKind(app.Type()); kind {
		case api.ErrInvalidInput, api.ErrStorage:
			// The message says it all; the activity's error chain would
			// say it twice.
			return temporal.NewNonRetryableApplicationError(app.Message(), kind.String(), nil)
		}
	case errors.As(err, &timeout) && timeout.TimeoutType() == enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START:
		return temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("%s: no worker took it from task queue %q within %s: is a worker with predict (or rank) slots polling that queue?", what, s.in.PredictQueue(), s.in.StartTimeout),
			api.ErrBatchPredictFailed.String(), nil)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// predict runs the shards not done yet, at most Concurrency at once, in
// order. It returns stopped when it stopped launching shards to continue as
// new, and the first shard that failed for good as err (after the others
// in flight were cancelled and ended).
func (s *batchPredict) predict(ctx workflow.Context) (stopped bool, err error) {
	actx, cancel := workflow.WithCancel(ctx)
	defer cancel()
	actx = workflow.WithActivityOptions(actx, workflow.ActivityOptions{
		TaskQueue: s.in.PredictQueue(),
		// A shard's liveness is its heartbeat, not its duration; a shard
		// queued behind others on a busy worker waits as long as it takes.
		StartToCloseTimeout: rankRunTimeout,
		HeartbeatTimeout:    s.in.HeartbeatTimeout.D(),
		WaitForCancellation: true,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:        time.Second,
			BackoffCoefficient:     2,
			MaximumInterval:        30 * time.Second,
			MaximumAttempts:        int32(s.in.MaxAttempts),
			NonRetryableErrorTypes: []string{api.ErrInvalidInput.String(), api.ErrStorage.String()},
		},
	})
	sel := workflow.NewSelector(ctx)
	var failure error
	next := 0
	shards := s.c.Plan.Shards
	for {
		for failure == nil && !stopped && s.running < s.in.Concurrency && next < len(shards) {
			i := next
			next++
			if s.c.Attempts[i] > 0 {
				continue
			}
			sh := shards[i]
			in := api.PredictShardInput{Input: s.in, DatasetFormat: s.c.Plan.DatasetFormat, File: s.c.Plan.Files[sh.File], Shard: sh, Columns: s.c.Plan.Columns}
			s.running++
			sel.AddFuture(workflow.ExecuteActivity(actx, api.ActivityPredictShard, in), func(f workflow.Future) {
				s.running--
				var out api.PredictShardOutput
				if err := f.Get(ctx, &out); err != nil {
					if failure == nil && ctx.Err() == nil {
						failure = s.shardFailure(sh, err)
						cancel()
					}
					return
				}
				if want := sh.Rows(); want >= 0 && out.Rows != want {
					if failure == nil {
						failure = fmt.Errorf("shard %d (%s rows [%d, %d)): %d rows written, the shard has %d", sh.Index, s.c.Plan.Files[sh.File], sh.Lo, sh.Hi, out.Rows, want)
						cancel()
					}
					return
				}
				s.c.Rows[i], s.c.Bytes[i], s.c.Attempts[i] = out.Rows, out.Bytes, max(1, out.Attempt)
				s.doneThisRun++
			})
		}
		if s.running == 0 {
			break
		}
		sel.Select(ctx)
		if !stopped && s.done() < len(shards) && s.historyLong(ctx) {
			stopped = true // the shards in flight finish; the rest go to the continuation
		}
	}
	if failure != nil {
		return false, failure
	}
	return stopped && s.done() < len(shards), nil
}

func (s *batchPredict) historyLong(ctx workflow.Context) bool {
	if n := s.o.ContinueAsNewAfterShards; n > 0 && s.doneThisRun >= n {
		return true
	}
	return workflow.GetInfo(ctx).GetContinueAsNewSuggested()
}

// shardFailure says why a shard failed for good.
func (s *batchPredict) shardFailure(sh api.PredictShardSpec, err error) error {
	where := fmt.Sprintf("shard %d (%s", sh.Index, s.c.Plan.Files[sh.File])
	if sh.Hi >= 0 {
		where += fmt.Sprintf(" rows [%d, %d)", sh.Lo, sh.Hi)
	}
	where += ")"
	var act *temporal.ActivityError
	retry := ""
	if errors.As(err, &act) {
		switch act.RetryState() {
		case enumspb.RETRY_STATE_MAXIMUM_ATTEMPTS_REACHED:
			retry = fmt.Sprintf(" after %d attempts (max_attempts)", s.in.MaxAttempts)
		case enumspb.RETRY_STATE_NON_RETRYABLE_FAILURE:
			retry = " (not retryable)"
		}
	}
	var app *temporal.ApplicationError
	var timeout *temporal.TimeoutError
	msg := err.Error()
	switch {
	case errors.As(err, &app):
		msg = app.Message()
	case errors.As(err, &timeout) && timeout.TimeoutType() == enumspb.TIMEOUT_TYPE_HEARTBEAT:
		msg = fmt.Sprintf("no heartbeat for %s: its worker process died, froze or lost its connection to Temporal", s.in.HeartbeatTimeout)
	}
	return fmt.Errorf("%s failed%s: %s", where, retry, msg)
}

// commit runs CommitBatchPredict: the manifest, written last.
func (s *batchPredict) commit(ctx workflow.Context) error {
	in := api.CommitPredictInput{Input: s.in, Plan: s.c.Plan, Rows: s.c.Rows, Bytes: s.c.Bytes, Created: workflow.Now(ctx)}
	if err := workflow.ExecuteActivity(s.ioOptions(ctx), api.ActivityCommitBatchPredict, in).Get(ctx, nil); err != nil {
		return s.activityFailure("commit", err)
	}
	return nil
}

func (s *batchPredict) done() int {
	n := 0
	for _, a := range s.c.Attempts {
		if a > 0 {
			n++
		}
	}
	return n
}

func (s *batchPredict) rowsDone() int64 {
	var n int64
	for i, a := range s.c.Attempts {
		if a > 0 {
			n += s.c.Rows[i]
		}
	}
	return n
}

func (s *batchPredict) retried() int {
	n := 0
	for _, a := range s.c.Attempts {
		if a > 1 {
			n++
		}
	}
	return n
}

func (s *batchPredict) status() (api.BatchPredictStatus, error) {
	rowsIn := s.c.Plan.RowsIn
	if s.phase == "plan" {
		rowsIn = -1
	}
	return api.BatchPredictStatus{Phase: s.phase, Shards: len(s.c.Plan.Shards), Done: s.done(), Running: s.running,
		RowsDone: s.rowsDone(), RowsIn: rowsIn, Retried: s.retried(), Error: s.err}, nil
}

func (s *batchPredict) result(ctx workflow.Context, errMsg string) *api.BatchPredictResult {
	r := &api.BatchPredictResult{
		Output: s.in.Output, Format: s.in.Format, Columns: s.c.Plan.Columns, Shards: len(s.c.Plan.Shards),
		Done: s.done(), RowsIn: s.rowsDone(), RowsOut: s.rowsDone(), Attempts: s.c.Attempts, Retried: s.retried(),
		Seconds: workflow.Now(ctx).Sub(s.c.Start).Seconds(), Error: errMsg,
	}
	for i, a := range s.c.Attempts {
		if a > 0 {
			r.Files = append(r.Files, api.PartName(i, s.in.Format))
		}
	}
	return r
}
