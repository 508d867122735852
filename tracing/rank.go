package tracing

import (
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// Span names of a rank.
const (
	SpanRendezvous = "rank.rendezvous"
	SpanConnect    = "rank.connect"
	SpanRestore    = "rank.restore"
	SpanEpoch      = "train.epoch"
	SpanStep       = "train.step"
	SpanReport     = "train.report"
	// Collective operations are "collective." + the operation ("allreduce",
	// "broadcast", "allgather", "barrier"); checkpoint operations are
	// "checkpoint." + CheckpointWrite, CheckpointUpload or CheckpointRestore.
	SpanCollectivePrefix = "collective."
	SpanCheckpointPrefix = "checkpoint."
)

// Checkpoint operations.
const (
	// CheckpointWrite is the local snapshot an asynchronous upload starts from.
	CheckpointWrite = "write"
	// CheckpointUpload commits a checkpoint to the run's storage.
	CheckpointUpload = "upload"
	// CheckpointRestore downloads and verifies one.
	CheckpointRestore = "restore"
)

// MetaTraceParent is the checkpoint manifest's Meta key that holds the W3C
// traceparent of the report that committed it.
const MetaTraceParent = "traceparent"

var noopSpan trace.Span = tracenoop.Span{}

// RankInfo identifies one rank of one attempt.
type RankInfo struct {
	Run       string
	Attempt   int
	Rank      int
	WorldSize int
}

// Rank records the spans and metrics of one rank of one attempt, and derives
// epoch and step spans from the training loop's SetProgress and Report calls
// (it implements trainrt.Observer). A nil *Rank, which an off Telemetry gives,
// records nothing. Its methods are safe for concurrent use.
type Rank struct {
	tracer trace.Tracer
	inst   *instruments
	info   RankInfo
	every  int
	attrs  []attribute.KeyValue // run, attempt, rank: on every span
	rankM  metric.MeasurementOption
	opM    map[string]metric.MeasurementOption
	// base is the span the training function's context carries (RunRank's):
	// work under it is placed in the training loop's current span instead.
	base     trace.SpanContext
	baseCtx  context.Context
	links    []trace.Link
	userTrcr trace.Tracer
	runs     *runTracker // the /metrics endpoint's, or nil

	mu        sync.Mutex
	epoch     int
	epochSpan trace.Span // nil before the first SetProgress
	epochCtx  context.Context
	stepSpan  trace.Span // the sampled step in progress, or nil
	inStep    bool       // between a SetProgress and the next Report or epoch: a step time is measured
	nth       int        // steps of this epoch so far
	lastMark  time.Time
	reportEnd time.Time
	rateSteps int64
	rateFrom  time.Time
	samples   int64 // the last total given to Samples
	ended     bool
}

// StartRank starts recording a rank whose activity span (RunActivity:RunRank)
// ctx carries: it labels that span, links the rank's spans to the one that
// scheduled it, and counts a restart. Nil when t is off.
func (t *Telemetry) StartRank(ctx context.Context, info RankInfo) *Rank {
	if !t.Enabled() {
		return nil
	}
	span := trace.SpanFromContext(ctx)
	r := &Rank{
		tracer: t.tracer, inst: t.inst, info: info, every: t.stepEvery,
		attrs:   []attribute.KeyValue{AttrRun.String(info.Run), AttrAttempt.Int(info.Attempt), AttrRank.Int(info.Rank)},
		base:    span.SpanContext(),
		baseCtx: trace.ContextWithSpan(context.Background(), span),
		opM:     map[string]metric.MeasurementOption{},
	}
	r.rankM = metric.WithAttributeSet(attribute.NewSet(AttrRun.String(info.Run), AttrRank.Int(info.Rank)))
	for _, op := range []string{"allreduce", "broadcast", "allgather", "barrier", CheckpointWrite, CheckpointUpload, CheckpointRestore} {
		r.opM[op] = r.opOption(op)
	}
	span.SetAttributes(append(r.attrs, AttrWorldSize.Int(info.WorldSize))...)
	// The activity span is exported only when the rank ends, and never if
	// its worker dies; the span that scheduled it is exported at once.
	if ro, ok := span.(sdktrace.ReadOnlySpan); ok && ro.Parent().IsValid() {
		r.links = []trace.Link{{SpanContext: ro.Parent(), Attributes: []attribute.KeyValue{attribute.String("tempotrain.link", "scheduled_by")}}}
	}
	r.userTrcr = rankTracer{Tracer: t.tracer, r: r}
	if t.runs != nil {
		r.runs = t.runs
		r.runs.start(info.Run)
	}
	if info.Rank == 0 && info.Attempt > 1 {
		t.inst.restarts.Add(ctx, 1, metric.WithAttributes(AttrRun.String(info.Run)))
	}
	return r
}

func (r *Rank) opOption(op string) metric.MeasurementOption {
	return metric.WithAttributeSet(attribute.NewSet(AttrRun.String(r.info.Run), AttrRank.Int(r.info.Rank), AttrOp.String(op)))
}

func (r *Rank) op(op string) metric.MeasurementOption {
	if o, ok := r.opM[op]; ok {
		return o
	}
	return r.opOption(op)
}

// start starts a span of the rank. One whose parent is the activity span
// also links to the span that scheduled the activity, which stays when the
// activity span is lost; spans deeper down have a parent that stays.
func (r *Rank) start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	opts = append(opts, trace.WithAttributes(r.attrs...))
	if trace.SpanContextFromContext(ctx).SpanID() == r.base.SpanID() {
		opts = append(opts, trace.WithLinks(r.links...))
	}
	return r.tracer.Start(ctx, name, opts...)
}

