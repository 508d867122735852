package data

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/parquet-go/parquet-go/encoding/thrift"
	pqformat "github.com/parquet-go/parquet-go/format"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/data/format"
)

// Fuzz targets for the parsers of bytes another process wrote (issue 30):
// IDX files, images, Parquet files (footer, offset indexes, pages) and the
// Thrift messages in them, a saved pipeline and a checkpoint's data
// position. Each is seeded with valid input and with the inputs of
// hardening_test.go; none may panic, and what one accepts must hold
// together.

// FuzzIDX reads the input as an IDX file of images and of labels: an
// accepted file's data is exactly what its dimensions say.
func FuzzIDX(f *testing.F) {
	img := append(idxHeader(2, 3, 2), 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(img)
	zw.Close()
	for _, seed := range [][]byte{img, gz.Bytes(), append(idxHeader(3), 7, 8, 9), idxWrapping, idxClaims4GiB} {
		f.Add(seed)
	}
	path := filepath.Join(f.TempDir(), "idx")
	f.Fuzz(func(t *testing.T, raw []byte) {
		if err := os.WriteFile(path, raw, 0o644); err != nil {
			t.Fatal(err)
		}
		for _, dims := range []int{3, 1} {
			idx, err := format.ReadIDX(path, dims)
			if err != nil {
				if !errors.Is(err, format.ErrFormat) {
					t.Fatalf("dims %d: %v is not format.ErrFormat", dims, err)
				}
				continue
			}
			n := 1
			for _, d := range idx.Dims {
				n *= d
			}
			if len(idx.Dims) != dims || len(idx.Data) != n {
				t.Fatalf("dims %v, %d bytes of data", idx.Dims, len(idx.Data))
			}
		}
	})
}

// FuzzImageDecode decodes the input as a dataset's image and resizes it:
// an accepted image has at most format.MaxImagePixels.
func FuzzImageDecode(f *testing.F) {
	src := image.NewRGBA(image.Rect(0, 0, 5, 3))
	for i := range src.Pix {
		src.Pix[i] = byte(i * 7)
	}
	var p, j bytes.Buffer
	png.Encode(&p, src)
	jpeg.Encode(&j, src, nil)
	gray := image.NewGray(image.Rect(0, 0, 2, 2))
	gray.Set(1, 1, color.White)
	var g bytes.Buffer
	png.Encode(&g, gray)
	for _, seed := range [][]byte{p.Bytes(), j.Bytes(), g.Bytes(), []byte(pngBomb)} {
		f.Add(seed)
	}
	dst := make([]byte, 3*4*4)
	f.Fuzz(func(t *testing.T, raw []byte) {
		img, err := format.DecodeImage("fuzz", raw)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("%v is not ErrInvalid", err)
			}
			return
		}
		b := img.Bounds()
		if b.Dx() < 1 || b.Dy() < 1 || b.Dx()*b.Dy() > format.MaxImagePixels {
			t.Fatalf("accepted an image of %dx%d", b.Dx(), b.Dy())
		}
		format.Resize(img, 3, 4, 4, dst)
		format.Resize(img, 1, 4, 4, dst)
	})
}

