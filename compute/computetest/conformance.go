// Package computetest holds what every compute backend is tested with: the
// conformance suite Run, which checks each op of a Backend against the
// float64 reference kernels on fresh random inputs, and FakeGroup, an
// in-process collective group for tests of data-parallel code.
//
// A backend's test calls it once:
//
//	func TestConformance(t *testing.T) { computetest.Run(t, mybackend) }
//
// Every output is poisoned with NaN before the op runs, so an op that leaves
// part of an output unwritten fails. Results must match the reference to a
// relative error (‖got-want‖/‖want‖) below Tolerance.Rel and an element-wise
// error below Tolerance.Abs·max|want|.
package computetest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/tempotrain/tempotrain/compute"
	"github.com/tempotrain/tempotrain/compute/internal/kern"
)

// Tolerance bounds the difference between a backend and the reference.
type Tolerance struct {
	Rel, Abs float64
}

// DefaultTolerance suits float32 arithmetic with float32 accumulation (GEMM
// over a few thousand terms).
var DefaultTolerance = Tolerance{Rel: 2e-5, Abs: 2e-4}

// Run runs the whole suite against b with DefaultTolerance.
func Run(t *testing.T, b compute.Backend) { RunTol(t, b, DefaultTolerance) }

// RunTol runs the suite with a given tolerance (looser for reduced-precision
// paths such as TF32).
func RunTol(t *testing.T, b compute.Backend, tol Tolerance) {
	s := &suite{b: b, tol: tol}
	for _, c := range []struct {
		name string
		f    func(t *testing.T)
	}{
		{"Linear", s.linear},
		{"Conv2D", s.conv},
		{"ConvPool2D", s.convPool},
		{"Pool", s.pool},
		{"BatchNorm", s.batchNorm},
		{"Elementwise", s.elementwise},
		{"SoftmaxCrossEntropy", s.softmax},
		{"SGD", s.sgd},
		{"Adam", s.adam},
	} {
		t.Run(c.name, c.f)
	}
}

type suite struct {
	b   compute.Backend
	tol Tolerance
}

// data is a tensor's host values in both precisions.
type data struct {
	f32 []float32
	f64 []float64
}

func random(r *rand.Rand, n int, scale float64) data {
	d := data{make([]float32, n), make([]float64, n)}
	for i := range d.f32 {
		d.f32[i] = float32(r.NormFloat64() * scale)
		d.f64[i] = float64(d.f32[i])
	}
	return d
}

func fromF32(v []float32) data {
	d := data{v, make([]float64, len(v))}
	for i, x := range v {
		d.f64[i] = float64(x)
	}
	return d
}

// in uploads d as a tensor of the given shape.
func (s *suite) in(d data, shape ...int) compute.Tensor {
	t := s.b.New(shape...)
	s.b.Upload(t, d.f32)
	return t
}

// out returns a tensor poisoned with NaN.
func (s *suite) out(shape ...int) compute.Tensor {
	t := s.b.New(shape...)
	s.b.Fill(t, float32(math.NaN()))
	return t
}

func (s *suite) get(t compute.Tensor) []float32 {
	h := make([]float32, t.Len())
	s.b.Download(h, t)
	return h
}

func (s *suite) check(t *testing.T, name string, got compute.Tensor, want []float64) {
	t.Helper()
	g := s.get(got)
	if len(g) != len(want) {
		t.Errorf("%s: %d elements, want %d", name, len(g), len(want))
		return
	}
	var diff, norm, maxAbs, maxErr float64
	worst := 0
	for i, w := range want {
		d := float64(g[i]) - w
		if math.IsNaN(d) {
			t.Errorf("%s[%d] = %v, want %v (output not written?)", name, i, g[i], w)
			return
		}
		diff += d * d
		norm += w * w
		maxAbs = math.Max(maxAbs, math.Abs(w))
		if math.Abs(d) > maxErr {
			maxErr, worst = math.Abs(d), i
		}
	}
	rel := math.Sqrt(diff) / math.Max(math.Sqrt(norm), 1e-30)
	if norm == 0 {
		rel = math.Sqrt(diff)
	}
	if rel > s.tol.Rel || maxErr > s.tol.Abs*math.Max(maxAbs, 1e-30) {
		t.Errorf("%s: relative error %.3g (max %g), element %d: got %v want %v (max error %.3g of max |want| %.3g, allowed %g)",
			name, rel, s.tol.Rel, worst, g[worst], want[worst], maxErr, maxAbs, s.tol.Abs)
	}
}

