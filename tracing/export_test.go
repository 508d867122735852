package tracing_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tempotrain/tempotrain/tracing"
)

// The export test runs against a real OpenTelemetry Collector (tracing/otelcol:
// the OTLP receiver and the debug exporter), which .ci/setup builds.
const (
	envCollector        = "OTELCOL_BIN"
	envRequireCollector = "TEMPOTRAIN_REQUIRE_OTELCOL"
	collectorName       = "otelcol-tempotrain"
)

func collectorBin(t *testing.T) string {
	t.Helper()
	bin := os.Getenv(envCollector)
	if bin == "" {
		if p, err := exec.LookPath(collectorName); err == nil {
			bin = p
		} else if gopath, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
			bin = filepath.Join(strings.TrimSpace(string(gopath)), "bin", collectorName)
		}
	}
	if _, err := os.Stat(bin); err != nil {
		msg := fmt.Sprintf("no OpenTelemetry Collector (%s): build it with `cd tracing/otelcol && go build -o $(go env GOPATH)/bin/%s .` (.ci/setup does), or set %s", collectorName, collectorName, envCollector)
		if os.Getenv(envRequireCollector) != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return bin
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// collector is a running Collector whose debug exporter prints everything it
// receives.
type collector struct {
	grpc, http int
	cmd        *exec.Cmd
	mu         sync.Mutex
	out        strings.Builder
	done       chan struct{}
}

func startCollector(t *testing.T) *collector {
	t.Helper()
	bin := collectorBin(t)
	c := &collector{grpc: freePort(t), http: freePort(t), done: make(chan struct{})}
	cfg := fmt.Sprintf(`receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:%d
      http:
        endpoint: 127.0.0.1:%d
exporters:
  debug:
    verbosity: detailed
service:
  telemetry:
    metrics:
      level: none
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [debug]
    metrics:
      receivers: [otlp]
      exporters: [debug]
`, c.grpc, c.http)
	path := filepath.Join(t.TempDir(), "otelcol.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	pr, pw := io.Pipe()
	c.cmd = exec.Command(bin, "--config", path)
	c.cmd.Stdout, c.cmd.Stderr = pw, pw
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	go func() {
		defer close(c.done)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		once := sync.Once{}
		for sc.Scan() {
			c.mu.Lock()
			c.out.WriteString(sc.Text() + "\n")
			c.mu.Unlock()
			if strings.Contains(sc.Text(), "Everything is ready") {
				once.Do(func() { close(ready) })
			}
		}
	}()
	go func() { _ = c.cmd.Wait(); pw.Close() }()
	t.Cleanup(func() { _ = c.cmd.Process.Kill() })
	select {
	case <-ready:
	case <-c.done:
		t.Fatalf("the collector exited:\n%s", c.output())
	case <-time.After(30 * time.Second):
		t.Fatalf("the collector did not start within 30s:\n%s", c.output())
	}
	return c
}

func (c *collector) output() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.out.String()
}

// stop stops the collector and returns all it printed.
func (c *collector) stop(t *testing.T) string {
	t.Helper()
	_ = c.cmd.Process.Signal(os.Interrupt)
	select {
	case <-c.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the collector did not stop within 30s")
	}
	return c.output()
}

// span is one span as the debug exporter prints it.
type span struct{ traceID, parentID, id, name string }

var spanField = regexp.MustCompile(`^\s*(Trace ID|Parent ID|ID|Name)\s*:\s*(\S*)`)

func parseSpans(out string) map[string][]span {
	byName := map[string][]span{}
	var cur *span
	flush := func() {
		if cur != nil && cur.name != "" {
			byName[cur.name] = append(byName[cur.name], *cur)
		}
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "Span #") {
			flush()
			cur = &span{}
			continue
		}
		m := spanField.FindStringSubmatch(line)
		if m == nil || cur == nil {
			continue
		}
		switch m[1] {
		case "Trace ID":
			cur.traceID = m[2]
		case "Parent ID":
			cur.parentID = m[2]
		case "ID":
			cur.id = m[2]
		case "Name":
			cur.name = m[2]
		}
	}
	flush()
	return byName
}