// pqSeeds are Parquet files for the fuzz targets: a valid one (several
// row groups, pages, offset indexes), and that file with its footer's
// length, magic or content made to declare what the bytes do not hold.
func pqSeeds(tb testing.TB) [][]byte {
	path := filepath.Join(tb.TempDir(), "seed.parquet")
	newTestTable(40).writeParquet(tb, path, 0, 40, 16)
	good, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	seeds := [][]byte{good}
	mut := func(f func(b []byte) []byte) { seeds = append(seeds, f(bytes.Clone(good))) }
	n := len(good)
	mut(func(b []byte) []byte { binary.LittleEndian.PutUint32(b[n-8:], 0xFFFFFFFF); return b })
	mut(func(b []byte) []byte { copy(b[n-4:], "PARE"); return b })
	mut(func(b []byte) []byte {
		return append([]byte("PAR1"), append(binary.LittleEndian.AppendUint32(nil, 0xFFFFFFFF), "PAR1"...)...)
	})
	// A footer of structs nested 100000 deep, and one whose first list
	// declares 2^31-1 elements.
	deep := append(bytes.Repeat([]byte{0x1c}, 100000), bytes.Repeat([]byte{0}, 100001)...)
	seeds = append(seeds, pqFile(deep), pqFile([]byte{0x29, 0xfc, 0xff, 0xff, 0xff, 0xff, 0x07, 0}))
	// The valid file with a footer whose first row group declares 2^30
	// rows: streaming sized its splits by them (29 GB, minutes).
	l := int(binary.LittleEndian.Uint32(good[n-8:]))
	var md pqformat.FileMetaData
	if err := thrift.Unmarshal(&thrift.CompactProtocol{}, good[n-8-l:n-8], &md); err != nil {
		tb.Fatal(err)
	}
	md.RowGroups[0].NumRows = 1 << 30
	var b bytes.Buffer
	if err := thrift.NewEncoder((&thrift.CompactProtocol{}).NewWriter(&b)).Encode(&md); err != nil {
		tb.Fatal(err)
	}
	rows := append(bytes.Clone(good[:n-8-l]), b.Bytes()...)
	rows = binary.LittleEndian.AppendUint32(rows, uint32(b.Len()))
	return append(seeds, append(rows, "PAR1"...))
}

// pqFile wraps footer bytes into a Parquet file.
func pqFile(footer []byte) []byte {
	b := append([]byte("PAR1"), footer...)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(footer)))
	return append(b, "PAR1"...)
}

// FuzzParquet opens the input as a dataset's only Parquet file and reads
// an epoch of it, in memory or streamed (offset indexes, page seeks), as
// the input's length is even or odd. Errors are fine; panics, hangs and
// allocations beyond what the bytes hold are not.
func FuzzParquet(f *testing.F) {
	for _, seed := range pqSeeds(f) {
		f.Add(seed)
	}
	path := filepath.Join(f.TempDir(), "f.parquet")
	f.Fuzz(func(t *testing.T, raw []byte) {
		if err := os.WriteFile(path, raw, 0o644); err != nil {
			t.Fatal(err)
		}
		no := false
		spec := api.DatasetSpec{URI: path, Format: "parquet", Label: "y", Features: []string{"id", "x", "city"},
			Task: "regression", Shuffle: &no, ShuffleWindowRows: 16, Mode: []string{"memory", "stream"}[len(raw)%2]}
		s, err := Open(context.Background(), spec, ShardOptions{BatchSize: 8}, nil)
		if err != nil {
			return
		}
		defer s.Close()
		x, y := make([]float32, s.BatchSize()*s.Width()), make([]float32, s.BatchSize())
		for range 1000 {
			if _, err := s.Next(context.Background(), x, y); err != nil {
				return
			}
		}
		t.Fatal("more than 1000 batches from a small file")
	})
}

// FuzzParquetThrift checks the input as a Thrift message (thriftCheck)
// and, when it passes, decodes it as each of the Parquet structures read
// from a file: the footer, an offset index, a page header. Seeds: the
// valid file's footer and offset indexes, and the footers of pqSeeds.
func FuzzParquetThrift(f *testing.F) {
	for _, file := range pqSeeds(f) {
		if n := len(file); n >= 12 {
			l := int(binary.LittleEndian.Uint32(file[n-8:]))
			if l <= n-12 {
				f.Add(file[n-8-l : n-8])
			}
		}
	}
	var oi bytes.Buffer
	thrift.NewEncoder((&thrift.CompactProtocol{}).NewWriter(&oi)).Encode(&pqformat.OffsetIndex{
		PageLocations: []pqformat.PageLocation{{Offset: 4, CompressedPageSize: 100}, {Offset: 104, CompressedPageSize: 50, FirstRowIndex: 10}}})
	f.Add(oi.Bytes())
	f.Fuzz(func(t *testing.T, raw []byte) {
		n, err := format.ThriftCheck(raw)
		if err != nil {
			return
		}
		if n > len(raw) {
			t.Fatalf("a message of %d bytes in %d", n, len(raw))
		}
		var md pqformat.FileMetaData
		var ix pqformat.OffsetIndex
		var ph pqformat.PageHeader
		for _, v := range []any{&md, &ix, &ph} {
			if thrift.Unmarshal(&thrift.CompactProtocol{}, raw[:n], v) == nil && v == &md {
				format.CheckParquetFooter(&md, int64(len(raw)))
			}
		}
	})
}

