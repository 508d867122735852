package storage

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestAsyncCommitSnapshotsAndCommitsInOrder(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b Backend) {
		ctx := context.Background()
		r := NewRun(b, "run")
		for vi, v := range []struct {
			mode    SnapshotMode
			staging int64 // SetStagingLimit, or -1 for the default
		}{{SnapshotCopy, -1}, {SnapshotCopy, 0}, {SnapshotCopy, 16}, {SnapshotLink, -1}} {
			mode := v.mode
			scratch := t.TempDir()
			ac := NewAsyncCommitter(ctx, r, scratch)
			if v.staging >= 0 {
				// 0: copied to files; 16 bytes: too small, so copied to files too.
				ac.SetStagingLimit(v.staging)
			}
			base := 10 * vi
			want := map[int]map[string][]byte{}
			var committed []int
			for i := 1; i <= 3; i++ {
				seq := base + i
				files := ckptFiles(uint64(seq))
				dir := writeTree(t, files)
				prev, err := ac.Submit(ctx, seq, dir, Manifest{Attempt: 1, Metrics: map[string]float64{"step": float64(seq)}}, mode)
				if err != nil {
					t.Fatal(err)
				}
				// Staged in memory, nothing is written to the scratch
				// directory; otherwise the snapshot is there, unless its
				// upload already finished and removed it (a local
				// backend can be that fast).
				entries, _ := os.ReadDir(scratch)
				inMemory := mode == SnapshotCopy && v.staging < 0
				switch {
				case inMemory && len(entries) != 0:
					t.Fatalf("variant %+v: scratch holds %d entries after Submit", v, len(entries))
				case !inMemory && len(entries) == 0:
					select {
					case <-ac.job.done:
					case <-time.After(30 * time.Second):
						t.Fatalf("variant %+v: no snapshot in scratch after Submit, and no upload finished", v)
					}
				}
				if (prev == nil) != (i == 1) || (prev != nil && prev.Seq != seq-1) {
					t.Fatalf("Submit(%d) returned prev %+v", seq, prev)
				}
				if prev != nil {
					committed = append(committed, prev.Seq)
				}
				want[seq] = files
				// The caller reuses its directory at once: the copy mode
				// rewrites in place, the link mode replaces by rename, as
				// SnapshotLink allows.
				if mode == SnapshotCopy {
					if err := os.WriteFile(filepath.Join(dir, "model.bin"), []byte("overwritten"), 0o644); err != nil {
						t.Fatal(err)
					}
				} else {
					tmp := filepath.Join(dir, "model.bin.new")
					os.WriteFile(tmp, []byte("replaced"), 0o644)
					if err := os.Rename(tmp, filepath.Join(dir, "model.bin")); err != nil {
						t.Fatal(err)
					}
				}
				os.RemoveAll(filepath.Join(dir, "optim"))
			}
			last, err := ac.Wait(ctx)
			if err != nil || last == nil || last.Seq != base+3 {
				t.Fatalf("Wait: %+v %v", last, err)
			}
			committed = append(committed, last.Seq)
			eq(t, "committed", committed, []int{base + 1, base + 2, base + 3})
			if m, err := ac.Wait(ctx); m != nil || err != nil {
				t.Fatalf("Wait with nothing pending: %v %v", m, err)
			}
			if err := ac.Close(); err != nil {
				t.Fatal(err)
			}
			for seq, files := range want {
				dst := filepath.Join(t.TempDir(), "d")
				m, err := r.RestoreCheckpoint(ctx, seq, dst)
				if err != nil {
					t.Fatal(err)
				}
				if m.Metrics["step"] != float64(seq) || m.Attempt != 1 {
					t.Fatalf("manifest %+v", m)
				}
				sameTree(t, readTree(t, dst), files)
			}
		}
	})
}

// blockingBackend holds every checkpoint file upload until release is
// closed or the upload's context ends.
type blockingBackend struct {
	Backend
	started chan struct{} // receives once per blocked upload
	release chan struct{}
}

