package data

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/data/format"
)

// PipelineFile is the name Save gives a pipeline in a checkpoint directory.
const PipelineFile = "preprocessors.json"

// pipelineVersion is the version of the JSON format Save writes.
const pipelineVersion = 1

// Pipeline turns raw rows (a Batch) into float32 feature rows: the fitted
// preprocessors in order, then the concatenation of the resulting columns.
// It is plain data (JSON): saved with a checkpoint (Save), it applies at
// prediction time unchanged (LoadPipeline, Apply), with no dataset and no
// collective. A Pipeline is immutable once fitted; Apply is safe for
// concurrent use.
type Pipeline struct {
	Version int `json:"version"`
	// Inputs are the raw feature columns the pipeline reads, by name.
	Inputs []format.ColumnInfo `json:"inputs"`
	// Label is the label it was fitted with: class numbers map to
	// Label.Classes.
	Label LabelInfo `json:"label"`
	// Image, for image datasets: the pixels' normalisation.
	Image *ImageInfo `json:"image,omitempty"`
	// Steps are the fitted preprocessors, chains flattened.
	Steps []Step `json:"steps,omitempty"`
	// Features name the output's columns, in order ("age",
	// "city=Paris", ...).
	Features []string `json:"features"`

	mu     sync.Mutex
	cached map[string]*transform // Apply's compiled forms, by input schema
}

// ImageInfo says how an image's bytes become floats: (v/255 - Mean[c]) /
// Std[c] for channel c (default mean 0, std 1).
type ImageInfo struct {
	Channels int       `json:"channels"`
	Height   int       `json:"height"`
	Width    int       `json:"width"`
	Mean     []float64 `json:"mean,omitempty"`
	Std      []float64 `json:"std,omitempty"`
}

// Step is one fitted preprocessor. Which fields it uses depends on Type.
type Step struct {
	Type    string   `json:"type"`
	Columns []string `json:"columns,omitempty"`
	// Count is the number of values each column had in the fit (not
	// missing).
	Count []int64 `json:"count,omitempty"`
	// standard_scaler: mean and population standard deviation.
	Mean []float64 `json:"mean,omitempty"`
	Std  []float64 `json:"std,omitempty"`
	// min_max_scaler.
	Min []float64 `json:"min,omitempty"`
	Max []float64 `json:"max,omitempty"`
	// one_hot_encoder and ordinal_encoder: each column's categories, sorted.
	Categories [][]string `json:"categories,omitempty"`
	// MaxCategories of one_hot_encoder.
	MaxCategories int `json:"max_categories,omitempty"`
	// simple_imputer: the strategy and each column's fill value (a number
	// or a string).
	Strategy string `json:"strategy,omitempty"`
	Fill     []any  `json:"fill,omitempty"`
	// concatenator.
	Exclude []string `json:"exclude,omitempty"`
}

// newPipeline is the identity over cols.
func newPipeline(cols []format.ColumnInfo, label LabelInfo, im *ImageInfo) *Pipeline {
	p := &Pipeline{Version: pipelineVersion, Inputs: cols, Label: label, Image: im}
	if im != nil {
		p.Features = []string{fmt.Sprintf("pixels[%dx%dx%d]", im.Channels, im.Height, im.Width)}
		return p
	}
	for _, c := range cols {
		p.Features = append(p.Features, c.Name)
	}
	return p
}

// Width is the number of float32s a row becomes.
func (p *Pipeline) Width() int {
	if p.Image != nil {
		return p.Image.Channels * p.Image.Height * p.Image.Width
	}
	return len(p.Features)
}

// Apply writes b's rows through the pipeline into x, row-major (b.N ×
// Width float32s). Columns are found by name; b may hold more. A missing
// value left by the steps stays NaN; a category the fit did not see
// encodes as all zeros (one-hot) or -1 (ordinal).
func (p *Pipeline) Apply(b *format.Batch, x []float32) error {
	key := schemaKey(b.Columns, b.PixelsPerRow)
	p.mu.Lock()
	tf, ok := p.cached[key]
	if ok {
		delete(p.cached, key) // in use; put back after
	}
	p.mu.Unlock()
	if !ok {
		var err error
		if tf, err = p.compile(b.Columns, b.PixelsPerRow); err != nil {
			return err
		}
	}
	err := tf.apply(b, x)
	p.mu.Lock()
	if p.cached == nil {
		p.cached = map[string]*transform{}
	}
	p.cached[key] = tf
	p.mu.Unlock()
	return err
}

