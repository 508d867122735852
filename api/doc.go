// Package api holds the plain data of a run: what crosses a process
// boundary or lands in storage as JSON. FitInput and its configs, Result,
// Checkpoint references, the checkpoint contract of built-in models
// (ModelInfo: builtin writes it, predict reads it), Metrics, Duration, the
// error kinds the workflow branches on, and the protocol between the Fit workflow and its activities
// (activity, Update and Query names, their arguments, rank heartbeats,
// run.json and metrics.jsonl records).
//
// It is the leaf of the module: it imports no project package, performs no
// I/O of its own (Checkpoint.ReadFile reads a file the caller names) and
// holds no state. Package train re-exports what a user names (train.FitInput,
// train.Result, ...); packages workflows and activities share these types
// instead of importing each other. Changing a JSON field name here changes the
// wire format of running workflows and the storage format of existing runs.
package api
