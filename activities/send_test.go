package activities

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/train"
)

// reportRank is rank 0 of attempt 1 as far as reporting goes, over wf.
func reportRank(wf *fakeWorkflow, waitMetric string) *rank {
	return &rank{in: api.RunRankInput{Attempt: 1, Rank: 0, WaitMetric: waitMetric}, wf: wf, wfID: "fake", runID: "fake-run", log: quiet}
}

// reportSteps makes reports with steps from..to on r, each returning.
func reportSteps(t *testing.T, ctx context.Context, r *rank, from, to int) {
	t.Helper()
	for i := from; i <= to; i++ {
		if err := r.Report(ctx, train.Metrics{"step": float64(i)}, nil); err != nil {
			t.Fatalf("report %d: %v", i, err)
		}
	}
}

// steps are the "step" metrics of the reports the workflow received.
func steps(wf *fakeWorkflow) string {
	var s []string
	for _, req := range wf.received() {
		s = append(s, fmt.Sprint(req.Metrics["step"]))
	}
	return strings.Join(s, ",")
}

func stepsUpTo(n int) string {
	var s []string
	for i := 1; i <= n; i++ {
		s = append(s, fmt.Sprint(i))
	}
	return strings.Join(s, ",")
}

// heldRank is reportRank over a workflow that holds its report Updates
// (until wf.holdReports is closed), with report 1 made and its Update held,
// so that the reports after it queue behind it.
func heldRank(t *testing.T, waitMetric string, setup func(*fakeWorkflow)) (*fakeWorkflow, *rank) {
	t.Helper()
	wf := newFakeWorkflow(1, 1)
	wf.holdReports = make(chan struct{})
	if setup != nil {
		setup(wf)
	}
	r := reportRank(wf, waitMetric)
	reportSteps(t, context.Background(), r, 1, 1)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		wf.mu.Lock()
		held := wf.heldReports
		wf.mu.Unlock()
		if held > 0 {
			return wf, r
		}
		if time.Now().After(deadline) {
			t.Fatal("report 1's Update never reached the workflow")
		}
	}
}

func (f *fakeWorkflow) updateIDs() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.reportUpdates...)
}

