package workflows

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/tempotrain/tempotrain/api"
)

// Bounds that keep workflow history and payloads small.
const (
	// recentReports is how many reports the status Query returns.
	recentReports = 32
	// resumeCandidates is how many checkpoints, newest first, a rank may try
	// when the newest does not verify.
	resumeCandidates = 3
)

// Workflow versions (workflow.GetVersion): histories recorded before a
// change replay on the code path they ran.
const (
	// versionCancelGrace: attempts stop waiting for ranks cancelGrace after
	// their first failure cancelled them.
	versionCancelGrace = "cancel-grace"
	// versionRestartBackoff: attempts failing in a row without a new
	// checkpoint wait RestartBackoff before the next.
	versionRestartBackoff = "restart-backoff"
	// versionSearchAttributes: the Fit upserts its search attributes.
	versionSearchAttributes = "search-attributes"
	// versionPromote: a scheduled run that succeeded records and maybe
	// promotes its best checkpoint.
	versionPromote = "schedule-promotion"
)

// Carry is what a Fit hands to its continuation across continue-as-new.
// A Fit started by a caller has none.
type Carry struct {
	State    api.RunState       `json:"state"`
	Path     string             `json:"path"`
	Failures int                `json:"failures"`
	Recent   []api.ReportRecord `json:"recent,omitempty"`
}

// Options configure the Fit workflows a worker runs. The zero value is what
// production runs; every field documents its default.
type Options struct {
	// ContinueAsNewAfterReports, when positive, makes a Fit continue as new
	// once its history holds that many reports, as if Temporal had suggested
	// it: tests exercise continue-as-new without thousands of reports.
	// Default 0: only Temporal's suggestion triggers it.
	ContinueAsNewAfterReports int
	// SearchAttributes makes every Fit upsert api.SearchAttributes (run,
	// function, status, attempt, world size, best score). The namespace
	// must have them registered (app.StartWorker checks and sets this).
	// Default false.
	SearchAttributes bool
}

// Controller runs Fit workflows with its Options. Register its Fit method
// under api.WorkflowType (Register does).
type Controller struct{ o Options }

// New returns a Controller with o.
func New(o Options) *Controller { return &Controller{o: o} }

// Register registers c's Fit on a worker under api.WorkflowType.
func (c *Controller) Register(r worker.WorkflowRegistry) {
	r.RegisterWorkflowWithOptions(c.Fit, workflow.RegisterOptions{Name: api.WorkflowType})
}

// fit is the state of one Fit workflow run.
type fit struct {
	opts Options
	in   api.FitInput
	path string
	st   api.RunState
	// failures counts failed attempts of this Fit (MaxFailures applies to it).
	failures int

	// The current attempt.
	attempt    int
	running    bool
	token      string
	peers      []*api.Peer
	registered int
	cancel     workflow.CancelFunc
	// preempted: the workflow stopped the attempt at a checkpoint to
	// continue as new; not a failure.
	preempted bool
	// el is the elastic state of the current attempt (elastic runs only).
	el *elasticAttempt
	// nextTarget: the next elastic group forms once this many ranks
	// registered (0: all, or the last call).
	nextTarget int
	// growing: the workflow stopped an elastic attempt at a checkpoint to
	// restart it with the standbys; not a failure.
	growing bool
	// sa: this Fit upserts its search attributes; best is the score last
	// upserted.
	sa      bool
	best    float64
	bestSet bool
	// promoted: this scheduled run's best checkpoint was promoted.
	promoted bool

	// Storage bookkeeping not yet written by RecordRun.
	pending  []api.ReportRecord
	toDelete []int
	dirty    bool
	writing  bool
	storeErr error

	recent         []api.ReportRecord
	reportsThisRun int
	done           bool
}

// Fit is the controller of a training run with the default Options.
func Fit(ctx workflow.Context, in api.FitInput, carry *Carry) (*api.Result, error) {
	return New(Options{}).Fit(ctx, in, carry)
}

