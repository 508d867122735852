package tracing_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
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

// What one /metrics read costs a worker whose ranks ran 16 two-rank runs
// (each rank: steps, all-reduces, barriers, checkpoints, a rendezvous):
// within MetricsRetention of their end the exporter converts and encodes
// all their series; after it, they are converted but not served.
func BenchmarkScrape16Runs(b *testing.B)        { benchScrape(b, time.Hour) }
func BenchmarkScrape16RunsExpired(b *testing.B) { benchScrape(b, time.Nanosecond) }

func benchScrape(b *testing.B, retention time.Duration) {
	tel, shutdown, err := tracing.Setup(context.Background(), tracing.Config{MetricsAddr: "127.0.0.1:0", MetricsRetention: retention})
	if err != nil {
		b.Fatal(err)
	}
	defer shutdown(context.Background())
	ctx := context.Background()
	for run := range 16 {
		for r := range 2 {
			rank := tel.StartRank(ctx, tracing.RankInfo{Run: fmt.Sprintf("run-%d", run), Attempt: 1, Rank: r, WorldSize: 2})
			_, end := rank.Rendezvous(ctx)
			end(1, nil)
			for s := range 100 {
				rank.Progress(s/10, s)
				rank.Collective(ctx, "allreduce", 1<<20, time.Now(), time.Millisecond, nil)
				rank.Collective(ctx, "barrier", 0, time.Now(), time.Millisecond, nil)
			}
			for _, op := range []string{tracing.CheckpointWrite, tracing.CheckpointUpload, tracing.CheckpointRestore} {
				rank.BeginCheckpoint(ctx, op, 1).Done(1<<20, time.Now(), nil)
			}
			rank.End(nil)
		}
	}
	url := "http://" + tel.MetricsAddr() + tracing.MetricsPath
	var size int
	b.ReportAllocs()
	for b.Loop() {
		resp, err := http.Get(url)
		if err != nil {
			b.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		size = int(n)
	}
	b.ReportMetric(float64(size), "bytes/scrape")
}
