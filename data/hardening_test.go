package data

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"image/color"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/tempotrain/tempotrain/api"
)

// What the tests below feed the readers: a size, count or shape that the
// input declares and its bytes cannot back (issue 30's rows 3 and 10).
// They also seed the fuzz targets (fuzz_parsers_test.go).

// pngBomb is a 77-byte PNG whose header says 40000×40000 RGBA: decoded
// whole, 6.4 GB.
const pngBomb = "\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x9c@\x00\x00\x9c@\b\x06\x00\x00\x00Q\f\x0e\x05" +
	"\x00\x00\x00\x14IDATx\xdab\x18\x05\xa3`\x1400\x00\x02\x00\x00\xff\xff\x03\t\x00\x01XC\x86\xb4" +
	"\x00\x00\x00\x00IEND\xaeB`\x82"

// idxHeader is an IDX header of unsigned bytes with dims.
func idxHeader(dims ...uint32) []byte {
	b := []byte{0, 0, idxUbyte, byte(len(dims))}
	for _, d := range dims {
		b = binary.BigEndian.AppendUint32(b, d)
	}
	return b
}

// idxWrapping: dimensions whose product wraps past int64 to a negative
// number, under the bound: make panicked.
var idxWrapping = idxHeader(0xFFFFFFFF, 0xFFFFFFFF, 1)

// idxClaims4GiB: a 16-byte file whose header claims 1×65536×65536 bytes,
// 4 GiB, exactly the bound.
var idxClaims4GiB = idxHeader(1, 65536, 65536)

// allocated runs f and returns the bytes the process allocated meanwhile
// (the test must not run in parallel with others for this to mean f's).
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestImageHeaderBomb (issue 30, row 3): the 77-byte PNG that claims
// 40000×40000 pixels is refused from its header, naming the file and the
// size, without the decoder allocating the image; so is a PNG whose
// header claims more pixels than its bytes can hold.
func TestImageHeaderBomb(t *testing.T) {
	if len(pngBomb) != 77 {
		t.Fatalf("the PNG is %d bytes, want 77", len(pngBomb))
	}
	dir := t.TempDir()
	writeImage(t, filepath.Join(dir, "cat", "ok.png"), 4, 4, color.White)
	mkdir(filepath.Join(dir, "dog"))
	if err := os.WriteFile(filepath.Join(dir, "dog", "bomb.png"), []byte(pngBomb), 0o644); err != nil {
		t.Fatal(err)
	}
	spec := api.DatasetSpec{URI: dir, Format: "images", Image: api.ImageOptions{Width: 2, Height: 2, Channels: 3}}
	var err error
	n := allocated(func() { _, err = Open(context.Background(), spec, ShardOptions{BatchSize: 2}, nil) })
	wantErr(t, err, true, "bomb.png", "40000x40000", "64 Mpx")
	if n > 64<<20 {
		t.Errorf("refusing the image allocated %d MiB", n>>20)
	}

	// 4096×4096 is within the bound, but not in 77 bytes.
	b := []byte(pngBomb)
	binary.BigEndian.PutUint32(b[16:], 4096)
	binary.BigEndian.PutUint32(b[20:], 4096)
	binary.BigEndian.PutUint32(b[29:], crc32.ChecksumIEEE(b[12:29]))
	os.WriteFile(filepath.Join(dir, "dog", "bomb.png"), b, 0o644)
	n = allocated(func() { _, err = Open(context.Background(), spec, ShardOptions{BatchSize: 2}, nil) })
	wantErr(t, err, true, "bomb.png", "4096x4096 in 77 bytes", "cannot hold")
	if n > 32<<20 {
		t.Errorf("refusing the image allocated %d MiB", n>>20)
	}
}

// TestIDXDeclaredSizes (issue 30, row 10): dimensions whose product
// wraps past int64, a 16-byte file whose header claims 4 GiB, and a
// gzip stream that claims 256 MiB and holds 1 MiB are refused with a
// format error, allocating about what the file holds, never what it
// claims.
func TestIDXDeclaredSizes(t *testing.T) {
	dir := t.TempDir()
	random := make([]byte, 1<<20)
	for i := range random {
		random[i] = byte(rand.Uint32())
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(append(idxHeader(1, 16384, 16384), random...))
	zw.Close()
	for _, c := range []struct {
		name string
		raw  []byte
		want string
	}{
		{"wrapping", idxWrapping, "claim more than 4294967296 bytes"},
		{"claims-4gib", idxClaims4GiB, "cannot hold them"},
		{"short-gzip", gz.Bytes(), "truncated"},
	} {
		path := filepath.Join(dir, c.name)
		if err := os.WriteFile(path, c.raw, 0o644); err != nil {
			t.Fatal(err)
		}
		var err error
		n := allocated(func() { _, err = ReadIDX(path, 3) })
		wantErr(t, err, true, c.name, c.want)
		if !errors.Is(err, ErrFormat) {
			t.Errorf("%s: %v is not ErrFormat", c.name, err)
		}
		if n > 64<<20 {
			t.Errorf("%s: refusing the file allocated %d MiB", c.name, n>>20)
		}
	}
}
