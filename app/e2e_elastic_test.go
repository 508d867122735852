package app_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/internal/workerproc"
	"github.com/tempotrain/tempotrain/train"
)

// TestE2EElastic: four worker processes of one rank slot, min 2 max 4. A
// SIGKILLed worker: the next attempt forms on the three left, without
// waiting for it (heartbeat timeout at its default, 60s); a new worker
// process: it waits as a standby, and the run grows back to four ranks at
// its next checkpoint, a planned restart that is not a failure. The
// Result lists the world sizes 4, 3, 4.
func TestE2EElastic(t *testing.T) {
	tq, rq := startWorkerOn(t, cl, true, 0) // the controller, in this process
	var workers []*workerproc.Proc
	for _, n := range []string{"node-a", "node-b", "node-c", "node-d"} {
		workers = append(workers, startChild(t, n, srv.Address, false, 1))
	}
	waitPollers(t, rq, 4)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir, g := t.TempDir(), newGate(t)
	cfg := g.config()
	cfg.Epochs, cfg.StepSleep = 40, train.Duration(20*time.Millisecond)
	// Attempt 2 (resumed from epoch 2) waits at epoch 5 until the new
	// worker stands by, so that the group grows before the run ends
	// however slowly the machine starts a process.
	cfg.HoldAttempt, cfg.HoldEpoch = 2, 5
	run, err := train.NewTrainer(cl, "e2e-linear", cfg,
		train.ScalingConfig{MinWorkers: 2, MaxWorkers: 4, LastCall: train.Duration(2 * time.Second), TaskQueue: rq},
		train.RunConfig{Name: "elastic", StoragePath: dir, Failure: train.FailureConfig{MaxFailures: 1}},
		train.WithTaskQueue(tq)).Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	g.reached(t, 4)
	killed := time.Now()
	workers[3].Kill()
	g.open(t)
	// Attempt 2 trains on three ranks: wait for its first report.
	var resumed time.Duration
	for resumed == 0 {
		if ctx.Err() != nil {
			dumpWorkflow(t, cl, run.WorkflowID)
			t.Fatal("attempt 2 never reported")
		}
		time.Sleep(20 * time.Millisecond)
		var st api.Status
		v, err := cl.QueryWorkflow(ctx, run.WorkflowID, "", api.QueryStatus)
		if err != nil || v.Get(&st) != nil {
			continue
		}
		for _, r := range st.Recent {
			if r.Attempt == 2 {
				resumed = r.Time.Sub(killed)
				break
			}
		}
	}
	grown := time.Now()
	startChild(t, "node-e", srv.Address, false, 1) // capacity comes back
	hs := waitStandby(ctx, t, run)
	g.release(t)
	res, err := run.Wait(ctx)
	if err != nil {
		dumpWorkflow(t, cl, run.WorkflowID)
		t.Fatal(err)
	}
	// While attempt 2 was held, its status showed three ranks training and
	// the new worker standing by, from their heartbeats (samples/s is 0
	// then: a held rank does not train).
	if hs.WorldSize != 3 || hs.Standbys != 1 || len(hs.History) != 2 {
		t.Errorf("status while held: world size %d, standbys %d, %d attempts in history: want 3, 1, 2", hs.WorldSize, hs.Standbys, len(hs.History))
	}
	workersSeen := map[string]bool{}
	var current []train.RankStatus
	for _, r := range hs.Ranks {
		t.Logf("rank status: %+v", r)
		if r.Attempt == 2 {
			current = append(current, r)
			workersSeen[r.Worker] = true
		}
	}
	for i, r := range current {
		switch {
		case i < 3 && (r.Rank != i || r.Attempt != 2 || r.Epoch < 3 || r.Samples <= 0 || r.Phase != api.PhaseTrain):
			t.Errorf("rank status %d: %+v: want rank %d of attempt 2 training, epoch >= 3, samples counted", i, r, i)
		case i == 3 && r.Rank != -1:
			t.Errorf("the standby's status %+v: want rank -1", r)
		}
	}
	if len(current) != 4 || len(workersSeen) != 4 {
		t.Errorf("%d rank statuses of attempt 2 from %d workers: want 4 from 4", len(current), len(workersSeen))
	}
	st := verifyRun(t, res, dir, cfg.Epochs)
	for _, h := range st.History {
		t.Logf("attempt %d: world size %d, resumed from %d, %v to %v, grown %v, error %q", h.Attempt, h.WorldSize, h.ResumedFrom,
			h.Start.Sub(killed).Round(time.Millisecond), h.End.Sub(killed).Round(time.Millisecond), h.Grown, h.Error)
	}
	if !slices.Equal(res.WorldSizes, []int{4, 3, 4}) || res.Failures != 1 || len(st.History) != 3 || !st.History[1].Grown {
		t.Fatalf("world sizes %v, failures %d, history %+v: want 4, 3, 4 with one failure, attempt 2 grown", res.WorldSizes, res.Failures, st.History)
	}
	if !strings.Contains(st.History[0].Error, "lost a peer") && !strings.Contains(st.History[0].Error, "did not stop") {
		t.Errorf("attempt 1 error %q does not say a rank was lost", st.History[0].Error)
	}
	t.Logf("SIGKILL to attempt 2 (3 ranks) reporting: %v (attempt 2 started %v after it); new worker to attempt 3 (4 ranks): %v",
		resumed, st.History[1].Start.Sub(killed), st.History[2].Start.Sub(grown))
	// The default heartbeat timeout is 60s: training resumed on three
	// ranks well within it (target: heartbeat timeout + 3s).
	if limit := api.DefaultHeartbeatTimeout + 3*time.Second; resumed > limit {
		t.Errorf("training resumed %v after the SIGKILL, over %v", resumed, limit)
	}
	recordHistory(t, run.WorkflowID, "", "elastic_shrink_grow")
}

