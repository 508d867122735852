package predict

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/tempotrain/tempotrain/data"
	"github.com/tempotrain/tempotrain/data/format"
	"github.com/tempotrain/tempotrain/gbdt"
	"github.com/tempotrain/tempotrain/storage"
)

// GBDTFormat is the format (Meta "format") of the built-in gbdt training
// function's checkpoints (builtin.GBDTFormat): the model in XGBoost's JSON
// format (Meta "file", default model.json) and the fitted pipeline
// (data.PipelineFile), with the trainer's state and the features'
// importance beside them.
const GBDTFormat = "gbdt v1"

// XGBoostFormat is the Metadata format of a predictor loaded from an
// XGBoost JSON model file (Load of a URI ending in .json).
const XGBoostFormat = "xgboost json"

// gbdtModelFile is the model file of gbdt checkpoints whose Meta names none.
const gbdtModelFile = "model.json"

// gbdtChunkValues bounds the features of the rows that go through the
// pipeline and the trees at a time (the scratch memory of a Predict), and
// gbdtChunkRows their number (so that a long Predict checks its context
// now and then).
const (
	gbdtChunkValues = 1 << 18
	gbdtChunkRows   = 16384
)

func init() {
	MustRegister(GBDTFormat, loadGBDT)
}

// gbdtPredictor applies a gradient-boosted tree ensemble (gbdt.Model, read
// from XGBoost's JSON format): a gbdt checkpoint's, after the checkpoint's
// pipeline, or an XGBoost model file's, on a feature matrix.
//
// Inputs of a checkpoint: the raw data the training read, as
// pipelineInputs says (one tensor per column of a table, NaN or "" where
// missing). Of a model file: "features" FP32 [-1, num_feature], NaN where
// a value is missing (XGBoost's default missing value).
//
// Outputs, by objective, with the model's raw scores "margin" last:
//
//   - binary:logistic: "probabilities" FP32 [-1, 2] (p(0), p(1)), "class"
//     INT64 [-1] (1 when p(1) > 0.5, as XGBoost's error metric counts),
//     "label" BYTES [-1] (a checkpoint's only: the class's value as the
//     label column had it), "margin" FP32 [-1];
//   - multi:softprob and multi:softmax: "probabilities" FP32 [-1, k]
//     (softmax of the margins), "class" INT64 [-1] (the first largest
//     margin, what multi:softmax predicts), "label" (a checkpoint's),
//     "margin" FP32 [-1, k];
//   - reg:squarederror, reg:logistic, count:poisson: "value" FP32 [-1]
//     (what XGBoost's predict gives: the margin, its sigmoid, its
//     exponential), "margin" FP32 [-1].
//
// Probabilities and values are computed from the float32 margins as
// package gbdt computes them for its metrics, so a checkpoint's predictor
// scores its validation data exactly as the run reported.
type gbdtPredictor struct {
	model *gbdt.Model
	// forest is the model laid out for prediction, once.
	forest *gbdt.Forest
	chunk  int
	// in is a checkpoint's pipeline; nil for a model file.
	in      *pipelineInputs
	classes []string
	k       int
	md      Metadata
	scratch sync.Pool // *gbdtScratch
}

// gbdtScratch is one Predict's raw batch and feature rows.
type gbdtScratch struct {
	raw *format.Batch
	x   []float32
}

