package predict

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strconv"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/compute"
	"github.com/tempotrain/tempotrain/data"
	"github.com/tempotrain/tempotrain/data/format"
)

// tabularModel is the model name of tabular-mlp's checkpoints.
const tabularModel = "tabular-mlp"

// datasetMaxBatch is how many rows one forward pass takes.
const datasetMaxBatch = 256

// datasetPredictor is the Predictor of a checkpoint trained on a run's
// datasets: tabular-mlp's, or a built-in image model's trained on an image
// folder. It takes the raw data the training read and applies the
// checkpoint's pipeline (data.PipelineFile: preprocessors, or the images'
// normalisation), then the network.
//
// Inputs: the raw data, as pipelineInputs says (one tensor per column of
// a table, "pixels" of an image folder).
//
// Outputs of a classifier: "probabilities" FP32 [-1, classes] (softmax),
// "class" INT64 [-1] (the first largest logit, as training counted
// accuracy) and "label" BYTES [-1] (the class's value as the label column
// has it). Of a regression: "value" FP32 [-1], in the label's units.
type datasetPredictor struct {
	info  api.ModelInfo
	state *compute.State
	in    pipelineInputs
	// replicas hold models with their own activations and input tensor (a
	// Model is not safe for concurrent use); made on demand, up to
	// GOMAXPROCS.
	replicas chan *dsReplica
	made     chan struct{}
}

// dsReplica is one model and its input tensor of datasetMaxBatch rows.
type dsReplica struct {
	m *compute.Model
	x compute.Tensor
}

func newDatasetPredictor(dir string, st *compute.State) (*datasetPredictor, error) {
	info, err := api.ParseModelInfo(st.Blobs[api.ModelInfoBlob])
	if err != nil {
		return nil, fmt.Errorf("state blob %s: %w", api.ModelInfoBlob, err)
	}
	pipe, err := data.LoadPipeline(dir)
	if err != nil {
		return nil, err
	}
	if err := checkSizes(info, pipe.Width(), st); err != nil {
		return nil, err
	}
	if info.TargetStd == 0 {
		info.TargetStd = 1
	}
	n := runtime.GOMAXPROCS(0)
	p := &datasetPredictor{info: info, state: st, in: pipelineInputs{pipe},
		replicas: make(chan *dsReplica, n), made: make(chan struct{}, n)}
	// One replica now, so that a checkpoint that does not load fails Load.
	m, err := p.build()
	if err != nil {
		return nil, err
	}
	if got := m.m.InShape(); shapeElems(got) != pipe.Width() {
		return nil, fmt.Errorf("the model takes rows of %v, the pipeline makes %d features", got, pipe.Width())
	}
	p.made <- struct{}{}
	p.replicas <- m
	return p, nil
}

// checkSizes checks what info declares against what the checkpoint holds,
// before a network of that size is built: the pipeline makes the rows the
// network takes, and a tabular-mlp's parameters (its layers' weights and
// biases) are among the state's values.
func checkSizes(info api.ModelInfo, width int, st *compute.State) error {
	if n := info.InputValues(); n != width {
		return fmt.Errorf("the model takes rows of %v (%d values), the pipeline makes %d features", info.Input, n, width)
	}
	if info.Model != tabularModel {
		return nil
	}
	if len(info.Input) != 1 {
		return fmt.Errorf("tabular-mlp of input shape %v (want [width])", info.Input)
	}
	// Each factor is at most api.MaxModelInputValues or MaxModelHiddenWidth
	// (2^20, 2^16) and there are at most 65 layers: no overflow.
	params, in := int64(0), int64(info.Input[0])
	for _, out := range append(slices.Clip(info.Hidden), info.Outputs) {
		params += in*int64(out) + int64(out)
		in = int64(out)
	}
	have := int64(0)
	for _, t := range st.Tensors {
		have += int64(len(t.Data))
	}
	if params > have {
		return fmt.Errorf("tabular-mlp %v → %v → %d has %d parameters, the checkpoint holds %d values", info.Input, info.Hidden, info.Outputs, params, have)
	}
	return nil
}

