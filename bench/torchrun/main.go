// Command torchrun runs the same PyTorch script (python/examples/
// fashion_resnet18/train.py: ResNet-18 on Fashion-MNIST) under torchrun
// (`python3 -m torch.distributed.run --nproc_per_node 2 --max_restarts 3`)
// and under tempotrain (two Python ranks of the embedded server and
// worker), on this machine, and prints both sides and their ratios:
//
//   - first step: from the start (the command, or Fit's Start) to the end
//     of the first training step of any rank;
//   - samples/s: steady state, rank 0's steps from the 5th to the last of
//     an uninterrupted run, times the global batch;
//   - recovery: from a SIGKILL of rank 1's Python process (after -kill-at
//     steps) to the next training step ended by any rank. torchrun
//     restarts its workers (from step 0: the script keeps no checkpoint
//     in local mode); tempotrain fails the attempt and restarts the group
//     from the last committed checkpoint.
//
// Every figure is a median over -n trials. Each step's end is logged by
// the script itself (its step_log config key), so both sides are timed by
// the same code.
//
//	go run ./bench/torchrun -n 3
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tempotrain/tempotrain/app"
	"github.com/tempotrain/tempotrain/bench/internal/steplog"
	"github.com/tempotrain/tempotrain/python"
	"github.com/tempotrain/tempotrain/train"
)

var (
	trials    = flag.Int("n", 3, "trials per figure")
	interp    = flag.String("python", "/usr/bin/python3", "the interpreter with torch (Debian's)")
	script    = flag.String("script", "python/examples/fashion_resnet18/train.py", "the script, run from its directory")
	samples   = flag.Int("samples", 1024, "training images (num_samples)")
	batch     = flag.Int("batch", 32, "batch size per rank")
	epochs    = flag.Int("epochs", 1, "epochs per run")
	killAt    = flag.Int("kill-at", 8, "rank 1's step after which its process is SIGKILLed")
	threads   = flag.Int("threads", 0, "OMP_NUM_THREADS per rank (0: cores / 2)")
	skipSteps = 5
)

func main() {
	flag.Parse()
	if *threads == 0 {
		*threads = max(1, runtime.NumCPU()/2)
	}
	abs, err := filepath.Abs(*script)
	if err != nil {
		fatal(err)
	}
	*script = abs
	cpu := cpuName()
	fmt.Printf("processor: %s, %d cores; %d ranks x OMP_NUM_THREADS=%d; ResNet-18, %d images, batch %d/rank, %d epoch(s); %d trials, medians\n",
		cpu, runtime.NumCPU(), 2, *threads, *samples, *batch, *epochs, *trials)

	loc, err := app.StartLocal(app.LocalOptions{Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})),
		Worker: &app.WorkerOptions{Workflows: true, RankSlots: 2}})
	if err != nil {
		fatal(err)
	}
	defer loc.Stop()
	if err := python.Register(python.Options{Interpreter: *interp}); err != nil {
		fatal(err)
	}

	var tr, tt sides
	for i := 0; i < *trials; i++ {
		tr.add(runTorchrun(false))
		tt.add(runTempotrain(loc, false))
		tr.add(runTorchrun(true))
		tt.add(runTempotrain(loc, true))
	}
	fmt.Printf("\n%-22s %22s %22s %10s\n", "", "torchrun", "tempotrain", "ratio")
	row := func(name string, a, b []float64, unit string, higherBetter bool) {
		ma, mb := median(a), median(b)
		ratio := mb / ma
		note := "(tempotrain/torchrun; <1 is faster)"
		if higherBetter {
			note = "(tempotrain/torchrun; >=0.98 is the goal)"
		}
		fmt.Printf("%-22s %22s %22s %9.3fx %s\n", name, spread(a, unit), spread(b, unit), ratio, note)
	}
	row("first step", tr.first, tt.first, "s", false)
	row("samples/s", tr.rate, tt.rate, "", true)
	row("SIGKILL -> training", tr.recover, tt.recover, "s", false)
}

type sides struct{ first, rate, recover []float64 }

func (s *sides) add(m measure) {
	if m.first > 0 {
		s.first = append(s.first, m.first)
	}
	if m.rate > 0 {
		s.rate = append(s.rate, m.rate)
	}
	if m.recover > 0 {
		s.recover = append(s.recover, m.recover)
	}
}

type measure struct{ first, rate, recover float64 }

func scriptArgs(stepLog string) map[string]any {
	return map[string]any{"epochs": *epochs, "num_samples": *samples, "batch_size": *batch, "test_samples": 200, "step_log": stepLog, "seed": 1}
}

