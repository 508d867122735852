// Command tracing measures what tracing costs a training run (issue 6 item
// 7): the demo run of `starter dev` (built-in mnist-mlp, 2 ranks, Fashion-MNIST,
// the embedded server) with tracing on and off, in one invocation.
//
//	go run ./bench/tracing              # 9 pairs of 3-epoch runs
//	go run ./bench/tracing -pairs 15 -epochs 1
//	go run ./bench/tracing -exporter prometheus   # "on" is the /metrics endpoint (issue 31)
//
// One dev server serves two workers: one whose client has no interceptor and
// whose ranks have no telemetry (tracing off, the default), one with
// Temporal's tracing interceptor, the SDK's metrics, rank spans (epochs,
// every 100th step, its all-reduces, checkpoints) and metrics (tracing on).
// With OTEL_EXPORTER_OTLP_ENDPOINT set, "on" exports there (tracing.Setup);
// otherwise it exports in process: spans are encoded to OTLP protobuf by the
// OTLP exporter and dropped, metrics are encoded to JSON every 10 s and
// dropped, so the SDK, the batching and the encoding are all paid for.
//
// Runs alternate on and off, the order flipping every pair, after one untimed
// warm-up run of each. A run's samples/s is the mean of its epochs'
// samples_per_s as the built-in function reports it. It prints every run,
// the medians, and the on/off ratio of the medians and the median of the
// per-pair ratios; the target is within 2%. On a shared machine wall-clock
// throughput swings with the neighbours' load, so it also prints samples per
// CPU-second of this whole process (server, worker, ranks, exporter), and
// the share of the timed runs' CPU profile samples that have telemetry code
// (the OpenTelemetry SDK and exporters, Temporal's contrib, the tracing
// package) on the stack: what tracing adds is CPU work, and the profile
// counts it whatever the neighbours' load does to the wall clock.
//
// With -exporter prometheus, "on" is what a worker's -metrics-addr turns on
// (tracing.Setup with Config.MetricsAddr and no OTEL_* exporter): the SDK's
// metrics, rank metrics, no spans and no interceptor, OpenTelemetry's
// Prometheus exporter, and a scraper in this process that reads /metrics
// every -scrape (a Prometheus scrapes every 15 s by default), so the
// conversion to Prometheus's format and its encoding are paid for and
// counted in the profile.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/pprof/profile"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/stdout/stdoutmetric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"
	"google.golang.org/protobuf/proto"

	"github.com/tempotrain/tempotrain/activities"
	"github.com/tempotrain/tempotrain/app"
	"github.com/tempotrain/tempotrain/bench/internal/hostinfo"
	"github.com/tempotrain/tempotrain/builtin"
	"github.com/tempotrain/tempotrain/tracing"
	"github.com/tempotrain/tempotrain/train"
)

func main() {
	pairs := flag.Int("pairs", 9, "on/off pairs (at least 3 for a median)")
	epochs := flag.Int("epochs", 3, "epochs per run (the demo's 3)")
	fn := flag.String("func", "mnist-mlp", "built-in training function")
	only := flag.String("only", "", "run only this side (on or off)")
	exporter := flag.String("exporter", "traces", "what \"on\" is: traces (spans and metrics, OTLP) or prometheus (metrics at a /metrics endpoint, scraped)")
	scrape := flag.Duration("scrape", time.Second, "with -exporter prometheus: how often /metrics is read")
	flag.Parse()
	if err := run(*pairs, *epochs, *fn, *only, *exporter, *scrape); err != nil {
		fmt.Fprintln(os.Stderr, "bench/tracing:", err)
		os.Exit(1)
	}
}

// mode is one side of the comparison: a worker on queues of its own.
type mode struct {
	name             string
	c                client.Client
	taskQ, rankQ     string
	samplesPerSecond []float64
	samplesPerCPU    []float64
	// CPU profile samples of its timed runs: all, and those with a
	// telemetry frame on the stack.
	profSamples, profTelemetry int64
	// of profTelemetry, those that serve or make a /metrics read
	profScrape int64
}

