package tracing

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdoutmetric"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/exemplar"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// Exporter names, as OTEL_TRACES_EXPORTER and OTEL_METRICS_EXPORTER take them.
const (
	ExporterOTLP    = "otlp"
	ExporterConsole = "console"
	ExporterNone    = "none"
)

// OTLP protocols, as OTEL_EXPORTER_OTLP_PROTOCOL takes them.
const (
	ProtocolGRPC = "grpc"
	ProtocolHTTP = "http/protobuf"
)

// DefaultStepEvery is how often a step gets a span by default: the first
// step of every epoch and every 100th after it.
const DefaultStepEvery = 100

// EnvStepEvery overrides Config.StepEvery's default.
const EnvStepEvery = "TEMPOTRAIN_TRACE_STEP_EVERY"

// Config configures Setup. Every empty field falls back to its environment
// variable, then to its default.
type Config struct {
	// ServiceName names this process in traces. OTEL_SERVICE_NAME (and
	// service.name in OTEL_RESOURCE_ATTRIBUTES) win over it. Default
	// "tempotrain".
	ServiceName string
	// Traces is the span exporter: ExporterOTLP, ExporterConsole or
	// ExporterNone. Default OTEL_TRACES_EXPORTER, else ExporterOTLP when an
	// OTLP endpoint is set (OTEL_EXPORTER_OTLP_ENDPOINT or
	// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT), else ExporterNone.
	Traces string
	// Metrics is the metric exporter, chosen like Traces from
	// OTEL_METRICS_EXPORTER and OTEL_EXPORTER_OTLP_METRICS_ENDPOINT.
	Metrics string
	// Protocol of the OTLP exporters: ProtocolGRPC or ProtocolHTTP. Default
	// OTEL_EXPORTER_OTLP_TRACES_PROTOCOL / _METRICS_PROTOCOL, then
	// OTEL_EXPORTER_OTLP_PROTOCOL, then ProtocolHTTP (the specification's
	// default). The endpoint, headers, TLS, timeout and compression come from
	// the exporters' own OTEL_EXPORTER_OTLP_* variables.
	Protocol string
	// Console is where the console exporters write. Default os.Stderr, so
	// that a command's output stays its own.
	Console io.Writer
	// StepEvery gives every StepEvery-th step of an epoch a span (the first
	// always); a negative value gives none. Default
	// TEMPOTRAIN_TRACE_STEP_EVERY, else DefaultStepEvery.
	StepEvery int
	// MetricsAddr, when set ("host:port", ":9464"; port 0 picks one), serves
	// every metric in Prometheus's text format at http://MetricsAddr/metrics
	// (OpenTelemetry's Prometheus exporter on the same MeterProvider as the
	// Metrics exporter, which may stay ExporterNone). Default "": no endpoint.
	MetricsAddr string
	// MetricsRetention is how long the endpoint goes on serving a run's
	// series after the last of its ranks in this process ended (a rank of
	// the run that starts here again brings them back, with their counts
	// continued). Default DefaultMetricsRetention, 10 minutes.
	MetricsRetention time.Duration
}

// Telemetry is a process's tracing and metrics: the providers, and what
// tempotrain builds on them. A nil or off Telemetry records nothing.
type Telemetry struct {
	tp        trace.TracerProvider
	mp        metric.MeterProvider
	tracer    trace.Tracer
	meter     metric.Meter
	enabled   bool
	traces    bool // tp records spans: the Temporal interceptor is worth installing
	stepEvery int
	// metricsAddr is where the /metrics endpoint listens ("" without one).
	metricsAddr string
	// runs knows the runs with ranks here, for the endpoint (nil without).
	runs *runTracker
	inst *instruments
}

// Option configures New.
type Option func(*Telemetry)

// WithStepEvery sets how often a step gets a span (see Config.StepEvery).
func WithStepEvery(n int) Option { return func(t *Telemetry) { t.stepEvery = n } }

// scope is the instrumentation scope of tempotrain's own spans and metrics.
const scope = "github.com/tempotrain/tempotrain"

