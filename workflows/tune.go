package workflows

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/tempotrain/tempotrain/api"
)

// The Tune workflow: a hyperparameter search (Ray Tune's Tuner) whose
// trials are child Fit workflows. Each trial's Fit signals every report to
// the Tune as it records it (SignalTrialReport: pushed, so the scheduler
// hears a report one signal after it was made, with no polling in either
// history); the scheduler's stop is a signal to the trial (SignalStop),
// which cancels its attempt, waits for its ranks to end, and ends it as
// stopped (run.json's status) with its checkpoints.
// The Tune's state is its trials' results and the scheduler's rungs: a
// Tune whose history grows stops starting trials, lets the running ones end
// and continues as new with that state.

// maxMetricNames bounds the metric names a trial's result lists.
const maxMetricNames = 64

// versionMaxTGoesOn: a trial's report at ASHA's max_t exactly is answered
// with continue, not stop (a trial of max_t epochs completes), and a trial
// stopped past max_t is stopped, not completed.
const versionMaxTGoesOn = "tune-max-t-goes-on"

// versionStartOnStop: a trial the search stops frees its place among the
// max_concurrent_trials when the stop is sent, not when its Fit ends, so
// the next trial's Fit starts (and loads its run) while the stopped one
// cancels its ranks and records its end; its ranks wait for the rank
// slots the stopped trial's ranks free.
const versionStartOnStop = "tune-start-on-stop"

// versionReportsAnyOrder: a trial's reports are taken in whatever order
// their signals arrive (a Fit that records several reports in one task,
// rank 0's batched reports, signals them together, and Temporal may
// deliver them out of order), each once; before, a report older than the
// newest taken was dropped as seen.
const versionReportsAnyOrder = "tune-reports-any-order"

// endWait bounds how long a trial's end waits for its reports' signals
// still on their way (a signal and the child's completion travel apart).
const endWait = 30 * time.Second

// TuneCarry is what a Tune hands to its continuation across continue-as-new.
type TuneCarry struct {
	Seed   int64             `json:"seed"`
	Trials []api.TrialResult `json:"trials"`
	Next   int               `json:"next"`
	ASHA   *api.ASHA         `json:"asha,omitempty"`
	Delay  api.ReportDelay   `json:"delay"`
}

// tune is the state of one Tune workflow run.
type tune struct {
	opts   Options
	in     api.TuneInput
	name   string
	seed   int64
	trials []api.TrialResult // by index
	inputs []api.Trial
	byName map[string]int
	next   int
	asha   *api.ASHA
	delay  api.ReportDelay

	running int
	started int // trials started by this run
	// stopping counts the running trials told to stop; with startOnStop
	// (versionStartOnStop) they do not count against
	// max_concurrent_trials: the next trial starts while they wind down.
	stopping    int
	startOnStop bool
	// anyOrder (versionReportsAnyOrder): seen holds the report indices
	// taken of each running trial at or past floor, its Iterations when it
	// started in this run of the Tune.
	anyOrder bool
	seen     map[int]map[int]bool
	floor    map[int]int
	draining bool
	changed  bool
	// stopSent: the trials told to stop, and why; atMaxT: those stopped at
	// max_t before versionMaxTGoesOn, which count as completed; reachedMaxT:
	// those whose report reached max_t exactly and were let go on.
	stopSent    map[int]string
	atMaxT      map[int]bool
	reachedMaxT map[int]bool
	// failErr ends the search (a metric no trial reports); cancelTrials
	// cancels the running trials.
	failErr      string
	cancelTrials workflow.CancelFunc
	bestFile     string
	done         bool
	// dirty: tune.json is behind; saving: a SaveTune runs.
	dirty, saving bool
	bestScore     float64
	bestSet       bool
}

