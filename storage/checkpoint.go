package storage

import (
	"bytes"
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
	"math"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"
)

// ManifestVersion is the format version CommitCheckpoint writes. Readers
// accept versions 1..ManifestVersion and refuse newer ones as ErrCorrupt
// rather than misread them.
const ManifestVersion = 1

// Manifest describes a committed checkpoint. It is stored as manifest.json in
// the checkpoint's directory, written after every file, so its presence is the
// commit.
type Manifest struct {
	// Version of the manifest format (ManifestVersion).
	Version int `json:"version"`
	// Seq numbers the run's checkpoints from 1, across attempts.
	Seq int `json:"seq"`
	// Attempt that wrote it.
	Attempt int `json:"attempt"`
	// Files of the checkpoint, sorted by Path.
	Files []FileEntry `json:"files"`
	// Metrics reported with the checkpoint.
	Metrics map[string]float64 `json:"metrics,omitempty"`
	// Meta is free-form metadata (model kind, step...).
	Meta map[string]string `json:"meta,omitempty"`
	// Bytes is the total size of Files.
	Bytes int64 `json:"bytes"`
	// Time of the commit (UTC).
	Time time.Time `json:"time"`
}

// MarshalJSON writes non-finite metrics (a diverged loss) as the strings
// "NaN", "+Inf" and "-Inf", which JSON numbers cannot hold; a commit must not
// fail because training diverged.
func (m Manifest) MarshalJSON() ([]byte, error) {
	type plain Manifest
	out := struct {
		plain
		Metrics map[string]any `json:"metrics,omitempty"`
	}{plain: plain(m)}
	if len(m.Metrics) > 0 {
		out.Metrics = make(map[string]any, len(m.Metrics))
		for k, v := range m.Metrics {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				out.Metrics[k] = strconv.FormatFloat(v, 'g', -1, 64)
			} else {
				out.Metrics[k] = v
			}
		}
	}
	return json.Marshal(out)
}

// UnmarshalJSON reads what MarshalJSON writes.
func (m *Manifest) UnmarshalJSON(data []byte) error {
	type plain Manifest
	var in struct {
		plain
		Metrics map[string]json.RawMessage `json:"metrics"`
	}
	if err := json.Unmarshal(data, &in); err != nil {
		return err
	}
	*m = Manifest(in.plain)
	m.Metrics = nil
	if in.Metrics != nil {
		m.Metrics = make(map[string]float64, len(in.Metrics))
	}
	for k, raw := range in.Metrics {
		var v float64
		if err := json.Unmarshal(raw, &v); err == nil {
			m.Metrics[k] = v
			continue
		}
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return fmt.Errorf("metric %q: %s is neither a number nor NaN/±Inf", k, raw)
		}
		v, err := strconv.ParseFloat(s, 64)
		if err != nil || !(math.IsNaN(v) || math.IsInf(v, 0)) {
			return fmt.Errorf("metric %q: %s is neither a number nor NaN/±Inf", k, raw)
		}
		m.Metrics[k] = v
	}
	return nil
}

// FileEntry is one file of a checkpoint.
type FileEntry struct {
	// Path relative to the checkpoint directory, slash-separated.
	Path string `json:"path"`
	Size int64  `json:"size"`
	// SHA256 of the contents, lower-case hex: the file's identity, for audit
	// and for tools that compare checkpoints.
	SHA256 string `json:"sha256"`
	// CRC32C (Castagnoli) of the contents, 8 lower-case hex digits. Restores
	// verify it rather than SHA256: it catches the same accidental damage
	// (torn writes, bit rot, truncation) at memory speed, where sha256 runs at
	// ~200 MB/s on a core without SHA extensions and would bound every
	// restore. Manifests without it (written before it existed) are verified
	// by SHA256.
	CRC32C string `json:"crc32c,omitempty"`
}

// File returns the entry of the file at p, if the checkpoint has one.
func (m Manifest) File(p string) (FileEntry, bool) {
	i := sort.Search(len(m.Files), func(i int) bool { return m.Files[i].Path >= p })
	if i < len(m.Files) && m.Files[i].Path == p {
		return m.Files[i], true
	}
	return FileEntry{}, false
}

// Parallel transfers per checkpoint: enough to hide per-object latency on S3,
// few enough not to thrash a small machine.
const fileParallelism = 4

// CheckpointDir is the name of checkpoint seq's directory in its run.
func CheckpointDir(seq int) string { return fmt.Sprintf("checkpoint_%06d", seq) }

