package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/app"
	"github.com/tempotrain/tempotrain/data/format"
	"github.com/tempotrain/tempotrain/internal/workerproc"
	"github.com/tempotrain/tempotrain/train"
)

// The test binary doubles as a worker process: TestMain runs
// workerproc.Main first, which in a child started by startChild runs a
// worker until it is killed.

// startChild starts a worker process (this test binary) on the test's
// queues: the workflow side if workflows, and slots rank slots.
func startChild(t *testing.T, name, address string, workflows bool, slots int) *workerproc.Proc {
	t.Helper()
	return startChildCmd(t, exec.Command(os.Args[0], "-test.run=^$"), name, address, workflows, slots, "")
}

// startChildCmd starts a worker process with cmd (this test binary, maybe
// run in a network namespace) that advertises advertise ("": its default),
// with env added to its environment.
func startChildCmd(t *testing.T, cmd *exec.Cmd, name, address string, workflows bool, slots int, advertise string, env ...string) *workerproc.Proc {
	t.Helper()
	tq, rq := queues(t)
	c, err := workerproc.Start(cmd, workerproc.Spec{Name: name, Address: address, Workflows: workflows,
		TaskQueue: tq, Slots: slots, RankQueue: rq, AdvertiseHost: advertise}, env...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Kill)
	return c
}

// dumpWorkflow logs what a stuck workflow waits for: its pending workflow
// task and activities, and its last events.
func dumpWorkflow(t *testing.T, c client.Client, workflowID string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d, err := c.DescribeWorkflowExecution(ctx, workflowID, "")
	if err != nil {
		t.Logf("describe %s: %v", workflowID, err)
		return
	}
	t.Logf("%s: status %v, pending workflow task %v", workflowID, d.GetWorkflowExecutionInfo().GetStatus(), d.GetPendingWorkflowTask())
	for _, pa := range d.GetPendingActivities() {
		t.Logf("pending activity %s %s state %v attempt %d last heartbeat %v", pa.GetActivityId(), pa.GetActivityType().GetName(), pa.GetState(), pa.GetAttempt(), pa.GetLastHeartbeatTime().AsTime())
	}
	it := c.GetWorkflowHistory(ctx, workflowID, "", false, 0)
	var events []string
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			break
		}
		events = append(events, fmt.Sprintf("%d %s %s", ev.GetEventId(), ev.GetEventTime().AsTime().Format("15:04:05.000"), ev.GetEventType()))
	}
	if len(events) > 25 {
		events = events[len(events)-25:]
	}
	t.Logf("last events:\n%s", strings.Join(events, "\n"))
}

// gate is a point in a run (the start of epoch 3 of attempt 1) where every
// rank waits for the test; see linearConfig.GateDir.
type gate struct{ dir string }

func newGate(t *testing.T) *gate { return &gate{dir: t.TempDir()} }

func (g *gate) config() linearConfig {
	c := slowLinear
	c.GateDir, c.GateEpoch = g.dir, 3
	return c
}

