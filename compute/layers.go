package compute

import (
	"fmt"

	"github.com/tempotrain/tempotrain/compute/internal/kern"
)

func prod(s []int) int {
	n := 1
	for _, d := range s {
		n *= d
	}
	return n
}

// rows returns the first n rows of an activation built for MaxBatch.
func rows(t Tensor, n int) Tensor { return t.Rows(0, n) }

// Linear is a fully connected layer, with an optional fused activation.
//
//	x [n, In] (any trailing shape of In elements) → y [n, Out]
//	weight [Out, In], bias [Out]
type Linear struct {
	In, Out int
	NoBias  bool
	Act     Activation

	be      Backend
	w, b    *Param
	x       Tensor
	y, dx   Tensor
	inShape []int
	// packed is the weights as the backend prepared them for inference
	// (Model.Freeze), nil when not frozen.
	packed []float32
}

// NewLinear returns a Linear layer with a bias.
func NewLinear(in, out int) *Linear { return &Linear{In: in, Out: out} }

// NewLinearReLU returns Linear followed by ReLU, fused.
func NewLinearReLU(in, out int) *Linear { return &Linear{In: in, Out: out, Act: ReLUAct} }

func (l *Linear) Build(b *Builder, in []int) ([]int, error) {
	if prod(in) != l.In {
		return nil, fmt.Errorf("linear %d→%d: input shape %v has %d elements", l.In, l.Out, in, prod(in))
	}
	l.be = b.Backend()
	bound := fanBound(l.In)
	l.w = b.Param("weight", []int{l.Out, l.In}, UniformInit(bound))
	if !l.NoBias {
		l.b = b.Param("bias", []int{l.Out}, UniformInit(bound))
	}
	l.y = b.Activation(l.Out)
	if b.InputGrad {
		l.dx = b.Activation(in...)
	}
	l.inShape = in
	return []int{l.Out}, nil
}

func (l *Linear) Forward(x Tensor, train bool) Tensor {
	n := x.Dim(0)
	l.x = x.Reshape(n, l.In)
	y := rows(l.y, n)
	if train {
		l.packed = nil // the step after this changes the weights
	} else if l.packed != nil && l.be.(linearPacker).linearPacked(l.x, l.packed, paramW(l.b), y, l.Act) {
		return y
	}
	l.be.Linear(l.x, l.w.W, paramW(l.b), y, l.Act)
	return y
}

func (l *Linear) freeze(on bool) {
	l.packed = nil
	if p, ok := l.be.(linearPacker); ok && on {
		l.packed = p.packLinear(l.w.W)
	}
}

func (l *Linear) Backward(dy Tensor) Tensor {
	n := dy.Dim(0)
	var dx Tensor
	if !l.dx.IsZero() {
		dx = rows(l.dx, n).Reshape(n, l.In)
	}
	l.be.LinearBackward(l.x, l.w.W, rows(l.y, n), dy, dx, l.w.G, paramG(l.b), l.Act)
	if dx.IsZero() {
		return dx
	}
	return rows(l.dx, n)
}

func (l *Linear) Params() []*Param { return params(l.w, l.b) }

func paramW(p *Param) Tensor {
	if p == nil {
		return Tensor{}
	}
	return p.W
}

func paramG(p *Param) Tensor {
	if p == nil {
		return Tensor{}
	}
	return p.G
}

func params(ps ...*Param) []*Param {
	out := ps[:0:0]
	for _, p := range ps {
		if p != nil {
			out = append(out, p)
		}
	}
	return out
}

// ReLU is max(x, 0), computed in place: it overwrites its input on the way
// forward and dy on the way back. Safe after Linear, Conv2D, BatchNorm and
// Add, whose backward needs their input, not their output.
//
//	x [n, ...] → y [n, ...] (the same memory)
type ReLU struct {
	be Backend
	y  Tensor
}

func NewReLU() *ReLU { return &ReLU{} }

func (l *ReLU) Build(b *Builder, in []int) ([]int, error) {
	l.be = b.Backend()
	return in, nil
}

func (l *ReLU) Forward(x Tensor, _ bool) Tensor {
	l.be.ReLU(x, x)
	l.y = x
	return x
}

func (l *ReLU) Backward(dy Tensor) Tensor {
	l.be.ReLUBackward(l.y, dy, dy)
	return dy
}