func run(pairs, epochs int, fn, only, exporter string, scrape time.Duration) error {
	builtin.Register()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	slog.SetDefault(logger)
	ctx := context.Background()

	var tel *tracing.Telemetry
	var shutdown func(context.Context) error
	var sent *countingClient
	var scraped *scraper
	var err error
	note := exportNote()
	switch exporter {
	case "traces":
		tel, shutdown, sent, err = telemetry(ctx)
	case "prometheus":
		tel, shutdown, scraped, err = prometheusTelemetry(ctx, scrape)
		note = fmt.Sprintf("Prometheus exporter only, /metrics read every %v", scrape)
	default:
		err = fmt.Errorf("-exporter %q: want traces or prometheus", exporter)
	}
	if err != nil {
		return err
	}
	defer shutdown(ctx)

	local, err := app.StartLocal(app.LocalOptions{
		Worker: &app.WorkerOptions{Workflows: true, TaskQueue: "bench-off", RankSlots: 2, RankQueue: "bench-off-ranks",
			Activities: activities.Options{Logger: logger}},
		Logger: logger,
	})
	if err != nil {
		return err
	}
	defer local.Stop()
	off := &mode{name: "off", c: local.Client, taskQ: "bench-off", rankQ: "bench-off-ranks"}

	opts, err := app.ClientOptions(client.Options{Logger: log.NewStructuredLogger(logger)}, tel)
	if err != nil {
		return err
	}
	traced, err := client.NewClientFromExisting(local.Client, opts)
	if err != nil {
		return err
	}
	defer traced.Close()
	w, err := app.StartWorker(traced, app.WorkerOptions{Workflows: true, TaskQueue: "bench-on", RankSlots: 2, RankQueue: "bench-on-ranks",
		Activities: activities.Options{Logger: logger, Telemetry: tel}})
	if err != nil {
		return err
	}
	defer w.Stop()
	on := &mode{name: "on", c: traced, taskQ: "bench-on", rankQ: "bench-on-ranks"}

	dir, err := os.MkdirTemp("", "bench-tracing")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	cfg := map[string]any{"epochs": epochs, "batch_size": 128, "lr": 0.05, "seed": 1}
	fmt.Printf("%s, 2 ranks, %d epochs per run, embedded server; on: %s\n", fn, epochs, note)
	runs := 0
	fit := func(m *mode, record bool) error {
		runs++
		if scraped != nil { // Prometheus scrapes the "on" worker only
			scraped.active.Store(m == on)
		}
		var prof bytes.Buffer
		if record {
			if err := pprof.StartCPUProfile(&prof); err != nil {
				return err
			}
		}
		t0, cpu0 := time.Now(), hostinfo.CPUSeconds()
		res, err := train.NewTrainer(m.c, fn, cfg, train.ScalingConfig{NumWorkers: 2, TaskQueue: m.rankQ},
			train.RunConfig{Name: fmt.Sprintf("%s-%d", m.name, runs), StoragePath: dir}, train.WithTaskQueue(m.taskQ)).Fit(ctx)
		cpu := hostinfo.CPUSeconds() - cpu0
		if record {
			pprof.StopCPUProfile()
		}
		if err != nil {
			return fmt.Errorf("tracing %s: %w", m.name, err)
		}
		if record {
			all, tel, scrape, err := telemetryShare(&prof)
			if err != nil {
				return err
			}
			m.profSamples += all
			m.profTelemetry += tel
			m.profScrape += scrape
		}
		sps, samples, perEpoch, err := hostinfo.ReadRun(res.Path)
		if err != nil {
			return err
		}
		note := " (warm-up)"
		if record {
			m.samplesPerSecond = append(m.samplesPerSecond, sps)
			m.samplesPerCPU = append(m.samplesPerCPU, samples/cpu)
			note = ""
		}
		fmt.Printf("  tracing %-3s %8.0f samples/s  %7.0f samples/CPU-s  %5.1f s  epochs %.0f%s\n", m.name, sps, samples/cpu, time.Since(t0).Seconds(), perEpoch, note)
		return nil
	}
	sides := []*mode{on, off}
	switch only {
	case "on":
		sides = []*mode{on}
	case "off":
		sides = []*mode{off}
	case "":
	default:
		return fmt.Errorf("-only %q: want on or off", only)
	}
	for _, m := range sides {
		if err := fit(m, false); err != nil {
			return err
		}
	}
	for i := 0; i < pairs; i++ {
		order := slices.Clone(sides)
		if i%2 == 1 {
			slices.Reverse(order)
		}
		for _, m := range order {
			if err := fit(m, true); err != nil {
				return err
			}
		}
	}
	if only != "" {
		return nil
	}
	hostinfo.OnOff("samples/s", on.samplesPerSecond, off.samplesPerSecond)
	hostinfo.OnOff("samples/CPU-s", on.samplesPerCPU, off.samplesPerCPU)
	for _, m := range []*mode{on, off} {
		fmt.Printf("CPU profile of the %-3s runs: %5.2f%% of %d samples have telemetry code on the stack\n",
			m.name, 100*float64(m.profTelemetry)/float64(max(m.profSamples, 1)), m.profSamples)
		if scraped != nil {
			fmt.Printf("  of which serving and reading /metrics: %5.2f%%\n", 100*float64(m.profScrape)/float64(max(m.profSamples, 1)))
		}
	}
	if sent != nil {
		fmt.Printf("spans exported by the on runs: %d, %d bytes of OTLP protobuf\n", sent.spans, sent.bytes)
	}
	if scraped != nil {
		n, bytes, series := scraped.stop()
		fmt.Printf("/metrics scrapes: %d, the last %d bytes with %d tempotrain_ and temporal_ sample lines\n", n, bytes, series)
	}
	return nil
}

