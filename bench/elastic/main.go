// Command elastic measures what losing a worker costs a run, elastic
// against fixed-size, on the embedded server with real worker processes (this
// binary re-executed, one rank slot each) and the default heartbeat timeout
// (60s):
//
//   - kill: 4 workers; mnist-mlp on Fashion-MNIST; one worker SIGKILLed in
//     epoch 2. Elastic (min 2, max 4): time from the SIGKILL to the next
//     attempt's first step report on 3 ranks (target: heartbeat timeout +
//     3s). Fixed (num_workers 4): the next attempt waits start_timeout
//     (-fixed-start-timeout) for a fourth worker and fails.
//   - term: the same with SIGTERM: time from the signal to the group's
//     preemption checkpoint committed (target: one step plus the checkpoint
//     write), the run going on with 3 ranks (elastic) or failing to (fixed).
//     Steps lost are not measured here: the group agrees to stop between
//     two steps and checkpoints there, and TestE2EPreemption checks that a
//     preempted run ends byte-identical to one never preempted (no step lost
//     or repeated).
//
// Every figure is a median (min-max) over -n trials.
//
//	go run ./bench/elastic -n 5
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/app"
	"github.com/tempotrain/tempotrain/builtin"
	"github.com/tempotrain/tempotrain/internal/workerproc"
	"github.com/tempotrain/tempotrain/train"
)

var quiet = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))

type config struct {
	n           int
	fixedStart  time.Duration
	lastCall    time.Duration
	dir         string
	address, rq string
	cl          client.Client
	trainCfg    map[string]any
}

