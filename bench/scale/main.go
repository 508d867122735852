// Command scale measures one run of N ranks on the production Temporal
// server on PostgreSQL (internal/pgtemporal), with the ranks in a few worker
// processes (this binary re-executed, many rank slots each) and the Fit
// workflow's worker in this process. The training function ("scale-trivial")
// does no work of its own: per step one all-reduce of 16 floats and a sleep,
// a report every -report-every steps with a checkpoint of a few bytes, so
// what is measured is tempotrain and Temporal, not training.
//
// Per N it prints:
//
//   - formed: time from the Fit's start to rank 0's first step (a step ends
//     with an all-reduce over every rank: the whole group has formed);
//
//   - history: events and bytes of the Fit's histories (all its runs,
//     following continue-as-new), per attempt;
//
//   - workflow tasks: latency from WorkflowTaskScheduled to
//     WorkflowTaskCompleted, p50/p99/max;
//
//   - processor seconds of temporal-server, of PostgreSQL (postmaster and
//     backends), of the worker processes and of this process (the workflow
//     worker) over the run, and the server's and database's per rank per
//     minute;
//
//   - kill: one worker process SIGKILLed after the group's first step (a
//     replacement started at once, as a supervisor would): time from the
//     SIGKILL to the next attempt's first step;
//
//   - restarts (-restarts attempts, at the first N only): a run whose rank 0
//     fails after its first step until the last attempt: events and bytes per
//     attempt, the runs the Fit continued as new into, and that every report
//     of every attempt is in the result.
//
// With -runs R it measures many runs at once instead (many.go): R Fits of
// -world ranks each started together on -procs worker processes of -slots
// rank slots, all on one rank queue.
//
//	go run ./bench/scale -ranks 64,256 -procs 8
//	go run ./bench/scale -runs 100 -world 2 -procs 4 -slots 16
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/log"
	"google.golang.org/protobuf/proto"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/app"
	"github.com/tempotrain/tempotrain/bench/internal/hostinfo"
	"github.com/tempotrain/tempotrain/collective"
	"github.com/tempotrain/tempotrain/internal/pgtemporal"
	"github.com/tempotrain/tempotrain/internal/workerproc"
	"github.com/tempotrain/tempotrain/train"
)

// trivialConfig is the training function's config.
type trivialConfig struct {
	Steps       int    `json:"steps"`
	StepMS      int    `json:"step_ms"`
	ReportEvery int    `json:"report_every"`
	FailUntil   int    `json:"fail_until"` // rank 0 fails after its first step (and a checkpoint) in attempts below this
	MarkDir     string `json:"mark_dir"`   // rank 0 writes attempt-N there after attempt N's first step
}

// trivial is the training function: an all-reduce a step, reports, tiny
// checkpoints holding the step.
func trivial(ctx context.Context, tc *train.Context) error {
	cfg := trivialConfig{Steps: 20, StepMS: 100, ReportEvery: 10}
	if err := tc.Config(&cfg); err != nil {
		return err
	}
	step := 0
	if ck := tc.Checkpoint(); ck != nil {
		b, err := ck.ReadFile("step")
		if err != nil {
			return err
		}
		if step, err = strconv.Atoi(string(b)); err != nil {
			return fmt.Errorf("checkpoint %s: step %q: %w", ck.URI, b, err)
		}
	}
	buf := make([]float32, 16)
	for first := true; step < cfg.Steps; step++ {
		tc.SetProgress(0, step)
		buf[0] = float32(tc.WorldRank())
		if err := tc.Comm().AllReduceFloat32(ctx, buf, collective.Sum); err != nil {
			return err
		}
		if first && tc.WorldRank() == 0 && cfg.MarkDir != "" {
			now := time.Now()
			_ = os.WriteFile(filepath.Join(cfg.MarkDir, fmt.Sprintf("attempt-%d", tc.Attempt())), []byte(now.Format(time.RFC3339Nano)), 0o644)
		}
		if first && tc.Attempt() < cfg.FailUntil {
			// A checkpoint first: an attempt that commits one is progress,
			// so the workflow restarts without backing off.
			if err := reportStep(tc, step+1); err != nil {
				return err
			}
			if tc.WorldRank() == 0 {
				return fmt.Errorf("scale-trivial: rank 0 fails in attempt %d (fail_until %d)", tc.Attempt(), cfg.FailUntil)
			}
			// The other ranks go on: their next all-reduce fails as rank 0
			// leaves the ring, as it would on a crash.
		}
		first = false
		time.Sleep(time.Duration(cfg.StepMS) * time.Millisecond)
		if (step+1)%cfg.ReportEvery == 0 || step+1 == cfg.Steps {
			if err := reportStep(tc, step+1); err != nil {
				return err
			}
		}
	}
	return nil
}

