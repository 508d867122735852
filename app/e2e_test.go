package app_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"

	"github.com/tempotrain/tempotrain/activities"
	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/app"
	"github.com/tempotrain/tempotrain/collective"
	"github.com/tempotrain/tempotrain/internal/workerproc"
	"github.com/tempotrain/tempotrain/python"
	"github.com/tempotrain/tempotrain/storage"
	"github.com/tempotrain/tempotrain/train"
)

// One real Temporal server for the package's tests; each test runs its own
// worker on its own task queues.
var (
	srv *app.Server
	cl  client.Client
)

func TestMain(m *testing.M) {
	train.MustRegister("e2e-linear", linearFn)
	train.MustRegister("e2e-wait", waitFn)
	train.MustRegister("e2e-allreduce", allReduceFn)
	if err := python.Register(python.Options{}); err != nil {
		panic(err)
	}
	if code, child := workerproc.Main(); child {
		os.Exit(code)
	}
	var err error
	srv, err = app.StartDevServer(app.DevServerOptions{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	cl, err = dialServer(srv.Address)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	closeHostsServer()
	cl.Close()
	srv.Stop()
	os.Exit(code)
}

// dialServer is a client of the Temporal server at addr that logs errors
// only.
func dialServer(addr string) (client.Client, error) {
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	return client.Dial(client.Options{HostPort: addr, Logger: log.NewStructuredLogger(logger)})
}

// startWorker runs a worker for one test on queues of its own.
func startWorker(t *testing.T, slots int) (taskQueue, rankQueue string) {
	return startWorkerOn(t, cl, true, slots)
}

// startWorkerOn runs a worker of the test's queues on c: the workflow side
// if workflows, and slots rank slots.
func startWorkerOn(t *testing.T, c client.Client, workflows bool, slots int, opts ...workerOpt) (taskQueue, rankQueue string) {
	t.Helper()
	taskQueue, rankQueue = queues(t)
	o := app.WorkerOptions{
		Workflows: workflows, TaskQueue: taskQueue, RankSlots: slots, RankQueue: rankQueue,
		Activities: activities.Options{ScratchDir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: testLogLevel}))},
	}
	for _, opt := range opts {
		opt(&o)
	}
	w, err := app.StartWorker(c, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	return taskQueue, rankQueue
}

// workerOpt changes the options of a test's worker.
type workerOpt func(*app.WorkerOptions)

func queues(t *testing.T) (taskQueue, rankQueue string) {
	return "tq-" + t.Name(), "rq-" + t.Name()
}

// linearConfig drives linearFn: data-parallel linear regression on
// deterministic synthetic data, a checkpoint per epoch, and an injected
// failure.
type linearConfig struct {
	Epochs      int    `json:"epochs"`
	Steps       int    `json:"steps"`
	Dim         int    `json:"dim"`
	FailRank    int    `json:"fail_rank"`
	FailEpoch   int    `json:"fail_epoch"` // fail during this epoch, on attempt 1 only; 0 never
	FailMode    string `json:"fail_mode"`  // "error", "cut" or "hang"
	FailAttempt int    `json:"fail_attempt"`
	// StepSleep slows each step down.
	StepSleep train.Duration `json:"step_sleep"`
	// GateDir and GateEpoch hold every rank of attempt 1 at the start of
	// GateEpoch: each writes GateDir/reached-<rank>, then waits for
	// GateDir/go, so a test acts at a known point of a run even when the
	// ranks run in other processes.
	GateDir   string `json:"gate_dir"`
	GateEpoch int    `json:"gate_epoch"`
	// HoldAttempt and HoldEpoch hold every rank of attempt HoldAttempt at
	// the start of HoldEpoch until GateDir/go-hold exists.
	HoldAttempt int `json:"hold_attempt"`
	HoldEpoch   int `json:"hold_epoch"`
}

