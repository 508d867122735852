package app_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/app"
	"github.com/tempotrain/tempotrain/train"
)

// TestE2ERankGroups runs 5 ranks in rank groups of at most 2 (ranks 0, 1-2
// and 3-4, each group a child workflow that starts its ranks and takes
// their registrations and heartbeats) through the real server: the run
// gives what one group of 5 gives, bit for bit; a rank of the last group
// that fails restarts every group from the last checkpoint; and the groups
// are on the server as the Fit's children, one per group and attempt.
func TestE2ERankGroups(t *testing.T) {
	base := linearConfig{Epochs: 4, Steps: 10, Dim: 16, FailRank: 3, FailAttempt: 1}
	clean, err := fit(t, "e2e-linear", base, 5, train.RunConfig{Name: "groups-clean", StoragePath: t.TempDir()},
		func(o *app.WorkerOptions) { o.Fit.RankGroupSize = -1 })
	if err != nil {
		t.Fatalf("run in one group: %v", err)
	}
	grouped := func(o *app.WorkerOptions) { o.Fit.RankGroupSize = 2 }
	t.Run("uninterrupted", func(t *testing.T) {
		res, err := fit(t, "e2e-linear", base, 5, train.RunConfig{Name: "groups", StoragePath: t.TempDir()}, grouped)
		if err != nil {
			t.Fatal(err)
		}
		if res.Attempts != 1 || res.Reports != 4 || fmt.Sprint(res.Metrics) != fmt.Sprint(clean.Metrics) {
			t.Errorf("in groups: %d attempts, %d reports, metrics %v; want 1, 4 and the one group's %v",
				res.Attempts, res.Reports, res.Metrics, clean.Metrics)
		}
		checkGroups(t, train.WorkflowID(res.Name), 1, 3)
	})
	t.Run("failure", func(t *testing.T) {
		cfg := base
		cfg.FailEpoch, cfg.FailMode = 3, "error"
		res, err := fit(t, "e2e-linear", cfg, 5, train.RunConfig{Name: "groups-failing", StoragePath: t.TempDir(),
			Failure: train.FailureConfig{MaxFailures: 1}}, grouped)
		if err != nil {
			t.Fatal(err)
		}
		if res.Attempts != 2 || res.Failures != 1 || fmt.Sprint(res.Metrics) != fmt.Sprint(clean.Metrics) {
			t.Errorf("%d attempts, %d failures, metrics %v; want 2, 1 and the uninterrupted run's %v",
				res.Attempts, res.Failures, res.Metrics, clean.Metrics)
		}
		if got := reportSequence(t, res); got != "a1/e1 a1/e2 a2/e3 a2/e4" {
			t.Errorf("reports %v, want attempt 2 to resume at epoch 3", got)
		}
		if st := runState(t, res); len(st.History) != 2 || st.History[1].ResumedFrom != 2 || !strings.Contains(st.History[0].Error, "rank 3 failed: injected failure at epoch 3") {
			t.Errorf("run.json history %+v: want attempt 1 to name rank 3's error and attempt 2 to resume from checkpoint 2", st.History)
		}
		checkGroups(t, train.WorkflowID(res.Name), 2, 3)
		recordHistory(t, train.WorkflowID(res.Name), "", "fit_groups_restart")
		recordHistory(t, train.WorkflowID(res.Name)+"/attempt-1/group-2", "", "group_failed")
	})
	t.Run("continue-as-new", func(t *testing.T) {
		// The Fit stops the groups at a checkpoint, continues as new and
		// resumes there (slow enough that the stop reaches the ranks).
		cfg := base
		cfg.StepSleep = train.Duration(100 * time.Millisecond) // 1 s an epoch
		res, err := fit(t, "e2e-linear", cfg, 5, train.RunConfig{Name: freshName("groups-can"), StoragePath: t.TempDir()},
			func(o *app.WorkerOptions) { o.Fit.RankGroupSize, o.Fit.ContinueAsNewAfterReports = 2, 2 })
		if err != nil {
			t.Fatal(err)
		}
		if res.Failures != 0 || res.Attempts < 2 || res.Reports != 4 || fmt.Sprint(res.Metrics) != fmt.Sprint(clean.Metrics) {
			t.Errorf("result %+v, want at least 2 attempts, no failure, 4 reports, metrics %v", res, clean.Metrics)
		}
		checkContinuedRuns(t, train.WorkflowID(res.Name), res.Attempts, "fit_groups_continued")
	})
	t.Run("cancelled", func(t *testing.T) {
		tq, rq := startWorkerOn(t, cl, true, 5, grouped)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		run, err := train.NewTrainer(cl, "e2e-wait", nil, train.ScalingConfig{NumWorkers: 5, TaskQueue: rq},
			train.RunConfig{Name: "groups-cancelled", StoragePath: t.TempDir()}, train.WithTaskQueue(tq)).Start(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 5; i++ {
			<-waitStarted
		}
		// The status lists the ranks, which are the groups' activities.
		var ranks []int
		for deadline := time.Now().Add(10 * time.Second); len(ranks) < 5 && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			st, err := run.Status(ctx)
			if err != nil {
				t.Fatal(err)
			}
			ranks = ranks[:0]
			for _, r := range st.Ranks {
				ranks = append(ranks, r.Rank)
			}
		}
		if fmt.Sprint(ranks) != "[0 1 2 3 4]" {
			t.Errorf("status ranks %v, want [0 1 2 3 4] (from the rank groups' pending activities)", ranks)
		}
		// One hop more than a Fit's own ranks (the Fit cancels its groups,
		// which cancel their ranks): 1.5 s measured on an idle machine.
		slowest := cancelWaiting(t, ctx, run.WorkflowID, 5)
		if slowest > 5*time.Second {
			t.Errorf("ranks saw the cancellation after %v, want within 5s", slowest)
		}
		res, err := run.Wait(ctx)
		if err == nil || res == nil || res.Error != "cancelled" {
			t.Errorf("Wait: %+v, %v, want a cancelled run's Result", res, err)
		}
		for g := 0; g < 3; g++ {
			desc, err := cl.DescribeWorkflowExecution(ctx, fmt.Sprintf("%s/attempt-1/group-%d", run.WorkflowID, g), "")
			if err != nil || desc.GetWorkflowExecutionInfo().GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
				t.Errorf("rank group %d after the Fit's cancellation: %v, %v", g, desc.GetWorkflowExecutionInfo().GetStatus(), err)
			}
		}
	})
}

