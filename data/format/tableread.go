package format

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/format"

	"github.com/tempotrain/tempotrain/api"
)

// errStop ends a read early: the rows asked for are read.
var errStop = errors.New("stop")

// A Table reads a table dataset (CSV or Parquet, local or S3) file by file
// and row range by row range, in file order, with no ranks, shards,
// shuffling or pipeline: what a batch prediction reads. OpenTable lists the
// files and their schemas (Parquet footers: row groups and row counts; CSV
// headers); Read reads rows [lo, hi) of one file as raw column batches.
//
// A Table is the unit a BatchPredict cuts into shards: a CSV file is one
// shard (its row count is known only once it is read), a Parquet file's
// rows are cut at any row (row groups are read whole or in part).
type Table struct {
	spec    api.DatasetSpec
	format  string
	files   []*fileRef
	info    []TableFile
	cols    []TableColumn
	workers int
}

// TableFile is one file of a Table.
type TableFile struct {
	URI  string `json:"uri"`
	Size int64  `json:"size"`
	// Rows is the file's row count from its footer (Parquet); -1 for CSV.
	Rows int64 `json:"rows"`
	// RowGroups are the row counts of a Parquet file's row groups.
	RowGroups []int64 `json:"row_groups,omitempty"`
}

// TableColumn is one column of a Table, as its first file has it.
type TableColumn struct {
	Name string `json:"name"`
	// Kind is how Open reads the column: from its Parquet type (byte
	// arrays are categorical) or a CSV file's first rows; Categorical when
	// the spec lists it so.
	Kind Kind `json:"kind"`
	// Type is the Parquet type: "BOOLEAN", "INT32", "INT64", "INT96",
	// "FLOAT", "DOUBLE", "BYTE_ARRAY", "FIXED_LEN_BYTE_ARRAY", "DECIMAL", or
	// "GROUP" (nested or repeated: not readable). Empty for CSV.
	Type string `json:"type,omitempty"`
}

// OpenTable lists the files of spec (after api's defaults) and reads their
// schemas: every file must have the first file's columns, of the same kinds
// (CSV: the same header). The spec's Label and Features are ignored (every
// column is listed); its CSV options and Categorical columns apply. Images
// and IDX are not tables. Errors no retry fixes wrap ErrInvalid.
func OpenTable(ctx context.Context, spec api.DatasetSpec) (*Table, error) {
	spec = spec.WithDefaults()
	if err := spec.Validate("dataset"); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if strings.HasPrefix(spec.URI, api.FashionMNISTScheme) || spec.Format == "images" || spec.Format == "idx" {
		return nil, invalidf("%s: format %q is not a table: want csv or parquet", spec.URI, spec.Format)
	}
	files, err := listFiles(ctx, spec.URI, spec.Format)
	if err != nil {
		return nil, err
	}
	fm := spec.Format
	if fm == "" {
		if fm, err = formatOfFiles(spec.URI, files); err != nil {
			return nil, err
		}
		files = slices.DeleteFunc(files, func(f *fileRef) bool { return !keepExt(f.rel, fm) })
	}
	if fm != "csv" && fm != "parquet" {
		return nil, invalidf("%s: format %q is not a table: want csv or parquet", spec.URI, fm)
	}
	spec.Format = fm
	t := &Table{spec: spec, format: fm, files: files, workers: runtime.GOMAXPROCS(0)}
	all := spec
	all.Label, all.Features = "", nil
	if fm == "csv" {
		src, err := openCSV(ctx, all, Options{Workers: t.workers}, files)
		if err != nil {
			return nil, err
		}
		for _, sl := range src.Slots() {
			t.cols = append(t.cols, TableColumn{Name: sl.Name, Kind: sl.Kind})
		}
		for _, f := range files {
			t.info = append(t.info, TableFile{URI: f.uri, Size: f.size, Rows: -1})
		}
		return t, nil
	}
	if err := t.readFooters(ctx); err != nil {
		return nil, err
	}
	return t, nil
}

