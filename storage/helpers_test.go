package storage

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
)

// backendCase names a backend and makes a fresh, empty one per test.
type backendCase struct {
	name string
	new  func(t *testing.T) Backend
}

// allBackends are the backends every conformance test runs against: the local
// one always, S3 on a real MinIO when the binary is installed (see
// s3_test.go).
func allBackends(t *testing.T) []backendCase {
	cases := []backendCase{{"local", func(t *testing.T) Backend {
		b, err := NewLocal(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		return b
	}}}
	return append(cases, s3Backends(t)...)
}

// forEachBackend runs fn as a parallel subtest per backend.
func forEachBackend(t *testing.T, fn func(t *testing.T, b Backend)) {
	t.Parallel()
	for _, bc := range allBackends(t) {
		t.Run(bc.name, func(t *testing.T) {
			t.Parallel()
			fn(t, bc.new(t))
		})
	}
}

// recorder wraps a backend, logs every mutation in order, and injects
// failures. It hides the wrapped backend's optional fast paths, so code under
// it takes the generic path.
type recorder struct {
	Backend
	mu      sync.Mutex
	log     []string
	failPut func(key string) error // nil: no failure
	failDel func(key string) error
}

func (r *recorder) Put(ctx context.Context, key string, rd io.Reader, size int64) error {
	r.mu.Lock()
	f := r.failPut
	r.mu.Unlock()
	if f != nil {
		if err := f(key); err != nil {
			return err
		}
	}
	if err := r.Backend.Put(ctx, key, rd, size); err != nil {
		return err
	}
	r.record("put " + key)
	return nil
}

func (r *recorder) Delete(ctx context.Context, key string) error {
	r.mu.Lock()
	f := r.failDel
	r.mu.Unlock()
	if f != nil {
		if err := f(key); err != nil {
			return err
		}
	}
	if err := r.Backend.Delete(ctx, key); err != nil {
		return err
	}
	r.record("delete " + key)
	return nil
}

func (r *recorder) record(s string) {
	r.mu.Lock()
	r.log = append(r.log, s)
	r.mu.Unlock()
}

func (r *recorder) events() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.log...)
}

// writeTree writes files (slash path → contents) under a new temp dir.
func writeTree(t *testing.T, files map[string][]byte) string {
	t.Helper()
	dir := t.TempDir()
	for p, data := range files {
		full := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// readTree reads every regular file under dir.
func readTree(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		data, err := os.ReadFile(p)
		out[filepath.ToSlash(rel)] = data
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func sameTree(t *testing.T, got, want map[string][]byte) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got files %v, want %v", keysOf(got), keysOf(want))
	}
	for p, w := range want {
		if g, ok := got[p]; !ok || !bytes.Equal(g, w) {
			t.Fatalf("file %s: got %d bytes (present %v), want %d bytes equal", p, len(g), ok, len(w))
		}
	}
}

func keysOf[V any](m map[string]V) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// randBytes is deterministic pseudo-random data.
func randBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := 0; i+8 <= n; i += 8 {
		v := r.Uint64()
		for j := range 8 {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	for i := n - n%8; i < n; i++ {
		b[i] = byte(r.Uint32())
	}
	return b
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func put(t *testing.T, b Backend, key string, data []byte) {
	t.Helper()
	if err := b.Put(context.Background(), key, bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
}

func get(t *testing.T, b Backend, key string) []byte {
	t.Helper()
	data, err := readAll(context.Background(), b, key)
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	return data
}

func listKeys(t *testing.T, b Backend, prefix string) []string {
	t.Helper()
	objs, err := b.List(context.Background(), prefix)
	if err != nil {
		t.Fatalf("list %q: %v", prefix, err)
	}
	keys := []string{}
	for _, o := range objs {
		keys = append(keys, o.Key)
	}
	return keys
}

func seqsOf(ms []Manifest) []int {
	out := []int{}
	for _, m := range ms {
		out = append(out, m.Seq)
	}
	return out
}

func wantErrIs(t *testing.T, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("got error %v, want one wrapping %v", err, target)
	}
}

func eq[T comparable](t *testing.T, what string, got, want []T) {
	t.Helper()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("%s: got %v, want %v", what, got, want)
	}
}

func contains(t *testing.T, err error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want one mentioning %q", parts)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Fatalf("error %q does not mention %q", err, p)
		}
	}
}
