package api

import (
	"fmt"
	"path"
	"slices"
	"sort"
	"strings"
)

// DatasetSpec describes one dataset of a run, as FitInput.Datasets names it
// (Ray's ray.data.read_csv / read_parquet / read_images plus the part of
// Train's DataConfig that says how a dataset is split over the ranks). It is
// plain JSON:
//
//	"datasets": {
//	  "train": {"uri": "s3://bucket/prefix/*.parquet", "label": "y", "categorical": ["city"]},
//	  "valid": {"uri": "/data/valid.csv", "label": "y", "remainder": "exact"}
//	}
//
// Package data reads it (data.Open); this type only carries and checks it.
type DatasetSpec struct {
	// URI of the data. Required. One of:
	//   /abs/file.csv  /abs/dir/*.parquet  /abs/dir/   file:///abs/...   a file, a glob, a directory
	//   s3://bucket/key.csv  s3://bucket/prefix/*.parquet  s3://bucket/prefix/
	//   fashion-mnist:train  fashion-mnist:test   Fashion-MNIST's IDX files (Debian's dataset-fashion-mnist)
	// A glob's meta characters (* ? [) may appear in the last path element
	// only. S3 is configured as checkpoints are (AWS chain, storage's
	// TEMPOTRAIN_S3_PATH_STYLE).
	URI string `json:"uri"`
	// Format is "csv", "parquet", "images" (one subfolder per class, PNG or
	// JPEG) or "idx". Default: from the URI's extension (.csv, .tsv,
	// .parquet, .pq), "idx" for fashion-mnist:..., else from the files found.
	Format string `json:"format,omitempty"`
	// Label is the label column of a table (csv, parquet). Empty: the
	// dataset has no label (prediction inputs). Images and IDX files carry
	// their own labels; Label must be empty for them.
	Label string `json:"label,omitempty"`
	// Features are the feature columns, in order. Default: every column but
	// the label, in the file's order.
	Features []string `json:"features,omitempty"`
	// Categorical columns are read as strings, whatever they look like; an
	// encoder among the preprocessors turns them into numbers. Other
	// columns are numeric when their first rows parse as numbers (CSV) or
	// their type is numeric (Parquet), else categorical.
	Categorical []string `json:"categorical,omitempty"`
	// Task is "classification" (the default: labels are classes, numbered in
	// sorted order, and there must be at least two) or "regression" (labels
	// are numbers, used as they are).
	Task string `json:"task,omitempty"`
	// Shuffle reorders the rows every epoch from (seed, epoch). Default true.
	Shuffle *bool `json:"shuffle,omitempty"`
	// Remainder says what happens to rows when the row count is not a
	// multiple of the number of ranks (PyTorch's DistributedSampler):
	// "pad" (the default; drop_last=False) repeats rows from the start of the
	// epoch's order so that every rank gets as many rows; "drop"
	// (drop_last=True) leaves the last rows of the order out; "exact" gives
	// every row to exactly one rank, so ranks may differ by one row
	// (evaluation, where every row must count once; ranks may then take
	// different numbers of steps).
	Remainder string `json:"remainder,omitempty"`
	// DropLastBatch leaves out a final batch smaller than the batch size.
	DropLastBatch bool `json:"drop_last_batch,omitempty"`
	// Mode is "auto" (the default: in memory when the data fits half the
	// memory budget, else streamed), "memory" or "stream".
	Mode string `json:"mode,omitempty"`
	// MemoryBudgetMiB bounds the memory one rank spends on this dataset:
	// the rows it holds, read buffers and the shuffle windows of a stream.
	// Default DefaultDatasetMemoryMiB.
	MemoryBudgetMiB int `json:"memory_budget_mib,omitempty"`
	// ShuffleWindowRows is the number of rows a streaming rank shuffles
	// together (its local shuffle buffer). Default: as many as a fifth of
	// the budget holds.
	ShuffleWindowRows int `json:"shuffle_window_rows,omitempty"`
	// CSV options, for format "csv".
	CSV CSVOptions `json:"csv,omitzero"`
	// Image options, for formats "images" and "idx".
	Image ImageOptions `json:"image,omitzero"`
}

