package gpu

import (
	"math"

	"github.com/tempotrain/tempotrain/compute"
)

// The ops of compute.Backend. Each checks lengths as the CPU backend does,
// then queues kernels and GEMMs; see kernels.cu for what each kernel does
// and which CPU kernel it mirrors.

func (b *Backend) Fill(t compute.Tensor, v float32) {
	b.launch(kFill, t.Len(), w(t), wi(t.Len()), wf(float64(v)))
}

func (b *Backend) Copy(dst, src compute.Tensor) {
	checkLen("Copy", dst, src.Len())
	b.launch(kCopy, dst.Len(), w(dst), w(src), wi(dst.Len()))
}

func (b *Backend) Add(dst, a, bt compute.Tensor) {
	checkLen("Add", a, dst.Len())
	checkLen("Add", bt, dst.Len())
	b.launch(kAdd, dst.Len(), w(dst), w(a), w(bt), wi(dst.Len()))
}

func (b *Backend) AddTo(dst, src compute.Tensor) {
	checkLen("AddTo", src, dst.Len())
	b.launch(kAddTo, dst.Len(), w(dst), w(src), wi(dst.Len()))
}

func (b *Backend) Mul(dst, a, bt compute.Tensor) {
	checkLen("Mul", a, dst.Len())
	checkLen("Mul", bt, dst.Len())
	b.launch(kMul, dst.Len(), w(dst), w(a), w(bt), wi(dst.Len()))
}

func (b *Backend) ReLU(x, y compute.Tensor) {
	checkLen("ReLU", y, x.Len())
	b.launch(kReLU, x.Len(), w(x), w(y), wi(x.Len()))
}

func (b *Backend) ReLUBackward(y, dy, dx compute.Tensor) {
	checkLen("ReLUBackward", dy, y.Len())
	checkLen("ReLUBackward", dx, y.Len())
	b.launch(kReLUBwd, y.Len(), w(y), w(dy), w(dx), wi(y.Len()))
}

func (b *Backend) DropoutMask(mask compute.Tensor, p float64, seed uint64) {
	// kern.DropoutMask's threshold on 24 bits and scale, computed alike.
	thr := uint64(p * (1 << 24))
	b.launch(kDropoutMask, mask.Len(), w(mask), wi(mask.Len()), seed, thr, wf(1/(1-p)))
}

func rowsOf(x compute.Tensor) (n, rest int) {
	n = x.Dim(0)
	return n, x.Len() / max(n, 1)
}

func (b *Backend) Linear(x, wt, bias, y compute.Tensor, act compute.Activation) {
	n, in := rowsOf(x)
	out := wt.Dim(0)
	checkLen("Linear w", wt, out*in)
	checkLen("Linear y", y, n*out)
	if !bias.IsZero() {
		checkLen("Linear b", bias, out)
	}
	relu := act == compute.ReLUAct
	b.gemm(false, true, n, out, in, 1, ptr(x), in, ptr(wt), in, 0, ptr(y), out)
	if !bias.IsZero() || relu {
		b.launch(kBiasAct, n*out, w(y), wo(bias), wi(n), wi(out), 1, wb(relu))
	}
}

func (b *Backend) LinearBackward(x, wt, y, dy, dx, dw, db compute.Tensor, act compute.Activation) {
	n, in := rowsOf(x)
	out := wt.Dim(0)
	checkLen("LinearBackward dy", dy, n*out)
	checkLen("LinearBackward dw", dw, out*in)
	relu := act == compute.ReLUAct
	if relu {
		checkLen("LinearBackward y", y, n*out)
	}
	if !db.IsZero() || relu {
		b.launchBlocks(kActBwdSum, out, wo(y), w(dy), wo(db), wi(n), wi(out), 1, wb(relu))
	}
	b.gemm(true, false, out, in, n, 1, ptr(dy), out, ptr(x), in, 0, ptr(dw), in)
	if !dx.IsZero() {
		checkLen("LinearBackward dx", dx, n*in)
		b.gemm(false, false, n, in, out, 1, ptr(dy), out, ptr(wt), in, 0, ptr(dx), in)
	}
}

