package tracing_test

import (
	"context"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/tempotrain/tempotrain/tracing"
)

// What tracing adds to one training step of the built-in functions: a
// SetProgress and an all-reduce. With the default sampling (every 100th step
// gets spans) the cost is the metrics; BenchmarkStepSampledEvery1 gives
// every step its spans. Compare with a step: 5-25 ms for the MLP on the
// 2-core machine.
func BenchmarkStepTracingOff(b *testing.B)       { benchStep(b, false, tracing.DefaultStepEvery) }
func BenchmarkStepTracingOn(b *testing.B)        { benchStep(b, true, tracing.DefaultStepEvery) }
func BenchmarkStepSampledEvery1(b *testing.B)    { benchStep(b, true, 1) }
func BenchmarkStepTracingOnNoSpans(b *testing.B) { benchStep(b, true, -1) }

func benchStep(b *testing.B, on bool, every int) {
	tel := tracing.Noop()
	if on {
		// A batching exporter that drops, as the providers Setup builds do
		// with a real one.
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
		b.Cleanup(func() { _ = tp.Shutdown(context.Background()); _ = mp.Shutdown(context.Background()) })
		tel = tracing.New(tp, mp, tracing.WithStepEvery(every))
	}
	ctx, span := tel.Tracer().Start(context.Background(), "activity")
	defer span.End()
	rank := tel.StartRank(ctx, tracing.RankInfo{Run: "bench", Attempt: 1, Rank: 0, WorldSize: 2})
	start := time.Now()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		rank.Progress(i/1000, i%1000)
		rank.Collective(ctx, "allreduce", 1<<20, start, time.Millisecond, nil)
	}
	b.StopTimer()
	rank.End(nil)
}
