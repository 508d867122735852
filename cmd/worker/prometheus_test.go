package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"

	"github.com/tempotrain/tempotrain/app"
	"github.com/tempotrain/tempotrain/collective"
	"github.com/tempotrain/tempotrain/internal/freeport"
	"github.com/tempotrain/tempotrain/train"
)

// EnvRequirePrometheus set to 1 makes TestPrometheusScrapesWorker fail, not
// skip, where Debian's prometheus binary is missing (CI installs it).
const EnvRequirePrometheus = "TEMPOTRAIN_REQUIRE_PROMETHEUS"

// promConfig drives promFn: epochs of steps, each step an all-reduce of
// dim float64s, a checkpoint per epoch, rank 1 failing at the start of
// epoch 2 of attempt 1, and every rank holding after its last epoch of
// attempt 2 until the test lets it go.
type promConfig struct {
	Epochs int `json:"epochs"`
	Steps  int `json:"steps"`
	Dim    int `json:"dim"`
}

// promRelease lets promFn's ranks end once the test has read the metrics.
var promRelease chan struct{}

var registerProm sync.Once

func promFn(ctx context.Context, tc *train.Context) error {
	var cfg promConfig
	if err := tc.Config(&cfg); err != nil {
		return err
	}
	start := 1
	if ck := tc.Checkpoint(); ck != nil {
		b, err := ck.ReadFile("epoch")
		if err != nil {
			return err
		}
		start = int(binary.LittleEndian.Uint64(b)) + 1
	}
	buf := make([]float64, cfg.Dim)
	for epoch := start; epoch <= cfg.Epochs; epoch++ {
		// Every rank has ended the previous epoch's report, so its
		// checkpoint is committed; between the two barriers rank 1 fails,
		// and no rank has counted a step of this epoch: the steps of the
		// failed attempt are exactly its first epoch's.
		if err := tc.Comm().Barrier(ctx); err != nil {
			return err
		}
		if tc.Attempt() == 1 && epoch == 2 && tc.WorldRank() == 1 {
			return errors.New("injected failure at epoch 2")
		}
		if err := tc.Comm().Barrier(ctx); err != nil {
			return err
		}
		t0 := time.Now()
		for step := range cfg.Steps {
			tc.SetProgress(epoch, step)
			for i := range buf {
				buf[i] = float64(tc.WorldRank() + i)
			}
			if err := tc.Comm().AllReduceFloat64(ctx, buf, collective.Mean); err != nil {
				return err
			}
			tc.AddSamples(16)
			time.Sleep(time.Millisecond)
		}
		var ckpt *train.Checkpoint
		if tc.WorldRank() == 0 {
			dir, err := tc.NewCheckpointDir()
			if err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(dir, "epoch"), binary.LittleEndian.AppendUint64(nil, uint64(epoch)), 0o644); err != nil {
				return err
			}
			ckpt = train.NewCheckpoint(dir)
		}
		sps := float64(16*cfg.Steps*tc.WorldSize()) / time.Since(t0).Seconds()
		if err := tc.Report(train.Metrics{"epoch": float64(epoch), "samples_per_s": sps}, ckpt); err != nil {
			return err
		}
	}
	select { // the run goes on while Prometheus scrapes
	case <-promRelease:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// TestPrometheusScrapesWorker runs this command's worker with -metrics-addr
// against a real Temporal server, and Debian's prometheus scraping it
// during a 2-rank run whose rank 1 fails once; the series read back through
// Prometheus's HTTP API must count what the run did.
func TestPrometheusScrapesWorker(t *testing.T) {
	promBin := needPrometheus(t, "prometheus")
	const epochs, steps, dim = 3, 10, 4
	registerProm.Do(func() { train.MustRegister("prom-e2e", promFn) })
	promRelease = make(chan struct{})

	srv, err := app.StartDevServer(app.DevServerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	metricsPort, err := freeport.Pick("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	metricsAddr := fmt.Sprintf("127.0.0.1:%d", metricsPort)
	ctx, stop := context.WithCancel(context.Background())
	workerDone := make(chan error, 1)
	go func() {
		workerDone <- run(ctx, []string{"-address", srv.Address, "-metrics-addr", metricsAddr,
			"-task-queue", "tq-prom", "-rank-queue", "rq-prom", "-rank-slots", "2",
			"-advertise-host", "127.0.0.1", "-scratch", t.TempDir(), "-log-level", "error"})
	}()
	defer func() {
		stop()
		if err := <-workerDone; err != nil {
			t.Errorf("worker: %v", err)
		}
	}()

	prom := startPrometheus(t, promBin, metricsAddr)

	c, err := client.Dial(client.Options{HostPort: srv.Address,
		Logger: log.NewStructuredLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})))})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	runCtx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	released := false
	release := func() {
		if !released {
			close(promRelease)
			released = true
		}
	}
	defer release()
	tr := train.NewTrainer(c, "prom-e2e", promConfig{Epochs: epochs, Steps: steps, Dim: dim},
		train.ScalingConfig{NumWorkers: 2, TaskQueue: "rq-prom"},
		train.RunConfig{Name: "prom", StoragePath: t.TempDir(), Failure: train.FailureConfig{MaxFailures: 1}},
		train.WithTaskQueue("tq-prom"))
	run, err := tr.Start(runCtx)
	if err != nil {
		t.Fatal(err)
	}

	// Every rank counts one epoch's steps in attempt 1 and the other
	// epochs' in attempt 2 (restored from epoch 1's checkpoint); each step
	// all-reduces dim float64s; rank 0 commits a checkpoint of 8 bytes per
	// epoch and both ranks restore it once.
	perRank := float64(epochs * steps)
	checks := []promCheck{
		{`tempotrain_steps_total{tempotrain_run="prom"}`, 2, func(v float64) bool { return v == perRank }, fmt.Sprintf("%g on each rank", perRank)},
		{`tempotrain_step_duration_seconds_count{tempotrain_run="prom"}`, 2, func(v float64) bool { return v == float64(epochs*(steps-1)) }, fmt.Sprintf("%d on each rank: a step ends at the next SetProgress of its epoch", epochs*(steps-1))},
		{`tempotrain_samples_per_second{tempotrain_run="prom"}`, 2, func(v float64) bool { return v > 0 }, "> 0 on each rank"},
		// Heartbeats read the samples: attempt 1's last ones before its
		// failure may go unread, attempt 2's all are (the ranks are held).
		{`tempotrain_samples_total{tempotrain_run="prom"}`, 2, func(v float64) bool { return v >= 16*steps && v <= 16*perRank }, fmt.Sprintf("in [%d, %g] on each rank: 16 a step", 16*steps, 16*perRank)},
		{`tempotrain_steps_per_second{tempotrain_run="prom"}`, 2, func(v float64) bool { return v > 0 && v < 1000 }, "in (0, 1000): steps sleep 1ms"},
		{`tempotrain_collective_bytes_total{tempotrain_run="prom",tempotrain_op="allreduce"}`, 2, func(v float64) bool { return v == perRank*dim*8 }, fmt.Sprintf("%g on each rank", perRank*dim*8)},
		{`tempotrain_collective_duration_seconds_count{tempotrain_run="prom",tempotrain_op="allreduce"}`, 2, func(v float64) bool { return v == perRank }, fmt.Sprintf("%g on each rank", perRank)},
		{`sum(tempotrain_checkpoint_bytes_total{tempotrain_run="prom",tempotrain_op="upload"})`, 1, func(v float64) bool { return v == epochs*8 }, fmt.Sprintf("%d: %d checkpoints of 8 bytes", epochs*8, epochs)},
		{`sum(tempotrain_checkpoint_bytes_total{tempotrain_run="prom",tempotrain_op="restore"})`, 1, func(v float64) bool { return v == 2*8 }, "16: two ranks restored 8 bytes"},
		{`sum(tempotrain_rendezvous_duration_seconds_count{tempotrain_run="prom"})`, 1, func(v float64) bool { return v == 4 }, "4: 2 ranks × 2 attempts"},
		{`tempotrain_restarts_total{tempotrain_run="prom"}`, 1, func(v float64) bool { return v == 1 }, "1 after the injected failure"},
		// The SDK's counters are OpenTelemetry UpDownCounters: no _total.
		{`sum(temporal_request{namespace="default"})`, 1, func(v float64) bool { return v > 0 }, "> 0: the Temporal SDK's metrics"},
		{`temporal_worker_task_slots_used{worker_type="ActivityWorker",task_queue="rq-prom"}`, 1, func(v float64) bool { return v == 2 }, "2: both rank slots hold a rank"},
		{`up{job="tempotrain-worker"}`, 1, func(v float64) bool { return v == 1 }, "1"},
	}
	var bad []string
	deadline := time.Now().Add(2 * time.Minute)
	for {
		bad = bad[:0]
		for _, ch := range checks {
			if msg := prom.check(ch); msg != "" {
				bad = append(bad, msg)
			}
		}
		if len(bad) == 0 || time.Now().After(deadline) {
			break
		}
		select {
		case <-time.After(500 * time.Millisecond):
		case <-runCtx.Done():
			t.Fatal(runCtx.Err())
		}
	}
	for _, msg := range bad {
		t.Error(msg)
	}
	if testing.Verbose() || t.Failed() {
		for _, ch := range checks {
			t.Logf("%s = %v", ch.query, prom.values(ch.query))
		}
		t.Logf("series names: %s", strings.Join(prom.names(t), " "))
		t.Logf("series of the run: %v", prom.values(`count by (tempotrain_rank) ({__name__=~"tempotrain_.+", tempotrain_run="prom"})`))
	}
	release()
	res, err := run.Wait(runCtx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Attempts != 2 {
		t.Errorf("the run took %d attempts, want 2", res.Attempts)
	}
}