func (p *datasetPredictor) build() (*dsReplica, error) {
	var m *compute.Model
	var err error
	if p.info.Model == tabularModel {
		if len(p.info.Input) != 1 {
			return nil, fmt.Errorf("tabular-mlp of input shape %v (want [width])", p.info.Input)
		}
		m, err = compute.NewMLP(compute.CPU(), p.info.Input[0], p.info.Hidden, p.info.Outputs, datasetMaxBatch, 0)
	} else {
		m, err = compute.NewModelFor(p.info.Model, compute.CPU(), p.info.Input, p.info.Outputs, datasetMaxBatch, 0)
	}
	if err != nil {
		return nil, err
	}
	if err := m.Load(p.state); err != nil {
		return nil, fmt.Errorf("load %s parameters: %w", p.info.Model, err)
	}
	m.Freeze() // the parameters stay: Linear layers' weights packed once
	return &dsReplica{m: m, x: m.Backend().New(append([]int{datasetMaxBatch}, m.InShape()...)...)}, nil
}

func (p *datasetPredictor) Metadata() Metadata {
	md := Metadata{Name: p.info.Function, Format: StateFormat, Inputs: p.in.specs()}
	if md.Name == "" {
		md.Name = p.info.Model
	}
	if p.info.Task == "classification" {
		md.Outputs = []TensorSpec{
			{Name: "probabilities", Datatype: FP32, Shape: []int{-1, p.info.Outputs}},
			{Name: "class", Datatype: INT64, Shape: []int{-1}},
			{Name: "label", Datatype: BYTES, Shape: []int{-1}},
		}
	} else {
		md.Outputs = []TensorSpec{{Name: "value", Datatype: FP32, Shape: []int{-1}}}
	}
	return md
}