// Tune is the controller of a hyperparameter search. It returns the
// TuneResult; a search whose every trial failed, or whose metric no trial
// reports, fails non-retryably with the TuneResult in the error's details.
func (c *Controller) Tune(ctx workflow.Context, in api.TuneInput, carry *TuneCarry) (*api.TuneResult, error) {
	in = in.WithDefaults()
	info := workflow.GetInfo(ctx)
	if in.Trainer.Run.Name == "" {
		in.Trainer.Run.Name = info.WorkflowExecution.ID
	}
	if in.Trainer.Run.Schedule == "" {
		// A search a Schedule started belongs to it: it promotes its best.
		if id, ok := workflow.GetTypedSearchAttributes(ctx).GetKeyword(temporal.NewSearchAttributeKeyKeyword("TemporalScheduledById")); ok {
			in.Trainer.Run.Schedule = id
		}
	}
	t := &tune{opts: c.o, in: in, name: in.Trainer.Run.Name, stopSent: map[int]string{}, atMaxT: map[int]bool{}, reachedMaxT: map[int]bool{}, byName: map[string]int{}}
	// The Query answers from the start (no trials until they are known).
	if err := workflow.SetQueryHandler(ctx, api.QueryTune, func() (api.TuneResult, error) { return t.result(), nil }); err != nil {
		return nil, err
	}
	// Bad input fails before storage is touched (trials that only some
	// seeds make bad are checked below, with the seed).
	if _, err := in.Validate(0); err != nil {
		return nil, temporal.NewNonRetryableApplicationError(err.Error(), api.ErrInvalidInput.String(), err)
	}
	var stored *api.TuneState
	if carry == nil {
		// A search started again with its name continues it.
		if err := workflow.ExecuteActivity(tuneStorageCtx(ctx), api.ActivityLoadTune, api.TuneStateRequest{
			StoragePath: in.Trainer.Run.StoragePath, Tune: t.name}).Get(ctx, &stored); err != nil {
			return nil, fmt.Errorf("load search %q: %w", t.name, err)
		}
	}
	switch {
	case carry != nil:
		t.seed = carry.Seed
	case stored != nil:
		if s := in.TuneConfig.Seed; s != nil && *s != stored.Seed {
			err := &api.InvalidTuneError{Field: "tune_config.seed", Value: *s, Reason: fmt.Sprintf(
				"search %q exists in storage with seed %d: give that seed (or none) to continue it, or another name", t.name, stored.Seed)}
			return nil, temporal.NewNonRetryableApplicationError(err.Error(), api.ErrInvalidInput.String(), err)
		}
		t.seed = stored.Seed
	case in.TuneConfig.Seed != nil:
		t.seed = *in.TuneConfig.Seed
	default:
		// A seed drawn once, recorded, and reported in the result.
		_ = workflow.SideEffect(ctx, func(workflow.Context) any {
			var b [8]byte
			_, _ = rand.Read(b[:])
			return int64(binary.LittleEndian.Uint64(b[:]) >> 1)
		}).Get(&t.seed)
	}
	if carry == nil && in.Trainer.Run.ResumeFrom == api.ResumePreviousBest {
		// Resolved once, for every trial: the schedule's last best.
		if err := t.resolvePreviousBest(ctx); err != nil {
			return nil, err
		}
		in = t.in
	}
	trials, err := in.Validate(t.seed)
	if err != nil {
		return nil, temporal.NewNonRetryableApplicationError(err.Error(), api.ErrInvalidInput.String(), err)
	}
	t.inputs = trials
	if carry != nil {
		t.trials, t.next, t.asha, t.delay = carry.Trials, carry.Next, carry.ASHA, carry.Delay
	} else if stored != nil {
		if err := t.continueStored(stored); err != nil {
			return nil, temporal.NewNonRetryableApplicationError(err.Error(), api.ErrInvalidInput.String(), err)
		}
	} else {
		for _, tr := range trials {
			t.trials = append(t.trials, api.TrialResult{Name: tr.Name, Params: tr.Params, Status: api.TrialPending,
				WorkflowID: info.WorkflowExecution.ID + "-" + tr.Name, Path: api.JoinStorage(api.JoinStorage(in.Trainer.Run.StoragePath, t.name), tr.Name)})
		}
		if s := in.TuneConfig.Scheduler; s != nil && s.Type == "asha" {
			t.asha = api.NewASHA(*s)
		}
	}
	for i, tr := range t.trials {
		t.byName[tr.Name] = i
	}
	t.upsert(ctx, temporal.NewSearchAttributeKeyKeyword(api.SAStatus).ValueSet(string(api.StatusRunning)),
		temporal.NewSearchAttributeKeyKeyword(api.SAFunc).ValueSet(in.Trainer.TrainFunc))
	if c.o.TuneSearchAttribute {
		t.upsert(ctx, temporal.NewSearchAttributeKeyKeyword(api.SATune).ValueSet(t.name))
	}
	logger := workflow.GetLogger(ctx)
	logger.Info("search", "name", t.name, "trials", len(t.trials), "seed", t.seed, "next", t.next)

	t.anyOrder = workflow.GetVersion(ctx, versionReportsAnyOrder, workflow.DefaultVersion, 1) >= 1
	t.seen, t.floor = map[int]map[int]bool{}, map[int]int{}
	reports := workflow.GetSignalChannel(ctx, api.SignalTrialReport)
	workflow.Go(ctx, func(ctx workflow.Context) {
		for {
			var r api.TrialReport
			if !reports.Receive(ctx, &r) {
				return
			}
			t.onReport(ctx, r)
		}
	})
	tctx, cancelTrials := workflow.WithCancel(ctx)
	t.cancelTrials = cancelTrials
	t.dirty = true
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	workflow.Go(dctx, t.saver)

	limit := in.TuneConfig.MaxConcurrentTrials
	t.startOnStop = workflow.GetVersion(ctx, versionStartOnStop, workflow.DefaultVersion, 1) >= 1
	for {
		for !t.draining && t.failErr == "" && t.next < len(t.trials) && (limit == 0 || t.running-t.stopping < limit) {
			if t.trials[t.next].Status != api.TrialPending {
				t.next++ // ended in an earlier run of the search
				continue
			}
			t.start(tctx, t.next)
			t.next++
			t.started++
			if t.historyLong(ctx) {
				logger.Info("history long: no more trials in this run", "started", t.started)
				t.draining = true
			}
		}
		if t.running == 0 {
			break
		}
		if err := workflow.Await(ctx, func() bool { return t.changed }); err != nil {
			break
		}
		t.changed = false
	}
	if ctx.Err() != nil {
		t.done = true
		t.upsert(ctx, temporal.NewSearchAttributeKeyKeyword(api.SAStatus).ValueSet(string(api.StatusCancelled)))
		return nil, temporal.NewCanceledError(t.result())
	}
	// Reports received but not yet handled are handled now: a continuation
	// would lose them.
	for {
		var r api.TrialReport
		if !reports.ReceiveAsync(&r) {
			break
		}
		t.onReport(ctx, r)
	}
	t.flush(ctx)
	if t.failErr == "" && t.next < len(t.trials) {
		logger.Info("continuing as new", "next", t.next, "trials", len(t.trials))
		return nil, workflow.NewContinueAsNewError(ctx, api.TuneWorkflowType, t.in, &TuneCarry{
			Seed: t.seed, Trials: t.trials, Next: t.next, ASHA: t.asha, Delay: t.delay})
	}
	return t.finish(ctx)
}

