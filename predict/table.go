package predict

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/tempotrain/tempotrain/data/format"
)

// TableMap turns the rows of a table into a Predictor's inputs, and its
// outputs (with columns of the input passed through) into the rows of an
// output table: what BatchPredict does to every batch of a dataset.
//
// A model takes a table's rows in one of two ways, told apart by its
// Metadata:
//
//   - one input per column (a table model): every input is named after a
//     column, of shape [-1] or [-1, 1]; an FP32 input reads a numeric
//     column (NaN where a value is missing), a BYTES input any column as
//     text ("" where missing), an INT64 input a column of integers;
//   - one FP32 input whose name is no column (the image classifiers'
//     "pixels" [-1, 1, 28, 28]): a row's feature columns, in order, packed
//     into one tensor; their count must be the input's per-row size (784).
//
// Outputs become columns: an output of shape [-1] one column named after
// it, one of shape [-1, d1, ...] d1·... columns "{output}_0", "{output}_1",
// ... (row-major); FP32 outputs are float32 columns, INT64 int64, BYTES
// string. Pass-through columns come first, read as their exact text and
// written with their type (Parquet integers as int64, FLOAT as float32,
// DOUBLE and DECIMAL as float64, others and every CSV column as string), or
// as the float32 the model reads when a column is also a model input.
type TableMap struct {
	md      Metadata
	read    []format.ColumnInfo
	packed  bool
	inputs  []tableInput
	pass    []passColumn
	outs    []tableOutput
	columns []format.WriteColumn
	sources []string
}

type tableInput struct {
	spec  TensorSpec
	cols  []int // columns of the batch (indexes of read)
	shape []int // the tensor's shape after the batch dimension
}

type passColumn struct {
	name string
	col  int
	typ  format.ColumnType
}

type tableOutput struct {
	spec  TensorSpec
	width int
}

// TableOptions say which columns a TableMap reads and writes.
type TableOptions struct {
	// Features are the columns packed into a single input, in order.
	// Default: every column but Exclude's and PassThrough's. Not used by a
	// model that takes one input per column.
	Features []string
	// Exclude are columns that are never features (a label). Default none.
	Exclude []string
	// PassThrough columns are copied into the output, first. Default none.
	PassThrough []string
	// Outputs are the model outputs written, in the model's order. Default
	// all.
	Outputs []string
}