// readFooters lists every Parquet file's columns and row groups.
func (t *Table) readFooters(ctx context.Context) error {
	ps := &pqSource{files: t.files, open: map[int]*pqOpen{}}
	var firstKinds map[string]Kind
	for i, f := range t.files {
		pf, closer, err := ps.openFile(ctx, i)
		if err != nil {
			return err
		}
		names, kinds, leaves := pqColumns(pf)
		tf := TableFile{URI: f.uri, Size: f.size}
		for _, g := range pf.RowGroups() {
			tf.RowGroups = append(tf.RowGroups, g.NumRows())
			tf.Rows += g.NumRows()
		}
		closer()
		for k, n := range names {
			if slices.Contains(t.spec.Categorical, n) {
				kinds[k] = Categorical
			}
		}
		if i == 0 {
			firstKinds = map[string]Kind{}
			for k, n := range names {
				if _, dup := firstKinds[n]; dup {
					return invalidf("%s: column %q appears twice", f.uri, n)
				}
				firstKinds[n] = kinds[k]
				t.cols = append(t.cols, TableColumn{Name: n, Kind: kinds[k], Type: pqTypeName(leaves[k])})
			}
			for _, c := range t.spec.Categorical {
				if _, ok := firstKinds[c]; !ok {
					return invalidf("%s: no categorical column %q; the columns there are %s", f.uri, c, listColumns(names))
				}
			}
		} else {
			for _, c := range t.cols {
				k := slices.Index(names, c.Name)
				if k < 0 {
					return invalidf("schemas differ: %s has column %q, %s has not (its columns are %s)", t.files[0].uri, c.Name, f.uri, listColumns(names))
				}
				if kinds[k] != c.Kind {
					return invalidf("schemas differ: column %q is %s in %s, %s in %s", c.Name, c.Kind, t.files[0].uri, kinds[k], f.uri)
				}
			}
		}
		t.info = append(t.info, tf)
	}
	return nil
}

// pqTypeName names a column's type as TableColumn.Type does.
func pqTypeName(c *parquet.Column) string {
	if !c.Leaf() || c.MaxRepetitionLevel() > 0 {
		return "GROUP"
	}
	if lt := c.Type().LogicalType(); lt != nil {
		if _, ok := lt.Value.(*format.DecimalType); ok {
			return "DECIMAL"
		}
	}
	return c.Type().Kind().String()
}

// Format is "csv" or "parquet".
func (t *Table) Format() string { return t.format }

// Files are the table's files, in order.
func (t *Table) Files() []TableFile { return slices.Clone(t.info) }

// Columns are the columns of the table's first file, in order.
func (t *Table) Columns() []TableColumn { return slices.Clone(t.cols) }

// Rows is the table's row count, -1 when unknown (CSV).
func (t *Table) Rows() int64 {
	var n int64
	for _, f := range t.info {
		if f.Rows < 0 {
			return -1
		}
		n += f.Rows
	}
	return n
}

// Read calls fn with rows [lo, hi) of file i (hi < 0: to the file's end),
// in order, in batches of at most batchRows rows that hold the columns cols
// in that order. A Numeric column must hold numbers: a Parquet column of
// strings is an error naming it, a CSV value that does not parse a
// ParseError. A Categorical column gives any column's values as text:
// numbers as strconv formats them (exactly: an INT64 id is its digits, a
// DOUBLE the shortest text that reads back as it), decimals with their
// point, booleans "true" and "false"; a missing value is code -1. A batch
// (its columns and dictionaries) is valid until fn returns. It returns the
// number of rows read. Errors no retry fixes wrap ErrInvalid.
func (t *Table) Read(ctx context.Context, i int, lo, hi int64, cols []ColumnInfo, batchRows int, fn func(*Batch) error) (int64, error) {
	if i < 0 || i >= len(t.files) {
		return 0, fmt.Errorf("data: table %s has %d files, no file %d", t.spec.URI, len(t.files), i)
	}
	if batchRows < 1 || len(cols) == 0 || lo < 0 || hi >= 0 && hi < lo {
		return 0, fmt.Errorf("data: read %s: rows [%d, %d), %d columns, batches of %d", t.files[i].uri, lo, hi, len(cols), batchRows)
	}
	spec := t.spec
	spec.Label, spec.Features, spec.Categorical = "", nil, nil
	for _, c := range cols {
		spec.Features = append(spec.Features, c.Name)
		if c.Kind == Categorical {
			spec.Categorical = append(spec.Categorical, c.Name)
		}
	}
	opt := Options{Workers: t.workers}
	f := t.files[i : i+1]
	r := &tableReader{cols: cols, batchRows: batchRows, fn: fn, lo: lo, hi: hi}
	if t.format == "csv" {
		src, err := openCSV(ctx, spec, opt, f)
		if err != nil {
			return 0, err
		}
		cs := src.(*csvSource)
		// The kinds asked for win over this file's inference: a column
		// asked for as numbers and holding something else is a ParseError
		// naming the value.
		for j := range cs.slotsv {
			cs.slotsv[j].Kind = cols[j].Kind
		}
		cs.parsers[0] = newCSVParser(cs.d, f[0].uri, len(cs.names), cs.slotsv, cs.fields, cs.parsers[0].rowBytes)
		rc, err := cs.openData(ctx, 0)
		if err != nil {
			return 0, err
		}
		defer rc.Close()
		err = cs.parsers[0].parseStream(ctx, rc, cs.line[0], nil, t.workers, 1<<20, r.block)
		if err == errStop {
			err = nil
		}
		if err == nil && hi >= 0 && r.at < hi {
			err = invalidf("%s: rows [%d, %d) asked for, the file has %d rows: did it change?", f[0].uri, lo, hi, r.at)
		}
		return r.rows, err
	}
	src, err := openParquet(ctx, spec, opt, f)
	if err != nil {
		return 0, err
	}
	ps := src.(*pqSource)
	defer ps.Close()
	for j, sl := range ps.slotsv {
		if cols[j].Kind == Numeric && sl.Kind == Categorical {
			return 0, invalidf("%s: column %q holds %s values, not numbers", f[0].uri, sl.Name, ps.metas[0].cols[j].kind)
		}
		if cols[j].Kind == Categorical && ps.metas[0].cols[j].scale > 0 {
			r.scales = append(r.scales, decimalCol{j, ps.metas[0].cols[j].scale})
		}
	}
	rgRows := ps.metas[0].rgRows
	var total int64
	for _, n := range rgRows {
		total += n
	}
	if hi < 0 {
		hi = total
		r.hi = hi
	}
	if hi > total {
		return 0, invalidf("%s: rows [%d, %d) asked for, the file has %d rows: did it change?", f[0].uri, lo, hi, total)
	}
	// A read holds a chunk of rows: an eighth of the memory budget, whole
	// batches.
	rowBytes := int64(4*len(cols) + 8)
	chunk := max(int64(batchRows), int64(t.spec.MemoryBudgetMiB)<<20/8/rowBytes)
	chunk -= chunk % int64(batchRows)
	var start int64
	for g, n := range rgRows {
		a, b := max(lo, start), min(hi, start+n)
		for x := a; x < b; x += chunk {
			y := min(b, x+chunk)
			blk, err := ps.read(ctx, pqUnit{file: 0, rg: g, lo: x - start, hi: y - start}, nil)
			if err != nil {
				return r.rows, err
			}
			r.at = x // rows before the chunk are not in it
			if err := r.block(blk); err != nil {
				return r.rows, err
			}
		}
		start += n
	}
	return r.rows, nil
}

