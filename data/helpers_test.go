package data

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"

	"github.com/tempotrain/tempotrain/api"
)

// testTable is a small table with a row id, so that a batch says which rows
// it holds: id (numeric, = row number), x (numeric, some missing), city
// (categorical, some missing), y (label, 3 classes).
type testTable struct {
	n    int
	x    []float64 // NaN: missing
	city []string  // "": missing
	y    []int
}

func newTestTable(n int) *testTable {
	t := &testTable{n: n}
	cities := []string{"paris", "rome", "new york, ny", "oslo", `say "hi"`}
	for i := range n {
		x := float64((i*7919)%1000)/8 - 40
		if i%17 == 5 {
			x = math.NaN()
		}
		c := cities[(i*31)%len(cities)]
		if i%23 == 7 {
			c = ""
		}
		t.x = append(t.x, x)
		t.city = append(t.city, c)
		t.y = append(t.y, (i*13)%3)
	}
	return t
}

// csvQuote quotes a field when it needs it.
func csvQuote(s string) string {
	if strings.ContainsAny(s, ",\"\n\r") {
		return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
	}
	return s
}

// writeCSV writes rows [lo, hi) of t; eol is "\n" or "\r\n".
func (t *testTable) writeCSV(tb testing.TB, path string, lo, hi int, eol string) {
	tb.Helper()
	var b strings.Builder
	b.WriteString("id,x,city,y" + eol)
	for i := lo; i < hi; i++ {
		x := "NA"
		if !math.IsNaN(t.x[i]) {
			x = strconv.FormatFloat(t.x[i], 'g', -1, 64)
		}
		fmt.Fprintf(&b, "%d,%s,%s,%d%s", i, x, csvQuote(t.city[i]), t.y[i], eol)
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		tb.Fatal(err)
	}
}

// writeParquet writes rows [lo, hi) of t in row groups of rg rows; x and
// city are optional (nulls where missing).
func (t *testTable) writeParquet(tb testing.TB, path string, lo, hi, rg int) {
	tb.Helper()
	schema := parquet.NewSchema("t", parquet.Group{
		"id":   parquet.Int(64),
		"x":    parquet.Optional(parquet.Leaf(parquet.DoubleType)),
		"city": parquet.Optional(parquet.Encoded(parquet.String(), &parquet.RLEDictionary)),
		"y":    parquet.Int(32),
	})
	f, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	w := parquet.NewGenericWriter[any](f, schema, parquet.MaxRowsPerRowGroup(int64(rg)), parquet.PageBufferSize(2048))
	leaf := map[string]int{}
	for i, p := range schema.Columns() {
		leaf[p[0]] = i
	}
	var rows []parquet.Row
	for i := lo; i < hi; i++ {
		row := make(parquet.Row, 4)
		row[leaf["id"]] = parquet.Int64Value(int64(i)).Level(0, 0, leaf["id"])
		if math.IsNaN(t.x[i]) {
			row[leaf["x"]] = parquet.NullValue().Level(0, 0, leaf["x"])
		} else {
			row[leaf["x"]] = parquet.DoubleValue(t.x[i]).Level(0, 1, leaf["x"])
		}
		if t.city[i] == "" {
			row[leaf["city"]] = parquet.NullValue().Level(0, 0, leaf["city"])
		} else {
			row[leaf["city"]] = parquet.ByteArrayValue([]byte(t.city[i])).Level(0, 1, leaf["city"])
		}
		row[leaf["y"]] = parquet.Int32Value(int32(t.y[i])).Level(0, 0, leaf["y"])
		rows = append(rows, row)
	}
	if _, err := w.WriteRows(rows); err != nil {
		tb.Fatal(err)
	}
	if err := w.Close(); err != nil {
		tb.Fatal(err)
	}
}

// writeFiles writes t split over files of the format into dir and returns
// the glob matching them.
func (t *testTable) writeFiles(tb testing.TB, dir, format string, files, rg int) string {
	tb.Helper()
	for f := range files {
		lo, hi := share(int64(t.n), f, files)
		switch format {
		case "csv":
			t.writeCSV(tb, filepath.Join(dir, fmt.Sprintf("part-%02d.csv", f)), int(lo), int(hi), "\n")
		case "parquet":
			t.writeParquet(tb, filepath.Join(dir, fmt.Sprintf("part-%02d.parquet", f)), int(lo), int(hi), rg)
		}
	}
	return filepath.Join(dir, "part-*."+format)
}

// epochRows runs one epoch of a shard and returns the row ids (column id,
// feature 0) it yielded, and the raw bytes of every batch.
func epochRows(tb testing.TB, s *Shard) ([]int, [][]byte) {
	tb.Helper()
	var ids []int
	var batches [][]byte
	x := make([]float32, s.BatchSize()*s.Width())
	y := make([]float32, s.BatchSize())
	for {
		n, err := s.Next(context.Background(), x, y)
		if errors.Is(err, io.EOF) {
			return ids, batches
		}
		if err != nil {
			tb.Fatal(err)
		}
		w := s.Width()
		for i := range n {
			ids = append(ids, int(x[i*w]))
		}
		batches = append(batches, floatBytes(x[:n*w], y[:n]))
	}
}

func floatBytes(xs ...[]float32) []byte {
	var b []byte
	for _, x := range xs {
		for _, v := range x {
			b = strconv.AppendUint(b, uint64(math.Float32bits(v)), 16)
			b = append(b, ' ')
		}
		b = append(b, '|')
	}
	return b
}

// idOnly is a spec reading only the id feature and the label.
func idOnly(uri string) api.DatasetSpec {
	return api.DatasetSpec{URI: uri, Label: "y", Features: []string{"id"}, Task: "regression"}
}

func mustOpen(tb testing.TB, spec api.DatasetSpec, opt ShardOptions, comm Comm) *Shard {
	tb.Helper()
	s, err := Open(context.Background(), spec, opt, comm)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

func wantErr(tb testing.TB, err error, invalid bool, parts ...string) {
	tb.Helper()
	if err == nil {
		tb.Fatalf("no error, want one saying %q", parts)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			tb.Errorf("error %q does not say %q", err, p)
		}
	}
	if errors.Is(err, ErrInvalid) != invalid {
		tb.Errorf("errors.Is(%q, ErrInvalid) = %v, want %v", err, !invalid, invalid)
	}
}

func mkdir(d string) error { return os.MkdirAll(d, 0o755) }
