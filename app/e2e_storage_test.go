package app_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/storage"
	"github.com/tempotrain/tempotrain/storage/miniotest"
	"github.com/tempotrain/tempotrain/train"
)

// verifyRun checks that every checkpoint run.json lists restores with good
// sums, that storage holds no other checkpoint (retention deleted what it
// retired), that reports cover epochs 1..epochs in order at the end, and
// returns the run state.
func verifyRun(t *testing.T, res *train.Result, storagePath string, epochs int) api.RunState {
	t.Helper()
	ctx := context.Background()
	b, err := storage.Open(ctx, storagePath)
	if err != nil {
		t.Fatal(err)
	}
	run := storage.NewRun(b, res.Name)
	var st api.RunState
	if found, err := run.LoadState(ctx, &st); err != nil || !found {
		t.Fatalf("run.json: found %v err %v", found, err)
	}
	if len(st.Checkpoints) == 0 {
		t.Fatal("run.json lists no checkpoint")
	}
	listed := map[int]bool{}
	for _, c := range st.Checkpoints {
		listed[c.Seq] = true
		if _, err := run.RestoreCheckpoint(ctx, c.Seq, t.TempDir()+"/ck"); err != nil {
			t.Errorf("checkpoint %d (%s) listed in run.json does not restore: %v", c.Seq, c.URI, err)
		}
	}
	stored := storedCheckpoints(t, b, res.Name)
	for seq := range stored {
		if !listed[seq] {
			t.Errorf("storage holds checkpoint %d, which run.json does not list (kept %v): retention left it", seq, seqsOf(st.Checkpoints))
		}
	}
	for seq := range listed {
		if !stored[seq] {
			t.Errorf("run.json lists checkpoint %d, which storage does not hold", seq)
		}
	}
	lines, err := run.ReadMetrics(ctx)
	if err != nil || len(lines) != st.Reports {
		t.Fatalf("metrics.jsonl: %d lines, err %v; run.json says %d reports", len(lines), err, st.Reports)
	}
	if res.Metrics["epoch"] != float64(epochs) {
		t.Errorf("final epoch %v, want %d", res.Metrics["epoch"], epochs)
	}
	return st
}

// storedCheckpoints lists the checkpoint directories that hold any object,
// committed or not.
func storedCheckpoints(t *testing.T, b storage.Backend, runName string) map[int]bool {
	t.Helper()
	objs, err := b.List(context.Background(), runName+"/checkpoint_")
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]bool{}
	for _, o := range objs {
		dir, _, _ := strings.Cut(strings.TrimPrefix(o.Key, runName+"/"), "/")
		var seq int
		if _, err := fmt.Sscanf(dir, "checkpoint_%d", &seq); err == nil {
			out[seq] = true
		}
	}
	return out
}

func seqsOf(cs []api.Checkpoint) []int {
	var out []int
	for _, c := range cs {
		out = append(out, c.Seq)
	}
	return out
}

// TestE2ERetention keeps the two checkpoints with the lowest loss, and the
// latest, in local storage and in MinIO: the others are gone from storage,
// and run.json lists exactly what is there.
func TestE2ERetention(t *testing.T) {
	srv := miniotest.Start(t)
	bucket := srv.CreateBucket(t, "")
	srv.SetEnv(t)
	cfg := linearConfig{Epochs: 6, Steps: 10, Dim: 16}
	for _, tt := range []struct{ name, path string }{
		{"local", t.TempDir()},
		{"minio", "s3://" + bucket + "/runs"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			res, err := fit(t, "e2e-linear", cfg, 2, train.RunConfig{Name: "keep-" + tt.name, StoragePath: tt.path,
				Checkpoint: train.CheckpointConfig{NumToKeep: 2, ScoreAttribute: "loss", ScoreOrder: "min"}})
			if err != nil {
				t.Fatal(err)
			}
			st := verifyRun(t, res, tt.path, 6)
			// The loss falls every epoch here, so the best two are the
			// last two, and the latest is among them.
			if got := fmt.Sprint(seqsOf(st.Checkpoints)); got != "[5 6]" {
				t.Errorf("kept %s, want [5 6]", got)
			}
			if len(res.BestCheckpoints) != 2 || res.BestCheckpoints[0].Metrics["loss"] > res.BestCheckpoints[1].Metrics["loss"] {
				t.Errorf("best checkpoints %+v, want two, lowest loss first", res.BestCheckpoints)
			}
		})
	}
}

