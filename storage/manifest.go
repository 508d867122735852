package storage

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"math"
	"sort"
	"strconv"
	"time"
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
		if f.Size < 0 || f.Size > math.MaxInt64-total {
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