func main() {
	// A worker process, one rank slot (workerproc.Start below).
	builtin.Register()
	if code, child := workerproc.Main(); child {
		os.Exit(code)
	}
	c := &config{}
	flag.IntVar(&c.n, "n", 5, "trials of each measurement")
	flag.DurationVar(&c.fixedStart, "fixed-start-timeout", 10*time.Second, "start_timeout of the fixed-size runs (how long they wait for a fourth worker)")
	flag.DurationVar(&c.lastCall, "last-call", api.DefaultLastCall, "scaling.last_call of the elastic runs")
	flag.Parse()
	if err := run(c); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(c *config) error {
	var err error
	if c.dir, err = os.MkdirTemp("", "bench-elastic-"); err != nil {
		return err
	}
	defer os.RemoveAll(c.dir)
	local, err := app.StartLocal(app.LocalOptions{Worker: &app.WorkerOptions{Workflows: true}, Logger: quiet})
	if err != nil {
		return err
	}
	defer local.Stop()
	c.cl, c.address, c.rq = local.Client, local.Server.Address, "bench-elastic"
	// 16 epochs of 64 steps of 32 rows a rank: a signal in epoch 2 leaves
	// over a dozen epochs to train after it.
	c.trainCfg = map[string]any{"epochs": 16, "batch_size": 32, "train_limit": 8192, "test_limit": 512, "seed": 1}

	type row struct {
		name  string
		times []time.Duration
		extra []float64
		fails int
	}
	var rows []*row
	for _, signal := range []syscall.Signal{syscall.SIGKILL, syscall.SIGTERM} {
		for _, elastic := range []bool{true, false} {
			r := &row{name: fmt.Sprintf("%s, %s", sigName(signal), kind(elastic))}
			rows = append(rows, r)
			for i := 0; i < c.n; i++ {
				t, x, err := c.trial(fmt.Sprintf("%s-%s-%d", strings.ToLower(sigName(signal)), kind(elastic), i), signal, elastic)
				fmt.Fprintf(os.Stderr, "%s trial %d: %v %v %v\n", r.name, i+1, t, x, err)
				if err != nil {
					r.fails++
					continue
				}
				r.times, r.extra = append(r.times, t), append(r.extra, x)
			}
		}
	}
	fmt.Printf("losing one of 4 workers (one rank slot each), mnist-mlp, default heartbeat timeout %v; elastic: min 2 max 4, last_call %v; fixed: num_workers 4, start_timeout %v; %d trials, median (min-max)\n",
		api.DefaultHeartbeatTimeout, c.lastCall, c.fixedStart, c.n)
	fmt.Printf("  %-22s %-34s %s\n", "signal, run", "signal to training on 3 ranks", "")
	for _, r := range rows {
		switch {
		case len(r.times) == 0:
			fmt.Printf("  %-22s never: %d of %d runs failed (waited start_timeout for a fourth worker)\n", r.name, r.fails, c.n)
		case strings.HasPrefix(r.name, "SIGTERM"):
			fmt.Printf("  %-22s %-34s checkpoint committed %s after the signal, at step %s of its epoch (%d of %d runs completed)\n",
				r.name, "", stat(r.times), statF(r.extra), len(r.times), c.n)
		default:
			fmt.Printf("  %-22s %-34s (%d of %d runs completed)\n", r.name, stat(r.times), len(r.times), c.n)
		}
	}
	fmt.Printf("  targets: SIGKILL -> training on 3 ranks <= heartbeat timeout + 3s (%v); SIGTERM -> checkpoint <= a step + the write\n",
		api.DefaultHeartbeatTimeout+3*time.Second)
	return nil
}

func kind(elastic bool) string {
	if elastic {
		return "elastic"
	}
	return "fixed"
}

func sigName(s syscall.Signal) string {
	if s == syscall.SIGKILL {
		return "SIGKILL"
	}
	return "SIGTERM"
}

// trial runs one run on 4 fresh worker processes and signals one of them in
// epoch 2. For SIGKILL it returns the time from the signal to the first
// report of attempt 2; for SIGTERM the time to the preemption checkpoint's
// report and the steps lost. A run that fails (fixed size, no fourth
// worker) is an error.
func (c *config) trial(name string, sig syscall.Signal, elastic bool) (time.Duration, float64, error) {
	rq := c.rq + "-" + name
	var procs []*workerproc.Proc
	defer func() {
		for _, p := range procs {
			p.Kill()
		}
	}()
	for i := range 4 {
		p, err := workerproc.Start(exec.Command(os.Args[0]), workerproc.Spec{Name: fmt.Sprintf("node-%d", i), Address: c.address, Slots: 1, RankQueue: rq})
		if err != nil {
			return 0, 0, err
		}
		procs = append(procs, p)
	}
	sc := train.ScalingConfig{NumWorkers: 4, TaskQueue: rq}
	failure := train.FailureConfig{MaxFailures: 1, StartTimeout: train.Duration(c.fixedStart)}
	if elastic {
		sc = train.ScalingConfig{MinWorkers: 2, MaxWorkers: 4, LastCall: train.Duration(c.lastCall), TaskQueue: rq}
		failure.StartTimeout = 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	run, err := train.NewTrainer(c.cl, "mnist-mlp", c.trainCfg, sc,
		train.RunConfig{Name: name, StoragePath: c.dir, Failure: failure}).Start(ctx)
	if err != nil {
		return 0, 0, err
	}
	// Wait for epoch 2 in a rank's heartbeat.
	for {
		if ctx.Err() != nil {
			return 0, 0, fmt.Errorf("never reached epoch 2")
		}
		time.Sleep(20 * time.Millisecond)
		p, err := progress(ctx, c.cl, run.WorkflowID)
		if err == nil && len(p) > 0 && maxEpoch(p) >= 1 {
			break
		}
	}
	victim := procs[3]
	signalled := time.Now()
	_ = victim.Cmd.Process.Signal(sig)
	res, err := run.Wait(ctx)
	if err != nil {
		return 0, 0, err
	}
	recs, err := readReports(filepath.Join(res.Path, "metrics.jsonl"))
	if err != nil {
		return 0, 0, err
	}
	if sig == syscall.SIGKILL {
		for _, r := range recs {
			if r.Attempt == 2 {
				return r.Time.Sub(signalled), 0, nil
			}
		}
		return 0, 0, fmt.Errorf("no report of attempt 2")
	}
	for _, r := range recs {
		if r.Metrics["preempted"] == 1 {
			return r.Time.Sub(signalled), r.Metrics["step"], nil
		}
	}
	return 0, 0, fmt.Errorf("no preemption checkpoint (world sizes %v)", res.WorldSizes)
}

// progress reads the ranks' heartbeat details: activity ID to step.
func progress(ctx context.Context, cl client.Client, workflowID string) (map[string]int, error) {
	d, err := cl.DescribeWorkflowExecution(ctx, workflowID, "")
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for _, pa := range d.GetPendingActivities() {
		var p api.Progress
		if pa.GetHeartbeatDetails() != nil && json.Unmarshal(pa.GetHeartbeatDetails().GetPayloads()[0].GetData(), &p) == nil {
			out[pa.GetActivityId()] = p.Epoch*1_000_000 + p.Step
		}
	}
	return out, nil
}

func maxEpoch(p map[string]int) int {
	m := 0
	for _, v := range p {
		m = max(m, v/1_000_000)
	}
	return m
}

func readReports(path string) ([]api.ReportRecord, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []api.ReportRecord
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var r api.ReportRecord
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

func stat(d []time.Duration) string {
	s := slices.Clone(d)
	slices.Sort(s)
	return fmt.Sprintf("%v (%v-%v)", s[len(s)/2].Round(time.Millisecond), s[0].Round(time.Millisecond), s[len(s)-1].Round(time.Millisecond))
}

func statF(v []float64) string {
	s := slices.Clone(v)
	slices.Sort(s)
	return fmt.Sprintf("%g (%g-%g)", s[len(s)/2], s[0], s[len(s)-1])
}
