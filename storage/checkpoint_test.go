package storage

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"
)

// ckptFiles is a checkpoint with nested directories, an empty file and
// binary data.
func ckptFiles(seed uint64) map[string][]byte {
	return map[string][]byte{
		"model.bin":          randBytes(seed, 300_001),
		"optim/state.bin":    randBytes(seed+1, 4096),
		"optim/deep/x/empty": {},
		"meta.json":          []byte(fmt.Sprintf(`{"seed":%d}`, seed)),
	}
}

func commit(t *testing.T, r *Run, seq int, files map[string][]byte, m Manifest) Manifest {
	t.Helper()
	got, err := r.CommitCheckpoint(context.Background(), seq, writeTree(t, files), m)
	if err != nil {
		t.Fatalf("commit %d: %v", seq, err)
	}
	return got
}

func TestCheckpointRoundTrip(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b Backend) {
		ctx := context.Background()
		r := NewRun(b, "run")
		files := ckptFiles(7)
		when := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
		m := commit(t, r, 1, files, Manifest{Attempt: 2, Metrics: map[string]float64{"acc": 0.9}, Meta: map[string]string{"model": "mlp"}, Time: when})
		if m.Version != ManifestVersion || m.Seq != 1 || m.Attempt != 2 || len(m.Files) != 4 || !m.Time.Equal(when) {
			t.Fatalf("manifest %+v", m)
		}
		var total int64
		for _, f := range m.Files {
			if f.SHA256 != sha(files[f.Path]) || f.CRC32C != crc(files[f.Path]) || f.Size != int64(len(files[f.Path])) {
				t.Fatalf("entry %+v does not describe its file", f)
			}
			total += f.Size
		}
		if m.Bytes != total {
			t.Fatalf("Bytes %d, want %d", m.Bytes, total)
		}
		read, err := r.ReadManifest(ctx, 1)
		if err != nil || read.Metrics["acc"] != 0.9 || read.Meta["model"] != "mlp" || read.Bytes != m.Bytes {
			t.Fatalf("ReadManifest: %+v %v", read, err)
		}
		dst := filepath.Join(t.TempDir(), "restored")
		if _, err := r.RestoreCheckpoint(ctx, 1, dst); err != nil {
			t.Fatal(err)
		}
		sameTree(t, readTree(t, dst), files)
		// An existing empty directory is a fine destination too.
		dst2 := t.TempDir()
		if _, err := r.RestoreCheckpoint(ctx, 1, dst2); err != nil {
			t.Fatal(err)
		}
		sameTree(t, readTree(t, dst2), files)
		// A non-empty one is refused, untouched.
		_, err = r.RestoreCheckpoint(ctx, 1, dst2)
		contains(t, err, "not empty")
		if !strings.HasSuffix(r.CheckpointURI(1), "/run/checkpoint_000001") {
			t.Fatalf("CheckpointURI = %q", r.CheckpointURI(1))
		}
		_, err = r.ReadManifest(ctx, 2)
		wantErrIs(t, err, ErrNotFound)
	})
}

func TestCheckpointWithoutManifestIsInvisible(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b Backend) {
		ctx := context.Background()
		r := NewRun(b, "run")
		commit(t, r, 1, ckptFiles(1), Manifest{})
		// A commit that dies after its files, before its manifest.
		rec := &recorder{Backend: b, failPut: func(key string) error {
			if strings.HasSuffix(key, ManifestFile) {
				return errors.New("crash before manifest")
			}
			return nil
		}}
		_, err := NewRun(rec, "run").CommitCheckpoint(ctx, 2, writeTree(t, ckptFiles(2)), Manifest{})
		contains(t, err, "crash before manifest")
		if len(listKeys(t, b, "run/checkpoint_000002/")) == 0 {
			t.Fatal("the interrupted commit wrote no files; the test proves nothing")
		}
		ms, err := r.ListCheckpoints(ctx)
		if err != nil {
			t.Fatal(err)
		}
		eq(t, "committed", seqsOf(ms), []int{1})
		_, err = r.RestoreCheckpoint(ctx, 2, filepath.Join(t.TempDir(), "x"))
		wantErrIs(t, err, ErrNotFound)
		m, err := r.RestoreLatest(ctx, filepath.Join(t.TempDir(), "latest"))
		if err != nil || m.Seq != 1 {
			t.Fatalf("RestoreLatest: seq %d, %v", m.Seq, err)
		}
	})
}