func runTorchrun(kill bool) measure {
	dir, err := os.MkdirTemp("", "bench-torchrun-")
	if err != nil {
		fatal(err)
	}
	defer os.RemoveAll(dir)
	log := filepath.Join(dir, "steps")
	port := 29500 + int(time.Now().UnixNano()%1000)
	// --redirects/--tee: Debian's torch 1.13 on Python 3.11 fails at start
	// without them (AttributeError: 'NoneType' object has no attribute 'get').
	args := []string{"-m", "torch.distributed.run", "--nproc_per_node", "2", "--max_restarts", "3", "--master_port", strconv.Itoa(port),
		"--redirects", "2", "--tee", "2",
		filepath.Base(*script), "--epochs", strconv.Itoa(*epochs), "--num-samples", strconv.Itoa(*samples),
		"--batch-size", strconv.Itoa(*batch), "--test-samples", "200", "--seed", "1", "--step-log", log}
	cmd := exec.Command(*interp, args...)
	cmd.Dir = filepath.Dir(*script)
	cmd.Env = append(os.Environ(), "OMP_NUM_THREADS="+strconv.Itoa(*threads), "PYTHONPATH="+pythonPath())
	out, err := os.Create(filepath.Join(dir, "out"))
	if err != nil {
		fatal(err)
	}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		fatal(err)
	}
	defer syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	m := observe(log, start, kill, done)
	if m.err != nil {
		b, _ := os.ReadFile(out.Name())
		fatal(fmt.Errorf("torchrun: %w\n%s", m.err, tailOf(string(b), 3000)))
	}
	return m.measure
}

func runTempotrain(loc *app.Local, kill bool) measure {
	dir, err := os.MkdirTemp("", "bench-tempotrain-")
	if err != nil {
		fatal(err)
	}
	defer os.RemoveAll(dir)
	log := filepath.Join(dir, "steps")
	spec := train.PythonSpec{Entrypoint: filepath.Base(*script) + ":train_func", WorkingDir: filepath.Dir(*script), Interpreter: *interp,
		Env: map[string]string{"OMP_NUM_THREADS": strconv.Itoa(*threads)}}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	start := time.Now()
	run, err := train.NewTrainer(loc.Client, "", scriptArgs(log), train.ScalingConfig{NumWorkers: 2},
		train.RunConfig{Name: fmt.Sprintf("bench-%d", time.Now().UnixNano()), StoragePath: filepath.Join(dir, "runs"), Failure: train.FailureConfig{MaxFailures: 3}},
		train.WithPython(spec)).Start(ctx)
	if err != nil {
		fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := run.Wait(ctx)
		done <- err
	}()
	m := observe(log, start, kill, done)
	if m.err != nil {
		fatal(fmt.Errorf("tempotrain: %w", m.err))
	}
	return m.measure
}

type observed struct {
	measure
	err error
}

// observe follows the step logs until the run ends: the first step's end,
// the steady rate of an uninterrupted run, or the recovery after the
// SIGKILL of rank 1's process once it ended -kill-at steps.
func observe(log string, start time.Time, kill bool, done <-chan error) observed {
	var o observed
	var killed time.Time
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		var finished bool
		var runErr error
		select {
		case runErr = <-done:
			finished = true
		case <-tick.C:
		}
		recs := steplog.Read(log)
		if len(recs) > 0 && o.first == 0 {
			o.first = recs[0].T.Sub(start).Seconds()
		}
		if kill && killed.IsZero() {
			for _, r := range recs {
				if r.Rank == 1 && r.Step >= *killAt && r.Epoch == 0 {
					if err := syscall.Kill(r.PID, syscall.SIGKILL); err != nil {
						o.err = fmt.Errorf("kill rank 1 (pid %d): %w", r.PID, err)
						return o
					}
					killed = time.Now()
					break
				}
			}
		}
		if kill && !killed.IsZero() && o.recover == 0 {
			for _, r := range recs {
				if r.T.After(killed) && r.PID != 0 && pidDiffers(recs, r, killed) {
					o.recover = r.T.Sub(killed).Seconds()
					break
				}
			}
		}
		if finished {
			if runErr != nil {
				o.err = runErr
				return o
			}
			if !kill {
				o.rate = steplog.SteadyRate(recs, skipSteps, *batch*2)
			} else if o.recover == 0 {
				o.err = errors.New("no step after the SIGKILL")
			}
			return o
		}
	}
}

// pidDiffers: r is a step of a process started after the kill (not a
// step rank 0 ended while rank 1 was already dead).
func pidDiffers(recs []steplog.Rec, r steplog.Rec, killed time.Time) bool {
	for _, q := range recs {
		if q.PID == r.PID && !q.T.After(killed) {
			return false
		}
	}
	return true
}

// pythonPath puts the repository's tempotrain package on torchrun's path,
// as a rank does.
func pythonPath() string {
	p, _ := filepath.Abs("python")
	if old := os.Getenv("PYTHONPATH"); old != "" {
		return p + ":" + old
	}
	return p
}

// spread is "median (min-max)".
func spread(v []float64, unit string) string {
	if len(v) == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f%s (%.2f-%.2f)", median(v), unit, slices.Min(v), slices.Max(v))
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

func cpuName() string {
	b, _ := os.ReadFile("/proc/cpuinfo")
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "model name") {
			if _, v, ok := strings.Cut(l, ":"); ok {
				return strings.TrimSpace(v)
			}
		}
	}
	return runtime.GOARCH
}

func tailOf(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "torchrun bench:", err)
	os.Exit(1)
}