// Fit is the controller of a training run. It returns the run's Result; a run
// that fails ends the workflow with an api.ErrTrainingFailed application
// error whose details carry the Result (train.Trainer unpacks it).
func (c *Controller) Fit(ctx workflow.Context, in api.FitInput, carry *Carry) (*api.Result, error) {
	in = in.WithDefaults()
	if in.Run.Name == "" {
		in.Run.Name = workflow.GetInfo(ctx).WorkflowExecution.ID
	}
	if err := in.Validate(); err != nil {
		return nil, temporal.NewNonRetryableApplicationError(err.Error(), api.ErrInvalidInput.String(), err)
	}
	if in.Run.Schedule == "" {
		// A run a Schedule started belongs to it.
		if id, ok := workflow.GetTypedSearchAttributes(ctx).GetKeyword(temporal.NewSearchAttributeKeyKeyword("TemporalScheduledById")); ok {
			in.Run.Schedule = id
		}
	}
	f := &fit{opts: c.o, in: in}
	if err := f.registerHandlers(ctx); err != nil {
		return nil, err
	}
	logger := workflow.GetLogger(ctx)

	if carry != nil {
		f.st, f.path, f.failures, f.recent = carry.State, carry.Path, carry.Failures, carry.Recent
	} else if err := f.load(ctx); err != nil {
		return nil, err
	}
	f.st.Status, f.st.Error = api.StatusRunning, ""
	f.dirty = true
	f.initSearchAttributes(ctx)
	// Bookkeeping goes on after a cancellation of the workflow, to record it.
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	workflow.Go(dctx, f.recorder)

	stalled := 0 // failed attempts in a row that committed no checkpoint
	for {
		before := f.latestSeq()
		outcome := f.runAttempt(ctx)
		if f.latestSeq() != before {
			stalled = 0
		}
		switch {
		case ctx.Err() != nil:
			logger.Info("run cancelled", "attempt", f.attempt)
			_, _ = f.finish(dctx, api.StatusCancelled, "cancelled")
			return nil, temporal.NewCanceledError(f.result("cancelled"))
		case outcome.err == "":
			logger.Info("run succeeded", "attempt", f.attempt)
			return f.finish(ctx, api.StatusSucceeded, "")
		case f.preempted:
			// A planned stop for continue-as-new, not a failure: whatever the
			// ranks said while the group was torn down is a consequence.
			f.preempted = false
			f.growing = false
		case f.growing:
			// A planned stop of an elastic run to grow: workers came back.
			logger.Info("attempt ended to grow the group", "attempt", f.attempt)
			f.growing = false
		case outcome.preempted:
			// A worker is stopping: the ranks checkpointed where they were,
			// and the next attempt resumes there on the workers left.
			logger.Info("attempt preempted", "attempt", f.attempt, "error", outcome.err)
		default:
			f.failures++
			f.st.Failures++
			logger.Warn("attempt failed", "attempt", f.attempt, "error", outcome.err)
			if !ShouldRestart(f.failures, f.in.Run.Failure.MaxFailures, outcome.nonRetryable) {
				msg := outcome.err
				if !outcome.nonRetryable {
					msg = fmt.Sprintf("%s (failure %d, max_failures %d)", msg, f.failures, f.in.Run.Failure.MaxFailures)
				}
				return f.finish(ctx, api.StatusFailed, msg)
			}
			stalled++
			if d := RestartBackoff(stalled); d > 0 && workflow.GetVersion(ctx, versionRestartBackoff, workflow.DefaultVersion, 1) >= 1 {
				// Failing again and again without progress (a crashing
				// function, a missing worker, max_failures -1): wait before
				// the next attempt, in workflow time.
				logger.Info("backing off before the next attempt", "failures_in_a_row", stalled, "wait", d)
				if err := workflow.Sleep(ctx, d); err != nil && ctx.Err() != nil {
					_, _ = f.finish(dctx, api.StatusCancelled, "cancelled")
					return nil, temporal.NewCanceledError(f.result("cancelled"))
				}
			}
		}
		if f.storeErr != nil {
			return f.finish(ctx, api.StatusFailed, "storage: "+f.storeErr.Error())
		}
		if f.historyLong(ctx) {
			return nil, f.continueAsNew(ctx)
		}
	}
}

