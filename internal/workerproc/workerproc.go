// Package workerproc runs a tempotrain worker in a child process of the
// running binary (a test binary, a benchmark), for the tests and benchmarks
// that kill, stop or freeze workers as failing machines would: Start in the
// parent re-executes the binary with a Spec in its environment, and Main,
// called early in the child's main or TestMain, runs that worker until
// SIGTERM.
package workerproc

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"

	"github.com/tempotrain/tempotrain/activities"
	"github.com/tempotrain/tempotrain/app"
)

// Env holds a child's Spec, as JSON.
const Env = "TEMPOTRAIN_WORKERPROC"

// Spec is the worker a child runs.
type Spec struct {
	// Name is the worker's node name (activities.Options.Node).
	Name string `json:"name"`
	// Address of the Temporal frontend.
	Address string `json:"address"`
	// Workflows runs the workflow side on TaskQueue.
	Workflows bool   `json:"workflows,omitempty"`
	TaskQueue string `json:"task_queue,omitempty"`
	// Slots rank slots on RankQueue.
	Slots     int    `json:"slots,omitempty"`
	RankQueue string `json:"rank_queue,omitempty"`
	// AdvertiseHost is the host other ranks dial (activities.Options);
	// "" is the worker's default.
	AdvertiseHost string `json:"advertise_host,omitempty"`
}

// Main runs the worker of this process's Spec if it is a child (Env set):
// it dials Spec.Address, starts the worker, and on SIGTERM stops it as
// cmd/worker does (its ranks are told, checkpoint at their next step and
// end); SIGKILL ends it abruptly. It returns the exit code and true for a
// child, 0 and false otherwise. Register the training functions first.
func Main() (code int, child bool) {
	v, ok := os.LookupEnv(Env)
	if !ok {
		return 0, false
	}
	var s Spec
	if err := json.Unmarshal([]byte(v), &s); err != nil {
		fmt.Fprintf(os.Stderr, "worker process: %s=%q: %v\n", Env, v, err)
		return 2, true
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	start := time.Now()
	c, err := client.Dial(client.Options{HostPort: s.Address, Logger: log.NewStructuredLogger(logger)})
	if err != nil {
		fmt.Fprintf(os.Stderr, "worker process %s: after %v: %v\n", s.Name, time.Since(start), err)
		return 1, true
	}
	w, err := app.StartWorker(c, app.WorkerOptions{
		Workflows: s.Workflows, TaskQueue: s.TaskQueue, RankSlots: s.Slots, RankQueue: s.RankQueue,
		Activities: activities.Options{Node: s.Name, Logger: logger, AdvertiseHost: s.AdvertiseHost},
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "worker process %s: after %v: %v\n", s.Name, time.Since(start), err)
		return 1, true
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM)
	<-sig
	w.Stop()
	return 0, true
}

// Proc is a worker process Start started.
type Proc struct {
	// Cmd is the process's command; Cmd.Process its process.
	Cmd    *exec.Cmd
	exited chan struct{}
}

// Start starts cmd (the running binary, os.Args[0] with the arguments it
// needs, maybe inside a network namespace) as the worker of s, with env
// added to this process's environment and its output on this process's
// stderr. The binary must call Main.
func Start(cmd *exec.Cmd, s Spec, env ...string) (*Proc, error) {
	b, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	cmd.Env = append(append(os.Environ(), Env+"="+string(b)), env...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("worker process %s: %w", s.Name, err)
	}
	p := &Proc{Cmd: cmd, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// Exited is closed when the process has ended.
func (p *Proc) Exited() <-chan struct{} { return p.exited }

// Term asks the worker to stop (SIGTERM: a spot reclaim, a drain) and
// returns when the signal is sent.
func (p *Proc) Term() { _ = p.Cmd.Process.Signal(syscall.SIGTERM) }

// Freeze stops the process (SIGSTOP): its connections stay open and silent,
// as with a machine that hangs or drops off the network without a FIN.
// Kill ends it.
func (p *Proc) Freeze() { _ = p.Cmd.Process.Signal(syscall.SIGSTOP) }

// Kill ends the process abruptly, as a crash or an OOM kill would, and
// returns when it has ended.
func (p *Proc) Kill() {
	_ = p.Cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}