func (s *suite) linear(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 1))
	for _, c := range []struct {
		n, in, out int
		bias, dx   bool
		act        compute.Activation
	}{
		{1, 3, 2, true, true, compute.Identity},
		{7, 13, 5, false, true, compute.ReLUAct},
		{128, 784, 512, true, false, compute.ReLUAct},
		{128, 512, 256, true, true, compute.ReLUAct},
		{33, 256, 10, true, true, compute.Identity},
	} {
		name := fmt.Sprintf("%dx%d→%d act%d bias=%v", c.n, c.in, c.out, c.act, c.bias)
		relu := c.act == compute.ReLUAct
		x, w, b := random(r, c.n*c.in, 1), random(r, c.out*c.in, 0.1), random(r, c.out, 0.1)
		var bT compute.Tensor
		var b64 []float64
		if c.bias {
			bT, b64 = s.in(b, c.out), b.f64
		}
		xT, wT := s.in(x, c.n, c.in), s.in(w, c.out, c.in)
		y := s.out(c.n, c.out)
		s.b.Linear(xT, wT, bT, y, c.act)
		y64 := make([]float64, c.n*c.out)
		kern.Linear(x.f64, w.f64, b64, y64, c.n, c.in, c.out, relu)
		s.check(t, name+" y", y, y64)

		// Backward from the backend's own y, so both sides mask alike.
		yd := fromF32(s.get(y))
		dy := random(r, c.n*c.out, 1)
		dyT := s.in(dy, c.n, c.out)
		dw, db := s.out(c.out, c.in), s.out(c.out)
		var dx compute.Tensor
		var dx64 []float64
		if c.dx {
			dx, dx64 = s.out(c.n, c.in), make([]float64, c.n*c.in)
		}
		if !c.bias {
			db = compute.Tensor{}
		}
		s.b.LinearBackward(xT, wT, s.in(yd, c.n, c.out), dyT, dx, dw, db, c.act)
		dw64, db64 := make([]float64, c.out*c.in), make([]float64, c.out)
		if !c.bias {
			db64 = nil
		}
		kern.LinearBackward(x.f64, w.f64, yd.f64, dy.f64, dx64, dw64, db64, c.n, c.in, c.out, relu)
		s.check(t, name+" dw", dw, dw64)
		if c.bias {
			s.check(t, name+" db", db, db64)
		}
		if c.dx {
			s.check(t, name+" dx", dx, dx64)
		}
	}
}