func (l *ReLU) Params() []*Param { return nil }

// Flatten folds every dimension after the batch into one.
//
//	x [n, d1, d2, ...] → y [n, d1·d2·...] (a view)
type Flatten struct{ in []int }

func NewFlatten() *Flatten { return &Flatten{} }

func (l *Flatten) Build(_ *Builder, in []int) ([]int, error) {
	l.in = in
	return []int{prod(in)}, nil
}

func (l *Flatten) Forward(x Tensor, _ bool) Tensor { return x.Reshape(x.Dim(0), prod(l.in)) }

func (l *Flatten) Backward(dy Tensor) Tensor {
	if dy.IsZero() {
		return dy
	}
	switch len(l.in) {
	case 1:
		return dy.Reshape(dy.Dim(0), l.in[0])
	case 2:
		return dy.Reshape(dy.Dim(0), l.in[0], l.in[1])
	default:
		return dy.Reshape(dy.Dim(0), l.in[0], l.in[1], l.in[2])
	}
}

func (l *Flatten) Params() []*Param { return nil }

// Conv2D is a 2-D convolution (im2col + GEMM on the CPU), with an optional
// fused activation.
//
//	x [n, C, H, W] → y [n, K, OutH, OutW]
//	weight [K, C, KH, KW], bias [K]
type Conv2D struct {
	C, K, Kernel, Stride, Pad int
	NoBias                    bool
	Act                       Activation
	// MaxPool2 fuses a 2×2 max pooling with stride 2 after the activation:
	// y [n, K, OutH/2, OutW/2].
	MaxPool2 bool
	// WeightInit overrides the default U(±1/√(C·KH·KW)) weight init.
	WeightInit func(s *ConvShape) Init

	be    Backend
	s     ConvShape
	w, b  *Param
	x     Tensor
	y, dx Tensor
	idx   Tensor
	ws    *Tensor
}

// NewConv2D returns a square-kernel convolution with a bias.
func NewConv2D(c, k, kernel, stride, pad int) *Conv2D {
	return &Conv2D{C: c, K: k, Kernel: kernel, Stride: stride, Pad: pad}
}

// NewConv2DReLU returns Conv2D followed by ReLU, fused.
func NewConv2DReLU(c, k, kernel, stride, pad int) *Conv2D {
	return &Conv2D{C: c, K: k, Kernel: kernel, Stride: stride, Pad: pad, Act: ReLUAct}
}

// NewConv2DReLUPool returns Conv2D, ReLU and a 2×2 max pooling of stride 2,
// fused.
func NewConv2DReLUPool(c, k, kernel, stride, pad int) *Conv2D {
	return &Conv2D{C: c, K: k, Kernel: kernel, Stride: stride, Pad: pad, Act: ReLUAct, MaxPool2: true}
}

func (l *Conv2D) Build(b *Builder, in []int) ([]int, error) {
	if len(in) != 3 || in[0] != l.C {
		return nil, fmt.Errorf("conv2d %d→%d: input shape %v, want [%d H W]", l.C, l.K, in, l.C)
	}
	l.be = b.Backend()
	l.s = ConvShape{C: l.C, H: in[1], W: in[2], K: l.K, KH: l.Kernel, KW: l.Kernel, Stride: l.Stride, Pad: l.Pad}
	l.s.Init()
	if l.s.OutH < 1 || l.s.OutW < 1 {
		return nil, fmt.Errorf("conv2d %d→%d: input %v too small for kernel %d", l.C, l.K, in, l.Kernel)
	}
	bound := fanBound(l.s.Col)
	wi := UniformInit(bound)
	if l.WeightInit != nil {
		wi = l.WeightInit(&l.s)
	}
	l.w = b.Param("weight", []int{l.K, l.C, l.Kernel, l.Kernel}, wi)
	if !l.NoBias {
		l.b = b.Param("bias", []int{l.K}, UniformInit(bound))
	}
	out := []int{l.K, l.s.OutH, l.s.OutW}
	if l.MaxPool2 {
		if l.s.OutH < 2 || l.s.OutW < 2 {
			return nil, fmt.Errorf("conv2d %d→%d: output %dx%d too small to pool", l.C, l.K, l.s.OutH, l.s.OutW)
		}
		out = []int{l.K, l.s.OutH / 2, l.s.OutW / 2}
		l.idx = b.Activation(out...)
	}
	l.y = b.Activation(out...)
	if b.InputGrad {
		l.dx = b.Activation(in...)
	}
	l.ws = b.Workspace(l.s.Workspace(b.MaxBatch()))
	return out, nil
}

