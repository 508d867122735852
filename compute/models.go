package compute

import (
	"fmt"
	"sort"
)

// The models of the built-in training functions, all for 1×28×28 inputs and
// 10 classes (Fashion-MNIST). A ReLU right after a Linear or Conv2D, and a
// 2×2 max pooling after that, are fused into it: the same function as
// PyTorch's separate modules, with fewer trips through memory.
var models = map[string]func() []Named{
	// MLP 784-512-256-10.
	"mlp": func() []Named {
		return []Named{
			{"", NewFlatten()},
			{"fc1", NewLinearReLU(784, 512)},
			{"fc2", NewLinearReLU(512, 256)},
			{"fc3", NewLinear(256, 10)},
		}
	},
	// The CNN of issue 4: conv 1→32 3×3 pad 1, ReLU, maxpool 2; conv 32→64
	// 3×3 pad 1, ReLU, maxpool 2; fc 3136→128, ReLU; fc 128→10.
	"cnn": func() []Named {
		return []Named{
			{"conv1", NewConv2DReLUPool(1, 32, 3, 1, 1)},
			{"conv2", NewConv2DReLUPool(32, 64, 3, 1, 1)},
			{"", NewFlatten()},
			{"fc1", NewLinearReLU(3136, 128)},
			{"fc2", NewLinear(128, 10)},
		}
	},
	// torchvision's ResNet-18 with a 1-channel 7×7 stride-2 stem, as Ray
	// Train's Fashion-MNIST example adapts it:
	// 28² → stem 14² → maxpool 7² → layer1 7² → layer2 4² → layer3 2² → layer4 1² → fc.
	"resnet18": func() []Named {
		l := []Named{
			{"conv1", resnetConv(1, 64, 7, 2, 3)},
			{"bn1", NewBatchNorm(64)}, {"", NewReLU()},
			{"", NewMaxPool2D(3, 2, 1)},
		}
		in := 64
		for i, out := range []int{64, 128, 256, 512} {
			stride := 2
			if i == 0 {
				stride = 1
			}
			l = append(l,
				Named{fmt.Sprintf("layer%d.0", i+1), NewBasicBlock(in, out, stride)},
				Named{fmt.Sprintf("layer%d.1", i+1), NewBasicBlock(out, out, 1)})
			in = out
		}
		return append(l, Named{"", NewGlobalAvgPool()}, Named{"", NewFlatten()}, Named{"fc", NewLinear(512, 10)})
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
// and batches up to maxBatch, initialised from seed.
func NewModel(name string, be Backend, maxBatch int, seed uint64) (*Model, error) {
	f, ok := models[name]
	if !ok {
		return nil, fmt.Errorf("unknown model %q (have %v)", name, ModelNames())
	}
	m, err := Build(be, []int{1, 28, 28}, maxBatch, seed, f()...)
	if err != nil {
		return nil, fmt.Errorf("model %s: %w", name, err)
	}
	return m, nil
}