// loadGBDT reads a gbdt checkpoint.
func loadGBDT(_ context.Context, dir string, meta map[string]string) (Predictor, error) {
	file := meta["file"]
	if file == "" {
		file = gbdtModelFile
	}
	f, err := os.Open(filepath.Join(dir, filepath.FromSlash(file)))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	m, err := gbdt.LoadJSON(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	pipe, err := data.LoadPipeline(dir)
	if err != nil {
		return nil, err
	}
	if w := pipe.Width(); w != m.NumFeature {
		return nil, fmt.Errorf("the model takes %d features, the pipeline makes %d", m.NumFeature, w)
	}
	name := meta["model"]
	if name == "" {
		name = "gbdt"
	}
	p, err := newGBDTPredictor(m, &pipelineInputs{pipe}, Metadata{Name: name, Format: GBDTFormat})
	if err != nil {
		return nil, err
	}
	return p, nil
}

// LoadXGBoost reads a model in XGBoost's JSON format (what
// Booster.save_model("model.json") writes, or a gbdt checkpoint's
// model.json) and returns its Predictor: input "features" FP32
// [-1, num_feature]. Load calls it for URIs that end in .json.
func LoadXGBoost(r io.Reader) (Predictor, error) {
	m, err := gbdt.LoadJSON(r)
	if err != nil {
		return nil, err
	}
	p, err := newGBDTPredictor(m, nil, Metadata{Name: "xgboost", Format: XGBoostFormat})
	if err != nil {
		return nil, err
	}
	return p, nil
}

// isModelFile says whether Load's uri names an XGBoost JSON model file
// rather than a checkpoint directory (whose last element is
// checkpoint_NNNNNN).
func isModelFile(uri string) bool {
	return strings.HasSuffix(strings.ToLower(strings.TrimSpace(uri)), ".json")
}

// loadModelFile reads the XGBoost JSON model file at uri: an absolute or
// relative path, file:///path or s3://bucket/key.
func loadModelFile(ctx context.Context, uri string) (Predictor, error) {
	b, err := storage.ReadURI(ctx, uri)
	if err != nil {
		return nil, fmt.Errorf("predict: model file %s: %w", uri, err)
	}
	p, err := LoadXGBoost(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("predict: model file %s: %w", uri, err)
	}
	p.(*gbdtPredictor).md.Checkpoint = uri
	return p, nil
}

func newGBDTPredictor(m *gbdt.Model, in *pipelineInputs, md Metadata) (*gbdtPredictor, error) {
	f, err := gbdt.NewForest(m)
	if err != nil {
		return nil, err
	}
	p := &gbdtPredictor{model: m, forest: f, in: in, k: m.NumGroups(), md: md,
		chunk: max(1, min(gbdtChunkRows, gbdtChunkValues/max(m.NumFeature, 1)))}
	if in != nil {
		md.Inputs = in.specs()
		p.classes = in.pipe.Label.Classes
	} else {
		md.Inputs = []TensorSpec{{Name: "features", Datatype: FP32, Shape: []int{-1, m.NumFeature}}}
	}
	marginShape := []int{-1}
	if p.k > 1 {
		marginShape = []int{-1, p.k}
	}
	if p.classifier() {
		classes := p.k
		if m.Objective == gbdt.BinaryLogistic {
			classes = 2
		}
		md.Outputs = []TensorSpec{
			{Name: "probabilities", Datatype: FP32, Shape: []int{-1, classes}},
			{Name: "class", Datatype: INT64, Shape: []int{-1}},
		}
		if in != nil {
			md.Outputs = append(md.Outputs, TensorSpec{Name: "label", Datatype: BYTES, Shape: []int{-1}})
		}
	} else {
		md.Outputs = []TensorSpec{{Name: "value", Datatype: FP32, Shape: []int{-1}}}
	}
	md.Outputs = append(md.Outputs, TensorSpec{Name: "margin", Datatype: FP32, Shape: marginShape})
	p.md = md
	return p, nil
}

func (p *gbdtPredictor) classifier() bool {
	switch p.model.Objective {
	case gbdt.BinaryLogistic, gbdt.MultiSoftprob, gbdt.MultiSoftmax:
		return true
	}
	return false
}

func (p *gbdtPredictor) Metadata() Metadata {
	md := p.md
	md.Inputs = append([]TensorSpec(nil), md.Inputs...)
	md.Outputs = append([]TensorSpec(nil), md.Outputs...)
	return md
}

func (p *gbdtPredictor) Close() error { return nil }

func (p *gbdtPredictor) Predict(ctx context.Context, b Batch) ([]Tensor, error) {
	if err := Check(p.md.Inputs, b); err != nil {
		return nil, err
	}
	rows := b.Rows()
	k := p.k
	outs := make([]Tensor, len(p.md.Outputs))
	for i, s := range p.md.Outputs {
		shape := append([]int{rows}, s.Shape[1:]...)
		t := Tensor{Name: s.Name, Datatype: s.Datatype, Shape: shape}
		switch n := rows * shapeElems(s.Shape[1:]); s.Datatype {
		case FP32:
			t.FP32 = make([]float32, n)
		case INT64:
			t.INT64 = make([]int64, n)
		case BYTES:
			t.Bytes = make([]string, n)
		}
		outs[i] = t
	}
	margin := outs[len(outs)-1].FP32
	var s *gbdtScratch
	if p.in != nil {
		s, _ = p.scratch.Get().(*gbdtScratch)
		if s == nil {
			s = &gbdtScratch{raw: p.in.newBatch(p.chunk), x: make([]float32, p.chunk*p.model.NumFeature)}
		}
		defer p.scratch.Put(s)
	}
	nf := p.model.NumFeature
	for lo := 0; lo < rows; lo += p.chunk {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		n := min(p.chunk, rows-lo)
		var x []float32
		if p.in == nil {
			x = b.Inputs[0].FP32[lo*nf : (lo+n)*nf]
		} else {
			x = s.x[:n*nf]
			if err := p.in.apply(s.raw, b, lo, n, x); err != nil {
				return nil, err
			}
		}
		p.forest.Margins(x, n, margin[lo*k:(lo+n)*k])
	}
	p.finish(outs, margin, rows)
	return outs, nil
}

// finish computes the outputs other than the margins.
func (p *gbdtPredictor) finish(outs []Tensor, margin []float32, rows int) {
	k := p.k
	switch p.model.Objective {
	case gbdt.RegSquaredError:
		copy(outs[0].FP32, margin)
	case gbdt.RegLogistic:
		for i, m := range margin {
			outs[0].FP32[i] = sigmoid32(m)
		}
	case gbdt.CountPoisson:
		for i, m := range margin {
			outs[0].FP32[i] = float32(math.Exp(float64(m)))
		}
	case gbdt.BinaryLogistic:
		probs, class := outs[0].FP32, outs[1].INT64
		for i, m := range margin {
			p1 := sigmoid32(m)
			probs[2*i], probs[2*i+1] = 1-p1, p1
			if p1 > 0.5 {
				class[i] = 1
			}
		}
	default: // multi-class
		probs, class := outs[0].FP32, outs[1].INT64
		e := make([]float64, k)
		for i := range rows {
			mg := margin[i*k : (i+1)*k]
			softmax32(mg, e, probs[i*k:(i+1)*k])
			class[i] = int64(argmax(mg))
		}
	}
	if p.classifier() && p.in != nil {
		for i, c := range outs[1].INT64 {
			outs[2].Bytes[i] = classLabel(p.classes, int(c))
		}
	}
}

// sigmoid32 is the logistic function as package gbdt (after XGBoost)
// computes it: in float64 from a float32 margin, rounded to float32.
func sigmoid32(x float32) float32 {
	return float32(1 / (1 + math.Exp(float64(min(-x, 88.7)))))
}

// softmax32 is the softmax of margins m as package gbdt computes it (the
// maximum subtracted in float32, exponentials summed in float64), rounded
// into out; e is scratch of len(m).
func softmax32(m []float32, e []float64, out []float32) {
	mx := m[0]
	for _, v := range m[1:] {
		mx = max(mx, v)
	}
	s := 0.0
	for c, v := range m {
		e[c] = math.Exp(float64(v - mx))
		s += e[c]
	}
	for c := range out {
		out[c] = float32(e[c] / s)
	}
}