// ---- convolution ----------------------------------------------------------
//
// A group of g samples is one GEMM: im2col writes the group's columns
// col [Col, g·P] (P = OutH·OutW), conv [K, g·P] = w [K, Col] · col, and an
// epilogue adds the bias, applies the activation (and the fused 2×2 max
// pooling) and transposes into y [g, K, ...]. The backward transposes dy into
// that layout (dyT), then dw += dyT·colᵀ, dcol = wᵀ·dyT and col2im gathers
// dcol into dx. Groups are as large as Options.MaxScratchBytes allows: for
// the models here, the whole batch. The workspace tensor of the CPU backend
// is not used: the scratch is the backend's own.

func (b *Backend) convGroup(s *compute.ConvShape, n int) int {
	per := (2*s.Col + s.K) * s.Spatial * 4
	return max(1, min(n, b.o.MaxScratchBytes/max(per, 1)))
}

func (b *Backend) im2col(s *compute.ConvShape, x uintptr, col uintptr, g int) {
	b.launch(kIm2Col, s.Col*g*s.Spatial, wp(x), wp(col), wi(g), wi(s.C), wi(s.H), wi(s.W), wi(s.KH), wi(s.KW),
		wi(s.Stride), wi(s.Pad), wi(s.OutH), wi(s.OutW))
}

func (b *Backend) conv(s *compute.ConvShape, x, wt, bias, y, idx compute.Tensor, act compute.Activation, pool bool) {
	n := x.Dim(0)
	checkLen("Conv2D x", x, n*s.C*s.H*s.W)
	checkLen("Conv2D w", wt, s.K*s.Col)
	out := s.K * s.Spatial
	if pool {
		out = s.PooledLen()
		checkLen("ConvPool2D idx", idx, n*out)
	}
	checkLen("Conv2D y", y, n*out)
	in, P := s.C*s.H*s.W, s.Spatial
	g := b.convGroup(s, n)
	// The backward's size: one scratch for both passes keeps a step's
	// addresses the same from its first run on (RunGraph matches them).
	col := b.scratchFloats((2*s.Col + s.K) * g * P)
	tmp := col + uintptr(2*s.Col*g*P*4)
	relu := wb(act == compute.ReLUAct)
	for n0 := 0; n0 < n; n0 += g {
		gn := min(g, n-n0)
		b.im2col(s, ptr(x)+uintptr(n0*in*4), col, gn)
		b.gemm(false, false, s.K, gn*P, s.Col, 1, ptr(wt), s.Col, col, gn*P, 0, tmp, gn*P)
		yg := ptr(y) + uintptr(n0*out*4)
		if pool {
			b.launch(kConvPoolOut, gn*out, wp(tmp), wo(bias), wp(yg), wp(ptr(idx)+uintptr(n0*out*4)),
				wi(gn), wi(s.K), wi(s.OutH), wi(s.OutW), relu)
		} else {
			b.launch(kConvOut, gn*out, wp(tmp), wo(bias), wp(yg), wi(gn), wi(s.K), wi(P), relu)
		}
	}
}