func schemaKey(cols []format.ColumnInfo, px int) string {
	var sb strings.Builder
	for _, c := range cols {
		sb.WriteString(c.Name)
		sb.WriteByte(byte('0' + c.Kind))
		sb.WriteByte(0)
	}
	sb.WriteString(strconv.Itoa(px))
	return sb.String()
}

// Save writes the pipeline as dir/preprocessors.json.
func (p *Pipeline) Save(dir string) error {
	b, err := json.MarshalIndent(p, "", " ")
	if err != nil {
		return fmt.Errorf("data: encode pipeline: %w", err)
	}
	return writeFileAtomic(filepath.Join(dir, PipelineFile), b)
}

// LoadPipeline reads dir/preprocessors.json.
func LoadPipeline(dir string) (*Pipeline, error) {
	f, err := os.Open(filepath.Join(dir, PipelineFile))
	if err != nil {
		return nil, fmt.Errorf("data: load pipeline: %w", err)
	}
	defer f.Close()
	return ReadPipeline(f)
}

// ReadPipeline decodes a pipeline and checks that it compiles.
func ReadPipeline(r io.Reader) (*Pipeline, error) {
	var p Pipeline
	dec := json.NewDecoder(r)
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("data: decode pipeline: %w", err)
	}
	if p.Version != pipelineVersion {
		return nil, fmt.Errorf("data: pipeline version %d, this build reads %d", p.Version, pipelineVersion)
	}
	px := 0
	if p.Image != nil {
		if err := p.Image.check(); err != nil {
			return nil, fmt.Errorf("data: decode pipeline: %w", err)
		}
		px = p.Image.Channels * p.Image.Height * p.Image.Width
	}
	if _, err := p.compile(p.Inputs, px); err != nil {
		return nil, fmt.Errorf("data: decode pipeline: %w", err)
	}
	return &p, nil
}

// check refuses an image shape that a dataset spec could not have given
// (api.DatasetSpec's checks): 1 or 3 channels, width and height in [1,
// 8192], a mean and a std per channel or none. What a saved pipeline
// declares sizes the rows and the per-channel tables that compile
// allocates.
func (im *ImageInfo) check() error {
	switch {
	case im.Channels != 1 && im.Channels != 3:
		return invalidf("image.channels %d: must be 1 or 3", im.Channels)
	case im.Width < 1 || im.Height < 1 || im.Width > 8192 || im.Height > 8192:
		return invalidf("image %dx%d: width and height must be in [1, 8192]", im.Width, im.Height)
	case len(im.Mean) != 0 && len(im.Mean) != im.Channels:
		return invalidf("image.mean has %d values for %d channels", len(im.Mean), im.Channels)
	case len(im.Std) != 0 && len(im.Std) != im.Channels:
		return invalidf("image.std has %d values for %d channels", len(im.Std), im.Channels)
	}
	return nil
}

func writeFileAtomic(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("data: write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("data: write %s: %w", path, err)
	}
	return nil
}

// wkind is the kind of a working column inside a transform.
type wkind uint8

const (
	wNumeric wkind = iota
	wCategorical
	wOneHot
)

// wcol is a working column: a raw column on its way to the output.
type wcol struct {
	name string
	kind wkind
	src  int       // batch column it starts from
	buf  []float32 // numeric values (scratch)
	// categorical: the batch's codes and dictionary, and the fill of an
	// imputer for missing codes.
	codes   []int32
	dict    *format.Dict
	fill    string
	hasFill bool
	// one-hot: each row's category (-1: none) and the number of categories.
	idx []int32
	k   int
	// set by a numeric step: the column is written, so copied from the
	// batch before the steps run.
}

// op is a compiled step on working columns.
type op interface {
	apply(w []wcol, n int) error
}

// transform is a pipeline compiled against a batch schema: what Apply and
// a Shard run per batch, with scratch buffers of their own.
type transform struct {
	p     *Pipeline
	cols  []wcol
	ops   []op
	out   []int // working columns of the output, in order
	width int
	// image datasets
	px   int
	luts [][256]float32
	hw   int
}

