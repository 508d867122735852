package app_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/tempotrain/tempotrain/app"
	"github.com/tempotrain/tempotrain/train"
)

// A Fit upserts its search attributes, which the embedded dev server
// registers: runs are found by function, status, name, attempt and world
// size, while running and after.
func TestE2ESearchAttributes(t *testing.T) {
	if !app.HasSearchAttributes(cl, "default") {
		t.Fatal("the dev server lacks Fit's search attributes")
	}
	tq, rq := startWorker(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), fitTimeout)
	defer cancel()
	g := newGate(t)
	cfg := g.config()
	run, err := train.NewTrainer(cl, "e2e-linear", cfg, train.ScalingConfig{NumWorkers: 2, TaskQueue: rq},
		train.RunConfig{Name: "searchable", StoragePath: t.TempDir(),
			Checkpoint: train.CheckpointConfig{ScoreAttribute: "loss", ScoreOrder: "min"}}, train.WithTaskQueue(tq)).Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	find := func(query string) {
		t.Helper()
		if waitListed(ctx, cl, query, run.WorkflowID, 20*time.Second) == 0 {
			t.Errorf("no run for %q", query)
		}
	}
	g.reached(t, 2)
	find("TempotrainFunc='e2e-linear' AND TempotrainStatus='running' AND TempotrainRun='searchable'")
	find("TempotrainAttempt=1 AND TempotrainWorldSize=2 AND TempotrainBestScore > 0")
	g.open(t)
	if _, err := run.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	find(fmt.Sprintf("TempotrainStatus='succeeded' AND TempotrainRun='%s'", "searchable"))
}

// waitListed polls c's visibility, for up to within, until query lists the
// workflow workflowID, and returns how many executions the query listed
// then; 0 if it never listed it.
func waitListed(ctx context.Context, c client.Client, query, workflowID string, within time.Duration) int {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		resp, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: query})
		if err == nil {
			for _, e := range resp.GetExecutions() {
				if e.GetExecution().GetWorkflowId() == workflowID {
					return len(resp.GetExecutions())
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return 0
}
