package workflows

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/tempotrain/tempotrain/api"
)

// predictHarness runs BatchPredict in the SDK's test environment with its
// three activities played by functions that record what they are asked.
type predictHarness struct {
	t   *testing.T
	env *testsuite.TestWorkflowEnvironment

	plan    func(api.PredictPlanInput) (api.PredictPlan, error)
	shard   func(ctx context.Context, in api.PredictShardInput) error
	plans   atomic.Int32
	commits []api.CommitPredictInput

	mu       sync.Mutex
	started  []int // shard indexes, in the order they started (each attempt)
	inflight int
	maxIn    int
	// commitAt is how many shards had completed when commit ran.
	completed, commitAt int
}

// planOf cuts n shards of 100 rows from two files.
func planOf(n int) api.PredictPlan {
	p := api.PredictPlan{Model: "m", DatasetFormat: "parquet", Files: []string{"/in/a.parquet", "/in/b.parquet"}, RowsIn: int64(n) * 100,
		Columns: []api.OutputColumn{{Name: "id", Type: "int64", Nullable: true, Source: "pass_through"}, {Name: "class", Type: "int64", Source: `output "class"`}}}
	for i := range n {
		f := i * 2 / n
		lo := int64(i-f*(n/2)) * 100
		p.Shards = append(p.Shards, api.PredictShardSpec{Index: i, File: f, Lo: lo, Hi: lo + 100})
	}
	return p
}

func newPredictHarness(t *testing.T, o PredictOptions, shards int) *predictHarness {
	var s testsuite.WorkflowTestSuite
	h := &predictHarness{t: t, env: s.NewTestWorkflowEnvironment()}
	h.plan = func(api.PredictPlanInput) (api.PredictPlan, error) { return planOf(shards), nil }
	h.shard = func(context.Context, api.PredictShardInput) error { time.Sleep(5 * time.Millisecond); return nil }
	NewBatchPredictor(o).Register(h.env)
	h.env.RegisterActivityWithOptions(func(_ context.Context, in api.PredictPlanInput) (api.PredictPlan, error) {
		h.plans.Add(1)
		return h.plan(in)
	}, activity.RegisterOptions{Name: api.ActivityPlanBatchPredict})
	h.env.RegisterActivityWithOptions(func(ctx context.Context, in api.PredictShardInput) (api.PredictShardOutput, error) {
		h.mu.Lock()
		h.started = append(h.started, in.Shard.Index)
		h.inflight++
		h.maxIn = max(h.maxIn, h.inflight)
		h.mu.Unlock()
		err := h.shard(ctx, in)
		h.mu.Lock()
		h.inflight--
		if err == nil {
			h.completed++
		}
		h.mu.Unlock()
		if err != nil {
			return api.PredictShardOutput{}, err
		}
		return api.PredictShardOutput{Index: in.Shard.Index, File: "/out/" + api.PartName(in.Shard.Index, in.Input.Format),
			Rows: in.Shard.Rows(), Bytes: 1000 + int64(in.Shard.Index), Attempt: int(activity.GetInfo(ctx).Attempt)}, nil
	}, activity.RegisterOptions{Name: api.ActivityPredictShard})
	h.env.RegisterActivityWithOptions(func(_ context.Context, in api.CommitPredictInput) error {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.commits = append(h.commits, in)
		h.commitAt = h.completed
		return nil
	}, activity.RegisterOptions{Name: api.ActivityCommitBatchPredict})
	return h
}

func predictInput(concurrency int) api.BatchPredictInput {
	return api.BatchPredictInput{Dataset: api.DatasetSpec{URI: "/in/*.parquet"}, Checkpoint: "/runs/r/checkpoint_000001",
		Output: "/out", Concurrency: concurrency, PassThrough: []string{"id"}, MaxAttempts: 3, HeartbeatTimeout: api.Duration(5 * time.Second)}
}

func (h *predictHarness) result() *api.BatchPredictResult {
	h.t.Helper()
	if err := h.env.GetWorkflowError(); err != nil {
		h.t.Fatalf("workflow error: %v", err)
	}
	var res api.BatchPredictResult
	if err := h.env.GetWorkflowResult(&res); err != nil {
		h.t.Fatal(err)
	}
	return &res
}