// compile binds the pipeline to a batch schema (cols, pixel bytes per row).
func (p *Pipeline) compile(cols []format.ColumnInfo, px int) (*transform, error) {
	return p.compileSteps(cols, px, len(p.Steps), true)
}

// compileSteps compiles the first nsteps steps; with output it also lays out
// the output (every remaining column must then be numeric or one-hot).
func (p *Pipeline) compileSteps(cols []format.ColumnInfo, px, nsteps int, output bool) (*transform, error) {
	tf := &transform{p: p}
	if p.Image != nil {
		im := p.Image
		want := im.Channels * im.Height * im.Width
		if px != want {
			return nil, invalidf("the pipeline reads images of %dx%dx%d (%d bytes), the data has rows of %d bytes", im.Channels, im.Height, im.Width, want, px)
		}
		tf.px, tf.hw, tf.width = px, im.Height*im.Width, px
		tf.luts = make([][256]float32, im.Channels)
		for c := range tf.luts {
			mean, std := 0.0, 1.0
			if len(im.Mean) > c {
				mean = im.Mean[c]
			}
			if len(im.Std) > c {
				std = im.Std[c]
			}
			for v := range 256 {
				tf.luts[c][v] = float32((float64(v)/255 - mean) / std)
			}
		}
		return tf, nil
	}
	names := make([]string, len(cols))
	for j, c := range cols {
		names[j] = c.Name
	}
	for _, in := range p.Inputs {
		j := slices.Index(names, in.Name)
		if j < 0 {
			return nil, invalidf("the data has no column %q, which the pipeline reads (columns there are: %s)", in.Name, listColumns(names))
		}
		if cols[j].Kind != in.Kind {
			return nil, invalidf("column %q is %s in the data, %s when the pipeline was fitted", in.Name, cols[j].Kind, in.Kind)
		}
		w := wcol{name: in.Name, src: j}
		if in.Kind == format.Categorical {
			w.kind = wCategorical
		}
		tf.cols = append(tf.cols, w)
	}
	for i, st := range p.Steps[:nsteps] {
		o, err := tf.compileStep(st)
		if err != nil {
			return nil, fmt.Errorf("%w: preprocessor %d (%s): %w", ErrInvalid, i, st.Type, err)
		}
		if o != nil {
			tf.ops = append(tf.ops, o)
		}
	}
	if !output {
		return tf, nil
	}
	// The output: a concatenator's columns, or every working column.
	var outNames []string
	if n := len(p.Steps); n > 0 && p.Steps[n-1].Type == api.Concatenator {
		outNames = p.Steps[n-1].Columns
		if len(outNames) == 0 {
			for _, w := range tf.cols {
				if !slices.Contains(p.Steps[n-1].Exclude, w.name) {
					outNames = append(outNames, w.name)
				}
			}
		}
	} else {
		for _, w := range tf.cols {
			outNames = append(outNames, w.name)
		}
	}
	var features []string
	for _, name := range outNames {
		k := tf.find(name)
		if k < 0 {
			return nil, invalidf("concatenator: no column %q (columns there are: %s)", name, listColumns(tf.names()))
		}
		w := &tf.cols[k]
		switch w.kind {
		case wCategorical:
			return nil, invalidf("column %q is categorical and no encoder turns it into numbers: add a one_hot_encoder or ordinal_encoder for it, or leave it out of features", w.name)
		case wOneHot:
			tf.width += w.k
			for _, c := range p.stepOf(w.name).categoriesOf(w.name) {
				features = append(features, w.name+"="+c)
			}
		default:
			tf.width++
			features = append(features, w.name)
		}
		tf.out = append(tf.out, k)
	}
	if len(p.Steps) > 0 && !slices.Equal(features, p.Features) && len(p.Features) > 0 {
		return nil, fmt.Errorf("data: the pipeline's features %s do not match what its steps make, %s", listColumns(p.Features), listColumns(features))
	}
	return tf, nil
}

func (tf *transform) find(name string) int {
	for k := range tf.cols {
		if tf.cols[k].name == name {
			return k
		}
	}
	return -1
}

