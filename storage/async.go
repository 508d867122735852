package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sync/errgroup"
)

// SnapshotMode says how AsyncCommitter.Submit freezes a checkpoint directory
// before it returns.
type SnapshotMode int

const (
	// SnapshotCopy copies the files: into memory when the checkpoint fits
	// the committer's staging limit (SetStagingLimit; a buffer kept between
	// reports, as PyTorch's asynchronous save stages into host memory), else
	// into files under the scratch directory (the kernel's copy_file_range
	// where it can). The caller may change or delete the directory as soon as
	// Submit returns. The default.
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
	limit   int64        // largest checkpoint staged in memory
	stage   []byte       // the memory staging buffer, kept between reports
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
	return &AsyncCommitter{run: r, ctx: ctx, cancel: cancel, scratch: scratchDir, limit: defaultStagingLimit()}
}

// SetStagingLimit sets the largest checkpoint, in bytes, that SnapshotCopy
// stages in memory; larger ones are copied to the scratch directory, and 0
// turns memory staging off. The default is an eighth of the machine's
// memory, at most 4 GiB. The buffer, once grown, is kept until Close.
func (a *AsyncCommitter) SetStagingLimit(bytes int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.limit = max(bytes, 0)
	if int64(cap(a.stage)) > a.limit {
		a.stage = nil
	}
}

func defaultStagingLimit() int64 {
	var si syscall.Sysinfo_t
	if err := syscall.Sysinfo(&si); err != nil {
		return 0
	}
	return min(int64(si.Totalram)*int64(si.Unit)/8, 4<<30)
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
	if mode == SnapshotCopy && a.limit > 0 {
		files, err := scanCheckpointDir(dir)
		if err != nil {
			return nil, fmt.Errorf("async commit of checkpoint %d: snapshot %s: %w", seq, dir, err)
		}
		var total int64
		for _, f := range files {
			total += f.size
		}
		if total <= a.limit {
			return a.submitStaged(ctx, seq, dir, files, total, m)
		}
	}
	snap, err := os.MkdirTemp(a.scratch, fmt.Sprintf("snapshot-%s-*", CheckpointDir(seq)))
	if err != nil {
		return nil, fmt.Errorf("async commit of checkpoint %d: %w", seq, err)
	}
	if err := Snapshot(ctx, dir, snap, mode); err != nil {
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

// submitStaged is Submit of a checkpoint copied into a.stage. The upload in
// flight reads a.stage, so it is waited for (not collected) first. Called
// with a.mu held.
func (a *AsyncCommitter) submitStaged(ctx context.Context, seq int, dir string, files []localFile, total int64, m Manifest) (*Manifest, error) {
	if job := a.job; job != nil {
		select {
		case <-job.done:
		case <-ctx.Done():
			return nil, fmt.Errorf("async commit: waiting for checkpoint %d: %w", job.seq, ctx.Err())
		}
	}
	if int64(cap(a.stage)) < total {
		a.stage = nil // let the old one go first
		a.stage = make([]byte, total)
	}
	buf := a.stage[:total]
	for i := range files {
		f := &files[i]
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		f.data, buf = buf[:f.size:f.size], buf[f.size:]
		if f.data == nil {
			f.data = []byte{} // an empty file, staged too
		}
		if err := readExactly(f.abs, f.data); err != nil {
			return nil, fmt.Errorf("async commit of checkpoint %d: snapshot %s: %w", seq, dir, err)
		}
	}
	prev, err := a.collect(ctx)
	if err != nil {
		return nil, err
	}
	job := &asyncJob{seq: seq, done: make(chan struct{})}
	a.setJob(job)
	go func() {
		defer close(job.done)
		job.m, job.err = a.run.commitFiles(a.ctx, seq, files, m)
	}()
	return prev, nil
}

// readExactly fills b with the file at p, which must have exactly len(b)
// bytes: a file that changed size since it was listed is an error. A large
// file is read in ranges on several goroutines: one core copying out of the
// page cache is slower than the memory.
func readExactly(p string, b []byte) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	const minRange = 32 << 20
	n := min(max(len(b)/minRange, 1), runtime.GOMAXPROCS(0), 4)
	var g errgroup.Group
	for i := range n {
		lo, hi := len(b)*i/n, len(b)*(i+1)/n
		g.Go(func() error {
			if _, err := f.ReadAt(b[lo:hi], int64(lo)); err != nil {
				return fmt.Errorf("%s changed while being snapshotted: %w", p, err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	if n, _ := f.ReadAt(make([]byte, 1), int64(len(b))); n != 0 {
		return fmt.Errorf("%s changed while being snapshotted: more than %d bytes", p, len(b))
	}
	return nil
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
	a.stage = nil
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

// Snapshot freezes the regular files under src into dst (the files a
// commit of src would store): hard links with SnapshotLink where they can
// be made, else copies. A file already in dst is an error.
func Snapshot(ctx context.Context, src, dst string, mode SnapshotMode) error {
	files, err := scanCheckpointDir(src)
	if err != nil {
		return err
	}
	for _, f := range files {
		if err := ctx.Err(); err != nil {
			return err
		}
		to := filepath.Join(dst, filepath.FromSlash(f.rel))
		if err := os.MkdirAll(filepath.Dir(to), 0o777); err != nil {
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
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o666)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