// continueStored takes the trials of the search's tune.json: those that
// ended stay as they are, the others (running or cancelled when the search
// stopped) run again, their Fits resuming their runs.
func (t *tune) continueStored(st *api.TuneState) error {
	if len(st.Trials) != len(t.inputs) {
		return &api.InvalidTuneError{Field: "trainer.run.name", Value: t.name, Reason: fmt.Sprintf(
			"a search of that name exists in storage with %d trials, this input makes %d: give another name", len(st.Trials), len(t.inputs))}
	}
	for i, tr := range st.Trials {
		if tr.Name != t.inputs[i].Name || tr.ParamString() != t.inputs[i].ParamString() {
			return &api.InvalidTuneError{Field: "trainer.run.name", Value: t.name, Reason: fmt.Sprintf(
				"a search of that name exists in storage whose %s has %s, this input's has %s: give another name", tr.Name, tr.ParamString(), t.inputs[i].ParamString())}
		}
		if !tr.Ended() || (tr.Status == api.TrialFailed && tr.Error == "cancelled") {
			tr.Status, tr.Error, tr.StopReason, tr.End = api.TrialPending, "", "", time.Time{}
		}
		t.trials = append(t.trials, tr)
	}
	t.asha = st.ASHA
	if s := t.in.TuneConfig.Scheduler; t.asha == nil && s != nil && s.Type == "asha" {
		t.asha = api.NewASHA(*s)
	}
	return nil
}