// TestE2ES3 runs Fits whose storage is a real MinIO: a rank failure resumes
// from the S3 checkpoint, and a MinIO restart mid-run loses nothing.
func TestE2ES3(t *testing.T) {
	srv := miniotest.Start(t)
	bucket := srv.CreateBucket(t, "")
	srv.SetEnv(t)
	path := "s3://" + bucket + "/runs"
	cfg := linearConfig{Epochs: 4, Steps: 20, Dim: 16, FailRank: 1, FailAttempt: 1}
	clean, err := fit(t, "e2e-linear", cfg, 2, train.RunConfig{Name: "s3-clean", StoragePath: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}

	t.Run("rank failure resumes from the S3 checkpoint", func(t *testing.T) {
		c := cfg
		c.FailEpoch, c.FailMode = 3, "error"
		res, err := fit(t, "e2e-linear", c, 2, train.RunConfig{Name: "s3-fail", StoragePath: path, Failure: train.FailureConfig{MaxFailures: 1}})
		if err != nil {
			t.Fatal(err)
		}
		if res.Attempts != 2 || fmt.Sprint(res.Metrics) != fmt.Sprint(clean.Metrics) {
			t.Errorf("attempts %d metrics %v, want 2 attempts ending like the clean run %v", res.Attempts, res.Metrics, clean.Metrics)
		}
		if want := fmt.Sprintf("s3://%s/runs/s3-fail/checkpoint_000004", bucket); res.Checkpoint == nil || res.Checkpoint.URI != want {
			t.Errorf("result checkpoint %v, want %s", res.Checkpoint, want)
		}
		st := verifyRun(t, res, path, 4)
		if st.History[1].ResumedFrom != 2 {
			t.Errorf("attempt 2 resumed from %d, want 2", st.History[1].ResumedFrom)
		}
	})

	t.Run("MinIO restarted mid-run", func(t *testing.T) {
		var once sync.Once
		restarted := make(chan struct{})
		epochHook = func(attempt, rank, epoch int) {
			if epoch == 2 && rank == 0 {
				once.Do(func() {
					srv.Stop(t)
					go func() {
						defer close(restarted)
						time.Sleep(2 * time.Second)
						srv.StartAgain(t)
					}()
				})
			}
		}
		defer func() { epochHook = nil }()
		res, err := fit(t, "e2e-linear", cfg, 2, train.RunConfig{Name: "s3-restart", StoragePath: path, Failure: train.FailureConfig{MaxFailures: 3}})
		<-restarted
		if err != nil {
			t.Fatalf("run across a MinIO restart: %v", err)
		}
		st := verifyRun(t, res, path, 4)
		if fmt.Sprint(res.Metrics) != fmt.Sprint(clean.Metrics) {
			t.Errorf("metrics %v, want the clean run's %v", res.Metrics, clean.Metrics)
		}
		t.Logf("across the restart: %d attempts, checkpoints %v, history %+v", res.Attempts, len(st.Checkpoints), st.History)
		// The restart either went unnoticed (the SDK's retries outlasted it)
		// or failed attempts that the run restarted from a checkpoint; each
		// counted, each with its cause, the last one clean.
		if res.Attempts != res.Failures+1 || res.Failures > 3 || len(st.History) != res.Attempts || st.Failures != res.Failures {
			t.Errorf("attempts %d failures %d (run.json: %d failures, %d attempts recorded), want attempts = failures+1 <= 4",
				res.Attempts, res.Failures, st.Failures, len(st.History))
		}
		for i, h := range st.History {
			last := i == len(st.History)-1
			if last != (h.Error == "") {
				t.Errorf("attempt %d error %q (last attempt %v)", h.Attempt, h.Error, last)
			}
			if !last && h.ResumedFrom == 0 && i > 0 {
				t.Errorf("attempt %d did not resume from a checkpoint", h.Attempt)
			}
		}
	})
}

func TestE2EAsyncUpload(t *testing.T) {
	cfg := linearConfig{Epochs: 4, Steps: 10, Dim: 16}
	path := t.TempDir()
	clean, err := fit(t, "e2e-linear", cfg, 2, train.RunConfig{Name: "sync", StoragePath: path})
	if err != nil {
		t.Fatal(err)
	}
	res, err := fit(t, "e2e-linear", cfg, 2, train.RunConfig{Name: "async", StoragePath: path,
		Checkpoint: train.CheckpointConfig{AsyncUpload: true, NumToKeep: 2}})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(res.Metrics) != fmt.Sprint(clean.Metrics) || res.Reports != 4 {
		t.Errorf("async run %+v, want the sync run's metrics %v", res, clean.Metrics)
	}
	if res.Checkpoint == nil || res.Checkpoint.Seq != 4 || res.Checkpoint.Bytes == 0 || len(res.BestCheckpoints) != 2 {
		t.Errorf("async checkpoints: latest %+v best %d, want seq 4 committed and 2 kept", res.Checkpoint, len(res.BestCheckpoints))
	}
	verifyRun(t, res, path, 4)
}

// TestE2EWarmStart starts a new run from another run's checkpoint URI
// (RunConfig.ResumeFrom), as Ray's resume_from_checkpoint does.
func TestE2EWarmStart(t *testing.T) {
	dir := t.TempDir()
	full, err := fit(t, "e2e-linear", linearConfig{Epochs: 4, Steps: 10, Dim: 8}, 2, train.RunConfig{Name: "full", StoragePath: dir})
	if err != nil {
		t.Fatal(err)
	}
	first, err := fit(t, "e2e-linear", linearConfig{Epochs: 2, Steps: 10, Dim: 8}, 2, train.RunConfig{Name: "first", StoragePath: dir})
	if err != nil {
		t.Fatal(err)
	}
	// Another run, elsewhere, warm-started from "first"'s last checkpoint.
	other := t.TempDir()
	res, err := fit(t, "e2e-linear", linearConfig{Epochs: 4, Steps: 10, Dim: 8}, 2,
		train.RunConfig{Name: "second", StoragePath: other, ResumeFrom: first.Checkpoint.URI})
	if err != nil {
		t.Fatal(err)
	}
	if res.Reports != 2 || fmt.Sprint(res.Metrics) != fmt.Sprint(full.Metrics) {
		t.Errorf("warm start: %d reports, metrics %v; want epochs 3-4 only, ending like a 4-epoch run %v", res.Reports, res.Metrics, full.Metrics)
	}
	st := verifyRun(t, res, other, 4)
	if st.History[0].WarmStart != first.Checkpoint.URI {
		t.Errorf("run.json history %+v does not record the warm start", st.History)
	}

	_, err = fit(t, "e2e-linear", linearConfig{Epochs: 4}, 2,
		train.RunConfig{Name: "bad-warm", StoragePath: other, ResumeFrom: dir + "/first/checkpoint_000009"})
	if err == nil || !strings.Contains(err.Error(), `run.resume_from = "`+dir+`/first/checkpoint_000009": not a committed checkpoint`) {
		t.Errorf("warm start from a missing checkpoint: %v", err)
	}
}