// load checks the storage path and reads run.json, so that a Fit with the name
// of an existing run resumes it.
func (f *fit) load(ctx workflow.Context) error {
	var out api.LoadRunOutput
	err := workflow.ExecuteActivity(f.storageCtx(ctx), api.ActivityLoadRun,
		api.LoadRunInput{StoragePath: f.in.Run.StoragePath, RunName: f.in.Run.Name, ResumeFrom: f.in.Run.ResumeFrom,
			Datasets: f.in.Datasets, Schedule: f.in.Run.Schedule}).Get(ctx, &out)
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
	if f.in.Run.ResumeFrom == api.ResumePreviousBest {
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

// runAttempt starts one RunRank per rank and waits for all of them. The first
// failure cancels the others; the attempt ends when every rank has ended.
func (f *fit) runAttempt(ctx workflow.Context) attemptOutcome {
	if f.in.Scaling.Elastic() {
		return f.runElastic(ctx)
	}
	n := f.in.Scaling.NumWorkers
	candidates := f.beginAttempt(ctx, n, n)
	var fo *fanout
	fo = f.startRanks(ctx, n, candidates, func(r int, err error) (RankFailure, bool) {
		if err == nil {
			return RankFailure{}, false
		}
		return classify(r, err, fo.cancelled, f.in), true
	})
	fo.grace = workflow.GetVersion(ctx, versionCancelGrace, workflow.DefaultVersion, 1) >= 1
	fo.wait(ctx)
	fo.abandon(func(r int) int { return r })
	out := fo.outcome()
	f.endAttempt(ctx, out)
	return out
}

// beginAttempt starts the next attempt of n slots, recorded in the history
// with worldSize (0 until an elastic group forms), and returns the
// checkpoints it may resume from, newest first.
func (f *fit) beginAttempt(ctx workflow.Context, n, worldSize int) []api.Checkpoint {
	f.st.Attempts++
	f.attempt = f.st.Attempts
	f.token = newToken(ctx)
	f.peers = make([]*api.Peer, n)
	f.registered = 0
	f.running = true
	rec := api.AttemptRecord{Attempt: f.attempt, Start: workflow.Now(ctx), WorldSize: worldSize}
	candidates := f.resumeCandidates()
	if len(candidates) > 0 {
		rec.ResumedFrom = candidates[0].Seq
		if candidates[0].Seq == 0 {
			rec.WarmStart = candidates[0].URI
		}
	}
	f.st.History = append(f.st.History, rec)
	f.dirty = true
	f.upsert(ctx, temporal.NewSearchAttributeKeyInt64(api.SAAttempt).ValueSet(int64(f.attempt)),
		temporal.NewSearchAttributeKeyInt64(api.SAWorldSize).ValueSet(int64(worldSize)))
	return candidates
}

// initSearchAttributes decides, once per Fit run (recorded), whether it
// upserts its search attributes, and upserts the first.
func (f *fit) initSearchAttributes(ctx workflow.Context) {
	if workflow.GetVersion(ctx, versionSearchAttributes, workflow.DefaultVersion, 1) < 1 {
		return
	}
	on := f.opts.SearchAttributes
	_ = workflow.SideEffect(ctx, func(workflow.Context) any { return on }).Get(&f.sa)
	f.upsert(ctx, temporal.NewSearchAttributeKeyKeyword(api.SARun).ValueSet(f.in.Run.Name),
		temporal.NewSearchAttributeKeyKeyword(api.SAFunc).ValueSet(f.in.TrainFunc),
		temporal.NewSearchAttributeKeyKeyword(api.SAStatus).ValueSet(string(api.StatusRunning)))
}

// upsert upserts search attributes when this Fit does.
func (f *fit) upsert(ctx workflow.Context, u ...temporal.SearchAttributeUpdate) {
	if !f.sa {
		return
	}
	if err := workflow.UpsertTypedSearchAttributes(ctx, u...); err != nil {
		workflow.GetLogger(ctx).Warn("upserting search attributes", "error", err)
	}
}

// details sets the run's current details, which the Web UI shows on its
// page: attempt, world size, epoch, best score.
func (f *fit) details(ctx workflow.Context, m api.Metrics) {
	ws := 0
	if n := len(f.st.History); n > 0 {
		ws = f.st.History[n-1].WorldSize
	}
	d := fmt.Sprintf("**%s** on %d ranks, attempt %d, %d reports", f.in.TrainFunc, ws, f.attempt, f.st.Reports)
	if e, ok := m["epoch"]; ok {
		d += fmt.Sprintf(", epoch %g", e)
	}
	if attr := f.in.Run.Checkpoint.ScoreAttribute; attr != "" && len(f.st.Checkpoints) > 0 {
		if v, ok := BestFirst(f.st.Checkpoints, f.in.Run.Checkpoint)[0].Metrics[attr]; ok {
			d += fmt.Sprintf(", best %s %g", attr, v)
		}
	}
	workflow.SetCurrentDetails(ctx, d)
}

// rankInput is the RunRank input of rank (or elastic slot) r of n.
func (f *fit) rankInput(r, n int, candidates []api.Checkpoint) api.RunRankInput {
	return api.RunRankInput{
		RunName: f.in.Run.Name, StoragePath: f.in.Run.StoragePath, TrainFunc: f.in.TrainFunc,
		Config: f.in.Config, Attempt: f.attempt, Rank: r, WorldSize: n, Elastic: f.in.Scaling.Elastic(), UseGPU: f.in.Scaling.UseGPU,
		Token: f.token, Checkpoints: candidates, AllowFreshStart: f.in.Run.Failure.AllowFreshStart,
		NextSeq: f.st.NextSeq, AsyncUpload: f.in.Run.Checkpoint.AsyncUpload,
		CollectiveTimeout: f.in.Run.Failure.CollectiveTimeout, StartTimeout: f.in.Run.Failure.StartTimeout,
		Datasets: f.in.Datasets, Preprocessors: f.in.Preprocessors,
	}
}

// latestSeq is the seq of the latest committed checkpoint, 0 if none.
func (f *fit) latestSeq() int {
	if n := len(f.st.Checkpoints); n > 0 {
		return f.st.Checkpoints[n-1].Seq
	}
	return 0
}

// historyLong says whether to continue as new: when Temporal suggests it
// (history near its size limits).
func (f *fit) historyLong(ctx workflow.Context) bool {
	if n := f.opts.ContinueAsNewAfterReports; n > 0 && f.reportsThisRun >= n {
		return true
	}
	return workflow.GetInfo(ctx).GetContinueAsNewSuggested()
}

// resumeCandidates are the checkpoints a new attempt may resume from, newest
// first: the run's own, or else the warm start's.
func (f *fit) resumeCandidates() []api.Checkpoint {
	if len(f.st.Checkpoints) == 0 && f.in.Run.ResumeFrom != "" {
		return []api.Checkpoint{{URI: f.in.Run.ResumeFrom}}
	}
	var out []api.Checkpoint
	for i := len(f.st.Checkpoints) - 1; i >= 0 && len(out) < resumeCandidates; i-- {
		out = append(out, f.st.Checkpoints[i])
	}
	return out
}

func newToken(ctx workflow.Context) string {
	var tok string
	enc := workflow.SideEffect(ctx, func(workflow.Context) any {
		b := make([]byte, 16)
		_, _ = rand.Read(b)
		return hex.EncodeToString(b)
	})
	_ = enc.Get(&tok)
	return tok
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
	f.dirty = true
	f.flush(ctx)
	if status == api.StatusSucceeded && f.storeErr != nil {
		errMsg = "storage: " + f.storeErr.Error()
	}
	if status == api.StatusSucceeded && errMsg == "" {
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
		State: f.st, Path: f.path, Failures: f.failures, Recent: f.recent,
	})
}

func (f *fit) registerHandlers(ctx workflow.Context) error {
	if err := workflow.SetQueryHandler(ctx, api.QueryRendezvous, f.rendezvous); err != nil {
		return err
	}
	if err := workflow.SetQueryHandler(ctx, api.QueryStatus, func() (api.Status, error) {
		s := api.Status{Name: f.in.Run.Name, Attempt: f.attempt, Failures: f.failures,
			Reports: f.st.Reports, Latest: f.st.Latest, Recent: f.recent, Done: f.done}
		if n := len(f.st.History); n > 0 {
			s.WorldSize = f.st.History[n-1].WorldSize
		}
		if n := len(f.st.Checkpoints); n > 0 {
			c := f.st.Checkpoints[n-1]
			s.Checkpoint = &c
		}
		if f.el != nil && f.running {
			s.Standbys = len(f.el.standby)
		}
		s.History = slices.Clone(f.st.History)
		return s, nil
	}); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, api.UpdateRegister, f.register,
		workflow.UpdateHandlerOptions{Validator: f.validateRegister}); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, api.UpdateRestored, f.restored,
		workflow.UpdateHandlerOptions{Validator: f.validateRestored}); err != nil {
		return err
	}
	return workflow.SetUpdateHandlerWithOptions(ctx, api.UpdateReport, f.report,
		workflow.UpdateHandlerOptions{Validator: f.validateReport})
}