// saver writes tune.json whenever the trials changed, one SaveTune at a
// time; a failure is logged (the search goes on, its Result has it all).
func (t *tune) saver(ctx workflow.Context) {
	for {
		_ = workflow.Await(ctx, func() bool { return t.dirty || t.done })
		if !t.dirty {
			return
		}
		st := &api.TuneState{Version: api.TuneStateVersion, Name: t.name, Seed: t.seed, Trials: slices.Clone(t.trials),
			ASHA: t.asha, Updated: workflow.Now(ctx)}
		t.dirty, t.saving = false, true
		err := workflow.ExecuteActivity(tuneStorageCtx(ctx), api.ActivitySaveTune, api.TuneStateRequest{
			StoragePath: t.in.Trainer.Run.StoragePath, Tune: t.name, State: st}).Get(ctx, nil)
		t.saving = false
		if err != nil {
			workflow.GetLogger(ctx).Error("saving the search's state", "error", err)
		}
	}
}

// flush waits until tune.json is written.
func (t *tune) flush(ctx workflow.Context) {
	_ = workflow.Await(ctx, func() bool { return !t.dirty && !t.saving })
}

// tuneStorageCtx carries the options of the search's storage activities:
// retried with backoff for an hour, a bad storage path at once, and a
// heartbeat timeout (they heartbeat: keepAlive) so that one whose worker
// died is retried elsewhere in seconds, not at its start-to-close timeout.
func tuneStorageCtx(ctx workflow.Context) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout:    5 * time.Minute,
		HeartbeatTimeout:       api.BookkeepingHeartbeatTimeout,
		ScheduleToCloseTimeout: time.Hour,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: 30 * time.Second,
			NonRetryableErrorTypes: []string{api.ErrStorage.String()}},
	})
}

// historyLong says whether to stop starting trials and continue as new.
func (t *tune) historyLong(ctx workflow.Context) bool {
	if n := t.opts.ContinueAsNewAfterTrials; n > 0 && t.started >= n {
		return true
	}
	return workflow.GetInfo(ctx).GetContinueAsNewSuggested()
}

// start starts trial i as a child Fit, and a goroutine that waits for its
// end.
func (t *tune) start(ctx workflow.Context, i int) {
	tr := &t.trials[i]
	fi, err := t.in.TrialInput(t.name, t.inputs[i])
	if err != nil { // validated at the start: cannot happen
		tr.Status, tr.Error = api.TrialFailed, err.Error()
		return
	}
	opts := workflow.ChildWorkflowOptions{
		WorkflowID:          tr.WorkflowID,
		WaitForCancellation: true,
		ParentClosePolicy:   enumspb.PARENT_CLOSE_POLICY_REQUEST_CANCEL,
		StaticSummary:       fmt.Sprintf("%s of search %s: %s", tr.Name, t.name, tr.ParamString()),
	}
	if t.opts.TuneSearchAttribute {
		opts.TypedSearchAttributes = temporal.NewSearchAttributes(temporal.NewSearchAttributeKeyKeyword(api.SATune).ValueSet(t.name))
	}
	tr.Status, tr.Start = api.TrialRunning, workflow.Now(ctx)
	t.running++
	if t.anyOrder {
		t.seen[i], t.floor[i] = map[int]bool{}, tr.Iterations
	}
	carry := &Carry{Trial: tr.Name}
	if t.decides() {
		carry.TrialMetric = t.in.TuneConfig.Metric
		if t.asha != nil && len(t.in.TuneConfig.Stop) == 0 {
			carry.TrialJudging = t.asha.Judging()
		}
	}
	fut := workflow.ExecuteChildWorkflow(workflow.WithChildOptions(ctx, opts), api.WorkflowType, fi, carry)
	workflow.Go(ctx, func(gctx workflow.Context) {
		var res api.Result
		err := fut.Get(gctx, &res)
		var app *temporal.ApplicationError
		got := err == nil
		if !got && errors.As(err, &app) && app.HasDetails() {
			got = app.Details(&res) == nil
		}
		if got {
			// The trial's last reports may still be on their way.
			_, _ = workflow.AwaitWithTimeout(gctx, endWait, func() bool { return t.taken(i) >= res.Reports })
		}
		t.onEnd(gctx, i, &res, got, err)
	})
}

