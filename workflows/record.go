package workflows

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/tempotrain/tempotrain/api"
)

// The run's state in storage: loaded at the start (LoadRun), recorded as it
// goes (RecordRun, one call at a time), and at the end, the promotion of a
// scheduled run's best checkpoint or the continuation as new.

// load checks the storage path and reads run.json, so that a Fit with the name
// of an existing run resumes it.
func (f *fit) load(ctx workflow.Context) error {
	var out api.LoadRunOutput
	in := api.LoadRunInput{StoragePath: f.in.Run.StoragePath, RunName: f.in.Run.Name, ResumeFrom: f.in.Run.ResumeFrom,
		Datasets: f.in.Datasets, Schedule: f.in.Run.Schedule}
	var load workflow.Future
	if workflow.GetVersion(ctx, versionLoadRunLocal, workflow.DefaultVersion, 1) >= 1 {
		// In the Fit's first workflow task, on its own worker: a run's
		// start costs one workflow task and one activity task fewer.
		load = workflow.ExecuteLocalActivity(f.localStorageCtx(ctx), api.ActivityLoadRun, in)
	} else {
		load = workflow.ExecuteActivity(f.storageCtx(ctx), api.ActivityLoadRun, in)
	}
	err := load.Get(ctx, &out)
	if err != nil {
		var app *temporal.ApplicationError
		if errors.As(err, &app) {
			// An unusable storage path or dataset ends the run at once, as
			// a bad input does.
			switch kind := api.ErrorKind(app.Type()); kind {
			case api.ErrStorage, api.ErrInvalidInput:
				return temporal.NewNonRetryableApplicationError(app.Message(), kind.String(), err)
			}
		}
		return fmt.Errorf("load run %q: %w", f.in.Run.Name, err)
	}
	f.path = out.Path
	if f.in.Run.ResumeFrom == api.ResumePreviousBest || strings.HasSuffix(f.in.Run.ResumeFrom, "/"+api.BestFile) {
		// Resolved now, at the run's start: the schedule's last model, or
		// nothing for its first run.
		f.in.Run.ResumeFrom = out.ResumeFrom
		workflow.GetLogger(ctx).Info("previous-best resolved", "schedule", f.in.Run.Schedule, "checkpoint", out.ResumeFrom)
	}
	if out.State != nil {
		f.st = *out.State
		workflow.GetLogger(ctx).Info("resuming run", "name", f.in.Run.Name,
			"attempts", f.st.Attempts, "checkpoints", len(f.st.Checkpoints))
	} else {
		f.st = api.RunState{Version: api.RunStateVersion, Name: f.in.Run.Name, NextSeq: 1}
	}
	f.st.TrainFunc = f.in.TrainFunc
	if f.st.NextSeq < 1 {
		f.st.NextSeq = 1
	}
	return nil
}

// storageCtx carries the options of LoadRun and RecordRun: retried with
// backoff for an hour (storage may be restarting), and a heartbeat timeout so
// that one whose worker died (the controller process) is retried elsewhere in
// seconds instead of at its start-to-close timeout.
func (f *fit) storageCtx(ctx workflow.Context) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout:    5 * time.Minute,
		HeartbeatTimeout:       api.BookkeepingHeartbeatTimeout,
		ScheduleToCloseTimeout: time.Hour,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:        time.Second,
			BackoffCoefficient:     2,
			MaximumInterval:        30 * time.Second,
			NonRetryableErrorTypes: []string{api.ErrStorage.String()},
		},
	})
}

// localStorageCtx carries storageCtx's timeouts and retries for LoadRun as a
// local activity (the worker keeps the workflow task alive while it runs,
// and its process's death makes the task time out and run elsewhere).
func (f *fit) localStorageCtx(ctx workflow.Context) workflow.Context {
	ao := workflow.GetActivityOptions(f.storageCtx(ctx))
	return workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		StartToCloseTimeout:    ao.StartToCloseTimeout,
		ScheduleToCloseTimeout: ao.ScheduleToCloseTimeout,
		RetryPolicy:            ao.RetryPolicy,
	})
}

// historyLong says whether to continue as new: when Temporal suggests it
// (history near its size limits).
func (f *fit) historyLong(ctx workflow.Context) bool {
	return f.reportsLong() || f.suggested(ctx)
}