// reached waits until n ranks are at the gate: epochs 1 and 2 are reported.
func (g *gate) reached(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		got, _ := filepath.Glob(filepath.Join(g.dir, "reached-*"))
		if len(got) >= n {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("fewer than %d ranks reached the gate in a minute", n)
}

// open lets the ranks go on.
func (g *gate) open(t *testing.T) {
	if err := os.WriteFile(filepath.Join(g.dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

// release lets an attempt held at linearConfig.HoldEpoch go on.
func (g *gate) release(t *testing.T) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(g.dir, "go-hold"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

var slowLinear = linearConfig{Epochs: 6, Steps: 10, Dim: 16, StepSleep: train.Duration(5 * time.Millisecond)}

// cleanMetrics runs slowLinear uninterrupted, for comparison, in a subtest
// whose worker and queues are gone when it returns.
func cleanMetrics(t *testing.T) (m train.Metrics) {
	t.Helper()
	t.Run("uninterrupted", func(t *testing.T) {
		res, err := fit(t, "e2e-linear", slowLinear, 2, train.RunConfig{Name: "clean", StoragePath: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		m = res.Metrics
	})
	return m
}

// TestE2EWorkerProcessFreezes: a worker that hangs sends nothing, not even
// a FIN, so its peers notice nothing; its rank's heartbeat timeout fails
// the attempt, and the run restarts on the workers that are left.
func TestE2EWorkerProcessFreezes(t *testing.T) {
	want := cleanMetrics(t)
	tq, rq := startWorkerOn(t, cl, true, 0) // the controller, in this process
	a := startChild(t, "node-a", srv.Address, false, 1)
	b := startChild(t, "node-b", srv.Address, false, 1)
	defer a.Kill()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir, g := t.TempDir(), newGate(t)
	run, err := train.NewTrainer(cl, "e2e-linear", g.config(), train.ScalingConfig{NumWorkers: 2, TaskQueue: rq},
		train.RunConfig{Name: "worker-freezes", StoragePath: dir,
			Failure: train.FailureConfig{MaxFailures: 1, HeartbeatTimeout: train.Duration(3 * time.Second)}},
		train.WithTaskQueue(tq)).Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	g.reached(t, 2)
	b.Freeze()
	g.open(t)                                      // rank on node-a goes on and waits on its silent peer
	startChild(t, "node-c", srv.Address, false, 1) // node-b's replacement
	res, err := run.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Attempts != 2 || fmt.Sprint(res.Metrics) != fmt.Sprint(want) {
		t.Errorf("attempts %d metrics %v, want 2 attempts ending like the uninterrupted run %v", res.Attempts, res.Metrics, want)
	}
	st := verifyRun(t, res, dir, slowLinear.Epochs)
	if !strings.Contains(st.History[0].Error, "no heartbeat for 3s") {
		t.Errorf("attempt 1 error %q does not say the dead rank stopped heartbeating", st.History[0].Error)
	}
	t.Logf("attempt 1: %s", st.History[0].Error)
	recordHistory(t, run.WorkflowID, "", "fit_heartbeat_timeout")
}

// TestE2EDeadWorkerNoticedInSeconds: with the default heartbeat timeout
// (60s), a SIGKILLed worker's peer fails at once ("connection to peer
// lost"), and the attempt ends cancelGrace (3s) later instead of at the dead
// rank's heartbeat timeout: the next attempt starts within seconds.
func TestE2EDeadWorkerNoticedInSeconds(t *testing.T) {
	want := cleanMetrics(t)
	res, st, killed := killOneOfTwoWorkers(t, "dead-worker", train.ScalingConfig{NumWorkers: 2})
	if res.Attempts != 2 || fmt.Sprint(res.Metrics) != fmt.Sprint(want) {
		t.Fatalf("attempts %d metrics %v, want 2 attempts ending like the uninterrupted run %v (history %+v)", res.Attempts, res.Metrics, want, st.History)
	}
	var trained time.Duration
	for _, r := range readMetrics(t, res) {
		if r.Attempt == 2 {
			trained = r.Time.Sub(killed)
			break
		}
	}
	t.Logf("SIGKILL to its first report (an epoch trained): %v", trained)
}

// killOneOfTwoWorkers runs slowLinear gated at epoch 3 (g.config) with
// scaling on two child worker processes of one rank slot each, SIGKILLs
// the second once every rank reached the gate, opens the gate and starts
// a replacement process. The attempt must end at once (its peers lose the
// dead ranks; the dead ones are abandoned after the cancel grace, which
// attempt 1's error names) and the next start within 10 s of the SIGKILL.
// It returns the verified result, its run state and when the SIGKILL was.
func killOneOfTwoWorkers(t *testing.T, name string, scaling train.ScalingConfig) (*train.Result, api.RunState, time.Time) {
	t.Helper()
	tq, rq := startWorkerOn(t, cl, true, 0)
	startChild(t, "node-a", srv.Address, false, 1)
	b := startChild(t, "node-b", srv.Address, false, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir, g := t.TempDir(), newGate(t)
	scaling.TaskQueue = rq
	run, err := train.NewTrainer(cl, "e2e-linear", g.config(), scaling,
		train.RunConfig{Name: name, StoragePath: dir, Failure: train.FailureConfig{MaxFailures: 1}},
		train.WithTaskQueue(tq)).Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	g.reached(t, scaling.NumWorkers)
	killed := time.Now()
	b.Kill()
	g.open(t)                                      // the ranks on node-a go on and find their peers gone
	startChild(t, "node-c", srv.Address, false, 1) // node-b's replacement
	res, err := run.Wait(ctx)
	if err != nil {
		dumpWorkflow(t, cl, run.WorkflowID)
		t.Fatal(err)
	}
	st := verifyRun(t, res, dir, slowLinear.Epochs)
	if len(st.History) < 2 {
		t.Fatalf("history %+v: want a second attempt", st.History)
	}
	restart := st.History[1].Start.Sub(killed)
	t.Logf("SIGKILL to the next attempt: %v (attempt 1: %s)", restart, st.History[0].Error)
	if restart > 10*time.Second {
		t.Errorf("the next attempt started %v after the SIGKILL: the attempt waited for the dead ranks", restart)
	}
	if !strings.Contains(st.History[0].Error, "did not stop within 3s of the cancellation") {
		t.Errorf("attempt 1 error %q does not name the rank that never stopped", st.History[0].Error)
	}
	return res, st, killed
}

// TestE2EPreemption: a worker told to stop (SIGTERM) mid-run makes its
// group checkpoint at the next step; the attempt ends as preempted, which
// does not count as a failure (max_failures is 0), and the run goes on from
// that step on the other workers, ending as a run never preempted ends.
func TestE2EPreemption(t *testing.T) {
	needFashion(t)
	t.Run("one rank a process", func(t *testing.T) { preemption(t, train.ScalingConfig{NumWorkers: 2}, "fit_preempted") })
	// The same with 4 ranks in 2 bundles: the SIGTERM stops a whole
	// bundle, and its rank 0 commits the agreed checkpoint though its
	// bundle's other rank stopped first.
	t.Run("bundles", func(t *testing.T) { preemption(t, train.ScalingConfig{NumWorkers: 4, RanksPerProcess: 2}, "") })
}

// preemption runs mnist-mlp with scaling on two child worker processes of
// one rank slot each, SIGTERMs the second in epoch 2, and checks that the
// attempt ends preempted at a checkpoint, with no failure, and that the
// next attempt, on a third process, ends exactly as an uninterrupted run;
// history, when not "", names the recorded history.
func preemption(t *testing.T, scaling train.ScalingConfig, history string) {
	// Four epochs of 128 steps: the SIGTERM comes in epoch 2 or 3, with
	// over a second of training left even on a loaded machine.
	cfg := map[string]any{"epochs": 4, "batch_size": 32, "train_limit": 8192, "test_limit": 512, "seed": 4}
	var want *train.Result
	t.Run("uninterrupted", func(t *testing.T) {
		tq, rq := startWorkerOn(t, cl, true, scaling.Bundles(scaling.NumWorkers))
		ctx, cancel := context.WithTimeout(context.Background(), fitTimeout)
		defer cancel()
		sc := scaling
		sc.TaskQueue = rq
		var err error
		if want, err = train.NewTrainer(cl, "mnist-mlp", cfg, sc, train.RunConfig{Name: freshName("clean"), StoragePath: t.TempDir()},
			train.WithTaskQueue(tq)).Fit(ctx); err != nil {
			t.Fatal(err)
		}
	})
	tq, rq := startWorkerOn(t, cl, true, 0)
	startChild(t, "node-a", srv.Address, false, 1)
	b := startChild(t, "node-b", srv.Address, false, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	scaling.TaskQueue = rq
	run, err := train.NewTrainer(cl, "mnist-mlp", cfg, scaling,
		train.RunConfig{Name: freshName("preempted"), StoragePath: dir}, train.WithTaskQueue(tq)).Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	waitForEpoch2(ctx, t, run.WorkflowID)
	termed := time.Now()
	b.Term()
	startChild(t, "node-c", srv.Address, false, 1) // where the run goes on
	res, err := run.Wait(ctx)
	if err != nil {
		dumpWorkflow(t, cl, run.WorkflowID)
		t.Fatal(err)
	}
	st := verifyRun(t, res, dir, 4)
	for _, r := range readMetrics(t, res) {
		t.Logf("report %d attempt %d at %+.3fs from the SIGTERM: %v", r.Index, r.Attempt, r.Time.Sub(termed).Seconds(), r.Metrics)
	}
	if res.Attempts != 2 || res.Failures != 0 || !st.History[0].Preempted || st.Failures != 0 {
		t.Fatalf("result %+v history %+v: want 2 attempts, the first preempted, no failure", res, st.History)
	}
	var stop api.ReportRecord
	for _, r := range readMetrics(t, res) {
		if r.Metrics["preempted"] == 1 {
			stop = r
		}
	}
	if stop.Checkpoint == 0 || stop.Metrics["epoch"] < 1 || stop.Metrics["step"] < 1 {
		t.Fatalf("no preemption checkpoint after epoch 1 among the reports (%+v)", stop)
	}
	t.Logf("SIGTERM to the preemption checkpoint committed: %v (epoch %v, step %v); attempt 1: %s",
		stop.Time.Sub(termed), stop.Metrics["epoch"]+1, stop.Metrics["step"], st.History[0].Error)
	if res.Metrics["test_accuracy"] != want.Metrics["test_accuracy"] || res.Metrics["train_loss"] != want.Metrics["train_loss"] {
		t.Errorf("metrics %v, the run never preempted %v", res.Metrics, want.Metrics)
	}
	if history != "" {
		recordHistory(t, run.WorkflowID, "", history)
	}
}

// waitForEpoch2 waits until a rank of the workflow heartbeats that it trains
// epoch 2 (the server keeps the latest details: no workflow task involved,
// unlike a Query).
func waitForEpoch2(ctx context.Context, t *testing.T, workflowID string) {
	t.Helper()
	for {
		if ctx.Err() != nil {
			t.Fatal("the ranks never reached epoch 2")
		}
		time.Sleep(20 * time.Millisecond)
		d, err := cl.DescribeWorkflowExecution(ctx, workflowID, "")
		if err != nil {
			continue
		}
		for _, pa := range d.GetPendingActivities() {
			var p api.Progress
			if pa.GetHeartbeatDetails() != nil && json.Unmarshal(pa.GetHeartbeatDetails().GetPayloads()[0].GetData(), &p) == nil && p.Epoch >= 1 && p.Phase == api.PhaseTrain {
				return
			}
		}
	}
}

func TestE2EControllerProcessDies(t *testing.T) {
	want := cleanMetrics(t)
	tq, rq := startWorkerOn(t, cl, false, 2) // the ranks, in this process
	k1 := startChild(t, "controller-1", srv.Address, true, 0)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir, g := t.TempDir(), newGate(t)
	run, err := train.NewTrainer(cl, "e2e-linear", g.config(), train.ScalingConfig{NumWorkers: 2, TaskQueue: rq},
		train.RunConfig{Name: "controller-dies", StoragePath: dir}, train.WithTaskQueue(tq)).Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	g.reached(t, 2)
	k1.Kill()
	g.open(t)
	time.Sleep(time.Second) // the ranks report epoch 3 into the void for a while
	startChild(t, "controller-2", srv.Address, true, 0)
	res, err := run.Wait(ctx)
	if err != nil {
		dumpWorkflow(t, cl, run.WorkflowID)
		t.Fatal(err)
	}
	if res.Attempts != 1 || res.Failures != 0 || fmt.Sprint(res.Metrics) != fmt.Sprint(want) {
		t.Errorf("result %+v, want one attempt, no failure, metrics %v: losing the controller must cost nothing", res, want)
	}
	verifyRun(t, res, dir, slowLinear.Epochs)
}

func TestE2EServerRestarts(t *testing.T) {
	want := cleanMetrics(t)
	db := t.TempDir() + "/temporal.db"
	own, err := app.StartDevServer(app.DevServerOptions{DatabaseFile: db})
	if err != nil {
		t.Fatal(err)
	}
	port, _ := strconv.Atoi(own.Address[strings.LastIndex(own.Address, ":")+1:])
	defer func() { own.Stop() }()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	c, err := client.Dial(client.Options{HostPort: own.Address, Logger: log.NewStructuredLogger(logger)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tq, rq := startWorkerOn(t, c, true, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir, g := t.TempDir(), newGate(t)
	run, err := train.NewTrainer(c, "e2e-linear", g.config(), train.ScalingConfig{NumWorkers: 2, TaskQueue: rq},
		train.RunConfig{Name: "server-restarts", StoragePath: dir,
			Failure: train.FailureConfig{HeartbeatTimeout: train.Duration(30 * time.Second)}},
		train.WithTaskQueue(tq)).Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	g.reached(t, 2)
	own.Stop()
	g.open(t) // the ranks train and report epoch 3 while the server is down
	time.Sleep(2 * time.Second)
	if own, err = app.StartDevServer(app.DevServerOptions{Port: port, DatabaseFile: db}); err != nil {
		t.Fatalf("restart the server: %v", err)
	}
	res, err := run.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Attempts != 1 || res.Failures != 0 || fmt.Sprint(res.Metrics) != fmt.Sprint(want) {
		t.Errorf("result %+v, want one attempt, no failure, metrics %v across a server restart", res, want)
	}
	verifyRun(t, res, dir, slowLinear.Epochs)
}

// needFashion skips a test without the Fashion-MNIST files, or fails it
// under TEMPOTRAIN_REQUIRE_FASHION_MNIST=1 (CI).
func needFashion(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(format.DefaultFashionMNISTDir, "train-images-idx3-ubyte.gz")); err != nil {
		if os.Getenv("TEMPOTRAIN_REQUIRE_FASHION_MNIST") == "1" {
			t.Fatalf("needs Fashion-MNIST (TEMPOTRAIN_REQUIRE_FASHION_MNIST=1): %v", err)
		}
		t.Skipf("needs Fashion-MNIST (apt-get install dataset-fashion-mnist): %v", err)
	}
}