// onReport is a trial's report: its progress, its best, and the
// scheduler's decision.
func (t *tune) onReport(ctx workflow.Context, r api.TrialReport) {
	i, ok := t.byName[r.Trial]
	if !ok {
		workflow.GetLogger(ctx).Warn("report of an unknown trial", "trial", r.Trial)
		return
	}
	tr := &t.trials[i]
	if seen, ok := t.seen[i]; t.anyOrder && ok {
		if r.Index < t.floor[i] || seen[r.Index] {
			return // seen
		}
		seen[r.Index] = true
	} else if r.Index < tr.Iterations {
		return // seen, or a late report of a trial this run of the Tune did not start
	}
	tr.Iterations = max(tr.Iterations, r.Index+1)
	d := workflow.Now(ctx).Sub(r.Time).Seconds()
	t.delay.Reports++
	t.delay.Sum += d
	t.delay.Max = max(t.delay.Max, d)
	m := make(api.Metrics, len(r.Metrics)+1)
	for k, v := range r.Metrics {
		m[k] = v
		if len(tr.MetricNames) < maxMetricNames && !slices.Contains(tr.MetricNames, k) {
			tr.MetricNames = append(tr.MetricNames, k)
			slices.Sort(tr.MetricNames)
		}
	}
	m[api.TimeAttrIteration] = float64(r.Index + 1)
	epoch, ok := m["epoch"]
	if !ok {
		epoch = float64(r.Index + 1)
	}
	tr.Epochs = max(tr.Epochs, epoch)
	metric, mode := t.in.TuneConfig.Metric, t.in.TuneConfig.Mode
	v, hasMetric := m[metric]
	if hasMetric && !math.IsNaN(v) && (tr.Metric == nil || api.Better(v, *tr.Metric, mode)) {
		tr.Metric, tr.BestEpoch = &v, epoch
		if r.Checkpoint != "" {
			tr.Checkpoint = r.Checkpoint
		}
		if !t.bestSet || api.Better(v, t.bestScore, mode) {
			t.bestScore, t.bestSet = v, true
			t.upsert(ctx, temporal.NewSearchAttributeKeyFloat64(api.SABestScore).ValueSet(v))
		}
	}
	if tr.Status != api.TrialRunning {
		return
	}
	if _, sent := t.stopSent[i]; sent {
		return
	}
	reason := ""
	for _, k := range sortedKeys(t.in.TuneConfig.Stop) {
		if x, ok := m[k]; ok && x >= t.in.TuneConfig.Stop[k] {
			reason = fmt.Sprintf("stop: %s %g >= %g", k, x, t.in.TuneConfig.Stop[k])
			break
		}
	}
	if t.asha != nil && reason == "" && hasMetric {
		if at, ok := m[t.asha.TimeAttr]; ok {
			switch dec := t.asha.OnResult(tr.Name, at, v, mode); {
			case !dec.Stop:
			case dec.MaxT && workflow.GetVersion(ctx, versionMaxTGoesOn, workflow.DefaultVersion, 1) >= 1:
				// A report at max_t exactly goes on: a trial whose
				// last report it is (its epochs are max_t) completes
				// as it would have; one that reports again, past
				// max_t, is stopped there.
				if at == t.asha.MaxT && !t.reachedMaxT[i] {
					t.reachedMaxT[i] = true
				} else {
					reason = dec.Reason
				}
			default:
				reason = dec.Reason
				t.atMaxT[i] = dec.MaxT
			}
		}
	}
	if reason == "" {
		if hasMetric && t.decides() {
			// The trial's report waits for this.
			workflow.SignalExternalWorkflow(ctx, tr.WorkflowID, "", api.SignalTrialContinue, r.Index)
		}
		return
	}
	t.stopSent[i] = reason
	if t.startOnStop {
		t.stopping++
		t.changed = true
	}
	workflow.GetLogger(ctx).Info("stopping trial", "trial", tr.Name, "reason", reason)
	// Not waited for: a trial that ended meanwhile cannot be signalled,
	// and its end says so.
	workflow.SignalExternalWorkflow(ctx, tr.WorkflowID, "", api.SignalStop, reason)
}

