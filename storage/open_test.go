package storage

import (
	"context"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestOpenCheckpointByURI(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b Backend) {
		ctx := context.Background()
		// OpenCheckpoint goes through Open: S3 URIs need the environment,
		// so on S3 open the run's checkpoint directly; the URI parsing is
		// the same code (TestSplitCheckpointURI).
		r := NewRun(b, "demo")
		files := ckptFiles(5)
		commit(t, r, 3, files, Manifest{Metrics: map[string]float64{"acc": 0.8}, Meta: map[string]string{"model": "mlp"}})
		var c *StoredCheckpoint
		var err error
		if l, ok := b.(*Local); ok {
			uri := r.CheckpointURI(3)
			for _, u := range []string{uri, "file://" + uri, uri + "/"} {
				if c, err = OpenCheckpoint(ctx, u); err != nil {
					t.Fatalf("OpenCheckpoint(%s): %v", u, err)
				}
			}
			if !strings.HasPrefix(c.URI, l.Root()) {
				t.Fatalf("URI %s", c.URI)
			}
		} else {
			if c, err = r.OpenCheckpoint(ctx, 3); err != nil {
				t.Fatal(err)
			}
		}
		if c.URI != r.CheckpointURI(3) || c.Manifest.Metrics["acc"] != 0.8 || c.Manifest.Meta["model"] != "mlp" {
			t.Fatalf("opened %+v", c)
		}
		got, err := c.ReadFile(ctx, "optim/state.bin")
		if err != nil || string(got) != string(files["optim/state.bin"]) {
			t.Fatalf("ReadFile: %d bytes, %v", len(got), err)
		}
		_, err = c.ReadFile(ctx, "nope.bin")
		wantErrIs(t, err, ErrNotFound)
		dst := filepath.Join(t.TempDir(), "dl")
		if err := c.Download(ctx, dst); err != nil {
			t.Fatal(err)
		}
		sameTree(t, readTree(t, dst), files)

		// A damaged file fails its reader at the end, not silently.
		bad := slices.Clone(files["model.bin"])
		bad[0] ^= 0xff
		put(t, b, "demo/checkpoint_000003/model.bin", bad)
		rc, err := c.Open(ctx, "model.bin")
		if err != nil {
			t.Fatal(err)
		}
		_, err = io.ReadAll(rc)
		rc.Close()
		wantErrIs(t, err, ErrCorrupt)
		wantErrIs(t, c.Download(ctx, filepath.Join(t.TempDir(), "dl2")), ErrCorrupt)

		_, err = r.OpenCheckpoint(ctx, 4)
		wantErrIs(t, err, ErrNotFound)
	})
}

func TestOpenCheckpointBadURI(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, uri := range []string{"/tmp/run", "gs://b/run/checkpoint_000001", "relative/run/checkpoint_000001"} {
		if _, err := OpenCheckpoint(ctx, uri); err == nil {
			t.Errorf("OpenCheckpoint(%q) succeeded", uri)
		}
	}
	_, err := OpenCheckpoint(ctx, filepath.Join(t.TempDir(), "run", "checkpoint_000001"))
	wantErrIs(t, err, ErrNotFound)
}