// waitStandby waits until the run's status shows a standby, and then for
// standbyGrace (3 s: the workflow grows a group only for a standby that has
// waited that long) and the ranks' heartbeats; it returns the status then.
func waitStandby(ctx context.Context, t *testing.T, run *train.Run) *train.Status {
	t.Helper()
	for {
		st, err := run.Status(ctx)
		if err == nil && st.Standbys > 0 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("no standby: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(3500 * time.Millisecond)
	st, err := run.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// waitPollers waits until n worker processes poll the rank queue rq, so
// that an elastic attempt finds them all (a process takes a second or so
// to start).
func waitPollers(t *testing.T, rq string, n int) {
	t.Helper()
	waitPollersOn(t, cl, rq, n)
}

// waitPollersOn waits until n workers poll rq on c's server.
func waitPollersOn(t *testing.T, c client.Client, rq string, n int) {
	t.Helper()
	if !pollersWithin(c, rq, n, time.Minute) {
		t.Fatalf("fewer than %d workers poll %s after a minute", n, rq)
	}
}

// pollersWithin says whether n workers poll rq on c's server within d.
func pollersWithin(c client.Client, rq string, n int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		desc, err := c.DescribeTaskQueue(context.Background(), rq, enumspb.TASK_QUEUE_TYPE_ACTIVITY)
		ids := map[string]bool{}
		if err == nil {
			for _, p := range desc.GetPollers() {
				ids[p.GetIdentity()] = true
			}
		}
		if len(ids) >= n {
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return false
}

// TestE2EElasticTooFewWorkers: with fewer workers than min_workers, an
// elastic run waits start_timeout, then fails, saying how many it saw.
func TestE2EElasticTooFewWorkers(t *testing.T) {
	tq, rq := startWorker(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), fitTimeout)
	defer cancel()
	start := time.Now()
	res, err := train.NewTrainer(cl, "e2e-linear", linearConfig{Epochs: 2, Steps: 5, Dim: 4},
		train.ScalingConfig{MinWorkers: 2, MaxWorkers: 3, TaskQueue: rq},
		train.RunConfig{Name: "too-few", StoragePath: t.TempDir(),
			Failure: train.FailureConfig{MaxFailures: 3, StartTimeout: train.Duration(3 * time.Second)}},
		train.WithTaskQueue(tq)).Fit(ctx)
	took := time.Since(start)
	if err == nil {
		t.Fatalf("the run succeeded with one worker for min_workers 2: %+v", res)
	}
	t.Logf("after %v: %v", took, err)
	for _, want := range []string{"only 1 of min_workers 2 ranks started within start_timeout 3s", "1 workers took a rank"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if res == nil || res.Attempts != 1 {
		t.Errorf("result %+v: want the run to end after its one attempt (no retry can add workers)", res)
	}
	if took > 30*time.Second {
		t.Errorf("the run took %v to fail; start_timeout is 3s", took)
	}
	recordHistory(t, train.WorkflowID("too-few"), "", "elastic_too_few")
}

// TestE2EFixedSizeCannotLoseAWorker is TestE2EElastic's comparison: a
// fixed-size run (num_workers 2) whose worker is SIGKILLed and not
// replaced waits for a worker that never comes, start_timeout per attempt,
// and fails.
func TestE2EFixedSizeCannotLoseAWorker(t *testing.T) {
	tq, rq := startWorkerOn(t, cl, true, 0)
	startChild(t, "node-a", srv.Address, false, 1)
	b := startChild(t, "node-b", srv.Address, false, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir, g := t.TempDir(), newGate(t)
	run, err := train.NewTrainer(cl, "e2e-linear", g.config(), train.ScalingConfig{NumWorkers: 2, TaskQueue: rq},
		train.RunConfig{Name: "fixed", StoragePath: dir,
			Failure: train.FailureConfig{MaxFailures: 1, StartTimeout: train.Duration(3 * time.Second)}},
		train.WithTaskQueue(tq)).Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	g.reached(t, 2)
	killed := time.Now()
	b.Kill()
	g.open(t)
	res, err := run.Wait(ctx)
	if err == nil {
		t.Fatalf("a fixed-size run of 2 went on with one worker: %+v", res)
	}
	t.Logf("failed %v after the SIGKILL: %v", time.Since(killed).Round(time.Millisecond), err)
	if !strings.Contains(err.Error(), "no worker took it from task queue") || res == nil || !slices.Equal(res.WorldSizes, []int{2, 2}) {
		t.Errorf("result %+v, error %v: want two attempts of 2, the second waiting start_timeout for a worker", res, err)
	}
}

// TestE2EElasticPreemption: a worker of an elastic run told to stop
// (SIGTERM) makes its group checkpoint at the next step; the attempt ends
// preempted (not a failure) and the run goes on at once with the workers
// left, on fewer ranks, from that step: no replacement needed.
func TestE2EElasticPreemption(t *testing.T) {
	needFashion(t)
	cfg := map[string]any{"epochs": 4, "batch_size": 32, "train_limit": 8192, "test_limit": 512, "seed": 4}
	tq, rq := startWorkerOn(t, cl, true, 0)
	startChild(t, "node-a", srv.Address, false, 1)
	startChild(t, "node-b", srv.Address, false, 1)
	c := startChild(t, "node-c", srv.Address, false, 1)
	waitPollers(t, rq, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	run, err := train.NewTrainer(cl, "mnist-mlp", cfg,
		train.ScalingConfig{MinWorkers: 2, MaxWorkers: 3, TaskQueue: rq},
		train.RunConfig{Name: "elastic-preempted", StoragePath: dir}, train.WithTaskQueue(tq)).Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	waitForEpoch2(ctx, t, run.WorkflowID)
	termed := time.Now()
	c.Term()
	res, err := run.Wait(ctx)
	if err != nil {
		dumpWorkflow(t, cl, run.WorkflowID)
		t.Fatal(err)
	}
	st := verifyRun(t, res, dir, 4)
	var stop, resumed api.ReportRecord
	for _, r := range readMetrics(t, res) {
		if r.Metrics["preempted"] == 1 {
			stop = r
		}
		if r.Attempt == 2 && resumed.Attempt == 0 {
			resumed = r
		}
	}
	t.Logf("world sizes %v; SIGTERM to the preemption checkpoint: %v (epoch %v step %v); to attempt 2's first report on %d ranks: %v; test accuracy %.4f",
		res.WorldSizes, stop.Time.Sub(termed), stop.Metrics["epoch"]+1, stop.Metrics["step"], res.WorldSizes[len(res.WorldSizes)-1],
		resumed.Time.Sub(termed), res.Metrics["test_accuracy"])
	if res.Failures != 0 || st.Failures != 0 || len(st.History) != 2 || !st.History[0].Preempted || !slices.Equal(res.WorldSizes, []int{3, 2}) {
		t.Fatalf("result %+v history %+v: want attempts on 3 then 2 ranks, the first preempted, no failure", res, st.History)
	}
	if stop.Checkpoint == 0 || stop.Metrics["step"] < 1 || st.History[1].RestoredFrom != stop.Checkpoint {
		t.Fatalf("preemption report %+v; attempt 2 restored %d: want it to resume at the preemption checkpoint", stop, st.History[1].RestoredFrom)
	}
	if res.Metrics["test_accuracy"] < 0.5 {
		t.Errorf("test accuracy %v after a preemption: training went wrong", res.Metrics["test_accuracy"])
	}
	recordHistory(t, run.WorkflowID, "", "elastic_preempted")
}