// decides says whether the search decides on reports (a scheduler or a
// stop condition): its trials' reports with the metric wait for the answer.
func (t *tune) decides() bool { return t.asha != nil || len(t.in.TuneConfig.Stop) > 0 }

func sortedKeys(m map[string]float64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// onEnd records how trial i ended.
func (t *tune) onEnd(ctx workflow.Context, i int, res *api.Result, got bool, err error) {
	tr := &t.trials[i]
	t.running--
	t.changed, t.dirty = true, true
	tr.End = workflow.Now(ctx)
	if got {
		if len(res.BestCheckpoints) > 0 {
			tr.Checkpoint, tr.CheckpointSeq = res.BestCheckpoints[0].URI, res.BestCheckpoints[0].Seq
		} else if res.Checkpoint != nil {
			tr.Checkpoint, tr.CheckpointSeq = res.Checkpoint.URI, res.Checkpoint.Seq
		}
		if res.Path != "" {
			tr.Path = res.Path
		}
	}
	reason, stopped := t.stopSent[i]
	if stopped && t.startOnStop {
		t.stopping--
	}
	if !stopped && got && res.StopReason != "" {
		// Stopped by a stop signal of its own (temporal workflow signal).
		reason, stopped = res.StopReason, true
	}
	switch {
	case err == nil && stopped && !t.atMaxT[i]:
		tr.Status, tr.StopReason = api.TrialStopped, reason
	case err == nil:
		tr.Status = api.TrialCompleted
		if stopped {
			tr.StopReason = reason
		}
	default:
		tr.Status = api.TrialFailed
		var app *temporal.ApplicationError
		var canceled *temporal.CanceledError
		switch {
		case errors.As(err, &app):
			tr.Error = app.Message()
		case errors.As(err, &canceled):
			tr.Error = "cancelled"
		default:
			tr.Error = err.Error()
		}
	}
	workflow.GetLogger(ctx).Info("trial ended", "trial", tr.Name, "status", tr.Status, "iterations", tr.Iterations, "error", tr.Error)
	if tr.Status != api.TrialFailed && tr.Iterations > 0 && tr.Metric == nil && t.failErr == "" {
		t.failErr = fmt.Sprintf("invalid Tune input: tune_config.metric = %q: %s made %d reports and none has it; its reports have: %s",
			t.in.TuneConfig.Metric, tr.Name, tr.Iterations, strings.Join(tr.MetricNames, ", "))
		t.cancelTrials()
	}
}

// result is the search as it stands.
func (t *tune) result() api.TuneResult {
	r := api.TuneResult{Name: t.name, Metric: t.in.TuneConfig.Metric, Mode: t.in.TuneConfig.Mode, Seed: t.seed,
		Trials: slices.Clone(t.trials), BestFile: t.bestFile, Done: t.done, Error: t.failErr, Delay: t.delay}
	api.SortTrials(r.Trials, r.Mode)
	if len(r.Trials) > 0 && r.Trials[0].Metric != nil {
		b := r.Trials[0]
		r.Best = &b
	}
	return r
}

// finish writes best.json and ends the search.
func (t *tune) finish(ctx workflow.Context) (*api.TuneResult, error) {
	res := t.result()
	status := api.StatusSucceeded
	var err error
	switch {
	case t.failErr != "":
		status = api.StatusFailed
		err = temporal.NewNonRetryableApplicationError(t.failErr, api.ErrInvalidInput.String(), nil, res)
	case !slices.ContainsFunc(t.trials, func(tr api.TrialResult) bool { return tr.Status != api.TrialFailed }):
		var why []string
		for _, tr := range t.trials {
			why = append(why, tr.Name+": "+tr.Error)
		}
		res.Error = fmt.Sprintf("every trial failed: %s", strings.Join(why, "; "))
		status = api.StatusFailed
		err = temporal.NewNonRetryableApplicationError(res.Error, api.ErrTrainingFailed.String(), nil, res)
	case res.Best != nil && res.Best.Checkpoint != "":
		b := res.Best
		score := *b.Metric
		var uri string
		aerr := workflow.ExecuteActivity(tuneStorageCtx(ctx), api.ActivityTuneBest, api.TuneBestRequest{StoragePath: t.in.Trainer.Run.StoragePath, Tune: t.name, Pointer: api.Pointer{
			Schedule: t.name, Run: b.Name, Checkpoint: b.Checkpoint, Seq: b.CheckpointSeq, Attribute: t.in.TuneConfig.Metric,
			Score: &score, Time: workflow.Now(ctx)}}).Get(ctx, &uri)
		if aerr != nil {
			res.Error = "writing " + api.BestFile + ": " + aerr.Error()
			status = api.StatusFailed
			err = temporal.NewNonRetryableApplicationError(res.Error, api.ErrStorage.String(), aerr, res)
		} else {
			t.bestFile, res.BestFile = uri, uri
		}
	}
	if err == nil && res.Best != nil && res.Best.Checkpoint != "" {
		res.Promoted = t.promote(ctx, *res.Best)
	}
	t.done, res.Done = true, true
	t.dirty = true
	t.flush(ctx)
	t.upsert(ctx, temporal.NewSearchAttributeKeyKeyword(api.SAStatus).ValueSet(string(status)))
	workflow.GetLogger(ctx).Info("search ended", "status", status, "best_file", res.BestFile)
	if err != nil {
		return nil, err
	}
	return &res, nil
}

// resolvePreviousBest resolves the trainer's resume_from "previous-best"
// to the checkpoint of the schedule's last run (LoadRun's resolution, on
// the search's directory, where no run.json is): "" for its first.
func (t *tune) resolvePreviousBest(ctx workflow.Context) error {
	r := t.in.Trainer.Run
	if r.Schedule == "" {
		err := &api.InvalidTuneError{Field: "trainer.run.resume_from", Value: r.ResumeFrom,
			Reason: "the search was not started by a Temporal Schedule and trainer.run.schedule is empty"}
		return temporal.NewNonRetryableApplicationError(err.Error(), api.ErrInvalidInput.String(), err)
	}
	var out api.LoadRunOutput
	if err := workflow.ExecuteActivity(tuneStorageCtx(ctx), api.ActivityLoadRun, api.LoadRunInput{
		StoragePath: r.StoragePath, RunName: t.name, ResumeFrom: r.ResumeFrom, Schedule: r.Schedule}).Get(ctx, &out); err != nil {
		return fmt.Errorf("resolve trainer.run.resume_from %q of schedule %q: %w", r.ResumeFrom, r.Schedule, err)
	}
	t.in.Trainer.Run.ResumeFrom = out.ResumeFrom
	workflow.GetLogger(ctx).Info("previous-best resolved", "schedule", r.Schedule, "checkpoint", out.ResumeFrom)
	return nil
}

// promote records a scheduled search's best trial's best checkpoint as
// the schedule's last, and promotes it when it beats the promoted one, as
// a scheduled Fit does (the Promote activity, on the search's base storage
// path, where the schedule's pointers live). A failure is logged.
func (t *tune) promote(ctx workflow.Context, best api.TrialResult) bool {
	r := t.in.Trainer.Run
	if r.Schedule == "" || best.Metric == nil {
		return false
	}
	var out api.PromoteOutput
	err := workflow.ExecuteActivity(tuneStorageCtx(ctx), api.ActivityPromote, api.PromoteRequest{
		StoragePath: r.StoragePath, Schedule: r.Schedule, Run: t.name,
		Best:           api.Checkpoint{URI: best.Checkpoint, Seq: best.CheckpointSeq, Metrics: api.Metrics{t.in.TuneConfig.Metric: *best.Metric}},
		ScoreAttribute: t.in.TuneConfig.Metric, ScoreOrder: t.in.TuneConfig.Mode,
	}).Get(ctx, &out)
	if err != nil {
		workflow.GetLogger(ctx).Error("promoting the search's best", "schedule", r.Schedule, "error", err)
		return false
	}
	workflow.GetLogger(ctx).Info("scheduled search recorded", "schedule", r.Schedule, "trial", best.Name, "promoted", out.Promoted)
	return out.Promoted
}

// upsert upserts the search's search attributes when Fits do.
func (t *tune) upsert(ctx workflow.Context, u ...temporal.SearchAttributeUpdate) {
	if !t.opts.SearchAttributes {
		return
	}
	if err := workflow.UpsertTypedSearchAttributes(ctx, u...); err != nil {
		workflow.GetLogger(ctx).Warn("upserting search attributes", "error", err)
	}
}

// tellTune signals a trial's report to its Tune (the parent), when this Fit
// is a trial. Not waited for: a Tune that ended no longer listens.
func (f *fit) tellTune(ctx workflow.Context, rec api.ReportRecord, ck *api.Checkpoint) {
	parent := workflow.GetInfo(ctx).ParentWorkflowExecution
	if f.trial == "" || parent == nil {
		return
	}
	r := api.TrialReport{Trial: f.trial, Index: rec.Index, Metrics: rec.Metrics, Time: rec.Time}
	if ck != nil {
		r.Checkpoint = ck.URI
	}
	workflow.SignalExternalWorkflow(ctx, parent.ID, "", api.SignalTrialReport, r)
}

// tuneAnswerWait bounds how long a trial's report waits for its Tune's
// decision: a Tune whose worker is down does not hold its trials for longer.
const tuneAnswerWait = 30 * time.Second

// awaitTune holds rank 0's report, of a trial whose Tune decides on it
// (with ASHA alone: one it judges, Carry.TrialJudging), until the Tune
// answers: go on, or stop (the attempt is cancelled; the
// report returns once the attempt ended, so no epoch is trained past it).
func (f *fit) awaitTune(ctx workflow.Context, attempt, index int, m api.Metrics) {
	if f.trial == "" || f.trialMetric == "" || workflow.GetInfo(ctx).ParentWorkflowExecution == nil {
		return
	}
	if _, ok := m[f.trialMetric]; !ok {
		return
	}
	if j := f.trialJudging; j != nil {
		at, ok := j.Time(index, m)
		if !ok {
			return
		}
		var judged bool
		if judged, f.judgedRungs = j.Judged(f.judgedRungs, at); !judged {
			return // no rung here: the scheduler answers continue
		}
	}
	_, _ = workflow.AwaitWithTimeout(ctx, tuneAnswerWait, func() bool { return f.answered >= index || f.stopping })
	if f.stopping {
		_, _ = workflow.AwaitWithTimeout(ctx, tuneAnswerWait, func() bool { return !f.running || f.attempt != attempt })
	}
}

// orphanSeqs are the seqs a stopped run's rank 0 may have committed without
// the workflow recording them: around NextSeq (abandoning rank 0 moves
// NextSeq past its commit), less the checkpoints kept. A seq with nothing
// there deletes nothing.
func (f *fit) orphanSeqs() []int {
	var out []int
	for s := f.st.NextSeq - 1; s <= f.st.NextSeq+1; s++ {
		kept := slices.ContainsFunc(f.st.Checkpoints, func(c api.Checkpoint) bool { return c.Seq == s })
		if s >= 1 && !kept {
			out = append(out, s)
		}
	}
	return out
}

// listenStop makes a stop signal end the run: the running attempt is
// cancelled (its committed checkpoints stay) and the Fit ends as stopped.
func (f *fit) listenStop(ctx workflow.Context) {
	cont := workflow.GetSignalChannel(ctx, api.SignalTrialContinue)
	workflow.Go(ctx, func(ctx workflow.Context) {
		for {
			var index int
			if !cont.Receive(ctx, &index) {
				return
			}
			f.answered = max(f.answered, index)
		}
	})
	ch := workflow.GetSignalChannel(ctx, api.SignalStop)
	workflow.Go(ctx, func(ctx workflow.Context) {
		var reason string
		if !ch.Receive(ctx, &reason) {
			return
		}
		workflow.GetLogger(ctx).Info("stop requested", "reason", reason)
		f.stopping, f.stopReason = true, reason
		if f.running && f.stopRanks != nil {
			f.stopRanks()
		}
	})
}

// taken is how many of trial i's reports the Tune has taken: its
// Iterations, or with anyOrder those before its floor and those seen since
// (a report signalled late is not yet among them).
func (t *tune) taken(i int) int {
	seen, ok := t.seen[i]
	if !t.anyOrder || !ok {
		return t.trials[i].Iterations
	}
	return t.floor[i] + len(seen)
}
