package storage

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"time"

	"golang.org/x/sync/errgroup"
)

// Parallel transfers per checkpoint: enough to hide per-object latency on S3,
// few enough not to thrash a small machine.
const fileParallelism = 4

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