// needPrometheus is the path of a binary of Debian's prometheus package
// (prometheus, promtool); without it the test is skipped, or fails where
// EnvRequirePrometheus is 1.
func needPrometheus(t *testing.T, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv(EnvRequirePrometheus) == "1" {
			t.Fatalf("%s=1 and no %s: %v (apt-get install prometheus)", EnvRequirePrometheus, name, err)
		}
		t.Skipf("no %s (apt-get install prometheus; %s=1 makes this a failure): %v", name, EnvRequirePrometheus, err)
	}
	return path
}

// promCheck is a query whose every series (n of them) must satisfy ok.
type promCheck struct {
	query string
	n     int
	ok    func(float64) bool
	want  string
}

type promServer struct {
	t    *testing.T
	base string
}

// startPrometheus runs prometheus with a configuration that scrapes target
// every 250ms, and waits until it is ready.
func startPrometheus(t *testing.T, bin, target string) *promServer {
	t.Helper()
	dir := t.TempDir()
	cfg := fmt.Sprintf(`global:
  scrape_interval: 250ms
  scrape_timeout: 200ms
scrape_configs:
  - job_name: tempotrain-worker
    static_configs:
      - targets: [%q]
`, target)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	port, err := freeport.Pick("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	log, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+addr, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		log.Close()
		if t.Failed() {
			b, _ := os.ReadFile(log.Name())
			t.Logf("prometheus's log:\n%s", b)
		}
	})
	p := &promServer{t: t, base: "http://" + addr}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(p.base + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
		select {
		case err := <-exited:
			b, _ := os.ReadFile(log.Name())
			t.Fatalf("prometheus exited: %v\n%s", err, b)
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus at %s not ready after 30s: %v", addr, err)
		}
	}
}