func (s *suite) conv(t *testing.T) {
	r := rand.New(rand.NewPCG(2, 2))
	for _, c := range []struct {
		shape    compute.ConvShape
		n        int
		bias, dx bool
		act      compute.Activation
	}{
		{compute.ConvShape{C: 1, H: 28, W: 28, K: 32, KH: 3, KW: 3, Stride: 1, Pad: 1}, 4, true, false, compute.ReLUAct},  // CNN conv1
		{compute.ConvShape{C: 32, H: 14, W: 14, K: 64, KH: 3, KW: 3, Stride: 1, Pad: 1}, 3, true, true, compute.ReLUAct},  // CNN conv2
		{compute.ConvShape{C: 1, H: 28, W: 28, K: 8, KH: 7, KW: 7, Stride: 2, Pad: 3}, 2, false, false, compute.Identity}, // ResNet stem
		{compute.ConvShape{C: 8, H: 7, W: 7, K: 16, KH: 3, KW: 3, Stride: 2, Pad: 1}, 5, false, true, compute.Identity},
		{compute.ConvShape{C: 8, H: 7, W: 7, K: 16, KH: 1, KW: 1, Stride: 2, Pad: 0}, 5, false, true, compute.Identity},
		{compute.ConvShape{C: 16, H: 4, W: 4, K: 16, KH: 1, KW: 1, Stride: 1, Pad: 0}, 3, true, true, compute.ReLUAct},
		{compute.ConvShape{C: 16, H: 1, W: 1, K: 8, KH: 3, KW: 3, Stride: 1, Pad: 1}, 70, true, true, compute.Identity},
		{compute.ConvShape{C: 3, H: 9, W: 6, K: 4, KH: 3, KW: 2, Stride: 1, Pad: 0}, 2, true, true, compute.ReLUAct},
	} {
		sh := c.shape
		sh.Init()
		relu := c.act == compute.ReLUAct
		name := fmt.Sprintf("n%d C%d %dx%d K%d k%dx%d s%d p%d act%d", c.n, sh.C, sh.H, sh.W, sh.K, sh.KH, sh.KW, sh.Stride, sh.Pad, c.act)
		x, w, b := random(r, c.n*sh.C*sh.H*sh.W, 1), random(r, sh.K*sh.Col, 0.2), random(r, sh.K, 0.1)
		xT, wT := s.in(x, c.n, sh.C, sh.H, sh.W), s.in(w, sh.K, sh.C, sh.KH, sh.KW)
		var bT compute.Tensor
		var b64 []float64
		if c.bias {
			bT, b64 = s.in(b, sh.K), b.f64
		}
		ws := s.out(sh.Workspace(c.n))
		y := s.out(c.n, sh.K, sh.OutH, sh.OutW)
		s.b.Conv2D(&sh, xT, wT, bT, y, ws, c.act)
		y64 := make([]float64, c.n*sh.K*sh.Spatial)
		ws64 := make([]float64, sh.Workspace(c.n))
		kern.Conv2D(&sh, x.f64, w.f64, b64, y64, ws64, c.n, relu)
		s.check(t, name+" y", y, y64)

		yd := fromF32(s.get(y))
		dy := random(r, len(y64), 1)
		dw, db := s.out(sh.K, sh.C, sh.KH, sh.KW), s.out(sh.K)
		var dx compute.Tensor
		var dx64 []float64
		if c.dx {
			dx, dx64 = s.out(c.n, sh.C, sh.H, sh.W), make([]float64, len(x.f64))
		}
		db64 := make([]float64, sh.K)
		if !c.bias {
			db, db64 = compute.Tensor{}, nil
		}
		s.b.Fill(ws, float32(math.NaN()))
		s.b.Conv2DBackward(&sh, xT, wT, s.in(yd, c.n, sh.K, sh.OutH, sh.OutW), s.in(dy, c.n, sh.K, sh.OutH, sh.OutW), dx, dw, db, ws, c.act)
		dw64 := make([]float64, len(w.f64))
		kern.Conv2DBackward(&sh, x.f64, w.f64, yd.f64, dy.f64, dx64, dw64, db64, ws64, c.n, relu)
		s.check(t, name+" dw", dw, dw64)
		if c.bias {
			s.check(t, name+" db", db, db64)
		}
		if c.dx {
			s.check(t, name+" dx", dx, dx64)
		}
	}
}

