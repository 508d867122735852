package storage

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"path/filepath"
	"testing"
)

// TestRestoreVerifiesSHA256WithoutCRC32C: a manifest written before CRC32C
// existed is still verified, by its sha256.
func TestRestoreVerifiesSHA256WithoutCRC32C(t *testing.T) {
	ctx := context.Background()
	b, err := NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	r := NewRun(b, "run")
	files := ckptFiles(3)
	m := commit(t, r, 1, files, Manifest{})
	for i := range m.Files {
		m.Files[i].CRC32C = ""
	}
	legacy, _ := json.Marshal(m)
	put(t, b, "run/checkpoint_000001/manifest.json", legacy)
	if _, err := r.RestoreCheckpoint(ctx, 1, filepath.Join(t.TempDir(), "ok")); err != nil {
		t.Fatalf("restore of an intact legacy checkpoint: %v", err)
	}
	bad := append([]byte(nil), files["model.bin"]...)
	bad[7] ^= 0x80
	put(t, b, "run/checkpoint_000001/model.bin", bad)
	_, err = r.RestoreCheckpoint(ctx, 1, filepath.Join(t.TempDir(), "bad"))
	wantErrIs(t, err, ErrCorrupt)
	contains(t, err, "model.bin", "sha256")
}

// TestCopyVerified: both verification paths (CRC32C inline, sha256
// pipelined) pass an intact stream across chunk boundaries and refuse a
// flipped byte, a short stream and a long one.
func TestCopyVerified(t *testing.T) {
	data := randBytes(9, 3<<20+12345) // more than three 1 MiB chunks
	full := FileEntry{Path: "f.bin", Size: int64(len(data)), SHA256: sha(data), CRC32C: crc(data)}
	shaOnly := full
	shaOnly.CRC32C = ""
	flipped := bytes.Clone(data)
	flipped[2<<20+7] ^= 1
	for _, e := range []FileEntry{full, shaOnly} {
		kind := "crc32c"
		if e.CRC32C == "" {
			kind = "sha256"
		}
		t.Run(kind, func(t *testing.T) {
			var out bytes.Buffer
			if err := copyVerified(&out, bytes.NewReader(data), e); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(out.Bytes(), data) {
				t.Fatal("copied bytes differ")
			}
			for _, tc := range []struct {
				name string
				in   []byte
				want string
			}{
				{"flipped", flipped, kind},
				{"short", data[:len(data)-1], "manifest says"},
				{"long", append(bytes.Clone(data), 0), "more than the"},
				{"empty", nil, "manifest says"},
			} {
				err := copyVerified(io.Discard, bytes.NewReader(tc.in), e)
				wantErrIs(t, err, ErrCorrupt)
				contains(t, err, tc.want)
			}
		})
	}
}
