package python

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/train"
	"github.com/tempotrain/tempotrain/train/trainrt"
)

// testInterpreter is Debian's python3, which has torch; the first python3
// on a PATH may be another.
func testInterpreter(t *testing.T) string {
	t.Helper()
	for _, p := range []string{os.Getenv("TEMPOTRAIN_TEST_PYTHON"), "/usr/bin/python3"} {
		if p == "" {
			continue
		}
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	p, err := exec.LookPath("python3")
	if err != nil {
		t.Fatalf("no python3: %v", err)
	}
	return p
}

type report struct {
	metrics train.Metrics
	dir     string
	files   []string
}

// recorder is the runtime's side of Report for one rank: it lists the
// checkpoint's files at the time of the report, as a commit would read
// them.
type recorder struct {
	mu      sync.Mutex
	reports []report
}

func (r *recorder) Report(_ context.Context, m train.Metrics, ck *train.Checkpoint) error {
	rep := report{metrics: m}
	if ck != nil {
		rep.dir = ck.Dir
		_ = filepath.WalkDir(ck.Dir, func(p string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				rel, _ := filepath.Rel(ck.Dir, p)
				rep.files = append(rep.files, rel)
			}
			return nil
		})
	}
	r.mu.Lock()
	r.reports = append(r.reports, rep)
	r.mu.Unlock()
	return nil
}

// runPy runs the Python runner for one rank of one (world size 1) with
// the given files in its working directory.
func runPy(t *testing.T, ctx context.Context, spec api.PythonSpec, files map[string]string, config string, ckpt *train.Checkpoint) (*recorder, error) {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	spec.WorkingDir = dir
	if spec.Interpreter == "" {
		spec.Interpreter = testInterpreter(t)
	}
	rec := &recorder{}
	var cfg json.RawMessage
	if config != "" {
		cfg = json.RawMessage(config)
	}
	tc := trainrt.NewContext(ctx, trainrt.ContextInfo{
		RunName: "py-test", Attempt: 1, WorldRank: 0, WorldSize: 1, LocalRank: 0, LocalWorldSize: 1,
		Config: cfg, Checkpoint: ckpt, ScratchDir: t.TempDir(), Device: -1, Python: &spec,
	}, nil, rec, nil)
	fn := Func(Options{CacheDir: t.TempDir()})
	return rec, fn(ctx, tc)
}

func TestFunctionReportsAndCheckpoints(t *testing.T) {
	ctx := context.Background()
	prev := t.TempDir()
	if err := os.WriteFile(filepath.Join(prev, "state.txt"), []byte("7"), 0o644); err != nil {
		t.Fatal(err)
	}
	rec, err := runPy(t, ctx, api.PythonSpec{Entrypoint: "train.py:train_func"}, map[string]string{"train.py": `
import os, tempfile
import tempotrain.train as train

def train_func(config):
    ctx = train.get_context()
    assert ctx.get_world_rank() == 0 and ctx.get_world_size() == 1, (ctx.get_world_rank(), ctx.get_world_size())
    assert os.environ["RANK"] == "0" and os.environ["WORLD_SIZE"] == "1"
    ck = train.get_checkpoint()
    with ck.as_directory() as d:
        start = int(open(os.path.join(d, "state.txt")).read())
    for epoch in range(config["epochs"]):
        train.set_progress(epoch, 0)
        d = tempfile.mkdtemp()
        with open(os.path.join(d, "state.txt"), "w") as f:
            f.write(str(start + epoch))
        train.report({"loss": 1.0 / (epoch + 1), "epoch": epoch, "ok": True}, checkpoint=train.Checkpoint.from_directory(d))
    print("trained", flush=True)
`}, `{"epochs": 3}`, &train.Checkpoint{Dir: prev, Seq: 4})
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.reports) != 3 {
		t.Fatalf("%d reports, want 3", len(rec.reports))
	}
	for i, r := range rec.reports {
		if r.metrics["epoch"] != float64(i) || r.metrics["loss"] != 1.0/float64(i+1) || r.metrics["ok"] != 1 {
			t.Errorf("report %d: metrics %v", i, r.metrics)
		}
		if len(r.files) != 1 || r.files[0] != "state.txt" {
			t.Errorf("report %d: checkpoint files %v, want [state.txt]", i, r.files)
		}
	}
}

func TestExceptionNamesTypeMessageAndLine(t *testing.T) {
	_, err := runPy(t, context.Background(), api.PythonSpec{Entrypoint: "train.py:train_func"}, map[string]string{"train.py": `
def helper(x):
    raise ValueError("bad batch %d" % x)

def train_func(config):
    helper(3)
`}, "", nil)
	if err == nil {
		t.Fatal("no error")
	}
	msg := err.Error()
	for _, want := range []string{"ValueError", "bad batch 3", "train.py", "line 3", "helper"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error lacks %q:\n%s", want, msg)
		}
	}
	if train.IsNonRetryable(err) {
		t.Errorf("a ValueError is retryable, got non-retryable: %v", err)
	}
}

func TestNonRetryableError(t *testing.T) {
	_, err := runPy(t, context.Background(), api.PythonSpec{Entrypoint: "train.py:train_func"}, map[string]string{"train.py": `
import tempotrain.train as train
def train_func(config):
    raise train.NonRetryableError("the labels are wrong")
`}, "", nil)
	if err == nil || !train.IsNonRetryable(err) || !strings.Contains(err.Error(), "the labels are wrong") {
		t.Fatalf("err = %v, want a non-retryable error with the message", err)
	}
}