// TestBatchPredictRunsEveryShardOnce: every shard of the plan runs once,
// never more than Concurrency at a time, and the manifest is committed
// after the last one, with every shard's rows.
func TestBatchPredictRunsEveryShardOnce(t *testing.T) {
	const shards = 12
	h := newPredictHarness(t, PredictOptions{}, shards)
	h.env.ExecuteWorkflow(api.BatchPredictWorkflowType, predictInput(3))
	res := h.result()
	got := slices.Clone(h.started)
	slices.Sort(got)
	want := make([]int, shards)
	for i := range want {
		want[i] = i
	}
	if !slices.Equal(got, want) {
		t.Errorf("shards started %v, want each of 0..%d once", h.started, shards-1)
	}
	if h.maxIn > 3 || h.maxIn < 2 {
		t.Errorf("%d shards ran at once, want at most concurrency 3 (and more than one)", h.maxIn)
	}
	if h.plans.Load() != 1 || len(h.commits) != 1 || h.commitAt != shards {
		t.Fatalf("%d plans, %d commits after %d shards, want 1 plan and 1 commit after all %d", h.plans.Load(), len(h.commits), h.commitAt, shards)
	}
	c := h.commits[0]
	if len(c.Rows) != shards || c.Rows[5] != 100 || c.Bytes[5] != 1005 || len(c.Plan.Shards) != shards || c.Input.Format != "parquet" {
		t.Errorf("commit input %+v", c)
	}
	if res.Shards != shards || res.Done != shards || res.RowsIn != shards*100 || res.RowsOut != res.RowsIn || res.Retried != 0 ||
		len(res.Files) != shards || res.Files[11] != "part-00011.parquet" || res.Manifest != "/out/_SUCCESS" || len(res.Columns) != 2 {
		t.Errorf("result %+v", res)
	}
	v, err := h.env.QueryWorkflow(api.QueryBatchPredictStatus)
	if err != nil {
		t.Fatal(err)
	}
	var st api.BatchPredictStatus
	if err := v.Get(&st); err != nil {
		t.Fatal(err)
	}
	if st.Phase != "done" || st.Done != shards || st.Running != 0 || st.RowsDone != shards*100 || st.RowsIn != shards*100 {
		t.Errorf("status %+v", st)
	}
}

// TestBatchPredictRetriesFailingShard: a shard that fails once (its worker
// died, an error) runs again; the run succeeds and says so.
func TestBatchPredictRetriesFailingShard(t *testing.T) {
	h := newPredictHarness(t, PredictOptions{}, 5)
	h.shard = func(ctx context.Context, in api.PredictShardInput) error {
		if in.Shard.Index == 2 && activity.GetInfo(ctx).Attempt == 1 {
			return errors.New("worker lost")
		}
		return nil
	}
	h.env.ExecuteWorkflow(api.BatchPredictWorkflowType, predictInput(2))
	res := h.result()
	if res.Attempts[2] != 2 || res.Retried != 1 || res.Done != 5 || slices.Max(append(slices.Clone(res.Attempts[:2]), res.Attempts[3:]...)) != 1 {
		t.Errorf("attempts %v, retried %d: want shard 2 done at attempt 2, the others at 1", res.Attempts, res.Retried)
	}
	n := 0
	for _, s := range h.started {
		if s == 2 {
			n++
		}
	}
	if n != 2 || len(h.commits) != 1 {
		t.Errorf("shard 2 started %d times, %d commits", n, len(h.commits))
	}
}

// TestBatchPredictShardFailsForGood: a shard that fails every attempt ends
// the run with a BatchPredictFailed error naming it and its attempts; the
// shards in flight are cancelled and no manifest is written.
func TestBatchPredictShardFailsForGood(t *testing.T) {
	h := newPredictHarness(t, PredictOptions{}, 6)
	var cancelled atomic.Int32
	h.shard = func(ctx context.Context, in api.PredictShardInput) error {
		if in.Shard.Index == 1 {
			return errors.New("disk full")
		}
		if in.Shard.Index == 0 {
			// Runs until cancelled.
			for ctx.Err() == nil {
				activity.RecordHeartbeat(ctx)
				time.Sleep(10 * time.Millisecond)
			}
			cancelled.Add(1)
			return ctx.Err()
		}
		return nil
	}
	in := predictInput(2)
	in.MaxAttempts = 2
	h.env.ExecuteWorkflow(api.BatchPredictWorkflowType, in)
	err := h.env.GetWorkflowError()
	var app *temporal.ApplicationError
	if !errors.As(err, &app) || app.Type() != api.ErrBatchPredictFailed.String() || !app.NonRetryable() {
		t.Fatalf("error %v, want a non-retryable %s", err, api.ErrBatchPredictFailed)
	}
	// (A real server says "after 2 attempts" too: the test environment
	// leaves an activity error's retry state unset.)
	for _, s := range []string{"shard 1", "/in/a.parquet rows [100, 200)", "disk full"} {
		if !strings.Contains(app.Message(), s) {
			t.Errorf("error %q does not say %q", app.Message(), s)
		}
	}
	var res api.BatchPredictResult
	if !app.HasDetails() || app.Details(&res) != nil || res.Error == "" || res.Done >= 6 {
		t.Errorf("details %+v", res)
	}
	if len(h.commits) != 0 {
		t.Error("a failed run committed a manifest")
	}
	h.mu.Lock()
	ones := 0
	for _, s := range h.started {
		if s == 1 {
			ones++
		}
	}
	h.mu.Unlock()
	if ones != 2 {
		t.Errorf("shard 1 started %d times, want max_attempts 2", ones)
	}
	for deadline := time.Now().Add(5 * time.Second); cancelled.Load() == 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if cancelled.Load() != 1 {
		t.Errorf("shard 0 saw %d cancellations, want 1", cancelled.Load())
	}
}

