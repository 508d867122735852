package workflows

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/tempotrain/tempotrain/api"
)

// fakeTrial stands in for Fit as a Tune's trial: an epoch a minute of
// workflow time, "acc" rising toward the config's level, each report (with a
// checkpoint) signalled to the parent as Fit does; a stop signal ends it
// (after teardown, as a Fit waits for its cancelled ranks).
type fakeTrials struct {
	mu              sync.Mutex
	running, most   int
	epochs          map[string]int // trial → epochs trained
	stops           map[string]string
	failLevelsBelow float64
	metric          string
	teardown        time.Duration
	// swapFirst signals each trial's first report after its second, as
	// Temporal may deliver two signals sent in one workflow task.
	swapFirst bool
	// stopping counts the running trials that heard a stop; mostActive
	// is the most running at once that had not.
	stopping, mostActive int
}

func (ft *fakeTrials) fit(ctx workflow.Context, in api.FitInput, carry *Carry) (*api.Result, error) {
	var cfg struct {
		Level  float64 `json:"level"`
		Epochs int     `json:"epochs"`
	}
	if err := json.Unmarshal(in.Config, &cfg); err != nil {
		return nil, err
	}
	ft.mu.Lock()
	ft.running++
	ft.most = max(ft.most, ft.running)
	ft.mostActive = max(ft.mostActive, ft.running-ft.stopping)
	ft.mu.Unlock()
	stopped := false
	defer func() {
		ft.mu.Lock()
		ft.running--
		if stopped {
			ft.stopping--
		}
		ft.mu.Unlock()
	}()
	ch := workflow.GetSignalChannel(ctx, api.SignalStop)
	workflow.Go(ctx, func(ctx workflow.Context) {
		var reason string
		ch.Receive(ctx, &reason)
		stopped = true
		ft.mu.Lock()
		ft.stopping++
		ft.stops[in.Run.Name] = reason
		ft.mu.Unlock()
	})
	parent := workflow.GetInfo(ctx).ParentWorkflowExecution
	res := &api.Result{Name: in.Run.Name, Path: in.Run.StoragePath + "/" + in.Run.Name}
	metric := ft.metric
	if metric == "" {
		metric = "acc"
	}
	var held *api.TrialReport
	for e := 1; e <= cfg.Epochs; e++ {
		if ok, _ := workflow.AwaitWithTimeout(ctx, time.Minute, func() bool { return stopped }); ok {
			if ft.teardown > 0 {
				_ = workflow.Sleep(ctx, ft.teardown)
			}
			break
		}
		if cfg.Level < ft.failLevelsBelow && e == 2 {
			return nil, temporal.NewNonRetryableApplicationError(fmt.Sprintf("level %.2f diverged", cfg.Level), api.ErrTrainingFailed.String(), nil, res)
		}
		v := cfg.Level * (1 - math.Exp(-float64(e)/3))
		ck := api.Checkpoint{Seq: e, URI: fmt.Sprintf("%s/checkpoint_%06d", res.Path, e), Metrics: api.Metrics{metric: v}}
		res.Reports = e
		res.Checkpoint = &ck
		res.BestCheckpoints = append([]api.Checkpoint{ck}, res.BestCheckpoints...) // rising: newest is best
		ft.mu.Lock()
		ft.epochs[in.Run.Name] = e
		ft.mu.Unlock()
		rep := api.TrialReport{Trial: carry.Trial, Index: e - 1, Metrics: api.Metrics{"epoch": float64(e), metric: v}, Checkpoint: ck.URI, Time: workflow.Now(ctx)}
		switch {
		case ft.swapFirst && e == 1:
			held = &rep
			continue
		case held != nil:
			workflow.SignalExternalWorkflow(ctx, parent.ID, "", api.SignalTrialReport, rep)
			rep, held = *held, nil
		}
		workflow.SignalExternalWorkflow(ctx, parent.ID, "", api.SignalTrialReport, rep)
	}
	return res, nil
}

type tuneHarness struct {
	env   *testsuite.TestWorkflowEnvironment
	ft    *fakeTrials
	mu    sync.Mutex
	bests []api.TuneBestRequest
	// stored is tune.json: what LoadTune finds, what SaveTune writes.
	stored *api.TuneState
	saves  int
}

// registerTuneStorage registers LoadTune and SaveTune's placeholders.
func registerTuneStorage(env *testsuite.TestWorkflowEnvironment) {
	env.RegisterActivityWithOptions(func(context.Context, api.TuneStateRequest) (*api.TuneState, error) { panic("mocked") },
		activity.RegisterOptions{Name: api.ActivityLoadTune})
	env.RegisterActivityWithOptions(func(context.Context, api.TuneStateRequest) error { panic("mocked") },
		activity.RegisterOptions{Name: api.ActivitySaveTune})
}

