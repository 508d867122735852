package python

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tempotrain/tempotrain/collective"
	"github.com/tempotrain/tempotrain/train"
)

type procSpec struct {
	interpreter string
	dir         string
	env         []string
	killGrace   time.Duration
}

// proc is a running Python rank: the interpreter (the leader of its
// process group), its watchdog, the channel and the log pumps.
type proc struct {
	tc        *train.Context
	cmd       *exec.Cmd
	watchdog  *exec.Cmd
	lifeline  *os.File // the worker's end: closing it (or dying) kills the group
	ch        *channel
	pumps     sync.WaitGroup
	stderr    *tail
	killGrace time.Duration
	exited    chan struct{}
	waitErr   error
}

// watchdogCode runs in a second process of the group: it blocks reading
// the lifeline (fd 3), which only the worker's end closing ends: then it
// kills the whole group, itself included. It is not the interpreter's
// child, so the interpreter's death (by the parent-death signal) does not
// take it first, and it outlives the worker to clean up after it.
const watchdogCode = `import os, signal, sys
f = os.fdopen(3, "rb", buffering=0)
try:
    while f.read(4096):
        pass
finally:
    os.killpg(os.getpgrp(), signal.SIGKILL)
`

func start(ctx context.Context, tc *train.Context, s procSpec) (*proc, error) {
	chWorker, chChild, err := socketPair()
	if err != nil {
		return nil, fmt.Errorf("python: channel: %w", err)
	}
	defer chChild.Close()
	llWorker, llChild, err := socketPair()
	if err != nil {
		chWorker.Close()
		return nil, fmt.Errorf("python: lifeline: %w", err)
	}
	defer llChild.Close()

	cmd := exec.Command(s.interpreter, "-u", "-m", "tempotrain.train._rank")
	cmd.Dir = s.dir
	cmd.Env = s.env
	cmd.ExtraFiles = []*os.File{chChild}
	// Its own process group (a terminal's Ctrl-C does not reach it; the
	// group can be killed whole), and SIGKILL if the worker dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		chWorker.Close()
		llWorker.Close()
		return nil, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		chWorker.Close()
		llWorker.Close()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		chWorker.Close()
		llWorker.Close()
		return nil, train.NonRetryable(fmt.Errorf("python.interpreter %q: %w", s.interpreter, err))
	}
	p := &proc{tc: tc, cmd: cmd, lifeline: llWorker, stderr: newTail(40), killGrace: s.killGrace, exited: make(chan struct{})}
	pgid := cmd.Process.Pid
	wd := exec.Command(s.interpreter, "-c", watchdogCode)
	wd.ExtraFiles = []*os.File{llChild}
	wd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pgid: pgid}
	wd.Env = s.env
	if err := wd.Start(); err != nil {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		_ = cmd.Wait()
		chWorker.Close()
		llWorker.Close()
		return nil, fmt.Errorf("python: watchdog: %w", err)
	}
	p.watchdog = wd
	go func() { _ = wd.Wait() }()

	p.pumps.Add(2)
	go p.pump(stdout, "stdout", nil)
	go p.pump(stderr, "stderr", p.stderr)
	p.ch = newChannel(chWorker, tc, tc.Logger())
	go p.ch.serve(ctx)
	go func() {
		p.pumps.Wait() // the pipes drain before Wait closes them
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// pump copies one of the process's streams into the rank's log, a line a
// record, keeping the last lines of stderr for the error.
func (p *proc) pump(r io.Reader, stream string, keep *tail) {
	defer p.pumps.Done()
	log := p.tc.Logger()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		log.Info(line, "stream", stream)
		if keep != nil {
			keep.add(line)
		}
	}
	_, _ = io.Copy(io.Discard, r)
}