// TestBatchPredictBadInput: an input that fails validation, and a plan
// that finds the dataset does not fit the model, end the run at once with
// a non-retryable InvalidInput error that names the field or column.
func TestBatchPredictBadInput(t *testing.T) {
	t.Run("validation", func(t *testing.T) {
		h := newPredictHarness(t, PredictOptions{}, 3)
		in := predictInput(2)
		in.Format = "json"
		h.env.ExecuteWorkflow(api.BatchPredictWorkflowType, in)
		var app *temporal.ApplicationError
		if err := h.env.GetWorkflowError(); !errors.As(err, &app) || app.Type() != api.ErrInvalidInput.String() || !app.NonRetryable() || !strings.Contains(app.Message(), `format = "json"`) {
			t.Errorf("error %v, want a non-retryable InvalidInput naming format", err)
		}
		if h.plans.Load() != 0 {
			t.Error("an invalid input was planned")
		}
	})
	t.Run("plan", func(t *testing.T) {
		h := newPredictHarness(t, PredictOptions{}, 3)
		h.plan = func(api.PredictPlanInput) (api.PredictPlan, error) {
			return api.PredictPlan{}, temporal.NewNonRetryableApplicationError(`invalid BatchPredict input: dataset: model m takes column "x3", which the dataset lacks`, api.ErrInvalidInput.String(), nil)
		}
		h.env.ExecuteWorkflow(api.BatchPredictWorkflowType, predictInput(2))
		var app *temporal.ApplicationError
		if err := h.env.GetWorkflowError(); !errors.As(err, &app) || app.Type() != api.ErrInvalidInput.String() || !app.NonRetryable() || !strings.Contains(app.Message(), `column "x3"`) {
			t.Errorf("error %v, want a non-retryable InvalidInput naming the column", err)
		}
		if h.plans.Load() != 1 || len(h.started) != 0 {
			t.Errorf("%d plans, %d shards started: a bad input is not retried and runs nothing", h.plans.Load(), len(h.started))
		}
	})
	t.Run("plan retried on a transient error", func(t *testing.T) {
		h := newPredictHarness(t, PredictOptions{}, 3)
		h.plan = func(api.PredictPlanInput) (api.PredictPlan, error) {
			if h.plans.Load() == 1 {
				return api.PredictPlan{}, errors.New("connection reset")
			}
			return planOf(3), nil
		}
		h.env.ExecuteWorkflow(api.BatchPredictWorkflowType, predictInput(2))
		if res := h.result(); res.Done != 3 || h.plans.Load() != 2 {
			t.Errorf("%d plans, result %+v", h.plans.Load(), res)
		}
	})
}

// TestBatchPredictContinuesAsNew: a run told to continue as new after 4
// shards stops launching, lets the shards in flight finish, and hands the
// rest to its continuation, which runs only those and commits all.
func TestBatchPredictContinuesAsNew(t *testing.T) {
	const shards = 10
	h := newPredictHarness(t, PredictOptions{ContinueAsNewAfterShards: 4}, shards)
	h.env.ExecuteWorkflow(api.BatchPredictWorkflowType, predictInput(3))
	err := h.env.GetWorkflowError()
	var can *workflow.ContinueAsNewError
	if !errors.As(err, &can) {
		t.Fatalf("error %v, want a continue-as-new", err)
	}
	var in api.BatchPredictInput
	var carry PredictCarry
	if err := decodeArgs(can, &in, &carry); err != nil {
		t.Fatal(err)
	}
	first := len(h.started)
	done := 0
	for _, a := range carry.Attempts {
		if a > 0 {
			done++
		}
	}
	if done != first || done < 4 || done >= shards || len(h.commits) != 0 {
		t.Fatalf("first run: %d started, %d done in the carry, %d commits", first, done, len(h.commits))
	}

	h2 := newPredictHarness(t, PredictOptions{ContinueAsNewAfterShards: 100}, shards)
	h2.env.ExecuteWorkflow(api.BatchPredictWorkflowType, in, &carry)
	res := h2.result()
	all := append(slices.Clone(h.started), h2.started...)
	slices.Sort(all)
	if len(all) != shards || slices.Compact(all)[shards-1] != shards-1 || h2.plans.Load() != 0 {
		t.Errorf("shards run over both runs %v (planned again: %v)", all, h2.plans.Load() != 0)
	}
	if res.Done != shards || res.RowsOut != shards*100 || len(h2.commits) != 1 {
		t.Errorf("result %+v, %d commits", res, len(h2.commits))
	}
}

// decodeArgs reads the input of a continue-as-new.
func decodeArgs(can *workflow.ContinueAsNewError, in *api.BatchPredictInput, carry *PredictCarry) error {
	if can.WorkflowType.Name != api.BatchPredictWorkflowType {
		return fmt.Errorf("continues as %q", can.WorkflowType.Name)
	}
	return converter.GetDefaultDataConverter().FromPayloads(can.Input, in, carry)
}