func TestMissingEntrypointFailsAtOnce(t *testing.T) {
	cases := []struct {
		entry, want string
		files       map[string]string
	}{
		{"train.py:train_func", "train_func", map[string]string{"train.py": "def other(c): pass\n"}},
		{"nosuch.py:train_func", "nosuch.py", nil},
		{"nosuchmod:train_func", "nosuchmod", nil},
		{"script.py", "script.py", nil},
	}
	for _, c := range cases {
		t.Run(c.entry, func(t *testing.T) {
			_, err := runPy(t, context.Background(), api.PythonSpec{Entrypoint: c.entry}, c.files, "", nil)
			if err == nil || !train.IsNonRetryable(err) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want a non-retryable error naming %q", err, c.want)
			}
		})
	}
}

func TestScriptGetsArgv(t *testing.T) {
	rec, err := runPy(t, context.Background(), api.PythonSpec{Entrypoint: "main.py", Args: []string{"--lr", "0.5"}}, map[string]string{"main.py": `
import sys
import tempotrain.train as train
if __name__ == "__main__":
    assert sys.argv[1:] == ["--lr", "0.5"], sys.argv
    train.report({"lr": float(sys.argv[2])})
`}, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.reports) != 1 || rec.reports[0].metrics["lr"] != 0.5 {
		t.Fatalf("reports %v", rec.reports)
	}
}

func TestExitWithoutExceptionIsNamed(t *testing.T) {
	_, err := runPy(t, context.Background(), api.PythonSpec{Entrypoint: "train.py:train_func"}, map[string]string{"train.py": `
import os, sys
def train_func(config):
    sys.stderr.write("about to die\n")
    sys.stderr.flush()
    os._exit(3)
`}, "", nil)
	if err == nil || !strings.Contains(err.Error(), "status 3") || !strings.Contains(err.Error(), "about to die") {
		t.Fatalf("err = %v, want the exit status and stderr's last line", err)
	}
}

// pidsAlive lists which of the pids written (one per line) into path
// still run.
func pidsAlive(t *testing.T, path string) (all, alive []int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range strings.Fields(string(b)) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, pid)
		if syscall.Kill(pid, 0) == nil {
			// A zombie (not yet reaped by its parent, init) counts as gone.
			if st, err := os.ReadFile("/proc/" + f + "/stat"); err == nil && !strings.Contains(string(st), ") Z ") {
				alive = append(alive, pid)
			}
		}
	}
	return all, alive
}

// spawner is a function that starts a grandchild (as a DataLoader worker
// would), writes both pids, and then hangs, deaf to everything.
const spawner = `
import os, subprocess, sys, time
def train_func(config):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    with open(config["pids"], "w") as f:
        f.write("%d\n%d\n" % (os.getpid(), child.pid))
    while True:
        time.sleep(1)
`

func waitFileT(t *testing.T, path string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(path); err == nil && strings.Count(string(b), "\n") >= 2 {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s never written", path)
}

func TestCancellationKillsTheProcessGroup(t *testing.T) {
	pids := filepath.Join(t.TempDir(), "pids")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := runPy(t, ctx, api.PythonSpec{Entrypoint: "train.py:train_func"}, map[string]string{"train.py": spawner}, `{"pids": "`+pids+`"}`, nil)
		done <- err
	}()
	waitFileT(t, pids)
	start := time.Now()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("err = %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the runner did not return within 10 s of its cancellation")
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("cancellation took %v", d)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		all, alive := pidsAlive(t, pids)
		if len(alive) == 0 {
			t.Logf("processes %v gone", all)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes %v still alive after the rank ended", alive)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestWorkerSIGKILLLeavesNoProcess runs the runner in a child process (this
// test binary) and SIGKILLs it: the Python process and its own child must
// go with it.
func TestWorkerSIGKILLLeavesNoProcess(t *testing.T) {
	pids := filepath.Join(t.TempDir(), "pids")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "TEMPOTRAIN_PY_CHILD="+pids)
	out, err := os.CreateTemp(t.TempDir(), "child-out")
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	waitFileT(t, pids)
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	deadline := time.Now().Add(5 * time.Second)
	for {
		all, alive := pidsAlive(t, pids)
		if len(alive) == 0 {
			t.Logf("processes %v gone after the worker's SIGKILL", all)
			return
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(out.Name())
			for _, p := range alive {
				_ = syscall.Kill(p, syscall.SIGKILL)
			}
			t.Fatalf("processes %v still alive 5 s after the worker's SIGKILL; child output:\n%s", alive, b)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestMain doubles the test binary as the worker of
// TestWorkerSIGKILLLeavesNoProcess: with TEMPOTRAIN_PY_CHILD set it runs a
// rank that hangs until it is killed.
func TestMain(m *testing.M) {
	if pids := os.Getenv("TEMPOTRAIN_PY_CHILD"); pids != "" {
		_, err := runPyChild(pids)
		fmt.Fprintln(os.Stderr, "the runner returned:", err)
		os.Exit(2)
	}
	os.Exit(m.Run())
}

func runPyChild(pids string) (*recorder, error) {
	dir, err := os.MkdirTemp("", "py-child-")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "train.py"), []byte(spawner), 0o644); err != nil {
		return nil, err
	}
	interp := "/usr/bin/python3"
	if p := os.Getenv("TEMPOTRAIN_TEST_PYTHON"); p != "" {
		interp = p
	}
	spec := api.PythonSpec{Entrypoint: "train.py:train_func", WorkingDir: dir, Interpreter: interp}
	rec := &recorder{}
	tc := trainrt.NewContext(context.Background(), trainrt.ContextInfo{
		RunName: "py-child", Attempt: 1, WorldSize: 1, LocalWorldSize: 1,
		Config: json.RawMessage(`{"pids": "` + pids + `"}`), ScratchDir: dir, Device: -1, Python: &spec,
	}, nil, rec, nil)
	return rec, Func(Options{CacheDir: filepath.Join(dir, "cache")})(context.Background(), tc)
}