// FuzzReadPipeline decodes the input as a saved pipeline: one accepted
// is written and read back the same, and its width is not negative.
func FuzzReadPipeline(f *testing.F) {
	dir := f.TempDir()
	tab := newTestTable(30)
	tab.writeCSV(f, filepath.Join(dir, "t.csv"), 0, 30, "\n")
	s := mustOpen(f, api.DatasetSpec{URI: filepath.Join(dir, "t.csv"), Label: "y", Task: "classification"}, ShardOptions{BatchSize: 8}, nil)
	p, err := s.Fit(context.Background(), []api.PreprocessorSpec{
		{Type: "standard_scaler", Columns: []string{"x"}}, {Type: "simple_imputer", Columns: []string{"x"}},
		{Type: "one_hot_encoder", Columns: []string{"city"}}})
	if err != nil {
		f.Fatal(err)
	}
	if err := p.Save(dir); err != nil {
		f.Fatal(err)
	}
	saved, _ := os.ReadFile(filepath.Join(dir, PipelineFile))
	f.Add(saved)
	img, _ := json.Marshal(newPipeline(nil, LabelInfo{}, &ImageInfo{Channels: 3, Height: 8, Width: 8, Mean: []float64{.5, .5, .5}}))
	f.Add(img)
	f.Add(bytes.Replace(img, []byte(`"channels":3`), []byte(`"channels":100000000`), 1))
	f.Add(bytes.Replace(img, []byte(`"height":8`), []byte(`"height":4611686018427387904`), 1))
	f.Fuzz(func(t *testing.T, raw []byte) {
		p, err := ReadPipeline(bytes.NewReader(raw))
		if err != nil {
			return
		}
		if p.Width() < 0 {
			t.Fatalf("width %d", p.Width())
		}
		b, err := json.Marshal(p)
		if err != nil {
			return // a value JSON cannot write (NaN from a number too large)
		}
		q, err := ReadPipeline(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("written back, it reads as %v: %s", err, b)
		}
		if q.Width() != p.Width() {
			t.Fatalf("width %d, read back %d", p.Width(), q.Width())
		}
	})
}

// FuzzReadPosition reads the input as a checkpoint's saved data position
// and seeks a shard to it, in memory and streamed: Seek refuses what does
// not fit, and never panics.
func FuzzReadPosition(f *testing.F) {
	dir := f.TempDir()
	glob := newTestTable(50).writeFiles(f, dir, "parquet", 2, 8)
	no := false
	var shards []*Shard
	for _, mode := range []string{"memory", "stream"} {
		spec := api.DatasetSpec{URI: glob, Label: "y", Task: "regression", Shuffle: &no, ShuffleWindowRows: 16, Mode: mode}
		s := mustOpen(f, spec, ShardOptions{BatchSize: 4, WorldSize: 2, Rank: 1}, nil)
		x, y := make([]float32, 4*s.Width()), make([]float32, 4)
		for range 3 {
			s.Next(context.Background(), x, y)
		}
		b, _ := json.Marshal(s.Position())
		f.Add(b)
		p := s.Position()
		p.Settings.WorldSize, p.Settings.BatchSize, p.Consumed = 3, 5, 1<<62
		p.Splits = []PositionSplit{{WorldSize: 2, RowsPerStep: 8, Consumed: 8}}
		b, _ = json.Marshal(p)
		f.Add(b)
		shards = append(shards, s)
	}
	state := filepath.Join(f.TempDir(), "state")
	os.Mkdir(state, 0o755)
	f.Fuzz(func(t *testing.T, raw []byte) {
		if err := os.WriteFile(filepath.Join(state, StateFile("train")), raw, 0o644); err != nil {
			t.Fatal(err)
		}
		p, err := ReadPosition(state, "train")
		if err != nil {
			return
		}
		for _, s := range shards {
			if s.Seek(p) != nil {
				continue
			}
			x, y := make([]float32, 4*s.Width()), make([]float32, 4)
			for range 2 {
				if _, err := s.Next(context.Background(), x, y); err != nil && !errors.Is(err, io.EOF) {
					break
				}
			}
		}
	})
}
