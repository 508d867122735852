package predict_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/tempotrain/tempotrain/data/format"
	"github.com/tempotrain/tempotrain/predict"
)

// tableModel is a model of one input per column: "x" FP32, "city" BYTES,
// "n" INT64; outputs "score" FP32 [-1] (x + n), "probs" FP32 [-1, 2] (x, -x)
// and "label" BYTES [-1] (the city, upper case).
var tableModel = predict.Metadata{Name: "table", Format: "test",
	Inputs: []predict.TensorSpec{
		{Name: "x", Datatype: predict.FP32, Shape: []int{-1}},
		{Name: "city", Datatype: predict.BYTES, Shape: []int{-1}},
		{Name: "n", Datatype: predict.INT64, Shape: []int{-1, 1}},
	},
	Outputs: []predict.TensorSpec{
		{Name: "score", Datatype: predict.FP32, Shape: []int{-1}},
		{Name: "probs", Datatype: predict.FP32, Shape: []int{-1, 2}},
		{Name: "label", Datatype: predict.BYTES, Shape: []int{-1}},
	}}

func predictTable(b predict.Batch) []predict.Tensor {
	x, _ := b.Input("x")
	city, _ := b.Input("city")
	n, _ := b.Input("n")
	rows := x.Rows()
	score := predict.Tensor{Name: "score", Datatype: predict.FP32, Shape: []int{rows}, FP32: make([]float32, rows)}
	probs := predict.Tensor{Name: "probs", Datatype: predict.FP32, Shape: []int{rows, 2}, FP32: make([]float32, 2*rows)}
	label := predict.Tensor{Name: "label", Datatype: predict.BYTES, Shape: []int{rows}, Bytes: make([]string, rows)}
	for i := range rows {
		score.FP32[i] = x.FP32[i] + float32(n.INT64[i])
		probs.FP32[2*i], probs.FP32[2*i+1] = x.FP32[i], -x.FP32[i]
		label.Bytes[i] = strings.ToUpper(city.Bytes[i])
	}
	return []predict.Tensor{score, probs, label}
}

// tableColumns: id (INT64), x (DOUBLE), city (strings), n (INT32), y.
var tableColumns = []format.TableColumn{
	{Name: "id", Kind: format.Numeric, Type: "INT64"},
	{Name: "x", Kind: format.Numeric, Type: "DOUBLE"},
	{Name: "city", Kind: format.Categorical, Type: "BYTE_ARRAY"},
	{Name: "n", Kind: format.Numeric, Type: "INT32"},
	{Name: "y", Kind: format.Numeric, Type: "INT64"},
}

// batchOf fills a batch of the columns m reads: row i has id 1e12+i, x i/4,
// city "c{i%3}" (missing at row 2), n i*10.
func batchOf(m *predict.TableMap, rows int) *format.Batch {
	b := format.NewBatch(m.ReadColumns(), rows)
	b.Reset(rows)
	for j, c := range b.Columns {
		for i := range rows {
			switch {
			case c.Name == "id" && c.Kind == format.Categorical:
				b.SetString(j, i, fmt.Sprint(int64(1e12)+int64(i)))
			case c.Name == "x" && c.Kind == format.Numeric:
				b.SetNumber(j, i, float64(i)/4)
			case c.Name == "city" && i != 2:
				b.SetString(j, i, fmt.Sprintf("c%d", i%3))
			case c.Name == "n":
				b.SetString(j, i, fmt.Sprint(i*10))
			}
		}
	}
	return b
}