func (b *Backend) convBackward(s *compute.ConvShape, x, wt, y, idx, dy, dx, dw, db compute.Tensor, act compute.Activation, pool bool) {
	n := x.Dim(0)
	out := s.K * s.Spatial
	if pool {
		out = s.PooledLen()
	}
	checkLen("Conv2DBackward dy", dy, n*out)
	checkLen("Conv2DBackward dw", dw, s.K*s.Col)
	in, P := s.C*s.H*s.W, s.Spatial
	g := b.convGroup(s, n)
	col := b.scratchFloats((2*s.Col + s.K) * g * P)
	dcol := col + uintptr(s.Col*g*P*4)
	dyT := dcol + uintptr(s.Col*g*P*4)
	relu := act == compute.ReLUAct
	for n0 := 0; n0 < n; n0 += g {
		gn := min(g, n-n0)
		off := uintptr(n0 * out * 4)
		if pool {
			b.launch(kPool2ScatterT, s.K*gn*P, wp(ptr(dy)+off), wp(ptr(y)+off), wp(ptr(idx)+off), wp(dyT),
				wi(gn), wi(s.K), wi(s.OutH), wi(s.OutW), wb(relu))
		} else {
			var yg uintptr
			if relu {
				yg = ptr(y) + off
			}
			b.launch(kConvDyT, s.K*gn*P, wp(yg), wp(ptr(dy)+off), wp(dyT), wi(gn), wi(s.K), wi(P), wb(relu))
		}
		if !db.IsZero() {
			b.launchBlocks(kRowSum, s.K, wp(dyT), w(db), wi(s.K), wi(gn*P), wb(n0 > 0))
		}
		b.im2col(s, ptr(x)+uintptr(n0*in*4), col, gn)
		var beta float32
		if n0 > 0 {
			beta = 1
		}
		b.gemm(false, true, s.K, s.Col, gn*P, 1, dyT, gn*P, col, gn*P, beta, ptr(dw), s.Col)
		if dx.IsZero() {
			continue
		}
		b.gemm(true, false, s.Col, gn*P, s.K, 1, ptr(wt), s.Col, dyT, gn*P, 0, dcol, gn*P)
		b.launch(kCol2Im, gn*in, wp(dcol), wp(ptr(dx)+uintptr(n0*in*4)), wi(gn), wi(s.C), wi(s.H), wi(s.W),
			wi(s.KH), wi(s.KW), wi(s.Stride), wi(s.Pad), wi(s.OutH), wi(s.OutW))
	}
}

func (b *Backend) Conv2D(s *compute.ConvShape, x, wt, bias, y, _ compute.Tensor, act compute.Activation) {
	b.conv(s, x, wt, bias, y, compute.Tensor{}, act, false)
}

func (b *Backend) Conv2DBackward(s *compute.ConvShape, x, wt, y, dy, dx, dw, db, _ compute.Tensor, act compute.Activation) {
	b.convBackward(s, x, wt, y, compute.Tensor{}, dy, dx, dw, db, act, false)
}

func (b *Backend) ConvPool2D(s *compute.ConvShape, x, wt, bias, y, idx, _ compute.Tensor, act compute.Activation) {
	b.conv(s, x, wt, bias, y, idx, act, true)
}

func (b *Backend) ConvPool2DBackward(s *compute.ConvShape, x, wt, y, idx, dy, dx, dw, db, _ compute.Tensor, act compute.Activation) {
	b.convBackward(s, x, wt, y, idx, dy, dx, dw, db, act, true)
}

// ---- pooling ----------------------------------------------------------------

func planes(s *compute.PoolShape, x compute.Tensor) int {
	pl := x.Len() / max(s.H*s.W, 1)
	checkLen("pool input", x, pl*s.H*s.W)
	return pl
}

func poolArgs(s *compute.PoolShape, pl int) []uint64 {
	return []uint64{wi(pl), wi(s.H), wi(s.W), wi(s.KH), wi(s.KW), wi(s.Stride), wi(s.Pad), wi(s.OutH), wi(s.OutW)}
}

func (b *Backend) pool(k Kernel, n int, s *compute.PoolShape, pl int, a, c compute.Tensor, d ...compute.Tensor) {
	args := []uint64{w(a), w(c)}
	for _, t := range d {
		args = append(args, w(t))
	}
	b.launch(k, n, append(args, poolArgs(s, pl)...)...)
}

func (b *Backend) MaxPool2D(s *compute.PoolShape, x, y compute.Tensor) {
	pl := planes(s, x)
	checkLen("MaxPool2D y", y, pl*s.OutH*s.OutW)
	b.pool(kMaxPool, pl*s.OutH*s.OutW, s, pl, x, y)
}

func (b *Backend) MaxPool2DBackward(s *compute.PoolShape, x, dy, dx compute.Tensor) {
	pl := planes(s, x)
	checkLen("MaxPool2DBackward dy", dy, pl*s.OutH*s.OutW)
	checkLen("MaxPool2DBackward dx", dx, x.Len())
	b.pool(kMaxPoolBwd, x.Len(), s, pl, x, dy, dx)
}

func (b *Backend) AvgPool2D(s *compute.PoolShape, x, y compute.Tensor) {
	pl := planes(s, x)
	checkLen("AvgPool2D y", y, pl*s.OutH*s.OutW)
	b.pool(kAvgPool, pl*s.OutH*s.OutW, s, pl, x, y)
}