// parseCheckpointDir returns the seq of a "checkpoint_NNNNNN" name.
func parseCheckpointDir(name string) (int, bool) {
	digits, ok := strings.CutPrefix(name, "checkpoint_")
	if !ok || len(digits) < 6 {
		return 0, false
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	seq, err := strconv.Atoi(digits)
	return seq, err == nil && CheckpointDir(seq) == name
}

func (r *Run) ckptPrefix(seq int) string { return r.prefix + CheckpointDir(seq) + "/" }

// CheckpointURI is the URI of checkpoint seq's directory.
func (r *Run) CheckpointURI(seq int) string { return r.b.URI(r.prefix + CheckpointDir(seq)) }

// localFile is a file of a checkpoint directory being committed.
type localFile struct {
	rel  string // slash-separated, relative to the checkpoint directory
	abs  string
	size int64
	// data, when not nil, is the file's content staged in memory (an
	// asynchronous commit's snapshot); it is committed instead of abs.
	data []byte
}

// scanCheckpointDir lists the regular files under dir (following symlinks to
// files), sorted by relative path. A manifest.json at the top is refused: the
// commit writes its own there.
func scanCheckpointDir(dir string) ([]localFile, error) {
	var files []localFile
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		info, err := os.Stat(p) // follows a symlink
		if err != nil {
			return err
		}
		if !info.Mode().IsRegular() {
			return nil
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if rel == ManifestFile {
			return fmt.Errorf("%s: the name %s is reserved for the checkpoint's manifest", p, ManifestFile)
		}
		if !validRelPath(rel) {
			return fmt.Errorf("%s: file name %q cannot be stored", p, rel)
		}
		files = append(files, localFile{rel: rel, abs: p, size: info.Size()})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("scan checkpoint directory %s: %w", dir, err)
	}
	sort.Slice(files, func(i, j int) bool { return files[i].rel < files[j].rel })
	return files, nil
}

// CommitCheckpoint copies every regular file under dir into checkpoint seq,
// then writes its manifest last: the files with size and sha256, m's Attempt,
// Metrics and Meta, the format version and the time (m.Time if set). An
// existing checkpoint seq, an orphan of a dead attempt, is invalidated first
// (manifest deleted) and replaced. It returns the manifest written.
func (r *Run) CommitCheckpoint(ctx context.Context, seq int, dir string, m Manifest) (Manifest, error) {
	if seq < 0 {
		return r.commitFailed(seq, fmt.Errorf("seq %d < 0", seq))
	}
	files, err := scanCheckpointDir(dir)
	if err != nil {
		return r.commitFailed(seq, err)
	}
	return r.commitFiles(ctx, seq, files, m)
}

// commitFailed is the error of a failed commit of checkpoint seq.
func (r *Run) commitFailed(seq int, err error) (Manifest, error) {
	return Manifest{}, fmt.Errorf("commit checkpoint %s: %w", r.CheckpointURI(seq), err)
}

// commitFiles is CommitCheckpoint of files already scanned.
func (r *Run) commitFiles(ctx context.Context, seq int, files []localFile, m Manifest) (Manifest, error) {
	if err := r.DeleteCheckpoint(ctx, seq); err != nil {
		return r.commitFailed(seq, fmt.Errorf("invalidate the previous checkpoint %d: %w", seq, err))
	}
	prefix := r.ckptPrefix(seq)
	entries := make([]FileEntry, len(files))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(fileParallelism)
	for i, f := range files {
		g.Go(func() error {
			e, err := putFile(gctx, r.b, prefix+f.rel, f)
			entries[i] = e
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return r.commitFailed(seq, err)
	}
	m.Version = ManifestVersion
	m.Seq = seq
	m.Files = entries
	m.Bytes = 0
	for _, e := range entries {
		m.Bytes += e.Size
	}
	if m.Time.IsZero() {
		m.Time = time.Now().UTC()
	}
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return r.commitFailed(seq, fmt.Errorf("encode manifest: %w", err))
	}
	data = append(data, '\n')
	if err := r.b.Put(ctx, prefix+ManifestFile, bytes.NewReader(data), int64(len(data))); err != nil {
		return r.commitFailed(seq, fmt.Errorf("write manifest: %w", err))
	}
	return m, nil
}

// putFile uploads one file and hashes it in parallel from a second handle, so
// the upload keeps a seekable *os.File (S3 uploads it in concurrent parts and
// can retry them) and the hash costs no extra wall time.
func putFile(ctx context.Context, b Backend, key string, f localFile) (FileEntry, error) {
	type hashed struct {
		sha, crc string
		err      error
	}
	hc := make(chan hashed, 1)
	go func() {
		if f.data != nil {
			sha, crc := hashBytes(f.data)
			hc <- hashed{sha, crc, nil}
			return
		}
		sha, crc, err := hashFile(ctx, f.abs, f.size)
		hc <- hashed{sha, crc, err}
	}()
	err := func() error {
		if f.data != nil {
			return b.Put(ctx, key, bytes.NewReader(f.data), f.size)
		}
		src, err := os.Open(f.abs)
		if err != nil {
			return err
		}
		defer src.Close()
		return b.Put(ctx, key, src, f.size)
	}()
	h := <-hc
	if err != nil {
		return FileEntry{}, fmt.Errorf("file %s: %w", f.rel, err)
	}
	if h.err != nil {
		return FileEntry{}, fmt.Errorf("file %s: hash: %w", f.rel, h.err)
	}
	return FileEntry{Path: f.rel, Size: f.size, SHA256: h.sha, CRC32C: h.crc}, nil
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// hashBytes returns the sha256 and CRC32C of b, in hex.
func hashBytes(b []byte) (sha, crc string) {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:]), fmt.Sprintf("%08x", crc32.Checksum(b, castagnoli))
}

// hashFile returns the sha256 and CRC32C of a file, in hex.
func hashFile(ctx context.Context, p string, size int64) (sha, crc string, err error) {
	f, err := os.Open(p)
	if err != nil {
		return "", "", err
	}
	defer f.Close()
	hs, hc := sha256.New(), crc32.New(castagnoli)
	n, err := io.Copy(io.MultiWriter(hs, hc), ctxReader{ctx, f})
	if err != nil {
		return "", "", err
	}
	if n != size {
		return "", "", fmt.Errorf("%s changed while being committed: %d bytes, was %d", p, n, size)
	}
	return hex.EncodeToString(hs.Sum(nil)), hex.EncodeToString(hc.Sum(nil)), nil
}

// ReadManifest reads and checks checkpoint seq's manifest: ErrNotFound when
// it has none (not committed, or deleted), ErrCorrupt when it does not parse or
// does not describe a well-formed checkpoint seq.
func (r *Run) ReadManifest(ctx context.Context, seq int) (Manifest, error) {
	key := r.ckptPrefix(seq) + ManifestFile
	data, err := r.readAll(ctx, key)
	if err != nil {
		return Manifest{}, fmt.Errorf("checkpoint %s: %w", r.CheckpointURI(seq), err)
	}
	var m Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return Manifest{}, fmt.Errorf("checkpoint %s: manifest: %w: %w", r.CheckpointURI(seq), ErrCorrupt, err)
	}
	if err := m.check(seq); err != nil {
		return Manifest{}, fmt.Errorf("checkpoint %s: manifest: %w: %w", r.CheckpointURI(seq), ErrCorrupt, err)
	}
	return m, nil
}

