package data

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/data/format"
)

// TestBadInputErrors: each bad input fails Open (or Fit) with an error that
// says exactly what is wrong, and wraps ErrInvalid: no restart fixes it.
func TestBadInputErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, body string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.csv", "a,b,y\n1,2,0\n3,4,1\n")
	os.Mkdir(filepath.Join(dir, "two"), 0o755)
	write("two/good.csv", "a,b,y\n1,2,0\n3,4,1\n")
	write("two/other.csv", "a,c,y\n1,2,0\n")
	os.Mkdir(filepath.Join(dir, "empty"), 0o755)
	os.Mkdir(filepath.Join(dir, "mixed"), 0o755)
	os.WriteFile(filepath.Join(dir, "mixed", "a.csv"), []byte("a,y\n1,0\n"), 0o644)
	tbl := newTestTable(20)
	tbl.writeParquet(t, filepath.Join(dir, "mixed", "b.parquet"), 0, 20, 10)
	pq := filepath.Join(dir, "t.parquet")
	tbl.writeParquet(t, pq, 0, 20, 10)
	// A Parquet file whose x is a string: its schema differs.
	pqBad := filepath.Join(dir, "pqbad", "u.parquet")
	os.Mkdir(filepath.Dir(pqBad), 0o755)
	tbl.writeParquet(t, filepath.Join(dir, "pqbad", "t.parquet"), 0, 20, 10)
	{
		f, _ := os.Create(pqBad)
		w := parquet.NewGenericWriter[any](f, parquet.NewSchema("t", parquet.Group{
			"id": parquet.Int(64), "x": parquet.String(), "city": parquet.String(), "y": parquet.Int(32),
		}))
		w.Close()
		f.Close()
	}

	tests := []struct {
		name  string
		spec  api.DatasetSpec
		parts []string
	}{
		{"missing file", api.DatasetSpec{URI: filepath.Join(dir, "nope.csv"), Label: "y"}, []string{"nope.csv", "no such file or directory"}},
		{"empty glob", api.DatasetSpec{URI: filepath.Join(dir, "*.tsv"), Label: "y"}, []string{"*.tsv", "no file matches"}},
		{"empty directory", api.DatasetSpec{URI: filepath.Join(dir, "empty") + "/", Label: "y", Format: "csv"}, []string{"empty", "no csv files"}},
		{"format of a mixed directory", api.DatasetSpec{URI: filepath.Join(dir, "mixed") + "/", Label: "y"}, []string{"cannot tell the format", "1 csv, 1 parquet", "set format"}},
		{"missing label column", api.DatasetSpec{URI: good, Label: "target"}, []string{"good.csv", `no label column "target"`, `the columns there are ["a" "b" "y"]`}},
		{"missing feature column", api.DatasetSpec{URI: good, Label: "y", Features: []string{"a", "zz"}}, []string{`no feature column "zz"`, `["a" "b" "y"]`}},
		{"missing categorical column", api.DatasetSpec{URI: good, Label: "y", Categorical: []string{"q"}}, []string{`no categorical column "q"`}},
		{"missing Parquet column", api.DatasetSpec{URI: pq, Label: "label"}, []string{"t.parquet", `no label column "label"`, `["city" "id" "x" "y"]`}},
		{"CSV schemas differ", api.DatasetSpec{URI: filepath.Join(dir, "two", "*.csv"), Label: "y"}, []string{"schemas differ", "good.csv", `["a" "b" "y"]`, "other.csv", `["a" "c" "y"]`}},
		{"Parquet schemas differ", api.DatasetSpec{URI: filepath.Join(dir, "pqbad", "*.parquet"), Label: "y"}, []string{"schemas differ", `column "x"`, "numeric in", "t.parquet", "categorical in", "u.parquet"}},
		{"empty CSV", api.DatasetSpec{URI: write("empty.csv", ""), Label: "y"}, []string{"empty.csv", "the file is empty"}},
		{"header only", api.DatasetSpec{URI: write("header.csv", "a,y\n"), Label: "y"}, []string{"no rows"}},
		{"one class", api.DatasetSpec{URI: write("one.csv", "a,y\n1,yes\n2,yes\n3,yes\n"), Label: "y"}, []string{`label "y" has one class ("yes") in 3 rows`}},
		{"string label, regression", api.DatasetSpec{URI: write("str.csv", "a,y\n1,yes\n2,no\n"), Label: "y", Task: "regression"}, []string{`label "y" is categorical`, "regression"}},
		{"bad spec", api.DatasetSpec{URI: good, Label: "y", Remainder: "wrap"}, []string{"dataset.remainder", `"wrap"`}},
		{"not parquet", api.DatasetSpec{URI: write("fake.parquet", "a,b\n1,2\n"), Label: "b"}, []string{"fake.parquet", "not a readable Parquet file"}},
		{"drop with too few rows", api.DatasetSpec{URI: good, Label: "y", Remainder: "drop"}, []string{"remainder drop: 2 rows for 3 ranks"}},
		{"window over the budget", api.DatasetSpec{URI: good, Label: "y", Mode: "stream", MemoryBudgetMiB: 1, ShuffleWindowRows: 1 << 20}, []string{"shuffle_window_rows 1048576", "a fifth of memory_budget_mib 1"}},
	}
	for _, tc := range tests {
		_, err := Open(context.Background(), tc.spec, ShardOptions{WorldSize: 3}, nil)
		if err == nil {
			t.Errorf("%s: no error", tc.name)
			continue
		}
		t.Run(tc.name, func(t *testing.T) { wantErr(t, err, true, tc.parts...) })
	}

	// Preprocessors that do not fit their columns.
	s := mustOpen(t, api.DatasetSpec{URI: pq, Label: "y"}, ShardOptions{}, nil)
	fitErrs := []struct {
		name  string
		pre   []api.PreprocessorSpec
		parts []string
	}{
		{"scaler on a categorical column", []api.PreprocessorSpec{{Type: "standard_scaler", Columns: []string{"city"}}}, []string{`column "city" is categorical`, "standard_scaler takes numeric columns"}},
		{"encoder on a numeric column", []api.PreprocessorSpec{{Type: "one_hot_encoder", Columns: []string{"x"}}}, []string{`column "x" is numeric`, "one_hot_encoder takes categorical columns"}},
		{"unknown column", []api.PreprocessorSpec{{Type: "min_max_scaler", Columns: []string{"w"}}}, []string{`no column "w"`, `(columns there are: ["city" "id" "x"])`}},
		{"mean of strings", []api.PreprocessorSpec{{Type: "simple_imputer", Columns: []string{"city"}}}, []string{`column "city" is categorical: use most_frequent or constant`}},
		{"categorical left", []api.PreprocessorSpec{{Type: "standard_scaler", Columns: []string{"x"}}}, []string{`column "city" is categorical and no encoder`}},
		{"concatenator not last", []api.PreprocessorSpec{{Type: "concatenator"}, {Type: "standard_scaler", Columns: []string{"x"}}}, []string{"concatenator must be the last"}},
		{"bad spec", []api.PreprocessorSpec{{Type: "robust_scaler"}}, []string{"preprocessors[0].type"}},
		{"text fill for numbers", []api.PreprocessorSpec{{Type: "simple_imputer", Columns: []string{"x"}, Strategy: "constant", FillValue: "zero"}}, []string{`column "x" is numeric, fill_value zero is not a number`}},
	}
	for _, tc := range fitErrs {
		_, err := s.Fit(context.Background(), tc.pre)
		t.Run("fit/"+tc.name, func(t *testing.T) { wantErr(t, err, true, tc.parts...) })
	}
	// The categorical feature without an encoder fails at Next, clearly.
	x := make([]float32, 64)
	_, err := s.Next(context.Background(), x, x)
	wantErr(t, err, true, `column "city" is categorical and no encoder`)

	// An all-missing column cannot be scaled.
	allNA := write("na.csv", "a,b,y\nNA,1,0\n,2,1\n")
	s2 := mustOpen(t, api.DatasetSpec{URI: allNA, Label: "y"}, ShardOptions{}, nil)
	_, err = s2.Fit(context.Background(), []api.PreprocessorSpec{{Type: "standard_scaler", Columns: []string{"a"}}})
	wantErr(t, err, true, `column "a" has no values (all missing)`)

	// A storage outage is not ErrInvalid; a cancelled context neither.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = Open(ctx, api.DatasetSpec{URI: good, Label: "y"}, ShardOptions{}, nil)
	if err == nil || errors.Is(err, ErrInvalid) {
		t.Errorf("cancelled open: %v, want an error that is not ErrInvalid", err)
	}
}