// MapTable matches the columns of a table (format.Table.Columns) to md's
// inputs and outputs. A table that does not fit the model, a pass-through
// column or output that does not exist, or output columns whose names
// clash, are ErrInvalidInput naming the column, the input or the output.
func MapTable(md Metadata, cols []format.TableColumn, o TableOptions) (*TableMap, error) {
	m := &TableMap{md: md}
	byName := make(map[string]format.TableColumn, len(cols))
	var names []string
	for _, c := range cols {
		byName[c.Name] = c
		names = append(names, c.Name)
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidInput}, args...)...)
	}
	if len(md.Inputs) == 0 {
		return nil, bad("model %s takes no input", md.Name)
	}
	// read adds a column to read as kind, or finds it there.
	read := func(name string, kind format.Kind) int {
		for j, c := range m.read {
			if c.Name == name && c.Kind == kind {
				return j
			}
		}
		m.read = append(m.read, format.ColumnInfo{Name: name, Kind: kind})
		return len(m.read) - 1
	}
	_, isColumn := byName[md.Inputs[0].Name]
	m.packed = len(md.Inputs) == 1 && !isColumn
	if m.packed {
		in := md.Inputs[0]
		features := o.Features
		if len(features) == 0 {
			for _, n := range names {
				if !slices.Contains(o.Exclude, n) && !slices.Contains(o.PassThrough, n) {
					features = append(features, n)
				}
			}
		}
		if in.Datatype != FP32 {
			return nil, bad("model %s takes input %q %s%v, which is no column of the dataset (its columns are %s)", md.Name, in.Name, in.Datatype, in.Shape, listNames(names))
		}
		shape, err := packedShape(in, len(features))
		if err != nil {
			return nil, bad("model %s takes input %q: %s values per row (shape %v); the dataset has %d feature columns (%s): name the ones the model was trained on in dataset.features, or pass the others through", md.Name, in.Name, err.per, in.Shape, len(features), listNames(features))
		}
		ti := tableInput{spec: in, shape: shape}
		for _, f := range features {
			c, ok := byName[f]
			switch {
			case !ok:
				return nil, bad("feature column %q is not in the dataset (its columns are %s)", f, listNames(names))
			case c.Kind != format.Numeric:
				return nil, bad("feature column %q holds %s, not numbers: model %s packs every feature into its FP32 input %q", f, kindWords(c), md.Name, in.Name)
			}
			ti.cols = append(ti.cols, read(f, format.Numeric))
		}
		m.inputs = append(m.inputs, ti)
	} else {
		for _, in := range md.Inputs {
			c, ok := byName[in.Name]
			if !ok {
				return nil, bad("model %s takes column %q (input %q %s%v), which the dataset lacks (its columns are %s)", md.Name, in.Name, in.Name, in.Datatype, in.Shape, listNames(names))
			}
			if !slices.Equal(in.Shape, []int{-1}) && !slices.Equal(in.Shape, []int{-1, 1}) {
				return nil, bad("model %s's input %q has shape %v: a column gives one value per row ([-1] or [-1 1])", md.Name, in.Name, in.Shape)
			}
			ti := tableInput{spec: in, shape: in.Shape[1:]}
			switch in.Datatype {
			case FP32:
				if c.Kind != format.Numeric {
					return nil, bad("column %q holds %s; model %s's input %q takes FP32 numbers", c.Name, kindWords(c), md.Name, in.Name)
				}
				ti.cols = []int{read(c.Name, format.Numeric)}
			case BYTES, INT64:
				ti.cols = []int{read(c.Name, format.Categorical)}
			default:
				return nil, bad("model %s's input %q has datatype %s: a column gives FP32, INT64 or BYTES", md.Name, in.Name, in.Datatype)
			}
			m.inputs = append(m.inputs, ti)
		}
	}
	used := map[string]string{}
	addColumn := func(wc format.WriteColumn, source string) error {
		if prev, dup := used[wc.Name]; dup {
			return bad("output column %q comes from %s and from %s: rename one (pass_through, outputs)", wc.Name, prev, source)
		}
		used[wc.Name] = source
		m.columns = append(m.columns, wc)
		m.sources = append(m.sources, source)
		return nil
	}
	for _, p := range o.PassThrough {
		c, ok := byName[p]
		if !ok {
			return nil, bad("pass_through column %q is not in the dataset (its columns are %s)", p, listNames(names))
		}
		if c.Type == "GROUP" {
			return nil, bad("pass_through column %q is nested or repeated: only flat columns pass through", p)
		}
		pc := passColumn{name: p}
		// A column the model reads as numbers passes as those numbers.
		if j := slices.IndexFunc(m.read, func(r format.ColumnInfo) bool { return r.Name == p && r.Kind == format.Numeric }); j >= 0 {
			pc.col, pc.typ = j, format.Float32
		} else {
			pc.col, pc.typ = read(p, format.Categorical), passType(c.Type)
		}
		m.pass = append(m.pass, pc)
		if err := addColumn(format.WriteColumn{Name: p, Type: pc.typ, Nullable: true}, "pass_through"); err != nil {
			return nil, err
		}
	}
	var outNames []string
	for _, s := range md.Outputs {
		outNames = append(outNames, s.Name)
	}
	for _, want := range o.Outputs {
		if !slices.Contains(outNames, want) {
			return nil, bad("model %s has no output %q (its outputs are %s)", md.Name, want, listNames(outNames))
		}
	}
	for _, s := range md.Outputs {
		if len(o.Outputs) > 0 && !slices.Contains(o.Outputs, s.Name) {
			continue
		}
		typ, ok := map[string]format.ColumnType{FP32: format.Float32, INT64: format.Int64, BYTES: format.String}[s.Datatype]
		if !ok {
			return nil, bad("model %s's output %q has datatype %s, which no column type holds", md.Name, s.Name, s.Datatype)
		}
		width := 1
		for _, d := range s.Shape[min(1, len(s.Shape)):] {
			if d < 1 {
				return nil, bad("model %s's output %q has shape %v: a size that varies cannot become columns", md.Name, s.Name, s.Shape)
			}
			width *= d
		}
		if len(s.Shape) == 0 || s.Shape[0] != -1 {
			return nil, bad("model %s's output %q has shape %v: its first dimension must be the batch (-1)", md.Name, s.Name, s.Shape)
		}
		m.outs = append(m.outs, tableOutput{spec: s, width: width})
		for i := range width {
			name := s.Name
			if len(s.Shape) > 1 {
				name = fmt.Sprintf("%s_%d", s.Name, i)
			}
			if err := addColumn(format.WriteColumn{Name: name, Type: typ}, "output "+strconv.Quote(s.Name)); err != nil {
				return nil, err
			}
		}
	}
	if len(m.outs) == 0 {
		return nil, bad("model %s: no output to write", md.Name)
	}
	return m, nil
}