// reportStep reports step with a checkpoint that holds it.
func reportStep(tc *train.Context, step int) error {
	dir, err := tc.NewCheckpointDir()
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "step"), []byte(strconv.Itoa(step)), 0o644); err != nil {
		return err
	}
	return tc.Report(train.Metrics{"step": float64(step)}, train.NewCheckpoint(dir))
}

var quiet = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))

func main() {
	train.MustRegister("scale-trivial", trivial)
	if code, child := workerproc.Main(); child {
		os.Exit(code)
	}
	var (
		ranks    = flag.String("ranks", "64,256", "world sizes, comma-separated")
		procs    = flag.Int("procs", 8, "worker processes (rank slots: ranks/procs each)")
		restarts = flag.Int("restarts", 20, "attempts of the restart run, at the first world size (0: none)")
		steps    = flag.Int("steps", 60, "steps of the kill run")
		stepMS   = flag.Int("step-ms", 100, "sleep per step, ms")
		timeout  = flag.Duration("timeout", 4*time.Minute, "limit of each run")
		form     = flag.Duration("form-timeout", 2*time.Minute, "how long a run may take to form its group before it is terminated and reported as not formed")
		kill     = flag.Bool("kill", true, "run the kill run at each world size (false: the restart run alone)")
		keep     = flag.Bool("keep", false, "keep the temporary directory (temporal-server.log, postgres.log) and print its path")
		runs     = flag.Int("runs", 0, "many-runs mode: this many Fits of -world ranks at once (-steps default 5, -timeout default 40m); 0: one run per -ranks")
		world    = flag.Int("world", 2, "many-runs mode: ranks of each run")
		slots    = flag.Int("slots", 16, "many-runs mode: rank slots of each of the -procs worker processes")
		pollers  = flag.Int("workflow-pollers", 0, "the Fit workflow worker's pollers (app.WorkerOptions.WorkflowPollers; 0: its default)")
		startTO  = flag.Duration("start-timeout", 30*time.Minute, "many-runs mode: each run's run.failure.start_timeout (how long a rank may wait for a slot)")
		perProc  = flag.Int("ranks-per-process", 0, "scaling.ranks_per_process of every run: ranks run k to an activity, the processes' rank slots counting bundles (0: one rank an activity)")
		hbTO     = flag.Duration("heartbeat-timeout", 0, "run.failure.heartbeat_timeout of the kill and restart runs (0: the default, raised to 3 heartbeat intervals past 64 ranks)")
	)
	ho := hostinfo.Flags(nil)
	flag.Parse()
	heartbeatTimeout, ranksPerProcess = *hbTO, *perProc
	if *runs > 0 {
		set := map[string]bool{}
		flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if !set["steps"] {
			*steps = 5
		}
		if !set["timeout"] {
			*timeout = 40 * time.Minute
		}
		if *world < 1 || *procs < 1 || *slots < 1 {
			fmt.Fprintf(os.Stderr, "scale: -world %d, -procs %d, -slots %d: each must be positive\n", *world, *procs, *slots)
			os.Exit(2)
		}
		if err := runMany(manyConfig{runs: *runs, world: *world, procs: *procs, slots: *slots, steps: *steps, stepMS: *stepMS,
			startTimeout: *startTO, timeout: *timeout, keep: *keep, pollers: *pollers}, ho); err != nil {
			fmt.Fprintln(os.Stderr, "scale:", err)
			os.Exit(1)
		}
		return
	}
	var ns []int
	for _, f := range strings.Split(*ranks, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "scale: -ranks %q: %q is not a positive number\n", *ranks, f)
			os.Exit(2)
		}
		ns = append(ns, n)
	}
	if err := run(ns, *pollers, *procs, *restarts, *steps, *stepMS, *timeout, *form, *kill, *keep, ho); err != nil {
		fmt.Fprintln(os.Stderr, "scale:", err)
		os.Exit(1)
	}
}

// heartbeatTimeout is -heartbeat-timeout, ranksPerProcess
// -ranks-per-process.
var (
	heartbeatTimeout time.Duration
	ranksPerProcess  int
)

// scaling is the ScalingConfig of the kill and restart runs of n ranks.
func (b *bench) scaling(n int) train.ScalingConfig {
	return train.ScalingConfig{NumWorkers: n, TaskQueue: b.rankQueue(n), RanksPerProcess: ranksPerProcess}
}

// rankActivities is how many RunRank activities an attempt of n ranks
// runs: n, or its bundles of -ranks-per-process.
func rankActivities(n int) int {
	return train.ScalingConfig{RanksPerProcess: ranksPerProcess}.Bundles(n)
}

// perProcessNote says how many ranks run to an activity, when over 1.
func perProcessNote() string {
	if ranksPerProcess > 1 {
		return fmt.Sprintf(", %d ranks an activity", ranksPerProcess)
	}
	return ""
}

