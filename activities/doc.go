// Package activities is the worker side of tempotrain: RunRank runs one rank
// of one attempt, LoadRun and RecordRun keep the run's files in storage.
//
// A RunRank execution:
//
//  1. looks the training function up (an unknown name fails non-retryably);
//  2. opens a TCP listener and registers {attempt, rank, address} with the
//     Fit workflow through a short Update, then polls the rendezvous Query
//     until every rank of the attempt is in;
//  3. connects the collective group (a per-attempt token keeps strays out);
//  4. restores the newest checkpoint that verifies (all ranks must agree);
//  5. calls the function with a train.Context, while a ticker heartbeats
//     {phase, epoch, step, checkpoint}, so the step loop never has to.
//
// Rank 0's Report commits the checkpoint to storage (files, then the
// manifest) and then reports it to the workflow. When the activity is
// cancelled (another rank failed), the function's context is cancelled and
// the rank's connections close; nothing it started outlives it: no goroutine,
// no listener, no scratch directory.
//
// Everything a rank logs (its own lines, and its function's tc.Logger(),
// which a Python process's stdout and stderr go through) goes to the
// worker's logger and to the rank's log in the run's storage,
// {run}/logs/attempt-{n}/rank-{r}.log, as text lines; the log ends with how
// the rank ended and is closed whatever ended it (ranklog.go).
//
// The worker running ranks must send heartbeats at least every second
// (worker.Options.MaxHeartbeatThrottleInterval, set by package app), since
// cancellation reaches an activity only with a heartbeat's reply.
package activities