// mockTuneStorage mocks LoadTune and SaveTune over *stored.
func mockTuneStorage(env *testsuite.TestWorkflowEnvironment, mu *sync.Mutex, stored **api.TuneState, saves *int) {
	env.OnActivity(api.ActivityLoadTune, mock.Anything, mock.Anything).Return(func(context.Context, api.TuneStateRequest) (*api.TuneState, error) {
		mu.Lock()
		defer mu.Unlock()
		return *stored, nil
	})
	env.OnActivity(api.ActivitySaveTune, mock.Anything, mock.Anything).Return(func(_ context.Context, in api.TuneStateRequest) error {
		mu.Lock()
		defer mu.Unlock()
		b, _ := json.Marshal(in.State)
		var st api.TuneState
		_ = json.Unmarshal(b, &st)
		*stored = &st
		*saves++
		return nil
	})
}

func newTuneHarness(o Options) *tuneHarness {
	var s testsuite.WorkflowTestSuite
	h := &tuneHarness{env: s.NewTestWorkflowEnvironment(), ft: &fakeTrials{epochs: map[string]int{}, stops: map[string]string{}}}
	h.env.RegisterWorkflowWithOptions(New(o).Tune, workflow.RegisterOptions{Name: api.TuneWorkflowType})
	h.env.RegisterWorkflowWithOptions(h.ft.fit, workflow.RegisterOptions{Name: api.WorkflowType})
	h.env.RegisterActivityWithOptions(func(context.Context, api.TuneBestRequest) (string, error) { panic("mocked") },
		activity.RegisterOptions{Name: api.ActivityTuneBest})
	registerTuneStorage(h.env)
	// A scheduled search's (TestTuneScheduled mocks them).
	h.env.RegisterActivityWithOptions(loadRunPlaceholder,
		activity.RegisterOptions{Name: api.ActivityLoadRun})
	h.env.RegisterActivityWithOptions(func(context.Context, api.PromoteRequest) (api.PromoteOutput, error) { panic("mocked") },
		activity.RegisterOptions{Name: api.ActivityPromote})
	h.env.OnActivity(api.ActivityTuneBest, mock.Anything, mock.Anything).Return(func(_ context.Context, in api.TuneBestRequest) (string, error) {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.bests = append(h.bests, in)
		return in.StoragePath + "/" + in.Tune + "/" + api.BestFile, nil
	})
	mockTuneStorage(h.env, &h.mu, &h.stored, &h.saves)
	return h
}

func searchInput(n int, sched *api.SchedulerConfig) api.TuneInput {
	seed := int64(5)
	return api.TuneInput{
		Trainer: api.FitInput{TrainFunc: "fake", Config: json.RawMessage(`{"epochs": 9}`), Scaling: api.ScalingConfig{NumWorkers: 1},
			Run: api.RunConfig{Name: "s", StoragePath: "/runs"}},
		ParamSpace: map[string]json.RawMessage{"config.level": json.RawMessage(`{"uniform": [0.1, 1]}`)},
		TuneConfig: api.TuneConfig{Metric: "acc", Mode: "max", NumSamples: n, MaxConcurrentTrials: 3, Seed: &seed, Scheduler: sched},
	}
}