// checkGroups checks that the Fit fitID ran groups rank groups in each of
// its attempts, every one completed.
func checkGroups(t *testing.T, fitID string, attempts, groups int) {
	t.Helper()
	ctx := context.Background()
	for a := 1; a <= attempts; a++ {
		for g := 0; g < groups; g++ {
			id := fmt.Sprintf("%s/attempt-%d/group-%d", fitID, a, g)
			desc, err := cl.DescribeWorkflowExecution(ctx, id, "")
			if err != nil {
				t.Errorf("rank group %s: %v", id, err)
				continue
			}
			info := desc.GetWorkflowExecutionInfo()
			if info.GetType().GetName() != api.GroupWorkflowType || info.GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED ||
				info.GetParentExecution().GetWorkflowId() != fitID {
				t.Errorf("rank group %s: type %s, status %s, parent %s; want %s, completed, %s", id,
					info.GetType().GetName(), info.GetStatus(), info.GetParentExecution().GetWorkflowId(), api.GroupWorkflowType, fitID)
			}
		}
	}
	if _, err := cl.DescribeWorkflowExecution(ctx, fmt.Sprintf("%s/attempt-%d/group-%d", fitID, attempts+1, 0), ""); err == nil {
		t.Errorf("a rank group of attempt %d exists; the Fit ran %d", attempts+1, attempts)
	}
}