// slots is how many rank slots each worker process has for a run of n
// ranks: its share of the run's activities (ranks, or bundles of
// ranks_per_process).
func (b *bench) slots(n int) int {
	return (rankActivities(n) + b.procs - 1) / b.procs
}

type bench struct {
	pg      *pgtemporal.Server
	c       client.Client
	dir     string
	procs   int
	timeout time.Duration
	// formTimeout bounds the wait for attempt 1's first step.
	formTimeout time.Duration
	mu          sync.Mutex // workers, for the interrupt
	workers     []*workerproc.Proc
	next        int // name of the next worker process
}

func run(ns []int, pollers, procs, restarts, steps, stepMS int, timeout, form time.Duration, kill, keep bool, ho *hostinfo.Options) error {
	hs := hostinfo.Start(os.Stdout, ho)
	defer hs.End()
	b, down, err := up(keep, pollers)
	if err != nil {
		return err
	}
	defer down()
	b.procs, b.timeout, b.formTimeout = procs, timeout, form
	for i, n := range ns {
		if err := b.startWorkers(n); err != nil {
			return err
		}
		if kill {
			r, err := b.killRun(n, steps, stepMS)
			if err != nil {
				return fmt.Errorf("%d ranks: %w", n, err)
			}
			r.print()
			if r.formed < 0 {
				b.stopWorkers()
				break // a larger group will not form either
			}
		}
		if i == 0 && restarts > 1 {
			rr, err := b.restartRun(n, restarts)
			if err != nil {
				return fmt.Errorf("%d ranks, %d attempts: %w", n, restarts, err)
			}
			rr.print()
		}
		b.stopWorkers()
	}
	return nil
}

// up makes the temporary directory (kept, and its path printed, when keep
// is set), starts PostgreSQL, temporal-server and the Fit workflow's worker
// in this process, and returns the bench; down stops the worker processes,
// the worker, the server and PostgreSQL. An interrupt (Ctrl-C, timeout's
// SIGTERM) kills the worker processes, stops the server and PostgreSQL (in
// process groups of their own) and exits.
func up(keep bool, pollers int) (_ *bench, _ func(), err error) {
	dir, err := os.MkdirTemp("", "bench-scale-")
	if err != nil {
		return nil, nil, err
	}
	var undo []func()
	down := func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}
	defer func() {
		if err != nil {
			down()
		}
	}()
	if keep {
		fmt.Printf("keeping %s\n", dir)
	} else {
		undo = append(undo, func() { os.RemoveAll(dir) })
	}
	t0 := time.Now()
	pg, err := pgtemporal.Start(context.Background(), pgtemporal.Options{Dir: filepath.Join(dir, "temporal"),
		SearchAttributes: app.TemporalSearchAttributes(), DynamicConfig: pgtemporal.RankQueueConfig})
	if err != nil {
		return nil, nil, err
	}
	undo = append(undo, pg.Close)
	fmt.Printf("PostgreSQL and temporal-server up in %v (%s)\n", time.Since(t0).Round(time.Millisecond), pg.Address)
	c, err := client.Dial(client.Options{HostPort: pg.Address, Logger: log.NewStructuredLogger(quiet)})
	if err != nil {
		return nil, nil, err
	}
	undo = append(undo, c.Close)
	w, err := app.StartWorker(c, app.WorkerOptions{Workflows: true, WorkflowPollers: pollers})
	if err != nil {
		return nil, nil, err
	}
	undo = append(undo, w.Stop)
	b := &bench{pg: pg, c: c, dir: dir}
	undo = append(undo, b.stopWorkers)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sig
		b.mu.Lock()
		for _, p := range b.workers {
			_ = p.Cmd.Process.Kill()
		}
		b.mu.Unlock()
		pg.Close()
		os.RemoveAll(dir)
		os.Exit(1)
	}()
	return b, down, nil
}

func (b *bench) rankQueue(n int) string { return fmt.Sprintf("scale-%d", n) }

// startWorkers starts b.procs worker processes with b.slots(n) slots each.
func (b *bench) startWorkers(n int) error {
	for range b.procs {
		if err := b.startWorker(n); err != nil {
			return err
		}
	}
	return nil
}

func (b *bench) startWorker(n int) error {
	return b.startWorkerOn(b.rankQueue(n), b.slots(n))
}

// startWorkerOn starts a worker process with slots rank slots on queue.
func (b *bench) startWorkerOn(queue string, slots int) error {
	p, err := workerproc.Start(exec.Command(os.Args[0]), workerproc.Spec{Name: fmt.Sprintf("w%d", b.next),
		Address: b.pg.Address, Slots: slots, RankQueue: queue, AdvertiseHost: "127.0.0.1"},
		"TEMPOTRAIN_COLLECTIVE_SHM=0")
	if err != nil {
		return err
	}
	b.next++
	b.mu.Lock()
	b.workers = append(b.workers, p)
	b.mu.Unlock()
	return nil
}

