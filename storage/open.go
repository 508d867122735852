package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
)

// StoredCheckpoint is a committed checkpoint: its URI, its manifest, and the
// means to read its files from wherever it is stored.
type StoredCheckpoint struct {
	// URI of the checkpoint's directory.
	URI string
	// Manifest as read when the checkpoint was opened.
	Manifest Manifest

	run *Run
}

// OpenCheckpoint opens the checkpoint at uri, as Result reports it:
// "/runs/demo/checkpoint_000003", "file:///runs/demo/checkpoint_000003" or
// "s3://bucket/prefix/demo/checkpoint_000003". It reads the manifest:
// ErrNotFound when the checkpoint is not committed (or was deleted),
// ErrCorrupt when its manifest is damaged.
func OpenCheckpoint(ctx context.Context, uri string) (*StoredCheckpoint, error) {
	storagePath, run, seq, err := splitCheckpointURI(uri)
	if err != nil {
		return nil, fmt.Errorf("open checkpoint: %w", err)
	}
	b, err := Open(ctx, storagePath)
	if err != nil {
		return nil, fmt.Errorf("open checkpoint %s: %w", uri, err)
	}
	return NewRun(b, run).OpenCheckpoint(ctx, seq)
}

// OpenCheckpoint opens the run's checkpoint seq (see the function
// OpenCheckpoint).
func (r *Run) OpenCheckpoint(ctx context.Context, seq int) (*StoredCheckpoint, error) {
	m, err := r.ReadManifest(ctx, seq)
	if err != nil {
		return nil, fmt.Errorf("open %w", err)
	}
	return &StoredCheckpoint{URI: r.CheckpointURI(seq), Manifest: m, run: r}, nil
}

// Download writes every file of the checkpoint under dst, verified against
// the manifest (ErrCorrupt otherwise). dst must not exist or be empty; on
// error it is left as it was.
func (c *StoredCheckpoint) Download(ctx context.Context, dst string) error {
	if err := c.run.restoreFiles(ctx, c.Manifest, dst); err != nil {
		return fmt.Errorf("download checkpoint %s into %s: %w", c.URI, dst, err)
	}
	return nil
}

// Open streams one file of the checkpoint (name as in the manifest,
// slash-separated). ErrNotFound when the checkpoint has no such file. The
// stream checks itself: its last Read returns ErrCorrupt instead of io.EOF
// when the size or sha256 differs from the manifest, so read to the end.
func (c *StoredCheckpoint) Open(ctx context.Context, name string) (io.ReadCloser, error) {
	e, ok := c.Manifest.File(name)
	if !ok {
		return nil, fmt.Errorf("checkpoint %s has no file %q: %w", c.URI, name, ErrNotFound)
	}
	rc, err := c.run.b.Get(ctx, c.run.ckptPrefix(c.Manifest.Seq)+name)
	if errors.Is(err, ErrNotFound) {
		return nil, fmt.Errorf("checkpoint %s: file %s listed in the manifest is missing: %w", c.URI, name, ErrCorrupt)
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", c.URI, err)
	}
	return struct {
		io.Reader
		io.Closer
	}{newVerifyingReader(rc, e), rc}, nil
}

// ReadFile returns one file of the checkpoint, verified.
func (c *StoredCheckpoint) ReadFile(ctx context.Context, name string) ([]byte, error) {
	rc, err := c.Open(ctx, name)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", c.URI, err)
	}
	return data, nil
}