// CSVOptions say how a CSV file is written.
type CSVOptions struct {
	// Header says whether the first line names the columns. Default true.
	Header *bool `json:"header,omitempty"`
	// Columns name the columns of a file without header. Default c0, c1, ...
	Columns []string `json:"columns,omitempty"`
	// Delimiter is one byte. Default ",", or a tab for a .tsv URI.
	Delimiter string `json:"delimiter,omitempty"`
	// Quote is one byte; a quoted field may hold delimiters, newlines and
	// doubled quotes. Default `"`.
	Quote string `json:"quote,omitempty"`
	// NullValues are the field values that mean "missing" (for numeric and
	// categorical columns alike). nil: DefaultNullValues; [] : none.
	NullValues []string `json:"null_values"`
}

// DefaultNullValues are pandas' default missing-value markers that occur in
// practice.
var DefaultNullValues = []string{"", "NA", "N/A", "n/a", "NaN", "nan", "NULL", "null", "None", "<NA>", "#N/A"}

// ImageOptions say how images become tensors of shape Channels×Height×Width.
type ImageOptions struct {
	// Width and Height images are resized to (bilinear). Required for
	// format "images"; for "idx" they must be 0 or the files' size.
	Width  int `json:"width,omitempty"`
	Height int `json:"height,omitempty"`
	// Channels is 1 (grayscale) or 3 (RGB). Default 3 for images, 1 for idx.
	Channels int `json:"channels,omitempty"`
	// Mean and Std, per channel, normalise a pixel: (v/255 - mean) / std.
	// Default mean 0, std 1.
	Mean []float64 `json:"mean,omitempty"`
	Std  []float64 `json:"std,omitempty"`
}

// PreprocessorSpec declares one preprocessor (Ray's ray.data.preprocessors),
// fitted on the "train" dataset across all ranks and applied to every
// dataset:
//
//	"preprocessors": [
//	  {"type": "simple_imputer", "columns": ["age"], "strategy": "mean"},
//	  {"type": "standard_scaler", "columns": ["age", "income"]},
//	  {"type": "one_hot_encoder", "columns": ["city"]}
//	]
type PreprocessorSpec struct {
	// Type is one of PreprocessorTypes.
	Type string `json:"type"`
	// Columns the preprocessor reads and rewrites. Required, except for
	// concatenator (default: every feature column) and chain.
	Columns []string `json:"columns,omitempty"`
	// Strategy of simple_imputer: "mean" (the default; numeric columns),
	// "most_frequent" or "constant".
	Strategy string `json:"strategy,omitempty"`
	// FillValue of simple_imputer's "constant" strategy: a number, or a
	// string for categorical columns.
	FillValue any `json:"fill_value,omitempty"`
	// MaxCategories of one_hot_encoder keeps the most frequent categories
	// only (ties: the smaller value); others encode as all zeros. 0: all.
	MaxCategories int `json:"max_categories,omitempty"`
	// Exclude of concatenator: columns left out of the feature matrix.
	Exclude []string `json:"exclude,omitempty"`
	// Steps of a chain, applied in order, each fitted on the output of
	// those before it.
	Steps []PreprocessorSpec `json:"steps,omitempty"`
}

// Preprocessor types, as PreprocessorSpec.Type spells them.
const (
	StandardScaler = "standard_scaler"
	MinMaxScaler   = "min_max_scaler"
	OneHotEncoder  = "one_hot_encoder"
	OrdinalEncoder = "ordinal_encoder"
	SimpleImputer  = "simple_imputer"
	Concatenator   = "concatenator"
	Chain          = "chain"
)

