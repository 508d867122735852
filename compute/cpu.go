package compute

import (
	"fmt"

	"github.com/tempotrain/tempotrain/compute/internal/kern"
)

// CPU returns the CPU backend: kernels in Go over float32 and single
// precision GEMM from OpenBLAS. It runs on the calling goroutine; OpenBLAS
// uses SetThreads threads (call SetThreads(1) in a data-parallel rank).
func CPU() Backend { return cpuBackend{} }

// SetThreads sets the number of threads OpenBLAS uses in this process.
func SetThreads(n int) { kern.SetThreads(n) }

// Threads returns the number of threads OpenBLAS uses.
func Threads() int { return kern.Threads() }

// KernelPath names the CPU kernels this process runs (see kern.Path): the
// vectorised version of our C kernels the processor takes, whether the
// AVX-512 GEMM runs, and OpenBLAS's kernel. A checkpoint records the path
// that wrote it; a group restoring on another path is told, since its
// training is then no longer bit-identical to an uninterrupted run.
func KernelPath() string { return kern.Path() }

type cpuBackend struct{}

var _ Backend = cpuBackend{}

func (cpuBackend) Name() string { return "cpu" }

func (cpuBackend) New(shape ...int) Tensor {
	var t Tensor
	t.setShape(shape)
	t.host = make([]float32, t.Len())
	return t
}

func host(t Tensor) []float32 {
	if t.host == nil && !t.IsZero() && t.Len() > 0 {
		panic(fmt.Sprintf("compute: cpu backend given a device tensor %v", t))
	}
	return t.host
}

// opt returns the elements of an optional tensor, nil for the zero Tensor.
func opt(t Tensor) []float32 {
	if t.IsZero() {
		return nil
	}
	return host(t)
}

func checkLen(op string, t Tensor, n int) {
	if t.Len() != n {
		panic(fmt.Sprintf("compute: %s: tensor %v has %d elements, want %d", op, t, t.Len(), n))
	}
}

func (cpuBackend) Upload(t Tensor, src []float32) {
	checkLen("Upload", t, len(src))
	copy(host(t), src)
}

func (cpuBackend) Download(dst []float32, t Tensor) {
	checkLen("Download", t, len(dst))
	copy(dst, host(t))
}

func (cpuBackend) Fill(t Tensor, v float32) {
	d := host(t)
	for i := range d {
		d[i] = v
	}
}

func (cpuBackend) Copy(dst, src Tensor) {
	checkLen("Copy", dst, src.Len())
	copy(host(dst), host(src))
}

func (cpuBackend) Add(dst, a, b Tensor) {
	checkLen("Add", a, dst.Len())
	checkLen("Add", b, dst.Len())
	kern.Add(host(dst), host(a), host(b))
}

func (cpuBackend) AddTo(dst, src Tensor) {
	checkLen("AddTo", src, dst.Len())
	kern.AddTo(host(dst), host(src))
}

func (cpuBackend) Mul(dst, a, b Tensor) {
	checkLen("Mul", a, dst.Len())
	checkLen("Mul", b, dst.Len())
	kern.Mul(host(dst), host(a), host(b))
}

func (cpuBackend) Linear(x, w, b, y Tensor, act Activation) {
	n, in, out := x.Dim(0), x.Len()/max(x.Dim(0), 1), w.Dim(0)
	checkLen("Linear w", w, out*in)
	checkLen("Linear y", y, n*out)
	kern.Linear(host(x), host(w), opt(b), host(y), n, in, out, act == ReLUAct)
}

func (cpuBackend) LinearBackward(x, w, y, dy, dx, dw, db Tensor, act Activation) {
	n, in, out := x.Dim(0), x.Len()/max(x.Dim(0), 1), w.Dim(0)
	checkLen("LinearBackward dy", dy, n*out)
	kern.LinearBackward(host(x), host(w), opt(y), host(dy), opt(dx), host(dw), opt(db), n, in, out, act == ReLUAct)
}

func checkWorkspace(op string, s *ConvShape, ws Tensor, n int) {
	if ws.Len() < s.Workspace(n) {
		panic(fmt.Sprintf("compute: %s workspace %d < %d", op, ws.Len(), s.Workspace(n)))
	}
}

// linearPacker is a backend that prepares a Linear layer's weights once
// for a model whose parameters stay as they are (Model.Freeze) and runs the
// layer's forward from them.
type linearPacker interface {
	// packLinear returns w [out, in] prepared, or nil: nothing to gain.
	packLinear(w Tensor) []float32
	// linearPacked is Linear with w as packLinear prepared it; false when
	// it did nothing.
	linearPacked(x Tensor, packed []float32, b, y Tensor, act Activation) bool
}

var _ linearPacker = cpuBackend{}

func (cpuBackend) packLinear(w Tensor) []float32 {
	return kern.PackLinear(host(w), w.Len()/max(w.Dim(0), 1), w.Dim(0))
}

func (cpuBackend) linearPacked(x Tensor, packed []float32, b, y Tensor, act Activation) bool {
	n, out := x.Dim(0), y.Len()/max(x.Dim(0), 1)
	return kern.LinearPrepacked(host(x), packed, opt(b), host(y), n, x.Len()/max(n, 1), out, act == ReLUAct)
}

func (cpuBackend) Conv2D(s *ConvShape, x, w, b, y, ws Tensor, act Activation) {
	n := x.Dim(0)
	checkLen("Conv2D x", x, n*s.C*s.H*s.W)
	checkLen("Conv2D y", y, n*s.K*s.Spatial)
	checkWorkspace("Conv2D", s, ws, n)
	kern.Conv2D(s, host(x), host(w), opt(b), host(y), host(ws), n, act == ReLUAct)
}

