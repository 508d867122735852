package workflows

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/workflow"

	"github.com/tempotrain/tempotrain/api"
)

// TestTuneScheduled: a search of a schedule resolves resume_from
// "previous-best" once (LoadRun on the search's directory, with the
// schedule), starts its trials from that checkpoint as no schedule's runs
// (they promote nothing), and promotes its best trial's best checkpoint on
// the base storage path, under the schedule, as a scheduled Fit does.
func TestTuneScheduled(t *testing.T) {
	h := newTuneHarness(Options{})
	var (
		mu       sync.Mutex
		loads    []api.LoadRunInput
		promotes []api.PromoteRequest
		trials   []api.FitInput
	)
	const prev = "/runs/tune-nightly-1/trial_0002/checkpoint_000004"
	h.env.OnActivity(api.ActivityLoadRun, mock.Anything, mock.Anything).Return(func(_ context.Context, in api.LoadRunInput) (api.LoadRunOutput, error) {
		mu.Lock()
		defer mu.Unlock()
		loads = append(loads, in)
		return api.LoadRunOutput{Path: in.StoragePath + "/" + in.RunName, ResumeFrom: prev}, nil
	})
	h.env.OnActivity(api.ActivityPromote, mock.Anything, mock.Anything).Return(func(_ context.Context, in api.PromoteRequest) (api.PromoteOutput, error) {
		mu.Lock()
		defer mu.Unlock()
		promotes = append(promotes, in)
		return api.PromoteOutput{Promoted: true}, nil
	})
	h.env.SetOnChildWorkflowStartedListener(func(_ *workflow.Info, _ workflow.Context, args converter.EncodedValues) {
		var fi api.FitInput
		if err := args.Get(&fi); err != nil {
			t.Error(err)
		}
		mu.Lock()
		trials = append(trials, fi)
		mu.Unlock()
	})
	in := searchInput(4, nil)
	in.Trainer.Run.Schedule, in.Trainer.Run.ResumeFrom = "nightly", api.ResumePreviousBest
	res := h.search(t, in)
	if len(loads) != 1 || loads[0].Schedule != "nightly" || loads[0].StoragePath != "/runs" || loads[0].RunName != "s" || loads[0].ResumeFrom != api.ResumePreviousBest {
		t.Errorf("LoadRun calls %+v, want one resolving previous-best of nightly", loads)
	}
	if len(trials) != 4 {
		t.Fatalf("%d trials started, want 4", len(trials))
	}
	for _, fi := range trials {
		if fi.Run.Schedule != "" || fi.Run.ResumeFrom != prev || fi.Run.StoragePath != "/runs/s" {
			t.Errorf("trial %s: schedule %q resume_from %q storage %q", fi.Run.Name, fi.Run.Schedule, fi.Run.ResumeFrom, fi.Run.StoragePath)
		}
	}
	if res.Best == nil || len(promotes) != 1 || !res.Promoted {
		t.Fatalf("best %+v, promotes %+v, promoted %v", res.Best, promotes, res.Promoted)
	}
	p := promotes[0]
	if p.StoragePath != "/runs" || p.Schedule != "nightly" || p.Run != "s" || p.Best.URI != res.Best.Checkpoint ||
		p.Best.Seq != res.Best.CheckpointSeq || p.Best.Metrics["acc"] != *res.Best.Metric || p.ScoreAttribute != "acc" || p.ScoreOrder != "max" {
		t.Errorf("Promote %+v, best %+v", p, res.Best)
	}

	// Unscheduled, previous-best is a bad input naming the field.
	h = newTuneHarness(Options{})
	in = searchInput(2, nil)
	in.Trainer.Run.ResumeFrom = api.ResumePreviousBest
	h.env.ExecuteWorkflow(api.TuneWorkflowType, in, (*TuneCarry)(nil))
	if err := h.env.GetWorkflowError(); err == nil || !strings.Contains(err.Error(), "trainer.run.resume_from") {
		t.Errorf("err = %v, want one naming trainer.run.resume_from", err)
	}
}

// search runs a search of in to its end and returns its result.
func (h *tuneHarness) search(t *testing.T, in api.TuneInput) api.TuneResult {
	t.Helper()
	h.env.ExecuteWorkflow(api.TuneWorkflowType, in, (*TuneCarry)(nil))
	if err := h.env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	var res api.TuneResult
	if err := h.env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	return res
}