// PreprocessorTypes lists the known types.
var PreprocessorTypes = []string{StandardScaler, MinMaxScaler, OneHotEncoder, OrdinalEncoder, SimpleImputer, Concatenator, Chain}

// Defaults of DatasetSpec.
const (
	DefaultDatasetMemoryMiB = 1024
	// TrainDataset is the dataset preprocessors are fitted on.
	TrainDataset = "train"
	// FashionMNISTScheme prefixes the URIs of Fashion-MNIST's splits.
	FashionMNISTScheme = "fashion-mnist:"
)

// Values of DatasetSpec's enumerations.
var (
	DatasetFormats    = []string{"csv", "parquet", "images", "idx"}
	DatasetTasks      = []string{"classification", "regression"}
	DatasetRemainders = []string{"pad", "drop", "exact"}
	DatasetModes      = []string{"auto", "memory", "stream"}
)

// WithDefaults returns a copy of s with every unset optional field at its
// default. It reads nothing: a format that only the files can tell stays
// empty.
func (s DatasetSpec) WithDefaults() DatasetSpec {
	s.Features = slices.Clone(s.Features)
	s.Categorical = slices.Clone(s.Categorical)
	if s.Format == "" {
		s.Format = FormatFromURI(s.URI)
	}
	if s.Task == "" {
		s.Task = "classification"
	}
	if s.Shuffle == nil {
		t := true
		s.Shuffle = &t
	} else {
		v := *s.Shuffle
		s.Shuffle = &v
	}
	if s.Remainder == "" {
		s.Remainder = "pad"
	}
	if s.Mode == "" {
		s.Mode = "auto"
	}
	if s.MemoryBudgetMiB == 0 {
		s.MemoryBudgetMiB = DefaultDatasetMemoryMiB
	}
	if s.Format == "csv" || s.Format == "" {
		if s.CSV.Delimiter == "" && strings.EqualFold(path.Ext(s.URI), ".tsv") {
			s.CSV.Delimiter = "\t"
		}
		s.CSV = s.CSV.withDefaults()
	}
	if s.Format == "images" || s.Format == "idx" {
		s.Image = s.Image.withDefaults(s.Format)
	}
	return s
}

func (c CSVOptions) withDefaults() CSVOptions {
	if c.Header == nil {
		t := true
		c.Header = &t
	} else {
		v := *c.Header
		c.Header = &v
	}
	c.Columns = slices.Clone(c.Columns)
	if c.Delimiter == "" {
		c.Delimiter = ","
	}
	if c.Quote == "" {
		c.Quote = `"`
	}
	if c.NullValues == nil {
		c.NullValues = slices.Clone(DefaultNullValues)
	} else {
		c.NullValues = slices.Clone(c.NullValues)
	}
	return c
}

func (im ImageOptions) withDefaults(format string) ImageOptions {
	if im.Channels == 0 {
		im.Channels = 3
		if format == "idx" {
			im.Channels = 1
		}
	}
	im.Mean = slices.Clone(im.Mean)
	im.Std = slices.Clone(im.Std)
	return im
}

// FormatFromURI infers a format from a URI's form or extension, or returns
// "" when the URI does not say.
func FormatFromURI(uri string) string {
	if strings.HasPrefix(uri, FashionMNISTScheme) {
		return "idx"
	}
	switch strings.ToLower(path.Ext(uri)) {
	case ".csv", ".tsv":
		return "csv"
	case ".parquet", ".pq":
		return "parquet"
	}
	return ""
}

