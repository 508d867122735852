package workflows

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/tempotrain/tempotrain/api"
)

// resumeCandidates is how many checkpoints, newest first, a rank may try when
// the newest does not verify.
const resumeCandidates = 3

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
	// versionStopWaitsForRanks: an attempt a stop ended waits stopGrace,
	// not cancelGrace, for its cancelled ranks.
	versionStopWaitsForRanks = "stop-waits-for-ranks"
	// versionYoungAttemptGoesOn: an attempt whose history Temporal finds
	// long is not stopped at a checkpoint to continue as new before it has
	// recorded as much since its first report as its start cost (see
	// fit.attemptYoung).
	versionYoungAttemptGoesOn = "young-attempt-goes-on"
	// versionLostRankAgain: a rank of a fixed-size attempt lost before it
	// registered is started again in the attempt (fit.lostRank).
	versionLostRankAgain = "lost-rank-started-again"
	// versionLoadRunLocal: a Fit loads its run (LoadRun) as a local
	// activity, in its first workflow task (fit.load).
	versionLoadRunLocal = "load-run-local"
)

// Carry is what a Fit hands to its continuation across continue-as-new.
// A Fit started by a caller has none.
type Carry struct {
	State    api.RunState       `json:"state"`
	Path     string             `json:"path"`
	Failures int                `json:"failures"`
	Recent   []api.ReportRecord `json:"recent,omitempty"`
	// Trial names the Fit as a trial of the Tune that started it (its
	// parent): each report is signalled to the parent. A Tune starts its
	// trials with a Carry that holds only Trial.
	Trial string `json:"trial,omitempty"`
	// TrialMetric, with Trial, makes a report that has this metric wait
	// for the Tune's decision on it (continue or stop) before rank 0's
	// Report returns, as Ray Tune's report waits for its scheduler: a
	// stopped trial trains no epoch past the report that stopped it.
	TrialMetric string `json:"trial_metric,omitempty"`
	// TrialJudging, with TrialMetric, narrows the reports that wait to
	// those the Tune's ASHA scheduler judges (the first at each rung, and
	// max_t): the others cannot stop the trial and go on at once. Nil:
	// every report with the metric waits (a Tune with stop conditions, and
	// trials started before it existed). JudgedRungs are the rungs the
	// trial's reports reached so far, across continue-as-new.
	TrialJudging *api.Judging `json:"trial_judging,omitempty"`
	JudgedRungs  []float64    `json:"judged_rungs,omitempty"`
}

// continued says whether the carry continues a Fit (continue-as-new), as
// opposed to naming a new trial.
func (c *Carry) continued() bool { return c != nil && (c.Path != "" || c.State.Version != 0) }

// Options configure the Fit workflows a worker runs. The zero value is what
// production runs; every field documents its default.
type Options struct {
	// ContinueAsNewAfterReports, when positive, makes a Fit continue as new
	// once its history holds that many reports, as if Temporal had suggested
	// it: tests exercise continue-as-new without thousands of reports.
	// Default 0: only Temporal's suggestion triggers it.
	ContinueAsNewAfterReports int
	// ContinueAsNewAfterEvents, when positive, stands for Temporal's
	// suggestion to continue as new by its event count
	// (limit.historyCount.suggestContinueAsNew, 4,096 by default): the Fit
	// takes the suggestion once its history holds that many events, as it
	// would Temporal's (a young attempt goes on). Default 0.
	ContinueAsNewAfterEvents int
	// SearchAttributes makes every Fit upsert api.SearchAttributes (run,
	// function, status, attempt, world size, best score). The namespace
	// must have them registered (app.StartWorker checks and sets this).
	// Default false.
	SearchAttributes bool
	// TuneSearchAttribute makes every trial of a Tune carry api.SATune
	// (the namespace must have it registered). Default false.
	TuneSearchAttribute bool
	// ContinueAsNewAfterTrials, when positive, makes a Tune continue as new
	// once that many trials started in its run, as if Temporal had
	// suggested it. Default 0.
	ContinueAsNewAfterTrials int
	// RankGroupSize is the most ranks of a rank group: a fixed-size
	// attempt of more ranks runs them in rank groups, child workflows of
	// at most this many ranks each (groups.go). Default 0:
	// DefaultRankGroupSize (128); negative: never. Histories record the
	// choice only for the runs it splits, so change it only between runs
	// of the sizes it affects.
	RankGroupSize int
}

// Controller runs Fit workflows with its Options. Register its Fit method
// under api.WorkflowType (Register does).
type Controller struct{ o Options }

// New returns a Controller with o.
func New(o Options) *Controller { return &Controller{o: o} }