// Phase starts a span of the rank outside its training loop (SpanConnect,
// SpanRestore); end ends it with the phase's outcome.
func (r *Rank) Phase(ctx context.Context, name string) (_ context.Context, end func(error)) {
	if r == nil {
		return ctx, func(error) {}
	}
	ctx, span := r.start(ctx, name)
	return ctx, func(err error) { endSpan(span, err) }
}

// Rendezvous starts the rendezvous span; end records how many times the rank
// polled and the rendezvous time.
func (r *Rank) Rendezvous(ctx context.Context) (_ context.Context, end func(polls int, err error)) {
	if r == nil {
		return ctx, func(int, error) {}
	}
	t0 := time.Now()
	ctx, span := r.start(ctx, SpanRendezvous, trace.WithAttributes(AttrWorldSize.Int(r.info.WorldSize)))
	return ctx, func(polls int, err error) {
		span.SetAttributes(AttrPolls.Int(polls))
		endSpan(span, err)
		if err == nil {
			r.inst.rendezvousDuration.Record(context.Background(), time.Since(t0).Seconds(), r.rankM)
		}
	}
}

func endSpan(span trace.Span, err error, opts ...trace.SpanEndOption) {
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End(opts...)
}

// Collective records one finished collective operation: its metrics always,
// and a span when it ran in a sampled step, before the training loop's first
// step, or under a span of its own caller (a phase, a user span). extra are
// more attributes of the span (AttrDirect).
func (r *Rank) Collective(ctx context.Context, op string, bytes int64, start time.Time, d time.Duration, err error, extra ...attribute.KeyValue) {
	if r == nil {
		return
	}
	mo := r.op(op)
	r.inst.collectiveDuration.Record(context.Background(), d.Seconds(), mo)
	r.inst.collectiveBytes.Add(context.Background(), bytes, mo)
	parent, ok := r.loopParent(ctx, false)
	if !ok {
		return
	}
	attrs := []attribute.KeyValue{AttrOp.String(op), AttrBytes.Int64(bytes), AttrWorldSize.Int(r.info.WorldSize)}
	if algbw, busbw, ok := bandwidth(op, bytes, d, r.info.WorldSize); ok {
		attrs = append(attrs, AttrAlgBW.Float64(algbw), AttrBusBW.Float64(busbw))
	}
	attrs = append(attrs, extra...)
	_, span := r.start(parent, SpanCollectivePrefix+op, trace.WithTimestamp(start), trace.WithAttributes(attrs...))
	endSpan(span, err, trace.WithTimestamp(start.Add(d)))
}

// bandwidth is NCCL's algorithm and bus bandwidth in GB/s: bus bandwidth
// scales the algorithm's by what each link carries, so that it reads against
// the link's speed whatever the world size.
func bandwidth(op string, bytes int64, d time.Duration, n int) (algbw, busbw float64, ok bool) {
	if d <= 0 || bytes <= 0 || n < 1 {
		return 0, 0, false
	}
	algbw = float64(bytes) / d.Seconds() / 1e9
	switch op {
	case "allreduce":
		return algbw, algbw * 2 * float64(n-1) / float64(n), true
	case "allgather":
		// bytes is this rank's share; NCCL's size is the whole output.
		algbw *= float64(n)
		return algbw, algbw * float64(n-1) / float64(n), true
	case "broadcast":
		return algbw, algbw, true
	}
	return 0, 0, false
}