func (b *bench) stopWorkers() {
	for _, p := range b.workers {
		p.Term()
	}
	for _, p := range b.workers {
		select {
		case <-p.Exited():
		case <-time.After(20 * time.Second):
			p.Kill()
		}
	}
	b.mu.Lock()
	b.workers = nil
	b.mu.Unlock()
}

// workerCPU is the processor seconds of the live worker processes.
func (b *bench) workerCPU() float64 {
	s := 0.0
	for _, p := range b.workers {
		s += procCPU(p.Cmd.Process.Pid, false)
	}
	return s
}

type cpuSample struct {
	server, postgres, workers, controller float64
	requests                              map[string]float64 // the frontend's requests by operation
}

func (b *bench) cpu() cpuSample {
	srv, pg := b.pg.PIDs()
	return cpuSample{server: procCPU(srv, false), postgres: procCPU(pg, true) + childrenCPU(pg),
		workers: b.workerCPU(), controller: hostinfo.CPUSeconds(), requests: b.requests()}
}

func (a cpuSample) sub(o cpuSample) cpuSample {
	d := cpuSample{a.server - o.server, a.postgres - o.postgres, a.workers - o.workers, a.controller - o.controller, map[string]float64{}}
	for k, v := range a.requests {
		d.requests[k] = v - o.requests[k]
	}
	return d
}

// requests reads the server's Prometheus endpoint (its address in the
// configuration pgtemporal wrote): service_requests by operation, all
// services.
func (b *bench) requests() map[string]float64 {
	out := map[string]float64{}
	conf, err := os.ReadFile(filepath.Join(b.pg.Dir(), "config", "production.yaml"))
	if err != nil {
		return out
	}
	m := regexp.MustCompile(`listenAddress: "([^"]+)"`).FindSubmatch(conf)
	if m == nil {
		return out
	}
	resp, err := http.Get("http://" + string(m[1]) + "/metrics")
	if err != nil {
		return out
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return out
	}
	return parseRequests(string(body))
}

var operationLabel = regexp.MustCompile(`[{,]operation="([^"]+)"`)

// parseRequests sums the frontend's service_requests counters of a
// Prometheus text exposition by their operation label.
func parseRequests(body string) map[string]float64 {
	out := map[string]float64{}
	for _, line := range strings.Split(body, "\n") {
		if !strings.HasPrefix(line, "service_requests{") {
			continue
		}
		op := operationLabel.FindStringSubmatch(line)
		i := strings.LastIndexByte(line, ' ')
		if op == nil || i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		// A request the frontend passes on is counted again by the
		// service it calls: the frontend's count alone, where the
		// series say which service counted.
		if strings.Contains(line, `service_name="`) && !strings.Contains(line, `service_name="frontend"`) {
			continue
		}
		out[op[1]] += v
	}
	return out
}

// result is one run's numbers.
type result struct {
	title    string
	ranks    int
	wall     time.Duration
	formed   time.Duration // Fit start to attempt 1's first step
	killed   time.Duration // SIGKILL to attempt 2's first step (0: no kill)
	killedAt time.Time
	attempts int
	reports  int
	wantRep  int
	h        historyStats
	cpu      cpuSample
	// ends: how each attempt of a run that did not form ended.
	ends []string
}

