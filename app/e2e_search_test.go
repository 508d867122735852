package app_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.temporal.io/api/workflowservice/v1"

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
	// find waits until visibility answers query with this run.
	find := func(query string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for time.Now().Before(deadline) {
			resp, err := cl.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: query})
			if err == nil {
				for _, e := range resp.GetExecutions() {
					if e.GetExecution().GetWorkflowId() == run.WorkflowID {
						return
					}
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Errorf("no run for %q", query)
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
