package workflows

import (
	"os"
	"path/filepath"
	"testing"

	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// replayOptions are the Options the Fit of a recorded history ran with,
// by file; the others ran with the zero Options.
var replayOptions = map[string]Options{
	// TestE2EContinueAsNew: a continue-as-new after two reports.
	"fit_continued_as_new.json": {ContinueAsNewAfterReports: 2},
	// TestE2EYoungAttemptGoesOn: the suggestion from 10 events on.
	"fit_young_attempt.json": {ContinueAsNewAfterEvents: 10},
	// TestE2ETune: its worker's namespace has the search attributes.
	"tune_asha.json": {SearchAttributes: true, TuneSearchAttribute: true},
	// TestE2ERankGroups: groups of at most 2 ranks.
	"fit_groups_restart.json":   {RankGroupSize: 2},
	"fit_groups_continued.json": {RankGroupSize: 2, ContinueAsNewAfterReports: 2},
	"group_failed.json":         {RankGroupSize: 2},
}

// replayIDs are the workflow IDs of recorded histories whose commands
// depend on it (a Tune derives its trials' IDs from its own), by file.
var replayIDs = map[string]string{"tune_asha.json": "tune-tune-e2e",
	"fit_groups_restart.json":   "fit-groups-failing",
	"fit_groups_continued.json": "fit-groups-can",
	"group_failed.json":         "fit-groups-failing/attempt-1/group-2",
}

// TestReplayRecordedHistories replays histories of real runs: a change to
// Fit that breaks determinism fails here, not in a running job. Recorded by
// the end-to-end tests of package app (see app/history_test.go):
//
//   - fit_restart_error: 4 ranks, rank 1 fails at epoch 3, attempt 2
//     resumes from the epoch-2 checkpoint (recorded by an earlier version
//     of this package: histories of running jobs outlive the code);
//   - fit_cancelled: a run cancelled while its 3 ranks train;
//   - fit_continued_as_new: the first run of a Fit that continues as new at
//     a checkpoint (the continuation's attempt resumes from it);
//   - fit_heartbeat_timeout: a rank's worker process killed, its heartbeat
//     timing out, and the run restarting on another worker;
//
// and, recorded by the code before the fixed-size and the elastic attempt
// shared one rank fan-out (fanout.go), which must replay them unchanged:
//
//   - fit_restart_error_versioned, fit_restart_cut (TestE2EFailureResumes-
//     FromCheckpoint): 4 ranks, rank 1 fails (an error; its links cut) at
//     epoch 3, the others are cancelled, attempt 2 resumes; with the
//     workflow versions (cancel-grace, restart-backoff, search-attributes)
//     the older histories above predate;
//   - fit_preempted (TestE2EPreemption): a fixed-size attempt preempted by a
//     stopping worker, the next one resuming at its checkpoint;
//   - elastic_shrink_grow (TestE2EElastic): 4 slots, a worker killed, its
//     rank abandoned after the cancel grace, attempt 2 forms on 3 ranks
//     without waiting for it, a new worker stands by, and attempt 3 grows
//     back to 4 at a checkpoint;
//   - elastic_too_few (TestE2EElasticTooFewWorkers): fewer workers than
//     min_workers, the start timeout ends the run;
//   - elastic_preempted (TestE2EElasticPreemption): an elastic attempt of 3
//     preempted, the next forming on the 2 workers left;
//
// and a search (TestE2ETune) with the Tune's versions (tune-max-t-goes-on,
// tune-start-on-stop) and its trials' (stop-waits-for-ranks):
//
//   - tune_asha: the Tune workflow of a 12-trial search with ASHA, 4 at
//     once, trials stopped at rungs and their successors started as the
//     stops were sent;
//   - fit_trial_stopped: one of its trials' Fits, stopped by the
//     scheduler: its attempt cancelled, its ranks waited for, run.json
//     stopped;
//
// and, recorded once rank 0 sent its reports in the background:
//
//   - fit_reports_together (TestE2EReportsDoNotWaitForTheWorkflow): 200
//     reports of 2 ranks, a checkpoint every 10, taken in reports Updates
//     of several each;
//
// and with the young-attempt-goes-on version:
//
//   - fit_young_attempt (TestE2EYoungAttemptGoesOn): the first run of a
//     Fit past the continue-as-new suggestion from its first report, whose
//     attempt went on over four checkpoints before it continued as new;
//
// and with ranks in bundles (scaling.ranks_per_process 2):
//
//   - fit_bundles_restart (TestE2EBundles): 4 ranks in 2 bundles, rank 3
//     fails at epoch 3, attempt 2 resumes;
//   - fit_bundles_killed (TestE2EBundleWorkerKilled): a bundle's worker
//     process SIGKILLed, abandoned after the cancel grace, attempt 2 on its
//     replacement.
func TestReplayRecordedHistories(t *testing.T) {
	files, _ := filepath.Glob("testdata/*.json")
	if len(files) < 14 {
		t.Fatalf("%d recorded histories in testdata, want at least 14", len(files))
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			r := worker.NewWorkflowReplayer()
			New(replayOptions[filepath.Base(f)]).Register(r)
			h, err := readHistory(f)
			if err != nil {
				t.Fatal(err)
			}
			err = r.ReplayWorkflowHistoryWithOptions(nil, h, worker.ReplayWorkflowHistoryOptions{
				OriginalExecution: workflow.Execution{ID: replayIDs[filepath.Base(f)]}})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestReplayCatchesNonDeterminism replays the continue-as-new history with
// Options it did not run with: the workflow then decides differently than
// the history says, and the replayer must say so.
func TestReplayCatchesNonDeterminism(t *testing.T) {
	r := worker.NewWorkflowReplayer()
	New(Options{}).Register(r)
	if err := r.ReplayWorkflowHistoryFromJSONFile(nil, "testdata/fit_continued_as_new.json"); err == nil {
		t.Fatal("a history replayed with other decisions passed: the replay test cannot fail")
	}
}

// readHistory reads a history recorded as JSON.
func readHistory(path string) (*historypb.History, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return client.HistoryFromJSON(f, client.HistoryJSONOptions{})
}
