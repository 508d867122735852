package storage

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Names of a run's objects.
const (
	StateFile    = "run.json"
	MetricsFile  = "metrics.jsonl"
	ManifestFile = "manifest.json"
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

// localAppender is the local backend's in-place append (see Local.appendAt).
type localAppender interface {
	appendAt(ctx context.Context, key string, off int64, data []byte) error
}

// AppendMetrics writes lines so that line i of metrics.jsonl is report i;
// lines[0] is report firstIndex. Lines already present are skipped, so a
// retried call never writes a report twice. A torn last line (a crash
// mid-append) is cut off first. firstIndex past the end of the file leaves
// reports missing and is an error.
//
// Local storage appends in place; S3 has no append and rewrites the object.
func (r *Run) AppendMetrics(ctx context.Context, firstIndex int, lines []json.RawMessage) error {
	if firstIndex < 0 {
		return fmt.Errorf("run %s: append metrics: first index %d < 0", r.URI(), firstIndex)
	}
	key := r.key(MetricsFile)
	data, err := r.readAll(ctx, key)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return fmt.Errorf("run %s: append metrics: %w", r.URI(), err)
	}
	whole := wholeLines(data)
	have := bytes.Count(whole, []byte{'\n'})
	if firstIndex > have {
		return fmt.Errorf("run %s: append metrics: reports %d..%d would leave a gap: %s holds %d reports",
			r.URI(), firstIndex, firstIndex+len(lines)-1, r.b.URI(key), have)
	}
	skip := have - firstIndex
	if skip >= len(lines) {
		if len(whole) == len(data) {
			return nil // a retry of a call that completed
		}
		skip = len(lines) // only the torn tail to repair
	}
	var add bytes.Buffer
	for i, l := range lines[skip:] {
		if err := json.Compact(&add, l); err != nil {
			return fmt.Errorf("run %s: append metrics: report %d is not JSON: %w", r.URI(), firstIndex+skip+i, err)
		}
		add.WriteByte('\n')
	}
	if a, ok := r.b.(localAppender); ok {
		err = a.appendAt(ctx, key, int64(len(whole)), add.Bytes())
	} else {
		all := append(whole[:len(whole):len(whole)], add.Bytes()...)
		err = r.b.Put(ctx, key, bytes.NewReader(all), int64(len(all)))
	}
	if err != nil {
		return fmt.Errorf("run %s: append metrics: %w", r.URI(), err)
	}
	return nil
}

// ReadMetrics returns every report line, in order (none for a run with no
// metrics). A torn last line is left out; a bad line before it is ErrCorrupt.
func (r *Run) ReadMetrics(ctx context.Context) ([]json.RawMessage, error) {
	key := r.key(MetricsFile)
	data, err := r.readAll(ctx, key)
	if errors.Is(err, ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("run %s: read metrics: %w", r.URI(), err)
	}
	whole := wholeLines(data)
	var out []json.RawMessage
	for i, l := range strings.Split(strings.TrimSuffix(string(whole), "\n"), "\n") {
		if l == "" && len(whole) == 0 {
			break
		}
		if !json.Valid([]byte(l)) {
			return nil, fmt.Errorf("run %s: read metrics: %s line %d is not JSON: %w", r.URI(), r.b.URI(key), i+1, ErrCorrupt)
		}
		out = append(out, json.RawMessage(l))
	}
	return out, nil
}

// wholeLines cuts a torn (unterminated) last line off data.
func wholeLines(data []byte) []byte {
	return data[:bytes.LastIndexByte(data, '\n')+1]
}

// maxSmallObject bounds what readAll reads: run.json, manifests and
// metrics.jsonl are small; anything bigger is not what we wrote.
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