// Register registers c's Fit on a worker under api.WorkflowType, and its
// Tune under api.TuneWorkflowType.
func (c *Controller) Register(r worker.WorkflowRegistry) {
	r.RegisterWorkflowWithOptions(c.Fit, workflow.RegisterOptions{Name: api.WorkflowType})
	r.RegisterWorkflowWithOptions(c.Tune, workflow.RegisterOptions{Name: api.TuneWorkflowType})
	r.RegisterWorkflowWithOptions(c.RankGroup, workflow.RegisterOptions{Name: api.GroupWorkflowType})
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
	attempt int
	running bool
	// ending: the attempt cancelled its ranks (a failure, a stop); the
	// rendezvous Query calls it stale.
	ending     bool
	token      string
	peers      []*api.Peer
	registered int
	cancel     workflow.CancelFunc
	// preempted: the workflow stopped the attempt at a checkpoint to
	// continue as new; not a failure.
	preempted bool
	// el is the elastic state of the current attempt (elastic runs only).
	el *elasticAttempt
	// group is set in a rank group's fit (RankGroup): it holds the
	// registrations of its ranks only.
	group *rankGroup
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
	// trial: this Fit is a trial of its parent Tune (Carry.Trial).
	trial string
	// stopping: a stop signal came; stopReason is what it said.
	stopping   bool
	stopReason string
	// stopRanks ends the running attempt as its own failure would: its
	// ranks cancelled, those that do not end within cancelGrace abandoned.
	stopRanks func()
	// trialMetric: reports with it wait for the Tune's answer; answered
	// is the highest report index the Tune let go on (-1: none).
	trialMetric string
	answered    int
	// trialJudging, judgedRungs: Carry's TrialJudging and JudgedRungs.
	trialJudging *api.Judging
	judgedRungs  []float64

	// Storage bookkeeping not yet written by RecordRun.
	pending  []api.ReportRecord
	toDelete []int
	dirty    bool
	writing  bool
	storeErr error

	recent         []api.ReportRecord
	reportsThisRun int
	done           bool

	// updatesThisRun counts the Updates this workflow run accepted
	// (Temporal refuses more than history.maxTotalUpdates, 2,000 by
	// default, in one run). attemptLen and firstReportLen are the history's
	// length when the running attempt began and at its first report (0:
	// none yet): fit.attemptYoung.
	updatesThisRun int
	attemptLen     int
	firstReportLen int
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

	f.answered = -1
	if carry != nil {
		f.trial, f.trialMetric = carry.Trial, carry.TrialMetric
		f.trialJudging, f.judgedRungs = carry.TrialJudging, carry.JudgedRungs
	}
	f.listenStop(ctx)
	if carry.continued() {
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
		if f.stopping {
			logger.Info("run stopped", "reason", f.stopReason)
			return f.finish(ctx, api.StatusStopped, "")
		}
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
		case f.stopping:
			// Stopped on request (a Tune's scheduler): the ranks were
			// cancelled, the committed checkpoints stay.
			logger.Info("run stopped", "attempt", f.attempt, "reason", f.stopReason)
			// A checkpoint rank 0 committed after the last report the
			// workflow took (the stop came between the two) is an orphan
			// no later attempt rewrites: deleted, after run.json is saved.
			f.toDelete = append(f.toDelete, f.orphanSeqs()...)
			return f.finish(ctx, api.StatusStopped, "")
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

// runAttempt starts one RunRank per rank and waits for all of them. The first
// failure cancels the others; the attempt ends when every rank has ended.
func (f *fit) runAttempt(ctx workflow.Context) attemptOutcome {
	if f.in.Scaling.Elastic() {
		return f.runElastic(ctx)
	}
	n := f.in.Scaling.NumWorkers
	if k := f.in.Scaling.RanksPerProcess; k > 1 {
		return f.runBundles(ctx, n, k)
	}
	if size := f.groupSize(ctx, n); size > 0 {
		return f.runGroups(ctx, n, size)
	}
	candidates := f.beginAttempt(ctx, n, n)
	var fo *fanout
	fo = f.startRanks(ctx, n, candidates, func(r int, err error) (RankFailure, bool) {
		if err == nil {
			return RankFailure{}, false
		}
		return classify(r, err, fo.cancelled, f.in), true
	})
	fo.grace = workflow.GetVersion(ctx, versionCancelGrace, workflow.DefaultVersion, 1) >= 1
	starts := make([]int, n)
	fo.again = func(r int, err error) bool { return f.lostRank(ctx, fo, starts, r, err) }
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
	f.running, f.ending = true, false
	f.attemptLen, f.firstReportLen = workflow.GetInfo(ctx).GetCurrentHistoryLength(), 0
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
		Token: f.token, Checkpoints: candidates, Unusable: f.st.Unusable, AllowFreshStart: f.in.Run.Failure.AllowFreshStart,
		NextSeq: f.st.NextSeq, AsyncUpload: f.in.Run.Checkpoint.AsyncUpload,
		CollectiveTimeout: f.in.Run.Failure.CollectiveTimeout, StartTimeout: f.in.Run.Failure.StartTimeout,
		Datasets: f.in.Datasets, Preprocessors: f.in.Preprocessors, Python: f.in.Python,
		Resources: resources(f.in.Scaling), WaitMetric: f.waitMetric(),
		WaitJudging: f.waitJudging(), JudgedRungs: slices.Clone(f.judgedRungs),
	}
}

// waitJudging is the rank input's WaitJudging: the trial's Judging, when
// its reports' times are their own metric.
func (f *fit) waitJudging() *api.Judging {
	if f.waitMetric() == "" || f.trialJudging == nil || f.trialJudging.TimeAttr == api.TimeAttrIteration {
		return nil
	}
	return f.trialJudging
}

// waitMetric is the rank input's WaitMetric: the trial metric whose
// reports wait for the Tune's decision (awaitTune).
func (f *fit) waitMetric() string {
	if f.trial == "" {
		return ""
	}
	return f.trialMetric
}

// resources is the rank input's Resources: nil when the run asks for none.
func resources(s api.ScalingConfig) *api.Resources {
	if r := s.Resources(); !r.IsZero() {
		return &r
	}
	return nil
}

// latestSeq is the seq of the latest committed checkpoint, 0 if none.
func (f *fit) latestSeq() int {
	if n := len(f.st.Checkpoints); n > 0 {
		return f.st.Checkpoints[n-1].Seq
	}
	return 0
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
