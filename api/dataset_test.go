package api

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func dataInput() FitInput {
	in := validInput()
	in.Datasets = map[string]DatasetSpec{
		"train": {URI: "s3://bucket/prefix/*.parquet", Label: "y"},
		"valid": {URI: "/data/valid.csv", Label: "y", Remainder: "exact"},
	}
	in.Preprocessors = []PreprocessorSpec{
		{Type: "simple_imputer", Columns: []string{"a"}},
		{Type: "standard_scaler", Columns: []string{"a", "b"}},
		{Type: "one_hot_encoder", Columns: []string{"city"}},
	}
	return in.WithDefaults()
}

func TestFitInputDatasetsJSON(t *testing.T) {
	t.Parallel()
	const js = `{"train_func":"tabular-mlp","scaling":{"num_workers":2},"run":{"storage_path":"/tmp/r"},
	  "datasets":{"train":{"uri":"s3://bucket/prefix/*.parquet","label":"y"},
	              "valid":{"uri":"/data/v.csv","label":"y","csv":{"delimiter":";","null_values":[]}}},
	  "preprocessors":[{"type":"standard_scaler","columns":["a","b"]},
	                   {"type":"chain","steps":[{"type":"simple_imputer","columns":["c"],"strategy":"constant","fill_value":"none"},
	                                            {"type":"one_hot_encoder","columns":["c"],"max_categories":10}]}]}`
	var in FitInput
	if err := json.Unmarshal([]byte(js), &in); err != nil {
		t.Fatal(err)
	}
	in = in.WithDefaults()
	if err := in.Validate(); err != nil {
		t.Fatal(err)
	}
	tr := in.Datasets["train"]
	if tr.Format != "parquet" || tr.Task != "classification" || tr.Remainder != "pad" || tr.Mode != "auto" ||
		!*tr.Shuffle || tr.MemoryBudgetMiB != DefaultDatasetMemoryMiB {
		t.Errorf("train defaults: %+v", tr)
	}
	if tr.CSV.Header != nil {
		t.Errorf("a parquet dataset got CSV defaults: %+v", tr.CSV)
	}
	v := in.Datasets["valid"].CSV
	if v.Delimiter != ";" || v.Quote != `"` || !*v.Header || v.NullValues == nil || len(v.NullValues) != 0 {
		t.Errorf("valid csv: %+v (an explicit empty null_values must stay empty)", v)
	}
	if s := in.Preprocessors[1].Steps[0]; s.FillValue != "none" || s.Strategy != "constant" {
		t.Errorf("chain step: %+v", s)
	}
	// A round trip keeps everything, including the empty null list.
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var back FitInput
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back.WithDefaults(), in) {
		t.Errorf("round trip differs:\n%s\n%+v", b, back)
	}
	// Inputs without datasets keep their old JSON.
	b, _ = json.Marshal(validInput())
	if strings.Contains(string(b), "datasets") || strings.Contains(string(b), "preprocessors") {
		t.Errorf("input without datasets marshals them: %s", b)
	}
}

func TestDatasetDefaultsDoNotTouchTheCaller(t *testing.T) {
	t.Parallel()
	in := validInput()
	spec := DatasetSpec{URI: "/d/x.csv", Features: []string{"a"}}
	in.Datasets = map[string]DatasetSpec{"train": spec}
	in.Preprocessors = []PreprocessorSpec{{Type: "simple_imputer", Columns: []string{"a"}}}
	out := in.WithDefaults()
	if in.Datasets["train"].Format != "" || in.Preprocessors[0].Strategy != "" {
		t.Fatalf("WithDefaults changed its receiver's map or slice: %+v %+v", in.Datasets["train"], in.Preprocessors[0])
	}
	if out.Datasets["train"].Format != "csv" || out.Preprocessors[0].Strategy != "mean" {
		t.Fatalf("defaults missing: %+v %+v", out.Datasets["train"], out.Preprocessors[0])
	}
	out.Datasets["train"].Features[0] = "changed"
	if spec.Features[0] != "a" {
		t.Fatal("WithDefaults shares the features slice")
	}
}

func TestTSVDefaultsToTabs(t *testing.T) {
	t.Parallel()
	if d := (DatasetSpec{URI: "/d/x.tsv"}).WithDefaults().CSV.Delimiter; d != "\t" {
		t.Errorf("a .tsv URI: delimiter %q, want a tab", d)
	}
	if d := (DatasetSpec{URI: "/d/x.tsv", CSV: CSVOptions{Delimiter: ";"}}).WithDefaults().CSV.Delimiter; d != ";" {
		t.Errorf("a .tsv URI with a delimiter: %q, want it kept", d)
	}
}