func (f *fit) stale(attempt int) error {
	if f.running && attempt == f.attempt {
		return nil
	}
	return temporal.NewNonRetryableApplicationError(
		fmt.Sprintf("attempt %d is not running (current attempt %d, running %v)", attempt, f.attempt, f.running),
		api.ErrStaleAttempt.String(), nil)
}

func (f *fit) validateRegister(_ workflow.Context, req api.RegisterRequest) error {
	if err := f.stale(req.Attempt); err != nil {
		return err
	}
	if req.Rank < 0 || req.Rank >= len(f.peers) {
		return fmt.Errorf("register: rank %d out of range [0, %d)", req.Rank, len(f.peers))
	}
	if req.Addr == "" {
		return fmt.Errorf("register: rank %d: empty address", req.Rank)
	}
	if f.el != nil && f.el.closed && f.el.rankOf[req.Rank] < 0 {
		// An elastic slot registering after the group formed: a standby.
		return nil
	}
	if p := f.peers[req.Rank]; p != nil && p.Addr != req.Addr {
		return fmt.Errorf("register: rank %d of attempt %d already registered at %s (now %s)", req.Rank, req.Attempt, p.Addr, req.Addr)
	}
	return nil
}

// register records a rank's address and answers with the rendezvous as it
// stands, so the rank that completes the group needs no Query.
func (f *fit) register(ctx workflow.Context, req api.RegisterRequest) (api.Rendezvous, error) {
	// The validator ran before; state may have moved on while the Update
	// waited for its workflow task.
	if err := f.validateRegister(ctx, req); err != nil {
		return api.Rendezvous{}, err
	}
	if f.el != nil {
		return f.registerElastic(ctx, req)
	}
	if f.peers[req.Rank] == nil {
		f.registered++
	}
	f.peers[req.Rank] = &api.Peer{Addr: req.Addr, Node: req.Node}
	return f.rendezvous(req.Attempt)
}

