package format

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"strconv"
	"strings"
	"unsafe"

	"github.com/parquet-go/parquet-go"
)

// ColumnType is the type of a column a TableWriter writes.
type ColumnType uint8

// Column types.
const (
	Float32 ColumnType = iota + 1
	Float64
	Int64
	String
)

var columnTypeNames = map[ColumnType]string{Float32: "float32", Float64: "float64", Int64: "int64", String: "string"}

func (t ColumnType) String() string {
	if n, ok := columnTypeNames[t]; ok {
		return n
	}
	return fmt.Sprintf("ColumnType(%d)", int(t))
}

// ParseColumnType reads "float32", "float64", "int64" or "string".
func ParseColumnType(s string) (ColumnType, error) {
	for t, n := range columnTypeNames {
		if n == s {
			return t, nil
		}
	}
	return 0, fmt.Errorf("column type %q: want float32, float64, int64 or string", s)
}

// WriteColumn declares one column of a written table.
type WriteColumn struct {
	Name string
	Type ColumnType
	// Nullable columns may hold missing values (Values.Null).
	Nullable bool
}

// Rows are rows to write, column by column: Cols[j] holds column j's N
// values in the slice of its type.
type Rows struct {
	N    int
	Cols []Values
}

// Values are one column's values in Rows: F32, F64, I64 or Str, as the
// column's type says. Null, when not nil, marks missing values (a nullable
// column only).
type Values struct {
	F32  []float32
	F64  []float64
	I64  []int64
	Str  []string
	Null []bool
}

// TableWriter streams rows to an io.Writer as a table file. It is used by
// one goroutine.
type TableWriter interface {
	// Write appends rows.
	Write(r *Rows) error
	// Close writes what is buffered and the file's footer. It does not
	// close the io.Writer.
	Close() error
	// Rows counts the rows written.
	Rows() int64
}

// WriterOptions configure a TableWriter. Every field documents its default.
type WriterOptions struct {
	// RowGroupRows bounds the rows of a Parquet row group. Default 65536.
	RowGroupRows int64
}

// NewTableWriter returns a writer of format "parquet" (Snappy-compressed
// columns, nullable ones optional, in the order of cols) or "csv" (a header
// line; comma-separated; a field quoted when it holds a comma, a quote or a
// line break; a missing value empty; numbers as strconv formats them, so
// that they read back exactly). What it writes reads back with Open and
// OpenTable: float32 and float64 columns as numbers, int64 as numbers
// (float32: exact up to 2^24) or, asked for as Categorical, as their exact
// digits, strings as categorical.
func NewTableWriter(w io.Writer, format string, cols []WriteColumn, o WriterOptions) (TableWriter, error) {
	if len(cols) == 0 {
		return nil, errors.New("data: a table needs a column")
	}
	seen := map[string]bool{}
	for _, c := range cols {
		if c.Name == "" || seen[c.Name] {
			return nil, fmt.Errorf("data: column name %q empty or used twice", c.Name)
		}
		seen[c.Name] = true
		if _, ok := columnTypeNames[c.Type]; !ok {
			return nil, fmt.Errorf("data: column %q: %v", c.Name, c.Type)
		}
	}
	if o.RowGroupRows <= 0 {
		o.RowGroupRows = 65536
	}
	switch format {
	case "parquet":
		return newParquetWriter(w, cols, o), nil
	case "csv":
		return newCSVWriter(w, cols)
	}
	return nil, fmt.Errorf("data: write format %q: want parquet or csv", format)
}

// check says whether r fits cols.
func checkRows(cols []WriteColumn, r *Rows) error {
	if len(r.Cols) != len(cols) {
		return fmt.Errorf("data: %d columns of values for %d columns", len(r.Cols), len(cols))
	}
	for j, c := range cols {
		v := r.Cols[j]
		n := -1
		switch c.Type {
		case Float32:
			n = len(v.F32)
		case Float64:
			n = len(v.F64)
		case Int64:
			n = len(v.I64)
		case String:
			n = len(v.Str)
		}
		if n != r.N {
			return fmt.Errorf("data: column %q (%s): %d values for %d rows", c.Name, c.Type, n, r.N)
		}
		if v.Null != nil && (len(v.Null) != r.N || !c.Nullable) {
			return fmt.Errorf("data: column %q: %d nulls for %d rows (nullable %v)", c.Name, len(v.Null), r.N, c.Nullable)
		}
	}
	return nil
}

// orderedGroup is a Parquet group whose fields keep the order given
// (parquet.Group sorts them by name).
type orderedGroup struct {
	parquet.Group
	fields []parquet.Field
}

func (g *orderedGroup) Fields() []parquet.Field { return g.fields }

type namedField struct {
	parquet.Node
	name string
}

func (f *namedField) Name() string { return f.name }

// Value is not used: rows are written as values, not Go structs.
func (f *namedField) Value(base reflect.Value) reflect.Value { return base }

type parquetWriter struct {
	cols []WriteColumn
	pw   *parquet.GenericWriter[any]
	rows []parquet.Row
	n    int64
}

