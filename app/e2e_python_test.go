package app_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/internal/workerproc"
	"github.com/tempotrain/tempotrain/python"
	"github.com/tempotrain/tempotrain/storage/miniotest"
	"github.com/tempotrain/tempotrain/train"
)

// pyInterpreter is Debian's python3 (torch 1.13 with gloo); the first
// python3 on a PATH may be another interpreter.
const pyInterpreter = "/usr/bin/python3"

// needTorch skips a test where Debian's torch is not installed; CI
// installs it (.ci/setup test) and sets TEMPOTRAIN_REQUIRE_TORCH=1, where
// its absence fails the test instead.
func needTorch(t *testing.T) {
	t.Helper()
	needFashion(t)
	if _, err := os.Stat("/usr/lib/python3/dist-packages/torch/__init__.py"); err != nil {
		if os.Getenv("TEMPOTRAIN_REQUIRE_TORCH") == "1" {
			t.Fatalf("needs python3-torch (TEMPOTRAIN_REQUIRE_TORCH=1): %v", err)
		}
		t.Skipf("needs python3-torch (apt-get install python3-torch): %v", err)
	}
}

// mlpSpec runs app/testdata/python/mlp.py:train_func, its processes
// tagged with the test's name (pythonLeft finds them by it).
func mlpSpec(t *testing.T) train.PythonSpec {
	name := t.Name()
	if i := strings.Index(name, "/"); i >= 0 {
		name = name[:i] // a subtest's processes are its test's
	}
	wd, err := filepath.Abs("testdata/python")
	if err != nil {
		t.Fatal(err)
	}
	return train.PythonSpec{Entrypoint: "mlp.py:train_func", WorkingDir: wd, Interpreter: pyInterpreter,
		Env: map[string]string{"TT_TEST_TAG": name, "OMP_NUM_THREADS": "1"}}
}

// pythonLeft lists the processes whose environment holds the test's tag.
func pythonLeft(t *testing.T) []int {
	tag := []byte("TT_TEST_TAG=" + t.Name() + "\x00")
	ents, _ := os.ReadDir("/proc")
	var left []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil || !bytes.Contains(env, tag) {
			continue
		}
		if st, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat")); err == nil && strings.Contains(string(st), ") Z ") {
			continue // a zombie: dead, its parent not yet told
		}
		left = append(left, pid)
	}
	return left
}

