package activities

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/storage"
)

// recordingBackend logs every write and delete in order, and fails the
// Puts of keys that fail names.
type recordingBackend struct {
	storage.Backend
	mu   sync.Mutex
	ops  []string
	fail func(key string) error
}

func (b *recordingBackend) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	b.mu.Lock()
	b.ops = append(b.ops, "put "+key)
	fail := b.fail
	b.mu.Unlock()
	if fail != nil {
		if err := fail(key); err != nil {
			return err
		}
	}
	return b.Backend.Put(ctx, key, r, size)
}

func (b *recordingBackend) Delete(ctx context.Context, key string) error {
	b.mu.Lock()
	b.ops = append(b.ops, "delete "+key)
	b.mu.Unlock()
	return b.Backend.Delete(ctx, key)
}

func (b *recordingBackend) log() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.ops...)
}

// withBackend makes a's activities use b for path, as they would the
// backend they open for it.
func withBackend(a *Activities, path string, b storage.Backend) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.backends[path] = b
}

func activityEnv(a *Activities) *testsuite.TestActivityEnvironment {
	var s testsuite.WorkflowTestSuite
	s.SetLogger(log.NewStructuredLogger(quiet))
	env := s.NewTestActivityEnvironment()
	env.RegisterActivityWithOptions(a.LoadRun, activity.RegisterOptions{Name: api.ActivityLoadRun})
	env.RegisterActivityWithOptions(a.RecordRun, activity.RegisterOptions{Name: api.ActivityRecordRun})
	return env
}

func recordInput(dir string, reports []api.ReportRecord, keep []int, del []int) api.RecordRunInput {
	st := api.RunState{Version: api.RunStateVersion, Name: "books", TrainFunc: "f", Status: api.StatusRunning, Reports: len(reports), NextSeq: 4}
	for _, seq := range keep {
		st.Checkpoints = append(st.Checkpoints, api.Checkpoint{Seq: seq})
	}
	return api.RecordRunInput{StoragePath: dir, RunName: "books", Reports: reports, State: st, Delete: del}
}

func TestRecordRunSavesStateBeforeItDeletes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	commitCheckpoints(t, dir, "books", 3)
	local, err := storage.Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	rb := &recordingBackend{Backend: local}
	a := newTestActivities(t, nil)
	withBackend(a, dir, rb)
	env := activityEnv(a)
	reports := []api.ReportRecord{{Index: 0, Attempt: 1, Metrics: api.Metrics{"loss": 1}, Checkpoint: 3}, {Index: 1, Attempt: 1, Metrics: api.Metrics{"loss": 0.5}}}
	in := recordInput(dir, reports, []int{3}, []int{1, 2})
	if _, err := env.ExecuteActivity(api.ActivityRecordRun, in); err != nil {
		t.Fatal(err)
	}
	ops := rb.log()
	state, firstDelete, metrics := -1, -1, -1
	for i, op := range ops {
		switch {
		case op == "put books/run.json" && state < 0:
			state = i
		case strings.HasPrefix(op, "delete ") && firstDelete < 0:
			firstDelete = i
		case strings.HasPrefix(op, "put books/metrics") && metrics < 0:
			metrics = i
		}
	}
	if state < 0 || firstDelete < 0 || state > firstDelete {
		t.Errorf("operations %q: run.json must be saved before the first delete", ops)
	}
	if metrics >= 0 && metrics > state {
		t.Errorf("operations %q: metrics.jsonl must be appended before run.json says it holds them", ops)
	}
	// Retired checkpoints are gone, whole; the kept one is intact.
	for seq, want := range map[int]bool{1: false, 2: false, 3: true} {
		_, err := os.Stat(filepath.Join(dir, "books", storage.CheckpointDir(seq), storage.ManifestFile))
		if exists := err == nil; exists != want {
			t.Errorf("checkpoint %d exists = %v, want %v", seq, exists, want)
		}
		files, _ := os.ReadDir(filepath.Join(dir, "books", storage.CheckpointDir(seq)))
		if !want && len(files) != 0 {
			t.Errorf("checkpoint %d: %d files left behind", seq, len(files))
		}
	}
	var st api.RunState
	b, err := os.ReadFile(filepath.Join(dir, "books", storage.StateFile))
	if err != nil || json.Unmarshal(b, &st) != nil || len(st.Checkpoints) != 1 || st.Checkpoints[0].Seq != 3 || st.Reports != 2 {
		t.Errorf("run.json %s (%v)", b, err)
	}

	// A retried call (the activity timed out after doing its work) repeats
	// nothing: still two lines, nothing more deleted, no error.
	if _, err := env.ExecuteActivity(api.ActivityRecordRun, in); err != nil {
		t.Fatalf("retried RecordRun: %v", err)
	}
	lines, err := storage.NewRun(local, "books").ReadMetrics(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) != 2 {
		t.Errorf("%d reports after a retry, want 2:\n%s", len(lines), lines)
	}
}

