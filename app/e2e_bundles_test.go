package app_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/train"
)

// runRankStarts counts the RunRank activities a Fit scheduled, per attempt
// in order.
func runRankStarts(t *testing.T, workflowID string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	it := cl.GetWorkflowHistory(ctx, workflowID, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	n := 0
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil && a.GetActivityType().GetName() == api.ActivityRunRank {
			n++
		}
	}
	return n
}

// TestE2EBundles runs 4 ranks as 2 bundles of 2 (ranks_per_process 2)
// through the real server: an uninterrupted run, then one whose rank 3
// fails in attempt 1. Each attempt is 2 RunRank activities; the failure
// names rank 3, the second attempt resumes from the last checkpoint and
// ends exactly as the uninterrupted run; the status lists 4 ranks.
func TestE2EBundles(t *testing.T) {
	scaling := func(rq string) train.ScalingConfig {
		return train.ScalingConfig{NumWorkers: 4, RanksPerProcess: 2, TaskQueue: rq}
	}
	base := linearConfig{Epochs: 4, Steps: 20, Dim: 16, FailAttempt: 1}
	tq, rq := startWorkerOn(t, cl, true, 2) // 2 rank slots: a bundle each
	ctx, cancel := context.WithTimeout(context.Background(), fitTimeout)
	defer cancel()
	clean, err := train.NewTrainer(cl, "e2e-linear", base, scaling(rq), train.RunConfig{Name: freshName("bundles-clean"), StoragePath: t.TempDir()},
		train.WithTaskQueue(tq)).Fit(ctx)
	if err != nil {
		t.Fatalf("uninterrupted run: %v", err)
	}
	if clean.Attempts != 1 || clean.Reports != 4 {
		t.Fatalf("uninterrupted run: %+v", clean)
	}
	if n := runRankStarts(t, train.WorkflowID(clean.Name)); n != 2 {
		t.Errorf("the uninterrupted run scheduled %d RunRank activities, want 2 (4 ranks, 2 a bundle)", n)
	}

	cfg := base
	cfg.FailRank, cfg.FailEpoch, cfg.FailMode = 3, 3, "error"
	g := newGate(t)
	cfg.GateDir, cfg.GateEpoch = g.dir, 3
	run, err := train.NewTrainer(cl, "e2e-linear", cfg, scaling(rq),
		train.RunConfig{Name: freshName("bundles-failing"), StoragePath: t.TempDir(), Failure: train.FailureConfig{MaxFailures: 1}},
		train.WithTaskQueue(tq)).Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	g.reached(t, 4)
	// Held at the gate: one heartbeat per bundle carries both its ranks.
	deadline := time.Now().Add(30 * time.Second)
	var ranks []int
	for time.Now().Before(deadline) {
		st, err := train.StatusOf(ctx, cl, run.WorkflowID)
		if err != nil {
			t.Fatal(err)
		}
		ranks = ranks[:0]
		for _, r := range st.Ranks {
			if r.Phase == api.PhaseTrain {
				ranks = append(ranks, r.Rank)
			}
		}
		if fmt.Sprint(ranks) == "[0 1 2 3]" {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if fmt.Sprint(ranks) != "[0 1 2 3]" {
		t.Errorf("status lists ranks %v training, want [0 1 2 3] from 2 bundles' heartbeats", ranks)
	}
	g.open(t)
	res, err := run.Wait(ctx)
	if err != nil {
		dumpWorkflow(t, cl, run.WorkflowID)
		t.Fatal(err)
	}
	if res.Attempts != 2 || res.Failures != 1 || fmt.Sprint(res.Metrics) != fmt.Sprint(clean.Metrics) {
		t.Errorf("attempts %d failures %d metrics %v, want 2 attempts ending like the uninterrupted run %v", res.Attempts, res.Failures, res.Metrics, clean.Metrics)
	}
	if got := reportSequence(t, res); got != "a1/e1 a1/e2 a2/e3 a2/e4" {
		t.Errorf("reports %v, want attempt 2 to resume at epoch 3", got)
	}
	st := runState(t, res)
	if len(st.History) != 2 || !strings.Contains(st.History[0].Error, "rank 3 failed: injected failure at epoch 3") {
		t.Errorf("history %+v: attempt 1's error does not name rank 3 and its error", st.History)
	}
	if n := runRankStarts(t, train.WorkflowID(res.Name)); n != 4 {
		t.Errorf("2 attempts scheduled %d RunRank activities, want 4 (2 bundles each)", n)
	}
	recordHistory(t, train.WorkflowID(res.Name), "", "fit_bundles_restart")
}

// TestE2EBundleWorkerKilled: the worker process of one of two bundles is
// SIGKILLed mid-run; the other bundle's ranks lose their peers at once, the
// dead bundle is abandoned after the cancel grace, and the next attempt, on
// a replacement process, resumes and ends as the uninterrupted run.
func TestE2EBundleWorkerKilled(t *testing.T) {
	scaling := func(rq string) train.ScalingConfig {
		return train.ScalingConfig{NumWorkers: 4, RanksPerProcess: 2, TaskQueue: rq}
	}
	var want train.Metrics
	t.Run("uninterrupted", func(t *testing.T) {
		tq, rq := startWorkerOn(t, cl, true, 2)
		ctx, cancel := context.WithTimeout(context.Background(), fitTimeout)
		defer cancel()
		res, err := train.NewTrainer(cl, "e2e-linear", slowLinear, scaling(rq), train.RunConfig{Name: freshName("bundle-clean"), StoragePath: t.TempDir()},
			train.WithTaskQueue(tq)).Fit(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want = res.Metrics
	})
	res, st, _ := killOneOfTwoWorkers(t, freshName("bundle-killed"), train.ScalingConfig{NumWorkers: 4, RanksPerProcess: 2})
	if res.Attempts != 2 || fmt.Sprint(res.Metrics) != fmt.Sprint(want) {
		t.Fatalf("attempts %d metrics %v, want 2 attempts ending like the uninterrupted run %v (history %+v)", res.Attempts, res.Metrics, want, st.History)
	}
	recordHistory(t, train.WorkflowID(res.Name), "", "fit_bundles_killed")
}
