package data

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/data/format"
)

// writtenTable is what the writer tests write: every type, nulls, awkward
// strings and numbers that must come back exactly.
type writtenTable struct {
	cols []format.WriteColumn
	id   []int64
	f32  []float32
	f64  []float64
	s    []string
	null []bool // of s
}

func newWrittenTable(n int) *writtenTable {
	w := &writtenTable{cols: []format.WriteColumn{
		{Name: "id", Type: format.Int64},
		{Name: "score", Type: format.Float32},
		{Name: "exact", Type: format.Float64},
		{Name: "note", Type: format.String, Nullable: true},
	}}
	notes := []string{"plain", "a, b", `say "hi"`, "two\nlines", " padded ", "ünïcode"}
	for i := range n {
		w.id = append(w.id, int64(i)*1_000_000_007+(1<<40)) // beyond float32's and float64's exact ints? float64 holds them
		w.f32 = append(w.f32, float32(math.Sin(float64(i)))*1e3)
		w.f64 = append(w.f64, math.Pi*float64(i)/7)
		w.s = append(w.s, notes[i%len(notes)])
		w.null = append(w.null, i%11 == 3)
	}
	w.f32[0] = float32(math.Inf(-1))
	if n > 1 {
		w.f64[1] = 1e300
	}
	return w
}

func (w *writtenTable) rows(lo, hi int) *format.Rows {
	return &format.Rows{N: hi - lo, Cols: []format.Values{
		{I64: w.id[lo:hi]}, {F32: w.f32[lo:hi]}, {F64: w.f64[lo:hi]}, {Str: w.s[lo:hi], Null: w.null[lo:hi]},
	}}
}