func (tf *transform) names() []string {
	out := make([]string, len(tf.cols))
	for k, w := range tf.cols {
		out[k] = w.name
	}
	return out
}

// stepOf returns the encoder step that one-hot encodes column name.
func (p *Pipeline) stepOf(name string) *Step {
	for i := len(p.Steps) - 1; i >= 0; i-- {
		if p.Steps[i].Type == api.OneHotEncoder && slices.Contains(p.Steps[i].Columns, name) {
			return &p.Steps[i]
		}
	}
	return nil
}

func (st *Step) categoriesOf(name string) []string {
	return st.Categories[slices.Index(st.Columns, name)]
}

// colsOf finds a step's columns among the working columns, of the kinds
// allowed.
func (tf *transform) colsOf(st Step, kinds ...wkind) ([]int, error) {
	ks := make([]int, len(st.Columns))
	for i, name := range st.Columns {
		k := tf.find(name)
		if k < 0 {
			return nil, fmt.Errorf("no column %q (columns there are: %s)", name, listColumns(tf.names()))
		}
		if !slices.Contains(kinds, tf.cols[k].kind) {
			return nil, fmt.Errorf("column %q is %s: %s takes %s columns", name, tf.cols[k].kind, st.Type, kindWords(kinds))
		}
		ks[i] = k
	}
	return ks, nil
}

func (k wkind) String() string {
	switch k {
	case wNumeric:
		return "numeric"
	case wCategorical:
		return "categorical (strings; encode it first)"
	}
	return "one-hot encoded"
}

func kindWords(kinds []wkind) string {
	var w []string
	for _, k := range kinds {
		switch k {
		case wNumeric:
			w = append(w, "numeric")
		case wCategorical:
			w = append(w, "categorical")
		}
	}
	return strings.Join(w, " or ")
}

func (tf *transform) compileStep(st Step) (op, error) {
	switch st.Type {
	case api.StandardScaler, api.MinMaxScaler:
		ks, err := tf.colsOf(st, wNumeric)
		if err != nil {
			return nil, err
		}
		o := &scaleOp{cols: ks, shift: make([]float32, len(ks)), scale: make([]float32, len(ks))}
		for i := range ks {
			var lo, span float64
			if st.Type == api.StandardScaler {
				if len(st.Mean) != len(ks) || len(st.Std) != len(ks) {
					return nil, fmt.Errorf("not fitted: %d means and %d deviations for %d columns", len(st.Mean), len(st.Std), len(ks))
				}
				lo, span = st.Mean[i], st.Std[i]
			} else {
				if len(st.Min) != len(ks) || len(st.Max) != len(ks) {
					return nil, fmt.Errorf("not fitted: %d minima and %d maxima for %d columns", len(st.Min), len(st.Max), len(ks))
				}
				lo, span = st.Min[i], st.Max[i]-st.Min[i]
			}
			if span == 0 { // a constant column: sklearn scales by 1
				span = 1
			}
			o.shift[i], o.scale[i] = float32(lo), float32(1/span)
		}
		return o, nil
	case api.SimpleImputer:
		ks, err := tf.colsOf(st, wNumeric, wCategorical)
		if err != nil {
			return nil, err
		}
		if len(st.Fill) != len(ks) {
			return nil, fmt.Errorf("not fitted: %d fill values for %d columns", len(st.Fill), len(ks))
		}
		o := &imputeOp{}
		for i, k := range ks {
			w := &tf.cols[k]
			if w.kind == wNumeric {
				f, ok := toFloat(st.Fill[i])
				if !ok {
					return nil, fmt.Errorf("column %q is numeric, its fill value %v is not a number", w.name, st.Fill[i])
				}
				o.num = append(o.num, k)
				o.vals = append(o.vals, float32(f))
			} else {
				s, ok := st.Fill[i].(string)
				if !ok {
					s = fmt.Sprint(st.Fill[i])
				}
				w.fill, w.hasFill = s, true
			}
		}
		return o, nil
	case api.OneHotEncoder, api.OrdinalEncoder:
		ks, err := tf.colsOf(st, wCategorical)
		if err != nil {
			return nil, err
		}
		if len(st.Categories) != len(ks) {
			return nil, fmt.Errorf("not fitted: categories of %d columns for %d columns", len(st.Categories), len(ks))
		}
		o := &encodeOp{onehot: st.Type == api.OneHotEncoder}
		for i, k := range ks {
			w := &tf.cols[k]
			e := &encoding{col: k, index: make(map[string]int32, len(st.Categories[i])), fill: w.fill, hasFill: w.hasFill}
			for c, v := range st.Categories[i] {
				e.index[v] = int32(c)
			}
			o.cols = append(o.cols, e)
			if o.onehot {
				w.kind, w.k = wOneHot, len(st.Categories[i])
			} else {
				w.kind = wNumeric
			}
		}
		return o, nil
	case api.Concatenator:
		return nil, nil
	}
	return nil, fmt.Errorf("unknown type %q", st.Type)
}