// New returns a Telemetry on given providers (a test's recorder, or
// providers built elsewhere). Give the TracerProvider StableIDs, or the
// spans of a workflow replayed on another worker get new IDs.
func New(tp trace.TracerProvider, mp metric.MeterProvider, opts ...Option) *Telemetry {
	if tp == nil {
		tp = tracenoop.NewTracerProvider()
	}
	if mp == nil {
		mp = metricnoop.NewMeterProvider()
	}
	_, noTraces := tp.(tracenoop.TracerProvider)
	t := &Telemetry{tp: tp, mp: mp, enabled: true, traces: !noTraces, stepEvery: stepEveryFromEnv()}
	for _, o := range opts {
		o(t)
	}
	t.tracer = tp.Tracer(scope)
	t.meter = mp.Meter(scope)
	t.inst = newInstruments(t.meter)
	return t
}

// Noop returns a Telemetry that is off.
func Noop() *Telemetry {
	return &Telemetry{tp: tracenoop.NewTracerProvider(), mp: metricnoop.NewMeterProvider(),
		tracer: tracenoop.NewTracerProvider().Tracer(scope), meter: metricnoop.NewMeterProvider().Meter(scope)}
}

// Enabled says whether t records anything.
func (t *Telemetry) Enabled() bool { return t != nil && t.enabled }

// TracerProvider is t's TracerProvider (a no-op one when t is off).
func (t *Telemetry) TracerProvider() trace.TracerProvider {
	if t == nil {
		return tracenoop.NewTracerProvider()
	}
	return t.tp
}

// MeterProvider is t's MeterProvider (a no-op one when t is off).
func (t *Telemetry) MeterProvider() metric.MeterProvider {
	if t == nil {
		return metricnoop.NewMeterProvider()
	}
	return t.mp
}

// Tracer is tempotrain's tracer.
func (t *Telemetry) Tracer() trace.Tracer { return t.TracerProvider().Tracer(scope) }