// packedErr says how many values per row a packed input takes.
type packedErr struct{ per string }

// packedShape is the shape after the batch dimension of a packed input of
// n values per row: the input's, with one -1 filled in.
func packedShape(in TensorSpec, n int) ([]int, *packedErr) {
	if len(in.Shape) < 2 || in.Shape[0] != -1 {
		return nil, &packedErr{per: fmt.Sprint(in.Shape)}
	}
	shape := slices.Clone(in.Shape[1:])
	fixed, free := 1, -1
	for i, d := range shape {
		switch {
		case d == -1 && free < 0:
			free = i
		case d < 1:
			return nil, &packedErr{per: "an unknown number of"}
		default:
			fixed *= d
		}
	}
	if free >= 0 {
		if n == 0 || n%fixed != 0 {
			return nil, &packedErr{per: fmt.Sprintf("a multiple of %d", fixed)}
		}
		shape[free] = n / fixed
		return shape, nil
	}
	if fixed != n {
		return nil, &packedErr{per: strconv.Itoa(fixed)}
	}
	return shape, nil
}

// passType is the output type of a column passed through as text.
func passType(parquetType string) format.ColumnType {
	switch parquetType {
	case "INT32", "INT64":
		return format.Int64
	case "FLOAT":
		return format.Float32
	case "DOUBLE", "DECIMAL":
		return format.Float64
	}
	return format.String
}

func kindWords(c format.TableColumn) string {
	if c.Type != "" {
		return "values of type " + c.Type
	}
	return "text"
}

func listNames(n []string) string {
	if len(n) > 12 {
		return fmt.Sprintf("%q ... (%d in all)", n[:12], len(n))
	}
	return fmt.Sprintf("%q", n)
}

// ReadColumns are the columns to read from the table (format.Table.Read),
// with the kind each is read as; the batches given to Inputs and Rows
// hold them in this order.
func (m *TableMap) ReadColumns() []format.ColumnInfo { return slices.Clone(m.read) }

// Columns are the output table's columns: pass-through columns, then the
// outputs'.
func (m *TableMap) Columns() []format.WriteColumn { return slices.Clone(m.columns) }

// Sources say where each of Columns comes from: "pass_through", or
// `output "name"`.
func (m *TableMap) Sources() []string { return slices.Clone(m.sources) }

// Packed says whether the model takes a row's features as one tensor.
func (m *TableMap) Packed() bool { return m.packed }

// Outputs are the model outputs written.
func (m *TableMap) Outputs() []TensorSpec {
	var out []TensorSpec
	for _, o := range m.outs {
		out = append(out, o.spec)
	}
	return out
}

// text is row i of categorical column j of b, "" when missing.
func text(b *format.Batch, j, i int) (string, bool) {
	c := b.Cat[j][i]
	if c < 0 {
		return "", false
	}
	return b.Dicts[j].String(c), true
}

