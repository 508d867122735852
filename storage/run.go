package storage

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// Names of a run's objects.
const (
	StateFile    = "run.json"
	MetricsFile  = "metrics.jsonl"
	ManifestFile = "manifest.json"
	// LogsDir holds the ranks' logs: logs/attempt-{n}/rank-{r}.log.
	LogsDir = "logs"
)

// Run is the storage of one run: its state, its metrics and its checkpoints,
// under {root}/{name}/.
type Run struct {
	b      Backend
	name   string
	prefix string // "name/", or "" for a run at the root
}

// NewRun returns the run called name in b. name is one path element (the
// runtime validates it); "" puts the run at the backend's root.
func NewRun(b Backend, name string) *Run {
	r := &Run{b: b, name: name}
	if name != "" {
		r.prefix = name + "/"
	}
	return r
}

// Backend is the store the run lives in.
func (r *Run) Backend() Backend { return r.b }

// Name is the run's name.
func (r *Run) Name() string { return r.name }

// URI is the run directory's URI.
func (r *Run) URI() string { return r.b.URI(r.name) }

func (r *Run) key(name string) string { return r.prefix + name }

// LoadState decodes run.json into v. found is false, with no error, when the
// run has no state yet (a new run). A run.json that does not decode is
// ErrCorrupt.
func (r *Run) LoadState(ctx context.Context, v any) (found bool, err error) {
	data, err := r.readAll(ctx, r.key(StateFile))
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("run %s: load state: %w", r.URI(), err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		return false, fmt.Errorf("run %s: load state %s: %w: %w", r.URI(), r.b.URI(r.key(StateFile)), ErrCorrupt, err)
	}
	return true, nil
}

// SaveState replaces run.json with v as JSON, atomically.
func (r *Run) SaveState(ctx context.Context, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("run %s: encode state: %w", r.URI(), err)
	}
	data = append(data, '\n')
	if err := r.b.Put(ctx, r.key(StateFile), bytes.NewReader(data), int64(len(data))); err != nil {
		return fmt.Errorf("run %s: save state: %w", r.URI(), err)
	}
	return nil
}

// maxSmallObject bounds what readAll reads: run.json and manifests are
// small; anything bigger is not what we wrote. (Metrics are streamed, line by
// line, and have no such bound.)
const maxSmallObject = 256 << 20

func (r *Run) readAll(ctx context.Context, key string) ([]byte, error) {
	return readAll(ctx, r.b, key)
}

func readAll(ctx context.Context, b Backend, key string) ([]byte, error) {
	rc, err := b.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	data, err := io.ReadAll(io.LimitReader(rc, maxSmallObject+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", b.URI(key), err)
	}
	if len(data) > maxSmallObject {
		return nil, fmt.Errorf("read %s: larger than %d bytes: %w", b.URI(key), maxSmallObject, ErrCorrupt)
	}
	return data, nil
}
