package tracing_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"

	"github.com/tempotrain/tempotrain/tracing"
	"github.com/tempotrain/tempotrain/tracing/spantest"
	"github.com/tempotrain/tempotrain/train"
	"github.com/tempotrain/tempotrain/train/trainrt"
)

// fakeReporter stands in for the runtime's Report: rank 0 "uploads" its
// checkpoint under the report's context, as activities does.
type fakeReporter struct {
	rank *tracing.Rank
	seq  int
}

func (f *fakeReporter) Report(ctx context.Context, m train.Metrics, ck *train.Checkpoint) error {
	if ck == nil {
		return nil
	}
	f.seq++
	p := f.rank.BeginCheckpoint(ctx, tracing.CheckpointUpload, f.seq)
	p.Done(1234, time.Now(), nil)
	return nil
}

// loop runs a training loop the way the built-in functions do (SetProgress
// after each step, Report after each epoch), with an all-reduce per step,
// one before the loop and one user span per epoch.
func loop(t *testing.T, ctx context.Context, tc *train.Context, rank *tracing.Rank, epochs, steps int) {
	ar := func(ctx context.Context) {
		rank.Collective(ctx, "allreduce", 4096, time.Now().Add(-time.Millisecond), time.Millisecond, nil, tracing.AttrDirect.Bool(true))
	}
	ar(ctx) // parameter broadcast before the loop
	for e := 0; e < epochs; e++ {
		for s := 0; s < steps; s++ {
			ar(ctx)
			tc.SetProgress(e, s+1)
		}
		_, span := tc.Tracer().Start(ctx, "evaluate")
		span.End()
		if err := tc.Report(train.Metrics{"loss": 1, tracing.SamplesMetric: 5000}, train.NewCheckpoint(t.TempDir())); err != nil {
			t.Fatal(err)
		}
	}
}