func TestCheckpointCorruption(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b Backend) {
		ctx := context.Background()
		r := NewRun(b, "run")
		files := ckptFiles(3)
		for seq := 1; seq <= 4; seq++ {
			commit(t, r, seq, files, Manifest{})
		}
		// 2: same size, one flipped byte: only the sum can tell.
		bad := slices.Clone(files["model.bin"])
		bad[12345] ^= 1
		put(t, b, "run/checkpoint_000002/model.bin", bad)
		// 3: a file gone.
		if err := b.Delete(ctx, "run/checkpoint_000003/optim/state.bin"); err != nil {
			t.Fatal(err)
		}
		// 4: a manifest that does not parse.
		put(t, b, "run/checkpoint_000004/manifest.json", []byte(`{"version":1,"seq":4,"fil`))

		dst := filepath.Join(t.TempDir(), "dst")
		_, err := r.RestoreCheckpoint(ctx, 2, dst)
		wantErrIs(t, err, ErrCorrupt)
		contains(t, err, "model.bin", "crc32c")
		if _, err := os.Stat(dst); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("a failed restore left %s behind: %v", dst, err)
		}
		if entries, _ := os.ReadDir(filepath.Dir(dst)); len(entries) != 0 {
			t.Fatalf("a failed restore left staging files: %v", entries)
		}
		_, err = r.RestoreCheckpoint(ctx, 3, dst)
		wantErrIs(t, err, ErrCorrupt)
		contains(t, err, "optim/state.bin", "missing")
		_, err = r.ReadManifest(ctx, 4)
		wantErrIs(t, err, ErrCorrupt)

		// Listing leaves out what it can tell is broken without reading data:
		// a missing file and a bad manifest. The flipped byte needs a restore.
		ms, err := r.ListCheckpoints(ctx)
		if err != nil {
			t.Fatal(err)
		}
		eq(t, "listed", seqsOf(ms), []int{1, 2})
		m, err := r.RestoreLatest(ctx, dst)
		if err != nil || m.Seq != 1 {
			t.Fatalf("RestoreLatest: seq %d, %v; want 1 (2 has a bad sum)", m.Seq, err)
		}
		sameTree(t, readTree(t, dst), files)
	})
}

func TestOrphanCheckpointIsReplaced(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b Backend) {
		ctx := context.Background()
		r := NewRun(b, "run")
		// Attempt 1 committed seq 3 with a file that attempt 2's seq 3 lacks,
		// then died before the workflow recorded it.
		old := ckptFiles(1)
		old["stale.bin"] = []byte("from attempt 1")
		commit(t, r, 3, old, Manifest{Attempt: 1})
		// And it left a half-written seq 4.
		rec := &recorder{Backend: b, failPut: func(key string) error {
			if strings.HasSuffix(key, ManifestFile) {
				return errors.New("died")
			}
			return nil
		}}
		NewRun(rec, "run").CommitCheckpoint(ctx, 4, writeTree(t, old), Manifest{Attempt: 1})

		fresh := ckptFiles(2)
		for _, seq := range []int{3, 4} {
			m := commit(t, r, seq, fresh, Manifest{Attempt: 2})
			if m.Attempt != 2 {
				t.Fatalf("seq %d attempt %d", seq, m.Attempt)
			}
			dst := filepath.Join(t.TempDir(), "d")
			if _, err := r.RestoreCheckpoint(ctx, seq, dst); err != nil {
				t.Fatal(err)
			}
			sameTree(t, readTree(t, dst), fresh)
			// The orphan's extra file is gone from storage, not just unlisted.
			keys := listKeys(t, b, fmt.Sprintf("run/checkpoint_%06d/", seq))
			if len(keys) != len(fresh)+1 {
				t.Fatalf("seq %d holds %v", seq, keys)
			}
		}
		ms, _ := r.ListCheckpoints(ctx)
		eq(t, "listed", seqsOf(ms), []int{3, 4})
	})
}

func TestCommitInvalidatesOrphanManifestFirst(t *testing.T) {
	t.Parallel()
	local, _ := NewLocal(t.TempDir())
	rec := &recorder{Backend: local}
	r := NewRun(rec, "run")
	commit(t, r, 1, ckptFiles(1), Manifest{Attempt: 1})
	first := len(rec.events())
	commit(t, r, 1, ckptFiles(2), Manifest{Attempt: 2})
	ev := rec.events()[first:]
	if ev[0] != "delete run/checkpoint_000001/manifest.json" {
		t.Fatalf("re-commit began with %q, want the old manifest's deletion", ev[0])
	}
	if ev[len(ev)-1] != "put run/checkpoint_000001/manifest.json" {
		t.Fatalf("re-commit ended with %q, want the new manifest", ev[len(ev)-1])
	}
}

func TestDeleteCheckpointOrder(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b Backend) {
		ctx := context.Background()
		rec := &recorder{Backend: b}
		r := NewRun(rec, "run")
		commit(t, r, 1, ckptFiles(1), Manifest{})
		commit(t, r, 2, ckptFiles(2), Manifest{})
		before := len(rec.events())
		if err := r.DeleteCheckpoint(ctx, 1); err != nil {
			t.Fatal(err)
		}
		ev := rec.events()[before:]
		if len(ev) == 0 || ev[0] != "delete run/checkpoint_000001/manifest.json" {
			t.Fatalf("delete began with %v, want the manifest", ev)
		}
		if len(ev) != 5 {
			t.Fatalf("delete did %v, want the manifest and 4 files", ev)
		}
		eq(t, "left", listKeys(t, b, "run/checkpoint_000001/"), []string{})
		// Deleting again, or a seq that never existed, is fine.
		if err := r.DeleteCheckpoint(ctx, 1); err != nil {
			t.Fatal(err)
		}
		if err := r.DeleteCheckpoint(ctx, 99); err != nil {
			t.Fatal(err)
		}

		// A delete cut after the manifest leaves files but no checkpoint.
		rec.mu.Lock()
		rec.failDel = func(key string) error {
			if !strings.HasSuffix(key, ManifestFile) {
				return errors.New("crash mid-delete")
			}
			return nil
		}
		rec.mu.Unlock()
		contains(t, r.DeleteCheckpoint(ctx, 2), "crash mid-delete")
		ms, err := r.ListCheckpoints(ctx)
		if err != nil || len(ms) != 0 {
			t.Fatalf("after a cut delete: %v %v, want nothing listed", seqsOf(ms), err)
		}
	})
}