func (s *suite) convPool(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 9))
	for _, c := range []struct {
		shape compute.ConvShape
		n     int
		dx    bool
		act   compute.Activation
	}{
		{compute.ConvShape{C: 1, H: 28, W: 28, K: 32, KH: 3, KW: 3, Stride: 1, Pad: 1}, 3, false, compute.ReLUAct}, // CNN conv1
		{compute.ConvShape{C: 32, H: 14, W: 14, K: 64, KH: 3, KW: 3, Stride: 1, Pad: 1}, 4, true, compute.ReLUAct}, // CNN conv2
		{compute.ConvShape{C: 3, H: 9, W: 7, K: 5, KH: 3, KW: 3, Stride: 1, Pad: 1}, 5, true, compute.Identity},
	} {
		sh := c.shape
		sh.Init()
		relu := c.act == compute.ReLUAct
		pooled := []int{c.n, sh.K, sh.OutH / 2, sh.OutW / 2}
		name := fmt.Sprintf("n%d C%d %dx%d K%d act%d", c.n, sh.C, sh.H, sh.W, sh.K, c.act)
		x, w, b := random(r, c.n*sh.C*sh.H*sh.W, 1), random(r, sh.K*sh.Col, 0.2), random(r, sh.K, 0.1)
		xT, wT, bT := s.in(x, c.n, sh.C, sh.H, sh.W), s.in(w, sh.K, sh.C, sh.KH, sh.KW), s.in(b, sh.K)
		ws := s.out(sh.Workspace(c.n))
		y, idx := s.out(pooled...), s.out(pooled...)
		s.b.ConvPool2D(&sh, xT, wT, bT, y, idx, ws, c.act)
		y64, idx64 := make([]float64, c.n*sh.PooledLen()), make([]float64, c.n*sh.PooledLen())
		ws64 := make([]float64, sh.Workspace(c.n))
		kern.Conv2DPool(&sh, x.f64, w.f64, b.f64, y64, idx64, ws64, c.n, relu)
		s.check(t, name+" y", y, y64)

		// The backward from the backend's own y and idx (a near tie may pick
		// another window position in float32).
		yd, idd := fromF32(s.get(y)), fromF32(s.get(idx))
		dy := random(r, len(y64), 1)
		dw, db := s.out(sh.K, sh.C, sh.KH, sh.KW), s.out(sh.K)
		var dx compute.Tensor
		var dx64 []float64
		if c.dx {
			dx, dx64 = s.out(c.n, sh.C, sh.H, sh.W), make([]float64, len(x.f64))
		}
		s.b.Fill(ws, float32(math.NaN()))
		s.b.ConvPool2DBackward(&sh, xT, wT, s.in(yd, pooled...), s.in(idd, pooled...), s.in(dy, pooled...), dx, dw, db, ws, c.act)
		dw64, db64 := make([]float64, len(w.f64)), make([]float64, sh.K)
		kern.Conv2DPoolBackward(&sh, x.f64, w.f64, yd.f64, idd.f64, dy.f64, dx64, dw64, db64, ws64, c.n, relu)
		s.check(t, name+" dw", dw, dw64)
		s.check(t, name+" db", db, db64)
		if c.dx {
			s.check(t, name+" dx", dx, dx64)
		}
	}
}

func (s *suite) pool(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 3))
	for _, c := range []struct {
		shape compute.PoolShape
		n, ch int
		avg   bool
	}{
		{compute.PoolShape{H: 28, W: 28, KH: 2, KW: 2, Stride: 2}, 3, 32, false},
		{compute.PoolShape{H: 7, W: 9, KH: 2, KW: 2, Stride: 2}, 2, 3, false}, // odd sizes: a row and a column uncovered
		{compute.PoolShape{H: 14, W: 14, KH: 3, KW: 3, Stride: 2, Pad: 1}, 2, 8, false},
		{compute.PoolShape{H: 7, W: 7, KH: 7, KW: 7, Stride: 1}, 4, 16, true},
		{compute.PoolShape{H: 6, W: 6, KH: 3, KW: 3, Stride: 2, Pad: 1}, 2, 5, true},
	} {
		sh := c.shape
		sh.Init()
		name := fmt.Sprintf("avg=%v %dx%d k%d s%d p%d", c.avg, sh.H, sh.W, sh.KH, sh.Stride, sh.Pad)
		planes := c.n * c.ch
		x := random(r, planes*sh.H*sh.W, 1)
		xT := s.in(x, c.n, c.ch, sh.H, sh.W)
		y := s.out(c.n, c.ch, sh.OutH, sh.OutW)
		y64 := make([]float64, planes*sh.OutH*sh.OutW)
		dy := random(r, len(y64), 1)
		dyT := s.in(dy, c.n, c.ch, sh.OutH, sh.OutW)
		dx := s.out(c.n, c.ch, sh.H, sh.W)
		dx64 := make([]float64, len(x.f64))
		if c.avg {
			s.b.AvgPool2D(&sh, xT, y)
			kern.AvgPool(&sh, x.f64, y64, planes)
			s.b.AvgPool2DBackward(&sh, dyT, dx)
			kern.AvgPoolBackward(&sh, dy.f64, dx64, planes)
		} else {
			s.b.MaxPool2D(&sh, xT, y)
			kern.MaxPool(&sh, x.f64, y64, planes)
			s.b.MaxPool2DBackward(&sh, xT, dyT, dx)
			kern.MaxPoolBackward(&sh, x.f64, dy.f64, dx64, planes)
		}
		s.check(t, name+" y", y, y64)
		s.check(t, name+" dx", dx, dx64)
	}
}