// apiResult is the part of /api/v1/query's answer that an instant vector
// query fills.
type apiResult struct {
	Status string `json:"status"`
	Error  string `json:"error"`
	Data   struct {
		Result []struct {
			Metric map[string]string `json:"metric"`
			Value  [2]any            `json:"value"`
		} `json:"result"`
	} `json:"data"`
}

// values runs query through the HTTP API: each series' labels (less
// __name__, job and instance) and value.
func (p *promServer) values(query string) map[string]float64 {
	resp, err := http.Get(p.base + "/api/v1/query?query=" + url.QueryEscape(query))
	if err != nil {
		p.t.Fatalf("query %s: %v", query, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var r apiResult
	if err := json.Unmarshal(b, &r); err != nil || r.Status != "success" {
		p.t.Fatalf("query %s: %s %v %s", query, resp.Status, err, b)
	}
	out := map[string]float64{}
	for _, s := range r.Data.Result {
		var labels []string
		for k, v := range s.Metric {
			if k != "__name__" && k != "job" && k != "instance" {
				labels = append(labels, k+"="+v)
			}
		}
		sort.Strings(labels)
		str, _ := s.Value[1].(string)
		v, err := strconv.ParseFloat(str, 64)
		if err != nil {
			p.t.Fatalf("query %s: value %v: %v", query, s.Value[1], err)
		}
		out["{"+strings.Join(labels, ",")+"}"] = v
	}
	return out
}

// check says what is wrong with c's series now ("" if nothing).
func (p *promServer) check(c promCheck) string {
	vs := p.values(c.query)
	if len(vs) != c.n {
		return fmt.Sprintf("%s: %d series %v, want %d", c.query, len(vs), vs, c.n)
	}
	for labels, v := range vs {
		if !c.ok(v) {
			return fmt.Sprintf("%s%s = %g, want %s", c.query, labels, v, c.want)
		}
	}
	return ""
}

// names lists the metric names Prometheus holds from tempotrain and
// Temporal.
func (p *promServer) names(t *testing.T) []string {
	resp, err := http.Get(p.base + "/api/v1/label/__name__/values")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r struct {
		Data []string `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, n := range r.Data {
		if strings.HasPrefix(n, "tempotrain_") || strings.HasPrefix(n, "temporal_") {
			out = append(out, n)
		}
	}
	return out
}