func toFloat(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, true
	case float32:
		return float64(x), true
	case int:
		return float64(x), true
	case int64:
		return float64(x), true
	case json.Number:
		f, err := x.Float64()
		return f, err == nil
	}
	return 0, false
}

// apply runs the transform on b's rows into x.
func (tf *transform) apply(b *format.Batch, x []float32) error {
	n := b.N
	if tf.px > 0 {
		if len(x) < n*tf.px || len(b.Pixels) < n*tf.px {
			return fmt.Errorf("data: apply: %d rows of %d pixels need %d float32s, x holds %d", n, tf.px, n*tf.px, len(x))
		}
		for i := 0; i < n; i++ {
			src := b.Pixels[i*tf.px : (i+1)*tf.px]
			dst := x[i*tf.px : (i+1)*tf.px]
			for c := range tf.luts {
				lut := &tf.luts[c]
				for k, v := range src[c*tf.hw : (c+1)*tf.hw] {
					dst[c*tf.hw+k] = lut[v]
				}
			}
		}
		return nil
	}
	if len(x) < n*tf.width {
		return fmt.Errorf("data: apply: %d rows of %d features need %d float32s, x holds %d", n, tf.width, n*tf.width, len(x))
	}
	if err := tf.run(b); err != nil {
		return err
	}
	tf.write(n, x)
	return nil
}

// run takes b's columns through the steps.
func (tf *transform) run(b *format.Batch) error {
	n := b.N
	for k := range tf.cols {
		w := &tf.cols[k]
		if b.Columns[w.src].Kind == format.Numeric {
			w.kind = wNumeric
			w.buf = grow(w.buf, n)
			copy(w.buf, b.Num[w.src][:n])
		} else {
			w.kind = wCategorical
			w.codes, w.dict = b.Cat[w.src][:n], b.Dicts[w.src]
		}
	}
	for _, o := range tf.ops {
		if err := o.apply(tf.cols, n); err != nil {
			return err
		}
	}
	return nil
}

// write lays the output columns of n rows out in x, row-major.
func (tf *transform) write(n int, x []float32) {
	width := tf.width
	off := 0
	for _, k := range tf.out {
		w := &tf.cols[k]
		switch w.kind {
		case wNumeric:
			for i, v := range w.buf[:n] {
				x[i*width+off] = v
			}
			off++
		case wOneHot:
			for i, c := range w.idx[:n] {
				row := x[i*width+off : i*width+off+w.k]
				clear(row)
				if c >= 0 {
					row[c] = 1
				}
			}
			off += w.k
		}
	}
}

// scaleOp is (v - shift) * scale per column.
type scaleOp struct {
	cols         []int
	shift, scale []float32
}

func (o *scaleOp) apply(w []wcol, n int) error {
	for i, k := range o.cols {
		sh, sc := o.shift[i], o.scale[i]
		buf := w[k].buf[:n]
		for r, v := range buf {
			buf[r] = (v - sh) * sc
		}
	}
	return nil
}

// imputeOp fills NaN in numeric columns (categorical fills are applied by
// the encoders, through wcol.fill).
type imputeOp struct {
	num  []int
	vals []float32
}

func (o *imputeOp) apply(w []wcol, n int) error {
	for i, k := range o.num {
		f := o.vals[i]
		buf := w[k].buf[:n]
		for r, v := range buf {
			if v != v {
				buf[r] = f
			}
		}
	}
	return nil
}

