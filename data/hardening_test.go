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
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go/encoding/thrift"
	pqformat "github.com/parquet-go/parquet-go/format"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/data/format"
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
	b := []byte{0, 0, 0x08, byte(len(dims))} // 0x08: unsigned bytes
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
		n := allocated(func() { _, err = format.ReadIDX(path, 3) })
		wantErr(t, err, true, c.name, c.want)
		if !errors.Is(err, format.ErrFormat) {
			t.Errorf("%s: %v is not format.ErrFormat", c.name, err)
		}
		if n > 64<<20 {
			t.Errorf("%s: refusing the file allocated %d MiB", c.name, n>>20)
		}
	}
}

// TestParquetDeclaredSizes: a Parquet footer is checked before
// parquet-go decodes it: a footer length past the file (parquet-go
// allocated it, up to 4 GiB, before reading), an encrypted footer's
// magic (parquet-go dereferenced its missing key config), structs nested
// 100000 deep, and a list declaring 2^31-1 elements in 7 bytes are each
// refused as an invalid dataset naming the file, allocating little; so
// is a row group declaring 2^30 rows that its pages do not hold, streamed
// (the splits were sized by the rows: 29 GB allocated, minutes).
func TestParquetDeclaredSizes(t *testing.T) {
	seeds := pqSeeds(t)
	dir := t.TempDir()
	for i, c := range []struct {
		raw  []byte
		want string
	}{
		{seeds[1], "footer_length 4294967295"},
		{seeds[2], `"PARE"`},
		{seeds[3], "footer_length 4294967295"},
		{seeds[4], "nested deeper than 64"},
		{seeds[5], "declares 2147483647 elements"},
		{seeds[6], "the pages hold 16 values, the row group declares 1073741824 rows"},
	} {
		path := filepath.Join(dir, "bad.parquet")
		if err := os.WriteFile(path, c.raw, 0o644); err != nil {
			t.Fatal(err)
		}
		var err error
		n := allocated(func() {
			_, err = Open(context.Background(), api.DatasetSpec{URI: path, Label: "y", Task: "regression"}, ShardOptions{BatchSize: 4}, nil)
		})
		wantErr(t, err, true, "bad.parquet", c.want)
		if n > 16<<20 {
			t.Errorf("case %d: refusing the file allocated %d MiB", i, n>>20)
		}
	}
	// A valid file still reads, with its offset indexes.
	path := filepath.Join(dir, "good.parquet")
	os.WriteFile(path, seeds[0], 0o644)
	no := false
	s := mustOpen(t, api.DatasetSpec{URI: path, Label: "y", Features: []string{"id"}, Task: "regression", Shuffle: &no, Mode: "stream"}, ShardOptions{BatchSize: 5}, nil)
	if ids, _ := epochRows(t, s); len(ids) != 40 {
		t.Fatalf("read %d rows of 40", len(ids))
	}
}

// TestThriftCheck: what thriftCheck refuses and accepts, in the compact
// protocol's bytes.
func TestThriftCheck(t *testing.T) {
	for _, c := range []struct {
		name string
		raw  []byte
		n    int
		want string
	}{
		{"empty struct", []byte{0}, 1, ""},
		{"i32 field, bool field", []byte{0x15, 0x02, 0x11, 0}, 4, ""},
		{"list of 3 i32", []byte{0x19, 0x35, 1, 2, 3, 0}, 6, ""},
		{"map of 1 binary to i8", []byte{0x1b, 1, 0x83, 1, 'a', 9, 0}, 7, ""},
		{"long field id", []byte{0x05, 0x80, 0x01, 0x02, 0}, 5, ""},
		{"no stop", []byte{0x15, 0x02}, 0, "ends inside"},
		{"binary past the end", []byte{0x18, 0x10, 'a', 0}, 0, "declares 16 bytes"},
		{"list past the end", []byte{0x19, 0xf5, 0x80, 0x01, 0}, 0, "declares 128 elements"},
		{"map count overflowing", []byte{0x1b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 0x55, 0}, 0, "declares"},
		{"unknown type", []byte{0x1e, 0}, 0, "unknown type 14"},
		{"deep", append(bytes.Repeat([]byte{0x1c}, 65), bytes.Repeat([]byte{0}, 66)...), 0, "nested deeper than 64"},
		{"64 deep", append(bytes.Repeat([]byte{0x1c}, 63), bytes.Repeat([]byte{0}, 64)...), 127, ""},
	} {
		n, err := format.ThriftCheck(c.raw)
		switch {
		case c.want == "" && (err != nil || n != c.n):
			t.Errorf("%s: %d, %v; want %d bytes", c.name, n, err, c.n)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v, want an error saying %q", c.name, err, c.want)
		}
	}
}

