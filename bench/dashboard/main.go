// Command dashboard measures what an open dashboard run page costs a
// training run (issue 31 item 5), by bench/tracing's method: the demo run
// of `starter dev` (built-in mnist-mlp, 2 ranks, Fashion-MNIST, the
// embedded server and worker in this process) with a run page polling it
// ("on") and without ("off"), alternated, the order flipping every pair,
// after one untimed warm-up run of each.
//
//	go run ./bench/dashboard              # 7 pairs of 2-epoch runs
//	go run ./bench/dashboard -pairs 5 -epochs 1 -every 1s
//
// "On" is what the run page's JavaScript does while a run trains, done
// from Go against the dashboard's handler served over HTTP in this
// process: every -every (the page's 2 s) GET /api/runs/{id} (Describe, the
// status Query the worker answers, run.json), /api/runs/{id}/metrics
// (the reports since the last poll), /api/runs/{id}/logs and the newest
// rank log's tail. A run's samples/s is the mean of its epochs'
// samples_per_s; it also prints samples per CPU-second of this whole
// process (server, worker, ranks, dashboard, poller), and the share of the
// "on" runs' CPU profile samples with the dashboard's code or the poller
// on the stack.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/pprof/profile"

	"github.com/tempotrain/tempotrain/activities"
	"github.com/tempotrain/tempotrain/app"
	"github.com/tempotrain/tempotrain/bench/internal/hostinfo"
	"github.com/tempotrain/tempotrain/builtin"
	"github.com/tempotrain/tempotrain/dashboard"
	"github.com/tempotrain/tempotrain/train"
)

func main() {
	pairs := flag.Int("pairs", 7, "on/off pairs (at least 3 for a median)")
	epochs := flag.Int("epochs", 2, "epochs per run")
	every := flag.Duration("every", 2*time.Second, "how often the page polls (the run page's 2 s)")
	flag.Parse()
	if err := run(*pairs, *epochs, *every); err != nil {
		fmt.Fprintln(os.Stderr, "bench/dashboard:", err)
		os.Exit(1)
	}
}

// side is "on" or "off" and what its timed runs measured.
type side struct {
	name                  string
	perSecond, perCPU     []float64
	profAll, profDash     int64
	profTemporal          int64
	polls, pollErrs       int64
	pollBytes, pollMillis int64
}

func run(pairs, epochs int, every time.Duration) error {
	builtin.Register()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	slog.SetDefault(logger)
	ctx := context.Background()
	local, err := app.StartLocal(app.LocalOptions{
		Worker: &app.WorkerOptions{Workflows: true, TaskQueue: "bench-dash", RankSlots: 2, RankQueue: "bench-dash-ranks",
			Activities: activities.Options{Logger: logger}},
		Logger: logger,
	})
	if err != nil {
		return err
	}
	defer local.Stop()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: dashboard.New(dashboard.Options{Client: local.Client}).Handler()}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	base := "http://" + ln.Addr().String()

	dir, err := os.MkdirTemp("", "bench-dashboard")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	cfg := map[string]any{"epochs": epochs, "batch_size": 128, "lr": 0.05, "seed": 1}
	fmt.Printf("mnist-mlp, 2 ranks, %d epochs per run, embedded server; on: a run page's API calls every %v\n", epochs, every)
	on, off := &side{name: "on"}, &side{name: "off"}
	runs := 0
	fit := func(s *side, record bool) error {
		runs++
		name := fmt.Sprintf("%s-%d", s.name, runs)
		var prof bytes.Buffer
		if record {
			if err := pprof.StartCPUProfile(&prof); err != nil {
				return err
			}
		}
		t0, cpu0 := time.Now(), hostinfo.CPUSeconds()
		r, err := train.NewTrainer(local.Client, "mnist-mlp", cfg, train.ScalingConfig{NumWorkers: 2, TaskQueue: "bench-dash-ranks"},
			train.RunConfig{Name: name, StoragePath: dir}, train.WithTaskQueue("bench-dash")).Start(ctx)
		var res *train.Result
		if err == nil {
			var p *poller
			if s == on {
				p = startPoller(base, r.WorkflowID, every, s)
			}
			res, err = r.Wait(ctx)
			if p != nil {
				p.stop()
			}
		}
		cpu := hostinfo.CPUSeconds() - cpu0
		if record {
			pprof.StopCPUProfile()
		}
		if err != nil {
			return fmt.Errorf("run %s: %w", name, err)
		}
		sps, samples, _, err := hostinfo.ReadRun(res.Path)
		if err != nil {
			return err
		}
		note := " (warm-up)"
		if record {
			all, dash, temporal, err := dashboardShare(&prof)
			if err != nil {
				return err
			}
			s.profAll += all
			s.profDash += dash
			s.profTemporal += temporal
			s.perSecond = append(s.perSecond, sps)
			s.perCPU = append(s.perCPU, samples/cpu)
			note = ""
		}
		fmt.Printf("  dashboard %-3s %8.0f samples/s  %7.0f samples/CPU-s  %5.1f s%s\n", s.name, sps, samples/cpu, time.Since(t0).Seconds(), note)
		return nil
	}
	for _, s := range []*side{on, off} {
		if err := fit(s, false); err != nil {
			return err
		}
	}
	on.polls, on.pollErrs, on.pollBytes, on.pollMillis = 0, 0, 0, 0
	for i := range pairs {
		order := []*side{on, off}
		if i%2 == 1 {
			slices.Reverse(order)
		}
		for _, s := range order {
			if err := fit(s, true); err != nil {
				return err
			}
		}
	}
	hostinfo.OnOff("samples/s", on.perSecond, off.perSecond)
	hostinfo.OnOff("samples/CPU-s", on.perCPU, off.perCPU)
	for _, s := range []*side{on, off} {
		fmt.Printf("CPU profile of the %-3s runs: %5.2f%% of %d samples have the dashboard's code or the poller on the stack\n",
			s.name, 100*float64(s.profDash)/float64(max(s.profAll, 1)), s.profAll)
		fmt.Printf("  the Temporal server and SDK answering Queries and Describes: %5.2f%%\n", 100*float64(s.profTemporal)/float64(max(s.profAll, 1)))
	}
	fmt.Printf("polls of the on runs: %d (%d failed), %d KiB answered, %.1f ms a poll (its 4 requests) on average\n",
		on.polls, on.pollErrs, on.pollBytes>>10, float64(on.pollMillis)/float64(max(on.polls, 1)))
	return nil
}