// write writes the table in batches of 7 rows.
func (w *writtenTable) write(t *testing.T, path, fm string, rowGroup int64) {
	t.Helper()
	var buf bytes.Buffer
	tw, err := format.NewTableWriter(&buf, fm, w.cols, format.WriterOptions{RowGroupRows: rowGroup})
	if err != nil {
		t.Fatal(err)
	}
	for lo := 0; lo < len(w.id); lo += 7 {
		if err := tw.Write(w.rows(lo, min(lo+7, len(w.id)))); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if tw.Rows() != int64(len(w.id)) {
		t.Fatalf("writer counted %d rows, wrote %d", tw.Rows(), len(w.id))
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// readAll reads rows [lo, hi) of file i: id and the floats as text
// (exact), score also as a number, note as text.
func readAll(t *testing.T, tbl *format.Table, i int, lo, hi int64, batch int) (ids, exact, notes []string, scores []float32, sizes []int) {
	t.Helper()
	cols := []format.ColumnInfo{{Name: "id", Kind: format.Categorical}, {Name: "score", Kind: format.Numeric}, {Name: "exact", Kind: format.Categorical}, {Name: "note", Kind: format.Categorical}}
	n, err := tbl.Read(context.Background(), i, lo, hi, cols, batch, func(b *format.Batch) error {
		sizes = append(sizes, b.N)
		for r := 0; r < b.N; r++ {
			text := func(j int) string {
				if c := b.Cat[j][r]; c >= 0 {
					return b.Dicts[j].String(c)
				}
				return "<null>"
			}
			ids = append(ids, text(0))
			scores = append(scores, b.Num[1][r])
			exact = append(exact, text(2))
			notes = append(notes, text(3))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n != int64(len(ids)) {
		t.Errorf("Read says %d rows, gave %d", n, len(ids))
	}
	return
}

// TestWriterReadsBack: what a TableWriter writes, in either format,
// OpenTable lists with its columns in order and Read gives back exactly:
// int64 ids and float64s as their exact text, float32s as the same bits,
// strings with commas, quotes and newlines, missing values missing.
func TestWriterReadsBack(t *testing.T) {
	for _, fm := range []string{"parquet", "csv"} {
		t.Run(fm, func(t *testing.T) {
			const n = 100
			w := newWrittenTable(n)
			dir := t.TempDir()
			w.write(t, filepath.Join(dir, "a."+fm), fm, 16)
			tbl, err := format.OpenTable(context.Background(), api.DatasetSpec{URI: dir + "/"})
			if err != nil {
				t.Fatal(err)
			}
			if tbl.Format() != fm {
				t.Errorf("format %q", tbl.Format())
			}
			var names []string
			for _, c := range tbl.Columns() {
				names = append(names, c.Name+":"+c.Kind.String()+":"+c.Type)
			}
			want := []string{"id:numeric:INT64", "score:numeric:FLOAT", "exact:numeric:DOUBLE", "note:categorical:BYTE_ARRAY"}
			if fm == "csv" {
				want = []string{"id:numeric:", "score:numeric:", "exact:numeric:", "note:categorical:"}
			}
			if !slices.Equal(names, want) {
				t.Errorf("columns %v, want %v", names, want)
			}
			files := tbl.Files()
			if len(files) != 1 {
				t.Fatalf("files %+v", files)
			}
			if fm == "parquet" {
				if files[0].Rows != n || !slices.Equal(files[0].RowGroups, []int64{16, 16, 16, 16, 16, 16, 4}) || tbl.Rows() != n {
					t.Errorf("file %+v, table rows %d: want %d rows in row groups of 16", files[0], tbl.Rows(), n)
				}
			} else if files[0].Rows != -1 || tbl.Rows() != -1 {
				t.Errorf("CSV file %+v: rows must be unknown", files[0])
			}
			ids, exact, notes, scores, _ := readAll(t, tbl, 0, 0, -1, 10)
			if len(ids) != n {
				t.Fatalf("read %d rows, wrote %d", len(ids), n)
			}
			for i := range n {
				wantNote := w.s[i]
				if w.null[i] {
					wantNote = "<null>"
				}
				if ids[i] != fmt.Sprint(w.id[i]) || math.Float32bits(scores[i]) != math.Float32bits(w.f32[i]) ||
					exact[i] != fmt.Sprint(w.f64[i]) || notes[i] != wantNote {
					t.Fatalf("row %d: read (%s, %v, %s, %q), wrote (%d, %v, %v, %q)", i, ids[i], scores[i], exact[i], notes[i], w.id[i], w.f32[i], w.f64[i], wantNote)
				}
			}
			// A range across row groups, in batches that a row group cuts.
			ids, _, _, _, sizes := readAll(t, tbl, 0, 13, 57, 8)
			if len(ids) != 44 || ids[0] != fmt.Sprint(w.id[13]) || ids[43] != fmt.Sprint(w.id[56]) {
				t.Errorf("rows [13, 57): %d rows, first %s last %s", len(ids), ids[0], ids[len(ids)-1])
			}
			for _, s := range sizes {
				if s > 8 || s < 1 {
					t.Errorf("batch of %d rows, want 1..8", s)
				}
			}
			// What Open reads agrees: the same scores, in file order.
			sh, err := Open(context.Background(), api.DatasetSpec{URI: dir + "/", Features: []string{"score"}, Shuffle: new(bool), Remainder: "exact"}, ShardOptions{BatchSize: n}, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer sh.Close()
			x := make([]float32, n)
			got, err := sh.Next(context.Background(), x, nil)
			if err != nil || got != n {
				t.Fatalf("Open/Next: %d rows, %v", got, err)
			}
			for i := range n {
				if math.Float32bits(x[i]) != math.Float32bits(w.f32[i]) {
					t.Fatalf("Open: row %d score %v, wrote %v", i, x[i], w.f32[i])
				}
			}
		})
	}
}

// TestTableReadErrors: asking for numbers from a column of strings, rows a
// file does not have, or a column it lacks fails with ErrInvalid naming
// them; an error of fn ends the read with it.
func TestTableReadErrors(t *testing.T) {
	dir := t.TempDir()
	w := newWrittenTable(20)
	w.write(t, filepath.Join(dir, "a.parquet"), "parquet", 8)
	w.write(t, filepath.Join(dir, "b.csv"), "csv", 8)
	ctx := context.Background()
	for _, tt := range []struct {
		file  string
		cols  []format.ColumnInfo
		lo    int64
		hi    int64
		wants []string
	}{
		{"a.parquet", []format.ColumnInfo{{Name: "note", Kind: format.Numeric}}, 0, -1, []string{`column "note"`, "BYTE_ARRAY", "not numbers"}},
		{"b.csv", []format.ColumnInfo{{Name: "note", Kind: format.Numeric}}, 0, -1, []string{`column "note"`, "b.csv"}},
		{"a.parquet", []format.ColumnInfo{{Name: "score", Kind: format.Numeric}}, 0, 21, []string{"rows [0, 21)", "has 20 rows"}},
		{"b.csv", []format.ColumnInfo{{Name: "score", Kind: format.Numeric}}, 0, 21, []string{"rows [0, 21)", "has 20 rows"}},
		{"a.parquet", []format.ColumnInfo{{Name: "nope", Kind: format.Numeric}}, 0, -1, []string{`"nope"`, `"id"`}},
	} {
		tbl, err := format.OpenTable(ctx, api.DatasetSpec{URI: filepath.Join(dir, tt.file)})
		if err != nil {
			t.Fatal(err)
		}
		_, err = tbl.Read(ctx, 0, tt.lo, tt.hi, tt.cols, 4, func(*format.Batch) error { return nil })
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("%s %v: error %v, want ErrInvalid", tt.file, tt.cols, err)
			continue
		}
		for _, s := range tt.wants {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("%s %v: error %q does not say %q", tt.file, tt.cols, err, s)
			}
		}
	}
	tbl, err := format.OpenTable(ctx, api.DatasetSpec{URI: filepath.Join(dir, "a.parquet")})
	if err != nil {
		t.Fatal(err)
	}
	stop := errors.New("stop here")
	calls := 0
	_, err = tbl.Read(ctx, 0, 0, -1, []format.ColumnInfo{{Name: "id", Kind: format.Numeric}}, 3, func(*format.Batch) error { calls++; return stop })
	if !errors.Is(err, stop) || calls != 1 {
		t.Errorf("fn's error: Read returned %v after %d calls", err, calls)
	}
	if _, err := format.OpenTable(ctx, api.DatasetSpec{URI: "fashion-mnist:test"}); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "not a table") {
		t.Errorf("IDX as a table: %v", err)
	}
}

// TestTableDecimalsAndSchemas: a DECIMAL column reads as its decimal text;
// files whose schemas differ fail OpenTable naming both.
func TestTableDecimalsAndSchemas(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "d.parquet")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	pw := parquet.NewGenericWriter[any](f, parquet.NewSchema("t", parquet.Group{"price": parquet.Decimal(2, 10, parquet.Int64Type)}))
	var rows []parquet.Row
	for _, v := range []int64{12345, -5, 0, 100} {
		rows = append(rows, parquet.Row{parquet.Int64Value(v).Level(0, 0, 0)})
	}
	if _, err := pw.WriteRows(rows); err != nil {
		t.Fatal(err)
	}
	if err := pw.Close(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	tbl, err := format.OpenTable(context.Background(), api.DatasetSpec{URI: path})
	if err != nil {
		t.Fatal(err)
	}
	if c := tbl.Columns(); len(c) != 1 || c[0].Type != "DECIMAL" {
		t.Errorf("columns %+v", c)
	}
	var got []string
	var nums []float32
	for _, kind := range []format.Kind{format.Categorical, format.Numeric} {
		_, err = tbl.Read(context.Background(), 0, 0, -1, []format.ColumnInfo{{Name: "price", Kind: kind}}, 10, func(b *format.Batch) error {
			for r := 0; r < b.N; r++ {
				if kind == format.Numeric {
					nums = append(nums, b.Num[0][r])
				} else {
					got = append(got, b.Dicts[0].String(b.Cat[0][r]))
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(got, []string{"123.45", "-0.05", "0.00", "1.00"}) || !slices.Equal(nums, []float32{123.45, -0.05, 0, 1}) {
		t.Errorf("decimals read as %q and %v", got, nums)
	}

	w := newWrittenTable(5)
	w.write(t, filepath.Join(dir, "m", "a.parquet"), "parquet", 8)
	bf, err := os.Create(filepath.Join(dir, "m", "b.parquet"))
	if err != nil {
		t.Fatal(err)
	}
	tw, err := format.NewTableWriter(bf, "parquet", []format.WriteColumn{{Name: "id", Type: format.Int64}, {Name: "score", Type: format.String}, {Name: "exact", Type: format.Float64}, {Name: "note", Type: format.String}}, format.WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := tw.Write(&format.Rows{N: 1, Cols: []format.Values{{I64: []int64{1}}, {Str: []string{"high"}}, {F64: []float64{1}}, {Str: []string{"n"}}}}); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	bf.Close()
	_, err = format.OpenTable(context.Background(), api.DatasetSpec{URI: filepath.Join(dir, "m") + "/"})
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "schemas differ") || !strings.Contains(err.Error(), `"score"`) {
		t.Errorf("differing schemas: %v", err)
	}
}

func TestWriterRejectsMismatchedRows(t *testing.T) {
	cols := []format.WriteColumn{{Name: "a", Type: format.Float32}, {Name: "b", Type: format.String}}
	for _, fm := range []string{"parquet", "csv"} {
		tw, err := format.NewTableWriter(io.Discard, fm, cols, format.WriterOptions{})
		if err != nil {
			t.Fatal(err)
		}
		err = tw.Write(&format.Rows{N: 2, Cols: []format.Values{{F32: []float32{1, 2}}, {Str: []string{"x"}}}})
		if err == nil || !strings.Contains(err.Error(), `column "b"`) {
			t.Errorf("%s: short column: %v", fm, err)
		}
		err = tw.Write(&format.Rows{N: 1, Cols: []format.Values{{F32: []float32{1}, Null: []bool{true}}, {Str: []string{"x"}}}})
		if err == nil || !strings.Contains(err.Error(), `column "a"`) {
			t.Errorf("%s: null in a column that is not nullable: %v", fm, err)
		}
	}
	if _, err := format.NewTableWriter(io.Discard, "json", cols, format.WriterOptions{}); err == nil {
		t.Error("format json accepted")
	}
	if _, err := format.NewTableWriter(io.Discard, "csv", []format.WriteColumn{{Name: "a", Type: format.Int64}, {Name: "a", Type: format.Int64}}, format.WriterOptions{}); err == nil {
		t.Error("a column named twice accepted")
	}
}