// A report costs the rank its queueing: every Report returns while the
// workflow holds the first Update; once it answers, the reports queued
// meanwhile go in one Update, in order. An Update refused for a moment,
// and one whose answer was lost after the workflow took it, are retried
// under their ID, and no report is recorded twice.
func TestReportReturnsBeforeTheWorkflowAnswers(t *testing.T) {
	t.Parallel()
	wf, r := heldRank(t, "", func(wf *fakeWorkflow) { wf.refuse, wf.loseAnswers = 1, 2 })
	ctx := context.Background()
	reportSteps(t, ctx, r, 2, 200)
	if got := wf.received(); len(got) != 0 {
		t.Fatalf("the workflow recorded %d reports while it held its Updates", len(got))
	}
	close(wf.holdReports)
	if err := r.drain(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if got := steps(wf); got != stepsUpTo(200) {
		t.Errorf("the workflow recorded steps %s, want 1 to 200 once each, in order", got)
	}
	if got := fmt.Sprint(wf.updateIDs()); got != "[report-a1-1 report-a1-2-200]" {
		t.Errorf("report Updates %s, want report 1 alone and the 199 queued meanwhile in one", got)
	}
	if err := r.Report(ctx, train.Metrics{"step": 201}, nil); err == nil || !strings.Contains(err.Error(), "after the training function returned") {
		t.Errorf("a report after drain: %v, want refused", err)
	}
}

// More reports than one Update takes go in several, in order.
func TestReportBatchesAreBounded(t *testing.T) {
	t.Parallel()
	wf, r := heldRank(t, "", nil)
	ctx := context.Background()
	reportSteps(t, ctx, r, 2, 1+2*maxBatch)
	close(wf.holdReports)
	if err := r.drain(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if got := steps(wf); got != stepsUpTo(1+2*maxBatch) {
		t.Errorf("the workflow recorded steps %s, want 1 to %d in order", got, 1+2*maxBatch)
	}
	want := fmt.Sprintf("[report-a1-1 report-a1-2-%d report-a1-%d-%d]", 1+maxBatch, 2+maxBatch, 1+2*maxBatch)
	if got := fmt.Sprint(wf.updateIDs()); got != want {
		t.Errorf("report Updates %s, want %s", got, want)
	}
}

// A report that fails to reach the workflow fails the training function:
// at a later Report, or, when the function has returned, at drain. Nothing
// after it is sent.
func TestReportFailureReachesTheFunction(t *testing.T) {
	t.Parallel()
	t.Run("next report", func(t *testing.T) {
		t.Parallel()
		wf := newFakeWorkflow(1, 1)
		wf.failAt = 3
		r := reportRank(wf, "")
		ctx := context.Background()
		var err error
		for i := 1; i <= 2000 && err == nil; i++ {
			err = r.Report(ctx, train.Metrics{"step": float64(i)}, nil)
			time.Sleep(time.Millisecond)
		}
		if err == nil || !strings.Contains(err.Error(), "refusing report 3") || !strings.Contains(err.Error(), "to the workflow") {
			t.Fatalf("reports went on past the failed one: %v", err)
		}
		if derr := r.drain(ctx, err); derr != err {
			t.Errorf("drain after the function's error returned %v, want that error", derr)
		}
		if got := steps(wf); got != "1,2" {
			t.Errorf("the workflow recorded steps %s, want 1,2", got)
		}
	})
	t.Run("drain", func(t *testing.T) {
		t.Parallel()
		wf, r := heldRank(t, "", func(wf *fakeWorkflow) { wf.failAt = 3 })
		ctx := context.Background()
		reportSteps(t, ctx, r, 2, 5)
		close(wf.holdReports)
		err := r.drain(ctx, nil)
		if err == nil || !strings.Contains(err.Error(), "reports 2 to 5 to the workflow") || !strings.Contains(err.Error(), "refusing report 3") {
			t.Fatalf("drain: %v, want the failure of reports 2 to 5", err)
		}
		if got := steps(wf); got != "1" {
			t.Errorf("the workflow recorded steps %s, want 1", got)
		}
	})
}

// A report the workflow must decide on (WaitMetric) returns only with its
// answer, after the reports before it; the others do not wait.
func TestReportOnTheWaitMetricWaitsForTheWorkflow(t *testing.T) {
	t.Parallel()
	wf, r := heldRank(t, "loss", nil)
	ctx := context.Background()
	reportSteps(t, ctx, r, 2, 3)
	returned := make(chan error, 1)
	go func() { returned <- r.Report(ctx, train.Metrics{"step": 4, "loss": 0.5}, nil) }()
	select {
	case err := <-returned:
		t.Fatalf("the report with the wait metric returned (%v) while the workflow held it", err)
	case <-time.After(200 * time.Millisecond):
	}
	close(wf.holdReports)
	if err := <-returned; err != nil {
		t.Fatal(err)
	}
	if got := steps(wf); got != "1,2,3,4" {
		t.Fatalf("when the report with the wait metric returned, the workflow had steps %s, want 1,2,3,4", got)
	}
	reportSteps(t, ctx, r, 5, 5)
	if err := r.drain(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(wf.updateIDs()); got != "[report-a1-1 report-a1-2-3 report-a1-4 report-a1-5]" {
		t.Errorf("report Updates %s, want the one with the wait metric alone", got)
	}
}

// A cancelled rank still sends the reports it had queued (each would have
// been sent before its Report returned), for reportCancelGrace.
func TestCancelledRankSendsWhatItQueued(t *testing.T) {
	t.Parallel()
	t.Run("sent", func(t *testing.T) {
		t.Parallel()
		wf := newFakeWorkflow(1, 1)
		wf.holdReports = make(chan struct{})
		r := reportRank(wf, "")
		ctx, cancel := context.WithCancel(context.Background())
		reportSteps(t, ctx, r, 1, 20)
		cancel()
		time.AfterFunc(100*time.Millisecond, func() { close(wf.holdReports) })
		if err := r.drain(ctx, context.Canceled); !errors.Is(err, context.Canceled) {
			t.Errorf("drain: %v, want the function's error", err)
		}
		if got := steps(wf); got != stepsUpTo(20) {
			t.Errorf("the workflow recorded steps %s, want 1 to 20", got)
		}
	})
	t.Run("grace", func(t *testing.T) {
		t.Parallel()
		wf := newFakeWorkflow(1, 1)
		wf.holdReports = make(chan struct{}) // never answers
		r := reportRank(wf, "")
		ctx, cancel := context.WithCancel(context.Background())
		reportSteps(t, ctx, r, 1, 3)
		cancel()
		start := time.Now()
		err := r.drain(ctx, nil)
		if d := time.Since(start); d < reportCancelGrace || d > reportCancelGrace+2*time.Second {
			t.Errorf("drain took %v, want about reportCancelGrace (%v)", d, reportCancelGrace)
		}
		if err == nil || !strings.Contains(err.Error(), "left unsent") {
			t.Errorf("drain: %v, want the reports left unsent", err)
		}
	})
}