// TestParquetPageHeaders: walkPages refuses page headers that declare
// more than the column chunk holds (parquet-go allocated a page's
// declared sizes, and a statistic's declared length, before reading
// them), and passes the pages of a valid file.
func TestParquetPageHeaders(t *testing.T) {
	enc := func(h *pqformat.PageHeader, body int) []byte {
		var b bytes.Buffer
		if err := thrift.NewEncoder((&thrift.CompactProtocol{}).NewWriter(&b)).Encode(h); err != nil {
			t.Fatal(err)
		}
		return append(b.Bytes(), make([]byte, body)...)
	}
	data := func(n int32) thrift.Null[pqformat.DataPageHeader] {
		return thrift.Null[pqformat.DataPageHeader]{Valid: true, V: pqformat.DataPageHeader{NumValues: n}}
	}
	// A statistic (field 5 of the data page header's struct) declaring
	// 2^31-1 bytes: the header's bytes, then the binary's length.
	stat := enc(&pqformat.PageHeader{Type: pqformat.DataPage, UncompressedPageSize: 8, CompressedPageSize: 8, DataPageHeader: data(1)}, 0)
	stat = append(stat[:len(stat)-2], 0x5c, 0x18, 0xff, 0xff, 0xff, 0xff, 0x07, 0, 0, 0)
	for _, c := range []struct {
		name  string
		chunk []byte
		codec pqformat.CompressionCodec
		want  string
	}{
		{"compressed past the chunk", enc(&pqformat.PageHeader{Type: pqformat.DataPage, UncompressedPageSize: 1 << 30, CompressedPageSize: 1<<31 - 1, DataPageHeader: data(1)}, 16), pqformat.Snappy, "compressed_page_size 2147483647"},
		{"uncompressed too large", enc(&pqformat.PageHeader{Type: pqformat.DataPage, UncompressedPageSize: 1<<31 - 1, CompressedPageSize: 16, DataPageHeader: data(1)}, 16), pqformat.Zstd, "uncompressed_page_size 2147483647"},
		{"snappy past its ratio", enc(&pqformat.PageHeader{Type: pqformat.DataPage, UncompressedPageSize: 1 << 20, CompressedPageSize: 16, DataPageHeader: data(1)}, 16), pqformat.Snappy, "inflate to at most 576"},
		{"uncompressed differs", enc(&pqformat.PageHeader{Type: pqformat.DataPage, UncompressedPageSize: 1 << 20, CompressedPageSize: 16, DataPageHeader: data(1)}, 16), pqformat.Uncompressed, "not compressed"},
		{"values past the rows", enc(&pqformat.PageHeader{Type: pqformat.DataPage, UncompressedPageSize: 16, CompressedPageSize: 16, DataPageHeader: data(1 << 30)}, 16), pqformat.Uncompressed, "num_values 1073741824"},
		{"dictionary past its bytes", enc(&pqformat.PageHeader{Type: pqformat.DictionaryPage, UncompressedPageSize: 16, CompressedPageSize: 16,
			DictionaryPageHeader: thrift.Null[pqformat.DictionaryPageHeader]{Valid: true, V: pqformat.DictionaryPageHeader{NumValues: 1 << 30}}}, 16), pqformat.Uncompressed, "dictionary num_values"},
		{"statistic past the chunk", stat, pqformat.Uncompressed, "declares 2147483647 bytes"},
	} {
		md := &pqformat.ColumnMetaData{Codec: c.codec, DataPageOffset: 0, TotalCompressedSize: int64(len(c.chunk))}
		err := format.WalkParquetPages(bytes.NewReader(c.chunk), md, 100)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", c.name, err, c.want)
		}
	}
	ok := enc(&pqformat.PageHeader{Type: pqformat.DataPage, UncompressedPageSize: 16, CompressedPageSize: 16, DataPageHeader: data(100)}, 16)
	ok = append(ok, ok...)
	if err := format.WalkParquetPages(bytes.NewReader(ok), &pqformat.ColumnMetaData{TotalCompressedSize: int64(len(ok))}, 100); err != nil {
		t.Errorf("two valid pages: %v", err)
	}
}