// TestParquetValueErrors: a null label names the file, row group, row and
// column; nested columns are refused by name.
func TestParquetValueErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := filepath.Join(dir, "nulllabel.parquet")
	f, _ := os.Create(p)
	schema := parquet.NewSchema("t", parquet.Group{"a": parquet.Int(64), "y": parquet.Optional(parquet.Int(64))})
	w := parquet.NewGenericWriter[any](f, schema, parquet.MaxRowsPerRowGroup(4))
	var rows []parquet.Row
	for i := range 10 {
		y := parquet.Int64Value(int64(i%2)).Level(0, 1, 1)
		if i == 6 {
			y = parquet.NullValue().Level(0, 0, 1)
		}
		rows = append(rows, parquet.Row{parquet.Int64Value(int64(i)).Level(0, 0, 0), y})
	}
	w.WriteRows(rows)
	w.Close()
	f.Close()
	_, err := Open(context.Background(), api.DatasetSpec{URI: p, Label: "y"}, ShardOptions{}, nil)
	wantErr(t, err, true, "nulllabel.parquet: row group 1, row 2", `column "y"`, "the label is missing")

	p = filepath.Join(dir, "nested.parquet")
	f, _ = os.Create(p)
	w = parquet.NewGenericWriter[any](f, parquet.NewSchema("t", parquet.Group{
		"a": parquet.Int(64), "tags": parquet.Repeated(parquet.String()), "y": parquet.Int(64),
	}))
	w.WriteRows([]parquet.Row{{parquet.Int64Value(1).Level(0, 0, 0), parquet.ByteArrayValue([]byte("x")).Level(0, 1, 1), parquet.Int64Value(0).Level(0, 0, 2)}})
	w.Close()
	f.Close()
	_, err = Open(context.Background(), api.DatasetSpec{URI: p, Label: "y", Task: "regression"}, ShardOptions{}, nil)
	wantErr(t, err, true, "nested.parquet", `column "tags" is nested or repeated`)
	// Leaving it out works.
	mustOpen(t, api.DatasetSpec{URI: p, Label: "y", Task: "regression", Features: []string{"a"}}, ShardOptions{}, nil)
}

func TestCSVTypesAndErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(body), 0o644)
		return p
	}
	// Inference: numbers are numeric; a string makes a column categorical;
	// a column listed categorical is, whatever it holds.
	p := write("types.csv", "n,s,code,y\n1.5,a,10,0\n,b,20,1\n 2 ,c,30,1\n")
	no := false
	s := mustOpen(t, api.DatasetSpec{URI: p, Label: "y", Categorical: []string{"code"}, Shuffle: &no}, ShardOptions{}, nil)
	want := []format.ColumnInfo{{Name: "n", Kind: format.Numeric}, {Name: "s", Kind: format.Categorical}, {Name: "code", Kind: format.Categorical}}
	if got := s.Columns(); !slices.Equal(got, want) {
		t.Fatalf("columns %v, want %v", got, want)
	}
	b, err := s.NextBatch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if b.N != 3 || b.Num[0][0] != 1.5 || b.Num[0][1] == b.Num[0][1] || b.Num[0][2] != 2 {
		t.Fatalf("n = %v, want [1.5 NaN 2] (spaces around a number are trimmed)", b.Num[0][:b.N])
	}

	// A value that does not parse, past the sample: file, line, column,
	// value, and the hint.
	var body strings.Builder
	body.WriteString("a,b\n")
	for i := range 2000 {
		body.WriteString(strconv.Itoa(i) + ",1\n")
	}
	body.WriteString("12x,1\n")
	p = write("late.csv", body.String())
	_, err = Open(context.Background(), api.DatasetSpec{URI: p, Label: "b", Task: "regression"}, ShardOptions{}, nil)
	wantErr(t, err, true, "late.csv:2002", `column "a"`, `value "12x"`, "is not a number", "list it in categorical")
	var pe *format.ParseError
	if !errors.As(err, &pe) || pe.Line != 2002 || pe.Column != "a" || pe.Value != "12x" {
		t.Errorf("ParseError = %+v", pe)
	}
	// Out of float32's range.
	p = write("big.csv", "a,b\n1,1\n1e39,2\n")
	_, err = Open(context.Background(), api.DatasetSpec{URI: p, Label: "b", Task: "regression", Mode: "memory"}, ShardOptions{}, nil)
	wantErr(t, err, true, "big.csv:3", `value "1e39"`, "out of float32's range")
	// A missing label.
	p = write("nolabel.csv", "a,y\n1,0\n2,\n3,1\n")
	_, err = Open(context.Background(), api.DatasetSpec{URI: p, Label: "y"}, ShardOptions{}, nil)
	wantErr(t, err, true, "nolabel.csv:3", `column "y"`, "the label is missing")
}
