package workflows

import (
	"errors"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"

	"github.com/tempotrain/tempotrain/api"
)

// TestFitSendsRanksToTheirShapeQueue: a run with resources_per_worker sends
// every rank to its shape's queue with its resources; a run without sends
// them to the plain queue with none, as before the field existed.
func TestFitSendsRanksToTheirShapeQueue(t *testing.T) {
	tests := []struct {
		res    map[string]float64
		useGPU bool
		queue  string
		want   *api.Resources
	}{
		{nil, false, api.DefaultCPUQueue, nil},
		{nil, true, api.DefaultGPUQueue, nil},
		{map[string]float64{"CPU": 3}, false, "tempotrain-cpu@cpu4", &api.Resources{CPU: 3}},
		{map[string]float64{"CPU": 8, "GPU": 2}, true, "tempotrain-gpu@cpu8-gpu2", &api.Resources{CPU: 8, GPU: 2}},
		{map[string]float64{"CPU": 1}, true, "tempotrain-gpu@cpu1-gpu1", &api.Resources{CPU: 1, GPU: 1}},
	}
	for _, tt := range tests {
		h := newHarness(t, nil, func(api.RunRankInput) error { return nil })
		in := input(2, 0)
		in.Scaling.ResourcesPerWorker, in.Scaling.UseGPU = tt.res, tt.useGPU
		h.reportAt(time.Minute, 1, api.Metrics{"loss": 0.5}, 1)
		h.env.ExecuteWorkflow(api.WorkflowType, in)
		if err := h.env.GetWorkflowError(); err != nil {
			t.Fatalf("%v: workflow error: %v", tt.res, err)
		}
		if len(h.rankIns) != 2 {
			t.Fatalf("%v: %d ranks ran, want 2", tt.res, len(h.rankIns))
		}
		for i, ri := range h.rankIns {
			if h.queues[i] != tt.queue {
				t.Errorf("%v: rank %d ran on queue %q, want %q", tt.res, ri.Rank, h.queues[i], tt.queue)
			}
			if (ri.Resources == nil) != (tt.want == nil) || ri.Resources != nil && *ri.Resources != *tt.want {
				t.Errorf("%v: rank %d's resources %v, want %v", tt.res, ri.Rank, ri.Resources, tt.want)
			}
			if ri.UseGPU != tt.useGPU {
				t.Errorf("%v: rank %d use_gpu %v", tt.res, ri.Rank, ri.UseGPU)
			}
		}
	}
}

// TestScheduleToStartNamesResources: a rank no worker took names the
// resources it asked for and the queue it waited on; one without resources
// reads as it always did (the replayed histories hold that message).
func TestScheduleToStartNamesResources(t *testing.T) {
	timeout := temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START, errors.New("timeout"))
	in := input(2, 0)
	in.Run.Failure.StartTimeout = api.Duration(3 * time.Second)
	in.Scaling.ResourcesPerWorker = map[string]float64{"CPU": 3}
	rf := classify(1, timeout, false, in)
	want := `no worker with resources {CPU: 3} took it from task queue "tempotrain-cpu@cpu4" within 3s: only workers that have at least {CPU: 4} (cmd/worker -cpus, -gpus) and a free rank slot poll that queue`
	if rf.Message != want {
		t.Errorf("message %q\nwant    %q", rf.Message, want)
	}
	in.Scaling.ResourcesPerWorker = nil
	rf = classify(1, timeout, false, in)
	if want := `no worker took it from task queue "tempotrain-cpu" within 3s: is a worker with free rank slots polling that queue?`; rf.Message != want {
		t.Errorf("message %q\nwant    %q", rf.Message, want)
	}
	if strings.Contains(rf.Message, "{") {
		t.Errorf("message without resources names some: %q", rf.Message)
	}
}