// Validate checks a spec after WithDefaults; field prefixes the field names
// of the error ("datasets.train").
func (s DatasetSpec) Validate(field string) error {
	bad := func(f string, v any, reason string) error {
		return &InvalidInputError{Field: field + "." + f, Value: v, Reason: reason}
	}
	if err := validDatasetURI(s.URI); err != "" {
		return bad("uri", s.URI, err)
	}
	fm := strings.HasPrefix(s.URI, FashionMNISTScheme)
	switch {
	case s.Format != "" && !slices.Contains(DatasetFormats, s.Format):
		return bad("format", s.Format, "must be one of "+quoteList(DatasetFormats))
	case fm && s.Format != "idx":
		return bad("format", s.Format, `must be "idx" (or empty) for a fashion-mnist URI`)
	case s.Format == "idx" && !fm:
		return bad("format", s.Format, `"idx" reads fashion-mnist:train or fashion-mnist:test only`)
	case !slices.Contains(DatasetTasks, s.Task):
		return bad("task", s.Task, "must be one of "+quoteList(DatasetTasks))
	case !slices.Contains(DatasetRemainders, s.Remainder):
		return bad("remainder", s.Remainder, "must be one of "+quoteList(DatasetRemainders))
	case !slices.Contains(DatasetModes, s.Mode):
		return bad("mode", s.Mode, "must be one of "+quoteList(DatasetModes))
	case s.MemoryBudgetMiB < 1:
		return bad("memory_budget_mib", s.MemoryBudgetMiB, "must be at least 1")
	case s.ShuffleWindowRows < 0:
		return bad("shuffle_window_rows", s.ShuffleWindowRows, "must be 0 (from the budget) or positive")
	case (s.Format == "images" || s.Format == "idx") && s.Label != "":
		return bad("label", s.Label, "must be empty for images and idx: their labels are their folders (classes)")
	case s.Label != "" && slices.Contains(s.Features, s.Label):
		return bad("features", s.Features, fmt.Sprintf("must not hold the label column %q", s.Label))
	}
	for _, l := range []struct {
		name  string
		names []string
	}{{"features", s.Features}, {"categorical", s.Categorical}, {"csv.columns", s.CSV.Columns}} {
		if err := validNames(l.names); err != "" {
			return bad(l.name, l.names, err)
		}
	}
	if s.Format == "csv" || s.Format == "" {
		switch c := s.CSV; {
		case len(c.Delimiter) != 1 || c.Delimiter == "\n" || c.Delimiter == "\r":
			return bad("csv.delimiter", c.Delimiter, "must be one byte, not a newline")
		case len(c.Quote) != 1 || c.Quote == "\n" || c.Quote == "\r":
			return bad("csv.quote", c.Quote, "must be one byte, not a newline")
		case c.Quote == c.Delimiter:
			return bad("csv.quote", c.Quote, "must differ from the delimiter")
		}
	}
	if s.Format == "images" || s.Format == "idx" {
		im := s.Image
		switch {
		case s.Format == "images" && (im.Width < 1 || im.Height < 1):
			return bad("image", fmt.Sprintf("%dx%d", im.Width, im.Height), "width and height must be set (images are resized to them)")
		case s.Format == "idx" && (im.Width != 0 && im.Width != 28 || im.Height != 0 && im.Height != 28):
			return bad("image", fmt.Sprintf("%dx%d", im.Width, im.Height), "Fashion-MNIST images are 28x28 and are not resized: leave width and height unset")
		case im.Width < 0 || im.Height < 0 || im.Width > 8192 || im.Height > 8192:
			return bad("image", fmt.Sprintf("%dx%d", im.Width, im.Height), "width and height must be in [1, 8192]")
		case im.Channels != 1 && im.Channels != 3:
			return bad("image.channels", im.Channels, "must be 1 (grayscale) or 3 (RGB)")
		case s.Format == "idx" && im.Channels != 1:
			return bad("image.channels", im.Channels, "must be 1: Fashion-MNIST is grayscale")
		case len(im.Mean) != 0 && len(im.Mean) != im.Channels:
			return bad("image.mean", im.Mean, fmt.Sprintf("must have one value per channel (%d)", im.Channels))
		case len(im.Std) != 0 && len(im.Std) != im.Channels:
			return bad("image.std", im.Std, fmt.Sprintf("must have one value per channel (%d)", im.Channels))
		}
		for _, v := range im.Std {
			if !(v > 0) {
				return bad("image.std", im.Std, "must be positive")
			}
		}
	}
	return nil
}

