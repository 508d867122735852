package compute

import (
	"fmt"
	"sort"
)

// The models of the built-in training functions. A ReLU right after a
// Linear or Conv2D, and a 2×2 max pooling after that, are fused into it: the
// same function as PyTorch's separate modules, with fewer trips through
// memory. Each builds for an input shape (without the batch dimension) and a
// number of classes; NewModel builds them for Fashion-MNIST (1×28×28, 10
// classes), NewModelFor for any other data.
var models = map[string]func(in []int, classes int) ([]Named, error){
	// MLP in-512-256-classes (784-512-256-10 on Fashion-MNIST); any input
	// shape, flattened.
	"mlp": func(in []int, classes int) ([]Named, error) {
		return []Named{
			{"", NewFlatten()},
			{"fc1", NewLinearReLU(prod(in), 512)},
			{"fc2", NewLinearReLU(512, 256)},
			{"fc3", NewLinear(256, classes)},
		}, nil
	},
	// The CNN of issue 4: conv C→32 3×3 pad 1, ReLU, maxpool 2; conv 32→64
	// 3×3 pad 1, ReLU, maxpool 2; fc 64·⌊H/4⌋·⌊W/4⌋→128 (3136 for 28×28),
	// ReLU; fc 128→classes. Inputs [C, H, W] with H, W ≥ 4.
	"cnn": func(in []int, classes int) ([]Named, error) {
		if len(in) != 3 || in[1] < 4 || in[2] < 4 {
			return nil, fmt.Errorf("input shape %v: want [channels height width] with height and width at least 4", in)
		}
		h, w := in[1]/2/2, in[2]/2/2
		return []Named{
			{"conv1", NewConv2DReLUPool(in[0], 32, 3, 1, 1)},
			{"conv2", NewConv2DReLUPool(32, 64, 3, 1, 1)},
			{"", NewFlatten()},
			{"fc1", NewLinearReLU(64*h*w, 128)},
			{"fc2", NewLinear(128, classes)},
		}, nil
	},
	// torchvision's ResNet-18 with a C-channel 7×7 stride-2 stem, as Ray
	// Train's Fashion-MNIST example adapts it (global average pooling makes
	// it fit any input of at least 1×1). The example replaces conv1 after
	// torchvision has initialised the model, so the stem keeps nn.Conv2d's
	// default U(±1/√(C·49)) where the other convolutions get torchvision's
	// Kaiming normal (fan out, √(2/(64·49)) ≈ 0.025 for the stem: a third
	// of the scale, which under the BatchNorm after it gives the stem about
	// ten times the effective learning rate, lr/|w|²):
	// 28² → stem 14² → maxpool 7² → layer1 7² → layer2 4² → layer3 2² → layer4 1² → fc.
	"resnet18": func(in []int, classes int) ([]Named, error) {
		if len(in) != 3 {
			return nil, fmt.Errorf("input shape %v: want [channels height width]", in)
		}
		l := []Named{
			{"conv1", &Conv2D{C: in[0], K: 64, Kernel: 7, Stride: 2, Pad: 3, NoBias: true}},
			{"bn1", NewBatchNorm(64)}, {"", NewReLU()},
			{"", NewMaxPool2D(3, 2, 1)},
		}
		c := 64
		for i, out := range []int{64, 128, 256, 512} {
			stride := 2
			if i == 0 {
				stride = 1
			}
			l = append(l,
				Named{fmt.Sprintf("layer%d.0", i+1), NewBasicBlock(c, out, stride)},
				Named{fmt.Sprintf("layer%d.1", i+1), NewBasicBlock(out, out, 1)})
			c = out
		}
		return append(l, Named{"", NewGlobalAvgPool()}, Named{"", NewFlatten()}, Named{"fc", NewLinear(512, classes)}), nil
	},
}

// ModelNames lists the models NewModel builds.
func ModelNames() []string {
	var n []string
	for k := range models {
		n = append(n, k)
	}
	sort.Strings(n)
	return n
}

// NewModel builds a named model ("mlp", "cnn", "resnet18") for 1×28×28 inputs
// and 10 classes (Fashion-MNIST), and batches up to maxBatch, initialised
// from seed. It is NewModelFor(name, be, []int{1, 28, 28}, 10, maxBatch, seed).
func NewModel(name string, be Backend, maxBatch int, seed uint64) (*Model, error) {
	return NewModelFor(name, be, []int{1, 28, 28}, 10, maxBatch, seed)
}

// NewModelFor builds a named model ("mlp", "cnn", "resnet18") for inputs of
// shape in (without the batch dimension: [C, H, W] for images, [width] for
// the MLP's tables too) and classes outputs, for batches up to maxBatch,
// initialised from seed. The layers are those of NewModel with the first
// and last sized to the data: the same seed, shape and classes give the
// same parameters, bit for bit, and NewModelFor(name, be, [1 28 28], 10, ...)
// is NewModel.
func NewModelFor(name string, be Backend, in []int, classes, maxBatch int, seed uint64) (*Model, error) {
	f, ok := models[name]
	if !ok {
		return nil, fmt.Errorf("unknown model %q (have %v)", name, ModelNames())
	}
	if err := checkShape(in, classes, maxBatch); err != nil {
		return nil, fmt.Errorf("model %s: %w", name, err)
	}
	layers, err := f(in, classes)
	if err != nil {
		return nil, fmt.Errorf("model %s: %w", name, err)
	}
	m, err := Build(be, in, maxBatch, seed, layers...)
	if err != nil {
		return nil, fmt.Errorf("model %s: %w", name, err)
	}
	return m, nil
}

// NewMLP builds a multi-layer perceptron for rows of inputs float32s: a
// Linear layer with a fused ReLU per hidden size ("fc1", "fc2", ...), then a
// Linear layer of outputs ("fc<len(hidden)+1>"): the model of the built-in
// tabular-mlp (outputs: the classes, or 1 for regression). PyTorch's
// default initialisation, drawn from seed in layer order.
func NewMLP(be Backend, inputs int, hidden []int, outputs, maxBatch int, seed uint64) (*Model, error) {
	if err := checkShape([]int{inputs}, outputs, maxBatch); err != nil {
		return nil, fmt.Errorf("mlp: %w", err)
	}
	var layers []Named
	in := inputs
	for i, h := range hidden {
		if h < 1 {
			return nil, fmt.Errorf("mlp: hidden layer %d has %d units, want at least 1", i+1, h)
		}
		layers = append(layers, Named{fmt.Sprintf("fc%d", i+1), NewLinearReLU(in, h)})
		in = h
	}
	layers = append(layers, Named{fmt.Sprintf("fc%d", len(hidden)+1), NewLinear(in, outputs)})
	return Build(be, []int{inputs}, maxBatch, seed, layers...)
}

func checkShape(in []int, classes, maxBatch int) error {
	if len(in) == 0 {
		return fmt.Errorf("empty input shape")
	}
	for _, d := range in {
		if d < 1 {
			return fmt.Errorf("input shape %v: every dimension must be at least 1", in)
		}
	}
	switch {
	case classes < 1:
		return fmt.Errorf("%d outputs, want at least 1", classes)
	case maxBatch < 1:
		return fmt.Errorf("max batch %d, want at least 1", maxBatch)
	}
	return nil
}
