package tracing

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/sdk/client"
	temporalotel "go.temporal.io/sdk/contrib/opentelemetry"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// SpanAttempt groups the activities of one attempt of a Fit.
const SpanAttempt = "fit.attempt"

// AttemptFunc says which attempt of a run an activity belongs to, from its
// type and arguments as the workflow passed them, and what to put on the
// attempt's span. ok is false for an activity of no attempt.
type AttemptFunc func(activityType string, args []any) (attempt int, attrs []attribute.KeyValue, ok bool)

// InterceptorOptions configure Interceptor.
type InterceptorOptions struct {
	// AttemptOf, when set, groups the activities of an attempt under a
	// SpanAttempt span. Default: no attempt spans.
	AttemptOf AttemptFunc
	// SecondaryErrorTypes are application error types of an attempt's
	// activities that follow from another's failure (a rank that lost its
	// peer): the attempt span's status names another error when there is
	// one. Default none.
	SecondaryErrorTypes []string
}

// Interceptor returns Temporal's tracing interceptor
// (go.temporal.io/sdk/contrib/opentelemetry) on t's TracerProvider, for
// client.Options.Interceptors: it traces the client's calls, and the
// workflows and activities of every worker built on that client. On top of
// the SDK's spans it adds attempt spans, gives a workflow's long-lived spans
// IDs that survive a replay on another worker, drops the copies a replay
// makes, and leaves Queries untraced (see the package doc). Nil when t is
// off or records metrics only.
func (t *Telemetry) Interceptor(o InterceptorOptions) (interceptor.Interceptor, error) {
	if !t.Enabled() || !t.traces {
		return nil, nil
	}
	s := &stableTracer{tracer: t.tracer}
	inner, err := temporalotel.NewTracer(temporalotel.TracerOptions{
		Tracer:                  t.tp.Tracer("temporal-sdk-go"),
		DisableQueryTracing:     true,
		AllowInvalidParentSpans: true,
		SpanContextKey:          spanContextKey{},
		SpanStarter:             s.startSpan,
	})
	if err != nil {
		return nil, fmt.Errorf("tracing: Temporal tracer: %w", err)
	}
	s.Tracer = inner
	return &temporalInterceptor{Interceptor: interceptor.NewTracingInterceptor(s), s: s, o: o}, nil
}

// MetricsHandler reports the Temporal SDK's metrics through t's
// MeterProvider, for client.Options.MetricsHandler. Nil when t is off.
func (t *Telemetry) MetricsHandler() client.MetricsHandler {
	if !t.Enabled() {
		return nil
	}
	return temporalotel.NewMetricsHandler(temporalotel.MetricsHandlerOptions{
		Meter:   t.mp.Meter(sdkScope),
		OnError: otel.Handle, // the default panics
	})
}

// sdkScope is the instrumentation scope of the Temporal SDK's metrics.
const sdkScope = "temporal-sdk-go"

// ClientOptions returns o with t's interceptor and metrics handler added;
// o unchanged when t is off.
func (t *Telemetry) ClientOptions(o client.Options, iopts InterceptorOptions) (client.Options, error) {
	if !t.Enabled() {
		return o, nil
	}
	i, err := t.Interceptor(iopts)
	if err != nil {
		return o, err
	}
	if i != nil {
		o.Interceptors = append(append([]interceptor.ClientInterceptor(nil), o.Interceptors...), i)
	}
	if o.MetricsHandler == nil {
		o.MetricsHandler = t.MetricsHandler()
	}
	return o, nil
}

// spanContextKey is where the SDK's interceptor keeps its span in a workflow
// context; ours, so that the workflow interceptor below can find it.
type spanContextKey struct{}

// SDK operations whose spans get special handling.
const (
	opRunWorkflow  = "RunWorkflow"
	opHandleUpdate = "HandleUpdate"
	opQuery        = "QueryWorkflow"
)

// stableTracer is the contrib tracer with a say in how spans start: the
// SDK's interceptor calls StartSpan, which calls the contrib tracer, which
// calls back startSpan on the same goroutine, while mu is held.
type stableTracer struct {
	interceptor.Tracer
	tracer trace.Tracer

	mu      sync.Mutex
	op      string    // operation of the span being started
	key     string    // its idempotency key, for a RunWorkflow span
	started *keepSpan // the keepSpan startSpan made for it, if any

	// keepers maps the SDK's handle of each span whose export waits for a
	// verdict to its keepSpan.
	keepers sync.Map
}