func (r *result) print() {
	fmt.Printf("\n%s\n", r.title)
	fmt.Printf("  wall %.1f s, %d attempts, %d reports", r.wall.Seconds(), r.attempts, r.reports)
	if r.wantRep > 0 {
		fmt.Printf(" (want %d: one per failed attempt, two in the last)", r.wantRep)
	}
	fmt.Println()
	if r.formed < 0 {
		fmt.Printf("  group NOT formed; %d RunRank started, %d registrations completed (of %d), updates accepted %d\n",
			r.h.startedN, r.h.registeredN, r.ranks, r.h.updates)
		for _, e := range r.ends {
			fmt.Printf("    %s\n", e)
		}
	}
	if r.formed > 0 {
		fmt.Printf("  group formed (Fit start to every rank's first step): %.2f s\n", r.formed.Seconds())
	}
	if r.killed > 0 {
		fmt.Printf("  SIGKILL of one worker process to the next attempt's first step: %.2f s\n", r.killed.Seconds())
		p1, p2 := r.h.phases[1], r.h.phases[2]
		if p1 != nil && p2 != nil {
			since := func(t time.Time) float64 { return t.Sub(r.killedAt).Seconds() }
			fmt.Printf("    from the SIGKILL: attempt 1's groups all closed +%.2f s; attempt 2's first group started +%.2f s, its RunRank all scheduled +%.2f s, started +%.2f s, registered +%.2f s\n",
				since(p1.last), since(p2.first), since(p2.scheduled), since(p2.started), since(p2.registered))
		}
	}
	h := r.h
	a := float64(max(r.attempts, 1))
	fmt.Printf("  history: %d runs (continue-as-new %d), %d events, %.0f KiB; per attempt %.0f events (%.1f per rank), %.0f KiB; largest run %d events, %.0f KiB\n",
		h.runs, h.runs-1, h.events, float64(h.bytes)/1024, float64(h.events)/a, float64(h.events)/a/float64(r.ranks),
		float64(h.bytes)/a/1024, h.maxEvents, float64(h.maxBytes)/1024)
	if h.groups > 0 {
		fmt.Printf("  rank groups: %d executions (%.1f an attempt), %d of the events in their histories\n",
			h.groups, float64(h.groups)/a, h.groupEvents)
	}
	fmt.Printf("  workflow tasks: %d, scheduled to completed p50 %.0f ms, p99 %.0f ms, max %.0f ms; started to completed max %.0f ms\n",
		len(h.wft), pct(h.wft, 50), pct(h.wft, 99), pct(h.wft, 100), pct(h.wftRun, 100))
	if r.formed != 0 {
		fmt.Printf("  attempt 1 from the workflow's start: %d RunRank scheduled +%.2f s, started +%.2f s, %d registrations completed +%.2f s\n",
			rankActivities(r.ranks), h.scheduled.Seconds(), h.started.Seconds(), r.ranks, h.registered.Seconds())
	}
	fmt.Printf("  updates: %d accepted (%d registering); activity tasks: %d scheduled\n", h.updates, h.regUpdates, h.activities)
	min := r.wall.Minutes()
	fmt.Printf("  processor seconds: temporal-server %.1f, PostgreSQL %.1f, worker processes %.1f, controller (this process) %.1f\n",
		r.cpu.server, r.cpu.postgres, r.cpu.workers, r.cpu.controller)
	ops := []string{"QueryWorkflow", "UpdateWorkflowExecution", "RecordActivityTaskHeartbeat", "PollWorkflowTaskQueue",
		"RespondWorkflowTaskCompleted", "RespondQueryTaskCompleted", "PollActivityTaskQueue"}
	fmt.Printf("  frontend requests per rank:")
	for _, op := range ops {
		fmt.Printf(" %s %.1f", op, r.cpu.requests[op]/float64(r.ranks))
	}
	fmt.Println()
	fmt.Printf("  per rank per minute: server %.3f s, PostgreSQL %.3f s\n", r.cpu.server/float64(r.ranks)/min, r.cpu.postgres/float64(r.ranks)/min)
}

func pct(v []float64, p float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := slices.Clone(v)
	slices.Sort(s)
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[max(i, 0)]
}

// killRun runs n ranks for steps steps, SIGKILLs one worker process after
// the first step and starts another.
func (b *bench) killRun(n, steps, stepMS int) (*result, error) {
	name := fmt.Sprintf("scale-%d", n)
	marks := filepath.Join(b.dir, name+"-marks")
	if err := os.MkdirAll(marks, 0o755); err != nil {
		return nil, err
	}
	cfg := trivialConfig{Steps: steps, StepMS: stepMS, ReportEvery: 10, MarkDir: marks}
	ctx, cancel := context.WithTimeout(context.Background(), b.timeout)
	defer cancel()
	before := b.cpu()
	start := time.Now()
	run, err := train.NewTrainer(b.c, "scale-trivial", cfg, b.scaling(n),
		train.RunConfig{Name: name, StoragePath: filepath.Join(b.dir, "runs"), Failure: train.FailureConfig{MaxFailures: 1, HeartbeatTimeout: train.Duration(heartbeatTimeout)}}).Start(ctx)
	if err != nil {
		return nil, err
	}
	fctx, fcancel := context.WithTimeout(ctx, b.formTimeout)
	first, err := waitMark(fctx, marks, 1)
	fcancel()
	if err != nil {
		// Not formed: what the run cost until now, and where it stood.
		wall := time.Since(start)
		cpu := b.cpu().sub(before)
		// How its attempts ended, which the workers do not log (a
		// heartbeat timeout is the server's).
		qctx, qcancel := context.WithTimeout(ctx, 15*time.Second)
		st, qerr := train.StatusOf(qctx, b.c, run.WorkflowID)
		qcancel()
		var ends []string
		if qerr == nil {
			for _, a := range st.History {
				ends = append(ends, fmt.Sprintf("attempt %d (+%.1f s to +%.1f s): %s", a.Attempt,
					a.Start.Sub(start).Seconds(), a.End.Sub(start).Seconds(), a.Error))
			}
		}
		_ = b.c.TerminateWorkflow(ctx, run.WorkflowID, "", "bench/scale: the group did not form within -form-timeout")
		h, herr := readHistory(ctx, b.c, run.WorkflowID, run.RunID, n)
		if herr != nil {
			return nil, fmt.Errorf("attempt 1: %w; history: %v", err, herr)
		}
		return &result{title: fmt.Sprintf("%d ranks in %d worker processes (%d slots each%s): the group did NOT form within %v",
			n, b.procs, b.slots(n), perProcessNote(), b.formTimeout), ranks: n, wall: wall, formed: -1, h: h, cpu: cpu, ends: ends}, nil
	}
	victim := b.workers[0]
	// The workers' processor time until the kill, which the dead process's
	// no longer gives.
	lost := procCPU(victim.Cmd.Process.Pid, false)
	killedAt := time.Now()
	victim.Kill()
	b.mu.Lock()
	b.workers = b.workers[1:]
	b.mu.Unlock()
	if err := b.startWorker(n); err != nil {
		return nil, err
	}
	second, err := waitMark(ctx, marks, 2)
	if err != nil {
		return nil, fmt.Errorf("attempt 2 after the SIGKILL: %w", err)
	}
	res, err := run.Wait(ctx)
	if err != nil {
		return nil, err
	}
	wall := time.Since(start)
	cpu := b.cpu().sub(before)
	cpu.workers += lost
	h, err := readHistory(ctx, b.c, run.WorkflowID, run.RunID, n)
	if err != nil {
		return nil, err
	}
	return &result{title: fmt.Sprintf("%d ranks in %d worker processes (%d slots each%s), %d steps of %d ms, a report and checkpoint every 10 steps, one process SIGKILLed after the first step",
		n, b.procs, b.slots(n), perProcessNote(), steps, stepMS),
		ranks: n, wall: wall, formed: first.Sub(start), killed: second.Sub(killedAt), killedAt: killedAt, attempts: res.Attempts,
		reports: res.Reports, wantRep: -1, h: h, cpu: cpu}, nil
}