// reportsLong: Options.ContinueAsNewAfterReports says to continue as new.
func (f *fit) reportsLong() bool {
	n := f.opts.ContinueAsNewAfterReports
	return n > 0 && f.reportsThisRun >= n
}

// suggested: Temporal suggests continuing as new (or
// Options.ContinueAsNewAfterEvents, standing for its event count).
func (f *fit) suggested(ctx workflow.Context) bool {
	if n := f.opts.ContinueAsNewAfterEvents; n > 0 && workflow.GetInfo(ctx).GetCurrentHistoryLength() >= n {
		return true
	}
	return workflow.GetInfo(ctx).GetContinueAsNewSuggested()
}

// stopAtCheckpoint says whether a checkpoint just committed should end the
// attempt to continue as new: Options.ContinueAsNewAfterReports says so,
// or Temporal suggests it and the attempt is not young.
func (f *fit) stopAtCheckpoint(ctx workflow.Context) bool {
	if f.reportsLong() {
		return true
	}
	if !f.suggested(ctx) {
		return false
	}
	return !(f.attemptYoung(ctx) && workflow.GetVersion(ctx, versionYoungAttemptGoesOn, workflow.DefaultVersion, 1) >= 1)
}

// Far enough below Temporal's hard limits of one workflow run (51,200
// events and 50 MiB of history: the run is terminated; 2,000 Updates: the
// next are refused) that a young attempt which passed them still reaches
// a checkpoint in time, with a few hundred events or Updates an attempt's
// checkpoint interval.
const (
	hardHistoryEvents = 40960
	hardHistoryBytes  = 40 << 20
	hardUpdates       = 1600
)

// attemptYoung says whether the running attempt should go on past a
// checkpoint although the history is long: since its first report it has
// added fewer events than its start took (its RunRank activities, the
// rendezvous' Updates: ~5 events a rank), so stopping it there to continue
// as new would spend on the restart more history than it saves, and a large
// group (about 850 ranks and more, whose start alone passes Temporal's
// 4,096-event suggestion) would restart at every checkpoint. An attempt
// near a hard limit (hardHistoryEvents, hardHistoryBytes, hardUpdates) is
// never young.
func (f *fit) attemptYoung(ctx workflow.Context) bool {
	info := workflow.GetInfo(ctx)
	n := info.GetCurrentHistoryLength()
	if f.firstReportLen == 0 || n >= hardHistoryEvents || info.GetCurrentHistorySize() >= hardHistoryBytes || f.updatesThisRun >= hardUpdates {
		return false
	}
	return n-f.firstReportLen < f.firstReportLen-f.attemptLen
}

// recorder writes reports, run.json and retention deletions through
// RecordRun, one call at a time, so that run.json is always saved before the
// checkpoints it no longer lists are deleted.
func (f *fit) recorder(ctx workflow.Context) {
	for {
		_ = workflow.Await(ctx, func() bool { return f.dirty || f.done })
		if !f.dirty {
			return
		}
		in := api.RecordRunInput{
			StoragePath: f.in.Run.StoragePath, RunName: f.in.Run.Name,
			Reports: f.pending, Delete: f.toDelete, State: f.st,
		}
		in.State.Updated = workflow.Now(ctx)
		in.State.Checkpoints = append([]api.Checkpoint(nil), f.st.Checkpoints...)
		in.State.History = append([]api.AttemptRecord(nil), f.st.History...)
		f.pending, f.toDelete, f.dirty, f.writing = nil, nil, false, true
		err := workflow.ExecuteActivity(f.storageCtx(ctx), api.ActivityRecordRun, in).Get(ctx, nil)
		f.writing = false
		if err != nil && f.storeErr == nil {
			f.storeErr = err
			workflow.GetLogger(ctx).Error("recording run state failed", "error", err)
		}
	}
}

// flush waits until the recorder has written everything.
func (f *fit) flush(ctx workflow.Context) {
	_ = workflow.Await(ctx, func() bool { return !f.dirty && !f.writing })
}

