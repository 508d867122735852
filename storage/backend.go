package storage

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"
)

// Sentinel errors; returned wrapped with the key, run or checkpoint at fault.
var (
	// ErrNotFound: a key, run state or checkpoint that does not exist.
	ErrNotFound = errors.New("not found")
	// ErrCorrupt: a manifest, state or metrics file that is unreadable, or a
	// file whose size or sha256 does not match its manifest.
	ErrCorrupt = errors.New("corrupt")
	// ErrMisconfigured: the storage path cannot work as given (unknown scheme,
	// relative path, missing bucket, rejected credentials, permission denied,
	// a symbolic link where local storage would write).
	// Retrying does not help; the runtime fails the run at once.
	ErrMisconfigured = errors.New("storage misconfigured")
)

// Backend is a blob store. Keys are slash-separated, relative to the storage
// root, and never start with "/" or hold "." or ".." elements.
type Backend interface {
	// URI names key for people and for OpenCheckpoint: "/data/runs/x/run.json"
	// or "s3://bucket/prefix/x/run.json". URI("") is the root.
	URI(key string) string
	// Put stores r's bytes under key, replacing any object there. The object
	// appears whole or not at all. size is the number of bytes r holds, or -1
	// when unknown; a reader that holds another number of bytes is an error
	// and stores nothing.
	Put(ctx context.Context, key string, r io.Reader, size int64) error
	// Get streams the object at key. A missing key is ErrNotFound (wrapped).
	Get(ctx context.Context, key string) (io.ReadCloser, error)
	// List returns every object whose key starts with prefix (a string
	// prefix, not only a directory), recursively, sorted by key.
	List(ctx context.Context, prefix string) ([]ObjectInfo, error)
	// Delete removes the object at key. A missing key is not an error.
	Delete(ctx context.Context, key string) error
}

// ObjectInfo describes one stored object.
type ObjectInfo struct {
	Key  string
	Size int64
}

// batchDeleter is implemented by backends that delete many keys in one
// request (S3 DeleteObjects).
type batchDeleter interface {
	deleteKeys(ctx context.Context, keys []string) error
}

// uploadAborter is implemented by backends whose interrupted uploads leave
// invisible debris (S3 multipart uploads) that can be cleaned under a prefix.
type uploadAborter interface {
	abortUploads(ctx context.Context, prefix string) error
}

// Open returns the backend of a storage path: an absolute directory
// ("/data/runs"), "file:///data/runs", or "s3://bucket/prefix". Open does not
// touch the store; Check does.
func Open(ctx context.Context, storagePath string) (Backend, error) {
	p := strings.TrimSpace(storagePath)
	switch {
	case strings.HasPrefix(p, "s3://"):
		return openS3(ctx, p)
	case strings.HasPrefix(p, "file://"):
		dir := strings.TrimPrefix(p, "file://")
		if !strings.HasPrefix(dir, "/") {
			return nil, fmt.Errorf("%w: storage path %q: a file URI needs an absolute path and no host (file:///dir)", ErrMisconfigured, storagePath)
		}
		return NewLocal(dir)
	case strings.HasPrefix(p, "/"):
		return NewLocal(p)
	case strings.Contains(p, "://"):
		scheme := p[:strings.Index(p, "://")]
		return nil, fmt.Errorf("%w: storage path %q: unknown scheme %q: want an absolute directory, file:///dir or s3://bucket/prefix", ErrMisconfigured, storagePath, scheme)
	default:
		return nil, fmt.Errorf("%w: storage path %q: want an absolute directory, file:///dir or s3://bucket/prefix", ErrMisconfigured, storagePath)
	}
}

// checkPrefix names the marker objects Check writes; List never hides them,
// but Check deletes its marker before it returns.
const checkPrefix = ".tempotrain-check-"

// Check proves that storagePath is reachable and writable, the way Ray writes
// a marker file: it writes a small marker object, reads it back, and deletes
// it. An unusable path (unknown scheme, missing bucket, bad credentials,
// permission denied) fails with ErrMisconfigured and a message naming it.
func Check(ctx context.Context, storagePath string) error {
	b, err := Open(ctx, storagePath)
	if err != nil {
		return err
	}
	return CheckBackend(ctx, b)
}

// CheckBackend is Check on an opened backend.
func CheckBackend(ctx context.Context, b Backend) error {
	key := checkPrefix + randomHex(8)
	want := []byte("tempotrain storage check " + time.Now().UTC().Format(time.RFC3339Nano) + "\n")
	if err := b.Put(ctx, key, bytes.NewReader(want), int64(len(want))); err != nil {
		return fmt.Errorf("storage check %s: write marker: %w", b.URI(""), err)
	}
	// The marker exists from here on: a check that fails after this point (a
	// store that takes writes but refuses reads) deletes it too, best
	// effort, since the check's own error is what the caller needs.
	discard := func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = b.Delete(dctx, key)
	}
	rc, err := b.Get(ctx, key)
	if err != nil {
		discard()
		return fmt.Errorf("storage check %s: read marker back: %w", b.URI(""), err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil {
		discard()
		return fmt.Errorf("storage check %s: read marker back: %w", b.URI(""), err)
	}
	if !bytes.Equal(got, want) {
		discard()
		return fmt.Errorf("storage check %s: marker %s read back as %d bytes that differ from the %d written", b.URI(""), b.URI(key), len(got), len(want))
	}
	if err := b.Delete(ctx, key); err != nil {
		return fmt.Errorf("storage check %s: delete marker: %w", b.URI(""), err)
	}
	return nil
}

// validKey reports why key is not a usable object key, or nil.
func validKey(key string) error {
	if key == "" {
		return errors.New("empty key")
	}
	if strings.HasPrefix(key, "/") {
		return fmt.Errorf("key %q starts with '/'", key)
	}
	for _, el := range strings.Split(key, "/") {
		if el == "" || el == "." || el == ".." {
			return fmt.Errorf("key %q has an empty, '.' or '..' element", key)
		}
	}
	return nil
}

// validRelPath reports whether a manifest path stays inside its checkpoint
// directory when joined to it (a manifest is input, and restores write where
// it says).
func validRelPath(p string) bool {
	return validKey(p) == nil && !strings.Contains(p, "\\") && filepath.IsLocal(filepath.FromSlash(p))
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails on Linux.
	return hex.EncodeToString(b)
}

// exactReader makes a reader that holds other than size bytes fail with an
// error instead of being stored short or long: the error reaches the
// backend's Put before the object is made visible.
type exactReader struct {
	r         io.Reader
	remaining int64
	size      int64
}

func newExactReader(r io.Reader, size int64) io.Reader {
	if size < 0 {
		return r
	}
	return &exactReader{r: r, remaining: size, size: size}
}

func (e *exactReader) Read(p []byte) (int, error) {
	if e.remaining == 0 {
		var one [1]byte
		n, err := io.ReadFull(e.r, one[:])
		if n > 0 {
			return 0, fmt.Errorf("reader holds more than the %d bytes announced", e.size)
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return 0, io.EOF
		}
		return 0, err
	}
	if int64(len(p)) > e.remaining {
		p = p[:e.remaining]
	}
	n, err := e.r.Read(p)
	e.remaining -= int64(n)
	if err == io.EOF && e.remaining > 0 {
		return n, fmt.Errorf("reader ended after %d of the %d bytes announced: %w", e.size-e.remaining, e.size, io.ErrUnexpectedEOF)
	}
	if err == io.EOF {
		err = nil // the next Read checks that nothing follows
	}
	return n, err
}

// ctxReader stops a long copy when its context ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// sleepCtx waits d or until ctx ends; it is the backoff of the retry loops.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
