package compute

import "github.com/tempotrain/tempotrain/compute/internal/kern"

// ConvShape is the geometry of a 2-D convolution (see Backend.Conv2D); call
// Init after setting the input fields.
type ConvShape = kern.ConvShape

// PoolShape is the geometry of a 2-D pooling window; call Init after setting
// the input fields.
type PoolShape = kern.PoolShape

// Activation is applied to the output of Linear and Conv2D in the same pass
// as the bias: fused, it costs no extra trip through memory.
type Activation int

const (
	// Identity applies nothing.
	Identity Activation = iota
	// ReLUAct applies max(x, 0).
	ReLUAct
)

// SGDConfig are the hyper-parameters of one SGD step (PyTorch's semantics).
type SGDConfig struct {
	LR, Momentum, Dampening, WeightDecay float64
	Nesterov                             bool
	// First marks the first step: the momentum buffer starts at the gradient.
	First bool
}

// AdamConfig are the hyper-parameters of one Adam or AdamW step.
type AdamConfig struct {
	LR, Beta1, Beta2, Eps, WeightDecay float64
	// Decoupled selects AdamW: weight decay shrinks the parameters directly.
	Decoupled bool
	// Step counts from 1.
	Step int
}

// Backend runs the numerical ops of a model on some device. Tensors given to
// a backend come from its New (or, for the CPU backend, HostTensor). Ops
// overwrite their outputs; an output argument that is the zero Tensor is not
// computed. Unless a comment says otherwise, outputs must not alias inputs.
//
// The CPU backend is the reference; every backend passes the conformance
// suite in compute/computetest, which compares it against float64 reference
// kernels.
type Backend interface {
	// Name identifies the backend in errors and logs ("cpu", "cuda:0").
	Name() string
	// New returns a zeroed tensor.
	New(shape ...int) Tensor
	// Upload copies host data into t; Download copies t into host data.
	// Lengths must match t.Len().
	Upload(t Tensor, src []float32)
	Download(dst []float32, t Tensor)

	// Fill sets every element of t to v.
	Fill(t Tensor, v float32)
	// Copy: dst = src (same length).
	Copy(dst, src Tensor)
	// Add: dst = a + b (dst may alias a or b). AddTo: dst += src.
	Add(dst, a, b Tensor)
	AddTo(dst, src Tensor)
	// Mul: dst = a ⊙ b element-wise (dst may alias a or b).
	Mul(dst, a, b Tensor)

	// Linear: y = act(x·wᵀ + b) for x [n, in], w [out, in], b [out]
	// (optional), y [n, out].
	Linear(x, w, b, y Tensor, act Activation)
	// LinearBackward: from dy [n, out] (overwritten: masked by the
	// activation's derivative at y, Linear's output), dx = dy·w, dw = dyᵀ·x,
	// db = Σ_n dy.
	LinearBackward(x, w, y, dy, dx, dw, db Tensor, act Activation)
	// Conv2D: y [n, K, OutH, OutW] = act(conv(x [n, C, H, W], w [K, C, KH, KW]) + b [K]);
	// ws holds s.Workspace(n) scratch elements.
	Conv2D(s *ConvShape, x, w, b, y, ws Tensor, act Activation)
	// Conv2DBackward computes dx, dw, db from dy (overwritten as in
	// LinearBackward).
	Conv2DBackward(s *ConvShape, x, w, y, dy, dx, dw, db, ws Tensor, act Activation)
	// ConvPool2D is Conv2D followed by 2×2 max pooling with stride 2, fused
	// so that the convolution's full output is never stored:
	// y [n, K, OutH/2, OutW/2] = maxpool(act(conv(x) + b)), and idx (same
	// shape) the window position 0..3 (row-major) of each first maximum.
	ConvPool2D(s *ConvShape, x, w, b, y, idx, ws Tensor, act Activation)
	// ConvPool2DBackward computes dx, dw, db from dy [n, K, OutH/2, OutW/2]
	// and ConvPool2D's y and idx.
	ConvPool2DBackward(s *ConvShape, x, w, y, idx, dy, dx, dw, db, ws Tensor, act Activation)
	// MaxPool2D and AvgPool2D pool each plane of x [n, C, H, W] into
	// y [n, C, OutH, OutW]; max pooling picks the first maximum of a window,
	// average pooling counts padding as zeros.
	MaxPool2D(s *PoolShape, x, y Tensor)
	MaxPool2DBackward(s *PoolShape, x, dy, dx Tensor)
	AvgPool2D(s *PoolShape, x, y Tensor)
	AvgPool2DBackward(s *PoolShape, dy, dx Tensor)
	// BatchNormTrain normalises x [n, c, ...] per channel with batch
	// statistics, saves mean and 1/std [c] for the backward, and updates the
	// running statistics with momentum (unbiased variance, as PyTorch).
	BatchNormTrain(x, gamma, beta, y, mean, invstd, runMean, runVar Tensor, momentum, eps float64)
	// BatchNormEval normalises with the running statistics.
	BatchNormEval(x, gamma, beta, runMean, runVar, y Tensor, eps float64)
	BatchNormBackward(x, gamma, dy, mean, invstd, dx, dgamma, dbeta Tensor)
	// ReLU: y = max(x, 0); y may alias x. ReLUBackward: dx = dy where y > 0;
	// dx may alias dy.
	ReLU(x, y Tensor)
	ReLUBackward(y, dy, dx Tensor)
	// DropoutMask fills mask with 0 (probability p) or 1/(1-p); element i
	// depends only on (seed, i), identically on every backend.
	DropoutMask(mask Tensor, p float64, seed uint64)
	// SoftmaxCrossEntropy: for logits [n, c] and labels [n] (class indices
	// stored as floats), dlogits = (softmax - onehot)/n (optional) and
	// stats [2] = {summed loss over the n rows, rows whose first maximum
	// logit is the label}.
	SoftmaxCrossEntropy(logits, labels, dlogits, stats Tensor)
	// SGD and Adam update p in place from g (left unchanged) and their
	// state tensors, all of one length.
	SGD(p, g, buf Tensor, c SGDConfig)
	Adam(p, g, m, v Tensor, c AdamConfig)
}