func TestRankSpanTree(t *testing.T) {
	r := spantest.New(t, tracing.WithStepEvery(4))
	ctx, activity := r.Provider.Tracer("test").Start(context.Background(), "RunActivity:RunRank")
	rank := r.Telemetry.StartRank(ctx, tracing.RankInfo{Run: "demo", Attempt: 2, Rank: 0, WorldSize: 2})
	rep := &fakeReporter{rank: rank}
	tc := trainrt.NewContext(ctx, trainrt.ContextInfo{RunName: "demo", Attempt: 2, WorldSize: 2, Observer: rank}, nil, rep, nil)

	_, endRdv := rank.Rendezvous(ctx)
	endRdv(3, nil)
	loop(t, ctx, tc, rank, 3, 10)
	rank.End(nil)
	activity.End()

	tr := r.Tree()
	act := tr.Named("RunActivity:RunRank")[0]
	if got := spantest.Attr(act, tracing.AttrRank).AsInt64(); got != 0 || spantest.Attr(act, tracing.AttrRun).AsString() != "demo" || spantest.Attr(act, tracing.AttrAttempt).AsInt64() != 2 {
		t.Errorf("activity span attributes %v", act.Attributes())
	}
	rdv := tr.Named(tracing.SpanRendezvous)
	if len(rdv) != 1 || tr.Parent(rdv[0]) != act || spantest.Attr(rdv[0], tracing.AttrPolls).AsInt64() != 3 {
		t.Fatalf("rendezvous spans %v", rdv)
	}

	epochs := tr.Named(tracing.SpanEpoch)
	if len(epochs) != 3 {
		t.Fatalf("%d epoch spans, want 3", len(epochs))
	}
	for i, e := range epochs {
		if tr.Parent(e) != act {
			t.Errorf("epoch %d: parent %v, want the activity span", i, tr.Parent(e))
		}
		if spantest.Attr(e, tracing.AttrEpoch).AsInt64() != int64(i) || spantest.Attr(e, tracing.AttrRun).AsString() != "demo" {
			t.Errorf("epoch %d attributes %v", i, e.Attributes())
		}
		if i > 0 && !e.StartTime().Equal(epochs[i-1].EndTime()) {
			t.Errorf("epoch %d starts at %v, the previous ends at %v: want them to meet at the report's end", i, e.StartTime(), epochs[i-1].EndTime())
		}
	}

	// Steps 1-10 of each epoch, every 4th from the first: 1, 5, 9.
	steps := tr.Named(tracing.SpanStep)
	var got []string
	for _, s := range steps {
		p := tr.Parent(s)
		if p == nil || p.Name() != tracing.SpanEpoch {
			t.Fatalf("step span parent %v", p)
		}
		got = append(got, fmt.Sprintf("%d/%d", spantest.Attr(p, tracing.AttrEpoch).AsInt64(), spantest.Attr(s, tracing.AttrStep).AsInt64()))
	}
	if want := "0/1 0/5 0/9 1/1 1/5 1/9 2/1 2/5 2/9"; strings.Join(got, " ") != want {
		t.Errorf("sampled steps %v, want %s", got, want)
	}

	// An all-reduce gets a span in a sampled step (the marks divide the
	// loop: the one after mark 1 runs in step 1's span) and before the first
	// mark (the broadcast, and the first step, which this loop marks only at
	// its end), none in an unsampled step or between a report and a mark.
	ars := tr.Named("collective.allreduce")
	inStep, outside := 0, 0
	for _, s := range ars {
		switch p := tr.Parent(s); p.Name() {
		case tracing.SpanStep:
			inStep++
		case "RunActivity:RunRank":
			outside++
		default:
			t.Errorf("all-reduce under %s", p.Name())
		}
		if spantest.Attr(s, tracing.AttrBytes).AsInt64() != 4096 || spantest.Attr(s, tracing.AttrWorldSize).AsInt64() != 2 ||
			!spantest.Attr(s, tracing.AttrDirect).AsBool() {
			t.Errorf("all-reduce attributes %v", s.Attributes())
		}
		// 4096 B in 1 ms is 0.004096 GB/s; on 2 ranks busbw = algbw.
		if bw := spantest.Attr(s, tracing.AttrBusBW).AsFloat64(); bw < 0.004 || bw > 0.005 {
			t.Errorf("busbw %g GB/s, want 0.004096", bw)
		}
	}
	if inStep != len(steps) || outside != 2 {
		t.Errorf("%d all-reduces in step spans (want %d), %d before the first mark (want 2)", inStep, len(steps), outside)
	}

	reports := tr.Named(tracing.SpanReport)
	uploads := tr.Named("checkpoint.upload")
	evals := tr.Named("evaluate")
	if len(reports) != 3 || len(uploads) != 3 || len(evals) != 3 {
		t.Fatalf("%d reports, %d uploads, %d user spans, want 3 each", len(reports), len(uploads), len(evals))
	}
	for i := range reports {
		if tr.Parent(reports[i]) != epochs[i] || tr.Parent(evals[i]) != epochs[i] {
			t.Errorf("epoch %d: report under %v, user span under %v", i, tr.Parent(reports[i]).Name(), tr.Parent(evals[i]).Name())
		}
		if tr.Parent(uploads[i]) != reports[i] || spantest.Attr(uploads[i], tracing.AttrBytes).AsInt64() != 1234 || spantest.Attr(uploads[i], tracing.AttrSeq).AsInt64() != int64(i+1) {
			t.Errorf("upload %d: parent %v attributes %v", i, tr.Parent(uploads[i]).Name(), uploads[i].Attributes())
		}
		if spantest.Attr(reports[i], "tempotrain.metric.loss").AsFloat64() != 1 || !spantest.Attr(reports[i], tracing.AttrCheckpoint).AsBool() {
			t.Errorf("report attributes %v", reports[i].Attributes())
		}
	}

	m := r.Collect(t)
	if got := m.Sum(tracing.MetricSteps, nil); got != 30 {
		t.Errorf("%s = %g, want 30", tracing.MetricSteps, got)
	}
	// The first mark of an epoch ends no step: 9 step times per epoch.
	if got := m.Count(tracing.MetricStepDuration); got != 27 {
		t.Errorf("%s count %d, want 27", tracing.MetricStepDuration, got)
	}
	if got := m.Sum(tracing.MetricCollectiveBytes, nil); got != 31*4096 {
		t.Errorf("%s = %g, want %d", tracing.MetricCollectiveBytes, got, 31*4096)
	}
	if got := m.Gauge(tracing.MetricSamplesPerSecond); got != 5000 {
		t.Errorf("%s = %g, want 5000", tracing.MetricSamplesPerSecond, got)
	}
	if got := m.Gauge(tracing.MetricStepsPerSecond); got <= 0 {
		t.Errorf("%s = %g, want > 0", tracing.MetricStepsPerSecond, got)
	}
	if got := m.Sum(tracing.MetricCheckpointBytes, nil); got != 3*1234 {
		t.Errorf("%s = %g", tracing.MetricCheckpointBytes, got)
	}
	if got := m.Sum(tracing.MetricRestarts, nil); got != 1 {
		t.Errorf("%s = %g, want 1 (rank 0 of attempt 2)", tracing.MetricRestarts, got)
	}
	if got := m.Count(tracing.MetricRendezvousDuration); got != 1 {
		t.Errorf("%s count %d", tracing.MetricRendezvousDuration, got)
	}
}