func (s *suite) batchNorm(t *testing.T) {
	r := rand.New(rand.NewPCG(4, 4))
	for _, c := range [][3]int{{16, 8, 49}, {32, 64, 1}, {2, 3, 196}} {
		n, ch, sp := c[0], c[1], c[2]
		name := fmt.Sprintf("%dx%dx%d", n, ch, sp)
		x := random(r, n*ch*sp, 2)
		for i := range x.f32 { // an offset per channel, as after a convolution
			x.f32[i] += float32(i / sp % ch)
			x.f64[i] = float64(x.f32[i])
		}
		g, b := random(r, ch, 1), random(r, ch, 1)
		rm, rv := random(r, ch, 0.1), random(r, ch, 0.1)
		for i := range rv.f32 {
			rv.f32[i] = 1 + float32(math.Abs(float64(rv.f32[i])))
			rv.f64[i] = float64(rv.f32[i])
		}
		shape := []int{n, ch, sp}
		xT, gT, bT := s.in(x, shape...), s.in(g, ch), s.in(b, ch)
		rmT, rvT := s.in(rm, ch), s.in(rv, ch)
		y, mean, invstd := s.out(shape...), s.out(ch), s.out(ch)
		s.b.BatchNormTrain(xT, gT, bT, y, mean, invstd, rmT, rvT, 0.1, 1e-5)
		y64, m64, is64 := make([]float64, len(x.f64)), make([]float64, ch), make([]float64, ch)
		rm64, rv64 := append([]float64(nil), rm.f64...), append([]float64(nil), rv.f64...)
		kern.BatchNormTrain(x.f64, g.f64, b.f64, y64, m64, is64, rm64, rv64, n, ch, sp, 0.1, 1e-5)
		s.check(t, name+" train y", y, y64)
		s.check(t, name+" mean", mean, m64)
		s.check(t, name+" invstd", invstd, is64)
		s.check(t, name+" running_mean", rmT, rm64)
		s.check(t, name+" running_var", rvT, rv64)

		dy := random(r, len(x.f64), 1)
		dx, dg, db := s.out(shape...), s.out(ch), s.out(ch)
		s.b.BatchNormBackward(xT, gT, s.in(dy, shape...), mean, invstd, dx, dg, db)
		dx64, dg64, db64 := make([]float64, len(x.f64)), make([]float64, ch), make([]float64, ch)
		kern.BatchNormBackward(x.f64, g.f64, dy.f64, m64, is64, dx64, dg64, db64, n, ch, sp)
		s.check(t, name+" dx", dx, dx64)
		s.check(t, name+" dgamma", dg, dg64)
		s.check(t, name+" dbeta", db, db64)

		ye := s.out(shape...)
		s.b.BatchNormEval(xT, gT, bT, rmT, rvT, ye, 1e-5)
		kern.BatchNormEval(x.f64, g.f64, b.f64, rm64, rv64, y64, n, ch, sp, 1e-5)
		s.check(t, name+" eval y", ye, y64)
	}
}

func (s *suite) elementwise(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 5))
	for _, n := range []int{1, 17, 4099} {
		a, b := random(r, n, 1), random(r, n, 1)
		aT, bT := s.in(a, n), s.in(b, n)
		want := make([]float64, n)

		y := s.out(n)
		s.b.ReLU(aT, y)
		kern.ReLU(a.f64, want)
		s.check(t, "relu", y, want)
		// In place, as the ReLU layer runs it.
		yi := s.in(a, n)
		s.b.ReLU(yi, yi)
		s.check(t, "relu in place", yi, want)

		dx := s.out(n)
		s.b.ReLUBackward(s.in(fromF32(s.get(y)), n), bT, dx)
		kern.ReLUBackward(want, b.f64, want)
		s.check(t, "relu backward", dx, want)

		sum := s.out(n)
		s.b.Add(sum, aT, bT)
		kern.Add(want, a.f64, b.f64)
		s.check(t, "add", sum, want)

		acc := s.in(a, n)
		s.b.AddTo(acc, bT)
		s.check(t, "add to", acc, want)

		prod := s.out(n)
		s.b.Mul(prod, aT, bT)
		kern.Mul(want, a.f64, b.f64)
		s.check(t, "mul", prod, want)

		cp := s.out(n)
		s.b.Copy(cp, aT)
		s.check(t, "copy", cp, a.f64)

		s.b.Fill(cp, 2.5)
		for i := range want {
			want[i] = 2.5
		}
		s.check(t, "fill", cp, want)

		for _, p := range []float64{0, 0.1, 0.5} {
			mask := s.out(n)
			s.b.DropoutMask(mask, p, 99)
			kern.DropoutMask(want, p, 99)
			s.check(t, fmt.Sprintf("dropout mask p=%g", p), mask, want)
		}
	}
}

