package workflows

import (
	"path/filepath"
	"testing"

	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/tempotrain/tempotrain/api"
)

// TestReplayRecordedHistories replays histories of real runs (4 ranks, a
// rank failing at epoch 3, attempt 2 resuming from the epoch-2 checkpoint):
// a change to Fit that breaks determinism fails here, not in a running job.
// Record new ones with TEMPOTRAIN_RECORD_HISTORY (see app/history_test.go).
func TestReplayRecordedHistories(t *testing.T) {
	files, _ := filepath.Glob("testdata/*.json")
	if len(files) == 0 {
		t.Fatal("no recorded histories in testdata")
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			r := worker.NewWorkflowReplayer()
			r.RegisterWorkflowWithOptions(Fit, workflow.RegisterOptions{Name: api.WorkflowType})
			if err := r.ReplayWorkflowHistoryFromJSONFile(nil, f); err != nil {
				t.Fatal(err)
			}
		})
	}
}