func linearFn(ctx context.Context, tc *train.Context) error {
	cfg := linearConfig{Epochs: 4, Steps: 20, Dim: 16, FailAttempt: 1}
	if err := tc.Config(&cfg); err != nil {
		return err
	}
	w := make([]float64, cfg.Dim)
	start := 1
	if ck := tc.Checkpoint(); ck != nil {
		b, err := ck.ReadFile("model.bin")
		if err != nil {
			return err
		}
		start = int(binary.LittleEndian.Uint64(b)) + 1
		for i := range w {
			w[i] = math.Float64frombits(binary.LittleEndian.Uint64(b[8+8*i:]))
		}
	}
	truth := make([]float64, cfg.Dim)
	for i := range truth {
		truth[i] = float64(i%5) - 2
	}
	grad := make([]float64, cfg.Dim+1)
	for epoch := start; epoch <= cfg.Epochs; epoch++ {
		if cfg.GateDir != "" && epoch == cfg.GateEpoch && tc.Attempt() == 1 {
			if err := passGate(ctx, cfg.GateDir, tc.WorldRank()); err != nil {
				return err
			}
		}
		if cfg.GateDir != "" && epoch == cfg.HoldEpoch && tc.Attempt() == cfg.HoldAttempt {
			if err := waitFile(ctx, filepath.Join(cfg.GateDir, "go-hold")); err != nil {
				return err
			}
		}
		var loss float64
		for step := 0; step < cfg.Steps; step++ {
			tc.SetProgress(epoch, step)
			if epoch == cfg.FailEpoch && step == cfg.Steps/2 && tc.WorldRank() == cfg.FailRank && tc.Attempt() == cfg.FailAttempt {
				switch cfg.FailMode {
				case "cut":
					tc.Comm().Abort()
				case "hang": // stuck in user code, deaf to cancellation
					<-hungRanks.release() // until the test that hung it ends
					return errors.New("hung rank released")
				default:
					return fmt.Errorf("injected failure at epoch %d step %d", epoch, step)
				}
			}
			time.Sleep(cfg.StepSleep.D())
			if step == 0 && epochHook != nil {
				epochHook(tc.Attempt(), tc.WorldRank(), epoch)
			}
			rng := rand.New(rand.NewPCG(uint64(epoch*1000+step), uint64(tc.WorldRank())))
			clear(grad)
			const batch = 8
			for b := 0; b < batch; b++ {
				x := make([]float64, cfg.Dim)
				var y, p float64
				for i := range x {
					x[i] = rng.NormFloat64()
					y += truth[i] * x[i]
					p += w[i] * x[i]
				}
				d := p - y
				for i := range x {
					grad[i] += d * x[i] / batch
				}
				grad[cfg.Dim] += d * d / batch
			}
			if err := tc.Comm().AllReduceFloat64(ctx, grad, collective.Mean); err != nil {
				return err
			}
			tc.AddSamples(batch)
			for i := range w {
				w[i] -= 0.05 * grad[i]
			}
			loss = grad[cfg.Dim]
		}
		var ckpt *train.Checkpoint
		if tc.WorldRank() == 0 {
			dir, err := tc.NewCheckpointDir()
			if err != nil {
				return err
			}
			b := make([]byte, 8+8*len(w))
			binary.LittleEndian.PutUint64(b, uint64(epoch))
			for i, v := range w {
				binary.LittleEndian.PutUint64(b[8+8*i:], math.Float64bits(v))
			}
			if err := os.WriteFile(filepath.Join(dir, "model.bin"), b, 0o644); err != nil {
				return err
			}
			ckpt = train.NewCheckpoint(dir)
		}
		var norm float64
		for _, v := range w {
			norm += v * v
		}
		if err := tc.Report(train.Metrics{"epoch": float64(epoch), "loss": loss, "w_norm": math.Sqrt(norm)}, ckpt); err != nil {
			return err
		}
	}
	return nil
}