// noPythonLeft fails the test if a process of it outlives it by 5 s.
func noPythonLeft(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		left := pythonLeft(t)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			for _, p := range left {
				_ = syscall.Kill(p, syscall.SIGKILL)
			}
			t.Fatalf("Python processes %v outlived their ranks", left)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func mlpConfig(t *testing.T, extra map[string]any) (map[string]any, string) {
	final := filepath.Join(t.TempDir(), "final.bin")
	cfg := map[string]any{"epochs": 3, "samples": 4096, "batch_size": 64, "seed": 3, "final": final}
	for k, v := range extra {
		cfg[k] = v
	}
	return cfg, final
}

// cleanPython is the parameters of the MLP run never interrupted, on two
// ranks of this process, in a subtest whose worker and queues are gone
// when it returns.
func cleanPython(t *testing.T, cfg map[string]any, final string) []byte {
	t.Helper()
	var b []byte
	t.Run("uninterrupted", func(t *testing.T) { b = runCleanPython(t, cfg, final) })
	if b == nil {
		t.FailNow()
	}
	return b
}

func runCleanPython(t *testing.T, cfg map[string]any, final string) []byte {
	tq, rq := startWorker(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := train.NewTrainer(cl, "", cfg, train.ScalingConfig{NumWorkers: 2, TaskQueue: rq},
		train.RunConfig{Name: "py-clean", StoragePath: t.TempDir()}, train.WithTaskQueue(tq), train.WithPython(mlpSpec(t))).Fit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Attempts != 1 || res.Metrics["epoch"] != 2 {
		t.Fatalf("clean run: %+v", res)
	}
	b, err := os.ReadFile(final)
	if err != nil || len(b) != 4*(784*64+64+64*10+10) {
		t.Fatalf("final parameters: %d bytes, %v", len(b), err)
	}
	return b
}

// interruptedPython runs the MLP never interrupted, then again on two
// worker processes held at the start of epoch 2 (epochs 0 and 1
// committed), where interrupt acts on one of them (node-b) before the
// ranks go on and node-c starts to take its place. It returns the
// interrupted run's result, its run state, when interrupt was called, and
// whether its final parameters are the uninterrupted run's, bit for bit.
func interruptedPython(t *testing.T, name string, failures int, interrupt func(*workerproc.Proc)) (*train.Result, api.RunState, time.Time, bool) {
	t.Helper()
	cfg, final := mlpConfig(t, nil)
	want := cleanPython(t, cfg, final)
	_ = os.Remove(final)
	g := newGate(t)
	cfg["gate_dir"], cfg["gate_epoch"] = g.dir, 2

	tq, rq := startWorkerOn(t, cl, true, 0)
	startChild(t, "node-a", srv.Address, false, 1)
	b := startChild(t, "node-b", srv.Address, false, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	dir := t.TempDir()
	run, err := train.NewTrainer(cl, "", cfg, train.ScalingConfig{NumWorkers: 2, TaskQueue: rq},
		train.RunConfig{Name: name, StoragePath: dir, Failure: train.FailureConfig{MaxFailures: failures}},
		train.WithTaskQueue(tq), train.WithPython(mlpSpec(t))).Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	g.reached(t, 2)
	at := time.Now()
	interrupt(b)
	g.open(t)
	startChild(t, "node-c", srv.Address, false, 1)
	res, err := run.Wait(ctx)
	if err != nil {
		dumpWorkflow(t, cl, run.WorkflowID)
		t.Fatal(err)
	}
	st := verifyRun(t, res, dir, 2)
	got, err := os.ReadFile(final)
	if err != nil {
		t.Fatal(err)
	}
	return res, st, at, bytes.Equal(got, want)
}

// TestE2EPythonWorkerKilledResumesIdentically: a worker process running
// a Python rank is SIGKILLed mid-run; the run restarts from the last
// committed checkpoint on another worker and ends with the same
// parameters, bit for bit, as a run never interrupted; no Python process
// is left.
func TestE2EPythonWorkerKilledResumesIdentically(t *testing.T) {
	needTorch(t)
	res, st, killed, same := interruptedPython(t, "py-killed", 1, func(b *workerproc.Proc) { b.Kill() })
	var again time.Duration
	for _, r := range readMetrics(t, res) {
		if r.Attempt == 2 {
			again = r.Time.Sub(killed)
			break
		}
	}
	t.Logf("SIGKILL to the next attempt's first report: %v; attempt 1: %s", again, st.History[0].Error)
	if res.Attempts != 2 || st.History[1].ResumedFrom == 0 {
		t.Fatalf("attempts %d, history %+v: want 2, the second resumed from a checkpoint", res.Attempts, st.History)
	}
	if !same {
		t.Fatal("the resumed run's parameters differ from the uninterrupted run's")
	}
	noPythonLeft(t)
}

// TestE2EPythonPreemption: SIGTERM to a worker: its group checkpoints at
// the next step (should_stop), the attempt ends as preempted, not failed
// (max_failures 0), and the run ends where a run never preempted ends.
func TestE2EPythonPreemption(t *testing.T) {
	needTorch(t)
	res, st, _, same := interruptedPython(t, "py-preempted", 0, func(b *workerproc.Proc) {
		b.Term()
		time.Sleep(500 * time.Millisecond) // the worker's stop reaches its rank
	})
	if res.Attempts != 2 || res.Failures != 0 || !st.History[0].Preempted {
		t.Fatalf("result %+v history %+v: want 2 attempts, the first preempted, no failure", res, st.History)
	}
	var stop api.ReportRecord
	for _, r := range readMetrics(t, res) {
		if r.Metrics["preempted"] == 1 {
			stop = r
		}
	}
	if stop.Checkpoint == 0 || stop.Metrics["epoch"] != 2 {
		t.Fatalf("no preemption checkpoint in epoch 2 among the reports (%+v)", stop)
	}
	if !same {
		t.Fatal("the preempted run's parameters differ from the uninterrupted run's")
	}
	noPythonLeft(t)
}

// TestE2EPythonExceptionInRank1: an exception in rank 1's function ends the
// run (max_failures 0) with Result.Error naming the rank, the exception,
// its message, file and line.
func TestE2EPythonExceptionInRank1(t *testing.T) {
	needTorch(t)
	cfg, _ := mlpConfig(t, map[string]any{"fail_rank": 1, "fail_epoch": 1, "fail_attempt": 1})
	tq, rq := startWorker(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	_, err := train.NewTrainer(cl, "", cfg, train.ScalingConfig{NumWorkers: 2, TaskQueue: rq},
		train.RunConfig{Name: "py-raises", StoragePath: t.TempDir()}, train.WithTaskQueue(tq), train.WithPython(mlpSpec(t))).Fit(ctx)
	if err == nil {
		t.Fatal("the run succeeded")
	}
	msg := err.Error()
	t.Logf("error: %s", msg)
	for _, w := range []string{"rank 1", "RuntimeError", "injected failure in rank 1, epoch 1", "mlp.py", "line "} {
		if !strings.Contains(msg, w) {
			t.Errorf("the run's error lacks %q", w)
		}
	}
	noPythonLeft(t)
}

// TestE2EPythonBadEntrypointFailsAtOnce: a function the module lacks ends
// the run at once, naming it, without restarts.
func TestE2EPythonBadEntrypointFailsAtOnce(t *testing.T) {
	needTorch(t)
	tq, rq := startWorker(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	spec := mlpSpec(t)
	spec.Entrypoint = "mlp.py:no_such_func"
	start := time.Now()
	res, err := train.NewTrainer(cl, "", nil, train.ScalingConfig{NumWorkers: 2, TaskQueue: rq},
		train.RunConfig{Name: "py-badentry", StoragePath: t.TempDir(), Failure: train.FailureConfig{MaxFailures: 3}},
		train.WithTaskQueue(tq), train.WithPython(spec)).Fit(ctx)
	if err == nil || !strings.Contains(err.Error(), "no_such_func") {
		t.Fatalf("err = %v, want one naming no_such_func", err)
	}
	if res == nil || res.Attempts != 1 {
		t.Fatalf("result %+v: want one attempt (non-retryable)", res)
	}
	t.Logf("failed after %v: %v", time.Since(start), err)
	noPythonLeft(t)
}

// TestE2EPythonElastic: min 2, max 3 workers; one of three is SIGKILLed;
// the run goes on with two Python ranks from the last checkpoint (torch's
// world size follows: WORLD_SIZE, the sampler's shards) and completes.
func TestE2EPythonElastic(t *testing.T) {
	needTorch(t)
	tq, rq := startWorkerOn(t, cl, true, 0)
	var workers []*workerproc.Proc
	for _, n := range []string{"node-a", "node-b", "node-c"} {
		workers = append(workers, startChild(t, n, srv.Address, false, 1))
	}
	waitPollers(t, rq, 3)
	g := newGate(t)
	cfg, final := mlpConfig(t, map[string]any{"gate_dir": g.dir, "gate_epoch": 1})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	dir := t.TempDir()
	run, err := train.NewTrainer(cl, "", cfg,
		train.ScalingConfig{MinWorkers: 2, MaxWorkers: 3, LastCall: train.Duration(2 * time.Second), TaskQueue: rq},
		train.RunConfig{Name: "py-elastic", StoragePath: dir, Failure: train.FailureConfig{MaxFailures: 1}},
		train.WithTaskQueue(tq), train.WithPython(mlpSpec(t))).Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	g.reached(t, 3)
	workers[2].Kill()
	g.open(t)
	res, err := run.Wait(ctx)
	if err != nil {
		dumpWorkflow(t, cl, run.WorkflowID)
		t.Fatal(err)
	}
	verifyRun(t, res, dir, 2)
	if res.Attempts != 2 || fmt.Sprint(res.WorldSizes) != "[3 2]" {
		t.Fatalf("attempts %d world sizes %v: want 2 attempts on 3 then 2 ranks", res.Attempts, res.WorldSizes)
	}
	if _, err := os.Stat(final); err != nil {
		t.Fatalf("the run on two ranks wrote no final parameters: %v", err)
	}
	noPythonLeft(t)
}

// TestE2EPythonResNet18Improves: seed 003's script
// (python/examples/fashion_resnet18, ResNet-18 on Fashion-MNIST with
// prepare_model and prepare_data_loader) on two ranks of the real server
// trains: its loss falls and its test accuracy rises from the first epoch
// to the last, ending far above chance (0.1). Each report commits a checkpoint with
// the model.
func TestE2EPythonResNet18Improves(t *testing.T) {
	needTorch(t)
	if _, err := os.Stat("/usr/lib/python3/dist-packages/torchvision/__init__.py"); err != nil {
		if os.Getenv("TEMPOTRAIN_REQUIRE_TORCH") == "1" {
			t.Fatalf("needs python3-torchvision: %v", err)
		}
		t.Skipf("needs python3-torchvision: %v", err)
	}
	wd, err := filepath.Abs("../python/examples/fashion_resnet18")
	if err != nil {
		t.Fatal(err)
	}
	spec := train.PythonSpec{Entrypoint: "train.py:train_func", WorkingDir: wd, Interpreter: pyInterpreter,
		Env: map[string]string{"TT_TEST_TAG": t.Name(), "OMP_NUM_THREADS": "1"}}
	tq, rq := startWorker(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	dir := t.TempDir()
	cfg := map[string]any{"epochs": 2, "num_samples": 2048, "test_samples": 500, "batch_size": 32, "lr": 0.02}
	res, err := train.NewTrainer(cl, "", cfg, train.ScalingConfig{NumWorkers: 2, TaskQueue: rq},
		train.RunConfig{Name: "py-resnet18", StoragePath: dir}, train.WithTaskQueue(tq), train.WithPython(spec)).Fit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	recs := readMetrics(t, res)
	if len(recs) != 2 {
		t.Fatalf("%d reports, want one per epoch", len(recs))
	}
	for _, r := range recs {
		t.Logf("epoch %v: loss %.4f test accuracy %.4f, %.1f samples/s", r.Metrics["epoch"], r.Metrics["loss"], r.Metrics["accuracy"], r.Metrics["samples_per_s"])
	}
	first, last := recs[0].Metrics, recs[1].Metrics
	if !(last["loss"] < first["loss"]) || !(last["accuracy"] > first["accuracy"]) || last["accuracy"] < 0.5 {
		t.Fatalf("the model did not learn: loss %v -> %v, accuracy %v -> %v", first["loss"], last["loss"], first["accuracy"], last["accuracy"])
	}
	if _, err := os.Stat(filepath.Join(res.Checkpoint.URI, "model.pt")); err != nil {
		t.Fatalf("the last checkpoint has no model.pt: %v", err)
	}
	noPythonLeft(t)
}

// TestE2EPythonWorkingDirFromMinIO: the function's directory, packed and
// uploaded to S3 (real MinIO), is fetched, verified and cached by each rank;
// the run's checkpoints go to S3 too. A digest that does not match the
// bytes fails the run at once, naming both.
func TestE2EPythonWorkingDirFromMinIO(t *testing.T) {
	needTorch(t)
	ms := miniotest.Start(t)
	bucket := ms.CreateBucket(t, "")
	ms.SetEnv(t)
	archive, sum, err := python.Pack("testdata/python", python.DefaultMaxWorkingDir)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	runs := "s3://" + bucket + "/runs"
	uri, err := python.Upload(ctx, runs, "py-s3", archive, sum)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(uri, "s3://") {
		t.Fatalf("uploaded to %s, want an s3:// URI", uri)
	}
	spec := mlpSpec(t)
	spec.WorkingDir, spec.WorkingDirSHA256 = uri, sum
	cfg, _ := mlpConfig(t, map[string]any{"epochs": 2, "samples": 1024})
	tq, rq := startWorker(t, 2)
	res, err := train.NewTrainer(cl, "", cfg, train.ScalingConfig{NumWorkers: 2, TaskQueue: rq},
		train.RunConfig{Name: "py-s3", StoragePath: runs}, train.WithTaskQueue(tq), train.WithPython(spec)).Fit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Metrics["epoch"] != 1 || !strings.HasPrefix(res.Checkpoint.URI, runs) {
		t.Fatalf("result %+v: want 2 epochs and an S3 checkpoint", res)
	}

	bad := spec
	bad.WorkingDirSHA256 = strings.Repeat("0", 64)
	res, err = train.NewTrainer(cl, "", cfg, train.ScalingConfig{NumWorkers: 2, TaskQueue: rq},
		train.RunConfig{Name: "py-s3-bad", StoragePath: runs, Failure: train.FailureConfig{MaxFailures: 2}},
		train.WithTaskQueue(tq), train.WithPython(bad)).Fit(ctx)
	if err == nil || !strings.Contains(err.Error(), sum) || !strings.Contains(err.Error(), bad.WorkingDirSHA256) {
		t.Fatalf("err = %v, want one naming the archive's sha256 and the one wanted", err)
	}
	if res == nil || res.Attempts != 1 {
		t.Fatalf("result %+v: want one attempt (a wrong digest is not retried)", res)
	}
	noPythonLeft(t)
}

// TestE2EPythonShardedCheckpoint: every rank reports its own files for the
// same report (Ray V2's distributed checkpoint): the committed checkpoint
// holds every rank's, and after a failure each rank is given all of them
// (shards.py checks). Two ranks reporting the same file name fail the
// report, naming the file.
func TestE2EPythonShardedCheckpoint(t *testing.T) {
	needTorch(t)
	tq, rq := startWorker(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	spec := mlpSpec(t)
	spec.Entrypoint = "shards.py:train_func"
	dir := t.TempDir()
	res, err := train.NewTrainer(cl, "", map[string]any{"epochs": 3, "fail": true}, train.ScalingConfig{NumWorkers: 2, TaskQueue: rq},
		train.RunConfig{Name: "py-shards", StoragePath: dir, Failure: train.FailureConfig{MaxFailures: 1}},
		train.WithTaskQueue(tq), train.WithPython(spec)).Fit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Attempts != 2 {
		t.Fatalf("attempts %d, want 2 (rank 1 fails once)", res.Attempts)
	}
	for r := 0; r < 2; r++ {
		b, err := os.ReadFile(filepath.Join(res.Checkpoint.URI, fmt.Sprintf("shard-%d.txt", r)))
		if err != nil || string(b) != fmt.Sprintf("rank %d epoch 2", r) {
			t.Fatalf("the last checkpoint's shard of rank %d: %q, %v", r, b, err)
		}
		if _, err := os.Stat(filepath.Join(res.Checkpoint.URI, fmt.Sprintf("part-%d", r), "x")); err != nil {
			t.Fatal(err)
		}
	}

	_, err = train.NewTrainer(cl, "", map[string]any{"epochs": 1, "same": true}, train.ScalingConfig{NumWorkers: 2, TaskQueue: rq},
		train.RunConfig{Name: "py-shards-same", StoragePath: dir}, train.WithTaskQueue(tq), train.WithPython(spec)).Fit(ctx)
	if err == nil || !strings.Contains(err.Error(), "same.txt") || !strings.Contains(err.Error(), "rank 1") {
		t.Fatalf("err = %v, want one naming the file both ranks wrote and rank 1", err)
	}
	noPythonLeft(t)
}

// TestE2EPythonHungRank: rank 1 stops in its own code while rank 0 waits
// in torch's all-reduce: torch's collectives give up after the run's
// collective_timeout (not gloo's 30 minutes), and the run fails naming
// rank 1 as the one it waited for.
func TestE2EPythonHungRank(t *testing.T) {
	needTorch(t)
	tq, rq := startWorker(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	spec := mlpSpec(t)
	spec.Entrypoint = "hang.py:train_func"
	start := time.Now()
	_, err := train.NewTrainer(cl, "", nil, train.ScalingConfig{NumWorkers: 2, TaskQueue: rq},
		train.RunConfig{Name: "py-hang", StoragePath: t.TempDir(), Failure: train.FailureConfig{CollectiveTimeout: train.Duration(5 * time.Second)}},
		train.WithTaskQueue(tq), train.WithPython(spec)).Fit(ctx)
	took := time.Since(start)
	if err == nil {
		t.Fatal("the run succeeded")
	}
	t.Logf("failed after %v: %v", took, err)
	if took > 90*time.Second {
		t.Errorf("the hang ended the run after %v: want about the collective timeout (5s)", took)
	}
	if !strings.Contains(err.Error(), "rank 1 did not reach a torch collective within 5s; its last progress: epoch 0, step 3") {
		t.Errorf("the error does not lead with rank 1 and where it stopped: %v", err)
	}
	noPythonLeft(t)
}
