package predict

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"runtime"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/compute"
	"github.com/tempotrain/tempotrain/data/format"
)

// StateFormat is the format (Meta "format") of the built-in trainers'
// checkpoints: one file in compute's versioned state format (Meta "file")
// holding the model's name (Blob "model"), its parameters and buffers.
const StateFormat = "tempotrain state v1"

// defaultStateFile is the state file of checkpoints whose Meta names none.
const defaultStateFile = "state.ttstate"

func init() {
	MustRegister(StateFormat, loadState)
}

// loadState reads a built-in checkpoint. The image classifiers (mlp, cnn,
// resnet18, trained on Fashion-MNIST) are known here; a table model's
// checkpoint carries its own kind.
func loadState(_ context.Context, dir string, meta map[string]string) (Predictor, error) {
	file := meta["file"]
	if file == "" {
		file = defaultStateFile
	}
	st, err := compute.LoadFile(filepath.Join(dir, filepath.FromSlash(file)))
	if err != nil {
		return nil, err
	}
	model := string(st.Blobs["model"])
	switch model {
	case "mlp", "cnn", "resnet18":
		if _, ok := st.Blobs[api.ModelInfoBlob]; ok {
			// Trained on a run's datasets (an image folder, a table).
			return newDatasetPredictor(dir, st)
		}
		return newImageClassifier(model, st)
	case tabularModel:
		return newDatasetPredictor(dir, st)
	}
	return nil, fmt.Errorf("%w: state checkpoint of model %q (known: mlp, cnn, resnet18, tabular-mlp)", ErrUnknownFormat, model)
}

// imageMaxBatch is how many images one forward pass takes.
const imageMaxBatch = 256

// imageClassifier is a built-in Fashion-MNIST model. Its input "pixels" is
// FP32 [-1, 1, 28, 28] in [0, 255], as the dataset's bytes; it normalises
// them exactly as training did (format.Normalize) before the model. Outputs:
// "probabilities" FP32 [-1, 10] (softmax) and "class" INT64 [-1] (argmax).
type imageClassifier struct {
	name  string
	state *compute.State
	norm  *format.Normalize
	// replicas hold models with their own activations and input buffer (a
	// Model is not safe for concurrent use); made on demand, up to
	// GOMAXPROCS.
	replicas chan *replica
	made     chan struct{}
}

// replica is one model and its input tensor of imageMaxBatch images,
// reused by every Predict that takes it.
type replica struct {
	m *compute.Model
	x compute.Tensor
}

func newImageClassifier(model string, st *compute.State) (*imageClassifier, error) {
	n := runtime.GOMAXPROCS(0)
	c := &imageClassifier{name: model, state: st, norm: format.NewNormalize(format.FashionMNISTMean, format.FashionMNISTStd),
		replicas: make(chan *replica, n), made: make(chan struct{}, n)}
	// One replica now, so that a checkpoint that does not load fails Load.
	m, err := c.build()
	if err != nil {
		return nil, err
	}
	c.made <- struct{}{}
	c.replicas <- m
	return c, nil
}

func (c *imageClassifier) build() (*replica, error) {
	m, err := compute.NewModel(c.name, compute.CPU(), imageMaxBatch, 0)
	if err != nil {
		return nil, err
	}
	if err := m.Load(c.state); err != nil {
		return nil, fmt.Errorf("load %s parameters: %w", c.name, err)
	}
	m.Freeze() // the parameters stay: Linear layers' weights packed once
	return &replica{m: m, x: m.Backend().New(imageMaxBatch, 1, 28, 28)}, nil
}

func (c *imageClassifier) Metadata() Metadata {
	return Metadata{Name: "mnist-" + c.name, Format: StateFormat,
		Inputs: []TensorSpec{{Name: "pixels", Datatype: FP32, Shape: []int{-1, 1, 28, 28}}},
		Outputs: []TensorSpec{
			{Name: "probabilities", Datatype: FP32, Shape: []int{-1, 10}},
			{Name: "class", Datatype: INT64, Shape: []int{-1}},
		}}
}

// take returns a free replica, making one while fewer than GOMAXPROCS exist.
func (c *imageClassifier) take(ctx context.Context) (*replica, error) {
	select {
	case m := <-c.replicas:
		return m, nil
	default:
	}
	select {
	case m := <-c.replicas:
		return m, nil
	case c.made <- struct{}{}:
		m, err := c.build()
		if err != nil {
			<-c.made
		}
		return m, err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (c *imageClassifier) Predict(ctx context.Context, b Batch) ([]Tensor, error) {
	md := c.Metadata()
	if err := Check(md.Inputs, b); err != nil {
		return nil, err
	}
	in, _ := b.Input("pixels")
	rows := in.Rows()
	probs := Tensor{Name: "probabilities", Datatype: FP32, Shape: []int{rows, 10}, FP32: make([]float32, rows*10)}
	class := Tensor{Name: "class", Datatype: INT64, Shape: []int{rows}, INT64: make([]int64, rows)}
	rp, err := c.take(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { c.replicas <- rp }()
	m, x := rp.m, rp.x
	const pixels = 28 * 28
	for lo := 0; lo < rows; lo += imageMaxBatch {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		n := min(imageMaxBatch, rows-lo)
		xb := x.Rows(0, n)
		c.normalize(xb.Data(), in.FP32[lo*pixels:(lo+n)*pixels])
		logits := m.Forward(xb, false).Data()
		for r := 0; r < n; r++ {
			softmax(logits[r*10:(r+1)*10], probs.FP32[(lo+r)*10:(lo+r+1)*10])
			class.INT64[lo+r] = int64(argmax(logits[r*10 : (r+1)*10]))
		}
	}
	return []Tensor{probs, class}, nil
}

// normalize maps pixels in [0, 255] into dst as training did: through the
// table for whole values (bit for bit what the loader gives), by the
// formula otherwise. One conversion and one comparison pick the table
// (a NaN or a value out of int32's range converts to something the
// comparison rejects), so the loop costs a few percent of the MLP's
// forward pass rather than a tenth.
func (c *imageClassifier) normalize(dst, src []float32) {
	tab := c.norm
	dst = dst[:len(src)]
	for i, v := range src {
		k := int32(v)
		if uint32(k) <= 255 && float32(k) == v {
			dst[i] = tab[uint8(k)]
		} else {
			dst[i] = float32((float64(v)/255 - format.FashionMNISTMean) / format.FashionMNISTStd)
		}
	}
}

func (c *imageClassifier) Close() error { return nil }

// argmax is the first index of the largest value, as the trainers' accuracy
// counts it.
func argmax(v []float32) int {
	best := 0
	for i := 1; i < len(v); i++ {
		if v[i] > v[best] {
			best = i
		}
	}
	return best
}

func softmax(logits, out []float32) {
	mx := math.Inf(-1)
	for _, v := range logits {
		mx = max(mx, float64(v))
	}
	var sum float64
	for i, v := range logits {
		e := math.Exp(float64(v) - mx)
		out[i] = float32(e)
		sum += e
	}
	for i := range out {
		out[i] = float32(float64(out[i]) / sum)
	}
}
