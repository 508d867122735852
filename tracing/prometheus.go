package tracing

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// MetricsPath is where the Prometheus endpoint answers.
const MetricsPath = "/metrics"

// DefaultMetricsRetention is Config.MetricsRetention's default.
const DefaultMetricsRetention = 10 * time.Minute

// metricsServer is the /metrics endpoint of Config.MetricsAddr: OpenTelemetry's
// Prometheus exporter, a Reader of the process's MeterProvider beside the
// OTLP or console one, so every instrument on it (tempotrain's, the Temporal
// SDK's, serving's) is scraped. The exporter is a pull reader: it aggregates
// as any reader does and converts only when scraped, so a process nobody
// scrapes pays for the aggregation alone.
type metricsServer struct {
	reader sdkmetric.Reader
	srv    *http.Server
	addr   string
}

// startMetricsServer listens on addr ("host:port"; port 0 picks one) and
// serves the exporter's registry, with the Go runtime's and the process's
// collectors, at MetricsPath, less the series of the runs that runs says
// have ended. The reader must be given to the MeterProvider; stop closes the
// listener.
func startMetricsServer(addr string, runs *runTracker) (*metricsServer, error) {
	reg := prometheus.NewRegistry()
	if err := reg.Register(collectors.NewGoCollector()); err != nil {
		return nil, fmt.Errorf("tracing: Prometheus Go collector: %w", err)
	}
	if err := reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})); err != nil {
		return nil, fmt.Errorf("tracing: Prometheus process collector: %w", err)
	}
	// Without the scope labels: tempotrain's and the SDK's names do not
	// collide, and a series reads as its name and its own labels.
	exp, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo())
	if err != nil {
		return nil, fmt.Errorf("tracing: Prometheus exporter: %w", err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		_ = exp.Shutdown(context.Background())
		return nil, fmt.Errorf("tracing: -metrics-addr %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET "+MetricsPath, fastGzip(promhttp.HandlerFor(expiringGatherer{g: reg, runs: runs}, promhttp.HandlerOpts{
		ErrorHandling: promhttp.ContinueOnError, Registry: reg, MaxRequestsInFlight: 4,
		// No Timeout: promhttp's wraps the handler in an http.TimeoutHandler,
		// which copies the whole response into a buffer first; the server's
		// WriteTimeout bounds a scrape instead.
		DisableCompression: true, // fastGzip's
	})))
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintf(w, "tempotrain metrics: %s\n", MetricsPath)
	})
	m := &metricsServer{reader: exp, addr: ln.Addr().String(),
		srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, WriteTimeout: time.Minute}}
	go func() { _ = m.srv.Serve(ln) }()
	return m, nil
}

// gzipFast are the gzip writers of fastGzip, reused across scrapes.
var gzipFast = sync.Pool{New: func() any {
	w, _ := gzip.NewWriterLevel(nil, gzip.BestSpeed)
	return w
}}

// fastGzip serves h gzipped at gzip.BestSpeed to a client that accepts gzip
// (a Prometheus does by default), and as it is to one that does not.
// promhttp's own gzip uses the default level, which took some 40% of a
// scrape's CPU time (BenchmarkScrape16Runs): the text is repetitive enough
// that the fastest level still shrinks it 10 to 20 times.
func fastGzip(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Add("Vary", "Accept-Encoding")
		if !acceptsGzip(r.Header.Get("Accept-Encoding")) {
			h.ServeHTTP(w, r)
			return
		}
		gz := gzipFast.Get().(*gzip.Writer)
		defer gzipFast.Put(gz)
		gz.Reset(w)
		w.Header().Set("Content-Encoding", "gzip")
		h.ServeHTTP(gzipWriter{ResponseWriter: w, w: gz}, r)
		_ = gz.Close()
	})
}