func (b *blockingBackend) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	if strings.Contains(key, "checkpoint_") && !strings.HasSuffix(key, ManifestFile) {
		select {
		case b.started <- struct{}{}:
		default:
		}
		select {
		case <-b.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return b.Backend.Put(ctx, key, r, size)
}

func newBlocking(t *testing.T) (*blockingBackend, Backend) {
	local, err := NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return &blockingBackend{Backend: local, started: make(chan struct{}, 1), release: make(chan struct{})}, local
}

func TestAsyncSubmitReturnsBeforeTheUpload(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	bb, local := newBlocking(t)
	ac := NewAsyncCommitter(ctx, NewRun(bb, "run"), t.TempDir())
	defer ac.Close()
	if _, err := ac.Submit(ctx, 1, writeTree(t, ckptFiles(1)), Manifest{}, SnapshotCopy); err != nil {
		t.Fatal(err)
	}
	<-bb.started // the upload is under way, and held
	if seq, ok := ac.Pending(); !ok || seq != 1 {
		t.Fatalf("Pending = %d %v", seq, ok)
	}
	// Not committed while held.
	if ms, _ := NewRun(local, "run").ListCheckpoints(ctx); len(ms) != 0 {
		t.Fatalf("listed %v before the upload finished", seqsOf(ms))
	}
	// The next Submit waits for it; a caller whose context ends first gets
	// its context's error, and the upload stays pending.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err := ac.Submit(cctx, 2, writeTree(t, ckptFiles(2)), Manifest{}, SnapshotCopy)
	wantErrIs(t, err, context.Canceled)
	close(bb.release)
	m, err := ac.Wait(ctx)
	if err != nil || m == nil || m.Seq != 1 {
		t.Fatalf("Wait: %+v %v", m, err)
	}
	ms, err := NewRun(local, "run").ListCheckpoints(ctx)
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "committed", seqsOf(ms), []int{1})
}

func TestAsyncStagedSnapshotWaitsForTheUploadReadingIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	bb, local := newBlocking(t)
	ac := NewAsyncCommitter(ctx, NewRun(bb, "run"), t.TempDir())
	defer ac.Close()
	one, two := ckptFiles(1), ckptFiles(2)
	if _, err := ac.Submit(ctx, 1, writeTree(t, one), Manifest{}, SnapshotCopy); err != nil {
		t.Fatal(err)
	}
	<-bb.started // checkpoint 1 is uploading out of the staging buffer
	submitted := make(chan error, 1)
	go func() {
		_, err := ac.Submit(ctx, 2, writeTree(t, two), Manifest{}, SnapshotCopy)
		submitted <- err
	}()
	select {
	case err := <-submitted:
		t.Fatalf("Submit(2) returned while checkpoint 1 was still uploading from the buffer it reuses: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(bb.release)
	if err := <-submitted; err != nil {
		t.Fatal(err)
	}
	if m, err := ac.Wait(ctx); err != nil || m.Seq != 2 {
		t.Fatalf("Wait: %+v %v", m, err)
	}
	r := NewRun(local, "run")
	for seq, files := range map[int]map[string][]byte{1: one, 2: two} {
		dst := filepath.Join(t.TempDir(), "d")
		if _, err := r.RestoreCheckpoint(ctx, seq, dst); err != nil {
			t.Fatal(err)
		}
		sameTree(t, readTree(t, dst), files)
	}
}

func TestAsyncFailedUploadFailsTheNextSubmit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	local, _ := NewLocal(t.TempDir())
	rec := &recorder{Backend: local, failPut: func(key string) error {
		if strings.HasPrefix(key, "run/checkpoint_000002/") {
			return errors.New("disk on fire")
		}
		return nil
	}}
	scratch := t.TempDir()
	ac := NewAsyncCommitter(ctx, NewRun(rec, "run"), scratch)
	defer ac.Close()
	for seq := 1; seq <= 2; seq++ {
		if _, err := ac.Submit(ctx, seq, writeTree(t, ckptFiles(uint64(seq))), Manifest{}, SnapshotCopy); err != nil {
			t.Fatalf("Submit(%d): %v", seq, err)
		}
	}
	_, err := ac.Submit(ctx, 3, writeTree(t, ckptFiles(3)), Manifest{}, SnapshotCopy)
	contains(t, err, "checkpoint_000002", "disk on fire")
	if _, ok := ac.Pending(); ok {
		t.Fatal("a Submit that failed started an upload")
	}
	// The snapshots are gone: the failed one's and the refused one's.
	if entries, _ := os.ReadDir(scratch); len(entries) != 0 {
		t.Fatalf("scratch holds %v", entries)
	}
	ms, _ := NewRun(local, "run").ListCheckpoints(ctx)
	eq(t, "committed", seqsOf(ms), []int{1})
	// The error is reported once; the committer goes on.
	if _, err := ac.Submit(ctx, 3, writeTree(t, ckptFiles(3)), Manifest{}, SnapshotCopy); err != nil {
		t.Fatal(err)
	}
	if m, err := ac.Wait(ctx); err != nil || m.Seq != 3 {
		t.Fatalf("Wait: %+v %v", m, err)
	}
}