// A loop that marks the start of each step (and reports after the last)
// gets the same epochs.
func TestRankEpochsWithMarksAtStepStart(t *testing.T) {
	r := spantest.New(t, tracing.WithStepEvery(-1))
	ctx, activity := r.Provider.Tracer("test").Start(context.Background(), "activity")
	rank := r.Telemetry.StartRank(ctx, tracing.RankInfo{Run: "r", Attempt: 1, Rank: 1, WorldSize: 2})
	tc := trainrt.NewContext(ctx, trainrt.ContextInfo{Observer: rank}, nil, &fakeReporter{rank: rank}, nil)
	for e := 1; e <= 2; e++ {
		for s := 0; s < 5; s++ {
			tc.SetProgress(e, s)
		}
		if err := tc.Report(train.Metrics{"epoch": float64(e)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	tc.SetProgress(3, 0)
	boom := errors.New("boom")
	rank.End(boom)
	activity.End()
	tr := r.Tree()
	epochs := tr.Named(tracing.SpanEpoch)
	if len(epochs) != 3 || len(tr.Named(tracing.SpanStep)) != 0 {
		t.Fatalf("%d epochs, %d steps: want 3 and none (StepEvery < 0)", len(epochs), len(tr.Named(tracing.SpanStep)))
	}
	reports := tr.Named(tracing.SpanReport)
	for i, rep := range reports {
		if tr.Parent(rep) != epochs[i] {
			t.Errorf("report %d is not in epoch %d", i, i+1)
		}
		if !epochs[i].EndTime().Equal(rep.EndTime()) {
			t.Errorf("epoch %d ends at %v, its report at %v", i+1, epochs[i].EndTime(), rep.EndTime())
		}
	}
	if st := epochs[2].Status(); st.Code != codes.Error || st.Description != "boom" {
		t.Errorf("the epoch the function failed in has status %+v", st)
	}
	for _, e := range epochs {
		if len(e.Links()) != 0 {
			t.Errorf("links %v on a rank whose activity span has no parent", e.Links())
		}
	}
}

// A rank's spans link to the span that scheduled its activity, so that they
// lead back to the attempt when the activity span is lost with its worker.
func TestRankLinksToScheduler(t *testing.T) {
	r := spantest.New(t)
	sched, start := r.Provider.Tracer("test").Start(context.Background(), "StartActivity:RunRank")
	start.End()
	ctx, activity := r.Provider.Tracer("test").Start(sched, "RunActivity:RunRank")
	rank := r.Telemetry.StartRank(ctx, tracing.RankInfo{Run: "r", Attempt: 1, Rank: 0, WorldSize: 1})
	rank.Progress(0, 0)
	_, end := rank.Phase(ctx, tracing.SpanConnect)
	end(nil)
	rank.End(nil)
	// The activity span never ends: its worker died.
	_ = activity
	tr := r.Tree()
	for _, name := range []string{tracing.SpanEpoch, tracing.SpanConnect} {
		s := tr.Named(name)
		if len(s) != 1 {
			t.Fatalf("%d %s spans", len(s), name)
		}
		if l := s[0].Links(); len(l) != 1 || l[0].SpanContext.SpanID() != start.SpanContext().SpanID() {
			t.Errorf("%s links %v, want the scheduling span %v", name, l, start.SpanContext().SpanID())
		}
	}
}

// The restore of a checkpoint links to the report that committed it, through
// the traceparent kept in its manifest.
func TestCheckpointLinkThroughTraceParent(t *testing.T) {
	r := spantest.New(t)
	ctx, act := r.Provider.Tracer("test").Start(context.Background(), "attempt1")
	rank := r.Telemetry.StartRank(ctx, tracing.RankInfo{Run: "r", Attempt: 1, Rank: 0, WorldSize: 1})
	rctx, done := rank.Report(ctx, nil, true)
	tp := rank.TraceParent(rctx)
	done(nil)
	rank.End(nil)
	act.End()

	l, ok := tracing.LinkTo(tp, "committed_by")
	if !ok {
		t.Fatalf("traceparent %q does not parse", tp)
	}
	ctx2, act2 := r.Provider.Tracer("test").Start(context.Background(), "attempt2")
	rank2 := r.Telemetry.StartRank(ctx2, tracing.RankInfo{Run: "r", Attempt: 2, Rank: 0, WorldSize: 1})
	rank2.BeginCheckpoint(ctx2, tracing.CheckpointRestore, 1).Done(10, time.Now(), nil, l)
	act2.End()
	tr := r.Tree()
	rep := tr.Named(tracing.SpanReport)[0]
	res := tr.Named("checkpoint.restore")[0]
	if len(res.Links()) != 1 || res.Links()[0].SpanContext.SpanID() != rep.SpanContext().SpanID() {
		t.Errorf("restore links %v, want the report %v", res.Links(), rep.SpanContext().SpanID())
	}
	if _, ok := tracing.LinkTo("", "x"); ok {
		t.Error("an empty traceparent gave a link")
	}
}

// A nil Rank, as an off Telemetry gives, is usable and records nothing.
func TestOffRecordsNothing(t *testing.T) {
	var off *tracing.Telemetry
	for _, tel := range []*tracing.Telemetry{off, tracing.Noop()} {
		rank := tel.StartRank(context.Background(), tracing.RankInfo{})
		if rank != nil {
			t.Fatal("an off Telemetry gave a Rank")
		}
		rank.Progress(1, 1)
		ctx, done := rank.Report(context.Background(), nil, false)
		done(nil)
		rank.Collective(ctx, "allreduce", 1, time.Now(), 0, nil)
		rank.BeginCheckpoint(ctx, tracing.CheckpointUpload, 1).Done(1, time.Now(), nil)
		rank.End(nil)
		if _, span := rank.Tracer().Start(ctx, "x"); span.IsRecording() {
			t.Error("an off Rank's tracer records")
		}
		if i, err := tel.Interceptor(tracing.InterceptorOptions{}); i != nil || err != nil {
			t.Errorf("an off Telemetry gave interceptor %v, %v", i, err)
		}
		if tel.MetricsHandler() != nil {
			t.Error("an off Telemetry gave a metrics handler")
		}
	}
}
