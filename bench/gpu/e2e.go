package main

// The GPU checks that go through whole runs (issue 28, items 2 and 3), in
// the same binary as the benchmark so that one carried file holds the
// in-process Temporal server, the workflow worker and the GPU worker:
//
//	gpubench fit    a use_gpu Fit of mnist-cnn on a GPU worker process; once
//	                the first checkpoint is committed that worker is
//	                SIGKILLed and a second one takes the run over from it
//	gpubench python the ResNet-18 script of python/examples under torchrun
//	                (one process) and as a use_gpu Python Fit of one rank
//	                (nccl), alternating, samples/s from the script's step log
//	gpubench worker a GPU worker (the child both start)
//
// Each prints JSON lines (kind "fit-e2e", "python") that "gpubench report"
// reads along with the benchmark's.

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"

	"github.com/tempotrain/tempotrain/activities"
	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/app"
	"github.com/tempotrain/tempotrain/bench/internal/steplog"
	"github.com/tempotrain/tempotrain/builtin"
	"github.com/tempotrain/tempotrain/compute"
	"github.com/tempotrain/tempotrain/python"
	"github.com/tempotrain/tempotrain/train"
)

// gpuBackend opens the CUDA backend of a GPU; set by the -tags cuda build.
var gpuBackend func(device int) (compute.Backend, error)

// E2E is one line of the whole-run checks.
type E2E struct {
	Side  string `json:"side"`
	Kind  string `json:"kind"` // "fit-e2e" or "python"
	Model string `json:"model,omitempty"`
	// fit-e2e
	Attempts     int     `json:"attempts,omitempty"`
	Failures     int     `json:"failures,omitempty"`
	RestoredFrom int     `json:"restored_from,omitempty"`
	KillAfterSeq int     `json:"kill_after_seq,omitempty"`
	ResumeS      float64 `json:"kill_to_attempt2_s,omitempty"`
	TestAcc      float64 `json:"test_accuracy,omitempty"`
	Epochs       float64 `json:"epochs,omitempty"`
	// python
	Samples float64 `json:"samples_per_s,omitempty"`
	FirstS  float64 `json:"first_step_s,omitempty"`
	Steps   int     `json:"steps,omitempty"`
	Seconds float64 `json:"seconds"`
	Note    string  `json:"note,omitempty"`
}

func emitE2E(e E2E) {
	b, _ := json.Marshal(e)
	fmt.Println(string(b))
}

func e2eMain(cmd string, args []string) error {
	switch cmd {
	case "worker":
		return runGPUWorker(args)
	case "fit":
		return runFitE2E(args)
	case "python":
		return runPythonE2E(args)
	}
	return fmt.Errorf("unknown command %q", cmd)
}

// runGPUWorker is the GPU worker process: rank slots on the GPU queue, one
// per listed GPU, the built-ins on the CUDA backend and Python ranks.
func runGPUWorker(args []string) error {
	fs := flag.NewFlagSet("worker", flag.ExitOnError)
	addr := fs.String("address", "", "Temporal frontend host:port")
	gpus := fs.String("gpus", "0", "GPU ordinals, comma-separated")
	fs.StringVar(&interpreter, "python", "python3", "Python interpreter of Python ranks")
	scratch := fs.String("scratch", "", "scratch directory of the ranks")
	_ = fs.Parse(args)
	var devices []int // none (-gpus ""): a CPU worker, for -cpu
	for _, f := range strings.FieldsFunc(*gpus, func(r rune) bool { return r == ',' }) {
		d, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || d < 0 {
			return fmt.Errorf("-gpus %q: %q is not a GPU ordinal", *gpus, f)
		}
		devices = append(devices, d)
	}
	useGPU = len(devices) > 0
	if err := register(); err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	c, err := client.Dial(client.Options{HostPort: *addr, Logger: tlog.NewStructuredLogger(logger)})
	if err != nil {
		return err
	}
	defer c.Close()
	w, err := app.StartWorker(c, app.WorkerOptions{Namespace: "default", Workflows: false, RankSlots: max(1, len(devices)),
		Activities: activities.Options{Devices: devices, ScratchDir: *scratch, Logger: logger}})
	if err != nil {
		return err
	}
	logger.Info("GPU worker started", "pid", os.Getpid(), "gpus", devices)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	w.Stop()
	return nil
}