// TestTableMapColumns: a model of one input per column gets each column as
// its input (numbers, text, integers), and its outputs come back as columns
// after the pass-through ones, a [-1, 2] output as two.
func TestTableMapColumns(t *testing.T) {
	m, err := predict.MapTable(tableModel, tableColumns, predict.TableOptions{PassThrough: []string{"id", "x"}})
	if err != nil {
		t.Fatal(err)
	}
	if m.Packed() {
		t.Error("a model of one input per column is not packed")
	}
	var cols []string
	for _, c := range m.Columns() {
		cols = append(cols, fmt.Sprintf("%s:%s:%v", c.Name, c.Type, c.Nullable))
	}
	want := []string{"id:int64:true", "x:float32:true", "score:float32:false", "probs_0:float32:false", "probs_1:float32:false", "label:string:false"}
	if !slices.Equal(cols, want) {
		t.Errorf("columns %v, want %v", cols, want)
	}
	if s := m.Sources(); s[0] != "pass_through" || s[2] != `output "score"` {
		t.Errorf("sources %q", s)
	}
	const rows = 5
	b := batchOf(m, rows)
	in, err := m.Inputs(b)
	if err != nil {
		t.Fatal(err)
	}
	if err := predict.Check(tableModel.Inputs, in); err != nil {
		t.Fatalf("inputs do not fit the model: %v", err)
	}
	city, _ := in.Input("city")
	n, _ := in.Input("n")
	if !slices.Equal(city.Bytes, []string{"c0", "c1", "", "c0", "c1"}) || !slices.Equal(n.INT64, []int64{0, 10, 20, 30, 40}) || !slices.Equal(n.Shape, []int{rows, 1}) {
		t.Errorf("inputs city %q, n %v %v", city.Bytes, n.INT64, n.Shape)
	}
	r, err := m.Rows(b, predictTable(in))
	if err != nil {
		t.Fatal(err)
	}
	if r.N != rows || len(r.Cols) != len(want) {
		t.Fatalf("rows %d, %d columns", r.N, len(r.Cols))
	}
	for i := range rows {
		x := float32(i) / 4
		if r.Cols[0].I64[i] != int64(1e12)+int64(i) || r.Cols[1].F32[i] != x || r.Cols[2].F32[i] != x+float32(i*10) ||
			r.Cols[3].F32[i] != x || r.Cols[4].F32[i] != -x || r.Cols[5].Str[i] != strings.ToUpper(city.Bytes[i]) {
			t.Errorf("row %d: %v %v %v %v %v %q", i, r.Cols[0].I64[i], r.Cols[1].F32[i], r.Cols[2].F32[i], r.Cols[3].F32[i], r.Cols[4].F32[i], r.Cols[5].Str[i])
		}
	}
	// A subset of the outputs; a pass-through column the model does not read
	// is copied as its text's type.
	m, err = predict.MapTable(tableModel, tableColumns, predict.TableOptions{PassThrough: []string{"city"}, Outputs: []string{"label"}})
	if err != nil {
		t.Fatal(err)
	}
	b = batchOf(m, rows)
	in, _ = m.Inputs(b)
	r, err = m.Rows(b, predictTable(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Cols) != 2 || !slices.Equal(r.Cols[0].Null, []bool{false, false, true, false, false}) || r.Cols[1].Str[1] != "C1" {
		t.Errorf("city passed through %+v, label %+v", r.Cols[0], r.Cols[1])
	}
}

// imageModel is the image classifiers' metadata.
var imageModel = predict.Metadata{Name: "mnist-mlp", Format: predict.StateFormat,
	Inputs: []predict.TensorSpec{{Name: "pixels", Datatype: predict.FP32, Shape: []int{-1, 1, 28, 28}}},
	Outputs: []predict.TensorSpec{
		{Name: "probabilities", Datatype: predict.FP32, Shape: []int{-1, 10}},
		{Name: "class", Datatype: predict.INT64, Shape: []int{-1}},
	}}

func pixelColumns(n int, extra ...format.TableColumn) []format.TableColumn {
	cols := slices.Clone(extra)
	for k := range n {
		cols = append(cols, format.TableColumn{Name: fmt.Sprintf("p%03d", k), Kind: format.Numeric, Type: "FLOAT"})
	}
	return cols
}

// TestTableMapPacked: a model of one tensor input takes the feature columns
// packed in order, the pass-through column left out of them.
func TestTableMapPacked(t *testing.T) {
	cols := pixelColumns(784, format.TableColumn{Name: "id", Kind: format.Numeric, Type: "INT64"})
	m, err := predict.MapTable(imageModel, cols, predict.TableOptions{PassThrough: []string{"id"}})
	if err != nil {
		t.Fatal(err)
	}
	if !m.Packed() || len(m.ReadColumns()) != 785 || len(m.Columns()) != 12 || m.Columns()[11].Name != "class" || m.Columns()[1].Name != "probabilities_0" {
		t.Fatalf("packed %v, %d read, columns %v", m.Packed(), len(m.ReadColumns()), m.Columns())
	}
	const rows = 3
	b := format.NewBatch(m.ReadColumns(), rows)
	b.Reset(rows)
	for j, c := range b.Columns {
		for i := range rows {
			if c.Kind == format.Numeric {
				b.SetNumber(j, i, float64(i*1000+j))
			} else {
				b.SetString(j, i, fmt.Sprint(i))
			}
		}
	}
	in, err := m.Inputs(b)
	if err != nil {
		t.Fatal(err)
	}
	px, _ := in.Input("pixels")
	if err := predict.Check(imageModel.Inputs, in); err != nil {
		t.Fatal(err)
	}
	for i := range rows {
		for k := range 784 {
			j := slices.IndexFunc(b.Columns, func(c format.ColumnInfo) bool { return c.Name == fmt.Sprintf("p%03d", k) })
			if px.FP32[i*784+k] != b.Num[j][i] {
				t.Fatalf("row %d pixel %d = %v, column says %v", i, k, px.FP32[i*784+k], b.Num[j][i])
			}
		}
	}
	// A model whose tensor takes any number of values per row.
	flex := imageModel
	flex.Inputs = []predict.TensorSpec{{Name: "features", Datatype: predict.FP32, Shape: []int{-1, -1}}}
	if m, err := predict.MapTable(flex, cols, predict.TableOptions{Features: []string{"p001", "p000"}}); err != nil || len(m.ReadColumns()) != 2 || m.ReadColumns()[0].Name != "p001" {
		t.Errorf("features in the order given: %v %v", m, err)
	}
}

// TestTableMapErrors: a table that does not fit the model fails with
// ErrInvalidInput naming the column, input or output.
func TestTableMapErrors(t *testing.T) {
	strs := slices.Clone(tableColumns)
	strs[1] = format.TableColumn{Name: "x", Kind: format.Categorical, Type: "BYTE_ARRAY"}
	for _, tt := range []struct {
		name  string
		md    predict.Metadata
		cols  []format.TableColumn
		o     predict.TableOptions
		wants []string
	}{
		{"missing column", tableModel, tableColumns[2:], predict.TableOptions{}, []string{`column "x"`, "lacks", `"city"`}},
		{"strings for numbers", tableModel, strs, predict.TableOptions{}, []string{`column "x" holds values of type BYTE_ARRAY`, "FP32"}},
		{"785 features for 784", imageModel, pixelColumns(784, format.TableColumn{Name: "id", Kind: format.Numeric}), predict.TableOptions{}, []string{`"pixels"`, "784 values per row", "785 feature columns", "dataset.features"}},
		{"a string feature", imageModel, pixelColumns(783, format.TableColumn{Name: "name", Kind: format.Categorical}), predict.TableOptions{}, []string{`feature column "name"`, "not numbers"}},
		{"no such feature", imageModel, pixelColumns(783), predict.TableOptions{Features: append(names(pixelColumns(783)), "p999")}, []string{`feature column "p999"`}},
		{"no such output", tableModel, tableColumns, predict.TableOptions{Outputs: []string{"proba"}}, []string{`no output "proba"`, `"probs"`}},
		{"no such pass-through", tableModel, tableColumns, predict.TableOptions{PassThrough: []string{"key"}}, []string{`pass_through column "key"`}},
		{"a clash", tableModel, append(slices.Clone(tableColumns), format.TableColumn{Name: "score", Kind: format.Numeric}), predict.TableOptions{PassThrough: []string{"score"}}, []string{`output column "score"`, "pass_through", `output "score"`}},
	} {
		_, err := predict.MapTable(tt.md, tt.cols, tt.o)
		if !errors.Is(err, predict.ErrInvalidInput) {
			t.Errorf("%s: error %v, want ErrInvalidInput", tt.name, err)
			continue
		}
		for _, s := range tt.wants {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("%s: error %q does not say %q", tt.name, err, s)
			}
		}
	}
	// An INT64 input's column holding something else.
	m, err := predict.MapTable(tableModel, tableColumns, predict.TableOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b := batchOf(m, 2)
	j := slices.IndexFunc(b.Columns, func(c format.ColumnInfo) bool { return c.Name == "n" })
	b.SetString(j, 1, "1.5")
	if _, err := m.Inputs(b); !errors.Is(err, predict.ErrInvalidInput) || !strings.Contains(err.Error(), `"1.5"`) {
		t.Errorf("1.5 for an INT64 input: %v", err)
	}
	// Outputs that do not match their spec.
	b = batchOf(m, 2)
	in, _ := m.Inputs(b)
	outs := predictTable(in)
	outs[1].FP32 = outs[1].FP32[:3]
	if _, err := m.Rows(b, outs); err == nil || !strings.Contains(err.Error(), `"probs"`) {
		t.Errorf("short output: %v", err)
	}
}

func names(cols []format.TableColumn) []string {
	var n []string
	for _, c := range cols {
		n = append(n, c.Name)
	}
	return n
}

// TestTableImageClassifier: the built-in image classifier over a table of
// test images, 784 pixel columns and an id, gives the classes a direct
// Predict gives.
func TestTableImageClassifier(t *testing.T) {
	ck, _ := trainOne(t, "mlp", map[string]any{"epochs": 1, "train_limit": 256, "test_limit": 64, "batch_size": 64})
	p, err := predict.Load(context.Background(), ck.URI)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	const rows = 50
	x, _ := testImages(t, rows)
	direct, err := p.Predict(context.Background(), predict.Batch{Inputs: []predict.Tensor{x}})
	if err != nil {
		t.Fatal(err)
	}
	m, err := predict.MapTable(p.Metadata(), pixelColumns(784, format.TableColumn{Name: "id", Kind: format.Numeric, Type: "INT64"}), predict.TableOptions{PassThrough: []string{"id"}, Outputs: []string{"class"}})
	if err != nil {
		t.Fatal(err)
	}
	b := format.NewBatch(m.ReadColumns(), rows)
	b.Reset(rows)
	for j, c := range b.Columns {
		var k int
		if _, err := fmt.Sscanf(c.Name, "p%03d", &k); err != nil {
			for i := range rows {
				b.SetString(j, i, fmt.Sprint(i+100))
			}
			continue
		}
		for i := range rows {
			b.Num[j][i] = x.FP32[i*784+k]
		}
	}
	in, err := m.Inputs(b)
	if err != nil {
		t.Fatal(err)
	}
	out, err := p.Predict(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	r, err := m.Rows(b, out)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Cols) != 2 || !slices.Equal(r.Cols[1].I64, direct[1].INT64) || r.Cols[0].I64[7] != 107 {
		t.Errorf("classes through the table %v, direct %v (ids %v)", r.Cols[1].I64, direct[1].INT64, r.Cols[0].I64)
	}
	if math.IsNaN(float64(in.Inputs[0].FP32[0])) {
		t.Error("NaN pixel")
	}
}
