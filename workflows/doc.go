// Package workflows holds the Fit workflow, tempotrain's controller (Ray
// Train's driver, made durable).
//
// Fit validates its input, loads the run's state from storage (through an
// activity) so a run with an existing name resumes, then runs attempts: one
// RunRank activity per rank, each with MaximumAttempts 1 and
// WaitForCancellation, because a lone rank cannot rejoin a ring the others
// left. The workflow, not Temporal's activity retry, restarts the whole group
// from the latest committed checkpoint while failures stay within
// RunConfig.Failure.MaxFailures.
//
// Ranks rendezvous through the workflow: each registers {attempt, rank,
// address} with a short Update (stale attempts are refused by its validator)
// and then polls the "rendezvous" Query until every rank of its attempt is in.
// No Update blocks, so the 10-in-flight-Updates limit of a workflow never
// holds a rendezvous of any size back.
//
// Rank 0 commits checkpoints to storage itself, then reports {metrics,
// checkpoint} with the "report" Update. The workflow keeps the latest and best
// checkpoints, decides retention, and writes run.json and metrics.jsonl through
// the RecordRun activity, which saves run.json before it deletes anything.
//
// The files: fit.go, the run's lifecycle (input, attempts, restarts);
// fanout.go, the ranks of one attempt (their activities, failures and the
// wait for them), which the fixed-size attempt (fit.go) and the elastic one
// (elastic.go) share; handlers.go, the Updates and Queries; record.go, the
// run's state in storage, its promotion and continue-as-new; policy.go, the
// decisions; batchpredict.go, the BatchPredict workflow.
//
// This package is deterministic workflow code: it performs no I/O and imports
// none of compute, collective, storage, net or gorgonia.org/cu
// (TestWorkflowImports enforces it). Failure and retention decisions are pure
// functions (policy.go) with table tests.
package workflows