func TestRecordRunDeletesNothingWhenStateCannotBeSaved(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	commitCheckpoints(t, dir, "books", 3)
	local, err := storage.Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	rb := &recordingBackend{Backend: local, fail: func(key string) error {
		if strings.HasSuffix(key, storage.StateFile) {
			return errors.New("disk full")
		}
		return nil
	}}
	a := newTestActivities(t, nil)
	withBackend(a, dir, rb)
	_, err = activityEnv(a).ExecuteActivity(api.ActivityRecordRun, recordInput(dir, nil, []int{3}, []int{1, 2}))
	if err == nil || !strings.Contains(err.Error(), "disk full") || !strings.Contains(err.Error(), "run.json") {
		t.Fatalf("error %v, want the failed save of run.json", err)
	}
	for _, op := range rb.log() {
		if strings.HasPrefix(op, "delete ") {
			t.Errorf("%s after run.json failed to save: the old checkpoints are still listed there", op)
		}
	}
	for seq := 1; seq <= 3; seq++ {
		if _, err := os.Stat(filepath.Join(dir, "books", storage.CheckpointDir(seq), storage.ManifestFile)); err != nil {
			t.Errorf("checkpoint %d: %v", seq, err)
		}
	}
}

func TestLoadRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	a := newTestActivities(t, nil)
	env := activityEnv(a)
	load := func(in api.LoadRunInput) (api.LoadRunOutput, error) {
		var out api.LoadRunOutput
		v, err := env.ExecuteActivity(api.ActivityLoadRun, in)
		if err == nil {
			err = v.Get(&out)
		}
		return out, err
	}

	// A new run: no state, its path, and the storage check leaves nothing.
	out, err := load(api.LoadRunInput{StoragePath: dir, RunName: "new"})
	if err != nil || out.State != nil || out.Path != filepath.Join(dir, "new") {
		t.Fatalf("new run: %+v, %v", out, err)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("the storage check left %d entries in %s", len(left), dir)
	}

	// An existing run: its state.
	b, _ := storage.Open(ctx, dir)
	want := api.RunState{Version: api.RunStateVersion, Name: "old", Status: api.StatusFailed, Attempts: 3, NextSeq: 5, Updated: time.Unix(100, 0).UTC()}
	if err := storage.NewRun(b, "old").SaveState(ctx, want); err != nil {
		t.Fatal(err)
	}
	out, err = load(api.LoadRunInput{StoragePath: dir, RunName: "old"})
	if err != nil || out.State == nil || out.State.Attempts != 3 || out.State.Status != api.StatusFailed || out.State.NextSeq != 5 {
		t.Fatalf("existing run: %+v, %v", out.State, err)
	}

	// Errors a retry cannot fix end the run at once, naming what is wrong.
	newer := want
	newer.Version = api.RunStateVersion + 1
	if err := storage.NewRun(b, "future").SaveState(ctx, newer); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "a-file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		in   api.LoadRunInput
		want []string
	}{
		{api.LoadRunInput{StoragePath: dir, RunName: "future"}, []string{"format version 2", "reads up to 1"}},
		{api.LoadRunInput{StoragePath: file, RunName: "x"}, []string{"run.storage_path", file}},
		{api.LoadRunInput{StoragePath: dir, RunName: "x", ResumeFrom: filepath.Join(dir, "old", storage.CheckpointDir(9))},
			[]string{"run.resume_from", "checkpoint_000009", "not a committed checkpoint"}},
	} {
		_, err := load(tt.in)
		var app *temporal.ApplicationError
		if !errors.As(err, &app) || api.ErrorKind(app.Type()) != api.ErrStorage || !app.NonRetryable() {
			t.Errorf("%+v: %v, want a non-retryable %s", tt.in, err, api.ErrStorage)
			continue
		}
		for _, w := range tt.want {
			if !strings.Contains(app.Message(), w) {
				t.Errorf("%+v: message %q does not say %q", tt.in, app.Message(), w)
			}
		}
	}
}

// TestLoadRunInvalidDataset: a dataset that cannot work ends the run at
// once, non-retryably, naming the dataset: retried, LoadRun would try again
// for as long as its retry policy allows.
func TestLoadRunInvalidDataset(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	csv := filepath.Join(dir, "t.csv")
	if err := os.WriteFile(csv, []byte("a,y\n1,2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	env := activityEnv(newTestActivities(t, nil))
	for _, tt := range []struct {
		spec api.DatasetSpec
		want string
	}{
		{api.DatasetSpec{URI: filepath.Join(dir, "none-*.csv")}, "datasets.train"},
		{api.DatasetSpec{URI: csv, Label: "missing"}, `"missing"`},
		{api.DatasetSpec{URI: csv, Format: "xlsx"}, "xlsx"},
	} {
		_, err := env.ExecuteActivity(api.ActivityLoadRun, api.LoadRunInput{
			StoragePath: dir, RunName: "r", Datasets: map[string]api.DatasetSpec{"train": tt.spec}})
		var app *temporal.ApplicationError
		if !errors.As(err, &app) || api.ErrorKind(app.Type()) != api.ErrInvalidInput || !app.NonRetryable() {
			t.Errorf("%+v: %v, want a non-retryable %s", tt.spec, err, api.ErrInvalidInput)
			continue
		}
		if !strings.Contains(app.Message(), "datasets.train") || !strings.Contains(app.Message(), tt.want) {
			t.Errorf("%+v: message %q does not name datasets.train and %q", tt.spec, app.Message(), tt.want)
		}
	}
}