func (s *suite) softmax(t *testing.T) {
	r := rand.New(rand.NewPCG(6, 6))
	for _, c := range [][2]int{{1, 10}, {128, 10}, {5, 1000}} {
		n, k := c[0], c[1]
		logits := random(r, n*k, 3)
		labels := data{make([]float32, n), make([]float64, n)}
		for i := range labels.f32 {
			l := r.IntN(k)
			labels.f32[i], labels.f64[i] = float32(l), float64(l)
		}
		d, stats := s.out(n, k), s.out(2)
		s.b.SoftmaxCrossEntropy(s.in(logits, n, k), s.in(labels, n), d, stats)
		d64 := make([]float64, n*k)
		loss, correct := kern.SoftmaxCrossEntropy(logits.f64, labels.f64, d64, n, k)
		name := fmt.Sprintf("%dx%d", n, k)
		s.check(t, name+" dlogits", d, d64)
		s.check(t, name+" stats", stats, []float64{loss, float64(correct)})
		if got := s.get(stats); int(got[1]) != correct {
			t.Errorf("%s: %v correct, want %d", name, got[1], correct)
		}
	}
}

func (s *suite) sgd(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	n := 1000
	for _, c := range []compute.SGDConfig{
		{LR: 0.1},
		{LR: 0.05, WeightDecay: 1e-4},
		{LR: 0.05, Momentum: 0.9, First: true},
		{LR: 0.05, Momentum: 0.9},
		{LR: 0.05, Momentum: 0.9, Dampening: 0.1, WeightDecay: 5e-4},
		{LR: 0.05, Momentum: 0.9, Nesterov: true, WeightDecay: 5e-4},
		{LR: 0.05, Momentum: 0.9, Nesterov: true, First: true},
	} {
		name := fmt.Sprintf("%+v", c)
		p, g, buf := random(r, n, 1), random(r, n, 1), random(r, n, 1)
		pT, bufT := s.in(p, n), s.in(buf, n)
		var bT compute.Tensor
		if c.Momentum != 0 {
			bT = bufT
		}
		s.b.SGD(pT, s.in(g, n), bT, c)
		kern.SGD(p.f64, g.f64, buf.f64, c.LR, c.Momentum, c.Dampening, c.WeightDecay, c.Nesterov, c.First)
		s.check(t, name+" p", pT, p.f64)
		if c.Momentum != 0 {
			s.check(t, name+" momentum", bufT, buf.f64)
		}
	}
}

func (s *suite) adam(t *testing.T) {
	r := rand.New(rand.NewPCG(8, 8))
	n := 1000
	for _, c := range []compute.AdamConfig{
		{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, Step: 1},
		{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, Step: 10, WeightDecay: 1e-2},
		{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, Step: 3, WeightDecay: 1e-2, Decoupled: true},
	} {
		name := fmt.Sprintf("%+v", c)
		p, g, m, v := random(r, n, 1), random(r, n, 1), random(r, n, 0.1), random(r, n, 0.1)
		for i := range v.f32 {
			v.f32[i] = float32(math.Abs(float64(v.f32[i])))
			v.f64[i] = float64(v.f32[i])
		}
		pT, mT, vT := s.in(p, n), s.in(m, n), s.in(v, n)
		s.b.Adam(pT, s.in(g, n), mT, vT, c)
		kern.Adam(p.f64, g.f64, m.f64, v.f64, c.LR, c.Beta1, c.Beta2, c.Eps, c.WeightDecay, c.Decoupled, c.Step)
		s.check(t, name+" p", pT, p.f64)
		s.check(t, name+" m", mT, m.f64)
		s.check(t, name+" v", vT, v.f64)
	}
}
