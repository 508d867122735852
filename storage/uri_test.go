package storage

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSplitCheckpointURI(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		uri, storage, run string
		seq               int
		err               bool
	}{
		{"/data/runs/demo/checkpoint_000003", "/data/runs", "demo", 3, false},
		{"/data/runs/demo/checkpoint_000003/", "/data/runs", "demo", 3, false},
		{"/demo/checkpoint_1234567", "/", "demo", 1234567, false},
		{"file:///data/demo/checkpoint_000001", "file:///data", "demo", 1, false},
		{"file:///demo/checkpoint_000001", "file:///", "demo", 1, false},
		{"s3://b/p/q/demo/checkpoint_000010", "s3://b/p/q", "demo", 10, false},
		{"s3://b/demo/checkpoint_000010", "s3://b", "demo", 10, false},
		{"s3://b/checkpoint_000010", "s3://b", "", 10, false},
		{"/data/runs/demo", "", "", 0, true},
		{"/data/runs/demo/checkpoint_3", "", "", 0, true},
		{"/data/runs/demo/checkpoint_00000x", "", "", 0, true},
		{"checkpoint_000001", "", "", 0, true},
	} {
		s, r, seq, err := splitCheckpointURI(tc.uri)
		if tc.err != (err != nil) || s != tc.storage || r != tc.run || seq != tc.seq {
			t.Errorf("split(%q) = %q %q %d %v", tc.uri, s, r, seq, err)
		}
	}
}

// ReadURI reads one object by path (absolute, relative, file://) or S3
// URI, and says why it cannot: a missing object is ErrNotFound, an S3 URI
// without a bucket ErrMisconfigured.
func TestReadURI(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	want := []byte(`{"learner":{}}`)
	if err := os.WriteFile(filepath.Join(dir, "m.json"), want, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	for _, uri := range []string{filepath.Join(dir, "m.json"), "m.json", " ./m.json ", "file://" + filepath.ToSlash(dir) + "/m.json"} {
		got, err := ReadURI(ctx, uri)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("ReadURI(%q) = %q, %v; want %q", uri, got, err, want)
		}
	}
	for _, tt := range []struct {
		uri  string
		want error
		says string
	}{
		{filepath.Join(dir, "nope.json"), ErrNotFound, "nope.json"},
		{"s3:///m.json", ErrMisconfigured, "no bucket"},
	} {
		_, err := ReadURI(ctx, tt.uri)
		if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.says) {
			t.Errorf("ReadURI(%q): %v, want %v saying %q", tt.uri, err, tt.want, tt.says)
		}
	}
	t.Run("s3", func(t *testing.T) {
		srv := sharedMinio(t)
		srv.SetEnv(t)
		bucket := srv.CreateBucket(t, "")
		be, err := Open(ctx, "s3://"+bucket+"/models")
		if err != nil {
			t.Fatal(err)
		}
		if err := be.Put(ctx, "m.json", bytes.NewReader(want), int64(len(want))); err != nil {
			t.Fatal(err)
		}
		if got, err := ReadURI(ctx, "s3://"+bucket+"/models/m.json"); err != nil || !bytes.Equal(got, want) {
			t.Errorf("ReadURI(s3) = %q, %v; want %q", got, err, want)
		}
		if _, err := ReadURI(ctx, "s3://"+bucket+"/models/nope.json"); !errors.Is(err, ErrNotFound) {
			t.Errorf("ReadURI(missing S3 object): %v, want ErrNotFound", err)
		}
	})
}
