package storage

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"golang.org/x/sync/errgroup"
)

// ListCheckpoints returns the run's committed checkpoints sorted by seq: those
// whose manifest is present and parses and whose files are all present with
// the sizes it gives (sums are checked on restore). Anything else is an
// interrupted commit or delete and is left out.
func (r *Run) ListCheckpoints(ctx context.Context) ([]Manifest, error) {
	objs, err := r.b.List(ctx, r.prefix+"checkpoint_")
	if err != nil {
		return nil, fmt.Errorf("run %s: list checkpoints: %w", r.URI(), err)
	}
	sizes := map[int]map[string]int64{}
	var seqs []int
	for _, o := range objs {
		dir, file, ok := strings.Cut(strings.TrimPrefix(o.Key, r.prefix), "/")
		if !ok {
			continue
		}
		seq, ok := parseCheckpointDir(dir)
		if !ok {
			continue
		}
		if sizes[seq] == nil {
			sizes[seq] = map[string]int64{}
		}
		sizes[seq][file] = o.Size
		if file == ManifestFile {
			seqs = append(seqs, seq)
		}
	}
	sort.Ints(seqs)
	found := make([]*Manifest, len(seqs))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for i, seq := range seqs {
		g.Go(func() error {
			m, err := r.ReadManifest(gctx, seq)
			if errors.Is(err, ErrNotFound) || errors.Is(err, ErrCorrupt) {
				return nil
			}
			if err != nil {
				return err
			}
			for _, f := range m.Files {
				if size, ok := sizes[seq][f.Path]; !ok || size != f.Size {
					return nil
				}
			}
			found[i] = &m
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, fmt.Errorf("run %s: list checkpoints: %w", r.URI(), err)
	}
	out := make([]Manifest, 0, len(found))
	for _, m := range found {
		if m != nil {
			out = append(out, *m)
		}
	}
	return out, nil
}

// maxSkippedErrors bounds the reasons RestoreLatest's error joins.
const maxSkippedErrors = 8

// RestoreLatest restores the newest committed checkpoint that verifies,
// skipping damaged ones (ErrCorrupt), into dst. ErrNotFound when there is none.
func (r *Run) RestoreLatest(ctx context.Context, dst string) (Manifest, error) {
	ms, err := r.ListCheckpoints(ctx)
	if err != nil {
		return Manifest{}, err
	}
	var skipped []error
	for i := len(ms) - 1; i >= 0; i-- {
		m, err := r.RestoreCheckpoint(ctx, ms[i].Seq, dst)
		if err == nil {
			return m, nil
		}
		if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrNotFound) {
			return Manifest{}, err
		}
		if len(skipped) < maxSkippedErrors {
			skipped = append(skipped, err)
		} else if len(skipped) == maxSkippedErrors {
			skipped = append(skipped, fmt.Errorf("... and more (%d checkpoints in all)", len(ms)))
		}
	}
	return Manifest{}, fmt.Errorf("run %s: no usable checkpoint: %w", r.URI(), errors.Join(append([]error{ErrNotFound}, skipped...)...))
}

// DeleteCheckpoint deletes checkpoint seq: its manifest first, so it stops
// existing at once, then its files and any interrupted upload under it.
// Deleting a checkpoint that does not exist is not an error.
func (r *Run) DeleteCheckpoint(ctx context.Context, seq int) error {
	prefix := r.ckptPrefix(seq)
	if err := r.b.Delete(ctx, prefix+ManifestFile); err != nil {
		return fmt.Errorf("delete checkpoint %s: manifest: %w", r.CheckpointURI(seq), err)
	}
	objs, err := r.b.List(ctx, prefix)
	if err != nil {
		return fmt.Errorf("delete checkpoint %s: %w", r.CheckpointURI(seq), err)
	}
	keys := make([]string, len(objs))
	for i, o := range objs {
		keys[i] = o.Key
	}
	if err := deleteKeys(ctx, r.b, keys); err != nil {
		return fmt.Errorf("delete checkpoint %s: %w", r.CheckpointURI(seq), err)
	}
	if a, ok := r.b.(uploadAborter); ok {
		if err := a.abortUploads(ctx, prefix); err != nil {
			return fmt.Errorf("delete checkpoint %s: %w", r.CheckpointURI(seq), err)
		}
	}
	return nil
}

func deleteKeys(ctx context.Context, b Backend, keys []string) error {
	if len(keys) == 0 {
		return nil
	}
	if bd, ok := b.(batchDeleter); ok {
		return bd.deleteKeys(ctx, keys)
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(fileParallelism)
	for _, k := range keys {
		g.Go(func() error { return b.Delete(gctx, k) })
	}
	return g.Wait()
}
