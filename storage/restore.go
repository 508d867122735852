package storage

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sync/errgroup"
)

// ReadManifest reads and checks checkpoint seq's manifest: ErrNotFound when
// it has none (not committed, or deleted), ErrCorrupt when it does not parse or
// does not describe a well-formed checkpoint seq.
func (r *Run) ReadManifest(ctx context.Context, seq int) (Manifest, error) {
	key := r.ckptPrefix(seq) + ManifestFile
	data, err := r.readAll(ctx, key)
	if err != nil {
		return Manifest{}, fmt.Errorf("checkpoint %s: %w", r.CheckpointURI(seq), err)
	}
	m, err := parseManifest(data, seq)
	if err != nil {
		return Manifest{}, fmt.Errorf("checkpoint %s: manifest: %w: %w", r.CheckpointURI(seq), ErrCorrupt, err)
	}
	return m, nil
}

// parseManifest decodes and checks the manifest of checkpoint seq.
func parseManifest(data []byte, seq int) (Manifest, error) {
	var m Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return Manifest{}, err
	}
	if err := m.check(seq); err != nil {
		return Manifest{}, err
	}
	return m, nil
}

// RestoreCheckpoint downloads checkpoint seq into dst and checks every file's
// size and sha256 (ErrCorrupt on a mismatch or a missing file). dst must not
// exist or be an empty directory; files are staged beside it and moved in
// when all are verified, so on any error dst is left as it was.
func (r *Run) RestoreCheckpoint(ctx context.Context, seq int, dst string) (Manifest, error) {
	m, err := r.ReadManifest(ctx, seq)
	if err != nil {
		return Manifest{}, fmt.Errorf("restore: %w", err)
	}
	if err := r.restoreFiles(ctx, m, dst); err != nil {
		return Manifest{}, fmt.Errorf("restore checkpoint %s into %s: %w", r.CheckpointURI(seq), dst, err)
	}
	return m, nil
}

func (r *Run) restoreFiles(ctx context.Context, m Manifest, dst string) error {
	if entries, err := os.ReadDir(dst); err == nil && len(entries) > 0 {
		return fmt.Errorf("destination %s is not empty", dst)
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	parent := filepath.Dir(filepath.Clean(dst))
	if err := os.MkdirAll(parent, 0o777); err != nil {
		return err
	}
	staging, err := os.MkdirTemp(parent, "."+filepath.Base(dst)+".restore-*")
	if err != nil {
		return err
	}
	done := false
	defer func() {
		if !done {
			os.RemoveAll(staging)
		}
	}()
	prefix := r.ckptPrefix(m.Seq)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(fileParallelism)
	for _, f := range m.Files {
		g.Go(func() error {
			return fetchFile(gctx, r.b, prefix+f.Path, f, filepath.Join(staging, filepath.FromSlash(f.Path)))
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	// The staging directory was private while it filled; it becomes dst
	// with the mode a new directory gets: 0777 less the umask.
	if err := os.Chmod(staging, 0o777&^processUmask()); err != nil {
		return err
	}
	os.Remove(dst) // an empty directory; a missing one is fine too
	if err := os.Rename(staging, dst); err != nil {
		return err
	}
	done = true
	return nil
}

// fetchFile downloads key into the new file p and checks it against e.
func fetchFile(ctx context.Context, b Backend, key string, e FileEntry, p string) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o777); err != nil {
		return err
	}
	rc, err := b.Get(ctx, key)
	if errors.Is(err, ErrNotFound) {
		return fmt.Errorf("file %s listed in the manifest is missing: %w", e.Path, ErrCorrupt)
	}
	if err != nil {
		return fmt.Errorf("file %s: %w", e.Path, err)
	}
	defer rc.Close()
	out, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o666)
	if err != nil {
		return err
	}
	if err := copyVerified(out, rc, e); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// copyChunk is what copyVerified's reader hands on: data, and the error the
// read ended with.
type copyChunk struct {
	b   []byte
	err error
}

// copyVerified copies src to dst, checking it against e. A CRC32C (several
// GB/s on one core) is computed inline, in io.Copy's small chunks, which stay
// in the CPU's cache between the receive, the sum and the write (1 MiB
// chunks measured up to twice as slow on a busy 2-core machine). sha256, a few
// hundred MB/s on a core without SHA extensions, about a network stream's
// speed, runs on a second goroutine so that receiving and hashing overlap
// (copyPipelined).
func copyVerified(dst io.Writer, src io.Reader, e FileEntry) error {
	if e.CRC32C == "" {
		return copyPipelined(dst, src, e)
	}
	_, err := io.Copy(dst, newVerifyingReader(src, e))
	return err
}

// copyPipelined is copyVerified receiving on one goroutine while hashing and
// writing on another.
func copyPipelined(dst io.Writer, src io.Reader, e FileEntry) error {
	const depth, size = 4, 1 << 20
	free := make(chan []byte, depth)
	for range depth {
		free <- make([]byte, size)
	}
	full := make(chan copyChunk, depth)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			var b []byte
			select {
			case b = <-free:
			case <-stop:
				return
			}
			n, err := io.ReadFull(src, b)
			if err == io.ErrUnexpectedEOF {
				err = io.EOF // a short last chunk
			}
			select {
			case full <- copyChunk{b[:n], err}:
			case <-stop:
				return
			}
			if err != nil {
				return
			}
		}
	}()
	v := newVerifyingSink(e)
	for c := range full {
		if err := v.write(c.b); err != nil {
			return err
		}
		if _, err := dst.Write(c.b); err != nil {
			return err
		}
		if c.err == io.EOF {
			return v.end()
		}
		if c.err != nil {
			return c.err
		}
		free <- c.b[:cap(c.b)]
	}
	return nil // not reached: the reader ends with an error or EOF
}