func levelOf(t *testing.T, tr api.TrialResult) float64 {
	var v float64
	if err := json.Unmarshal(tr.Params["config.level"], &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// TestTuneASHAStopsPoorTrials runs a 12-trial search with ASHA over fake
// trials whose curves rank by their level at every epoch: the scheduler
// stops some at a rung (fewer epochs, status stopped), never the best, at
// most 3 run at once, and best.json names the best trial's checkpoint.
func TestTuneASHAStopsPoorTrials(t *testing.T) {
	h := newTuneHarness(Options{})
	in := searchInput(12, &api.SchedulerConfig{Type: "asha", TimeAttr: "epoch", MaxT: 9, GracePeriod: 1, ReductionFactor: 3})
	res := h.search(t, in)
	if len(res.Trials) != 12 || res.Seed != 5 || !res.Done {
		t.Fatalf("%d trials, seed %d, done %v", len(res.Trials), res.Seed, res.Done)
	}
	if h.ft.most > 3 || h.ft.most < 2 {
		t.Errorf("at most %d trials ran at once, want 3 (max_concurrent_trials)", h.ft.most)
	}
	best, stopped, completed := 0.0, 0, 0
	var bestName string
	for i, tr := range res.Trials {
		lv := levelOf(t, tr)
		if lv > best {
			best, bestName = lv, tr.Name
		}
		if i > 0 && *tr.Metric > *res.Trials[i-1].Metric {
			t.Errorf("trials not sorted by the metric: %s %g after %g", tr.Name, *tr.Metric, *res.Trials[i-1].Metric)
		}
		if tr.Iterations != h.ft.epochs[tr.Name] || int(tr.Epochs) != tr.Iterations {
			t.Errorf("%s: %d iterations, %g epochs; it trained %d", tr.Name, tr.Iterations, tr.Epochs, h.ft.epochs[tr.Name])
		}
		want := fmt.Sprintf("/runs/s/%s/checkpoint_%06d", tr.Name, tr.Iterations)
		if tr.Checkpoint != want || tr.CheckpointSeq != tr.Iterations {
			t.Errorf("%s: checkpoint %s seq %d, want %s", tr.Name, tr.Checkpoint, tr.CheckpointSeq, want)
		}
		switch tr.Status {
		case api.TrialStopped:
			stopped++
			if tr.Epochs >= 9 || !strings.HasPrefix(tr.StopReason, "asha: at rung epoch=") || h.ft.stops[tr.Name] != tr.StopReason {
				t.Errorf("%s stopped after %g epochs: %q (the trial heard %q)", tr.Name, tr.Epochs, tr.StopReason, h.ft.stops[tr.Name])
			}
		case api.TrialCompleted:
			completed++
			if tr.Epochs != 9 {
				t.Errorf("%s completed after %g epochs", tr.Name, tr.Epochs)
			}
		default:
			t.Errorf("%s: status %s", tr.Name, tr.Status)
		}
		if tr.WorkflowID != "default-test-workflow-id-"+tr.Name || tr.Path != "/runs/s/"+tr.Name {
			t.Errorf("%s: workflow %s path %s", tr.Name, tr.WorkflowID, tr.Path)
		}
	}
	t.Logf("%d stopped, %d completed; best %s level %.3f", stopped, completed, bestName, best)
	if stopped < 4 || completed < 1 {
		t.Errorf("%d stopped and %d completed of 12 with reduction factor 3", stopped, completed)
	}
	if res.Best == nil || res.Best.Name != bestName || res.Best.Status != api.TrialCompleted {
		t.Fatalf("best %+v, want %s", res.Best, bestName)
	}
	if len(h.bests) != 1 || h.bests[0].Pointer.Checkpoint != res.Best.Checkpoint || h.bests[0].Tune != "s" ||
		*h.bests[0].Pointer.Score != *res.Best.Metric || res.BestFile != "/runs/s/best.json" {
		t.Errorf("best.json %+v, result's %s", h.bests, res.BestFile)
	}
	if res.Delay.Reports == 0 {
		t.Errorf("no report delay measured: %+v", res.Delay)
	}
}

// TestTuneStartsNextOnStop: a trial the scheduler stops frees its place
// among max_concurrent_trials when the stop is sent: the next trial starts
// while the stopped one winds down (5 minutes here), and no more than 3
// trials not told to stop ever run at once.
func TestTuneStartsNextOnStop(t *testing.T) {
	h := newTuneHarness(Options{})
	h.ft.teardown = 5 * time.Minute
	in := searchInput(12, &api.SchedulerConfig{Type: "asha", TimeAttr: "epoch", MaxT: 9, GracePeriod: 1, ReductionFactor: 3})
	res := h.search(t, in)
	stopped := 0
	for _, tr := range res.Trials {
		if tr.Status == api.TrialStopped {
			stopped++
		}
	}
	if stopped < 4 {
		t.Fatalf("%d trials stopped: the test proves little", stopped)
	}
	if h.ft.mostActive != 3 {
		t.Errorf("at most %d trials not told to stop ran at once, want 3 (max_concurrent_trials)", h.ft.mostActive)
	}
	if h.ft.most <= 3 {
		t.Errorf("at most %d trials ran at once, stopped ones winding down included: a stopped trial held its place until its end", h.ft.most)
	}
	t.Logf("%d stopped; at most %d trials at once, stopped ones winding down included", stopped, h.ft.most)
}

// TestTuneReportsOutOfOrder: a trial's reports whose signals arrive out
// of order are each taken: with mode min over a rising metric the best is
// the first report, which arrives after the second.
func TestTuneReportsOutOfOrder(t *testing.T) {
	h := newTuneHarness(Options{})
	h.ft.swapFirst = true
	in := searchInput(3, nil)
	in.TuneConfig.Mode = "min"
	res := h.search(t, in)
	for _, tr := range res.Trials {
		if tr.Status != api.TrialCompleted || tr.Iterations != 9 || tr.BestEpoch != 1 || tr.Epochs != 9 {
			t.Errorf("%s: %s, %d iterations, best at epoch %g, %g epochs; want completed, 9, 1, 9: its first report was dropped",
				tr.Name, tr.Status, tr.Iterations, tr.BestEpoch, tr.Epochs)
		}
	}
}

// TestTuneStopCondition: the plain stop condition stops trials as they
// reach it; without a scheduler every other trial runs to its end.
func TestTuneStopCondition(t *testing.T) {
	h := newTuneHarness(Options{})
	in := searchInput(6, nil)
	in.TuneConfig.Stop = map[string]float64{"acc": 0.5}
	h.env.ExecuteWorkflow(api.TuneWorkflowType, in, (*TuneCarry)(nil))
	var res api.TuneResult
	if err := h.env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	for _, tr := range res.Trials {
		reached := *tr.Metric >= 0.5
		switch {
		case reached && (tr.Status != api.TrialStopped || !strings.HasPrefix(tr.StopReason, "stop: acc ")):
			t.Errorf("%s reached acc %g: %s %q", tr.Name, *tr.Metric, tr.Status, tr.StopReason)
		case !reached && (tr.Status != api.TrialCompleted || tr.Epochs != 9):
			t.Errorf("%s: %s after %g epochs", tr.Name, tr.Status, tr.Epochs)
		}
	}
}

// TestTuneFailures: a failed trial is recorded and the search goes on; a
// search whose every trial failed fails, naming each.
func TestTuneFailures(t *testing.T) {
	h := newTuneHarness(Options{})
	h.ft.failLevelsBelow = 0.5
	h.env.ExecuteWorkflow(api.TuneWorkflowType, searchInput(8, nil), (*TuneCarry)(nil))
	var res api.TuneResult
	if err := h.env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	failed := 0
	for _, tr := range res.Trials {
		if levelOf(t, tr) < 0.5 {
			failed++
			if tr.Status != api.TrialFailed || !strings.Contains(tr.Error, "diverged") {
				t.Errorf("%s: %s %q", tr.Name, tr.Status, tr.Error)
			}
		} else if tr.Status != api.TrialCompleted {
			t.Errorf("%s: %s", tr.Name, tr.Status)
		}
	}
	if failed == 0 || failed == 8 {
		t.Fatalf("%d of 8 failed: the test proves little", failed)
	}

	h = newTuneHarness(Options{})
	h.ft.failLevelsBelow = 2
	h.env.ExecuteWorkflow(api.TuneWorkflowType, searchInput(3, nil), (*TuneCarry)(nil))
	err := h.env.GetWorkflowError()
	var app *temporal.ApplicationError
	if !errors.As(err, &app) || app.Type() != api.ErrTrainingFailed.String() || !app.NonRetryable() {
		t.Fatalf("error %v, want a non-retryable %s", err, api.ErrTrainingFailed)
	}
	for i := range 3 {
		if !strings.Contains(err.Error(), api.TrialName(i)+": level ") {
			t.Errorf("%v does not say why %s failed", err, api.TrialName(i))
		}
	}
}

// TestTuneUnknownMetric: a metric no trial reports fails the search after
// the first trial ends, naming the metrics its reports have.
func TestTuneUnknownMetric(t *testing.T) {
	h := newTuneHarness(Options{})
	h.ft.metric = "accuracy"
	h.env.ExecuteWorkflow(api.TuneWorkflowType, searchInput(6, nil), (*TuneCarry)(nil))
	err := h.env.GetWorkflowError()
	var app *temporal.ApplicationError
	if !errors.As(err, &app) || app.Type() != api.ErrInvalidInput.String() ||
		!strings.Contains(err.Error(), `tune_config.metric = "acc"`) || !strings.Contains(err.Error(), "its reports have: accuracy, epoch") {
		t.Fatalf("error %v", err)
	}
}

// TestTuneBadInput fails at once, non-retryably, naming the field.
func TestTuneBadInput(t *testing.T) {
	h := newTuneHarness(Options{})
	in := searchInput(2, nil)
	in.ParamSpace["config.lr"] = json.RawMessage(`{"normal": [0, 1]}`)
	h.env.ExecuteWorkflow(api.TuneWorkflowType, in, (*TuneCarry)(nil))
	err := h.env.GetWorkflowError()
	var app *temporal.ApplicationError
	if !errors.As(err, &app) || app.Type() != api.ErrInvalidInput.String() || !app.NonRetryable() ||
		!strings.Contains(err.Error(), `param_space.config.lr = "normal": unknown sampler`) {
		t.Fatalf("error %v", err)
	}
}

// TestTuneContinuesAsNew: a Tune whose history is long lets its running
// trials end and continues as new with its trials and rungs; the
// continuation starts the rest, and the whole search is the one a single
// run makes.
func TestTuneContinuesAsNew(t *testing.T) {
	sched := &api.SchedulerConfig{Type: "asha", TimeAttr: "epoch", MaxT: 9, GracePeriod: 1, ReductionFactor: 3}
	h := newTuneHarness(Options{ContinueAsNewAfterTrials: 5})
	h.env.ExecuteWorkflow(api.TuneWorkflowType, searchInput(12, sched), (*TuneCarry)(nil))
	err := h.env.GetWorkflowError()
	var can *workflow.ContinueAsNewError
	if !errors.As(err, &can) {
		t.Fatalf("error %v, want continue-as-new", err)
	}
	var in api.TuneInput
	var carry TuneCarry
	dc := converter.GetDefaultDataConverter()
	if err := dc.FromPayloads(can.Input, &in, &carry); err != nil {
		t.Fatal(err)
	}
	if carry.Next != 5 || carry.Seed != 5 || len(carry.Trials) != 12 || carry.ASHA == nil {
		t.Fatalf("carry next %d seed %d trials %d", carry.Next, carry.Seed, len(carry.Trials))
	}
	for i, tr := range carry.Trials {
		if done := tr.Status == api.TrialCompleted || tr.Status == api.TrialStopped; done != (i < 5) {
			t.Errorf("carried %s: %s", tr.Name, tr.Status)
		}
	}
	h2 := newTuneHarness(Options{})
	h2.env.ExecuteWorkflow(api.TuneWorkflowType, in, &carry)
	var res api.TuneResult
	if err := h2.env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	if len(h2.ft.epochs) != 7 {
		t.Errorf("the continuation ran %d trials, want the 7 left", len(h2.ft.epochs))
	}
	for _, tr := range res.Trials {
		if tr.Status != api.TrialCompleted && tr.Status != api.TrialStopped {
			t.Errorf("%s: %s", tr.Name, tr.Status)
		}
	}
}

// TestFitStopSignal: a stop signal ends a Fit's running attempt at once; the
// run ends as stopped (run.json, the Result's stop_reason) with the
// checkpoints it committed, not counted as a failure. The attempt waits for
// its cancelled ranks for stopGrace, not a failure's cancelGrace: a trial's
// Fit does not end while its ranks still hold their rank slots. (The test
// environment ends a cancelled activity at once, so the wait's length is
// what the test sees: the timer the attempt sets.)
func TestFitStopSignal(t *testing.T) {
	h := newHarness(t, nil, func(api.RunRankInput) error { return nil })
	var timers []time.Duration
	h.env.SetOnTimerScheduledListener(func(_ string, d time.Duration) { timers = append(timers, d) })
	h.reportAt(time.Minute, 1, api.Metrics{"loss": 0.5}, 1)
	h.reportAt(2*time.Minute, 1, api.Metrics{"loss": 0.3}, 2)
	start := h.env.Now()
	h.env.RegisterDelayedCallback(func() { h.env.SignalWorkflow(api.SignalStop, "asha: rung 1") }, 3*time.Minute)
	h.env.ExecuteWorkflow(api.WorkflowType, input(2, 0), &Carry{Trial: "trial_0000"})
	var res api.Result
	if err := h.env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	if took := h.env.Now().Sub(start); took > 5*time.Minute {
		t.Errorf("the run ended %s after its start: the stop at 3m did not end it", took)
	}
	if res.Error != "" || res.Attempts != 1 || res.Failures != 0 || res.Checkpoint == nil || res.Checkpoint.Seq != 2 || res.Reports != 2 ||
		res.StopReason != "asha: rung 1" {
		t.Errorf("result %+v, want one attempt, no failure, checkpoint 2, stop_reason %q", res, "asha: rung 1")
	}
	if h.stored.Status != api.StatusStopped || h.stored.Error != "" || len(h.stored.Checkpoints) != 2 {
		t.Errorf("stored %+v", h.stored)
	}
	if fmt.Sprint(h.deleted) != "[3 4]" {
		t.Errorf("deleted %v, want [3 4]: the orphans a commit after the last report leaves", h.deleted)
	}
	if !slices.Contains(timers, stopGrace) || slices.Contains(timers, cancelGrace) {
		t.Errorf("timers %v: the stopped attempt's wait for its ranks is not stopGrace (%s)", timers, stopGrace)
	}
}

// TestRendezvousStaleOnceCancelled: once an attempt cancelled its ranks,
// the rendezvous Query calls it stale while its ranks end, so that a rank
// that lost its heartbeats' replies, and with them the cancellation, learns
// of it by the Query it asks every second and frees its rank slot.
func TestRendezvousStaleOnceCancelled(t *testing.T) {
	f := &fit{attempt: 2, running: true, peers: []*api.Peer{{Addr: "a:1"}}, registered: 1}
	if rv, _ := f.rendezvous(2); rv.State != api.RendezvousReady {
		t.Fatalf("running attempt: %s, want ready", rv.State)
	}
	f.ending = true
	if rv, _ := f.rendezvous(2); rv.State != api.RendezvousStale {
		t.Errorf("attempt that cancelled its ranks: %s, want stale", rv.State)
	}
}

// TestTuneWithRealFits runs the Tune over real Fit workflows (their
// activities mocked; rank 0's reports sent as the real report Update): a
// report the scheduler judges returns to its rank only once the Tune
// answered, and a stopped trial's report not before its attempt ended, so
// it trains nothing past it. A trial whose last report reaches max_t
// exactly completes on its own (its run.json succeeded, no stop reason); one
// that reports past max_t is stopped there; stopped trials' run.json says
// stopped.
func TestTuneWithRealFits(t *testing.T) {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	New(Options{}).Register(env)
	var mu sync.Mutex
	registerFitActivities(env)
	env.RegisterActivityWithOptions(func(context.Context, api.TuneBestRequest) (string, error) { panic("mocked") },
		activity.RegisterOptions{Name: api.ActivityTuneBest})
	registerTuneStorage(env)
	env.OnActivity(api.ActivityLoadRun, mock.Anything, mock.Anything).Return(func(_ context.Context, in api.LoadRunInput) (api.LoadRunOutput, error) {
		return api.LoadRunOutput{Path: in.StoragePath + "/" + in.RunName}, nil
	})
	runStatus := map[string]api.RunStatus{} // run.json's last status, by run
	env.OnActivity(api.ActivityRecordRun, mock.Anything, mock.Anything).Return(func(_ context.Context, in api.RecordRunInput) error {
		mu.Lock()
		defer mu.Unlock()
		runStatus[in.State.Name] = in.State.Status
		return nil
	})
	env.OnActivity(api.ActivityTuneBest, mock.Anything, mock.Anything).Return("/runs/s/best.json", nil)
	var stored *api.TuneState
	var saves int
	mockTuneStorage(env, &mu, &stored, &saves)
	// trial_0000's function returns after its report at max_t; the others
	// would train for an hour.
	// Every trial's ranks are told which reports wait for the Tune (seen
	// as the mocks match their inputs).
	waitMetric := map[string]string{}
	seen := func(name string) any {
		return mock.MatchedBy(func(in api.RunRankInput) bool {
			if name != "" && in.RunName != name {
				return false
			}
			mu.Lock()
			defer mu.Unlock()
			waitMetric[in.RunName] = in.WaitMetric
			if j := in.WaitJudging; j != nil {
				waitMetric[in.RunName] += fmt.Sprintf(" judged at %s %v", j.TimeAttr, j.Milestones)
			}
			return true
		})
	}
	env.OnActivity(api.ActivityRunRank, mock.Anything, seen("trial_0000")).
		Return(api.RankOutput{Reports: 4}, nil).After(4*time.Minute + 10*time.Second)
	env.OnActivity(api.ActivityRunRank, mock.Anything, seen("")).Return(api.RankOutput{}, nil).After(time.Hour)

	start := env.Now()
	done := map[string]time.Duration{} // "trial/seq" → when its report returned
	report := func(at time.Duration, trial string, seq int, loss float64) {
		env.RegisterDelayedCallback(func() {
			m := api.Metrics{"epoch": float64(seq), "loss": loss}
			req := api.ReportRequest{Attempt: 1, Metrics: m, Checkpoint: &api.Checkpoint{Seq: seq, Attempt: 1, Metrics: m,
				URI: fmt.Sprintf("/runs/s/%s/checkpoint_%06d", trial, seq)}}
			key := fmt.Sprintf("%s/%d", trial, seq)
			err := env.UpdateWorkflowByID("default-test-workflow-id-"+trial, api.UpdateReport, key, &testsuite.TestUpdateCallback{
				OnReject: func(err error) { t.Errorf("report %s rejected: %v", key, err) },
				OnAccept: func() {},
				OnComplete: func(any, error) {
					mu.Lock()
					done[key] = env.Now().Sub(start)
					mu.Unlock()
				},
			}, req)
			if err != nil {
				t.Errorf("report %s: %v", key, err)
			}
		}, at)
	}
	// trial_0000 improves to max_t, its last epoch; trial_0001 is worse at
	// the first rung; trial_0002, better than trial_0000 at every rung,
	// reports past max_t.
	for e := 1; e <= 4; e++ {
		report(time.Duration(e)*time.Minute, "trial_0000", e, 1/float64(e))
	}
	report(61*time.Second, "trial_0001", 1, 2)
	for e := 1; e <= 5; e++ {
		report(time.Duration(e)*time.Minute+2*time.Second, "trial_0002", e, 0.5/float64(e))
	}

	in := searchInput(3, &api.SchedulerConfig{Type: "asha", TimeAttr: "epoch", MaxT: 4, GracePeriod: 1, ReductionFactor: 2})
	in.TuneConfig.Metric, in.TuneConfig.Mode = "loss", "min"
	env.ExecuteWorkflow(api.TuneWorkflowType, in, (*TuneCarry)(nil))
	var res api.TuneResult
	if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	byName := map[string]api.TrialResult{}
	for _, tr := range res.Trials {
		byName[tr.Name] = tr
	}
	a, b, c := byName["trial_0000"], byName["trial_0001"], byName["trial_0002"]
	if a.Status != api.TrialCompleted || a.StopReason != "" || a.Epochs != 4 || *a.Metric != 0.25 || a.Checkpoint != "/runs/s/trial_0000/checkpoint_000004" {
		t.Errorf("trial_0000 (its last report at max_t): %+v, want completed with no stop reason", a)
	}
	if d := a.End.Sub(start); d < 4*time.Minute+10*time.Second {
		t.Errorf("trial_0000 ended %s after the start, before its function returned (4m10s): it was stopped at max_t", d)
	}
	if b.Status != api.TrialStopped || b.Epochs != 1 || !strings.Contains(b.StopReason, "rung epoch=1") {
		t.Errorf("trial_0001: %+v", b)
	}
	if c.Status != api.TrialStopped || c.Epochs != 5 || c.StopReason != "epoch 5 reached max_t 4" {
		t.Errorf("trial_0002 (reports past max_t): %+v, want stopped at epoch 5", c)
	}
	if fmt.Sprint(waitMetric) != "map[trial_0000:loss judged at epoch [4 2 1] trial_0001:loss judged at epoch [4 2 1] trial_0002:loss judged at epoch [4 2 1]]" {
		t.Errorf("the ranks' WaitMetric and WaitJudging by trial: %v, want the Tune's metric (loss) and ASHA's rungs for each", waitMetric)
	}
	want := map[string]api.RunStatus{"trial_0000": api.StatusSucceeded, "trial_0001": api.StatusStopped, "trial_0002": api.StatusStopped}
	if fmt.Sprint(runStatus) != fmt.Sprint(want) {
		t.Errorf("run.json's status by trial: %v, want %v", runStatus, want)
	}
	if res.Best == nil || res.Best.Name != "trial_0002" {
		t.Errorf("best %+v", res.Best)
	}
	// trial_0000's epoch-1 report waited for the Tune's answer: it
	// returned after it was sent, within seconds; so did its report at
	// max_t, answered go on.
	for _, k := range []string{"trial_0000/1", "trial_0000/4"} {
		sent := time.Duration(k[len(k)-1]-'0') * time.Minute
		if d := done[k]; d < sent || d > sent+10*time.Second {
			t.Errorf("%s's report returned at %s, sent at %s", k, d, sent)
		}
	}
	// trial_0002 was stopped at its report past max_t instead of after its
	// ranks' hour.
	if took := env.Now().Sub(start); took > 6*time.Minute {
		t.Errorf("the search took %s: the trials were not stopped", took)
	}
}

// TestTuneContinuesStoredSearch: a search started again with its name takes
// its tune.json: the trials that ended stay, the rest run (the trial that
// was cancelled with the search among them), with the stored seed; a search
// of that name with other trials is refused.
func TestTuneContinuesStoredSearch(t *testing.T) {
	sched := &api.SchedulerConfig{Type: "asha", TimeAttr: "epoch", MaxT: 9, GracePeriod: 1, ReductionFactor: 3}
	first := newTuneHarness(Options{})
	first.env.ExecuteWorkflow(api.TuneWorkflowType, searchInput(8, sched), (*TuneCarry)(nil))
	var want api.TuneResult
	if err := first.env.GetWorkflowResult(&want); err != nil {
		t.Fatal(err)
	}
	if first.stored == nil || len(first.stored.Trials) != 8 || first.saves < 8 {
		t.Fatalf("tune.json after the search: %d saves, %+v", first.saves, first.stored)
	}
	// As if the search had stopped with trials 0-2 ended, 3 cancelled and
	// 4-7 not started.
	st := first.stored
	st.Trials[3].Status, st.Trials[3].Error = api.TrialFailed, "cancelled"
	for i := 4; i < 8; i++ {
		st.Trials[i].Status = api.TrialPending
	}
	st.Trials[5].Status = api.TrialRunning
	h := newTuneHarness(Options{})
	h.stored = st
	in := searchInput(8, sched)
	in.TuneConfig.Seed = nil // the stored seed
	h.env.ExecuteWorkflow(api.TuneWorkflowType, in, (*TuneCarry)(nil))
	var res api.TuneResult
	if err := h.env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	var ran []string
	for name := range h.ft.epochs {
		ran = append(ran, name)
	}
	slices.Sort(ran)
	if fmt.Sprint(ran) != "[trial_0003 trial_0004 trial_0005 trial_0006 trial_0007]" {
		t.Errorf("the continued search ran %v, want trials 3 to 7", ran)
	}
	if res.Seed != 5 || len(res.Trials) != 8 || res.Best == nil {
		t.Fatalf("result seed %d, %d trials", res.Seed, len(res.Trials))
	}
	for _, tr := range res.Trials {
		if !tr.Ended() || tr.Status == api.TrialFailed {
			t.Errorf("%s: %s %s", tr.Name, tr.Status, tr.Error)
		}
	}

	other := newTuneHarness(Options{})
	other.stored = st
	in = searchInput(8, sched)
	in.ParamSpace["config.level"] = json.RawMessage(`{"uniform": [0.2, 1]}`)
	other.env.ExecuteWorkflow(api.TuneWorkflowType, in, (*TuneCarry)(nil))
	if err := other.env.GetWorkflowError(); err == nil || !strings.Contains(err.Error(), "exists in storage whose trial_0000 has") {
		t.Errorf("a search of the same name with other trials: %v", err)
	}
}

// TestTrialReportWaitsOnlyWhenJudged: with ASHA alone, a trial's report
// waits for the Tune's answer only when the scheduler judges it (the first
// at each rung, and max_t); the others return at once. The parent here
// never answers, so a report that waits returns after tuneAnswerWait.
func TestTrialReportWaitsOnlyWhenJudged(t *testing.T) {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	New(Options{}).Register(env)
	registerFitActivities(env)
	env.OnActivity(api.ActivityLoadRun, mock.Anything, mock.Anything).Return(api.LoadRunOutput{Path: "/runs/r"}, nil)
	env.OnActivity(api.ActivityRecordRun, mock.Anything, mock.Anything).Return(nil)
	env.OnActivity(api.ActivityRunRank, mock.Anything, mock.Anything).Return(api.RankOutput{Reports: 7}, nil).After(time.Hour)
	judging := api.NewASHA(api.SchedulerConfig{Type: "asha", TimeAttr: "epoch", MaxT: 9, GracePeriod: 1, ReductionFactor: 3}).Judging()
	silent := func(ctx workflow.Context, carry *Carry) error {
		cctx := workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{WorkflowID: "trial"})
		return workflow.ExecuteChildWorkflow(cctx, api.WorkflowType, input(1, 0), carry).Get(ctx, nil)
	}
	env.RegisterWorkflowWithOptions(silent, workflow.RegisterOptions{Name: "silent-tune"})

	start := env.Now()
	var mu sync.Mutex
	took := map[float64]time.Duration{} // epoch → how long its report was held
	// Epochs 1, 2, 4, 5, 3 (a restart), 9, 10: rungs 1, 3 (first reached
	// at 4) and 9, and max_t's 9 and 10, are judged.
	for i, epoch := range []float64{1, 2, 4, 5, 3, 9, 10} {
		at := time.Duration(i+1) * time.Minute
		env.RegisterDelayedCallback(func() {
			req := api.ReportRequest{Attempt: 1, Metrics: api.Metrics{"epoch": epoch, "loss": 1 / epoch}}
			_ = env.UpdateWorkflowByID("trial", api.UpdateReport, fmt.Sprint(epoch), &testsuite.TestUpdateCallback{
				OnReject: func(err error) { t.Errorf("report at epoch %g rejected: %v", epoch, err) },
				OnAccept: func() {},
				OnComplete: func(any, error) {
					mu.Lock()
					took[epoch] = env.Now().Sub(start) - at
					mu.Unlock()
				},
			}, req)
		}, at)
	}
	env.RegisterDelayedCallback(func() { env.CancelWorkflow() }, 20*time.Minute)
	env.ExecuteWorkflow("silent-tune", &Carry{Trial: "trial_0000", TrialMetric: "loss", TrialJudging: judging})
	want := map[float64]bool{1: true, 2: false, 4: true, 5: false, 3: false, 9: true, 10: true}
	for epoch, waits := range want {
		d, ok := took[epoch]
		switch {
		case !ok:
			t.Errorf("the report at epoch %g never returned", epoch)
		case waits && d < tuneAnswerWait:
			t.Errorf("the report at epoch %g returned after %s: it did not wait for the Tune's answer", epoch, d)
		case !waits && d > time.Second:
			t.Errorf("the report at epoch %g, which no rung judges, was held %s", epoch, d)
		}
	}
}

// registerFitActivities registers the placeholders of the activities a Fit
// calls, which a test then mocks.
// loadRunPlaceholder gives LoadRun's mocks their signature. Named: the
// test environment finds a local activity's mock by its function's name,
// and anonymous placeholders of several activities are all "func1" there.
func loadRunPlaceholder(context.Context, api.LoadRunInput) (api.LoadRunOutput, error) {
	panic("mocked")
}

func registerFitActivities(env *testsuite.TestWorkflowEnvironment) {
	env.RegisterActivityWithOptions(loadRunPlaceholder,
		activity.RegisterOptions{Name: api.ActivityLoadRun})
	env.RegisterActivityWithOptions(func(context.Context, api.RecordRunInput) error { panic("mocked") },
		activity.RegisterOptions{Name: api.ActivityRecordRun})
	env.RegisterActivityWithOptions(func(context.Context, api.RunRankInput) (api.RankOutput, error) { panic("mocked") },
		activity.RegisterOptions{Name: api.ActivityRunRank})
}
