package tracing

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// MetricsPath is where the Prometheus endpoint answers.
const MetricsPath = "/metrics"

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
// collectors, at MetricsPath. The reader must be given to the
// MeterProvider; stop closes the listener.
func startMetricsServer(addr string) (*metricsServer, error) {
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
	mux.Handle("GET "+MetricsPath, promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorHandling: promhttp.ContinueOnError, Registry: reg, MaxRequestsInFlight: 4, Timeout: 30 * time.Second,
	}))
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintf(w, "tempotrain metrics: %s\n", MetricsPath)
	})
	m := &metricsServer{reader: exp, addr: ln.Addr().String(),
		srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, WriteTimeout: time.Minute}}
	go func() { _ = m.srv.Serve(ln) }()
	return m, nil
}

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
