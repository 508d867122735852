package app_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"

	"github.com/tempotrain/tempotrain/activities"
	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/app"
	"github.com/tempotrain/tempotrain/tracing"
	"github.com/tempotrain/tempotrain/tracing/spantest"
	"github.com/tempotrain/tempotrain/train"
)

// TestE2ETraceTree runs a traced Fit on the real server: 2 ranks, rank 1
// failing in epoch 3 of attempt 1, attempt 2 resuming from checkpoint 2, and
// the controller's worker replaced in the middle of attempt 2. One trace must
// hold it all, from the caller's span down to the all-reduces, with each
// workflow span exported once despite the replay on the new worker.
func TestE2ETraceTree(t *testing.T) {
	const dim, steps = 8, 10
	rec := spantest.New(t, tracing.WithStepEvery(5))
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: testLogLevel}))
	opts, err := app.ClientOptions(client.Options{Logger: log.NewStructuredLogger(logger)}, rec.Telemetry)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.NewClientFromExisting(cl, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tq, rq := queues(t)

	// The controller and the ranks on separate workers, so that the
	// controller can be replaced under running ranks.
	startController := func() *app.Worker {
		w, err := app.StartWorker(c, app.WorkerOptions{Workflows: true, TaskQueue: tq})
		if err != nil {
			t.Error(err)
		}
		return w
	}
	var mu sync.Mutex
	controller := startController()
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		controller.Stop()
	}()
	ranks, err := app.StartWorker(c, app.WorkerOptions{RankSlots: 2, RankQueue: rq, Activities: activities.Options{
		ScratchDir: t.TempDir(), Telemetry: rec.Telemetry, Logger: logger,
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer ranks.Stop()
	// Rank 0 waits at the start of epoch 4 until a new controller serves the
	// workflow; its report of epoch 4 then reaches the new one, which must
	// replay the history first. The controller also runs RecordRun: it is
	// stopped once the last report's is done (none starts while rank 0
	// waits), or the workflow would wait for its 5-minute timeout.
	epochHook = func(attempt, rank, epoch int) {
		if attempt == 2 && rank == 0 && epoch == 4 {
			waitNoPending(t, train.WorkflowID("traced"), api.ActivityRecordRun)
			mu.Lock()
			defer mu.Unlock()
			controller.Stop()
			controller = startController()
		}
	}
	defer func() { epochHook = nil }()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ctx, root := rec.Provider.Tracer("test").Start(ctx, "test")
	cfg := linearConfig{Epochs: 4, Steps: steps, Dim: dim, FailRank: 1, FailEpoch: 3, FailMode: "error", FailAttempt: 1}
	res, err := train.NewTrainer(c, "e2e-linear", cfg, train.ScalingConfig{NumWorkers: 2, TaskQueue: rq},
		train.RunConfig{Name: "traced", StoragePath: t.TempDir(), Failure: train.FailureConfig{MaxFailures: 1}},
		train.WithTaskQueue(tq)).Fit(ctx)
	root.End()
	if err != nil {
		t.Fatal(err)
	}
	if res.Attempts != 2 {
		t.Fatalf("%d attempts, want 2", res.Attempts)
	}

	tr := rec.Tree()
	one := func(name string, under sdktrace.ReadOnlySpan) sdktrace.ReadOnlySpan {
		t.Helper()
		s := tr.Children(under, name)
		if len(s) != 1 {
			t.Fatalf("%d %s spans under %s, want 1:\n%s", len(s), name, under.Name(), tr.Format(under))
		}
		return s[0]
	}
	rootSpan := tr.Named("test")[0]
	if testing.Verbose() {
		t.Logf("the trace:\n%s", tr.Format(rootSpan))
	}
	for _, s := range tr.Spans {
		if s.SpanContext().TraceID() != rootSpan.SpanContext().TraceID() {
			t.Errorf("span %s is in trace %s, not the caller's %s", s.Name(), s.SpanContext().TraceID(), rootSpan.SpanContext().TraceID())
		}
	}
	start := one("StartWorkflow:Fit", rootSpan)
	// Exactly one: the first controller's copy was dropped when it stopped,
	// the second's (same ID, from the workflow's run ID) was kept.
	if n := len(tr.Named("RunWorkflow:Fit")); n != 1 {
		t.Fatalf("%d RunWorkflow:Fit spans, want 1", n)
	}
	fit := one("RunWorkflow:Fit", start)

	attempts := tr.Children(fit, tracing.SpanAttempt)
	if len(attempts) != 2 || spantest.Int(attempts[0], tracing.AttrAttempt) != 1 || spantest.Int(attempts[1], tracing.AttrAttempt) != 2 {
		t.Fatalf("attempt spans under the Fit:\n%s", tr.Format(fit))
	}
	if st := attempts[0].Status(); st.Code != codes.Error || !strings.Contains(st.Description, "injected failure at epoch 3") {
		t.Errorf("attempt 1 status %+v, want the injected failure", st)
	}
	if st := attempts[1].Status(); st.Code == codes.Error {
		t.Errorf("attempt 2 status %+v", st)
	}
	if n := len(tr.Named(tracing.SpanAttempt)); n != 2 {
		t.Errorf("%d attempt spans in all, want 2 (the replay's copies dropped)", n)
	}

	// Reports of rank 0, by "attempt/epoch", for the restore's link.
	reportOf := map[string]sdktrace.ReadOnlySpan{}
	var restores []sdktrace.ReadOnlySpan
	for ai, att := range attempts {
		attempt := ai + 1
		scheduled := tr.Children(att, "StartActivity:RunRank")
		if len(scheduled) != 2 {
			t.Fatalf("attempt %d: %d StartActivity:RunRank spans, want 2:\n%s", attempt, len(scheduled), tr.Format(att))
		}
		seen := map[int]bool{}
		registers := 0
		for _, sched := range scheduled {
			act := one("RunActivity:RunRank", sched)
			rank := spantest.Int(act, tracing.AttrRank)
			seen[rank] = true
			if spantest.Int(act, tracing.AttrAttempt) != attempt || spantest.Attr(act, tracing.AttrRun).AsString() != "traced" {
				t.Errorf("attempt %d: RunRank attributes %v", attempt, act.Attributes())
			}
			where := fmt.Sprintf("attempt %d rank %d", attempt, rank)

			// The ranks of one process register in one register-batch
			// Update, sent under the first one's rendezvous span.
			rdv := one(tracing.SpanRendezvous, act)
			for _, reg := range tr.Children(rdv, "UpdateWorkflow:register-batch") {
				registers++
				if h := tr.Children(reg, "HandleUpdate:register-batch"); len(h) != 1 {
					t.Errorf("%s: the register-batch Update has %d HandleUpdate spans under it, want 1 (the controller's)", where, len(h))
				}
			}
			one(tracing.SpanConnect, act)
			restore := one(tracing.SpanRestore, act)
			if attempt == 2 {
				r := one("checkpoint.restore", restore)
				if spantest.Int(r, tracing.AttrSeq) != 2 || spantest.Int(r, tracing.AttrBytes) != 8+8*dim {
					t.Errorf("%s: restore attributes %v", where, r.Attributes())
				}
				restores = append(restores, r)
			}

			epochs := tr.Children(act, tracing.SpanEpoch)
			var got []string
			for _, e := range epochs {
				epoch := spantest.Int(e, tracing.AttrEpoch)
				got = append(got, fmt.Sprint(epoch))
				if l := e.Links(); len(l) != 1 || l[0].SpanContext.SpanID() != sched.SpanContext().SpanID() {
					t.Errorf("%s epoch %d: links %v, want the StartActivity span", where, epoch, l)
				}
				reports := tr.Children(e, tracing.SpanReport)
				if len(reports) == 0 {
					continue // the failed epoch
				}
				if len(reports) != 1 {
					t.Fatalf("%s epoch %d: %d reports", where, epoch, len(reports))
				}
				var stepsGot []int
				for _, s := range tr.Children(e, tracing.SpanStep) {
					stepsGot = append(stepsGot, spantest.Int(s, tracing.AttrStep))
					ar := one("collective.allreduce", s)
					if spantest.Int(ar, tracing.AttrBytes) != 8*(dim+1) || spantest.Int(ar, tracing.AttrWorldSize) != 2 || spantest.Attr(ar, tracing.AttrBusBW).AsFloat64() <= 0 {
						t.Errorf("%s epoch %d: all-reduce attributes %v", where, epoch, ar.Attributes())
					}
				}
				if fmt.Sprint(stepsGot) != "[0 5]" {
					t.Errorf("%s epoch %d: sampled steps %v, want [0 5] (every 5th of %d)", where, epoch, stepsGot, steps)
				}
				if rank != 0 {
					continue
				}
				rep := reports[0]
				reportOf[fmt.Sprintf("%d/%d", attempt, epoch)] = rep
				up := one("checkpoint.upload", rep)
				if spantest.Int(up, tracing.AttrBytes) != 8+8*dim {
					t.Errorf("%s epoch %d: upload attributes %v", where, epoch, up.Attributes())
				}
				upd := one("UpdateWorkflow:report", rep)
				one("HandleUpdate:report", upd)
			}
			want := "[1 2 3]"
			if attempt == 2 {
				want = "[3 4]"
			}
			if fmt.Sprint(got) != want {
				t.Errorf("%s: epochs %v, want %s:\n%s", where, got, want, tr.Format(act))
			}
			if attempt == 1 && rank == 1 {
				if st := epochs[len(epochs)-1].Status(); st.Code != codes.Error || !strings.Contains(st.Description, "injected failure") {
					t.Errorf("rank 1's failed epoch has status %+v", st)
				}
			}
		}
		if !seen[0] || !seen[1] {
			t.Errorf("attempt %d ran ranks %v", attempt, seen)
		}
		// One Update for both ranks, or one each when they came more
		// than the batch window apart.
		if registers < 1 || registers > 2 {
			t.Errorf("attempt %d: %d register-batch Updates under its ranks' rendezvous spans, want 1 or 2", attempt, registers)
		}
	}
	// Every report reached the workflow once: the replay's copies of the
	// Update handlers were dropped.
	if n := len(tr.Named("HandleUpdate:report")); n != 4 {
		t.Errorf("%d HandleUpdate:report spans, want 4", n)
	}
	committed := reportOf["1/2"]
	if committed == nil {
		t.Fatalf("no report of epoch 2 in attempt 1; reports %v", keys(reportOf))
	}
	for _, r := range restores {
		if l := r.Links(); len(l) != 1 || l[0].SpanContext.SpanID() != committed.SpanContext().SpanID() {
			t.Errorf("checkpoint.restore links %v, want attempt 1's report of epoch 2 (%s)", l, committed.SpanContext().SpanID())
		}
	}

	m := rec.Collect(t)
	for _, c := range []struct {
		name string
		got  float64
		want func(float64) bool
		say  string
	}{
		{tracing.MetricRestarts, m.Sum(tracing.MetricRestarts, nil), func(v float64) bool { return v == 1 }, "1"},
		{tracing.MetricCollectiveBytes + " allreduce", m.Sum(tracing.MetricCollectiveBytes, spantest.Op("allreduce")), func(v float64) bool { return v >= 2*(3*steps)*8*(dim+1) }, "all 3+ epochs' all-reduces"},
		{tracing.MetricCheckpointBytes + " upload", m.Sum(tracing.MetricCheckpointBytes, spantest.Op(tracing.CheckpointUpload)), func(v float64) bool { return v == 4*(8+8*dim) }, "4 checkpoints"},
		{tracing.MetricCheckpointBytes + " restore", m.Sum(tracing.MetricCheckpointBytes, spantest.Op(tracing.CheckpointRestore)), func(v float64) bool { return v == 2*(8+8*dim) }, "2 ranks' restore"},
		{tracing.MetricStepDuration, float64(m.Count(tracing.MetricStepDuration)), func(v float64) bool { return v > 0 }, "> 0"},
		{"temporal_request", m.Sum("temporal_request", nil), func(v float64) bool { return v > 0 }, "> 0: the SDK's metrics go through the same MeterProvider"},
		{"temporal_workflow_completed", m.Sum("temporal_workflow_completed", nil), func(v float64) bool { return v == 1 }, "1"},
	} {
		if !c.want(c.got) {
			t.Errorf("%s = %g, want %s", c.name, c.got, c.say)
		}
	}
}

// waitNoPending waits until the workflow has no pending activity of the type.
func waitNoPending(t *testing.T, workflowID, activityType string) {
	deadline := time.After(30 * time.Second)
	for {
		desc, err := cl.DescribeWorkflowExecution(context.Background(), workflowID, "")
		if err != nil {
			t.Errorf("describe %s: %v", workflowID, err)
			return
		}
		pending := false
		for _, pa := range desc.GetPendingActivities() {
			pending = pending || pa.GetActivityType().GetName() == activityType
		}
		if !pending {
			return
		}
		select {
		case <-deadline:
			t.Errorf("%s still has a pending %s after 30s", workflowID, activityType)
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func keys(m map[string]sdktrace.ReadOnlySpan) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