func TestFormatFromURI(t *testing.T) {
	t.Parallel()
	for uri, want := range map[string]string{
		"/d/x.csv": "csv", "/d/*.CSV": "csv", "/d/x.tsv": "csv", "s3://b/p/*.parquet": "parquet", "/d/x.pq": "parquet",
		"fashion-mnist:train": "idx", "/d/images/": "", "s3://b/p/": "", "/d/x.json": "",
	} {
		if got := FormatFromURI(uri); got != want {
			t.Errorf("FormatFromURI(%q) = %q, want %q", uri, got, want)
		}
	}
}

func TestValidateDatasets(t *testing.T) {
	t.Parallel()
	if err := dataInput().Validate(); err != nil {
		t.Fatalf("valid input: %v", err)
	}
	ds := func(name string, f func(*DatasetSpec)) func(*FitInput) {
		return func(in *FitInput) {
			s := in.Datasets[name]
			f(&s)
			in.Datasets[name] = s
		}
	}
	pre := func(i int, f func(*PreprocessorSpec)) func(*FitInput) {
		return func(in *FitInput) { f(&in.Preprocessors[i]) }
	}
	tests := []struct {
		name   string
		mutate func(*FitInput)
		field  string
		value  string // in the message
	}{
		{"no uri", ds("train", func(s *DatasetSpec) { s.URI = "" }), "datasets.train.uri", `""`},
		{"relative uri", ds("train", func(s *DatasetSpec) { s.URI = "data/x.csv" }), "datasets.train.uri", `"data/x.csv"`},
		{"unknown scheme", ds("train", func(s *DatasetSpec) { s.URI = "gs://b/x.csv" }), "datasets.train.uri", `"gs://b/x.csv"`},
		{"s3 without bucket", ds("train", func(s *DatasetSpec) { s.URI = "s3:///x.csv" }), "datasets.train.uri", `"s3:///x.csv"`},
		{"file with host", ds("train", func(s *DatasetSpec) { s.URI = "file://host/x.csv" }), "datasets.train.uri", "file://host"},
		{"glob in a directory", ds("train", func(s *DatasetSpec) { s.URI = "/d/*/x.csv" }), "datasets.train.uri", "last element"},
		{"bad glob", ds("train", func(s *DatasetSpec) { s.URI = "/d/[x.csv" }), "datasets.train.uri", "malformed glob"},
		{"bad split", ds("train", func(s *DatasetSpec) { s.URI = "fashion-mnist:valid"; s.Format = "idx"; s.Label = "" }), "datasets.train.uri", "fashion-mnist:valid"},
		{"unknown format", ds("valid", func(s *DatasetSpec) { s.Format = "json" }), "datasets.valid.format", `"json"`},
		{"idx elsewhere", ds("valid", func(s *DatasetSpec) { s.Format = "idx"; s.Label = "" }), "datasets.valid.format", "fashion-mnist"},
		{"bad task", ds("train", func(s *DatasetSpec) { s.Task = "ranking" }), "datasets.train.task", `"ranking"`},
		{"bad remainder", ds("train", func(s *DatasetSpec) { s.Remainder = "wrap" }), "datasets.train.remainder", `"wrap"`},
		{"bad mode", ds("train", func(s *DatasetSpec) { s.Mode = "disk" }), "datasets.train.mode", `"disk"`},
		{"negative budget", ds("train", func(s *DatasetSpec) { s.MemoryBudgetMiB = -1 }), "datasets.train.memory_budget_mib", "-1"},
		{"negative window", ds("train", func(s *DatasetSpec) { s.ShuffleWindowRows = -5 }), "datasets.train.shuffle_window_rows", "-5"},
		{"label among features", ds("train", func(s *DatasetSpec) { s.Features = []string{"a", "y"} }), "datasets.train.features", `"y"`},
		{"duplicate feature", ds("train", func(s *DatasetSpec) { s.Features = []string{"a", "a"} }), "datasets.train.features", `"a" twice`},
		{"empty categorical", ds("train", func(s *DatasetSpec) { s.Categorical = []string{""} }), "datasets.train.categorical", "empty name"},
		{"two-byte delimiter", ds("valid", func(s *DatasetSpec) { s.CSV.Delimiter = ";;" }), "datasets.valid.csv.delimiter", `";;"`},
		{"quote is delimiter", ds("valid", func(s *DatasetSpec) { s.CSV.Quote = "," }), "datasets.valid.csv.quote", `","`},
		{"images without size", ds("valid", func(s *DatasetSpec) {
			s.URI, s.Format, s.Label, s.Image = "/d/img/", "images", "", ImageOptions{Channels: 3}
		}), "datasets.valid.image", "0x0"},
		{"images with a label", ds("valid", func(s *DatasetSpec) {
			s.URI, s.Format, s.Image = "/d/img/", "images", ImageOptions{Width: 8, Height: 8, Channels: 3}
		}), "datasets.valid.label", `"y"`},
		{"images with 2 channels", ds("valid", func(s *DatasetSpec) {
			s.URI, s.Format, s.Label, s.Image = "/d/img/", "images", "", ImageOptions{Width: 8, Height: 8, Channels: 2}
		}), "datasets.valid.image.channels", "2"},
		{"std of zero", ds("valid", func(s *DatasetSpec) {
			s.URI, s.Format, s.Label, s.Image = "/d/img/", "images", "", ImageOptions{Width: 8, Height: 8, Channels: 1, Std: []float64{0}}
		}), "datasets.valid.image.std", "[0]"},
		{"resized fashion-mnist", ds("valid", func(s *DatasetSpec) {
			s.URI, s.Format, s.Label, s.Image = "fashion-mnist:test", "idx", "", ImageOptions{Width: 32, Height: 32, Channels: 1}
		}), "datasets.valid.image", "32x32"},
		{"bad dataset name", func(in *FitInput) { in.Datasets["a/b"] = DatasetSpec{URI: "/x.csv"}.WithDefaults() }, "datasets", `"a/b"`},
		{"unknown preprocessor", pre(0, func(p *PreprocessorSpec) { p.Type = "robust_scaler" }), "preprocessors[0].type", `"robust_scaler"`},
		{"scaler without columns", pre(1, func(p *PreprocessorSpec) { p.Columns = nil }), "preprocessors[1].columns", "at least one column"},
		{"bad strategy", pre(0, func(p *PreprocessorSpec) { p.Strategy = "median" }), "preprocessors[0].strategy", `"median"`},
		{"constant without value", pre(0, func(p *PreprocessorSpec) { p.Strategy = "constant" }), "preprocessors[0].fill_value", "needs a fill_value"},
		{"fill value of a list", pre(0, func(p *PreprocessorSpec) { p.Strategy, p.FillValue = "constant", []any{1.0} }), "preprocessors[0].fill_value", "number or a string"},
		{"strategy on a scaler", pre(1, func(p *PreprocessorSpec) { p.Strategy = "mean" }), "preprocessors[1].strategy", `"mean"`},
		{"negative max categories", pre(2, func(p *PreprocessorSpec) { p.MaxCategories = -1 }), "preprocessors[2].max_categories", "-1"},
		{"empty chain", pre(2, func(p *PreprocessorSpec) { *p = PreprocessorSpec{Type: "chain"} }), "preprocessors[2].steps", "at least one step"},
		{"bad nested step", pre(2, func(p *PreprocessorSpec) {
			*p = PreprocessorSpec{Type: "chain", Steps: []PreprocessorSpec{{Type: "min_max_scaler", Columns: []string{"a"}}, {Type: "one_hot_encoder"}}}
		}), "preprocessors[2].steps[1].columns", "at least one column"},
		{"preprocessors without train", func(in *FitInput) { delete(in.Datasets, "train") }, "preprocessors", `datasets.train is missing`},
	}
	for _, tc := range tests {
		in := dataInput()
		in.Datasets = map[string]DatasetSpec{"train": in.Datasets["train"], "valid": in.Datasets["valid"]}
		tc.mutate(&in)
		err := in.Validate()
		var ie *InvalidInputError
		if !errors.As(err, &ie) {
			t.Errorf("%s: err = %v, want an *InvalidInputError", tc.name, err)
			continue
		}
		if ie.Field != tc.field || !strings.Contains(err.Error(), tc.value) {
			t.Errorf("%s: %v: want field %s and %s in the message", tc.name, err, tc.field, tc.value)
		}
	}
}

func TestValidateDatasetsInNameOrder(t *testing.T) {
	t.Parallel()
	// Two bad datasets: the error names the first in sorted order, every
	// time (the workflow validates, and must replay the same error).
	for range 20 {
		in := validInput()
		in.Datasets = map[string]DatasetSpec{}
		for _, n := range []string{"zeta", "alpha", "mid", "beta"} {
			in.Datasets[n] = DatasetSpec{URI: "relative.csv"}
		}
		in = in.WithDefaults()
		var ie *InvalidInputError
		if err := in.Validate(); !errors.As(err, &ie) || ie.Field != "datasets.alpha.uri" {
			t.Fatalf("err = %v, want datasets.alpha.uri", err)
		}
	}
}