// take returns a free replica, making one while fewer than GOMAXPROCS exist.
func (p *datasetPredictor) take(ctx context.Context) (*dsReplica, error) {
	select {
	case m := <-p.replicas:
		return m, nil
	default:
	}
	select {
	case m := <-p.replicas:
		return m, nil
	case p.made <- struct{}{}:
		m, err := p.build()
		if err != nil {
			<-p.made
		}
		return m, err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (p *datasetPredictor) Predict(ctx context.Context, b Batch) ([]Tensor, error) {
	md := p.Metadata()
	if err := Check(md.Inputs, b); err != nil {
		return nil, err
	}
	rows := b.Rows()
	var outs []Tensor
	k := p.info.Outputs
	if p.info.Task == "classification" {
		outs = []Tensor{
			{Name: "probabilities", Datatype: FP32, Shape: []int{rows, k}, FP32: make([]float32, rows*k)},
			{Name: "class", Datatype: INT64, Shape: []int{rows}, INT64: make([]int64, rows)},
			{Name: "label", Datatype: BYTES, Shape: []int{rows}, Bytes: make([]string, rows)},
		}
	} else {
		outs = []Tensor{{Name: "value", Datatype: FP32, Shape: []int{rows}, FP32: make([]float32, rows)}}
	}
	rp, err := p.take(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { p.replicas <- rp }()
	raw := p.in.newBatch(datasetMaxBatch)
	for lo := 0; lo < rows; lo += datasetMaxBatch {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		n := min(datasetMaxBatch, rows-lo)
		xb := rp.x.Rows(0, n)
		if err := p.in.apply(raw, b, lo, n, xb.Data()); err != nil {
			return nil, err
		}
		out := rp.m.Forward(xb, false).Data()
		for r := 0; r < n; r++ {
			logits := out[r*k : (r+1)*k]
			if p.info.Task == "regression" {
				outs[0].FP32[lo+r] = float32(float64(logits[0])*p.info.TargetStd + p.info.TargetMean)
				continue
			}
			softmax(logits, outs[0].FP32[(lo+r)*k:(lo+r+1)*k])
			c := argmax(logits)
			outs[1].INT64[lo+r] = int64(c)
			outs[2].Bytes[lo+r] = classLabel(p.info.Classes, c)
		}
	}
	return outs, nil
}

func (p *datasetPredictor) Close() error { return nil }

func shapeElems(s []int) int {
	n := 1
	for _, d := range s {
		n *= d
	}
	return n
}

// pipelineInputs are the inputs of a model trained on a run's datasets
// (tabular-mlp's, an image model's trained on an image folder, gbdt's): the
// raw data the training read, which the checkpoint's pipeline
// (data.PipelineFile) turns into the model's feature rows.
//
// A table's: one tensor per column the pipeline reads, named as the
// column, shape [-1]: FP32 for a numeric column (NaN is missing), BYTES for
// a categorical one ("" is missing; a category the fit did not see encodes
// as the preprocessors say). An image folder's: "pixels" FP32
// [-1, C, H, W], each a whole number in [0, 255], the image already at the
// training size (the dataset's bytes).
type pipelineInputs struct {
	pipe *data.Pipeline
}

// specs are the inputs a predictor takes, in the pipeline's column order.
func (in pipelineInputs) specs() []TensorSpec {
	if im := in.pipe.Image; im != nil {
		return []TensorSpec{{Name: "pixels", Datatype: FP32, Shape: []int{-1, im.Channels, im.Height, im.Width}}}
	}
	var specs []TensorSpec
	for _, c := range in.pipe.Inputs {
		dt := FP32
		if c.Kind == format.Categorical {
			dt = BYTES
		}
		specs = append(specs, TensorSpec{Name: c.Name, Datatype: dt, Shape: []int{-1}})
	}
	return specs
}

// newBatch is a raw batch of the pipeline's inputs, for up to rows rows.
func (in pipelineInputs) newBatch(rows int) *format.Batch {
	if im := in.pipe.Image; im != nil {
		px := im.Channels * im.Height * im.Width
		return &format.Batch{PixelsPerRow: px, Pixels: make([]byte, rows*px)}
	}
	return format.NewBatch(in.pipe.Inputs, rows)
}

// apply writes rows [lo, lo+n) of b (checked against specs) through the
// pipeline into x (n × width float32s), by way of raw (from newBatch, for
// at least n rows).
func (in pipelineInputs) apply(raw *format.Batch, b Batch, lo, n int, x []float32) error {
	if err := in.fill(raw, b, lo, n); err != nil {
		return err
	}
	if err := in.pipe.Apply(raw, x); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidInput, err)
	}
	return nil
}

// fill copies rows [lo, lo+n) of the request into raw.
func (in pipelineInputs) fill(raw *format.Batch, b Batch, lo, n int) error {
	if in.pipe.Image != nil {
		t, _ := b.Input("pixels")
		px := raw.PixelsPerRow
		raw.N = n
		for i, v := range t.FP32[lo*px : (lo+n)*px] {
			if !(v >= 0 && v <= 255) || v != float32(math.Trunc(float64(v))) {
				return fmt.Errorf("%w: input \"pixels\" row %d holds %v: pixels are whole numbers in [0, 255]", ErrInvalidInput, lo+i/px, v)
			}
			raw.Pixels[i] = byte(v)
		}
		return nil
	}
	raw.Reset(n)
	for j, c := range in.pipe.Inputs {
		t, _ := b.Input(c.Name)
		if c.Kind == format.Numeric {
			copy(raw.Num[j][:n], t.FP32[lo:lo+n])
			continue
		}
		for i, s := range t.Bytes[lo : lo+n] {
			if s != "" {
				raw.SetString(j, i, s)
			}
		}
	}
	return nil
}

// classLabel is class c's value as the label column had it (classes from
// the pipeline's Label), or c in decimal when the label had fewer classes.
func classLabel(classes []string, c int) string {
	if c >= 0 && c < len(classes) {
		return classes[c]
	}
	return strconv.Itoa(c)
}