func validDatasetURI(u string) string {
	const forms = `must be an absolute path or glob, "file:///...", "s3://bucket/...", "fashion-mnist:train" or "fashion-mnist:test"`
	switch {
	case strings.TrimSpace(u) == "":
		return "is required: " + forms
	case strings.HasPrefix(u, FashionMNISTScheme):
		if split := strings.TrimPrefix(u, FashionMNISTScheme); split != "train" && split != "test" {
			return `names an unknown Fashion-MNIST split: want "fashion-mnist:train" or "fashion-mnist:test"`
		}
		return ""
	case strings.HasPrefix(u, "s3://"):
		if bucket, _, _ := strings.Cut(strings.TrimPrefix(u, "s3://"), "/"); bucket == "" || strings.ContainsAny(bucket, "*?[") {
			return "must name a bucket: s3://bucket/key, s3://bucket/prefix/*.parquet or s3://bucket/prefix/"
		}
	case strings.HasPrefix(u, "file://"):
		if !strings.HasPrefix(u, "file:///") {
			return "a file URI needs an absolute path and no host (file:///dir/file.csv)"
		}
	case strings.HasPrefix(u, "/"):
	default:
		return forms
	}
	// Meta characters of a glob belong in the last element.
	dir := u[:strings.LastIndex(u, "/")+1]
	if strings.ContainsAny(dir, "*?[") {
		return "may hold glob characters (* ? [) in its last element only"
	}
	if _, err := path.Match(u[len(dir):], ""); err != nil {
		return "has a malformed glob: " + err.Error()
	}
	return ""
}

func validNames(names []string) string {
	seen := make(map[string]bool, len(names))
	for _, n := range names {
		if strings.TrimSpace(n) == "" {
			return "must not hold an empty name"
		}
		if seen[n] {
			return fmt.Sprintf("names %q twice", n)
		}
		seen[n] = true
	}
	return ""
}

func quoteList(l []string) string {
	q := make([]string, len(l))
	for i, s := range l {
		q[i] = fmt.Sprintf("%q", s)
	}
	return strings.Join(q, ", ")
}

// WithDefaults returns a deep copy of p with every unset optional field at
// its default.
func (p PreprocessorSpec) WithDefaults() PreprocessorSpec {
	p.Columns = slices.Clone(p.Columns)
	p.Exclude = slices.Clone(p.Exclude)
	if p.Type == SimpleImputer && p.Strategy == "" {
		p.Strategy = "mean"
	}
	if p.Steps != nil {
		steps := make([]PreprocessorSpec, len(p.Steps))
		for i, s := range p.Steps {
			steps[i] = s.WithDefaults()
		}
		p.Steps = steps
	}
	return p
}