// Setup builds the providers that c and the environment ask for (see
// Config) and returns their Telemetry and a shutdown function that flushes
// and stops the exporters. It also makes them OpenTelemetry's global
// providers, and W3C trace context and baggage the global propagator, for
// libraries that use those. With neither traces nor metrics exported nor a
// MetricsAddr, the Telemetry is off.
func Setup(ctx context.Context, c Config) (*Telemetry, func(context.Context) error, error) {
	nop := func(context.Context) error { return nil }
	if disabled, _ := strconv.ParseBool(os.Getenv("OTEL_SDK_DISABLED")); disabled {
		return Noop(), nop, nil
	}
	if c.Console == nil {
		c.Console = os.Stderr
	}
	if c.ServiceName == "" {
		c.ServiceName = "tempotrain"
	}
	traces, err := exporterName(c.Traces, "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
	if err != nil {
		return nil, nil, err
	}
	metrics, err := exporterName(c.Metrics, "OTEL_METRICS_EXPORTER", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT")
	if err != nil {
		return nil, nil, err
	}
	if traces == ExporterNone && metrics == ExporterNone && c.MetricsAddr == "" {
		return Noop(), nop, nil
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName(c.ServiceName)),
		resource.WithFromEnv(), resource.WithHost(), resource.WithProcessPID(), resource.WithTelemetrySDK())
	if err != nil && res == nil {
		return nil, nil, fmt.Errorf("tracing: resource: %w", err)
	}

	var shutdowns []func(context.Context) error
	shutdown := func(ctx context.Context) error {
		var errs []error
		for _, s := range shutdowns {
			errs = append(errs, s(ctx))
		}
		return errors.Join(errs...)
	}
	fail := func(err error) (*Telemetry, func(context.Context) error, error) {
		_ = shutdown(ctx)
		return nil, nil, err
	}

	var tp trace.TracerProvider = tracenoop.NewTracerProvider()
	if traces != ExporterNone {
		exp, err := spanExporter(ctx, traces, protocol(c.Protocol, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"), c.Console)
		if err != nil {
			return fail(err)
		}
		stp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res), sdktrace.WithIDGenerator(StableIDs()))
		shutdowns = append(shutdowns, stp.Shutdown)
		tp = stp
	}
	var mp metric.MeterProvider = metricnoop.NewMeterProvider()
	var readers []sdkmetric.Option
	if metrics != ExporterNone {
		exp, err := metricExporter(ctx, metrics, protocol(c.Protocol, "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL"), c.Console)
		if err != nil {
			return fail(err)
		}
		readers = append(readers, sdkmetric.WithReader(sdkmetric.NewPeriodicReader(exp)))
	}
	var metricsAddr string
	var runs *runTracker
	if c.MetricsAddr != "" {
		if c.MetricsRetention <= 0 {
			c.MetricsRetention = DefaultMetricsRetention
		}
		runs = newRunTracker(c.MetricsRetention)
		ms, err := startMetricsServer(c.MetricsAddr, runs)
		if err != nil {
			return fail(err)
		}
		// The endpoint closes before the provider shuts its reader down.
		shutdowns = append(shutdowns, ms.stop)
		readers = append(readers, sdkmetric.WithReader(ms.reader))
		metricsAddr = ms.addr
	}
	if len(readers) > 0 {
		opts := append(readers, sdkmetric.WithResource(res), sdkmetric.WithView(sdkLatencyView))
		// Exemplars are sampled from recorded spans: without spans there
		// are none to take, only reservoirs to keep and reset per series.
		if traces == ExporterNone && os.Getenv("OTEL_METRICS_EXEMPLAR_FILTER") == "" {
			opts = append(opts, sdkmetric.WithExemplarFilter(exemplar.AlwaysOffFilter))
		}
		smp := sdkmetric.NewMeterProvider(opts...)
		shutdowns = append(shutdowns, smp.Shutdown)
		mp = smp
	}
	otel.SetTracerProvider(tp)
	otel.SetMeterProvider(mp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	var opts []Option
	if c.StepEvery != 0 {
		opts = append(opts, WithStepEvery(c.StepEvery))
	}
	tel := New(tp, mp, opts...)
	tel.metricsAddr, tel.runs = metricsAddr, runs
	return tel, shutdown, nil
}

// sdkLatencyView gives the Temporal SDK's latency histograms (its timers,
// recorded in seconds) sdkBuckets instead of the SDK's default boundaries,
// which are meant for milliseconds: 0, 5, 10, 25 … 10000 put every request
// in the first two buckets and cost 16 series each.
var sdkLatencyView = sdkmetric.NewView(
	sdkmetric.Instrument{Kind: sdkmetric.InstrumentKindHistogram, Scope: instrumentation.Scope{Name: sdkScope}},
	sdkmetric.Stream{Aggregation: sdkmetric.AggregationExplicitBucketHistogram{Boundaries: sdkBuckets}})

// exporterName picks an exporter: the configured one, else the environment's,
// else OTLP when an OTLP endpoint is set, else none.
func exporterName(configured, env, signalEndpoint string) (string, error) {
	name := configured
	if name == "" {
		name = os.Getenv(env)
	}
	if name == "" {
		if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv(signalEndpoint) != "" {
			return ExporterOTLP, nil
		}
		return ExporterNone, nil
	}
	switch name = strings.ToLower(strings.TrimSpace(name)); name {
	case ExporterOTLP, ExporterConsole, ExporterNone:
		return name, nil
	}
	return "", fmt.Errorf("tracing: %s=%q: want %s, %s or %s", env, name, ExporterOTLP, ExporterConsole, ExporterNone)
}

func protocol(configured, signalEnv string) string {
	for _, p := range []string{configured, os.Getenv(signalEnv), os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL")} {
		if p != "" {
			return strings.ToLower(strings.TrimSpace(p))
		}
	}
	return ProtocolHTTP
}

func spanExporter(ctx context.Context, name, proto string, console io.Writer) (sdktrace.SpanExporter, error) {
	if name == ExporterConsole {
		return stdouttrace.New(stdouttrace.WithWriter(console))
	}
	switch proto {
	case ProtocolGRPC:
		return otlptracegrpc.New(ctx)
	case ProtocolHTTP:
		return otlptracehttp.New(ctx)
	}
	return nil, fmt.Errorf("tracing: OTLP protocol %q: want %s or %s", proto, ProtocolGRPC, ProtocolHTTP)
}

func metricExporter(ctx context.Context, name, proto string, console io.Writer) (sdkmetric.Exporter, error) {
	if name == ExporterConsole {
		return stdoutmetric.New(stdoutmetric.WithWriter(console))
	}
	switch proto {
	case ProtocolGRPC:
		return otlpmetricgrpc.New(ctx)
	case ProtocolHTTP:
		return otlpmetrichttp.New(ctx)
	}
	return nil, fmt.Errorf("tracing: OTLP protocol %q: want %s or %s", proto, ProtocolGRPC, ProtocolHTTP)
}

func stepEveryFromEnv() int {
	if n, err := strconv.Atoi(os.Getenv(EnvStepEvery)); err == nil && n != 0 {
		return n
	}
	return DefaultStepEvery
}
