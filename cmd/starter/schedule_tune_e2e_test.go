package main

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tempotrain/tempotrain/api"
)

// A schedule of a Tune on a dev server: each trigger starts a new search
// ("tune-<id>-<time>"); the second search's trials warm-start from the
// first search's best (previous-best, resolved once per search), so its
// best is better and is promoted; the schedule's pointers live on the base
// storage path, beside the searches' directories.
func TestScheduledTune(t *testing.T) {
	addr, cl := startScheduleEnv(t)
	dir := t.TempDir()
	input := filepath.Join(dir, "tune.json")
	body := fmt.Sprintf(`{
  "trainer": {"train_func": "schedule-score", "config": {"epochs": 2},
    "scaling": {"num_workers": 1, "task_queue": %q},
    "run": {"storage_path": %q, "resume_from": "previous-best"}},
  "param_space": {"config.penalty": {"grid_search": [0, 0.125]}},
  "tune_config": {"metric": "loss", "mode": "min", "seed": 1}
}`, scheduleEnv.rq, filepath.Join(dir, "runs"))
	if err := os.WriteFile(input, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	sh := func(args ...string) {
		t.Helper()
		if err := runSchedule(append(args, "-address", addr)); err != nil {
			t.Fatalf("schedule %v: %v", args, err)
		}
	}
	sh("create", "-id", "nightly-search", "-every", "24h", "-tune", input, "-task-queue", scheduleEnv.tq)
	start := time.Now()
	sh("trigger", "-id", "nightly-search")
	first := scheduledRuns(t, cl, "nightly-search", 1)[0]
	if !strings.HasPrefix(first, "tune-nightly-search-") {
		t.Fatalf("scheduled workflow %s, want tune-nightly-search-<time>", first)
	}
	promoted := filepath.Join(dir, "runs", "nightly-search", api.PromotedFile)
	p1, ok := readPointerFile(t, promoted)
	if !ok || p1.Run != first || p1.Score == nil || math.Abs(*p1.Score-0.5) > 1e-12 || !strings.HasPrefix(p1.Checkpoint, filepath.Join(dir, "runs", first, "trial_")) {
		t.Fatalf("after the first search: promoted %+v (found %v), want search %s's best trial, loss 0.5", p1, ok, first)
	}
	if _, err := os.Stat(filepath.Join(p1.Checkpoint, "epochs")); err != nil {
		t.Fatalf("the promoted checkpoint: %v", err)
	}
	t.Logf("first search %s: %v", first, time.Since(start))

	time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(1100 * time.Millisecond)))
	sh("trigger", "-id", "nightly-search")
	second := scheduledRuns(t, cl, "nightly-search", 2)[1]
	if second == first {
		t.Fatalf("the second trigger started %s again", second)
	}
	p2, _ := readPointerFile(t, promoted)
	if p2.Run != second || p2.Score == nil || math.Abs(*p2.Score-0.25) > 1e-12 {
		t.Fatalf("after the second search: promoted %+v, want search %s (its trials warm-started: loss 0.25)", p2, second)
	}
	last, _ := readPointerFile(t, filepath.Join(dir, "runs", "nightly-search", api.LastFile))
	if last.Run != second {
		t.Errorf("last.json %+v, want search %s", last, second)
	}
	st := runState(t, filepath.Join(dir, "runs", second), "trial_0000")
	if len(st.History) == 0 || st.History[0].WarmStart != p1.Checkpoint {
		t.Errorf("the second search's trial_0000 warm-started from %+v, want the first search's best %s", st.History, p1.Checkpoint)
	}
	t.Logf("two searches: %v", time.Since(start))
}