func passGate(ctx context.Context, dir string, rank int) error {
	if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("reached-%d", rank)), nil, 0o644); err != nil {
		return err
	}
	return waitFile(ctx, filepath.Join(dir, "go"))
}

// waitFile waits until the file exists.
func waitFile(ctx context.Context, path string) error {
	for {
		if _, err := os.Stat(path); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// allReduceFn checks one all-reduce across the group and returns.
func allReduceFn(ctx context.Context, tc *train.Context) error {
	buf := []float32{float32(tc.WorldRank()), 1}
	if err := tc.Comm().AllReduceFloat32(ctx, buf, collective.Sum); err != nil {
		return err
	}
	n := tc.WorldSize()
	if buf[0] != float32(n*(n-1)/2) || buf[1] != float32(n) {
		return fmt.Errorf("all-reduce gave %v", buf)
	}
	return tc.Report(train.Metrics{"world_size": float64(n), "local_world_size": float64(tc.LocalWorldSize())}, nil)
}

var fitTimeout = 3 * time.Minute

// epochHook, when set by a test, runs at the start of every epoch of
// linearFn on every rank.
var epochHook func(attempt, rank, epoch int)

// testLogLevel is the ranks' log level in tests: warnings, or what
// TEMPOTRAIN_E2E_LOG says (debug, info...).
var testLogLevel = func() slog.Level {
	var l slog.Level
	if l.UnmarshalText([]byte(os.Getenv("TEMPOTRAIN_E2E_LOG"))) != nil {
		return slog.LevelWarn
	}
	return l
}()

var waitStarted = make(chan struct{}, 64)
var waitCancelled = make(chan time.Time, 64)

// cancelWaiting cancels the Fit workflowID, whose n ranks run waitFn, and
// returns how long the slowest of them took to see it.
func cancelWaiting(t *testing.T, ctx context.Context, workflowID string, n int) time.Duration {
	t.Helper()
	t0 := time.Now()
	if err := cl.CancelWorkflow(ctx, workflowID, ""); err != nil {
		t.Fatal(err)
	}
	var slowest time.Duration
	for i := 0; i < n; i++ {
		slowest = max(slowest, (<-waitCancelled).Sub(t0))
	}
	t.Logf("every rank saw the cancellation within %v", slowest)
	return slowest
}

// waitFn reports that it runs and waits for cancellation.
func waitFn(ctx context.Context, tc *train.Context) error {
	tc.SetProgress(0, 0)
	waitStarted <- struct{}{}
	<-ctx.Done()
	waitCancelled <- time.Now()
	return ctx.Err()
}

// freshNames counts the runs of each name freshName gave out.
var freshNames sync.Map

// freshName is name the first time a test asks for it in this process and
// name-2, name-3, ... after, for tests that count the runs of their
// workflow ID on the server: under go test -count=N the earlier iterations'
// runs are there too.
func freshName(name string) string {
	v, _ := freshNames.LoadOrStore(name, new(atomic.Int64))
	if k := v.(*atomic.Int64).Add(1); k > 1 {
		return fmt.Sprintf("%s-%d", name, k)
	}
	return name
}

func fit(t *testing.T, fn string, cfg any, n int, run train.RunConfig, opts ...workerOpt) (*train.Result, error) {
	t.Helper()
	tq, rq := startWorkerOn(t, cl, true, n, opts...)
	ctx, cancel := context.WithTimeout(context.Background(), fitTimeout)
	defer cancel()
	return train.NewTrainer(cl, fn, cfg, train.ScalingConfig{NumWorkers: n, TaskQueue: rq}, run, train.WithTaskQueue(tq)).Fit(ctx)
}

func readMetrics(t *testing.T, res *train.Result) []api.ReportRecord {
	t.Helper()
	f, err := os.Open(filepath.Join(res.Path, "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []api.ReportRecord
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r api.ReportRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("metrics.jsonl line %q: %v", sc.Text(), err)
		}
		out = append(out, r)
	}
	return out
}

// reportSequence is the run's reports as "a<attempt>/e<epoch>", in order.
func reportSequence(t *testing.T, res *train.Result) string {
	t.Helper()
	var got []string
	for _, l := range readMetrics(t, res) {
		got = append(got, fmt.Sprintf("a%d/e%g", l.Attempt, l.Metrics["epoch"]))
	}
	return strings.Join(got, " ")
}

// runState reads the run's run.json.
func runState(t *testing.T, res *train.Result) api.RunState {
	t.Helper()
	var st api.RunState
	b, _ := os.ReadFile(filepath.Join(res.Path, "run.json"))
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

func TestE2EFailureResumesFromCheckpoint(t *testing.T) {
	base := linearConfig{Epochs: 4, Steps: 20, Dim: 16, FailRank: 1, FailAttempt: 1}
	clean, err := fit(t, "e2e-linear", base, 4, train.RunConfig{Name: "clean", StoragePath: t.TempDir()})
	if err != nil {
		t.Fatalf("uninterrupted run: %v", err)
	}
	if clean.Attempts != 1 || clean.Reports != 4 || clean.Checkpoint.Seq != 4 {
		t.Fatalf("uninterrupted run: %+v", clean)
	}
	for _, mode := range []string{"error", "cut"} {
		t.Run(mode, func(t *testing.T) {
			cfg := base
			cfg.FailEpoch, cfg.FailMode = 3, mode // epochs 1 and 2 are checkpointed first
			res, err := fit(t, "e2e-linear", cfg, 4, train.RunConfig{Name: "failing-" + mode, StoragePath: t.TempDir(),
				Failure: train.FailureConfig{MaxFailures: 1}})
			if err != nil {
				t.Fatalf("run with an injected failure: %v", err)
			}
			if res.Attempts != 2 || res.Failures != 1 {
				t.Errorf("attempts %d failures %d, want 2 and 1", res.Attempts, res.Failures)
			}
			if fmt.Sprint(res.Metrics) != fmt.Sprint(clean.Metrics) {
				t.Errorf("final metrics %v differ from the uninterrupted run's %v", res.Metrics, clean.Metrics)
			}
			// Attempt 1 reported epochs 1-2; attempt 2 resumed at epoch 3.
			if got := reportSequence(t, res); got != "a1/e1 a1/e2 a2/e3 a2/e4" {
				t.Errorf("reports %v, want attempt 2 to resume at epoch 3", got)
			}
			st := runState(t, res)
			if len(st.History) != 2 || st.History[1].ResumedFrom != 2 || st.Status != api.StatusSucceeded {
				t.Errorf("run.json history %+v status %s, want attempt 2 resumed from checkpoint 2", st.History, st.Status)
			}
			if mode == "error" && !strings.Contains(st.History[0].Error, "rank 1 failed: injected failure at epoch 3") {
				t.Errorf("attempt 1 error %q does not name rank 1 and its error", st.History[0].Error)
			}
			t.Logf("attempt 1 ended with: %s", st.History[0].Error)
			recordHistory(t, train.WorkflowID(res.Name), "", "fit_restart_"+mode)
		})
	}
}

// TestE2ECorruptCheckpointFallsBack flips a byte in the newest checkpoint
// while attempt 1 is held at the start of epoch 3; rank 1 then fails, and
// attempt 2 finds checkpoint 2 corrupt and resumes from checkpoint 1 on every
// rank, ending exactly where an uninterrupted run ends.
func TestE2ECorruptCheckpointFallsBack(t *testing.T) {
	base := linearConfig{Epochs: 4, Steps: 10, Dim: 16}
	clean, err := fit(t, "e2e-linear", base, 2, train.RunConfig{Name: "clean", StoragePath: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	g := t.TempDir()
	cfg := base
	cfg.GateDir, cfg.GateEpoch = g, 3
	cfg.FailRank, cfg.FailEpoch, cfg.FailMode, cfg.FailAttempt = 1, 3, "error", 1
	dir := t.TempDir()
	tq, rq := startWorker(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), fitTimeout)
	defer cancel()
	run, err := train.NewTrainer(cl, "e2e-linear", cfg, train.ScalingConfig{NumWorkers: 2, TaskQueue: rq},
		train.RunConfig{Name: "corrupt", StoragePath: dir, Failure: train.FailureConfig{MaxFailures: 1}}, train.WithTaskQueue(tq)).Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	(&gate{dir: g}).reached(t, 2)
	model := filepath.Join(dir, "corrupt", storage.CheckpointDir(2), "model.bin")
	b, err := os.ReadFile(model)
	if err != nil {
		t.Fatalf("checkpoint 2 is not committed at the gate: %v", err)
	}
	b[len(b)-1] ^= 0x40 // a weight's low bits: the file still decodes
	if err := os.WriteFile(model, b, 0o644); err != nil {
		t.Fatal(err)
	}
	(&gate{dir: g}).open(t)
	res, err := run.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Attempts != 2 || fmt.Sprint(res.Metrics) != fmt.Sprint(clean.Metrics) {
		t.Errorf("attempts %d metrics %v, want 2 attempts ending like the clean run %v", res.Attempts, res.Metrics, clean.Metrics)
	}
	// Attempt 2 redid epoch 2: it resumed from checkpoint 1, not 2.
	if got := reportSequence(t, res); got != "a1/e1 a1/e2 a2/e2 a2/e3 a2/e4" {
		t.Errorf("reports %v, want attempt 2 to resume at epoch 2 from checkpoint 1", got)
	}
	// run.json's history says which checkpoint attempt 2 restored, and why
	// not the newest.
	backend, err := storage.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	var st api.RunState
	if found, err := storage.NewRun(backend, "corrupt").LoadState(ctx, &st); err != nil || !found {
		t.Fatalf("run.json: found %v err %v", found, err)
	}
	if h := st.History[1]; h.ResumedFrom != 2 || h.RestoredFrom != 1 || len(h.Skipped) != 1 || !strings.Contains(h.Skipped[0], "checkpoint 2") {
		t.Errorf("attempt 2's history %+v: want resumed_from 2, restored_from 1, checkpoint 2 skipped", h)
	}
	if h := st.History[1]; h.KernelPathChanged != "" {
		t.Errorf("attempt 2 restored on this machine's own kernels, yet its history says %q", h.KernelPathChanged)
	}
	// ... and remembers checkpoint 2 as unusable: no later attempt or Fit
	// of this run downloads it again.
	if fmt.Sprint(st.Unusable) != "[2]" {
		t.Errorf("run.json unusable %v, want [2]", st.Unusable)
	}
}

// TestE2EHungRankIsNamed: in a 3-rank run, rank 2 stops in its own code
// (no collective call, deaf to cancellation, its worker still heartbeating)
// while ranks 0 and 1 wait in an all-reduce. After the collective timeout
// the attempt's error leads with rank 2, the operation it did not reach and
// its last progress, not with rank 0, whose wait timed out first.
func TestE2EHungRankIsNamed(t *testing.T) {
	t.Cleanup(hungRanks.releaseAll)
	cfg := linearConfig{Epochs: 3, Steps: 6, Dim: 4, FailRank: 2, FailEpoch: 2, FailMode: "hang", FailAttempt: 1}
	dir := t.TempDir()
	res, err := fit(t, "e2e-linear", cfg, 3, train.RunConfig{Name: "hung", StoragePath: dir,
		Failure: train.FailureConfig{MaxFailures: 1, CollectiveTimeout: train.Duration(2 * time.Second)}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Attempts != 2 {
		t.Fatalf("attempts %d, want 2", res.Attempts)
	}
	backend, err := storage.Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	var st api.RunState
	if found, err := storage.NewRun(backend, "hung").LoadState(context.Background(), &st); err != nil || !found {
		t.Fatalf("run.json: found %v err %v", found, err)
	}
	e := st.History[0].Error
	t.Logf("attempt 1: %s", e)
	if !strings.HasPrefix(e, "attempt 1: rank 2 did not reach AllReduceFloat64 #") || !strings.Contains(e, "within 2s; its last progress: epoch 2, step 3") {
		t.Errorf("attempt 1's error does not lead with rank 2, the operation and its last progress: %s", e)
	}
}

func TestE2ESameNameResumes(t *testing.T) {
	dir := t.TempDir()
	first, err := fit(t, "e2e-linear", linearConfig{Epochs: 2, Steps: 5, Dim: 4}, 2, train.RunConfig{Name: "again", StoragePath: dir})
	if err != nil {
		t.Fatal(err)
	}
	second, err := fit(t, "e2e-linear", linearConfig{Epochs: 3, Steps: 5, Dim: 4}, 2, train.RunConfig{Name: "again", StoragePath: dir})
	if err != nil {
		t.Fatal(err)
	}
	if first.Reports != 2 || second.Reports != 3 || second.Attempts != 2 || second.Checkpoint.Seq != 3 {
		t.Errorf("first %+v\nsecond %+v\nwant the second Fit to resume at epoch 3 as attempt 2", first, second)
	}
	lines := readMetrics(t, second)
	if len(lines) != 3 || lines[2].Metrics["epoch"] != 3 || lines[2].Attempt != 2 {
		t.Errorf("metrics.jsonl %+v", lines)
	}
}

func TestE2EGivesUpAfterMaxFailures(t *testing.T) {
	cfg := linearConfig{Epochs: 2, Steps: 4, Dim: 4, FailRank: 0, FailEpoch: 1, FailMode: "error", FailAttempt: 1}
	res, err := fit(t, "e2e-linear", cfg, 2, train.RunConfig{Name: "hopeless", StoragePath: t.TempDir()})
	if err == nil || res == nil {
		t.Fatalf("err %v res %v, want a failed run with a Result", err, res)
	}
	if !strings.HasPrefix(res.Error, "attempt 1: rank 0 failed: injected failure at epoch 1") || res.Attempts != 1 {
		t.Errorf("Result.Error %q attempts %d", res.Error, res.Attempts)
	}
}

func TestE2EUnknownFunctionIsNonRetryable(t *testing.T) {
	res, err := fit(t, "no-such-func", nil, 2, train.RunConfig{Name: "unknown", StoragePath: t.TempDir(), Failure: train.FailureConfig{MaxFailures: -1}})
	if err == nil || res == nil || res.Attempts != 1 || !strings.Contains(res.Error, `unknown training function "no-such-func"`) {
		t.Fatalf("res %+v err %v, want one attempt failing on the unknown function", res, err)
	}
}

func TestE2EBadInputFailsFast(t *testing.T) {
	tq, _ := startWorker(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Through the server, as the CLI would send it: the Trainer's own check
	// is bypassed.
	wr, err := cl.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: tq}, train.WorkflowType,
		map[string]any{"train_func": "e2e-linear", "scaling": map[string]any{"num_workers": 0}, "run": map[string]any{"storage_path": "/tmp/x"}})
	if err != nil {
		t.Fatal(err)
	}
	err = wr.Get(ctx, nil)
	if err == nil || !strings.Contains(err.Error(), "scaling.num_workers = 0: must be at least 1") {
		t.Fatalf("err %v", err)
	}
	desc, err := cl.DescribeWorkflowExecution(ctx, wr.GetID(), "")
	if err != nil {
		t.Fatal(err)
	}
	if n := desc.GetWorkflowExecutionInfo().GetHistoryLength(); n == 0 || n > 6 {
		t.Errorf("history has %d events: a bad input must fail at once", n)
	}
}

func TestE2ERendezvous32Ranks(t *testing.T) {
	res, err := fit(t, "e2e-allreduce", nil, 32, train.RunConfig{Name: "wide", StoragePath: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if res.Metrics["world_size"] != 32 || res.Metrics["local_world_size"] != 32 {
		t.Errorf("metrics %v", res.Metrics)
	}
}

func TestE2ECancellationStopsRanksAndLeaksNothing(t *testing.T) {
	before := listeningPorts(t)
	tq, rq := startWorker(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	run, err := train.NewTrainer(cl, "e2e-wait", nil, train.ScalingConfig{NumWorkers: 3, TaskQueue: rq},
		train.RunConfig{Name: "cancelled", StoragePath: dir}, train.WithTaskQueue(tq)).Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		<-waitStarted
	}
	slowest := cancelWaiting(t, ctx, run.WorkflowID, 3)
	if slowest > 2*time.Second {
		t.Errorf("ranks saw the cancellation after %v, want within 2s", slowest)
	}
	res, err := run.Wait(ctx)
	if err == nil || !strings.Contains(err.Error(), "cancelled") || res == nil || res.Error != "cancelled" {
		t.Errorf("Wait: %+v, %v, want a cancelled run's Result", res, err)
	}
	// The cancellation is recorded in storage, before the workflow ended.
	var st api.RunState
	b, err := os.ReadFile(filepath.Join(dir, "cancelled", "run.json"))
	if err != nil || json.Unmarshal(b, &st) != nil {
		t.Fatalf("run.json %s: %v", b, err)
	}
	if st.Status != api.StatusCancelled || len(st.History) != 1 || st.History[0].End.IsZero() || st.History[0].Error == "" {
		t.Errorf("run.json status %q history %+v, want cancelled with attempt 1 ended", st.Status, st.History)
	}
	recordHistory(t, run.WorkflowID, "", "fit_cancelled")
	// Nothing a rank started outlives it.
	deadline := time.Now().Add(5 * time.Second)
	for {
		leaked := rankGoroutines()
		after := listeningPorts(t)
		var newPorts []string
		for p := range after {
			if !before[p] {
				newPorts = append(newPorts, p)
			}
		}
		if len(leaked) == 0 && len(newPorts) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the run: %d rank goroutines left:\n%s\nnew listeners: %v", len(leaked), strings.Join(leaked, "\n\n"), newPorts)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// hungRanks holds the ranks of fail_mode "hang", deaf to cancellation,
// until the test that hung them ends, so that no rank goroutine of one
// test is left running into the next (whose leak check counts them).
var hungRanks hangGate

type hangGate struct {
	mu sync.Mutex
	ch chan struct{}
}

func (g *hangGate) release() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ch == nil {
		g.ch = make(chan struct{})
	}
	return g.ch
}

func (g *hangGate) releaseAll() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ch != nil {
		close(g.ch)
		g.ch = nil
	}
}

// rankGoroutines returns the stacks of goroutines running rank code.
func rankGoroutines() []string {
	buf := make([]byte, 1<<22)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "tempotrain/activities.") || strings.Contains(g, "tempotrain/collective.") {
			out = append(out, g)
		}
	}
	return out
}

// listeningPorts lists the TCP ports this process listens on.
func listeningPorts(t *testing.T) map[string]bool {
	t.Helper()
	inodes := map[string]bool{}
	fds, _ := os.ReadDir("/proc/self/fd")
	for _, fd := range fds {
		if l, err := os.Readlink("/proc/self/fd/" + fd.Name()); err == nil && strings.HasPrefix(l, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	out := map[string]bool{}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fields := strings.Fields(line)
			if len(fields) > 9 && fields[3] == "0A" && inodes[fields[9]] {
				out[fields[1]] = true
			}
		}
	}
	return out
}

// A run whose history is past Temporal's continue-as-new suggestion from its
// first report on (ContinueAsNewAfterEvents stands for the suggestion, as a
// group of ~850 ranks or more passes 4,096 events in its start alone) is not
// stopped at every checkpoint: its first attempt goes on until it has
// recorded as much history as its start took, then continues as new at a
// checkpoint, and the next run resumes from it.
func TestE2EYoungAttemptGoesOn(t *testing.T) {
	cfg := linearConfig{Epochs: 10, Steps: 10, Dim: 16, StepSleep: train.Duration(50 * time.Millisecond)}
	dir := t.TempDir()
	res, err := fit(t, "e2e-linear", cfg, 2, train.RunConfig{Name: "young", StoragePath: dir},
		func(o *app.WorkerOptions) { o.Fit.ContinueAsNewAfterEvents = 10 })
	if err != nil {
		t.Fatal(err)
	}
	first := 0
	for _, r := range readMetrics(t, res) {
		if r.Attempt == 1 {
			first++
		}
	}
	// Stopping at the first checkpoint past the suggestion would leave
	// attempt 1 with one report (two if the cancellation is slow).
	if res.Failures != 0 || res.Attempts < 2 || res.Reports != 10 || first < 3 || first == 10 {
		t.Errorf("%d attempts, %d failures, %d reports, %d in attempt 1: want at least 2 attempts, no failure, 10 reports, at least 3 of them (not all) in attempt 1",
			res.Attempts, res.Failures, res.Reports, first)
	}
	checkContinuedRuns(t, "fit-young", res.Attempts, "fit_young_attempt")
	verifyRun(t, res, dir, 10)
}

// checkContinuedRuns checks that the Fit of workflow ID id ran one workflow
// run per attempt, and records a run that continued as new as history name.
func checkContinuedRuns(t *testing.T, id string, attempts int, name string) {
	t.Helper()
	it, err := cl.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{Query: fmt.Sprintf("WorkflowId = %q", id)})
	if err != nil {
		t.Fatal(err)
	}
	if runs := len(it.GetExecutions()); runs != attempts {
		t.Errorf("%d workflow runs for %s, want one per attempt (%d)", runs, id, attempts)
	}
	for _, ex := range it.GetExecutions() {
		if ex.GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW {
			recordHistory(t, id, ex.GetExecution().GetRunId(), name)
			break
		}
	}
}

func TestE2EContinueAsNew(t *testing.T) {
	// Slow enough (0.5 s an epoch) that the cancellation which stops an
	// attempt for continue-as-new reaches the ranks before they finish.
	cfg := linearConfig{Epochs: 6, Steps: 10, Dim: 16, StepSleep: train.Duration(50 * time.Millisecond)}
	var clean *train.Result
	t.Run("uninterrupted", func(t *testing.T) {
		var err error
		if clean, err = fit(t, "e2e-linear", cfg, 2, train.RunConfig{Name: "can-clean", StoragePath: t.TempDir()}); err != nil {
			t.Fatal(err)
		}
	})
	dir := t.TempDir()
	res, err := fit(t, "e2e-linear", cfg, 2, train.RunConfig{Name: freshName("can"), StoragePath: dir},
		func(o *app.WorkerOptions) { o.Fit.ContinueAsNewAfterReports = 2 })
	if err != nil {
		t.Fatal(err)
	}
	// The second report of a workflow run stops its attempt and continues
	// as new; the next run resumes from the latest checkpoint. Not a failure,
	// and no report is lost or repeated. (How many reports an attempt makes
	// before the cancellation reaches it varies, so the number of runs does.)
	if res.Failures != 0 || res.Attempts < 2 || res.Reports != 6 || fmt.Sprint(res.Metrics) != fmt.Sprint(clean.Metrics) {
		t.Errorf("result %+v, want at least 2 attempts, no failure, 6 reports, metrics %v", res, clean.Metrics)
	}
	checkContinuedRuns(t, train.WorkflowID(res.Name), res.Attempts, "fit_continued_as_new")
	verifyRun(t, res, dir, 6)
}
