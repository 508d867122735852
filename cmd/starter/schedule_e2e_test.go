package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/app"
	"github.com/tempotrain/tempotrain/dashboard"
	"github.com/tempotrain/tempotrain/storage"
	"github.com/tempotrain/tempotrain/train"
)

// scoreFn "trains" for config.epochs epochs, continuing from a checkpoint's
// epoch: its loss is 1/(epochs so far) + penalty, so a warm-started run
// ends better than its predecessor unless its penalty says otherwise.
func scoreFn(ctx context.Context, tc *train.Context) error {
	var cfg struct {
		Epochs  int     `json:"epochs"`
		Penalty float64 `json:"penalty"`
		// SleepMS slows each epoch down; FailAt fails attempt 1 in that
		// epoch (0: never).
		SleepMS int `json:"sleep_ms"`
		FailAt  int `json:"fail_at"`
		// Absolute: epochs counts all the run's epochs, those of the
		// checkpoint resumed from included (default: epochs more).
		Absolute bool `json:"absolute"`
	}
	if err := tc.Config(&cfg); err != nil {
		return err
	}
	done := 0
	if ck := tc.Checkpoint(); ck != nil {
		b, err := ck.ReadFile("epochs")
		if err != nil {
			return err
		}
		done = int(binary.LittleEndian.Uint64(b))
	}
	last := cfg.Epochs
	if cfg.Absolute {
		last -= done
	}
	for e := 1; e <= last; e++ {
		total := done + e
		for step := range 10 {
			tc.SetProgress(total, step)
			time.Sleep(time.Duration(cfg.SleepMS) * time.Millisecond / 10)
			tc.AddSamples(64)
		}
		if total == cfg.FailAt && tc.Attempt() == 1 {
			return fmt.Errorf("injected failure in epoch %d", total)
		}
		var ck *train.Checkpoint
		if tc.WorldRank() == 0 {
			dir, err := tc.NewCheckpointDir()
			if err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(dir, "epochs"), binary.LittleEndian.AppendUint64(nil, uint64(total)), 0o644); err != nil {
				return err
			}
			ck = train.NewCheckpoint(dir)
		}
		if err := tc.Report(train.Metrics{"loss": 1/float64(total) + cfg.Penalty, "epochs": float64(total)}, ck); err != nil {
			return err
		}
	}
	return nil
}

func init() { train.MustRegister("schedule-score", scoreFn) }

var scheduleEnv struct {
	local  *app.Local
	tq, rq string
}

func startScheduleEnv(t *testing.T) (addr string, cl client.Client) {
	t.Helper()
	return startEnv(t, app.DevServerOptions{})
}