// loopParent picks the parent of work done under ctx. Work whose ctx carries
// a span other than the rank's base (a phase, a user span) stays there. Work
// under the base goes to the training loop's current span: the sampled step,
// else the epoch for a user span, else the base before the loop starts.
// ok is false for a collective in the loop outside a sampled step: a long
// run has millions, and reports may come every step.
func (r *Rank) loopParent(ctx context.Context, user bool) (context.Context, bool) {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() && sc.SpanID() != r.base.SpanID() {
		return ctx, true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.stepSpan != nil:
		return trace.ContextWithSpan(ctx, r.stepSpan), true
	case r.epochSpan == nil:
		return trace.ContextWithSpan(ctx, trace.SpanFromContext(r.baseCtx)), true
	case user:
		return trace.ContextWithSpan(ctx, r.epochSpan), true
	}
	return nil, false
}

// Progress implements trainrt.Observer: an epoch value not seen last starts an
// epoch span (ending the previous one where its last report ended), and
// every call ends a step and starts the next, which gets a span when sampled.
func (r *Rank) Progress(epoch, step int) {
	if r == nil {
		return
	}
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.endStep(now, nil)
	if r.epochSpan == nil || epoch != r.epoch {
		// The previous epoch ends, and this one starts, where the last
		// report ended if one did since the last step: the step that
		// reported belongs to the previous epoch, the steps after it to
		// this one.
		boundary := now
		if r.reportEnd.After(r.lastMark) {
			boundary = r.reportEnd
		}
		if r.epochSpan != nil {
			r.epochSpan.End(trace.WithTimestamp(boundary))
		}
		r.epoch, r.nth, r.inStep = epoch, 0, false
		r.epochCtx, r.epochSpan = r.start(r.baseCtx, SpanEpoch, trace.WithTimestamp(boundary), trace.WithAttributes(AttrEpoch.Int(epoch)))
	}
	if r.inStep {
		r.inst.stepDuration.Record(context.Background(), now.Sub(r.lastMark).Seconds(), r.rankM)
	}
	r.inst.steps.Add(context.Background(), 1, r.rankM)
	if r.rateFrom.IsZero() {
		r.rateFrom = now
	}
	r.rateSteps++
	if r.every > 0 && r.nth%r.every == 0 {
		_, r.stepSpan = r.start(r.epochCtx, SpanStep, trace.WithTimestamp(now),
			trace.WithAttributes(AttrEpoch.Int(epoch), AttrStep.Int(step)))
	}
	r.nth++
	r.inStep = true
	r.lastMark = now
}

// endStep ends the sampled step in progress, if any. Called with r.mu held.
func (r *Rank) endStep(now time.Time, err error) {
	if r.stepSpan != nil {
		endSpan(r.stepSpan, err, trace.WithTimestamp(now))
		r.stepSpan = nil
	}
}

// Report implements trainrt.Observer: a report ends the step in progress and
// runs in a train.report span of the current epoch, which carries the
// reported metrics. A reported SamplesMetric becomes the samples/s metric.
func (r *Rank) Report(ctx context.Context, metrics map[string]float64, checkpoint bool) (context.Context, func(error)) {
	if r == nil {
		return ctx, func(error) {}
	}
	now := time.Now()
	r.mu.Lock()
	r.endStep(now, nil)
	r.inStep = false
	if r.rateSteps > 0 && now.After(r.rateFrom) {
		r.inst.stepsPerSecond.Record(context.Background(), float64(r.rateSteps)/now.Sub(r.rateFrom).Seconds(), r.rankM)
	}
	r.rateSteps, r.rateFrom = 0, time.Time{}
	parent := r.baseCtx
	if r.epochSpan != nil {
		parent = r.epochCtx
	}
	r.mu.Unlock()
	if v, ok := metrics[SamplesMetric]; ok {
		r.inst.samplesPerSecond.Record(context.Background(), v, r.rankM)
	}
	attrs := make([]attribute.KeyValue, 0, len(metrics)+1)
	attrs = append(attrs, AttrCheckpoint.Bool(checkpoint))
	for k, v := range metrics {
		if len(attrs) > 32 {
			break
		}
		attrs = append(attrs, attribute.Float64("tempotrain.metric."+k, v))
	}
	_, span := r.start(parent, SpanReport, trace.WithTimestamp(now), trace.WithAttributes(attrs...))
	return trace.ContextWithSpan(ctx, span), func(err error) {
		end := time.Now()
		endSpan(span, err, trace.WithTimestamp(end))
		r.mu.Lock()
		r.reportEnd, r.rateFrom = end, end
		r.mu.Unlock()
	}
}