// TestExportToCollector sends a rank's spans and metrics over OTLP, gRPC and
// HTTP, configured only by the standard environment variables, to a real
// Collector, and finds them there with their parents intact.
func TestExportToCollector(t *testing.T) {
	for _, proto := range []string{tracing.ProtocolGRPC, tracing.ProtocolHTTP} {
		t.Run(strings.ReplaceAll(proto, "/", "_"), func(t *testing.T) {
			c := startCollector(t)
			port := c.grpc
			if proto == tracing.ProtocolHTTP {
				port = c.http
			}
			clearEnv(t)
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", fmt.Sprintf("http://127.0.0.1:%d", port))
			t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", proto)
			service := "export-test-" + strings.ReplaceAll(proto, "/", "-")
			t.Setenv("OTEL_SERVICE_NAME", service)
			t.Setenv(tracing.EnvStepEvery, "2")
			tel, shutdown, err := tracing.Setup(context.Background(), tracing.Config{})
			if err != nil {
				t.Fatal(err)
			}
			if !tel.Enabled() {
				t.Fatal("OTEL_EXPORTER_OTLP_ENDPOINT set, but tracing is off")
			}
			ctx, act := tel.Tracer().Start(context.Background(), "RunActivity:RunRank")
			rank := tel.StartRank(ctx, tracing.RankInfo{Run: "exported", Attempt: 1, Rank: 0, WorldSize: 2})
			for step := 0; step < 3; step++ {
				rank.Progress(1, step)
				rank.Collective(ctx, "allreduce", 1<<20, time.Now().Add(-time.Millisecond), time.Millisecond, nil)
			}
			rctx, done := rank.Report(ctx, map[string]float64{tracing.SamplesMetric: 1000}, true)
			rank.BeginCheckpoint(rctx, tracing.CheckpointUpload, 1).Done(4096, time.Now(), nil)
			done(nil)
			rank.End(nil)
			act.End()
			sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := shutdown(sctx); err != nil {
				t.Fatalf("flush to the collector: %v", err)
			}
			out := c.stop(t)

			if !strings.Contains(out, "service.name: Str("+service+")") {
				t.Errorf("the collector did not receive service.name %s", service)
			}
			spans := parseSpans(out)
			t.Logf("the collector printed %d bytes: spans %v", len(out), spanCounts(spans))
			one := func(name string) span {
				t.Helper()
				if len(spans[name]) == 0 {
					t.Fatalf("no %s span reached the collector:\n%s", name, out)
				}
				return spans[name][0]
			}
			act0, epoch, report, upload := one("RunActivity:RunRank"), one(tracing.SpanEpoch), one(tracing.SpanReport), one("checkpoint.upload")
			if len(spans[tracing.SpanStep]) != 2 || len(spans["collective.allreduce"]) != 2 {
				t.Errorf("%d step and %d all-reduce spans, want 2 each (steps 0 and 2 sampled)", len(spans[tracing.SpanStep]), len(spans["collective.allreduce"]))
			}
			for _, c := range []struct {
				child, parent span
			}{{epoch, act0}, {spans[tracing.SpanStep][0], epoch}, {spans["collective.allreduce"][0], spans[tracing.SpanStep][0]}, {report, epoch}, {upload, report}} {
				if c.child.parentID != c.parent.id || c.child.traceID != act0.traceID {
					t.Errorf("%s: parent %s trace %s, want %s (%s) in trace %s", c.child.name, c.child.parentID, c.child.traceID, c.parent.id, c.parent.name, act0.traceID)
				}
			}
			for _, m := range []string{tracing.MetricSteps, tracing.MetricStepDuration, tracing.MetricCollectiveBytes, tracing.MetricCollectiveDuration,
				tracing.MetricCheckpointBytes, tracing.MetricSamplesPerSecond, tracing.MetricStepsPerSecond} {
				if !strings.Contains(out, "-> Name: "+m+"\n") {
					t.Errorf("metric %s did not reach the collector", m)
				}
			}
		})
	}
}

func spanCounts(spans map[string][]span) map[string]int {
	out := map[string]int{}
	for k, v := range spans {
		out[k] = len(v)
	}
	return out
}