// acceptsGzip says whether an Accept-Encoding header value accepts gzip
// (not with q=0).
func acceptsGzip(header string) bool {
	for _, part := range strings.Split(header, ",") {
		coding, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		if !strings.EqualFold(strings.TrimSpace(coding), "gzip") {
			continue
		}
		q, ok := strings.CutPrefix(strings.ReplaceAll(params, " ", ""), "q=")
		return !ok || strings.Trim(q, "0.") != ""
	}
	return false
}

// gzipWriter is a ResponseWriter whose body goes through w.
type gzipWriter struct {
	http.ResponseWriter
	w *gzip.Writer
}

func (g gzipWriter) Write(b []byte) (int, error) { return g.w.Write(b) }

// stop closes the endpoint: scrapes in progress get ctx's time to finish.
func (m *metricsServer) stop(ctx context.Context) error {
	if err := m.srv.Shutdown(ctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("tracing: metrics endpoint %s: %w", m.addr, err)
	}
	return nil
}

// MetricsAddr is the address the /metrics endpoint listens on ("" without
// Config.MetricsAddr): with port 0 asked, the port picked.
func (t *Telemetry) MetricsAddr() string {
	if t == nil {
		return ""
	}
	return t.metricsAddr
}

// runTracker knows which runs have ranks in this process, and since when a
// run has none: the SDK keeps every series it ever recorded (cumulative
// aggregation has no expiry), so /metrics leaves out the series of a run
// whose last rank here ended more than retention ago. A scrape's cost is
// mostly encoding what it serves: without this, each rank of each run a
// worker ever ran would add some 150 to 180 series to every scrape.
type runTracker struct {
	retention time.Duration
	mu        sync.Mutex
	runs      map[string]*runLife
}

type runLife struct {
	live  int       // ranks started and not ended
	ended time.Time // when the last one ended
}

func newRunTracker(retention time.Duration) *runTracker {
	return &runTracker{retention: retention, runs: map[string]*runLife{}}
}

// start counts a rank of run live: its series are served (again).
func (rt *runTracker) start(run string) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	l := rt.runs[run]
	if l == nil {
		l = &runLife{}
		rt.runs[run] = l
	}
	l.live++
}

// end counts a rank of run ended.
func (rt *runTracker) end(run string) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if l := rt.runs[run]; l != nil && l.live > 0 {
		l.live--
		l.ended = time.Now()
	}
}

// expired is the runs whose series are no longer served.
func (rt *runTracker) expired() map[string]bool {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	var out map[string]bool
	for run, l := range rt.runs {
		if l.live == 0 && run != "" && time.Since(l.ended) > rt.retention {
			if out == nil {
				out = map[string]bool{}
			}
			out[run] = true
		}
	}
	return out
}

// runLabels are AttrRun as a gathered metric's label: the exporter keeps
// the dots, which the encoder turns into underscores for a scraper that
// asks for legacy names; either, should that change.
var runLabels = [2]string{string(AttrRun), strings.ReplaceAll(string(AttrRun), ".", "_")}

// expiringGatherer is g's metrics less the series of expired runs.
type expiringGatherer struct {
	g    prometheus.Gatherer
	runs *runTracker
}

func (e expiringGatherer) Gather() ([]*dto.MetricFamily, error) {
	mfs, err := e.g.Gather()
	drop := e.runs.expired()
	if len(drop) == 0 {
		return mfs, err
	}
	out := mfs[:0]
	for _, mf := range mfs {
		kept := mf.Metric[:0]
		for _, m := range mf.Metric {
			if !drop[runOf(m)] {
				kept = append(kept, m)
			}
		}
		mf.Metric = kept
		if len(kept) > 0 {
			out = append(out, mf)
		}
	}
	return out, err
}

// runOf is m's run label ("" without one).
func runOf(m *dto.Metric) string {
	for _, lp := range m.GetLabel() {
		if n := lp.GetName(); n == runLabels[0] || n == runLabels[1] {
			return lp.GetValue()
		}
	}
	return ""
}
