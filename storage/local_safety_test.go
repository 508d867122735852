package storage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestLocalRespectsUmask: what local storage creates (objects, metrics,
// their directories, restored checkpoints) gets 0666 and 0777 less the
// umask, as every Unix tool makes them; before, files were forced to 0644
// and checkpoint restores to 0755 whatever the umask. The umask is the
// process's, so the test runs alone.
func TestLocalRespectsUmask(t *testing.T) {
	ctx := context.Background()
	for _, mask := range []int{0o002, 0o027, 0o077} {
		t.Run(fmt.Sprintf("umask %03o", mask), func(t *testing.T) {
			old := unix.Umask(mask)
			t.Cleanup(func() { unix.Umask(old) })
			file, dir := fs.FileMode(0o666&^mask), fs.FileMode(0o777&^mask)
			root := t.TempDir()
			b, _ := NewLocal(filepath.Join(root, "store"))
			r := NewRun(b, "run")
			if err := r.SaveState(ctx, map[string]int{"attempts": 1}); err != nil {
				t.Fatal(err)
			}
			if err := r.AppendMetrics(ctx, 0, reports(0, 2)); err != nil {
				t.Fatal(err)
			}
			src := writeTree(t, map[string][]byte{"model.bin": []byte("weights"), "sub/opt.bin": []byte("state")})
			if _, err := r.CommitCheckpoint(ctx, 1, src, Manifest{}); err != nil {
				t.Fatal(err)
			}
			dst := filepath.Join(root, "restored", "ckpt")
			if _, err := r.RestoreCheckpoint(ctx, 1, dst); err != nil {
				t.Fatal(err)
			}
			for p, want := range map[string]fs.FileMode{
				"store":                                       dir,
				"store/run":                                   dir,
				"store/run/run.json":                          file,
				"store/run/metrics.jsonl":                     file,
				"store/run/" + metricsIndexFile:               file,
				"store/run/checkpoint_000001":                 dir,
				"store/run/checkpoint_000001/sub":             dir,
				"store/run/checkpoint_000001/sub/opt.bin":     file,
				"store/run/checkpoint_000001/model.bin":       file,
				"store/run/checkpoint_000001/" + ManifestFile: file,
				"restored":                                    dir,
				"restored/ckpt":                               dir,
				"restored/ckpt/sub":                           dir,
				"restored/ckpt/model.bin":                     file,
				"restored/ckpt/sub/opt.bin":                   file,
			} {
				st, err := os.Stat(filepath.Join(root, p))
				if err != nil {
					t.Fatal(err)
				}
				if got := st.Mode().Perm(); got != want {
					t.Errorf("%s: mode %03o, want %03o", p, got, want)
				}
			}
		})
	}
}

// TestLocalRefusesSymlinkedDirectories: a symbolic link among the
// directories below the storage root (a run directory, a checkpoint
// directory) or in place of metrics.jsonl, planted by whoever can write to
// the storage directory, does not redirect writes or deletes: they fail with
// ErrMisconfigured naming the link, and its target is untouched. Before,
// every write followed the link.
func TestLocalRefusesSymlinkedDirectories(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	root, elsewhere := t.TempDir(), t.TempDir()
	b, _ := NewLocal(root)
	mustSymlink := func(target, link string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(link), 0o777); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
	}
	untouched := func() {
		t.Helper()
		got := readTree(t, elsewhere)
		sameTree(t, got, map[string][]byte{"victim/manifest.json": []byte("theirs"), "victim/file": []byte("theirs"), "secret": []byte("theirs\n")})
	}
	if err := os.MkdirAll(filepath.Join(elsewhere, "victim"), 0o777); err != nil {
		t.Fatal(err)
	}
	for p, s := range map[string]string{"victim/manifest.json": "theirs", "victim/file": "theirs", "secret": "theirs\n"} {
		if err := os.WriteFile(filepath.Join(elsewhere, p), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// A run directory that is a link.
	mustSymlink(filepath.Join(elsewhere, "victim"), filepath.Join(root, "linked"))
	r := NewRun(b, "linked")
	link := filepath.Join(root, "linked")
	for what, err := range map[string]error{
		"save state":     r.SaveState(ctx, map[string]int{"a": 1}),
		"append metrics": r.AppendMetrics(ctx, 0, reports(0, 1)),
		"put":            b.Put(ctx, "linked/file", bytes.NewReader(nil), 0),
		"delete":         b.Delete(ctx, "linked/file"),
		"delete ckpt":    NewRun(b, "linked").DeleteCheckpoint(ctx, 1),
	} {
		if err == nil {
			t.Fatalf("%s through %s: no error", what, link)
		}
		wantErrIs(t, err, ErrMisconfigured)
		contains(t, err, link, "symbolic link")
	}
	untouched()

	// A checkpoint directory that is a link inside a real run directory.
	mustSymlink(filepath.Join(elsewhere, "victim"), filepath.Join(root, "run", CheckpointDir(1)))
	src := writeTree(t, map[string][]byte{"file": []byte("ours")})
	_, err := NewRun(b, "run").CommitCheckpoint(ctx, 1, src, Manifest{})
	wantErrIs(t, err, ErrMisconfigured)
	contains(t, err, filepath.Join(root, "run", CheckpointDir(1)))
	wantErrIs(t, NewRun(b, "run").DeleteCheckpoint(ctx, 1), ErrMisconfigured)
	untouched()

	// metrics.jsonl (or its index) a link to someone's file.
	for _, name := range []string{MetricsFile, metricsIndexFile} {
		run := "m-" + name
		mustSymlink(filepath.Join(elsewhere, "secret"), filepath.Join(root, run, name))
		err = NewRun(b, run).AppendMetrics(ctx, 0, reports(0, 1))
		wantErrIs(t, err, ErrMisconfigured)
		contains(t, err, filepath.Join(root, run, name), "symbolic link")
		untouched()
	}

	// A link as the object itself is replaced, its target untouched.
	mustSymlink(filepath.Join(elsewhere, "secret"), filepath.Join(root, "obj", StateFile))
	if err := NewRun(b, "obj").SaveState(ctx, map[string]int{"a": 1}); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Lstat(filepath.Join(root, "obj", StateFile)); err != nil || !st.Mode().IsRegular() {
		t.Fatalf("run.json: %v, %v", st, err)
	}
	untouched()

	// The root itself may be a link: it is the configured storage path.
	realRoot, linkRoot := t.TempDir(), filepath.Join(t.TempDir(), "root-link")
	mustSymlink(realRoot, linkRoot)
	lb, _ := NewLocal(linkRoot)
	if err := NewRun(lb, "run").SaveState(ctx, map[string]int{"a": 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(realRoot, "run", StateFile)); err != nil {
		t.Fatal(err)
	}
}

// TestLocalGetRefusesLinks: a tampered store cannot make a read leave it. A
// checkpoint file that is a link (to a worker's file, to /dev/zero), a
// checkpoint directory that is a link, a FIFO (whose open would wait for a
// writer) are ErrCorrupt naming them, so RestoreLatest falls back to the
// checkpoint before, whose files are real.
func TestLocalGetRefusesLinks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	root, elsewhere := t.TempDir(), t.TempDir()
	b, _ := NewLocal(root)
	secret := filepath.Join(elsewhere, "secret")
	if err := os.WriteFile(secret, []byte("theirs"), 0o644); err != nil {
		t.Fatal(err)
	}
	run := NewRun(b, "run")
	for seq := 1; seq <= 4; seq++ {
		src := writeTree(t, map[string][]byte{"model.bin": []byte(fmt.Sprint("ours ", seq))})
		if _, err := run.CommitCheckpoint(ctx, seq, src, Manifest{}); err != nil {
			t.Fatal(err)
		}
	}
	file := func(seq int) string { return filepath.Join(root, "run", CheckpointDir(seq), "model.bin") }
	replace := func(p string, make func(string) error) {
		t.Helper()
		if err := os.RemoveAll(p); err != nil {
			t.Fatal(err)
		}
		if err := make(p); err != nil {
			t.Fatal(err)
		}
	}
	// 4: the file a link to someone's file; 3: to /dev/zero; 2: a FIFO.
	replace(file(4), func(p string) error { return os.Symlink(secret, p) })
	replace(file(3), func(p string) error { return os.Symlink("/dev/zero", p) })
	replace(file(2), func(p string) error { return unix.Mkfifo(p, 0o644) })
	for seq, want := range map[int]string{4: "symbolic link", 3: "symbolic link", 2: "not a regular file"} {
		_, err := b.Get(ctx, "run/"+CheckpointDir(seq)+"/model.bin")
		wantErrIs(t, err, ErrCorrupt)
		contains(t, err, file(seq), want)
	}
	dst := filepath.Join(t.TempDir(), "restored")
	m, err := run.RestoreLatest(ctx, dst)
	if err != nil {
		t.Fatal(err)
	}
	if m.Seq != 1 {
		t.Fatalf("restored checkpoint %d, want 1 (2-4 are tampered)", m.Seq)
	}
	sameTree(t, readTree(t, dst), map[string][]byte{"model.bin": []byte("ours 1")})

	// A checkpoint directory that is a link to a copy of a real one.
	ckpt := filepath.Join(root, "run", CheckpointDir(1))
	copyDir := filepath.Join(elsewhere, "copy")
	if err := os.Rename(ckpt, copyDir); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(copyDir, ckpt); err != nil {
		t.Fatal(err)
	}
	_, err = b.Get(ctx, "run/"+CheckpointDir(1)+"/"+ManifestFile)
	wantErrIs(t, err, ErrCorrupt)
	contains(t, err, ckpt, "symbolic link")
	if _, err := run.ReadManifest(ctx, 1); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("manifest through a linked checkpoint directory: %v, want ErrCorrupt", err)
	}

	// Missing files and directories are still ErrNotFound; a directory too.
	for _, key := range []string{"run/nothing", "nothing/at/all", "run/" + CheckpointDir(4)} {
		_, err := b.Get(ctx, key)
		wantErrIs(t, err, ErrNotFound)
	}
	if got, err := os.ReadFile(secret); err != nil || string(got) != "theirs" {
		t.Fatalf("secret = %q, %v", got, err)
	}
}

// TestLocalLeaksNoDescriptors: the directory descriptors local storage
// walks with are all closed, on success and on every refusal.
func TestLocalLeaksNoDescriptors(t *testing.T) {
	ctx := context.Background()
	fds := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Skipf("no /proc/self/fd: %v", err)
		}
		return len(ents)
	}
	root, elsewhere := t.TempDir(), t.TempDir()
	if err := os.Symlink(elsewhere, filepath.Join(root, "linked")); err != nil {
		t.Fatal(err)
	}
	b, _ := NewLocal(root)
	before := fds()
	for i := range 20 {
		r := NewRun(b, "run")
		_ = r.SaveState(ctx, map[string]int{"i": i})
		_ = r.AppendMetrics(ctx, i, reports(i, i+1))
		_ = r.AppendMetrics(ctx, i+5, reports(i+5, i+6)) // a gap
		_ = b.Delete(ctx, "run/a/b/missing")
		_ = b.Put(ctx, "run/a/b/c", bytes.NewReader([]byte("x")), 1)
		_ = b.Delete(ctx, "run/a/b/c")
		_ = NewRun(b, "linked").SaveState(ctx, 1)
		_ = NewRun(b, "linked").AppendMetrics(ctx, 0, reports(0, 1))
		_ = b.Delete(ctx, "linked/x")
		_ = b.Put(ctx, "run/run.json/x", bytes.NewReader(nil), 0) // a file where a directory would be
	}
	if after := fds(); after > before {
		t.Fatalf("%d descriptors open before, %d after", before, after)
	}
}