func newParquetWriter(w io.Writer, cols []WriteColumn, o WriterOptions) *parquetWriter {
	g := &orderedGroup{Group: parquet.Group{}}
	for _, c := range cols {
		var n parquet.Node
		switch c.Type {
		case Float32:
			n = parquet.Leaf(parquet.FloatType)
		case Float64:
			n = parquet.Leaf(parquet.DoubleType)
		case Int64:
			n = parquet.Int(64)
		case String:
			n = parquet.Encoded(parquet.String(), &parquet.RLEDictionary)
		}
		n = parquet.Compressed(n, &parquet.Snappy)
		if c.Nullable {
			n = parquet.Optional(n)
		}
		g.Group[c.Name] = n
		g.fields = append(g.fields, &namedField{Node: n, name: c.Name})
	}
	schema := parquet.NewSchema("table", g)
	return &parquetWriter{cols: cols, pw: parquet.NewGenericWriter[any](w, schema, parquet.MaxRowsPerRowGroup(o.RowGroupRows))}
}

func (p *parquetWriter) Rows() int64 { return p.n }

func (p *parquetWriter) Write(r *Rows) error {
	if err := checkRows(p.cols, r); err != nil {
		return err
	}
	if cap(p.rows) < r.N {
		p.rows = make([]parquet.Row, r.N)
	}
	rows := p.rows[:r.N]
	for i := range rows {
		row := rows[i][:0]
		for j, c := range p.cols {
			v := r.Cols[j]
			def := 0
			if c.Nullable {
				def = 1
			}
			if v.Null != nil && v.Null[i] {
				row = append(row, parquet.NullValue().Level(0, 0, j))
				continue
			}
			var x parquet.Value
			switch c.Type {
			case Float32:
				x = parquet.FloatValue(v.F32[i])
			case Float64:
				x = parquet.DoubleValue(v.F64[i])
			case Int64:
				x = parquet.Int64Value(v.I64[i])
			case String:
				s := v.Str[i]
				x = parquet.ByteArrayValue(unsafe.Slice(unsafe.StringData(s), len(s)))
			}
			row = append(row, x.Level(0, def, j))
		}
		rows[i] = row
	}
	if _, err := p.pw.WriteRows(rows); err != nil {
		return fmt.Errorf("data: write parquet rows: %w", err)
	}
	p.n += int64(r.N)
	return nil
}

func (p *parquetWriter) Close() error {
	if err := p.pw.Close(); err != nil {
		return fmt.Errorf("data: close parquet writer: %w", err)
	}
	return nil
}

type csvWriter struct {
	cols []WriteColumn
	w    *bufio.Writer
	line []byte
	n    int64
}

func newCSVWriter(w io.Writer, cols []WriteColumn) (*csvWriter, error) {
	c := &csvWriter{cols: cols, w: bufio.NewWriterSize(w, 1<<20)}
	for j, col := range cols {
		if j > 0 {
			c.line = append(c.line, ',')
		}
		c.line = appendCSVField(c.line, col.Name)
	}
	c.line = append(c.line, '\n')
	if _, err := c.w.Write(c.line); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *csvWriter) Rows() int64 { return c.n }

func (c *csvWriter) Write(r *Rows) error {
	if err := checkRows(c.cols, r); err != nil {
		return err
	}
	for i := 0; i < r.N; i++ {
		line := c.line[:0]
		for j, col := range c.cols {
			if j > 0 {
				line = append(line, ',')
			}
			v := r.Cols[j]
			if v.Null != nil && v.Null[i] {
				continue
			}
			switch col.Type {
			case Float32:
				line = appendCSVFloat(line, float64(v.F32[i]), 32)
			case Float64:
				line = appendCSVFloat(line, v.F64[i], 64)
			case Int64:
				line = strconv.AppendInt(line, v.I64[i], 10)
			case String:
				line = appendCSVField(line, v.Str[i])
			}
		}
		line = append(line, '\n')
		c.line = line
		if _, err := c.w.Write(line); err != nil {
			return err
		}
	}
	c.n += int64(r.N)
	return nil
}

// appendCSVFloat writes NaN as "NaN" (a missing value to readers) and
// infinities as "+Inf" and "-Inf", which strconv reads back.
func appendCSVFloat(b []byte, v float64, bits int) []byte {
	if math.IsNaN(v) {
		return append(b, "NaN"...)
	}
	return strconv.AppendFloat(b, v, 'g', -1, bits)
}

// appendCSVField quotes a field that holds a comma, a quote or a line
// break, or that starts or ends with a space, and an empty string (as "",
// where a missing value is nothing at all).
func appendCSVField(b []byte, s string) []byte {
	if s != "" && !strings.ContainsAny(s, ",\"\r\n") && s[0] != ' ' && s[len(s)-1] != ' ' {
		return append(b, s...)
	}
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		if s[i] == '"' {
			b = append(b, '"')
		}
		b = append(b, s[i])
	}
	return append(b, '"')
}

func (c *csvWriter) Close() error { return c.w.Flush() }
