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
)

func TestBackendPutGetListDelete(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b Backend) {
		ctx := context.Background()
		objs := map[string][]byte{
			"a/b/c.bin":   randBytes(1, 1000),
			"a/bc":        []byte("bc"),
			"a/b.txt":     []byte("dot"),
			"empty":       {},
			"z/deep/x/y":  randBytes(2, 70000),
			"a/b/c2/data": []byte("nested"),
		}
		for k, v := range objs {
			put(t, b, k, v)
		}
		for k, v := range objs {
			if got := get(t, b, k); !bytes.Equal(got, v) {
				t.Fatalf("get %s: %d bytes, want %d", k, len(got), len(v))
			}
		}
		// List takes a string prefix, recursive, sorted by key.
		eq(t, "list all", listKeys(t, b, ""), []string{"a/b.txt", "a/b/c.bin", "a/b/c2/data", "a/bc", "empty", "z/deep/x/y"})
		eq(t, "list a/b", listKeys(t, b, "a/b"), []string{"a/b.txt", "a/b/c.bin", "a/b/c2/data", "a/bc"})
		eq(t, "list a/b/", listKeys(t, b, "a/b/"), []string{"a/b/c.bin", "a/b/c2/data"})
		eq(t, "list a/b/c", listKeys(t, b, "a/b/c"), []string{"a/b/c.bin", "a/b/c2/data"})
		eq(t, "list missing", listKeys(t, b, "nope/"), []string{})
		infos, err := b.List(ctx, "z/")
		if err != nil || len(infos) != 1 || infos[0].Size != 70000 {
			t.Fatalf("list z/: %v %v, want one object of 70000 bytes", infos, err)
		}

		// Overwrite replaces whole.
		put(t, b, "a/bc", []byte("replaced"))
		if got := string(get(t, b, "a/bc")); got != "replaced" {
			t.Fatalf("after overwrite: %q", got)
		}

		// Missing key: ErrNotFound naming the key.
		_, err = b.Get(ctx, "a/missing")
		wantErrIs(t, err, ErrNotFound)
		contains(t, err, "a/missing")

		// Delete, twice (missing is fine).
		for range 2 {
			if err := b.Delete(ctx, "a/b/c.bin"); err != nil {
				t.Fatal(err)
			}
		}
		_, err = b.Get(ctx, "a/b/c.bin")
		wantErrIs(t, err, ErrNotFound)
		eq(t, "list after delete", listKeys(t, b, "a/b/"), []string{"a/b/c2/data"})
		if !strings.HasSuffix(b.URI("a/bc"), "/a/bc") {
			t.Fatalf("URI(a/bc) = %q", b.URI("a/bc"))
		}
	})
}

func TestBackendPutWrongSizeStoresNothing(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b Backend) {
		ctx := context.Background()
		data := randBytes(3, 5000)
		for _, tc := range []struct {
			name string
			size int64
			want string
		}{
			{"short", 6000, "ended after 5000"},
			{"long", 4000, "more than the 4000"},
		} {
			// A plain io.Reader (not seekable), as a stream from a network would be.
			err := b.Put(ctx, "k/"+tc.name, io.MultiReader(bytes.NewReader(data)), tc.size)
			contains(t, err, tc.want)
			_, err = b.Get(ctx, "k/"+tc.name)
			wantErrIs(t, err, ErrNotFound)
		}
		eq(t, "list", listKeys(t, b, ""), []string{})
		// A seekable reader already read into is stored from where it stands.
		br := bytes.NewReader(data)
		br.Seek(1000, io.SeekStart)
		if err := b.Put(ctx, "k/rest", br, int64(len(data)-1000)); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(get(t, b, "k/rest"), data[1000:]) {
			t.Fatal("a reader positioned at 1000 was not stored from there")
		}
		if err := b.Delete(ctx, "k/rest"); err != nil {
			t.Fatal(err)
		}
		// size -1: unknown, anything goes.
		if err := b.Put(ctx, "k/unknown", io.MultiReader(bytes.NewReader(data)), -1); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(get(t, b, "k/unknown"), data) {
			t.Fatal("unknown-size put differs")
		}
	})
}

func TestBackendCancelledPutStoresNothing(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b Backend) {
		ctx, cancel := context.WithCancel(context.Background())
		// The reader cancels the context half-way: the upload is cut there.
		half := &cancelAfter{r: bytes.NewReader(randBytes(4, 4<<20)), after: 2 << 20, cancel: cancel}
		err := b.Put(ctx, "cut/obj", half, 4<<20)
		if err == nil {
			t.Fatal("put with a context cancelled half-way succeeded")
		}
		_, err = b.Get(context.Background(), "cut/obj")
		wantErrIs(t, err, ErrNotFound)
		eq(t, "list", listKeys(t, b, "cut/"), []string{})
	})
}