// poller does what an open run page does while its run trains.
type poller struct {
	done, stopped chan struct{}
}

func startPoller(base, id string, every time.Duration, s *side) *poller {
	p := &poller{done: make(chan struct{}), stopped: make(chan struct{})}
	var n atomic.Int64
	go func() {
		defer close(p.stopped)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			t0 := time.Now()
			b, err := p.poll(base, id)
			s.polls++
			s.pollBytes += int64(b)
			s.pollMillis += time.Since(t0).Milliseconds()
			if err != nil {
				s.pollErrs++
				if n.Add(1) == 1 {
					fmt.Fprintln(os.Stderr, "  poll:", err)
				}
			}
			select {
			case <-p.done:
				return
			case <-t.C:
			}
		}
	}()
	return p
}

func (p *poller) stop() { close(p.done); <-p.stopped }

// poll makes one round of the run page's requests; it returns the bytes
// answered.
func (p *poller) poll(base, id string) (int, error) {
	size := 0
	get := func(path string, v any) error {
		resp, err := http.Get(base + path)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		size += len(b)
		if err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s: %s", path, resp.Status, b)
		}
		if v != nil {
			return json.Unmarshal(b, v)
		}
		return nil
	}
	var logs []dashboard.LogInfo
	for _, path := range []string{"/api/runs/" + id, "/api/runs/" + id + "/metrics"} {
		if err := get(path, nil); err != nil {
			return size, err
		}
	}
	if err := get("/api/runs/"+id+"/logs", &logs); err != nil {
		return size, err
	}
	if len(logs) > 0 {
		return size, get(logs[len(logs)-1].URL, nil)
	}
	return size, nil
}

// dashboardPackages are the frames of the dashboard's work: its handlers
// and what they call, and this program's poller (the browser's side).
var dashboardPackages = []string{"github.com/tempotrain/tempotrain/dashboard.", "main.(*poller)", "main.startPoller"}

// temporalCall says whether a function is the Temporal server's or SDK's
// (the embedded server, the worker) serving the calls a run page causes:
// a workflow Query (the status the worker answers) or a Describe. The
// trainer's own Fit makes some too, so the off runs' share is the baseline.
func temporalCall(name string) bool {
	return strings.HasPrefix(name, "go.temporal.io/") &&
		(strings.Contains(name, "Query") || strings.Contains(name, "DescribeWorkflowExecution"))
}

// dashboardShare reads a CPU profile: its samples, those with a frame of
// dashboardPackages on the stack, and those with a temporalCall frame.
func dashboardShare(r io.Reader) (all, dash, temporal int64, err error) {
	p, err := profile.Parse(r)
	if err != nil {
		return 0, 0, 0, fmt.Errorf("CPU profile: %w", err)
	}
	has := func(s *profile.Sample, f func(string) bool) bool {
		return slices.ContainsFunc(s.Location, func(loc *profile.Location) bool {
			return slices.ContainsFunc(loc.Line, func(l profile.Line) bool { return l.Function != nil && f(l.Function.Name) })
		})
	}
	isDash := func(name string) bool {
		return slices.ContainsFunc(dashboardPackages, func(p string) bool { return strings.HasPrefix(name, p) })
	}
	for _, s := range p.Sample {
		all += s.Value[0]
		if has(s, isDash) {
			dash += s.Value[0]
		}
		if has(s, temporalCall) {
			temporal += s.Value[0]
		}
	}
	return all, dash, temporal, nil
}