func (b *Backend) AvgPool2DBackward(s *compute.PoolShape, dy, dx compute.Tensor) {
	pl := planes(s, dx)
	checkLen("AvgPool2DBackward dy", dy, pl*s.OutH*s.OutW)
	b.pool(kAvgPoolBwd, dx.Len(), s, pl, dy, dx)
}

// ---- batch norm -------------------------------------------------------------

func bnDims(x compute.Tensor) (n, c, s int) {
	n, c = x.Dim(0), x.Dim(1)
	return n, c, x.Len() / max(n*c, 1)
}

func (b *Backend) BatchNormTrain(x, gamma, beta, y, mean, invstd, runMean, runVar compute.Tensor, momentum, eps float64) {
	n, c, s := bnDims(x)
	checkLen("BatchNormTrain y", y, x.Len())
	for _, t := range []compute.Tensor{gamma, beta, mean, invstd, runMean, runVar} {
		checkLen("BatchNormTrain channel tensor", t, c)
	}
	b.launchBlocks(kBNTrain, c, w(x), w(gamma), w(beta), w(y), w(mean), w(invstd), w(runMean), w(runVar),
		wi(n), wi(c), wi(s), wf(momentum), wf(eps))
}

func (b *Backend) BatchNormEval(x, gamma, beta, runMean, runVar, y compute.Tensor, eps float64) {
	n, c, s := bnDims(x)
	checkLen("BatchNormEval y", y, x.Len())
	b.launch(kBNEval, x.Len(), w(x), w(gamma), w(beta), w(runMean), w(runVar), w(y), wi(n), wi(c), wi(s), wf(eps))
}

func (b *Backend) BatchNormBackward(x, gamma, dy, mean, invstd, dx, dgamma, dbeta compute.Tensor) {
	n, c, s := bnDims(x)
	checkLen("BatchNormBackward dy", dy, x.Len())
	checkLen("BatchNormBackward dx", dx, x.Len())
	b.launchBlocks(kBNBwd, c, w(x), w(gamma), w(dy), w(mean), w(invstd), w(dx), w(dgamma), w(dbeta), wi(n), wi(c), wi(s))
}

// ---- loss and optimizers ------------------------------------------------------

func (b *Backend) SoftmaxCrossEntropy(logits, labels, dlogits, stats compute.Tensor) {
	n, c := rowsOf(logits)
	checkLen("SoftmaxCrossEntropy labels", labels, n)
	checkLen("SoftmaxCrossEntropy stats", stats, 2)
	if !dlogits.IsZero() {
		checkLen("SoftmaxCrossEntropy dlogits", dlogits, n*c)
	}
	b.launchBlocks(kSoftmaxXent, 1, w(logits), w(labels), wo(dlogits), w(stats), wi(n), wi(c))
}

func (b *Backend) SGD(p, g, buf compute.Tensor, c compute.SGDConfig) {
	checkLen("SGD g", g, p.Len())
	var bp uint64
	if c.Momentum != 0 {
		checkLen("SGD momentum buffer", buf, p.Len())
		bp = w(buf)
	}
	b.launch(kSGD, p.Len(), w(p), w(g), bp, wi(p.Len()), wf(c.LR), wf(c.Momentum), wf(c.Dampening), wf(c.WeightDecay),
		wb(c.Nesterov), wb(c.First))
}

func (b *Backend) Adam(p, g, m, v compute.Tensor, c compute.AdamConfig) {
	checkLen("Adam g", g, p.Len())
	checkLen("Adam m", m, p.Len())
	checkLen("Adam v", v, p.Len())
	// kern.Adam's bias corrections, computed in float64 on the host alike.
	bc1 := 1 - math.Pow(c.Beta1, float64(c.Step))
	bc2 := 1 - math.Pow(c.Beta2, float64(c.Step))
	b.launch(kAdam, p.Len(), w(p), w(g), w(m), w(v), wi(p.Len()), wf(c.LR), wf(c.Beta1), wf(c.Beta2), wf(c.Eps),
		wf(c.WeightDecay), wb(c.Decoupled), wf(c.LR/bc1), wf(math.Sqrt(bc2)))
}