// check validates a decoded manifest: restores write where it says, so a
// path escaping the directory or a malformed sum is refused.
func (m Manifest) check(seq int) error {
	if m.Version < 1 || m.Version > ManifestVersion {
		return fmt.Errorf("format version %d, this build reads 1..%d", m.Version, ManifestVersion)
	}
	if m.Seq != seq {
		return fmt.Errorf("says seq %d, stored as %d", m.Seq, seq)
	}
	var total int64
	for i, f := range m.Files {
		if !validRelPath(f.Path) || f.Path == ManifestFile {
			return fmt.Errorf("file path %q", f.Path)
		}
		if i > 0 && m.Files[i-1].Path >= f.Path {
			return fmt.Errorf("files not sorted or duplicated at %q", f.Path)
		}
		if f.Size < 0 {
			return fmt.Errorf("file %s: size %d", f.Path, f.Size)
		}
		if b, err := hex.DecodeString(f.SHA256); err != nil || len(b) != sha256.Size {
			return fmt.Errorf("file %s: sha256 %q", f.Path, f.SHA256)
		}
		if b, err := hex.DecodeString(f.CRC32C); f.CRC32C != "" && (err != nil || len(b) != crc32.Size) {
			return fmt.Errorf("file %s: crc32c %q", f.Path, f.CRC32C)
		}
		total += f.Size
	}
	if total != m.Bytes {
		return fmt.Errorf("bytes %d, files sum to %d", m.Bytes, total)
	}
	return nil
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
	if err := os.MkdirAll(parent, 0o755); err != nil {
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
	if err := os.Chmod(staging, 0o755); err != nil {
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
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
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
	out, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
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
		skipped = append(skipped, err)
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

// splitCheckpointURI splits ".../{run}/checkpoint_{seq}" into the storage
// path, the run name and seq.
func splitCheckpointURI(uri string) (storagePath, run string, seq int, err error) {
	u := strings.TrimRight(strings.TrimSpace(uri), "/")
	dir := path.Base(u)
	seq, ok := parseCheckpointDir(dir)
	if !ok {
		return "", "", 0, fmt.Errorf("%q is not a checkpoint URI: its last element should be checkpoint_NNNNNN", uri)
	}
	runDir := strings.TrimSuffix(u, "/"+dir)
	i := strings.LastIndex(runDir, "/")
	if i < 0 || runDir == u {
		return "", "", 0, fmt.Errorf("%q is not a checkpoint URI: want {storage}/{run}/checkpoint_NNNNNN", uri)
	}
	storagePath, run = runDir[:i], runDir[i+1:]
	switch storagePath {
	case "":
		storagePath = "/"
	case "file://":
		storagePath = "file:///"
	case "s3:/":
		// "s3://bucket/checkpoint_000001": the bucket root is the run.
		storagePath, run = runDir, ""
	}
	return storagePath, run, seq, nil
}