// prometheusTelemetry is "on" for -exporter prometheus: Setup's Prometheus
// endpoint alone, and a scraper of it.
func prometheusTelemetry(ctx context.Context, every time.Duration) (*tracing.Telemetry, func(context.Context) error, *scraper, error) {
	for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_TRACES_EXPORTER", "OTEL_METRICS_EXPORTER"} {
		if os.Getenv(k) != "" {
			return nil, nil, nil, fmt.Errorf("-exporter prometheus measures the endpoint alone: unset %s", k)
		}
	}
	tel, shutdown, err := tracing.Setup(ctx, tracing.Config{ServiceName: "bench-tracing", MetricsAddr: "127.0.0.1:0"})
	if err != nil {
		return nil, nil, nil, err
	}
	s := &scraper{url: "http://" + tel.MetricsAddr() + tracing.MetricsPath, done: make(chan struct{}), stopped: make(chan struct{})}
	go s.run(every)
	return tel, func(ctx context.Context) error { s.stop(); return shutdown(ctx) }, s, nil
}

// scraper reads /metrics as a Prometheus would, and keeps what the last
// read held.
type scraper struct {
	url           string
	done, stopped chan struct{}
	once          bool
	active        atomic.Bool // scrape now (the "on" side is running)
	n, bytes      int
	series        int
}

func (s *scraper) run(every time.Duration) {
	defer close(s.stopped)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-t.C:
		}
		if !s.active.Load() {
			continue
		}
		resp, err := http.Get(s.url)
		if err != nil {
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		s.n, s.bytes, s.series = s.n+1, len(b), 0
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "tempotrain_") || strings.HasPrefix(line, "temporal_") {
				s.series++
			}
		}
	}
}

// stop ends the scraper and returns its scrapes, the last one's size and
// sample lines.
func (s *scraper) stop() (n, bytes, series int) {
	if !s.once {
		s.once = true
		close(s.done)
	}
	<-s.stopped
	return s.n, s.bytes, s.series
}

