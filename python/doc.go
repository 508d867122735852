// Package python runs a Python training function as a rank: the function
// registered as api.PythonFunc ("python") starts the run's interpreter
// (FitInput.Python) in a process group of its own, with torch's
// environment (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT, ...)
// and the repository's pure-Python tempotrain package on PYTHONPATH, and
// serves it over a private channel (PROTOCOL.md): reports and checkpoints
// go through train.Context.Report exactly as a Go function's, progress to
// the heartbeat, should_stop to the group's agreement. The engine (restarts
// from the last committed checkpoint, elastic groups, preemption, storage,
// tracing) is unchanged: to it, a Python rank is a training function.
//
// The process never outlives its rank: it is started with a parent-death
// signal, a watchdog process in its group kills the whole group when the
// worker's end of a lifeline closes (the worker died, even by SIGKILL),
// a cancelled rank's group gets SIGTERM and then SIGKILL, and the group is
// killed once the function returns (DataLoader workers and anything else
// the script started).
//
// Running a Python function runs code the Fit input names: whoever can
// start a workflow can run code on a worker. A worker runs them only when
// started to allow them (Register; cmd/worker -allow-python, starter dev).
//
// The Python package itself is embedded in this package (tempotrain/) and
// written once per content digest under the worker's cache directory.
package python