func (s *stableTracer) StartSpan(o *interceptor.TracerStartSpanOptions) (interceptor.TracerSpan, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.op, s.key, s.started = o.Operation, "", nil
	if o.Operation == opRunWorkflow {
		s.key = o.IdempotencyKey
	}
	ts, err := s.Tracer.StartSpan(o)
	if k := s.started; k != nil && err == nil {
		k.handle = ts
		s.keepers.Store(ts, k)
	}
	return ts, err
}

func (s *stableTracer) startSpan(ctx context.Context, t trace.Tracer, name string, opts ...trace.SpanStartOption) trace.Span {
	switch s.op {
	case opQuery:
		// Ranks poll the rendezvous and the starter polls the status:
		// thousands of spans that say nothing. An invalid span context puts
		// nothing in the header either.
		return noopSpan
	case opRunWorkflow:
		if s.key != "" {
			ctx = withStableKey(ctx, s.key)
		}
		fallthrough
	case opHandleUpdate:
		_, span := t.Start(ctx, name, opts...)
		s.started = &keepSpan{Span: span, s: s}
		return s.started
	}
	_, span := t.Start(ctx, name, opts...)
	return span
}

// keepSpan is a span of workflow code whose export depends on how it ends:
// End exports it only once keep was called. A replay re-runs workflow code
// (after a restart, an eviction from the worker's cache, for a Query on a
// closed workflow) and so re-creates its spans; only the instance that sees
// the work happen live is kept.
type keepSpan struct {
	trace.Span
	s      *stableTracer
	handle interceptor.TracerSpan // the SDK's, when it made the span
	mu     sync.Mutex
	kept   bool
}

func (k *keepSpan) keep() {
	k.mu.Lock()
	k.kept = true
	k.mu.Unlock()
}

func (k *keepSpan) End(opts ...trace.SpanEndOption) {
	if k.handle != nil {
		k.s.keepers.Delete(k.handle)
	}
	k.mu.Lock()
	kept := k.kept
	k.mu.Unlock()
	if kept {
		k.Span.End(opts...)
	}
}

// keeperOf finds the keepSpan of the span the SDK's interceptor put in ctx.
func (s *stableTracer) keeperOf(ctx workflow.Context) *keepSpan {
	ts, ok := ctx.Value(spanContextKey{}).(interceptor.TracerSpan)
	if !ok {
		return nil
	}
	k, _ := s.keepers.Load(ts)
	kp, _ := k.(*keepSpan)
	return kp
}

// temporalInterceptor is the SDK's tracing interceptor with ours inside it
// on the workflow side.
type temporalInterceptor struct {
	interceptor.Interceptor
	s *stableTracer
	o InterceptorOptions
}

func (i *temporalInterceptor) InterceptWorkflow(ctx workflow.Context, next interceptor.WorkflowInboundInterceptor) interceptor.WorkflowInboundInterceptor {
	in := &workflowInbound{root: i, info: workflow.GetInfo(ctx), attempts: map[int]*attemptSpan{}}
	in.Next = next
	return i.Interceptor.InterceptWorkflow(ctx, in)
}

// workflowInbound runs inside the SDK's workflow interceptor: its context
// holds the span the SDK started for the call. It issues no commands, so
// workflow histories replay the same with or without it.
type workflowInbound struct {
	interceptor.WorkflowInboundInterceptorBase
	root     *temporalInterceptor
	info     *workflow.Info
	attempts map[int]*attemptSpan
}

func (w *workflowInbound) Init(outbound interceptor.WorkflowOutboundInterceptor) error {
	o := &workflowOutbound{in: w}
	o.Next = outbound
	return w.Next.Init(o)
}

func (w *workflowInbound) ExecuteWorkflow(ctx workflow.Context, in *interceptor.ExecuteWorkflowInput) (any, error) {
	span := w.root.s.keeperOf(ctx)
	ret, err := w.Next.ExecuteWorkflow(ctx, in)
	// Reached only when the workflow function returned (an eviction exits
	// its goroutine); kept only when that happened live.
	if span != nil && !workflow.IsReplaying(ctx) {
		span.keep()
	}
	return ret, err
}

