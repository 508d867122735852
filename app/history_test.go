package app_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	historypb "go.temporal.io/api/history/v1"
	"google.golang.org/protobuf/encoding/protojson"
)

// recordHistory writes a finished workflow run's history (runID "" for the
// latest run) as JSON into the directory TEMPOTRAIN_RECORD_HISTORY names,
// when it is set: how workflows/testdata gets the histories its replay test
// replays.
//
//	TEMPOTRAIN_RECORD_HISTORY=$PWD/workflows/testdata go test ./app -run 'TestE2E(FailureResumes|Cancellation|ContinueAsNew|WorkerProcessDies|Preemption|Elastic)|TestE2ETune$|TestE2EReportsDoNot'
func recordHistory(t *testing.T, workflowID, runID, name string) {
	dir := os.Getenv("TEMPOTRAIN_RECORD_HISTORY")
	if dir == "" {
		return
	}
	var h historypb.History
	it := cl.GetWorkflowHistory(context.Background(), workflowID, runID, false, 0)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		h.Events = append(h.Events, ev)
	}
	b, err := protojson.MarshalOptions{Indent: "  "}.Marshal(&h)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
}