// startEnv starts a dev server (server options srv), a client and a worker
// of the test's own queues.
func startEnv(t *testing.T, srv app.DevServerOptions) (addr string, cl client.Client) {
	t.Helper()
	tq, rq := "tq-"+t.Name(), "rq-"+t.Name()
	local, err := app.StartLocal(app.LocalOptions{
		Server: srv,
		Worker: &app.WorkerOptions{Workflows: true, TaskQueue: tq, RankSlots: 2, RankQueue: rq},
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(local.Stop)
	scheduleEnv.local, scheduleEnv.tq, scheduleEnv.rq = local, tq, rq
	return local.Server.Address, local.Client
}

// runs returns the Fit workflow IDs a schedule started, oldest first, once
// at least n have closed.
func scheduledRuns(t *testing.T, cl client.Client, id string, n int) []string {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		d, err := cl.ScheduleClient().GetHandle(ctx, id).Describe(ctx)
		if err == nil && len(d.Info.RecentActions) >= n {
			var ids []string
			closed := 0
			for _, a := range d.Info.RecentActions {
				wid := a.StartWorkflowResult.WorkflowID
				ids = append(ids, wid)
				if desc, err := cl.DescribeWorkflowExecution(ctx, wid, ""); err == nil && desc.GetWorkflowExecutionInfo().GetCloseTime() != nil {
					closed++
				}
			}
			if closed >= n {
				return ids
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("schedule %s: fewer than %d runs closed in 2 minutes", id, n)
	return nil
}

func readPointerFile(t *testing.T, path string) (api.Pointer, bool) {
	t.Helper()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return api.Pointer{}, false
	}
	if err != nil {
		t.Fatal(err)
	}
	var p api.Pointer
	if err := json.Unmarshal(b, &p); err != nil {
		t.Fatal(err)
	}
	return p, true
}

// Scheduled retraining through the starter's commands on a dev server:
// trigger runs, the second warm-starts from the first's best checkpoint
// (previous-best, resolved when it starts) and is promoted because it is
// better; a third, made worse with `schedule update`, is recorded but not
// promoted; pause stops an interval's triggers and unpause resumes them;
// backfill starts the runs of a past range.
func TestScheduledRetraining(t *testing.T) {
	addr, cl := startScheduleEnv(t)
	dir := t.TempDir()
	sh := func(args ...string) {
		t.Helper()
		if err := runSchedule(append(args, "-address", addr)); err != nil {
			t.Fatalf("schedule %v: %v", args, err)
		}
	}
	fitFlags := []string{"-func", "schedule-score", "-workers", "1", "-rank-queue", scheduleEnv.rq, "-task-queue", scheduleEnv.tq,
		"-storage", dir, "-resume-from", "previous-best", "-score-attr", "loss", "-score-order", "min", "-config", `{"epochs":2}`}
	sh(append([]string{"create", "-id", "nightly", "-every", "24h", "-note", "retrain on new data"}, fitFlags...)...)

	sh("trigger", "-id", "nightly")
	first := scheduledRuns(t, cl, "nightly", 1)[0]
	promoted := filepath.Join(dir, "nightly", api.PromotedFile)
	p1, ok := readPointerFile(t, promoted)
	if !ok || p1.Run != first || p1.Score == nil || math.Abs(*p1.Score-0.5) > 1e-12 {
		t.Fatalf("after the first run: promoted %+v (found %v), want run %s with loss 0.5", p1, ok, first)
	}

	// Scheduled workflow IDs carry the start time to the second.
	time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(1100 * time.Millisecond)))
	sh("trigger", "-id", "nightly")
	second := scheduledRuns(t, cl, "nightly", 2)[1]
	st := runState(t, dir, second)
	if len(st.History) == 0 || st.History[0].WarmStart != p1.Checkpoint {
		t.Fatalf("the second run's first attempt warm-started from %q, want the first run's best %q", st.History[0].WarmStart, p1.Checkpoint)
	}
	p2, _ := readPointerFile(t, promoted)
	if p2.Run != second || math.Abs(*p2.Score-0.25) > 1e-12 {
		t.Fatalf("after the second run: promoted %+v, want the second run (loss 0.25, epochs 3-4)", p2)
	}

	// Worse: promoted stays, last moves.
	sh("update", "-id", "nightly", "-config", `{"epochs":1,"penalty":1}`)
	time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(1100 * time.Millisecond)))
	sh("trigger", "-id", "nightly")
	third := scheduledRuns(t, cl, "nightly", 3)[2]
	p3, _ := readPointerFile(t, promoted)
	last, _ := readPointerFile(t, filepath.Join(dir, "nightly", api.LastFile))
	if p3.Run != second || last.Run != third {
		t.Fatalf("after a worse third run: promoted %s, last %s; want %s and %s", p3.Run, last.Run, second, third)
	}

	// Pause stops triggers; unpause resumes them.
	sh(append([]string{"create", "-id", "often", "-every", "1s"}, fitFlags...)...)
	scheduledRuns(t, cl, "often", 1)
	sh("pause", "-id", "often", "-note", "maintenance")
	time.Sleep(1500 * time.Millisecond) // a start already under way lands
	ctx := context.Background()
	d, err := cl.ScheduleClient().GetHandle(ctx, "often").Describe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	before := d.Info.NumActions
	time.Sleep(3 * time.Second)
	if d, err = cl.ScheduleClient().GetHandle(ctx, "often").Describe(ctx); err != nil || d.Info.NumActions != before || !d.Schedule.State.Paused {
		t.Fatalf("paused schedule: %d runs then %d (err %v), paused %v", before, d.Info.NumActions, err, d.Schedule.State.Paused)
	}
	sh("unpause", "-id", "often")
	scheduledRuns(t, cl, "often", before+1)
	sh("delete", "-id", "often")

	// Backfill: the runs a 1-minute interval had in the last 3 minutes.
	sh(append([]string{"create", "-id", "hourly", "-every", "1m", "-paused", "-overlap", "allow-all"}, fitFlags...)...)
	now := time.Now().UTC().Truncate(time.Minute)
	sh("backfill", "-id", "hourly", "-start", now.Add(-3*time.Minute).Format(time.RFC3339), "-end", now.Format(time.RFC3339), "-overlap", "allow-all")
	got := scheduledRuns(t, cl, "hourly", 3)
	if len(got) < 3 {
		t.Fatalf("backfill started %d runs, want 3", len(got))
	}

	// starter metrics reads a run's reports from its storage.
	csvOut := captureStdout(t, func() {
		if err := runMetrics([]string{"-name", second, "-storage", dir, "-csv"}); err != nil {
			t.Error(err)
		}
	})
	if lines := strings.Split(strings.TrimSpace(csvOut), "\n"); len(lines) != 3 || lines[0] != "index,attempt,time,checkpoint,epochs,loss" || !strings.HasSuffix(lines[2], ",4,0.25") {
		t.Errorf("starter metrics -csv:\n%s", csvOut)
	}

	// The runs, found by the search attributes every Fit upserts.
	var listed strings.Builder
	q, err := dashboard.RunsQuery("schedule-score", "succeeded", "")
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		listed.Reset()
		if err := listRuns(ctx, cl, q, 50, &listed); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(listed.String(), second) && strings.Contains(listed.String(), third) {
			break
		}
	}
	if !strings.Contains(listed.String(), second) || !strings.Contains(listed.String(), "schedule-score") {
		t.Errorf("starter runs -func schedule-score -status succeeded:\n%s", listed.String())
	}
	t.Logf("starter runs:\n%s", listed.String())

	out := captureStdout(t, func() {
		if err := runSchedule([]string{"list", "-address", addr}); err != nil {
			t.Error(err)
		}
	})
	if !strings.Contains(out, "nightly") || !strings.Contains(out, "retrain on new data") || !strings.Contains(out, "hourly") {
		t.Errorf("schedule list:\n%s", out)
	}
	out = captureStdout(t, func() {
		if err := runSchedule([]string{"describe", "-id", "nightly", "-address", addr}); err != nil {
			t.Error(err)
		}
	})
	if !strings.Contains(out, "every 24h0m0s") || !strings.Contains(out, "runs:     3") {
		t.Errorf("schedule describe:\n%s", out)
	}
	t.Log(out)
}

// runState reads a run's run.json under dir.
func runState(t *testing.T, dir, name string) api.RunState {
	t.Helper()
	b, err := storage.Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	var st api.RunState
	if found, err := storage.NewRun(b, name).LoadState(context.Background(), &st); err != nil || !found {
		t.Fatalf("%s/run.json: found %v, %v", name, found, err)
	}
	return st
}