var (
	interpreter = "python3"
	// useGPU: false (-cpu) runs the same commands on CPU ranks, to try them
	// on a machine without a GPU.
	useGPU = true
	// torchrunArgs are extra arguments of torch.distributed.run (Debian's
	// torch 1.13 needs "--redirects 2 --tee 2").
	torchrunArgs string
)

func register() error {
	if useGPU && gpuBackend == nil {
		return errors.New("built without -tags cuda: no GPU backend (-cpu runs CPU ranks)")
	}
	if err := builtin.RegisterWith(builtin.Options{GPUBackend: gpuBackend}); err != nil {
		return err
	}
	return python.Register(python.Options{Interpreter: interpreter})
}

// startAll makes a scratch directory for a command, starts the in-process
// server and workflow worker, and a GPU worker process; data is dataDir made
// absolute (the worker process reads it too).
func startAll(dataDir, cmd, worker string) (data, dir string, loc *app.Local, w *gpuWorker, err error) {
	if data, err = filepath.Abs(dataDir); err != nil {
		return
	}
	if dir, err = os.MkdirTemp("", "gpubench-"+cmd+"-"); err != nil {
		return
	}
	if loc, err = local(); err != nil {
		return
	}
	if w, err = startGPUWorker(loc.Server.Address, dir, worker); err != nil {
		loc.Stop()
	}
	return
}

// local starts the in-process server and workflow worker (no rank slots:
// every rank goes to the GPU worker process).
func local() (*app.Local, error) {
	if err := register(); err != nil {
		return nil, err
	}
	return app.StartLocal(app.LocalOptions{Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})),
		Worker: &app.WorkerOptions{Workflows: true, RankSlots: 0}})
}

// gpuWorker is a GPU worker child process of this binary.
type gpuWorker struct {
	cmd *exec.Cmd
	log string
}

func startGPUWorker(addr, dir, name string) (*gpuWorker, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	logPath := filepath.Join(dir, name+".log")
	out, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	gpus := "0"
	if !useGPU {
		gpus = ""
	}
	cmd := exec.Command(self, "worker", "-address", addr, "-gpus", gpus, "-python", interpreter, "-scratch", filepath.Join(dir, name+"-scratch"))
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() { _ = cmd.Wait(); out.Close() }()
	return &gpuWorker{cmd: cmd, log: logPath}, nil
}

// kill SIGKILLs the worker's process group (its Python ranks too).
func (g *gpuWorker) kill() { _ = syscall.Kill(-g.cmd.Process.Pid, syscall.SIGKILL) }

func (g *gpuWorker) tail() string {
	b, _ := os.ReadFile(g.log)
	return tailOf(string(b), 2000)
}

