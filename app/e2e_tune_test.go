package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/app"
	"github.com/tempotrain/tempotrain/builtin"
	"github.com/tempotrain/tempotrain/predict"
	"github.com/tempotrain/tempotrain/train"
)

// Issue 27 through the real thing: a 12-trial search over tabular-mlp on a
// small generated table, ASHA on the validation loss, trials as child Fits
// on a worker of the dev server.
//   - The scheduler stops some trials at a rung: status stopped, fewer
//     epochs, their Fit completed (not a failure) with its checkpoints and
//     their run.json says stopped; a trial that reached max_t (its last
//     epoch) completed on its own: no stop reason, run.json succeeded.
//   - Every trial's numbers are its run's own (metrics.jsonl): the best
//     metric and epochs; the best trial is the one with the lowest loss.
//   - best.json names the best checkpoint, and predict.Load follows it.
//   - Every trial carries TempotrainTune.
func TestE2ETune(t *testing.T) {
	tq, rq := startWorkerOn(t, cl, true, 4)
	runs := t.TempDir()
	seed := int64(11)
	const maxT = 9
	tu := tuneSearch(t, cl, tq, rq, "tune-e2e", runs, 12, 4, seed, maxT)
	ctx, cancel := context.WithTimeout(context.Background(), 2*fitTimeout)
	defer cancel()
	start := time.Now()
	res, err := tu.Fit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("search took %s; report delay mean %.3fs max %.3fs over %d reports", time.Since(start).Round(time.Millisecond),
		res.Delay.Mean(), res.Delay.Max, res.Delay.Reports)
	if len(res.Trials) != 12 || res.Seed != seed || !res.Done {
		t.Fatalf("%d trials, seed %d, done %v", len(res.Trials), res.Seed, res.Done)
	}
	stopped, epochs := 0, 0.0
	bestLoss, bestName := math.Inf(1), ""
	for _, tr := range res.Trials {
		t.Logf("%s %-9s loss %.4f at epoch %g, %g epochs  %s  %s", tr.Name, tr.Status, deref(tr.Metric), tr.BestEpoch, tr.Epochs, tr.ParamString(), tr.StopReason)
		epochs += tr.Epochs
		// The trial's own record.
		recs := readMetrics(t, &train.Result{Path: filepath.Join(runs, "tune-e2e", tr.Name)})
		loss, at, last := math.Inf(1), 0.0, 0.0
		for _, r := range recs {
			if v, ok := r.Metrics["valid_loss"]; ok && v < loss {
				loss, at = v, r.Metrics["epoch"]
			}
			last = math.Max(last, r.Metrics["epoch"])
		}
		if tr.Metric == nil || *tr.Metric != loss || tr.BestEpoch != at || tr.Epochs != last || tr.Iterations != len(recs) {
			t.Errorf("%s: metric %v at %g, %g epochs, %d reports; its metrics.jsonl: %g at %g, %g epochs, %d reports",
				tr.Name, deref(tr.Metric), tr.BestEpoch, tr.Epochs, tr.Iterations, loss, at, last, len(recs))
		}
		if loss < bestLoss {
			bestLoss, bestName = loss, tr.Name
		}
		var st api.RunState
		if b, err := os.ReadFile(filepath.Join(runs, "tune-e2e", tr.Name, "run.json")); err != nil || json.Unmarshal(b, &st) != nil {
			t.Errorf("%s: run.json: %v", tr.Name, err)
		}
		switch tr.Status {
		case api.TrialStopped:
			stopped++
			if tr.Epochs >= maxT || st.Status != api.StatusStopped {
				t.Errorf("%s stopped after %g epochs, its run.json says %s", tr.Name, tr.Epochs, st.Status)
			}
		case api.TrialCompleted:
			if tr.Epochs != maxT || tr.StopReason != "" || st.Status != api.StatusSucceeded {
				t.Errorf("%s completed after %g epochs (stop reason %q), its run.json says %s: a trial whose last epoch is max_t completes on its own",
					tr.Name, tr.Epochs, tr.StopReason, st.Status)
			}
		default:
			t.Errorf("%s: %s %s", tr.Name, tr.Status, tr.Error)
		}
		if tr.Checkpoint == "" {
			t.Errorf("%s has no checkpoint", tr.Name)
		}
		// A stopped trial's Fit completed: stopping is not a failure.
		d, err := cl.DescribeWorkflowExecution(ctx, tr.WorkflowID, "")
		if err != nil {
			t.Fatal(err)
		}
		if s := d.GetWorkflowExecutionInfo().GetStatus(); s != enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED {
			t.Errorf("%s's Fit: %s", tr.Name, s)
		}
	}
	t.Logf("%d of 12 stopped; %g epochs of %d", stopped, epochs, 12*maxT)
	recordHistory(t, train.TuneWorkflowID("tune-e2e"), "", "tune_asha")
	for _, tr := range res.Trials {
		if tr.Status == api.TrialStopped {
			recordHistory(t, tr.WorkflowID, "", "fit_trial_stopped")
			break
		}
	}
	// Which trials ASHA stops depends on the order their reports arrive
	// in (asynchronous rungs): 4 to 6 in runs so far.
	if stopped < 2 {
		t.Errorf("%d trials stopped by ASHA, want at least 2", stopped)
	}
	if res.Best == nil || res.Best.Name != bestName || res.Trials[0].Name != bestName {
		t.Fatalf("best %+v, want %s (loss %g)", res.Best, bestName, bestLoss)
	}
	want := filepath.Join(runs, "tune-e2e", api.BestFile)
	b, err := os.ReadFile(want)
	if err != nil || res.BestFile != want {
		t.Fatalf("best.json: %v (result says %q)", err, res.BestFile)
	}
	p, err := api.ParsePointer(b)
	if err != nil || p.Checkpoint != res.Best.Checkpoint || p.Run != bestName || p.Score == nil || *p.Score != bestLoss {
		t.Fatalf("best.json %s: %v", b, err)
	}
	pr, err := predict.Load(ctx, want)
	if err != nil {
		t.Fatalf("predict.Load(best.json): %v", err)
	}
	pr.Close()

	// Every trial carries TempotrainTune (and the search itself).
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := cl.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: fmt.Sprintf("%s = 'tune-e2e' AND StartTime >= '%s'", api.SATune, start.UTC().Format(time.RFC3339Nano))})
		if err != nil {
			t.Fatal(err)
		}
		if n := len(resp.GetExecutions()); n == 13 {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("%d workflows with %s = tune-e2e, want 12 trials and the search", n, api.SATune)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// tuneSearch is a search of n trials over tabular-mlp on a small generated
// table: learning rate, hidden sizes and batch size; ASHA on the validation
// loss by epoch up to maxT, reduction factor 3.
func tuneSearch(t *testing.T, c client.Client, tq, rq, name, runs string, n, concurrent int, seed int64, maxT int) *train.Tuner {
	t.Helper()
	dir := t.TempDir()
	for _, part := range []struct {
		name string
		rows int
		seed uint64
	}{{"train", 1200, 1}, {"valid", 400, 2}} {
		tabularRows(t, part.rows, part.seed, filepath.Join(dir, part.name+".csv"), filepath.Join(dir, part.name+".parquet"))
	}
	tu, err := train.NewTuner(c, train.FitInput{
		TrainFunc: builtin.TabularMLP, Config: json.RawMessage(fmt.Sprintf(`{"epochs": %d, "seed": 3}`, maxT)),
		Scaling: train.ScalingConfig{NumWorkers: 1, TaskQueue: rq},
		Run:     train.RunConfig{Name: name, StoragePath: runs},
		Datasets: map[string]api.DatasetSpec{
			"train": {URI: filepath.Join(dir, "train.csv"), Label: "y"},
			"valid": {URI: filepath.Join(dir, "valid.csv"), Label: "y"},
		},
		Preprocessors: []api.PreprocessorSpec{
			{Type: api.StandardScaler, Columns: []string{"f0", "f1", "f2", "f3", "f4", "f5"}},
			{Type: api.OneHotEncoder, Columns: []string{"grp"}},
		},
	}, map[string]any{
		"config.lr":         train.LogUniform(1e-4, 0.2),
		"config.hidden":     train.Choice([]int{8}, []int{32, 16}),
		"config.batch_size": train.Choice(32, 128),
	}, train.TuneConfig{Metric: "valid_loss", Mode: "min", NumSamples: n, MaxConcurrentTrials: concurrent, Seed: &seed,
		Scheduler: &train.SchedulerConfig{Type: "asha", TimeAttr: "epoch", MaxT: float64(maxT), GracePeriod: 1, ReductionFactor: 3}},
		train.WithTuneTaskQueue(tq))
	if err != nil {
		t.Fatal(err)
	}
	return tu
}

func deref(p *float64) float64 {
	if p == nil {
		return math.NaN()
	}
	return *p
}

// TestE2ETuneControllerDies kills the worker process that runs the Tune
// workflow (and its trials' Fits) mid-search with SIGKILL, and starts
// another: the search ends with every trial once, each trial's Fit one
// execution with one attempt, as if nothing happened.
func TestE2ETuneControllerDies(t *testing.T) {
	tq, rq := startWorkerOn(t, cl, false, 2) // the ranks, in this process
	k1 := startChild(t, "tune-controller-1", srv.Address, true, 0)
	runs := t.TempDir()
	const n, maxT = 8, 9
	tu := tuneSearch(t, cl, tq, rq, "tune-dies", runs, n, 2, 5, maxT)
	ctx, cancel := context.WithTimeout(context.Background(), 2*fitTimeout)
	defer cancel()
	since := time.Now()
	s, err := tu.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Kill the controller once trials have ended and others run.
	t.Logf("killing the controller: %v ended", waitTrials(ctx, t, cl, s.WorkflowID, 2))
	k1.Kill()
	time.Sleep(time.Second)
	startChild(t, "tune-controller-2", srv.Address, true, 0)
	res, err := s.Wait(ctx)
	if err != nil {
		dumpWorkflow(t, cl, s.WorkflowID)
		t.Fatal(err)
	}
	if len(res.Trials) != n {
		t.Fatalf("%d trials, want %d", len(res.Trials), n)
	}
	for _, tr := range res.Trials {
		st := checkTrial(ctx, t, cl, since, tr, filepath.Join(runs, "tune-dies"), nil)
		recs := readMetrics(t, &train.Result{Path: filepath.Join(runs, "tune-dies", tr.Name)})
		if st.Attempts != 1 || st.Failures != 0 || tr.Iterations != len(recs) {
			t.Errorf("%s: %d attempts, %d failures, %d reports heard of %d recorded", tr.Name, st.Attempts, st.Failures, tr.Iterations, len(recs))
		}
	}
}

// waitTrials polls a search until at least k of its trials ended, and
// returns their names.
func waitTrials(ctx context.Context, t *testing.T, c client.Client, workflowID string, k int) []string {
	t.Helper()
	for {
		r, err := train.GetTuneResult(ctx, c, workflowID)
		if err != nil {
			// A Query waits for a worker to answer it: under load it can
			// time out (seen in CI) while the search is fine; the test's
			// deadline bounds the retries.
			if ctx.Err() != nil {
				t.Fatal(err)
			}
			t.Logf("%v; asking again", err)
			time.Sleep(500 * time.Millisecond)
			continue
		}
		var ended []string
		for _, tr := range r.Trials {
			if tr.Status == api.TrialCompleted || tr.Status == api.TrialStopped {
				ended = append(ended, tr.Name)
			}
		}
		if len(ended) >= k {
			return ended
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// checkTrial checks that trial ended well, its Fit ran once since since
// (or, with once, only if once says so) and its run in storage is whole;
// it returns the run's state.
func checkTrial(ctx context.Context, t *testing.T, c client.Client, since time.Time, tr api.TrialResult, storage string, once func(string) bool) api.RunState {
	t.Helper()
	if tr.Status != api.TrialCompleted && tr.Status != api.TrialStopped {
		t.Errorf("%s: %s %s", tr.Name, tr.Status, tr.Error)
	}
	resp, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: fmt.Sprintf("WorkflowId = '%s'", tr.WorkflowID)})
	if err != nil {
		t.Fatal(err)
	}
	got := 0 // executions of this test's search: -count runs it again with the same IDs
	for _, e := range resp.GetExecutions() {
		if !e.GetStartTime().AsTime().Before(since) {
			got++
		}
	}
	if got != 1 && (once == nil || once(tr.Name)) {
		t.Errorf("%s: %d executions of its Fit, want 1", tr.Name, got)
	}
	return verifyRun(t, &train.Result{Name: tr.Name, Metrics: train.Metrics{"epoch": tr.Epochs}}, storage, int(tr.Epochs))
}

// TestE2ETuneContinues cancels a search mid-way and starts it again with
// its name: the trials that ended are kept (their Fits not run again), the
// others run, and the search ends with every trial.
func TestE2ETuneContinues(t *testing.T) {
	tq, rq := startWorkerOn(t, cl, true, 2)
	runs := t.TempDir()
	const n, maxT = 6, 6
	ctx, cancel := context.WithTimeout(context.Background(), 2*fitTimeout)
	defer cancel()
	since := time.Now()
	s, err := tuneSearch(t, cl, tq, rq, "tune-again", runs, n, 2, 9, maxT).Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ended := waitTrials(ctx, t, cl, s.WorkflowID, 2)
	if err := cl.CancelWorkflow(ctx, s.WorkflowID, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Wait(ctx); err == nil {
		t.Fatal("the cancelled search succeeded")
	}
	// Its running trials are cancelled with it.
	for i := range n {
		id := s.WorkflowID + "-" + api.TrialName(i)
		for {
			d, err := cl.DescribeWorkflowExecution(ctx, id, "")
			if err != nil || d.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	t.Logf("cancelled with %v ended", ended)
	res, err := tuneSearch(t, cl, tq, rq, "tune-again", runs, n, 2, 9, maxT).Fit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// A trial that ended before the cancellation did not run again.
	for _, tr := range res.Trials {
		checkTrial(ctx, t, cl, since, tr, filepath.Join(runs, "tune-again"), func(name string) bool { return slices.Contains(ended, name) })
	}
	if _, err := os.Stat(filepath.Join(runs, "tune-again", api.TuneStateFile)); err != nil {
		t.Error(err)
	}
}

// TestE2ETuneServerRestarts stops the Temporal server mid-search and
// starts it again on its database: the search ends with every trial, each
// trial's Fit one execution with one attempt.
func TestE2ETuneServerRestarts(t *testing.T) {
	db := t.TempDir() + "/temporal.db"
	own, err := app.StartDevServer(app.DevServerOptions{DatabaseFile: db})
	if err != nil {
		t.Fatal(err)
	}
	port, _ := strconv.Atoi(own.Address[strings.LastIndex(own.Address, ":")+1:])
	defer func() { own.Stop() }()
	c, err := dialServer(own.Address)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tq, rq := startWorkerOn(t, c, true, 2)
	runs := t.TempDir()
	const n, maxT = 6, 9
	ctx, cancel := context.WithTimeout(context.Background(), 2*fitTimeout)
	defer cancel()
	since := time.Now()
	s, err := tuneSearch(t, c, tq, rq, "tune-restart", runs, n, 2, 3, maxT).Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	waitTrials(ctx, t, c, s.WorkflowID, 1)
	own.Stop()
	time.Sleep(2 * time.Second) // the ranks train on, their reports wait
	if own, err = app.StartDevServer(app.DevServerOptions{Port: port, DatabaseFile: db}); err != nil {
		t.Fatalf("restart the server: %v", err)
	}
	res, err := s.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, tr := range res.Trials {
		if st := checkTrial(ctx, t, c, since, tr, filepath.Join(runs, "tune-restart"), nil); st.Attempts != 1 || st.Failures != 0 {
			t.Errorf("%s: %d attempts, %d failures", tr.Name, st.Attempts, st.Failures)
		}
	}
}
