// Package cluster assembles tempotrain's processes: StartWorker runs a
// worker's workflow side (the Fit workflow and its storage bookkeeping) and
// rank slots; StartDevServer runs a real Temporal server in-process; StartLocal
// puts both together for the embedded default, as `cmd/starter dev` and the
// end-to-end tests use it.
package cluster