// runIndex is the part of a run state that retention needs, shaped like the
// workflow's: the kept checkpoints with their scores.
type runIndex struct {
	Kept []int `json:"kept"`
}

// keepBest is a retention policy as the workflow applies it: the numToKeep
// best by score, plus the latest, so a run can always resume.
func keepBest(ms []Manifest, attr string, numToKeep int) (keep, drop []int) {
	byScore := slices.Clone(ms)
	sort.SliceStable(byScore, func(i, j int) bool { return byScore[i].Metrics[attr] > byScore[j].Metrics[attr] })
	kept := map[int]bool{ms[len(ms)-1].Seq: true}
	for _, m := range byScore[:min(numToKeep, len(byScore))] {
		kept[m.Seq] = true
	}
	for _, m := range ms {
		if kept[m.Seq] {
			keep = append(keep, m.Seq)
		} else {
			drop = append(drop, m.Seq)
		}
	}
	return keep, drop
}

func TestRetentionWithScores(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b Backend) {
		ctx := context.Background()
		rec := &recorder{Backend: b}
		r := NewRun(rec, "run")
		acc := []float64{0.50, 0.91, 0.70, 0.95, 0.60, 0.65}
		for i, a := range acc {
			commit(t, r, i+1, ckptFiles(uint64(i)), Manifest{Metrics: map[string]float64{"acc": a}})
		}
		ms, err := r.ListCheckpoints(ctx)
		if err != nil {
			t.Fatal(err)
		}
		keep, drop := keepBest(ms, "acc", 2)
		eq(t, "keep", keep, []int{2, 4, 6})
		before := len(rec.events())
		// run.json first, then the deletions: a crash between them leaves
		// extra checkpoints, never a run.json naming a deleted one.
		if err := r.SaveState(ctx, runIndex{Kept: keep}); err != nil {
			t.Fatal(err)
		}
		for _, seq := range drop {
			if err := r.DeleteCheckpoint(ctx, seq); err != nil {
				t.Fatal(err)
			}
		}
		ev := rec.events()[before:]
		if ev[0] != "put run/run.json" {
			t.Fatalf("retention began with %q", ev[0])
		}
		ms, err = r.ListCheckpoints(ctx)
		if err != nil {
			t.Fatal(err)
		}
		eq(t, "left", seqsOf(ms), keep)
		var st runIndex
		if _, err := r.LoadState(ctx, &st); err != nil {
			t.Fatal(err)
		}
		eq(t, "run.json", st.Kept, keep)
		for _, m := range ms {
			if _, err := r.RestoreCheckpoint(ctx, m.Seq, filepath.Join(t.TempDir(), "d")); err != nil {
				t.Fatalf("kept checkpoint %d: %v", m.Seq, err)
			}
		}
		if got := listKeys(t, b, "run/checkpoint_000001"); len(got) != 0 {
			t.Fatalf("dropped checkpoint left %v", got)
		}
	})
}

func TestCommitRefusesReservedName(t *testing.T) {
	t.Parallel()
	b, _ := NewLocal(t.TempDir())
	_, err := NewRun(b, "r").CommitCheckpoint(context.Background(), 1, writeTree(t, map[string][]byte{"manifest.json": {}}), Manifest{})
	contains(t, err, "reserved")
}

func TestCommitEmptyCheckpoint(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b Backend) {
		r := NewRun(b, "r")
		m := commit(t, r, 1, map[string][]byte{}, Manifest{Metrics: map[string]float64{"loss": 1}})
		if len(m.Files) != 0 || m.Bytes != 0 {
			t.Fatalf("%+v", m)
		}
		ms, err := r.ListCheckpoints(context.Background())
		if err != nil || len(ms) != 1 {
			t.Fatalf("%v %v", ms, err)
		}
		dst := filepath.Join(t.TempDir(), "e")
		if _, err := r.RestoreCheckpoint(context.Background(), 1, dst); err != nil {
			t.Fatal(err)
		}
		if entries, err := os.ReadDir(dst); err != nil || len(entries) != 0 {
			t.Fatalf("%v %v", entries, err)
		}
	})
}

func crc(b []byte) string {
	return fmt.Sprintf("%08x", crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)))
}