func (f *fit) result(errMsg string) *api.Result {
	r := &api.Result{
		Name: f.in.Run.Name, Metrics: f.st.Latest, Path: f.path,
		Attempts: f.st.Attempts, Failures: f.failures, Reports: f.st.Reports, Error: errMsg,
	}
	for _, h := range f.st.History {
		r.WorldSizes = append(r.WorldSizes, h.WorldSize)
	}
	r.Promoted = f.promoted
	if f.st.Status == api.StatusStopped {
		r.StopReason = f.stopReason
	}
	if n := len(f.st.Checkpoints); n > 0 {
		latest := f.st.Checkpoints[n-1]
		r.Checkpoint = &latest
		r.BestCheckpoints = BestFirst(f.st.Checkpoints, f.in.Run.Checkpoint)
	}
	return r
}

// finish records how the run ended (status, and errMsg unless it
// succeeded) and ends the workflow. A cancelled run's Result carries errMsg
// too; the caller returns a cancellation instead of what finish returns.
func (f *fit) finish(ctx workflow.Context, status api.RunStatus, errMsg string) (*api.Result, error) {
	f.st.Status = status
	f.upsert(ctx, temporal.NewSearchAttributeKeyKeyword(api.SAStatus).ValueSet(string(status)))
	if status == api.StatusFailed {
		f.st.Error = errMsg
	}
	// What an abandoned rank 0 may have committed unreported: the run is
	// over, deleted after run.json is saved (a seq with nothing there
	// deletes nothing).
	for _, seq := range f.st.Abandoned {
		if !slices.ContainsFunc(f.st.Checkpoints, func(c api.Checkpoint) bool { return c.Seq == seq }) {
			f.toDelete = append(f.toDelete, seq)
		}
	}
	f.st.Abandoned = nil
	f.dirty = true
	f.flush(ctx)
	ok := status == api.StatusSucceeded || status == api.StatusStopped
	if ok && f.storeErr != nil {
		errMsg = "storage: " + f.storeErr.Error()
	}
	if ok && errMsg == "" {
		f.promote(ctx)
	}
	f.done = true
	_ = workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) })
	res := f.result(errMsg)
	if errMsg != "" {
		return nil, temporal.NewNonRetryableApplicationError(errMsg, api.ErrTrainingFailed.String(), nil, res)
	}
	return res, nil
}

// promote records a scheduled run's best checkpoint for the schedule's next
// run and promotes it when better (the Promote activity). A failure is
// logged: the run itself succeeded.
func (f *fit) promote(ctx workflow.Context) {
	if f.in.Run.Schedule == "" || len(f.st.Checkpoints) == 0 ||
		workflow.GetVersion(ctx, versionPromote, workflow.DefaultVersion, 1) < 1 {
		return
	}
	best := BestFirst(f.st.Checkpoints, f.in.Run.Checkpoint)[0]
	best.Dir = ""
	var out api.PromoteOutput
	err := workflow.ExecuteActivity(f.storageCtx(ctx), api.ActivityPromote, api.PromoteRequest{
		StoragePath: f.in.Run.StoragePath, Schedule: f.in.Run.Schedule, Run: f.in.Run.Name, Best: best,
		ScoreAttribute: f.in.Run.Checkpoint.ScoreAttribute, ScoreOrder: f.in.Run.Checkpoint.ScoreOrder,
	}).Get(ctx, &out)
	if err != nil {
		workflow.GetLogger(ctx).Error("promoting the best checkpoint", "schedule", f.in.Run.Schedule, "error", err)
		return
	}
	f.promoted = out.Promoted
	workflow.GetLogger(ctx).Info("scheduled run recorded", "schedule", f.in.Run.Schedule, "checkpoint", best.Seq, "promoted", out.Promoted)
}

func (f *fit) continueAsNew(ctx workflow.Context) error {
	f.flush(ctx)
	f.done = true
	_ = workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) })
	workflow.GetLogger(ctx).Info("continuing as new", "attempts", f.st.Attempts, "reports", f.st.Reports)
	return workflow.NewContinueAsNewError(ctx, api.WorkflowType, f.in, &Carry{
		State: f.st, Path: f.path, Failures: f.failures, Recent: f.recent, Trial: f.trial, TrialMetric: f.trialMetric,
		TrialJudging: f.trialJudging, JudgedRungs: f.judgedRungs,
	})
}