func (l *Conv2D) Forward(x Tensor, _ bool) Tensor {
	l.x = x
	y := rows(l.y, x.Dim(0))
	if l.MaxPool2 {
		l.be.ConvPool2D(&l.s, x, l.w.W, paramW(l.b), y, rows(l.idx, x.Dim(0)), *l.ws, l.Act)
	} else {
		l.be.Conv2D(&l.s, x, l.w.W, paramW(l.b), y, *l.ws, l.Act)
	}
	return y
}

func (l *Conv2D) Backward(dy Tensor) Tensor {
	n := dy.Dim(0)
	var dx Tensor
	if !l.dx.IsZero() {
		dx = rows(l.dx, n)
	}
	if l.MaxPool2 {
		l.be.ConvPool2DBackward(&l.s, l.x, l.w.W, rows(l.y, n), rows(l.idx, n), dy, dx, l.w.G, paramG(l.b), *l.ws, l.Act)
	} else {
		l.be.Conv2DBackward(&l.s, l.x, l.w.W, rows(l.y, n), dy, dx, l.w.G, paramG(l.b), *l.ws, l.Act)
	}
	return dx
}

func (l *Conv2D) Params() []*Param { return params(l.w, l.b) }

// Pool2D is max or average pooling over each channel plane.
//
//	x [n, C, H, W] → y [n, C, OutH, OutW]
type Pool2D struct {
	Kernel, Stride, Pad int
	Avg                 bool
	// Global pools each whole plane to 1×1 (ResNet's adaptive average pool).
	Global bool

	be    Backend
	s     PoolShape
	x     Tensor
	y, dx Tensor
}

// NewMaxPool2D and NewAvgPool2D return square pooling layers.
func NewMaxPool2D(kernel, stride, pad int) *Pool2D {
	return &Pool2D{Kernel: kernel, Stride: stride, Pad: pad}
}

func NewAvgPool2D(kernel, stride, pad int) *Pool2D {
	return &Pool2D{Kernel: kernel, Stride: stride, Pad: pad, Avg: true}
}

// NewGlobalAvgPool averages each plane to one value.
func NewGlobalAvgPool() *Pool2D { return &Pool2D{Avg: true, Global: true} }

func (l *Pool2D) Build(b *Builder, in []int) ([]int, error) {
	if len(in) != 3 {
		return nil, fmt.Errorf("pool2d: input shape %v, want [C H W]", in)
	}
	l.be = b.Backend()
	if l.Global {
		l.s = PoolShape{H: in[1], W: in[2], KH: in[1], KW: in[2], Stride: 1}
	} else {
		l.s = PoolShape{H: in[1], W: in[2], KH: l.Kernel, KW: l.Kernel, Stride: l.Stride, Pad: l.Pad}
	}
	l.s.Init()
	if l.s.OutH < 1 || l.s.OutW < 1 || 2*l.s.Pad > l.s.KH {
		return nil, fmt.Errorf("pool2d: kernel %d stride %d pad %d does not fit input %v", l.s.KH, l.s.Stride, l.s.Pad, in)
	}
	l.y = b.Activation(in[0], l.s.OutH, l.s.OutW)
	if b.InputGrad {
		l.dx = b.Activation(in...)
	}
	return []int{in[0], l.s.OutH, l.s.OutW}, nil
}

func (l *Pool2D) Forward(x Tensor, _ bool) Tensor {
	l.x = x
	y := rows(l.y, x.Dim(0))
	if l.Avg {
		l.be.AvgPool2D(&l.s, x, y)
	} else {
		l.be.MaxPool2D(&l.s, x, y)
	}
	return y
}

func (l *Pool2D) Backward(dy Tensor) Tensor {
	if l.dx.IsZero() {
		return Tensor{}
	}
	dx := rows(l.dx, dy.Dim(0))
	if l.Avg {
		l.be.AvgPool2DBackward(&l.s, dy, dx)
	} else {
		l.be.MaxPool2DBackward(&l.s, l.x, dy, dx)
	}
	return dx
}

func (l *Pool2D) Params() []*Param { return nil }

