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
// Prometheus exporter, and a scraper in another process (this program with
// -scrape-child) that reads /metrics every -scrape while an "on" run trains
// (a Prometheus scrapes every 15 s by default), so the conversion to
// Prometheus's format, its encoding and compression are paid for and
// counted in the profile, and the reading is not, as with a Prometheus.
// -cpuprofile writes the on runs' profiles merged, -dump the last read.
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
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
	flag.StringVar(&cpuProfile, "cpuprofile", "", "write the on runs' CPU profiles, merged, to this file (for go tool pprof)")
	flag.StringVar(&dumpScrape, "dump", "", "with -exporter prometheus: write the last /metrics read to this file")
	child := flag.String("scrape-child", "", "(internal) be the scraper of this /metrics URL")
	flag.Parse()
	if *child != "" {
		if err := scrapeChild(*child, *scrape, dumpScrape); err != nil {
			fmt.Fprintln(os.Stderr, "bench/tracing scraper:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(*pairs, *epochs, *fn, *only, *exporter, *scrape); err != nil {
		fmt.Fprintln(os.Stderr, "bench/tracing:", err)
		os.Exit(1)
	}
}

var cpuProfile, dumpScrape string

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
	profiles   []*profile.Profile
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
	if scraped != nil {
		defer scraped.stop()
	}

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
			if err := scraped.set(m == on); err != nil {
				return err
			}
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
			p, err := profile.Parse(&prof)
			if err != nil {
				return fmt.Errorf("CPU profile: %w", err)
			}
			m.profiles = append(m.profiles, p)
			all, tel, scrape := telemetryShare(p)
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
	if cpuProfile != "" && len(on.profiles) > 0 {
		merged, err := profile.Merge(on.profiles)
		if err != nil {
			return fmt.Errorf("-cpuprofile: %w", err)
		}
		f, err := os.Create(cpuProfile)
		if err != nil {
			return fmt.Errorf("-cpuprofile: %w", err)
		}
		if err := errors.Join(merged.Write(f), f.Close()); err != nil {
			return fmt.Errorf("-cpuprofile %s: %w", cpuProfile, err)
		}
	}
	if scraped != nil {
		if err := scraped.stop(); err != nil {
			return err
		}
		fmt.Printf("/metrics scrapes: %d, the last %d bytes with %d tempotrain_ and temporal_ sample lines\n", scraped.n, scraped.bytes, scraped.series)
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
	return tel, shutdown, &scraper{url: "http://" + tel.MetricsAddr() + tracing.MetricsPath, every: every}, nil
}

// scraper reads /metrics as a Prometheus would, from another process (this
// program again, with -scrape-child): the worker's CPU time and profile are
// the endpoint's serving alone, not the reading, decompressing and parsing
// that a Prometheus does on its own CPUs. Its clock ticks on through the
// whole benchmark; it reads only while told "on" (an "on" run trains).
type scraper struct {
	url      string
	every    time.Duration
	child    *exec.Cmd
	stdin    io.WriteCloser
	stdout   bytes.Buffer
	n, bytes int
	series   int
}

// set starts (on) or stops scraping, starting the scraper's process first.
func (s *scraper) set(on bool) error {
	if s.child == nil {
		exe, err := os.Executable()
		if err != nil {
			return err
		}
		args := []string{"-scrape-child", s.url, "-scrape", s.every.String()}
		if dumpScrape != "" {
			args = append(args, "-dump", dumpScrape)
		}
		s.child = exec.Command(exe, args...)
		s.child.Stdout, s.child.Stderr = &s.stdout, os.Stderr
		if s.stdin, err = s.child.StdinPipe(); err != nil {
			return err
		}
		if err := s.child.Start(); err != nil {
			return err
		}
	}
	cmd := "off\n"
	if on {
		cmd = "on\n"
	}
	_, err := io.WriteString(s.stdin, cmd)
	return err
}

// stop ends the scraper's process and reads what it counted.
func (s *scraper) stop() error {
	if s.child == nil {
		return nil
	}
	s.stdin.Close()
	err := s.child.Wait()
	s.child = nil
	if err != nil {
		return fmt.Errorf("scraper: %w", err)
	}
	if _, err := fmt.Sscan(s.stdout.String(), &s.n, &s.bytes, &s.series); err != nil {
		return fmt.Errorf("scraper said %q: %w", s.stdout.String(), err)
	}
	return nil
}

// scrapeChild is the scraper's process: it reads url every every while its
// stdin's last line is "on", until stdin closes; then it prints its reads,
// the last one's size and its sample lines of tempotrain_ and temporal_
// series, and writes that read to dump.
func scrapeChild(url string, every time.Duration, dump string) error {
	var on atomic.Bool
	closed := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			on.Store(sc.Text() == "on")
		}
		close(closed)
	}()
	t := time.NewTicker(every)
	defer t.Stop()
	var n int
	var last []byte
	for {
		select {
		case <-closed:
			series := 0
			for _, line := range strings.Split(string(last), "\n") {
				if strings.HasPrefix(line, "tempotrain_") || strings.HasPrefix(line, "temporal_") {
					series++
				}
			}
			fmt.Println(n, len(last), series)
			if dump != "" && last != nil {
				return os.WriteFile(dump, last, 0o644)
			}
			return nil
		case <-t.C:
		}
		if !on.Load() {
			continue
		}
		// Go's client asks for gzip and inflates, as a Prometheus does.
		resp, err := http.Get(url)
		if err != nil {
			continue
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err == nil && resp.StatusCode == http.StatusOK {
			n, last = n+1, b
		}
	}
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
}

// scrapePackages are the frames of a /metrics read: the endpoint's handler,
// the exporter's conversion, the encoding and compression.
var scrapePackages = []string{
	"github.com/prometheus/",
	"go.opentelemetry.io/otel/exporters/prometheus",
	"github.com/tempotrain/tempotrain/tracing.startMetricsServer",
	"github.com/tempotrain/tempotrain/tracing.fastGzip",
	"github.com/tempotrain/tempotrain/tracing.gzipWriter",
	"github.com/tempotrain/tempotrain/tracing.expiringGatherer",
}

// telemetryShare reads a CPU profile: its samples, those with a frame of
// telemetryPackages on the stack, and of those the ones with a frame of
// scrapePackages. Unlike wall-clock throughput, this does not move with the
// neighbours' load.
func telemetryShare(p *profile.Profile) (all, tel, scrape int64) {
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
	return all, tel, scrape
}