func (cpuBackend) Conv2DBackward(s *ConvShape, x, w, y, dy, dx, dw, db, ws Tensor, act Activation) {
	n := x.Dim(0)
	checkLen("Conv2DBackward dy", dy, n*s.K*s.Spatial)
	checkWorkspace("Conv2DBackward", s, ws, n)
	kern.Conv2DBackward(s, host(x), host(w), opt(y), host(dy), opt(dx), host(dw), opt(db), host(ws), n, act == ReLUAct)
}

func (cpuBackend) ConvPool2D(s *ConvShape, x, w, b, y, idx, ws Tensor, act Activation) {
	n := x.Dim(0)
	checkLen("ConvPool2D x", x, n*s.C*s.H*s.W)
	checkLen("ConvPool2D y", y, n*s.PooledLen())
	checkLen("ConvPool2D idx", idx, n*s.PooledLen())
	checkWorkspace("ConvPool2D", s, ws, n)
	kern.Conv2DPool(s, host(x), host(w), opt(b), host(y), host(idx), host(ws), n, act == ReLUAct)
}

func (cpuBackend) ConvPool2DBackward(s *ConvShape, x, w, y, idx, dy, dx, dw, db, ws Tensor, act Activation) {
	n := x.Dim(0)
	checkLen("ConvPool2DBackward dy", dy, n*s.PooledLen())
	checkWorkspace("ConvPool2DBackward", s, ws, n)
	kern.Conv2DPoolBackward(s, host(x), host(w), host(y), host(idx), host(dy), opt(dx), host(dw), opt(db), host(ws), n, act == ReLUAct)
}

func planes(s *PoolShape, x Tensor) int {
	p := x.Len() / (s.H * s.W)
	checkLen("pool x", x, p*s.H*s.W)
	return p
}

func (cpuBackend) MaxPool2D(s *PoolShape, x, y Tensor) {
	p := planes(s, x)
	checkLen("MaxPool2D y", y, p*s.OutH*s.OutW)
	kern.MaxPool(s, host(x), host(y), p)
}

func (cpuBackend) MaxPool2DBackward(s *PoolShape, x, dy, dx Tensor) {
	p := planes(s, x)
	checkLen("MaxPool2DBackward dy", dy, p*s.OutH*s.OutW)
	kern.MaxPoolBackward(s, host(x), host(dy), host(dx), p)
}

func (cpuBackend) AvgPool2D(s *PoolShape, x, y Tensor) {
	p := planes(s, x)
	checkLen("AvgPool2D y", y, p*s.OutH*s.OutW)
	kern.AvgPool(s, host(x), host(y), p)
}

func (cpuBackend) AvgPool2DBackward(s *PoolShape, dy, dx Tensor) {
	p := planes(s, dx)
	checkLen("AvgPool2DBackward dy", dy, p*s.OutH*s.OutW)
	kern.AvgPoolBackward(s, host(dy), host(dx), p)
}

// bnDims splits x [n, c, ...] into n, c and the size of the rest.
func bnDims(x Tensor) (n, c, s int) {
	n, c = x.Dim(0), x.Dim(1)
	return n, c, x.Len() / max(n*c, 1)
}

func (cpuBackend) BatchNormTrain(x, gamma, beta, y, mean, invstd, runMean, runVar Tensor, momentum, eps float64) {
	n, c, s := bnDims(x)
	kern.BatchNormTrain(host(x), host(gamma), host(beta), host(y), host(mean), host(invstd), host(runMean), host(runVar), n, c, s, momentum, eps)
}

func (cpuBackend) BatchNormEval(x, gamma, beta, runMean, runVar, y Tensor, eps float64) {
	n, c, s := bnDims(x)
	kern.BatchNormEval(host(x), host(gamma), host(beta), host(runMean), host(runVar), host(y), n, c, s, eps)
}

func (cpuBackend) BatchNormBackward(x, gamma, dy, mean, invstd, dx, dgamma, dbeta Tensor) {
	n, c, s := bnDims(x)
	kern.BatchNormBackward(host(x), host(gamma), host(dy), host(mean), host(invstd), host(dx), host(dgamma), host(dbeta), n, c, s)
}

func (cpuBackend) ReLU(x, y Tensor) {
	checkLen("ReLU", y, x.Len())
	kern.ReLU(host(x), host(y))
}

func (cpuBackend) ReLUBackward(y, dy, dx Tensor) {
	checkLen("ReLUBackward", dy, y.Len())
	kern.ReLUBackward(host(y), host(dy), host(dx))
}

func (cpuBackend) DropoutMask(mask Tensor, p float64, seed uint64) {
	kern.DropoutMask(host(mask), p, seed)
}

func (cpuBackend) SoftmaxCrossEntropy(logits, labels, dlogits, stats Tensor) {
	n, c := logits.Dim(0), logits.Len()/max(logits.Dim(0), 1)
	checkLen("SoftmaxCrossEntropy labels", labels, n)
	loss, correct := kern.SoftmaxCrossEntropy(host(logits), host(labels), opt(dlogits), n, c)
	st := host(stats)
	st[0], st[1] = float32(loss), float32(correct)
}

func (cpuBackend) SGD(p, g, buf Tensor, c SGDConfig) {
	checkLen("SGD g", g, p.Len())
	kern.SGD(host(p), host(g), opt(buf), c.LR, c.Momentum, c.Dampening, c.WeightDecay, c.Nesterov, c.First)
}

func (cpuBackend) Adam(p, g, m, v Tensor, c AdamConfig) {
	checkLen("Adam g", g, p.Len())
	kern.Adam(host(p), host(g), host(m), host(v), c.LR, c.Beta1, c.Beta2, c.Eps, c.WeightDecay, c.Decoupled, c.Step)
}