func (f *fit) rendezvous(attempt int) (api.Rendezvous, error) {
	if f.el != nil && attempt == f.attempt && f.running {
		return f.rendezvousElastic(), nil
	}
	rv := api.Rendezvous{Attempt: f.attempt, Registered: f.registered, WorldSize: len(f.peers)}
	switch {
	case attempt != f.attempt || !f.running:
		rv.State = api.RendezvousStale
	case f.registered < len(f.peers):
		rv.State = api.RendezvousWaiting
	default:
		rv.State = api.RendezvousReady
		rv.Peers = make([]api.Peer, len(f.peers))
		for i, p := range f.peers {
			rv.Peers[i] = *p
		}
	}
	return rv, nil
}

func (f *fit) validateRestored(_ workflow.Context, req api.RestoredRequest) error {
	if err := f.stale(req.Attempt); err != nil {
		return err
	}
	if req.Seq < 0 {
		return fmt.Errorf("restored: seq %d", req.Seq)
	}
	return nil
}

// restored records in the attempt's history which checkpoint its group
// restored, and those it skipped.
func (f *fit) restored(ctx workflow.Context, req api.RestoredRequest) error {
	if err := f.validateRestored(ctx, req); err != nil {
		return err
	}
	last := &f.st.History[len(f.st.History)-1]
	last.RestoredFrom = req.Seq
	last.StartedFresh = req.Seq == 0 && req.URI == "" && (last.ResumedFrom > 0 || last.WarmStart != "")
	last.Skipped = nil
	for i, s := range req.Skipped {
		if i == maxSkippedRecorded {
			last.Skipped = append(last.Skipped, fmt.Sprintf("... and %d more", len(req.Skipped)-i))
			break
		}
		if len(s) > maxSkippedLen {
			s = s[:maxSkippedLen] + "..."
		}
		last.Skipped = append(last.Skipped, s)
	}
	f.dirty = true
	return nil
}

