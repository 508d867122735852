// Package train is tempotrain's public API: Ray Train's concepts, shaped for Go.
//
//   - A training function is a Go function registered by name in the worker
//     binary with Register. Every rank runs it.
//   - A rank (Ray's worker) is one RunRank activity execution; the function
//     sees it through *Context: WorldRank, WorldSize, Config, Report,
//     Checkpoint, Comm.
//   - ScalingConfig says how many ranks and where they run; RunConfig names the
//     run, where it stores checkpoints, and how failures and retention behave.
//   - Trainer starts the Fit workflow on a Temporal server and waits for its
//     Result. The same workflow starts from the Temporal CLI, the Web UI or a
//     Schedule, because its input (FitInput) is plain JSON.
//
// The run's data types (FitInput, the configs, Result, Checkpoint, Metrics)
// are package api's, shared with the workflow and the worker side; train
// re-exports them under the names above. The package holds no I/O of its own
// besides the Temporal client calls of Trainer; the runtime that drives a
// Context lives in package activities.
package train