// telemetry is tracing "on": the environment's exporters when it names an
// OTLP endpoint, else in-process ones that encode and drop.
func telemetry(ctx context.Context) (*tracing.Telemetry, func(context.Context) error, *countingClient, error) {
	if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_TRACES_EXPORTER") != "" {
		tel, shutdown, err := tracing.Setup(ctx, tracing.Config{ServiceName: "bench-tracing"})
		if err == nil && !tel.Enabled() {
			err = fmt.Errorf("the OTEL_* environment turns tracing off")
		}
		return tel, shutdown, nil, err
	}
	sent := &countingClient{}
	exp, err := otlptrace.New(ctx, sent)
	if err != nil {
		return nil, nil, nil, err
	}
	mexp, err := stdoutmetric.New(stdoutmetric.WithWriter(io.Discard))
	if err != nil {
		return nil, nil, nil, err
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithIDGenerator(tracing.StableIDs()))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewPeriodicReader(mexp, sdkmetric.WithInterval(10*time.Second))))
	shutdown := func(ctx context.Context) error {
		_ = tp.Shutdown(ctx)
		return mp.Shutdown(ctx)
	}
	return tracing.New(tp, mp), shutdown, sent, nil
}

func exportNote() string {
	if ep := os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT"); ep != "" {
		return "OTLP to " + ep
	}
	if e := os.Getenv("OTEL_TRACES_EXPORTER"); e != "" {
		return e
	}
	return "in-process OTLP encoding, dropped"
}

// countingClient is an OTLP trace client that encodes what it is sent, as a
// real one would for the wire, counts it and drops it.
type countingClient struct {
	spans, bytes int
}

func (c *countingClient) Start(context.Context) error { return nil }
func (c *countingClient) Stop(context.Context) error  { return nil }
func (c *countingClient) UploadTraces(_ context.Context, rs []*tracepb.ResourceSpans) error {
	b, err := proto.Marshal(&tracepb.TracesData{ResourceSpans: rs})
	if err != nil {
		return err
	}
	// Called by the batch processor's one goroutine only.
	c.bytes += len(b)
	for _, r := range rs {
		for _, s := range r.ScopeSpans {
			c.spans += len(s.Spans)
		}
	}
	return nil
}

// telemetryPackages are the code that tracing on adds: the OpenTelemetry SDK
// and exporters (the OTLP encoding included), Temporal's tracing and metrics
// contrib, and tempotrain's tracing package.
var telemetryPackages = []string{
	"go.opentelemetry.io/",
	"go.temporal.io/sdk/contrib/opentelemetry",
	"github.com/tempotrain/tempotrain/tracing.",
	"github.com/prometheus/", // the Prometheus endpoint's encoding and collectors
	"main.(*countingClient)",
	"main.(*scraper)",
}

// scrapePackages are the frames of a /metrics read: the endpoint's handler,
// the exporter's conversion, the encoding, and this process's scraper.
var scrapePackages = []string{
	"github.com/prometheus/",
	"go.opentelemetry.io/otel/exporters/prometheus",
	"main.(*scraper)",
}

// telemetryShare reads a CPU profile: its samples, those with a frame of
// telemetryPackages on the stack, and of those the ones with a frame of
// scrapePackages. Unlike wall-clock throughput, this does not move with the
// neighbours' load.
func telemetryShare(r io.Reader) (all, tel, scrape int64, err error) {
	p, err := profile.Parse(r)
	if err != nil {
		return 0, 0, 0, fmt.Errorf("CPU profile: %w", err)
	}
	has := func(s *profile.Sample, pkgs []string) bool {
		for _, loc := range s.Location {
			for _, line := range loc.Line {
				for _, pkg := range pkgs {
					if line.Function != nil && strings.HasPrefix(line.Function.Name, pkg) {
						return true
					}
				}
			}
		}
		return false
	}
	for _, s := range p.Sample {
		n := s.Value[0] // sample count
		all += n
		if has(s, telemetryPackages) {
			tel += n
			if has(s, scrapePackages) {
				scrape += n
			}
		}
	}
	return all, tel, scrape, nil
}