// Bounds of AttemptRecord.Skipped in history and run.json.
const (
	maxSkippedRecorded = 8
	maxSkippedLen      = 300
)

func (f *fit) validateReport(_ workflow.Context, req api.ReportRequest) error {
	if err := f.stale(req.Attempt); err != nil {
		return err
	}
	if req.Rank != 0 {
		return fmt.Errorf("report: only rank 0 reports, got rank %d", req.Rank)
	}
	if c := req.Checkpoint; c != nil && c.Seq < 1 {
		return fmt.Errorf("report: checkpoint with seq %d", c.Seq)
	}
	return nil
}

func (f *fit) report(ctx workflow.Context, req api.ReportRequest) (api.ReportResponse, error) {
	if err := f.validateReport(ctx, req); err != nil {
		return api.ReportResponse{}, err
	}
	rec := api.ReportRecord{Index: f.st.Reports, Attempt: req.Attempt, Time: workflow.Now(ctx), Metrics: req.Metrics}
	f.st.Reports++
	f.st.Latest = req.Metrics
	if c := req.Checkpoint; c != nil {
		ck := *c
		ck.Dir = ""
		rec.Checkpoint = ck.Seq
		if ck.Seq >= f.st.NextSeq {
			f.st.NextSeq = ck.Seq + 1
		}
		// A seq already in the index is an orphan rewritten by a later
		// attempt: the new commit replaces it.
		kept := f.st.Checkpoints[:0:0]
		for _, old := range f.st.Checkpoints {
			if old.Seq != ck.Seq {
				kept = append(kept, old)
			}
		}
		keep, drop := Retain(append(kept, ck), f.in.Run.Checkpoint)
		f.st.Checkpoints = keep
		for _, d := range drop {
			f.toDelete = append(f.toDelete, d.Seq)
		}
	}
	f.pending = append(f.pending, rec)
	f.reportsThisRun++
	if attr := f.in.Run.Checkpoint.ScoreAttribute; attr != "" && req.Checkpoint != nil && len(f.st.Checkpoints) > 0 {
		if v, ok := BestFirst(f.st.Checkpoints, f.in.Run.Checkpoint)[0].Metrics[attr]; ok && (v != f.best || !f.bestSet) {
			f.best, f.bestSet = v, true
			f.upsert(ctx, temporal.NewSearchAttributeKeyFloat64(api.SABestScore).ValueSet(v))
		}
	}
	f.details(ctx, req.Metrics)
	f.recent = append(f.recent, rec)
	if len(f.recent) > recentReports {
		f.recent = append([]api.ReportRecord(nil), f.recent[len(f.recent)-recentReports:]...)
	}
	f.dirty = true
	if req.Checkpoint != nil && f.running && f.cancel != nil && f.historyLong(ctx) {
		// Stop this attempt at the checkpoint it just committed, continue as
		// new, and resume from it there.
		f.preempted = true
		f.cancel()
	} else if req.Checkpoint != nil && f.running && f.cancel != nil && f.el != nil && f.el.closed && f.el.settledStandbys(workflow.Now(ctx)) > 0 && !f.growing {
		// Workers came back (standby slots are running): stop at this
		// checkpoint and restart with them.
		workflow.GetLogger(ctx).Info("growing the group at a checkpoint", "world_size", len(f.el.slots),
			"standby", len(f.el.standby), "checkpoint", req.Checkpoint.Seq)
		f.growing = true
		f.el.comeBack = f.el.settledStandbys(workflow.Now(ctx))
		f.cancel()
	}
	return api.ReportResponse{Index: rec.Index}, nil
}