// Inputs builds the model's inputs from b's rows (b holds ReadColumns). A
// value an INT64 input cannot take is ErrInvalidInput naming the column and
// the value.
func (m *TableMap) Inputs(b *format.Batch) (Batch, error) {
	n := b.N
	var out Batch
	for _, in := range m.inputs {
		t := Tensor{Name: in.spec.Name, Datatype: in.spec.Datatype, Shape: append([]int{n}, in.shape...)}
		switch {
		case m.packed:
			k := len(in.cols)
			t.FP32 = make([]float32, n*k)
			for f, j := range in.cols {
				for i, v := range b.Num[j][:n] {
					t.FP32[i*k+f] = v
				}
			}
		case in.spec.Datatype == FP32:
			t.FP32 = slices.Clone(b.Num[in.cols[0]][:n])
		case in.spec.Datatype == BYTES:
			t.Bytes = make([]string, n)
			for i := range n {
				t.Bytes[i], _ = text(b, in.cols[0], i)
			}
		case in.spec.Datatype == INT64:
			t.INT64 = make([]int64, n)
			for i := range n {
				s, ok := text(b, in.cols[0], i)
				if !ok {
					return Batch{}, fmt.Errorf("%w: column %q: a value is missing, and model input %q (INT64) has no missing value", ErrInvalidInput, in.spec.Name, in.spec.Name)
				}
				v, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
				if err != nil {
					return Batch{}, fmt.Errorf("%w: column %q: value %q is not an integer (model input %q is INT64)", ErrInvalidInput, in.spec.Name, s, in.spec.Name)
				}
				t.INT64[i] = v
			}
		}
		out.Inputs = append(out.Inputs, t)
	}
	return out, nil
}

// Rows puts b's pass-through columns and the model's outputs for b's rows
// into the rows of the output table (Columns). An output missing, of
// another datatype, or with another number of values than its shape says
// for b's rows, is an error naming it.
func (m *TableMap) Rows(b *format.Batch, outs []Tensor) (*format.Rows, error) {
	n := b.N
	r := &format.Rows{N: n, Cols: make([]format.Values, 0, len(m.columns))}
	for _, p := range m.pass {
		v, err := passValues(b, p, n)
		if err != nil {
			return nil, err
		}
		r.Cols = append(r.Cols, v)
	}
	for _, o := range m.outs {
		var t *Tensor
		for i := range outs {
			if outs[i].Name == o.spec.Name {
				t = &outs[i]
				break
			}
		}
		if t == nil {
			return nil, fmt.Errorf("predict: model %s gave no output %q", m.md.Name, o.spec.Name)
		}
		if t.Datatype != o.spec.Datatype || t.Rows() != n || t.dataLen() != n*o.width {
			return nil, fmt.Errorf("predict: model %s's output %q is %s%v with %d values, want %s for %d rows of %d", m.md.Name, o.spec.Name, t.Datatype, t.Shape, t.dataLen(), o.spec.Datatype, n, o.width)
		}
		for c := range o.width {
			var v format.Values
			switch t.Datatype {
			case FP32:
				v.F32 = strided(t.FP32, c, o.width, n)
			case INT64:
				v.I64 = strided(t.INT64, c, o.width, n)
			case BYTES:
				v.Str = strided(t.Bytes, c, o.width, n)
			}
			r.Cols = append(r.Cols, v)
		}
	}
	return r, nil
}

// strided is elements c, c+w, c+2w, ... of x: column c of n rows of w.
func strided[T any](x []T, c, w, n int) []T {
	if w == 1 {
		return x[:n]
	}
	out := make([]T, n)
	for i := range out {
		out[i] = x[i*w+c]
	}
	return out
}

// passValues copies a pass-through column of b.
func passValues(b *format.Batch, p passColumn, n int) (format.Values, error) {
	v := format.Values{Null: make([]bool, n)}
	if p.typ == format.Float32 && b.Num[p.col] != nil {
		v.F32 = slices.Clone(b.Num[p.col][:n])
		for i, x := range v.F32 {
			v.Null[i] = math.IsNaN(float64(x))
		}
		return v, nil
	}
	switch p.typ {
	case format.Int64:
		v.I64 = make([]int64, n)
	case format.Float32:
		v.F32 = make([]float32, n)
	case format.Float64:
		v.F64 = make([]float64, n)
	default:
		v.Str = make([]string, n)
	}
	for i := range n {
		s, ok := text(b, p.col, i)
		if !ok {
			v.Null[i] = true
			continue
		}
		var err error
		switch p.typ {
		case format.Int64:
			v.I64[i], err = strconv.ParseInt(s, 10, 64)
		case format.Float32:
			var f float64
			f, err = strconv.ParseFloat(s, 32)
			v.F32[i] = float32(f)
		case format.Float64:
			v.F64[i], err = strconv.ParseFloat(s, 64)
		default:
			v.Str[i] = s
		}
		if err != nil {
			return v, fmt.Errorf("predict: pass_through column %q: value %q: %w", p.name, s, err)
		}
	}
	return v, nil
}