// Samples takes the rank's running total of training samples (what its
// function gave train.Context.AddSamples, read at each heartbeat) and adds
// what it grew by to the samples counter: its rate is the rank's samples/s.
func (r *Rank) Samples(total int64) {
	if r == nil {
		return
	}
	r.mu.Lock()
	d := total - r.samples
	if d > 0 {
		r.samples = total
	}
	r.mu.Unlock()
	if d > 0 {
		r.inst.samples.Add(context.Background(), d, r.rankM)
	}
}

// Tracer implements trainrt.Observer: a tracer whose spans started under the
// training function's own context go into the current step or epoch.
func (r *Rank) Tracer() trace.Tracer {
	if r == nil {
		return tracenoop.NewTracerProvider().Tracer(scope)
	}
	return r.userTrcr
}

type rankTracer struct {
	trace.Tracer
	r *Rank
}

func (t rankTracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	parent, _ := t.r.loopParent(ctx, true)
	return t.Tracer.Start(parent, name, opts...)
}

// End ends the training loop's spans when the training function returns;
// err, if any, marks the epoch it ended in. The rank's series stay on the
// /metrics endpoint for Config.MetricsRetention after the last rank of its
// run here ended.
func (r *Rank) End(err error) {
	if r == nil {
		return
	}
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.ended && r.runs != nil {
		r.runs.end(r.info.Run)
	}
	r.ended = true
	r.endStep(now, err)
	if r.epochSpan != nil {
		end := now
		if err == nil && r.reportEnd.After(r.lastMark) {
			end = r.reportEnd
		}
		endSpan(r.epochSpan, err, trace.WithTimestamp(end))
		r.epochSpan = nil
	}
}

// PendingCheckpoint is a checkpoint operation in progress; Done records it.
type PendingCheckpoint struct {
	r      *Rank
	parent trace.SpanContext
	op     string
	seq    int
	start  time.Time
}

// BeginCheckpoint notes the start of a checkpoint operation under ctx's span.
// The operation may end on another goroutine, after that span.
func (r *Rank) BeginCheckpoint(ctx context.Context, op string, seq int) PendingCheckpoint {
	if r == nil {
		return PendingCheckpoint{}
	}
	return PendingCheckpoint{r: r, parent: trace.SpanContextFromContext(ctx), op: op, seq: seq, start: time.Now()}
}

// Done records the operation: a span from its start to end, and its time and
// bytes in the checkpoint metrics (when it succeeded).
func (p PendingCheckpoint) Done(bytes int64, end time.Time, err error, links ...trace.Link) {
	r := p.r
	if r == nil {
		return
	}
	if end.Before(p.start) {
		end = p.start
	}
	if err == nil {
		mo := r.op(p.op)
		r.inst.checkpointDuration.Record(context.Background(), end.Sub(p.start).Seconds(), mo)
		r.inst.checkpointBytes.Add(context.Background(), bytes, mo)
	}
	ctx := trace.ContextWithSpanContext(context.Background(), p.parent)
	_, span := r.start(ctx, SpanCheckpointPrefix+p.op, trace.WithTimestamp(p.start), trace.WithLinks(links...),
		trace.WithAttributes(AttrSeq.Int(p.seq), AttrBytes.Int64(bytes)))
	endSpan(span, err, trace.WithTimestamp(end))
}

// TraceParent is the W3C traceparent of ctx's span, to store with what the
// span produced (MetaTraceParent); empty when r is nil or ctx has no span.
func (r *Rank) TraceParent(ctx context.Context) string {
	if r == nil {
		return ""
	}
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	return c["traceparent"]
}

// LinkTo is a link to the span a TraceParent names.
func LinkTo(traceparent, kind string) (trace.Link, bool) {
	if traceparent == "" {
		return trace.Link{}, false
	}
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": traceparent})
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return trace.Link{}, false
	}
	return trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{attribute.String("tempotrain.link", kind)}}, true
}