// Validate checks a preprocessor after WithDefaults; field names it
// ("preprocessors[2]").
func (p PreprocessorSpec) Validate(field string) error {
	bad := func(f string, v any, reason string) error {
		if f != "" {
			f = "." + f
		}
		return &InvalidInputError{Field: field + f, Value: v, Reason: reason}
	}
	if !slices.Contains(PreprocessorTypes, p.Type) {
		return bad("type", p.Type, "must be one of "+quoteList(PreprocessorTypes))
	}
	if err := validNames(p.Columns); err != "" {
		return bad("columns", p.Columns, err)
	}
	if err := validNames(p.Exclude); err != "" {
		return bad("exclude", p.Exclude, err)
	}
	switch p.Type {
	case Chain:
		if len(p.Steps) == 0 {
			return bad("steps", p.Steps, "a chain needs at least one step")
		}
		if len(p.Columns) > 0 {
			return bad("columns", p.Columns, "a chain has no columns of its own: its steps have")
		}
		for i, s := range p.Steps {
			if err := s.Validate(fmt.Sprintf("%s.steps[%d]", field, i)); err != nil {
				return err
			}
		}
		return nil
	case Concatenator:
	default:
		if len(p.Columns) == 0 {
			return bad("columns", p.Columns, p.Type+" needs at least one column")
		}
	}
	switch {
	case len(p.Steps) > 0:
		return bad("steps", len(p.Steps), "only a chain has steps")
	case len(p.Exclude) > 0 && p.Type != Concatenator:
		return bad("exclude", p.Exclude, "only a concatenator excludes columns")
	case p.MaxCategories < 0:
		return bad("max_categories", p.MaxCategories, "must be 0 (all) or positive")
	case p.MaxCategories > 0 && p.Type != OneHotEncoder:
		return bad("max_categories", p.MaxCategories, "only a one_hot_encoder has max_categories")
	case p.Type != SimpleImputer && p.Strategy != "":
		return bad("strategy", p.Strategy, "only a simple_imputer has a strategy")
	case p.Type != SimpleImputer && p.FillValue != nil:
		return bad("fill_value", p.FillValue, "only a simple_imputer has a fill_value")
	}
	if p.Type == SimpleImputer {
		switch p.Strategy {
		case "mean", "most_frequent":
			if p.FillValue != nil {
				return bad("fill_value", p.FillValue, `only the "constant" strategy uses fill_value`)
			}
		case "constant":
			switch p.FillValue.(type) {
			case float64, string, int, float32, int64:
			case nil:
				return bad("fill_value", p.FillValue, `the "constant" strategy needs a fill_value (a number, or a string for categorical columns)`)
			default:
				return bad("fill_value", p.FillValue, "must be a number or a string")
			}
		default:
			return bad("strategy", p.Strategy, `must be "mean", "most_frequent" or "constant"`)
		}
	}
	return nil
}

// validDatasetName reports why a dataset name (a key of FitInput.Datasets)
// is unusable: it names files in checkpoints.
func validDatasetName(n string) string {
	if n == "" {
		return "must not be empty"
	}
	for _, r := range n {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.') {
			return "may hold letters, digits, '_', '-' and '.' only (it names files in checkpoints)"
		}
	}
	if n == "." || n == ".." {
		return "must not be '.' or '..'"
	}
	return ""
}

// datasetsWithDefaults copies m with every spec defaulted.
func datasetsWithDefaults(m map[string]DatasetSpec) map[string]DatasetSpec {
	if m == nil {
		return nil
	}
	out := make(map[string]DatasetSpec, len(m))
	for k, v := range m {
		out[k] = v.WithDefaults()
	}
	return out
}

// validateData checks FitInput's datasets and preprocessors, in the order of
// the sorted dataset names, so the first error is the same on every replay.
func validateData(datasets map[string]DatasetSpec, pre []PreprocessorSpec) error {
	names := make([]string, 0, len(datasets))
	for k := range datasets {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, n := range names {
		if err := validDatasetName(n); err != "" {
			return &InvalidInputError{Field: "datasets", Value: n, Reason: "dataset name " + err}
		}
		if err := datasets[n].Validate("datasets." + n); err != nil {
			return err
		}
	}
	for i, p := range pre {
		if err := p.Validate(fmt.Sprintf("preprocessors[%d]", i)); err != nil {
			return err
		}
	}
	if len(pre) > 0 {
		train, ok := datasets[TrainDataset]
		switch {
		case !ok:
			return &InvalidInputError{Field: "preprocessors", Value: len(pre), Reason: `preprocessors are fitted on the "train" dataset: datasets.train is missing`}
		case train.Format == "images" || train.Format == "idx":
			return &InvalidInputError{Field: "preprocessors", Value: len(pre), Reason: "preprocessors apply to tables (csv, parquet); images are normalised by image.mean and image.std"}
		}
	}
	return nil
}