// encoding maps one categorical column's codes to category numbers.
type encoding struct {
	col     int
	index   map[string]int32
	dict    *format.Dict // the dictionary trans is for
	trans   []int32      // code → category (-1: unknown)
	fill    string
	hasFill bool
	strs    []string
}

// category returns the category of code c: -1 unknown, -2 missing.
func (e *encoding) category(c int32, d *format.Dict) int32 {
	if c < 0 {
		if e.hasFill {
			if v, ok := e.index[e.fill]; ok {
				return v
			}
			return -1
		}
		return -2
	}
	if d != e.dict {
		e.dict, e.trans = d, e.trans[:0]
	}
	if int(c) >= len(e.trans) {
		e.strs = d.StringsFrom(e.strs[:0], len(e.trans))
		for _, s := range e.strs {
			v, ok := e.index[s]
			if !ok {
				v = -1
			}
			e.trans = append(e.trans, v)
		}
	}
	return e.trans[c]
}

type encodeOp struct {
	onehot bool
	cols   []*encoding
}

func (o *encodeOp) apply(w []wcol, n int) error {
	for _, e := range o.cols {
		wc := &w[e.col]
		codes, d := wc.codes[:n], wc.dict
		if o.onehot {
			wc.idx = grow(wc.idx, n)
			for r, c := range codes {
				v := e.category(c, d)
				wc.idx[r] = max(v, -1)
			}
			wc.kind = wOneHot
			continue
		}
		wc.buf = grow(wc.buf, n)
		for r, c := range codes {
			switch v := e.category(c, d); v {
			case -2:
				wc.buf[r] = float32(math.NaN())
			default:
				wc.buf[r] = float32(v)
			}
		}
		wc.kind = wNumeric
	}
	return nil
}

// labelMap turns label values into class numbers (classification) or
// copies them (regression).
type labelMap struct {
	info     LabelInfo
	identity bool // image classes: the value is the class number
	nums     map[float32]int32
	enc      encoding
}

func newLabelMap(info LabelInfo, s *Shard) (labelMap, error) {
	m := labelMap{info: info}
	if !s.hasLabel() {
		return m, nil
	}
	own := s.own
	if info.Column != own.Column {
		return m, invalidf("the pipeline's label is %q, the dataset's %q", info.Column, own.Column)
	}
	if s.src.FixedClasses() != nil {
		if !slices.Equal(info.Classes, own.Classes) {
			return m, invalidf("the pipeline's classes %s differ from this dataset's %s", listColumns(info.Classes), listColumns(own.Classes))
		}
		m.identity = true
		return m, nil
	}
	if info.Task != "classification" {
		return m, nil
	}
	if info.Numeric != own.Numeric {
		return m, invalidf("label %q is numeric in one of the pipeline and the dataset, categorical in the other", own.Column)
	}
	if info.Numeric {
		m.nums = make(map[float32]int32, len(info.Classes))
		for i, c := range info.Classes {
			f, err := strconv.ParseFloat(c, 32)
			if err != nil {
				return m, fmt.Errorf("data: pipeline class %q is not a number", c)
			}
			m.nums[float32(f)] = int32(i)
		}
		return m, nil
	}
	m.enc.index = make(map[string]int32, len(info.Classes))
	for i, c := range info.Classes {
		m.enc.index[c] = int32(i)
	}
	return m, nil
}

// fill writes the labels of b's column j into y.
func (m *labelMap) fill(b *format.Batch, j int, y []float32) error {
	n := b.N
	if b.Num[j] != nil {
		vals := b.Num[j][:n]
		if m.identity || m.info.Task != "classification" {
			copy(y, vals)
			return nil
		}
		for i, v := range vals {
			c, ok := m.nums[v]
			if !ok {
				return invalidf("label %q: value %v is not among the %d classes of the training data", m.info.Column, v, len(m.info.Classes))
			}
			y[i] = float32(c)
		}
		return nil
	}
	for i, code := range b.Cat[j][:n] {
		c := m.enc.category(code, b.Dicts[j])
		if c < 0 {
			return invalidf("label %q: value %q is not among the %d classes of the training data", m.info.Column, b.Dicts[j].String(code), len(m.info.Classes))
		}
		y[i] = float32(c)
	}
	return nil
}