func tailOf(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// runFitE2E: a use_gpu Fit of mnist-cnn to completion, its GPU worker
// SIGKILLed once the first checkpoint is committed, a second worker
// finishing it from there.
func runFitE2E(args []string) error {
	fs := flag.NewFlagSet("fit", flag.ExitOnError)
	dataDir := fs.String("data", "data", "Fashion-MNIST's IDX files")
	epochs := fs.Int("epochs", 4, "epochs of the run")
	model := fs.String("model", "mnist-cnn", "built-in training function")
	killAfter := fs.Int("kill-after", 1, "SIGKILL the GPU worker once this checkpoint seq is committed (0: no kill)")
	timeout := fs.Duration("timeout", 4*time.Minute, "bound on the whole run")
	cpu := fs.Bool("cpu", false, "CPU ranks instead (to try the command without a GPU)")
	_ = fs.Parse(args)
	useGPU = !*cpu
	data, dir, loc, a, err := startAll(*dataDir, "fit", "worker-a")
	if err != nil {
		return err
	}
	defer loc.Stop()
	defer a.kill()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	cfg := map[string]any{"epochs": *epochs, "batch_size": 128, "lr": 0.05, "seed": 1, "data_dir": data}
	storage := filepath.Join(dir, "runs")
	start := time.Now()
	run, err := train.NewTrainer(loc.Client, *model, cfg, train.ScalingConfig{NumWorkers: 1, UseGPU: useGPU},
		train.RunConfig{Name: "gpu-fit", StoragePath: storage,
			Failure: train.FailureConfig{MaxFailures: 3, HeartbeatTimeout: api.Duration(5 * time.Second), StartTimeout: api.Duration(2 * time.Minute)}}).Start(ctx)
	if err != nil {
		return err
	}
	type waited struct {
		res *train.Result
		err error
	}
	done := make(chan waited, 1)
	go func() { r, err := run.Wait(ctx); done <- waited{r, err} }()
	var killed time.Time
	var b *gpuWorker
	runJSON := filepath.Join(storage, "gpu-fit", "run.json")
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var w waited
wait:
	for {
		select {
		case w = <-done:
			break wait
		case <-tick.C:
		}
		// Killed once run.json lists the checkpoint (committed: the workflow
		// recorded rank 0's report), not when its manifest appears: a rank 0
		// killed between writing a checkpoint and reporting it leaves one
		// the run never committed (abandoned_seqs), and attempt 2 rightly
		// starts from the one before (seen on the H200: an epoch there takes
		// 0.3 s, and the kill fell in that gap).
		if *killAfter > 0 && killed.IsZero() {
			if committed(runJSON, *killAfter) {
				a.kill()
				killed = time.Now()
				fmt.Fprintf(os.Stderr, "fit: checkpoint %d committed after %.1fs; GPU worker A (pid %d) SIGKILLed; worker B started\n",
					*killAfter, killed.Sub(start).Seconds(), a.cmd.Process.Pid)
				if b, err = startGPUWorker(loc.Server.Address, dir, "worker-b"); err != nil {
					return err
				}
				defer b.kill()
			}
		}
	}
	if w.err != nil {
		msg := fmt.Sprintf("%v\nworker A: %s", w.err, a.tail())
		if b != nil {
			msg += "\nworker B: " + b.tail()
		}
		return errors.New(msg)
	}
	e := E2E{Side: "tempotrain", Kind: "fit-e2e", Model: *model, Attempts: w.res.Attempts, Failures: w.res.Failures, KillAfterSeq: *killAfter,
		Seconds: time.Since(start).Seconds()}
	e.TestAcc, e.Epochs = w.res.Metrics["test_accuracy"], w.res.Metrics["epoch"]
	var st api.RunState
	if raw, err := os.ReadFile(filepath.Join(storage, "gpu-fit", "run.json")); err == nil && json.Unmarshal(raw, &st) == nil {
		for _, h := range st.History {
			if h.Attempt == 2 {
				e.RestoredFrom = h.RestoredFrom
				if !killed.IsZero() {
					e.ResumeS = h.Start.Sub(killed).Seconds()
				}
			}
		}
	}
	var problems []string
	if *killAfter > 0 {
		if killed.IsZero() {
			problems = append(problems, fmt.Sprintf("the run ended before checkpoint %d was committed: no kill", *killAfter))
		}
		if w.res.Attempts < 2 || w.res.Failures < 1 {
			problems = append(problems, fmt.Sprintf("%d attempts, %d failures after the SIGKILL (want >= 2, >= 1)", w.res.Attempts, w.res.Failures))
		}
		if e.RestoredFrom < *killAfter {
			problems = append(problems, fmt.Sprintf("attempt 2 restored checkpoint %d, want >= %d", e.RestoredFrom, *killAfter))
		}
	}
	e.Note = strings.Join(problems, "; ")
	emitE2E(e)
	if len(problems) > 0 {
		return errors.New(e.Note)
	}
	return nil
}

// committed reports whether run.json lists a checkpoint seq ≥ seq.
func committed(runJSON string, seq int) bool {
	raw, err := os.ReadFile(runJSON)
	if err != nil {
		return false
	}
	var st api.RunState
	if json.Unmarshal(raw, &st) != nil {
		return false // being rewritten
	}
	for _, c := range st.Checkpoints {
		if c.Seq >= seq {
			return true
		}
	}
	return false
}

// runPythonE2E: the ResNet-18 script under torchrun and as a Python Fit on
// the GPU, alternating, -n times each.
func runPythonE2E(args []string) error {
	fs := flag.NewFlagSet("python", flag.ExitOnError)
	dataDir := fs.String("data", "data", "Fashion-MNIST's IDX files")
	script := fs.String("script", "python/examples/fashion_resnet18/train.py", "the script")
	pkg := fs.String("pythonpath", "python", "directory holding the tempotrain package (torchrun's PYTHONPATH)")
	samples := fs.Int("samples", 60000, "training images (num_samples)")
	batch := fs.Int("batch", 256, "batch size")
	epochs := fs.Int("epochs", 1, "epochs per run")
	trials := fs.Int("n", 2, "runs of each side")
	skip := fs.Int("skip", 10, "rank 0's first steps left out of samples/s")
	fs.StringVar(&interpreter, "python", "python3", "Python interpreter with torch")
	fs.StringVar(&torchrunArgs, "torchrun-args", "", `extra arguments of torch.distributed.run ("--redirects 2 --tee 2" for Debian's torch 1.13)`)
	cpu := fs.Bool("cpu", false, "CPU ranks instead (to try the command without a GPU)")
	_ = fs.Parse(args)
	useGPU = !*cpu
	abs, err := filepath.Abs(*script)
	if err != nil {
		return err
	}
	pp, err := filepath.Abs(*pkg)
	if err != nil {
		return err
	}
	data, dir, loc, wk, err := startAll(*dataDir, "python", "worker")
	if err != nil {
		return err
	}
	defer loc.Stop()
	defer wk.kill()
	cfgArgs := func(stepLog string) map[string]any {
		return map[string]any{"epochs": *epochs, "num_samples": *samples, "batch_size": *batch, "test_samples": 1000,
			"step_log": stepLog, "seed": 1, "data_dir": data}
	}
	measure := func(side string, stepLog string, start time.Time, err error) error {
		if err != nil {
			return fmt.Errorf("%s: %w", side, err)
		}
		recs := steplog.Read(stepLog)
		e := E2E{Side: side, Kind: "python", Seconds: time.Since(start).Seconds(), Steps: len(recs),
			Samples: steplog.SteadyRate(recs, *skip, *batch)}
		if len(recs) > 0 {
			e.FirstS = recs[0].T.Sub(start).Seconds()
		}
		emitE2E(e)
		if e.Samples == 0 {
			return fmt.Errorf("%s: %d steps logged: no rate", side, len(recs))
		}
		return nil
	}
	torchrun := func(i int) error {
		log := filepath.Join(dir, fmt.Sprintf("torchrun-%d", i))
		targs := append([]string{"-m", "torch.distributed.run", "--nproc_per_node", "1", "--master_port", strconv.Itoa(29500 + i)},
			strings.Fields(torchrunArgs)...)
		cmd := exec.Command(interpreter, append(targs, filepath.Base(abs),
			"--epochs", strconv.Itoa(*epochs), "--num-samples", strconv.Itoa(*samples), "--batch-size", strconv.Itoa(*batch),
			"--test-samples", "1000", "--seed", "1", "--step-log", log, "--data-dir", data)...)
		cmd.Dir = filepath.Dir(abs)
		cmd.Env = append(os.Environ(), "PYTHONPATH="+pp)
		out, err := os.Create(log + ".out")
		if err != nil {
			return err
		}
		defer out.Close()
		cmd.Stdout, cmd.Stderr = out, out
		start := time.Now()
		if err := cmd.Run(); err != nil {
			b, _ := os.ReadFile(log + ".out")
			return measure("torchrun", log, start, fmt.Errorf("%w\n%s", err, tailOf(string(b), 3000)))
		}
		return measure("torchrun", log, start, nil)
	}
	tempotrain := func(i int) error {
		log := filepath.Join(dir, fmt.Sprintf("tempotrain-%d", i))
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		spec := train.PythonSpec{Entrypoint: filepath.Base(abs) + ":train_func", WorkingDir: filepath.Dir(abs), Interpreter: interpreter}
		start := time.Now()
		run, err := train.NewTrainer(loc.Client, "", cfgArgs(log), train.ScalingConfig{NumWorkers: 1, UseGPU: useGPU},
			train.RunConfig{Name: fmt.Sprintf("py-%d", i), StoragePath: filepath.Join(dir, "runs"),
				Failure: train.FailureConfig{StartTimeout: api.Duration(2 * time.Minute)}},
			train.WithPython(spec)).Start(ctx)
		if err == nil {
			_, err = run.Wait(ctx)
		}
		if err != nil {
			err = fmt.Errorf("%w\nworker: %s", err, wk.tail())
		}
		return measure("tempotrain", log, start, err)
	}
	for i := 0; i < *trials; i++ {
		first, second := torchrun, tempotrain
		if i%2 == 1 {
			first, second = tempotrain, torchrun
		}
		if err := first(i); err != nil {
			return err
		}
		if err := second(i); err != nil {
			return err
		}
	}
	return nil
}