// restartRun runs n ranks whose rank 0 fails after the first step until
// attempt `attempts`, which runs 10 steps to the end.
func (b *bench) restartRun(n, attempts int) (*result, error) {
	name := fmt.Sprintf("scale-%d-restarts", n)
	cfg := trivialConfig{Steps: attempts + 10, StepMS: 10, ReportEvery: 10, FailUntil: attempts}
	ctx, cancel := context.WithTimeout(context.Background(), b.timeout)
	defer cancel()
	before := b.cpu()
	start := time.Now()
	run, err := train.NewTrainer(b.c, "scale-trivial", cfg, b.scaling(n),
		train.RunConfig{Name: name, StoragePath: filepath.Join(b.dir, "runs"), Failure: train.FailureConfig{MaxFailures: attempts, HeartbeatTimeout: train.Duration(heartbeatTimeout)}}).Start(ctx)
	if err != nil {
		return nil, err
	}
	wctx, wcancel := context.WithTimeout(ctx, b.timeout-10*time.Second)
	res, err := run.Wait(wctx)
	wcancel()
	if err != nil {
		// Not done in time: what it cost and how far it got.
		wall := time.Since(start)
		cpu := b.cpu().sub(before)
		pctx, pcancel := context.WithTimeout(context.Background(), time.Minute)
		defer pcancel()
		qctx, qcancel := context.WithTimeout(pctx, 15*time.Second)
		st, _ := train.StatusOf(qctx, b.c, run.WorkflowID)
		qcancel()
		_ = b.c.TerminateWorkflow(pctx, run.WorkflowID, "", "bench/scale: the restart run did not end within -timeout")
		h, herr := readHistory(pctx, b.c, run.WorkflowID, run.RunID, n)
		if herr != nil {
			return nil, fmt.Errorf("%w; history: %v", err, herr)
		}
		r := &result{title: fmt.Sprintf("%d ranks, %d attempts wanted: NOT done within %v (%v)", n, attempts, b.timeout-10*time.Second, err),
			ranks: n, wall: wall, h: h, cpu: cpu}
		if st != nil {
			r.attempts, r.reports = st.Attempt, st.Reports
		}
		return r, nil
	}
	wall := time.Since(start)
	cpu := b.cpu().sub(before)
	h, err := readHistory(ctx, b.c, run.WorkflowID, run.RunID, n)
	if err != nil {
		return nil, err
	}
	if res.Attempts != attempts {
		return nil, fmt.Errorf("the run took %d attempts, want %d", res.Attempts, attempts)
	}
	// One report in each failed attempt; the last resumes at step
	// attempts-1 and reports at step 10*k and at the end.
	return &result{title: fmt.Sprintf("%d ranks, %d attempts: rank 0 fails after the first step of attempts 1-%d", n, attempts, attempts-1),
		ranks: n, wall: wall, attempts: res.Attempts, reports: res.Reports, wantRep: attempts + 1, h: h, cpu: cpu}, nil
}

