package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
)

// SnapshotMode says how AsyncCommitter.Submit freezes a checkpoint directory
// before it returns.
type SnapshotMode int

const (
	// SnapshotCopy copies the files (the kernel's copy_file_range where it
	// can). The caller may change or delete the directory as soon as Submit
	// returns. The default.
	SnapshotCopy SnapshotMode = iota
	// SnapshotLink hard-links the files, falling back to a copy across file
	// systems: no data is copied, so Submit costs microseconds. The caller
	// must then not modify the files in place afterwards (deleting them, or
	// replacing them by rename, is fine). A fresh directory per report, as
	// train.Context.NewCheckpointDir gives, is the intended use.
	SnapshotLink
)

// AsyncCommitter commits a run's checkpoints in the background (Ray's
// asynchronous checkpoint upload). Submit snapshots the directory locally,
// starts CommitCheckpoint on the snapshot, and returns; at most one upload is
// in flight. The next Submit, or Wait, waits for it and hands back its
// manifest, or its error: an upload never fails silently.
//
// A rank uses it as:
//
//	ac := storage.NewAsyncCommitter(rankCtx, run, scratchDir)
//	defer ac.Close()
//	// each report:
//	prev, err := ac.Submit(ctx, seq, dir, storage.Manifest{Attempt: a, Metrics: m}, storage.SnapshotCopy)
//	if err != nil { return err }          // the previous upload failed: this report fails
//	if prev != nil { record(*prev) }      // the previous checkpoint is now committed
//	// when the training function returns:
//	last, err := ac.Wait(ctx)             // the final upload
//
// Its methods are safe for concurrent use; they take turns.
type AsyncCommitter struct {
	run     *Run
	ctx     context.Context
	cancel  context.CancelFunc
	scratch string

	mu      sync.Mutex
	job     *asyncJob    // the upload in flight or finished but not yet collected
	pending atomic.Int64 // job's seq + 1, or 0: read without a.mu by Pending
	closed  bool
}

type asyncJob struct {
	seq  int
	snap string
	done chan struct{}
	m    Manifest
	err  error
}

// NewAsyncCommitter returns a committer for r. Uploads run under ctx (the
// rank's context): when it ends, an upload in flight stops and never commits.
// Snapshots are made under scratchDir (default os.TempDir()); for
// SnapshotLink it must be on the checkpoint directories' file system.
func NewAsyncCommitter(ctx context.Context, r *Run, scratchDir string) *AsyncCommitter {
	if scratchDir == "" {
		scratchDir = os.TempDir()
	}
	ctx, cancel := context.WithCancel(ctx)
	return &AsyncCommitter{run: r, ctx: ctx, cancel: cancel, scratch: scratchDir}
}

// Submit snapshots dir, waits for the previous upload, and starts committing
// the snapshot as checkpoint seq with m's Attempt, Metrics and Meta.
//
// prev is the previous upload's manifest, committed since the last Submit or
// Wait, or nil when none was pending. If the previous upload failed, Submit
// returns its error and starts nothing. If the snapshot fails, Submit returns
// that error and the previous upload stays pending for the next call. ctx
// bounds only the waiting, never an upload.
func (a *AsyncCommitter) Submit(ctx context.Context, seq int, dir string, m Manifest, mode SnapshotMode) (prev *Manifest, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil, errors.New("async commit: committer closed")
	}
	snap, err := os.MkdirTemp(a.scratch, fmt.Sprintf("snapshot-%s-*", CheckpointDir(seq)))
	if err != nil {
		return nil, fmt.Errorf("async commit of checkpoint %d: %w", seq, err)
	}
	if err := snapshot(ctx, dir, snap, mode); err != nil {
		os.RemoveAll(snap)
		return nil, fmt.Errorf("async commit of checkpoint %d: snapshot %s: %w", seq, dir, err)
	}
	prev, err = a.collect(ctx)
	if err != nil {
		os.RemoveAll(snap)
		return nil, err
	}
	job := &asyncJob{seq: seq, snap: snap, done: make(chan struct{})}
	a.setJob(job)
	go func() {
		defer close(job.done)
		defer os.RemoveAll(snap)
		job.m, job.err = a.run.CommitCheckpoint(a.ctx, seq, snap, m)
	}()
	return prev, nil
}

// Wait waits for the pending upload and returns its manifest, nil if none was
// pending, or its error. When ctx ends first, Wait returns ctx's error and the
// upload stays pending.
func (a *AsyncCommitter) Wait(ctx context.Context) (*Manifest, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.collect(ctx)
}

// collect waits for a.job and clears it. Called with a.mu held.
func (a *AsyncCommitter) collect(ctx context.Context) (*Manifest, error) {
	job := a.job
	if job == nil {
		return nil, nil
	}
	select {
	case <-job.done:
	case <-ctx.Done():
		return nil, fmt.Errorf("async commit: waiting for checkpoint %d: %w", job.seq, ctx.Err())
	}
	a.setJob(nil)
	if job.err != nil {
		return nil, fmt.Errorf("async commit: %w", job.err)
	}
	return &job.m, nil
}

func (a *AsyncCommitter) setJob(job *asyncJob) {
	a.job = job
	if job == nil {
		a.pending.Store(0)
	} else {
		a.pending.Store(int64(job.seq) + 1)
	}
}

// Pending returns the seq of the upload in flight or not yet collected. It
// never waits, so a heartbeat may call it while Submit waits.
func (a *AsyncCommitter) Pending() (seq int, ok bool) {
	p := a.pending.Load()
	return int(p - 1), p > 0
}

// Close stops an upload in flight (it does not commit: its manifest is never
// written), waits for it, and removes its snapshot. Use Wait first to keep
// it. Close returns the error of an upload that finished uncollected.
func (a *AsyncCommitter) Close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil
	}
	a.closed = true
	a.cancel()
	if a.job == nil {
		return nil
	}
	<-a.job.done
	job := a.job
	a.setJob(nil)
	if job.err != nil && !errors.Is(job.err, context.Canceled) {
		return fmt.Errorf("async commit: %w", job.err)
	}
	return nil
}

// snapshot freezes the regular files under src into dst.
func snapshot(ctx context.Context, src, dst string, mode SnapshotMode) error {
	files, err := scanCheckpointDir(src)
	if err != nil {
		return err
	}
	for _, f := range files {
		if err := ctx.Err(); err != nil {
			return err
		}
		to := filepath.Join(dst, filepath.FromSlash(f.rel))
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			return err
		}
		if mode == SnapshotLink {
			// Link the file itself, not a symlink to it.
			from, err := filepath.EvalSymlinks(f.abs)
			if err == nil && os.Link(from, to) == nil {
				continue
			}
		}
		if err := copyFile(f.abs, to); err != nil {
			return err
		}
	}
	return nil
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