// BatchNorm normalises each channel (dimension 1): BatchNorm2d on
// [n, C, H, W], BatchNorm1d on [n, C].
//
//	x [n, C, ...] → y [n, C, ...]
//	weight, bias [C]; buffers running_mean, running_var [C]
type BatchNorm struct {
	C             int
	Momentum, Eps float64 // default 0.1, 1e-5

	be              Backend
	gamma, beta     *Param
	runMean, runVar *Param
	mean, invstd    Tensor
	x               Tensor
	y, dx           Tensor
	train           bool
}

func NewBatchNorm(c int) *BatchNorm { return &BatchNorm{C: c, Momentum: 0.1, Eps: 1e-5} }

func (l *BatchNorm) Build(b *Builder, in []int) ([]int, error) {
	if len(in) < 1 || in[0] != l.C {
		return nil, fmt.Errorf("batchnorm(%d): input shape %v", l.C, in)
	}
	l.be = b.Backend()
	l.gamma = b.Param("weight", []int{l.C}, ConstInit(1))
	l.beta = b.Param("bias", []int{l.C}, ConstInit(0))
	l.runMean = b.Buffer("running_mean", []int{l.C}, ConstInit(0))
	l.runVar = b.Buffer("running_var", []int{l.C}, ConstInit(1))
	l.mean, l.invstd = l.be.New(l.C), l.be.New(l.C)
	l.y = b.Activation(in...)
	if b.InputGrad {
		l.dx = b.Activation(in...)
	}
	return in, nil
}

func (l *BatchNorm) Forward(x Tensor, train bool) Tensor {
	l.x, l.train = x, train
	y := rows(l.y, x.Dim(0))
	if train {
		l.be.BatchNormTrain(x, l.gamma.W, l.beta.W, y, l.mean, l.invstd, l.runMean.W, l.runVar.W, l.Momentum, l.Eps)
	} else {
		l.be.BatchNormEval(x, l.gamma.W, l.beta.W, l.runMean.W, l.runVar.W, y, l.Eps)
	}
	return y
}

func (l *BatchNorm) Backward(dy Tensor) Tensor {
	if !l.train {
		panic("compute: BatchNorm.Backward after an eval-mode Forward")
	}
	dx := l.dx
	if dx.IsZero() {
		// The kernel computes dx with dgamma and dbeta in one pass; give it
		// dy's memory when nobody wants dx.
		dx = dy
	} else {
		dx = rows(dx, dy.Dim(0))
	}
	l.be.BatchNormBackward(l.x, l.gamma.W, dy, l.mean, l.invstd, dx, l.gamma.G, l.beta.G)
	if l.dx.IsZero() {
		return Tensor{}
	}
	return dx
}

func (l *BatchNorm) Params() []*Param { return params(l.gamma, l.beta) }

// Dropout zeroes each element with probability P in training and scales the
// rest by 1/(1-P); the identity in evaluation. Masks come from the model's
// per-step dropout seed and the layer's index, so a step's masks are the same
// on a resumed run.
//
//	x [n, ...] → y [n, ...]
type Dropout struct {
	P     float64
	be    Backend
	seed  *uint64
	index int
	mask  Tensor
	y     Tensor
	on    bool
}

func NewDropout(p float64) *Dropout { return &Dropout{P: p} }

func (l *Dropout) Build(b *Builder, in []int) ([]int, error) {
	if l.P < 0 || l.P >= 1 {
		return nil, fmt.Errorf("dropout: p = %g, want 0 ≤ p < 1", l.P)
	}
	l.be = b.Backend()
	l.seed, l.index = b.DropoutSeed()
	l.mask = b.Activation(in...)
	l.y = b.Activation(in...)
	return in, nil
}

func (l *Dropout) Forward(x Tensor, train bool) Tensor {
	l.on = train && l.P > 0
	if !l.on {
		return x
	}
	n := x.Dim(0)
	mask := rows(l.mask, n)
	l.be.DropoutMask(mask, l.P, kern.Hash64(*l.seed, uint64(l.index)))
	y := rows(l.y, n)
	l.be.Mul(y, x, mask)
	return y
}

func (l *Dropout) Backward(dy Tensor) Tensor {
	if !l.on || dy.IsZero() {
		return dy
	}
	l.be.Mul(dy, dy, rows(l.mask, dy.Dim(0)))
	return dy
}

func (l *Dropout) Params() []*Param { return nil }
