package compute

import (
	"fmt"
	"math"
)

// BasicBlock is ResNet-18's residual block.
//
//	x [n, In, H, W] → y [n, Out, H', W'] with H' = ⌊(H-1)/Stride⌋+1
//	main:     conv1 3×3 (In→Out, Stride, pad 1, no bias) → bn1 → relu → conv2 3×3 (Out→Out) → bn2
//	shortcut: x, or downsample.0 conv 1×1 (In→Out, Stride, no bias) → downsample.1 bn when the shape changes
//	y = relu(main + shortcut)
//
// Parameter names follow torchvision ("conv1.weight", "downsample.1.bias").
type BasicBlock struct {
	In, Out, Stride int

	be           Backend
	conv1, conv2 *Conv2D
	bn1, bn2     *BatchNorm
	relu1        *ReLU
	down         *Conv2D
	downBN       *BatchNorm
	y            Tensor
	inputGrad    bool
	ps           []*Param
}

// NewBasicBlock returns a block; convolutions use Kaiming-normal (fan out)
// initialisation as torchvision's ResNet does.
func NewBasicBlock(in, out, stride int) *BasicBlock {
	return &BasicBlock{In: in, Out: out, Stride: stride}
}

// KaimingNormalFanOut is torchvision's ResNet conv init: N(0, 2/(K·KH·KW)).
func KaimingNormalFanOut(s *ConvShape) Init {
	return NormalInit(math.Sqrt(2 / float64(s.K*s.KH*s.KW)))
}

func resnetConv(c, k, kernel, stride, pad int) *Conv2D {
	return &Conv2D{C: c, K: k, Kernel: kernel, Stride: stride, Pad: pad, NoBias: true, WeightInit: KaimingNormalFanOut}
}

func (l *BasicBlock) Build(b *Builder, in []int) ([]int, error) {
	if len(in) != 3 || in[0] != l.In {
		return nil, fmt.Errorf("basic block %d→%d: input shape %v", l.In, l.Out, in)
	}
	l.be = b.Backend()
	l.inputGrad = b.InputGrad
	l.conv1 = resnetConv(l.In, l.Out, 3, l.Stride, 1)
	l.bn1, l.relu1 = NewBatchNorm(l.Out), NewReLU()
	l.conv2 = resnetConv(l.Out, l.Out, 3, 1, 1)
	l.bn2 = NewBatchNorm(l.Out)
	sh, err := b.Sub("conv1.", l.conv1, in, b.InputGrad)
	for _, step := range []struct {
		name string
		l    Layer
	}{{"bn1.", l.bn1}, {"", l.relu1}, {"conv2.", l.conv2}, {"bn2.", l.bn2}} {
		if err != nil {
			return nil, err
		}
		sh, err = b.Sub(step.name, step.l, sh, true)
	}
	if err != nil {
		return nil, err
	}
	if l.Stride != 1 || l.In != l.Out {
		l.down = resnetConv(l.In, l.Out, 1, l.Stride, 0)
		l.downBN = NewBatchNorm(l.Out)
		dsh, err := b.Sub("downsample.0.", l.down, in, b.InputGrad)
		if err != nil {
			return nil, err
		}
		if dsh, err = b.Sub("downsample.1.", l.downBN, dsh, true); err != nil {
			return nil, err
		}
		if fmt.Sprint(dsh) != fmt.Sprint(sh) {
			return nil, fmt.Errorf("basic block: shortcut shape %v != main shape %v", dsh, sh)
		}
	}
	l.y = b.Activation(sh...)
	l.ps = params(l.conv1.w, l.bn1.gamma, l.bn1.beta, l.conv2.w, l.bn2.gamma, l.bn2.beta)
	if l.down != nil {
		l.ps = append(l.ps, l.down.w, l.downBN.gamma, l.downBN.beta)
	}
	return sh, nil
}

func (l *BasicBlock) Forward(x Tensor, train bool) Tensor {
	h := l.conv1.Forward(x, train)
	h = l.bn1.Forward(h, train)
	h = l.relu1.Forward(h, train)
	h = l.conv2.Forward(h, train)
	h = l.bn2.Forward(h, train)
	s := x
	if l.down != nil {
		s = l.downBN.Forward(l.down.Forward(x, train), train)
	}
	y := rows(l.y, x.Dim(0))
	l.be.Add(y, h, s)
	l.be.ReLU(y, y)
	return y
}

func (l *BasicBlock) Backward(dy Tensor) Tensor {
	l.be.ReLUBackward(rows(l.y, dy.Dim(0)), dy, dy)
	// dy now feeds both branches; neither branch writes into it.
	g := l.bn2.Backward(dy)
	g = l.conv2.Backward(g)
	g = l.relu1.Backward(g)
	g = l.bn1.Backward(g)
	dx := l.conv1.Backward(g)
	short := dy
	if l.down != nil {
		short = l.down.Backward(l.downBN.Backward(dy))
	}
	if !l.inputGrad {
		return Tensor{}
	}
	l.be.AddTo(dx, short)
	return dx
}

func (l *BasicBlock) Params() []*Param { return l.ps }