func TestAsyncCloseStopsUploadUncommitted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	bb, local := newBlocking(t)
	scratch := t.TempDir()
	ac := NewAsyncCommitter(ctx, NewRun(bb, "run"), scratch)
	if _, err := ac.Submit(ctx, 1, writeTree(t, ckptFiles(1)), Manifest{}, SnapshotCopy); err != nil {
		t.Fatal(err)
	}
	<-bb.started
	if err := ac.Close(); err != nil {
		t.Fatal(err)
	}
	ms, _ := NewRun(local, "run").ListCheckpoints(ctx)
	if len(ms) != 0 {
		t.Fatalf("a closed committer committed %v", seqsOf(ms))
	}
	if entries, _ := os.ReadDir(scratch); len(entries) != 0 {
		t.Fatalf("scratch holds %v", entries)
	}
	_, err := ac.Submit(ctx, 2, writeTree(t, ckptFiles(2)), Manifest{}, SnapshotCopy)
	contains(t, err, "closed")
}

func TestAsyncSnapshotFailureKeepsPreviousPending(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	local, _ := NewLocal(t.TempDir())
	ac := NewAsyncCommitter(ctx, NewRun(local, "run"), t.TempDir())
	defer ac.Close()
	if _, err := ac.Submit(ctx, 1, writeTree(t, ckptFiles(1)), Manifest{}, SnapshotCopy); err != nil {
		t.Fatal(err)
	}
	_, err := ac.Submit(ctx, 2, filepath.Join(t.TempDir(), "missing"), Manifest{}, SnapshotCopy)
	contains(t, err, "snapshot", "missing")
	if m, err := ac.Wait(ctx); err != nil || m == nil || m.Seq != 1 {
		t.Fatalf("the first upload was lost: %+v %v", m, err)
	}
}

// TestReadExactlyRefusesAChangedSize: a staged snapshot reads exactly the
// size the file was listed with, in parallel ranges for a large one, and a
// file that has since grown or shrunk is an error, not a silent torn copy.
func TestReadExactlyRefusesAChangedSize(t *testing.T) {
	t.Parallel()
	for _, size := range []int{10, 70 << 20} {
		data := randBytes(uint64(size), size)
		p := filepath.Join(t.TempDir(), "f")
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, size)
		if err := readExactly(p, got); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, data) {
			t.Fatalf("size %d: read bytes differ", size)
		}
		contains(t, readExactly(p, make([]byte, size+1)), "changed while being snapshotted")
		contains(t, readExactly(p, make([]byte, size-1)), "changed while being snapshotted", "more than")
	}
}
