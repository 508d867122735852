// Package app assembles tempotrain's processes from its parts: StartWorker
// runs a worker's workflow side (the Fit workflow and its storage
// bookkeeping) and rank slots; StartDevServer runs a real Temporal server
// in-process; StartLocal puts both together for the embedded default, as
// `cmd/starter dev` and the end-to-end tests use it.
//
// It sits between the commands (cmd/worker, cmd/starter) and the packages it
// wires (workflows, activities, tracing): nothing but commands, benchmarks
// and tests imports it. Its tests are the end-to-end tests: real dev server,
// real workers and ranks over real TCP, real storage.
package app
