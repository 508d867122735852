package activities

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/storage"
	"github.com/tempotrain/tempotrain/train"
)

func init() {
	// act-log logs as a Python process's output is logged (stream=...),
	// then ends as its config says: "error" fails, "wait" waits for the
	// rank's cancellation.
	train.MustRegister("act-log", func(ctx context.Context, tc *train.Context) error {
		var cfg testConfig
		if err := tc.Config(&cfg); err != nil {
			return err
		}
		tc.Logger().Info("hello from the function", "stream", "stdout", "step", 7)
		tc.Logger().Debug("a debug line stays out of the rank log")
		tc.Logger().With("phase", "eval").WithGroup("m").Warn("grouped", "loss", 0.5)
		switch cfg.Fail {
		case "error":
			return errors.New("loss is NaN")
		case "wait":
			tc.Logger().Info("waiting for the cancellation")
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	})
}

// rankLogOf reads rank's log of attempt 1 from local storage dir.
func rankLogOf(t *testing.T, dir, run string, rank int) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, run, "logs", "attempt-1", "rank-0.log"))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// TestRankLog: what the rank and its function log lands in the run's
// storage, as text lines without the run/attempt/rank tags the worker's own
// lines carry, and ends with how the rank ended.
func TestRankLog(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, config string
		end          string // the last line's message and attributes
	}{
		{"success", `{}`, `level=INFO msg="rank ended" reports=0`},
		{"error", `{"fail":"error"}`, `level=ERROR msg="rank ended" error="loss is NaN" kind=TrainFuncError`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			worker := &syncWriter{w: &bytes.Buffer{}}
			a := New(Options{ScratchDir: t.TempDir(), HeartbeatInterval: 5 * time.Millisecond,
				Logger: slog.New(slog.NewTextHandler(worker, &slog.HandlerOptions{Level: slog.LevelDebug}))})
			a.wf = newFakeWorkflow(1, 1)
			_, err := runRank(t, a, rankInput("act-log", dir, "logged", 0, 1, tc.config), nil)
			if (err != nil) != (tc.name == "error") {
				t.Fatalf("RunRank: %v", err)
			}
			got := rankLogOf(t, dir, "logged", 0)
			lines := strings.Split(strings.TrimSuffix(got, "\n"), "\n")
			wantIn := []string{
				`level=INFO msg="rank started" world_size=1 resumed_from="<no checkpoint>"`,
				`level=INFO msg="hello from the function" stream=stdout step=7`,
				`level=WARN msg=grouped phase=eval m.loss=0.5`,
			}
			for _, w := range wantIn {
				if !strings.Contains(got, w+"\n") {
					t.Errorf("rank log lacks %q:\n%s", w, got)
				}
			}
			if last := lines[len(lines)-1]; !strings.HasPrefix(last, "time=") || !strings.HasSuffix(last, tc.end) {
				t.Errorf("last line %q, want it to end %q", last, tc.end)
			}
			for _, no := range []string{"debug line", "run=", "attempt=", "rank="} {
				if strings.Contains(got, no) {
					t.Errorf("rank log holds %q:\n%s", no, got)
				}
			}
			// The worker's own lines are as before: tagged, the debug
			// line too.
			w := worker.String()
			for _, want := range []string{
				`msg="rank started" run=logged attempt=1 rank=0 world_size=1`,
				`msg="hello from the function" run=logged attempt=1 rank=0 stream=stdout step=7`,
				`msg="a debug line stays out of the rank log" run=logged attempt=1 rank=0`,
				`msg=grouped run=logged attempt=1 rank=0 phase=eval m.loss=0.5`,
			} {
				if !strings.Contains(w, want) {
					t.Errorf("worker's log lacks %q:\n%s", want, w)
				}
			}
			if strings.Contains(w, "rank ended") {
				t.Errorf("the rank log's last line reached the worker's log:\n%s", w)
			}
		})
	}
}

// TestRankLogOnCancellation: a cancelled rank's log is complete too.
func TestRankLogOnCancellation(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a := newTestActivities(t, newFakeWorkflow(1, 1))
	bg, cancel := context.WithCancel(context.Background())
	defer cancel()
	var s testsuite.WorkflowTestSuite
	s.SetLogger(log.NewStructuredLogger(quiet))
	env := s.NewTestActivityEnvironment()
	env.SetWorkerOptions(worker.Options{BackgroundActivityContext: bg})
	env.RegisterActivityWithOptions(a.RunRank, activity.RegisterOptions{Name: api.ActivityRunRank})
	done := make(chan error, 1)
	go func() {
		_, err := env.ExecuteActivity(api.ActivityRunRank, rankInput("act-log", dir, "cancelled", 0, 1, `{"fail":"wait"}`))
		done <- err
	}()
	// Local storage appends as lines come: the function's line shows
	// while it runs.
	path := filepath.Join(dir, "cancelled", "logs", "attempt-1", "rank-0.log")
	deadline := time.Now().Add(20 * time.Second)
	for {
		data, _ := os.ReadFile(path)
		if strings.Contains(string(data), "waiting for the cancellation") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the running rank's log holds %q", data)
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a cancelled rank succeeded")
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the cancelled rank did not end")
	}
	got := rankLogOf(t, dir, "cancelled", 0)
	for _, w := range []string{`msg="rank cancelled"`, `msg="rank ended" error="context canceled"`} {
		if !strings.Contains(got, w) {
			t.Errorf("rank log lacks %q:\n%s", w, got)
		}
	}
}

// TestRankLogSink: what a rank logs before its log opens (an elastic slot
// before the rendezvous) goes first into it; a slot that never opens one
// writes nothing.
func TestRankLogSink(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, err := storage.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	run := storage.NewRun(b, "sink")
	s := &rankLogSink{}
	s.Write([]byte("before\n"))
	s.Write(make([]byte, rankLogPending)) // over the bound: dropped
	s.open(run.RankLog(1, 0, storage.RankLogOptions{}))
	s.Write([]byte("after\n"))
	if err := s.close(ctx); err != nil {
		t.Fatal(err)
	}
	s.Write([]byte("closed\n"))
	data, err := run.ReadRankLog(ctx, 1, 0, 0)
	if err != nil || string(data) != "before\nafter\n" {
		t.Fatalf("log %q (%v), want before, after", data, err)
	}
	never := &rankLogSink{}
	never.Write([]byte("standby\n"))
	if err := never.close(ctx); err != nil {
		t.Fatal(err)
	}
	if logs, err := run.ListRankLogs(ctx); err != nil || len(logs) != 1 {
		t.Fatalf("logs %v (%v), want only rank 0's", logs, err)
	}
}

// syncWriter serialises writes to w, and reads of it.
type syncWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

func (s *syncWriter) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.String()
}