func (w *workflowInbound) ExecuteUpdate(ctx workflow.Context, in *interceptor.UpdateInput) (any, error) {
	if span := w.root.s.keeperOf(ctx); span != nil && !workflow.IsReplaying(ctx) {
		span.keep()
	}
	return w.Next.ExecuteUpdate(ctx, in)
}

// workflowOutbound sees the workflow's calls before the SDK's interceptor
// does, so the attempt span it puts in the context becomes the parent of
// StartActivity.
type workflowOutbound struct {
	interceptor.WorkflowOutboundInterceptorBase
	in *workflowInbound
}

// attemptSpan is an attempt's span and the activities it waits for.
type attemptSpan struct {
	span    *keepSpan
	ref     interceptor.TracerSpan
	pending int
	err     error
	// secondary: err is of a SecondaryErrorTypes type
	secondary bool
}

func (o *workflowOutbound) ExecuteActivity(ctx workflow.Context, activityType string, args ...any) workflow.Future {
	attemptOf := o.in.root.o.AttemptOf
	if attemptOf == nil {
		return o.Next.ExecuteActivity(ctx, activityType, args...)
	}
	n, attrs, ok := attemptOf(activityType, args)
	if !ok {
		return o.Next.ExecuteActivity(ctx, activityType, args...)
	}
	a := o.in.attempt(ctx, n, attrs)
	if a == nil {
		return o.Next.ExecuteActivity(ctx, activityType, args...)
	}
	fut := o.Next.ExecuteActivity(workflow.WithValue(ctx, spanContextKey{}, a.ref), activityType, args...)
	a.pending++
	// The attempt ends when its last activity does. This coroutine only
	// waits and ends a span: no command, no workflow state.
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	workflow.Go(dctx, func(ctx workflow.Context) {
		a.failed(fut.Get(ctx, nil), o.in.root.o.SecondaryErrorTypes)
		a.pending--
		if a.pending > 0 {
			return
		}
		delete(o.in.attempts, n)
		if a.err != nil {
			a.span.SetStatus(codes.Error, a.err.Error())
		}
		if !workflow.IsReplaying(ctx) {
			a.span.keep()
		}
		a.span.End(trace.WithTimestamp(workflow.Now(ctx)))
	})
	return fut
}

// failed notes an activity's outcome: the attempt's error is the first that
// is not a cancellation, preferring one not of a secondary type. Each failure
// is an event on the span.
func (a *attemptSpan) failed(err error, secondaryTypes []string) {
	var canceled *temporal.CanceledError
	if err == nil || errors.As(err, &canceled) {
		return
	}
	secondary := false
	var app *temporal.ApplicationError
	if errors.As(err, &app) {
		secondary = slices.Contains(secondaryTypes, app.Type())
	}
	a.span.AddEvent("activity failed", trace.WithAttributes(attribute.String("error", err.Error()), attribute.Bool("secondary", secondary)))
	if a.err == nil || (a.secondary && !secondary) {
		a.err, a.secondary = err, secondary
	}
}

// attempt returns attempt n's span, started now (in workflow time) if it is
// new. Its IDs come from the workflow run and n, so that a replay on another
// worker makes the same span; nil without a span to hang it on.
func (w *workflowInbound) attempt(ctx workflow.Context, n int, attrs []attribute.KeyValue) *attemptSpan {
	if a, ok := w.attempts[n]; ok {
		return a
	}
	parent, ok := ctx.Value(spanContextKey{}).(trace.Span)
	if !ok {
		return nil
	}
	s := w.root.s
	key := fmt.Sprintf("attempt:%s:%s:%s:%d", w.info.Namespace, w.info.WorkflowExecution.ID, w.info.WorkflowExecution.RunID, n)
	pctx := withStableKey(trace.ContextWithSpan(context.Background(), parent), key)
	_, span := s.tracer.Start(pctx, SpanAttempt, trace.WithTimestamp(workflow.Now(ctx)),
		trace.WithAttributes(append([]attribute.KeyValue{AttrAttempt.Int(n)}, attrs...)...))
	k := &keepSpan{Span: span, s: s}
	ref := s.SpanFromContext(trace.ContextWithSpan(context.Background(), k))
	if ref == nil {
		return nil
	}
	a := &attemptSpan{span: k, ref: ref}
	w.attempts[n] = a
	return a
}