// cancelAfter cancels a context once it has passed `after` bytes.
type cancelAfter struct {
	r      io.Reader
	n      int
	after  int
	cancel func()
}

func (c *cancelAfter) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	if c.n >= c.after {
		c.cancel()
	}
	return n, err
}

func TestBackendRejectsBadKeys(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b Backend) {
		for _, k := range []string{"", "/abs", "a/../b", "a//b", "./a", "a/."} {
			if err := b.Put(context.Background(), k, strings.NewReader("x"), 1); err == nil {
				t.Errorf("put %q: no error", k)
			}
		}
	})
}

func TestLocalPutIsAtomicAndPrunes(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	b, err := NewLocal(root)
	if err != nil {
		t.Fatal(err)
	}
	put(t, b, "r/checkpoint_000001/w.bin", []byte("weights"))
	// A writer that died mid-Put leaves only a temp file: invisible.
	junk := filepath.Join(root, "r", "checkpoint_000001", tmpPrefix+"x.bin-123")
	if err := os.WriteFile(junk, []byte("half"), 0o644); err != nil {
		t.Fatal(err)
	}
	eq(t, "list", listKeys(t, b, "r/"), []string{"r/checkpoint_000001/w.bin"})
	if err := os.Remove(junk); err != nil {
		t.Fatal(err)
	}
	// A successful Put leaves no temp file behind.
	entries, _ := os.ReadDir(filepath.Join(root, "r", "checkpoint_000001"))
	if len(entries) != 1 {
		t.Fatalf("directory holds %d entries, want 1", len(entries))
	}
	// Delete prunes directories it empties, up to (not including) the root.
	if err := b.Delete(context.Background(), "r/checkpoint_000001/w.bin"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "r")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("run directory still there after its last file was deleted: %v", err)
	}
	if _, err := os.Stat(root); err != nil {
		t.Fatalf("root removed: %v", err)
	}
}

func TestOpen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	for _, tc := range []struct {
		path    string
		wantURI string // of key "x"; "" means an error is expected
		errPart string
	}{
		{dir, dir + "/x", ""},
		{dir + "/", dir + "/x", ""},
		{"file://" + dir, dir + "/x", ""},
		{"relative/dir", "", "absolute directory"},
		{"gs://bucket/x", "", `unknown scheme "gs"`},
		{"file://host/dir", "", "absolute path and no host"},
		{"", "", "want an absolute directory"},
		{"s3://", "", "bucket"},
		{"s3:///prefix", "", "bucket"},
	} {
		b, err := Open(ctx, tc.path)
		if tc.wantURI == "" {
			contains(t, err, tc.errPart)
			wantErrIs(t, err, ErrMisconfigured)
			continue
		}
		if err != nil {
			t.Fatalf("Open(%q): %v", tc.path, err)
		}
		if got := b.URI("x"); got != tc.wantURI {
			t.Errorf("Open(%q).URI(x) = %q, want %q", tc.path, got, tc.wantURI)
		}
	}
}

func TestCheck(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t.Run("writable", func(t *testing.T) {
		t.Parallel()
		dir := filepath.Join(t.TempDir(), "new", "root")
		if err := Check(ctx, dir); err != nil {
			t.Fatal(err)
		}
		// The marker is gone and the root exists for the run.
		entries, err := os.ReadDir(dir)
		if err != nil || len(entries) != 0 {
			t.Fatalf("after Check: %v entries, %v", entries, err)
		}
	})
	t.Run("read-only", func(t *testing.T) {
		t.Parallel()
		dir := readOnlyDir(t)
		err := Check(ctx, dir)
		wantErrIs(t, err, ErrMisconfigured)
		contains(t, err, dir, "not writable")
	})
	t.Run("file-in-the-way", func(t *testing.T) {
		t.Parallel()
		f := filepath.Join(t.TempDir(), "file")
		if err := os.WriteFile(f, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		err := Check(ctx, filepath.Join(f, "runs"))
		wantErrIs(t, err, ErrMisconfigured)
		contains(t, err, f, "not a directory")
	})
	t.Run("unknown-scheme", func(t *testing.T) {
		t.Parallel()
		err := Check(ctx, "hdfs://nn/runs")
		wantErrIs(t, err, ErrMisconfigured)
		contains(t, err, "hdfs://nn/runs", `unknown scheme "hdfs"`)
	})
}