// tableReader turns a file's blocks into the batches of a Read.
type tableReader struct {
	cols      []ColumnInfo
	batchRows int
	fn        func(*Batch) error
	lo, hi    int64 // rows of the file wanted (hi < 0: all from lo)
	at        int64 // the file's row of the next block's first row
	rows      int64 // rows handed to fn
	scales    []decimalCol
	scratch   []int32
}

type decimalCol struct{ j, scale int }

// block hands the rows of b within [lo, hi) to fn, batch by batch.
func (r *tableReader) block(b *Block) error {
	from, to := r.at, r.at+int64(b.N)
	r.at = to
	a, z := max(from, r.lo), to
	if r.hi >= 0 {
		z = min(to, r.hi)
	}
	if a >= z {
		if r.hi >= 0 && from >= r.hi {
			return errStop
		}
		return nil
	}
	dicts := make([]*Dict, len(r.cols))
	for j, c := range r.cols {
		if c.Kind == Categorical {
			dicts[j] = NewDict()
		}
	}
	r.scratch = b.MergeDicts(dicts, r.scratch)
	for _, d := range r.scales {
		dicts[d.j] = scaleDict(dicts[d.j], d.scale)
	}
	for k := a - from; k < z-from; k += int64(r.batchRows) {
		m := min(int64(r.batchRows), z-from-k)
		bt := &Batch{Columns: r.cols, N: int(m), Num: make([][]float32, len(r.cols)), Cat: make([][]int32, len(r.cols)), Dicts: dicts}
		for j := range r.cols {
			if b.Num[j] != nil {
				bt.Num[j] = b.Num[j][k : k+m : k+m]
			}
			if b.Cat[j] != nil {
				bt.Cat[j] = b.Cat[j][k : k+m : k+m]
			}
		}
		if err := r.fn(bt); err != nil {
			return err
		}
		r.rows += m
	}
	return nil
}

// scaleDict rewrites a DECIMAL column's unscaled integers ("12345") as
// decimals ("123.45"), code for code.
func scaleDict(d *Dict, scale int) *Dict {
	out := NewDict()
	for c := range d.Len() {
		out.Code(decimalText(d.String(int32(c)), scale))
	}
	return out
}

// decimalText places the point scale digits from the right of an integer.
func decimalText(s string, scale int) string {
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	if len(s) <= scale {
		s = strings.Repeat("0", scale-len(s)+1) + s
	}
	s = s[:len(s)-scale] + "." + s[len(s)-scale:]
	if neg {
		s = "-" + s
	}
	return s
}