// waitMark waits for rank 0's mark of attempt a's first step and returns
// its time.
func waitMark(ctx context.Context, dir string, a int) (time.Time, error) {
	p := filepath.Join(dir, fmt.Sprintf("attempt-%d", a))
	for {
		if b, err := os.ReadFile(p); err == nil && len(b) > 0 {
			return time.Parse(time.RFC3339Nano, string(b))
		}
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("no first step of attempt %d: %w", a, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

type historyStats struct {
	runs, events, bytes int
	// groups: rank group executions, and the events of their histories
	// (in events too); maxEvents and maxBytes are one execution's most.
	groups, groupEvents int
	maxEvents, maxBytes int
	updates, activities int
	regUpdates          int       // register and register-batch Updates accepted
	wft, wftRun         []float64 // ms
	// The first attempt's timeline, from the first run's start: its n
	// RunRank activities scheduled, started, and n Updates completed (the
	// registrations).
	begin, end                     time.Time // the first and the last event's
	scheduled, started, registered time.Duration
	startedN, registeredN          int
	// phases: each attempt's rank groups, by attempt (grouped runs only).
	phases map[int]*phase
}

// phase is one attempt's rank groups on the clock: the first group's first
// event, the last one's last, and the last RunRank scheduled, started and
// registration completed in them.
type phase struct {
	first, last, scheduled, started, registered time.Time
}

func later(t *time.Time, u time.Time) {
	if u.After(*t) {
		*t = u
	}
}

// groupAttempt is the attempt of a rank group's workflow ID
// (<fit>/attempt-<a>/group-<g>), 0 if it is none.
func groupAttempt(id string) int {
	i := strings.LastIndex(id, "/attempt-")
	if i < 0 {
		return 0
	}
	a, err := strconv.Atoi(strings.SplitN(id[i+len("/attempt-"):], "/", 2)[0])
	if err != nil {
		return 0
	}
	return a
}

// readHistory reads the Fit's histories from runID on, following
// continue-as-new, and those of its rank groups (child workflows).
func readHistory(ctx context.Context, c client.Client, wfID, runID string, n int) (historyStats, error) {
	var s historyStats
	tl := &timeline{n: n, acts: rankActivities(n)}
	var groups []*commonpb.WorkflowExecution
	for runID != "" {
		s.runs++
		next, kids, err := readExecution(ctx, c, wfID, runID, &s, tl, true, nil)
		if err != nil {
			return s, err
		}
		groups = append(groups, kids...)
		runID = next
	}
	for _, g := range groups {
		s.groups++
		before := s.events
		a := groupAttempt(g.GetWorkflowId())
		if s.phases == nil {
			s.phases = map[int]*phase{}
		}
		ph := s.phases[a]
		if ph == nil {
			ph = &phase{}
			s.phases[a] = ph
		}
		if _, _, err := readExecution(ctx, c, g.GetWorkflowId(), g.GetRunId(), &s, tl, a == 1, ph); err != nil {
			return s, err
		}
		s.groupEvents += s.events - before
	}
	s.startedN, s.registeredN = len(tl.starts), len(tl.updates)
	if len(tl.starts) > 0 {
		s.started = slices.MaxFunc(tl.starts, time.Time.Compare).Sub(s.begin)
	}
	if len(tl.updates) > 0 {
		s.registered = slices.MaxFunc(tl.updates, time.Time.Compare).Sub(s.begin)
	}
	if !tl.lastSched.IsZero() && tl.nSched == tl.acts {
		s.scheduled = tl.lastSched.Sub(s.begin)
	}
	return s, nil
}

// timeline gathers the first attempt's n RunRank schedules, their starts
// and the n registrations, over the Fit's and its groups' histories.
type timeline struct {
	// n ranks, in acts RunRank activities (bundles of ranks_per_process).
	n, acts         int
	nSched          int
	lastSched       time.Time
	starts, updates []time.Time
}

// readExecution adds one workflow execution's history to s; first: it is
// of the first attempt (tl counts its ranks); ph, if not nil, gathers a rank
// group's phase. It returns the run it continued as new to, and the child
// workflows it started.
func readExecution(ctx context.Context, c client.Client, wfID, runID string, s *historyStats, tl *timeline, first bool, ph *phase) (string, []*commonpb.WorkflowExecution, error) {
	// RunRank schedules by event ID: true where tl counts the rank.
	runRanks := map[int64]bool{}
	regs := map[string]int{} // registrations of each register Update, by Update ID
	it := c.GetWorkflowHistory(ctx, wfID, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	next := ""
	var kids []*commonpb.WorkflowExecution
	events, bytes := 0, 0
	var scheduled, started time.Time
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			return "", nil, fmt.Errorf("history of %s/%s: %w", wfID, runID, err)
		}
		events++
		bytes += proto.Size(e)
		t := e.GetEventTime().AsTime()
		if s.begin.IsZero() {
			s.begin = t
		}
		s.end = t
		if ph != nil {
			if ph.first.IsZero() || t.Before(ph.first) {
				ph.first = t
			}
			later(&ph.last, t)
		}
		switch e.GetEventType() {
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_STARTED:
			id := e.GetActivityTaskStartedEventAttributes().GetScheduledEventId()
			counted, rank := runRanks[id]
			if counted {
				tl.starts = append(tl.starts, t)
			}
			if ph != nil && rank {
				later(&ph.started, t)
			}
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED:
			// A register Update completes one registration, a
			// register-batch Update several.
			id := e.GetWorkflowExecutionUpdateCompletedEventAttributes().GetMeta().GetUpdateId()
			if ph != nil && regs[id] > 0 {
				later(&ph.registered, t)
			}
			if first {
				for range min(regs[id], tl.n-len(tl.updates)) {
					tl.updates = append(tl.updates, t)
				}
			}
		case enumspb.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED:
			scheduled = t
		case enumspb.EVENT_TYPE_WORKFLOW_TASK_STARTED:
			started = t
		case enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
			if !scheduled.IsZero() {
				s.wft = append(s.wft, float64(t.Sub(scheduled).Microseconds())/1000)
			}
			if !started.IsZero() {
				s.wftRun = append(s.wftRun, float64(t.Sub(started).Microseconds())/1000)
			}
			scheduled, started = time.Time{}, time.Time{}
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
			s.updates++
			if k := registrations(e); k > 0 {
				s.regUpdates++
				regs[e.GetWorkflowExecutionUpdateAcceptedEventAttributes().GetAcceptedRequest().GetMeta().GetUpdateId()] = k
			}
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
			s.activities++
			if e.GetActivityTaskScheduledEventAttributes().GetActivityType().GetName() != "RunRank" {
				break
			}
			counted := first && tl.nSched < tl.acts
			runRanks[e.GetEventId()] = counted
			if counted {
				tl.nSched++
				tl.lastSched = t
			}
			if ph != nil {
				later(&ph.scheduled, t)
			}
		case enumspb.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_STARTED:
			kids = append(kids, e.GetChildWorkflowExecutionStartedEventAttributes().GetWorkflowExecution())
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
			next = continuedTo(e)
		}
	}
	s.events += events
	s.bytes += bytes
	s.maxEvents, s.maxBytes = max(s.maxEvents, events), max(s.maxBytes, bytes)
	return next, kids, nil
}

// registrations is how many registrations an accepted Update carries: one
// for register, the batch's size for register-batch, none for the others.
func registrations(e *historypb.HistoryEvent) int {
	in := e.GetWorkflowExecutionUpdateAcceptedEventAttributes().GetAcceptedRequest().GetInput()
	switch in.GetName() {
	case api.UpdateRegister:
		return 1
	case api.UpdateRegisterBatch:
		var reqs []api.RegisterRequest
		if p := in.GetArgs().GetPayloads(); len(p) == 1 && converter.GetDefaultDataConverter().FromPayload(p[0], &reqs) == nil {
			return len(reqs)
		}
	}
	return 0
}

func continuedTo(e *historypb.HistoryEvent) string {
	return e.GetWorkflowExecutionContinuedAsNewEventAttributes().GetNewExecutionRunId()
}

// procCPU is a process's user and system seconds from /proc/PID/stat, with
// its reaped children's when children is set.
func procCPU(pid int, children bool) float64 {
	if pid == 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	st, ok := parseStat(string(b))
	if !ok {
		return 0
	}
	s := st.utime + st.stime
	if children {
		s += st.cutime + st.cstime
	}
	return s
}

// stat is what procCPU and childrenCPU read of /proc/PID/stat.
type stat struct {
	ppid                         int
	utime, stime, cutime, cstime float64 // seconds
}

// parseStat reads /proc/PID/stat: the fields after the command's closing
// parenthesis (the command may hold spaces and parentheses), ppid field 4,
// utime, stime, cutime, cstime fields 14-17, in clock ticks.
func parseStat(s string) (stat, bool) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return stat{}, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 15 {
		return stat{}, false
	}
	tick := func(k int) float64 { v, _ := strconv.ParseFloat(f[k-3], 64); return v / clockTicks }
	ppid, _ := strconv.Atoi(f[1])
	return stat{ppid: ppid, utime: tick(14), stime: tick(15), cutime: tick(16), cstime: tick(17)}, true
}

// clockTicks is USER_HZ, 100 on Linux.
const clockTicks = 100

// childrenCPU sums procCPU over the live children of pid (PostgreSQL's
// backends).
func childrenCPU(pid int) float64 {
	if pid == 0 {
		return 0
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	s := 0.0
	for _, e := range ents {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", child))
		if err != nil {
			continue
		}
		if st, ok := parseStat(string(b)); ok && st.ppid == pid {
			s += st.utime + st.stime
		}
	}
	return s
}