// verifyingSink checks a stream of writes against a manifest entry: its
// size and its CRC32C, or its sha256 when the entry has no CRC32C.
type verifyingSink struct {
	e          FileEntry
	h          hash.Hash
	kind, want string
	n          int64
}

func newVerifyingSink(e FileEntry) verifyingSink {
	if e.CRC32C != "" {
		return verifyingSink{e: e, h: crc32.New(castagnoli), kind: "crc32c", want: e.CRC32C}
	}
	return verifyingSink{e: e, h: sha256.New(), kind: "sha256", want: e.SHA256}
}

func (v *verifyingSink) write(p []byte) error {
	v.h.Write(p)
	v.n += int64(len(p))
	if v.n > v.e.Size {
		return fmt.Errorf("file %s: more than the %d bytes of its manifest: %w", v.e.Path, v.e.Size, ErrCorrupt)
	}
	return nil
}

func (v *verifyingSink) end() error {
	if v.n != v.e.Size {
		return fmt.Errorf("file %s: %d bytes, manifest says %d: %w", v.e.Path, v.n, v.e.Size, ErrCorrupt)
	}
	if sum := hex.EncodeToString(v.h.Sum(nil)); sum != v.want {
		return fmt.Errorf("file %s: %s %s, manifest says %s: %w", v.e.Path, v.kind, sum, v.want, ErrCorrupt)
	}
	return nil
}

// verifyingReader hashes what it passes through and, at EOF, returns
// ErrCorrupt instead of io.EOF when the size or sha256 differs from the
// manifest entry, so no caller can mistake a damaged file for a whole one.
type verifyingReader struct {
	r io.Reader
	v verifyingSink
}

func newVerifyingReader(r io.Reader, e FileEntry) *verifyingReader {
	return &verifyingReader{r: r, v: newVerifyingSink(e)}
}

func (v *verifyingReader) Read(p []byte) (int, error) {
	n, err := v.r.Read(p)
	if werr := v.v.write(p[:n]); werr != nil {
		return n, werr
	}
	if err == io.EOF {
		if eerr := v.v.end(); eerr != nil {
			return n, eerr
		}
	}
	return n, err
}

// processUmask is the process's umask, read from /proc/self/status (Linux
// 4.7 on): setting it to read it back would race with every file being
// created meanwhile. 022 where it cannot be read.
func processUmask() os.FileMode {
	data, err := os.ReadFile("/proc/self/status")
	if err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if v, ok := strings.CutPrefix(line, "Umask:"); ok {
				if n, err := strconv.ParseUint(strings.TrimSpace(v), 8, 32); err == nil {
					return os.FileMode(n) & 0o777
				}
			}
		}
	}
	return 0o022
}