// wait waits for the process, or for ctx: then the group gets SIGTERM,
// KillGrace, SIGKILL. Either way the whole group is killed at the end
// and the lifeline closed.
func (p *proc) wait(ctx context.Context, entry string) error {
	pgid := p.cmd.Process.Pid
	defer func() {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		p.lifeline.Close()
		p.ch.close()
	}()
	select {
	case <-p.exited:
		// What the function started (DataLoader workers, which may hold
		// the channel open) goes with it.
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	case <-ctx.Done():
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		t := time.NewTimer(p.killGrace)
		select {
		case <-p.exited:
			t.Stop()
		case <-t.C:
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			<-p.exited
		}
		return ctx.Err()
	}
	// The channel may still hold the error message the process wrote just
	// before exiting.
	p.ch.drain(2 * time.Second)
	st := p.ch.state()
	switch {
	case st.failure != nil:
		return torchStalled(p.tc, st.failure, st.failure.err(entry))
	case p.waitErr == nil && st.done && st.stopped:
		// It checkpointed where it was and returned, as asked.
		return fmt.Errorf("python %s: %w", entry, train.ErrPreempted)
	case p.waitErr == nil && st.done:
		return nil
	case p.waitErr == nil:
		return fmt.Errorf("python %s: the process exited 0 without finishing the function (os._exit?)%s", entry, p.stderr.text())
	}
	var ee *exec.ExitError
	if errors.As(p.waitErr, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return fmt.Errorf("python %s: the process was killed by %s%s", entry, unix.SignalName(ws.Signal()), p.stderr.text())
		}
		if !st.hello {
			// It died before it spoke: the interpreter could not import
			// the runner (no tempotrain package, a broken interpreter).
			return train.NonRetryable(fmt.Errorf("python %s: the interpreter exited with status %d before it started the function%s", entry, ee.ExitCode(), p.stderr.text()))
		}
		return fmt.Errorf("python %s: the process exited with status %d%s", entry, ee.ExitCode(), p.stderr.text())
	}
	return fmt.Errorf("python %s: %w", entry, p.waitErr)
}

// socketPair returns the two ends of a Unix stream socket pair.
func socketPair() (*os.File, *os.File, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	// The worker's end is non-blocking, so that Go's poller serves it
	// (deadlines, a Close that ends a pending Read); the child's stays
	// blocking, as a Python socket expects.
	if err := syscall.SetNonblock(fds[0], true); err != nil {
		syscall.Close(fds[0])
		syscall.Close(fds[1])
		return nil, nil, err
	}
	return os.NewFile(uintptr(fds[0]), "python-worker"), os.NewFile(uintptr(fds[1]), "python-child"), nil
}

// tail keeps the last n lines written.
type tail struct {
	mu    sync.Mutex
	n     int
	lines []string
}

func newTail(n int) *tail { return &tail{n: n} }

func (t *tail) add(s string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(s) > 2000 {
		s = s[:2000] + "..."
	}
	t.lines = append(t.lines, s)
	if len(t.lines) > t.n {
		t.lines = t.lines[len(t.lines)-t.n:]
	}
}

// text is the kept lines as the end of an error message ("" when none).
func (t *tail) text() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.lines) == 0 {
		return ""
	}
	last := t.lines
	if len(last) > 12 {
		last = last[len(last)-12:]
	}
	return "; the last lines of its stderr:\n" + strings.Join(last, "\n")
}

// torchTimeout matches the errors of torch's collectives that gave up
// waiting (gloo's, NCCL's watchdog).
var torchTimeout = regexp.MustCompile(`Timed out waiting|Watchdog caught collective operation timeout|operation timed out`)

// torchStall is a Python rank's error when a torch collective timed out:
// its text is the Python error's, and it carries a collective.StallError
// for the workflow, which then names the rank the group waited for.
type torchStall struct {
	msg   string
	stall *collective.StallError
}

func (e *torchStall) Error() string { return e.msg }
func (e *torchStall) Unwrap() error { return e.stall }

// torchStalled marks err as a stall when the exception is a torch
// collective's timeout. Torch does not say whom it waited for: with two
// ranks it is the other one; with more, no rank is named.
func torchStalled(tc *train.Context, f *failure, err error) error {
	if !torchTimeout.MatchString(f.message) || tc.Comm() == nil || tc.WorldSize() < 2 {
		return err
	}
	peer := -1
	if tc.WorldSize() == 2 {
		peer = 1 - tc.WorldRank()
	}
	return &torchStall{msg: err.Error(), stall: &collective.StallError{Rank: tc.WorldRank(), Peer: peer, Op: "a torch collective", Timeout: tc.Comm().Timeout()}}
}
