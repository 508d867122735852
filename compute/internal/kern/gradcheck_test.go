package kern

import (
	"math"
	"math/rand/v2"
	"testing"
)

// The backward of every op is checked against central finite differences in
// float64: for L = Σ y·r with a fixed random r, the analytic dL/dθ from the
// backward kernel must match (L(θ+h) - L(θ-h)) / 2h to a relative error
// (‖analytic - numeric‖ / max(‖analytic‖, ‖numeric‖)) below 1e-4.

const (
	fdStep   = 1e-6
	fdMaxRel = 1e-4
)

func randVec(r *rand.Rand, n int) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = r.NormFloat64()
	}
	return v
}

func dot(a, b []float64) float64 {
	var s float64
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}

// checkGrad compares analytic with the numeric gradient of loss with respect
// to theta (perturbed in place).
func checkGrad(t *testing.T, name string, theta, analytic []float64, loss func() float64) {
	t.Helper()
	numeric := make([]float64, len(theta))
	for i := range theta {
		old := theta[i]
		theta[i] = old + fdStep
		lp := loss()
		theta[i] = old - fdStep
		lm := loss()
		theta[i] = old
		numeric[i] = (lp - lm) / (2 * fdStep)
	}
	var diff, na, nn float64
	for i := range numeric {
		d := analytic[i] - numeric[i]
		diff += d * d
		na += analytic[i] * analytic[i]
		nn += numeric[i] * numeric[i]
	}
	rel := math.Sqrt(diff) / math.Max(math.Max(math.Sqrt(na), math.Sqrt(nn)), 1e-12)
	if rel > fdMaxRel || math.IsNaN(rel) {
		t.Errorf("%s: relative error %.3g > %g (‖analytic‖=%.4g ‖numeric‖=%.4g)", name, rel, fdMaxRel, math.Sqrt(na), math.Sqrt(nn))
	} else {
		t.Logf("%s: relative error %.3g", name, rel)
	}
}

func TestGradLinear(t *testing.T) {
	t.Parallel()
	for _, relu := range []bool{false, true} {
		r := rand.New(rand.NewPCG(1, 2))
		n, in, out := 3, 5, 4
		x, w, b := randVec(r, n*in), randVec(r, out*in), randVec(r, out)
		ry := randVec(r, n*out)
		y := make([]float64, n*out)
		loss := func() float64 { Linear(x, w, b, y, n, in, out, relu); return dot(y, ry) }
		loss()
		dx, dw, db := make([]float64, n*in), make([]float64, out*in), make([]float64, out)
		dy := append([]float64(nil), ry...)
		LinearBackward(x, w, y, dy, dx, dw, db, n, in, out, relu)
		name := map[bool]string{false: "linear ", true: "linear+relu "}[relu]
		checkGrad(t, name+"dx", x, dx, loss)
		checkGrad(t, name+"dw", w, dw, loss)
		checkGrad(t, name+"db", b, db, loss)
	}
}

func TestGradConv2D(t *testing.T) {
	t.Parallel()
	shapes := []ConvShape{
		{C: 2, H: 5, W: 6, K: 3, KH: 3, KW: 3, Stride: 1, Pad: 1},
		{C: 3, H: 7, W: 7, K: 2, KH: 3, KW: 3, Stride: 2, Pad: 1},
		{C: 2, H: 6, W: 5, K: 4, KH: 1, KW: 1, Stride: 1, Pad: 0},
		{C: 3, H: 5, W: 5, K: 2, KH: 1, KW: 1, Stride: 2, Pad: 0},
		{C: 1, H: 9, W: 9, K: 2, KH: 7, KW: 7, Stride: 2, Pad: 3},
		{C: 2, H: 1, W: 1, K: 3, KH: 3, KW: 3, Stride: 1, Pad: 1},
		// A plane of 256 outputs: one sample per GEMM, dw accumulated over samples.
		{C: 1, H: 16, W: 16, K: 2, KH: 3, KW: 3, Stride: 1, Pad: 1},
	}
	for _, s := range shapes {
		r := rand.New(rand.NewPCG(3, uint64(s.C*100+s.KH*10+s.Stride)))
		s.Init()
		for _, n := range []int{1, 3} {
			relu := n == 3
			x, w, b := randVec(r, n*s.C*s.H*s.W), randVec(r, s.K*s.Col), randVec(r, s.K)
			ry := randVec(r, n*s.K*s.Spatial)
			y := make([]float64, len(ry))
			ws := make([]float64, s.Workspace(n))
			loss := func() float64 { Conv2D(&s, x, w, b, y, ws, n, relu); return dot(y, ry) }
			loss()
			dx, dw, db := make([]float64, len(x)), make([]float64, len(w)), make([]float64, len(b))
			dy := append([]float64(nil), ry...)
			Conv2DBackward(&s, x, w, y, dy, dx, dw, db, ws, n, relu)
			name := func(p string) string {
				return p + " n" + string(rune('0'+n)) + map[bool]string{true: "+relu "}[relu] + " " + fmtShape(s)
			}
			checkGrad(t, name("dx"), x, dx, loss)
			checkGrad(t, name("dw"), w, dw, loss)
			checkGrad(t, name("db"), b, db, loss)
		}
	}
}

func TestGradConv2DPool(t *testing.T) {
	t.Parallel()
	for _, s := range []ConvShape{
		{C: 2, H: 6, W: 6, K: 3, KH: 3, KW: 3, Stride: 1, Pad: 1},
		{C: 1, H: 7, W: 5, K: 2, KH: 3, KW: 3, Stride: 1, Pad: 1}, // odd: last row/column dropped
		{C: 3, H: 16, W: 16, K: 2, KH: 3, KW: 3, Stride: 1, Pad: 1},
	} {
		s.Init()
		for _, relu := range []bool{false, true} {
			r := rand.New(rand.NewPCG(11, uint64(s.H)))
			n := 3
			x, w, b := randVec(r, n*s.C*s.H*s.W), randVec(r, s.K*s.Col), randVec(r, s.K)
			ry := randVec(r, n*s.PooledLen())
			y, idx := make([]float64, len(ry)), make([]float64, len(ry))
			ws := make([]float64, s.Workspace(n))
			loss := func() float64 { Conv2DPool(&s, x, w, b, y, idx, ws, n, relu); return dot(y, ry) }
			loss()
			dx, dw, db := make([]float64, len(x)), make([]float64, len(w)), make([]float64, len(b))
			Conv2DPoolBackward(&s, x, w, y, idx, ry, dx, dw, db, ws, n, relu)
			name := "convpool " + fmtShape(s) + map[bool]string{true: " relu"}[relu]
			checkGrad(t, name+" dx", x, dx, loss)
			checkGrad(t, name+" dw", w, dw, loss)
			checkGrad(t, name+" db", b, db, loss)

			// The same as Conv2D then MaxPool (ReLU between when relu).
			full := make([]float64, n*s.K*s.Spatial)
			Conv2D(&s, x, w, b, full, ws, n, relu)
			p := PoolShape{H: s.OutH, W: s.OutW, KH: 2, KW: 2, Stride: 2}
			p.Init()
			want := make([]float64, len(y))
			MaxPool(&p, full, want, n*s.K)
			Conv2DPool(&s, x, w, b, y, idx, ws, n, relu)
			for i := range y {
				if y[i] != want[i] {
					t.Fatalf("%s: y[%d] = %g, conv then pool gives %g", name, i, y[i], want[i])
				}
			}
		}
	}
}

func fmtShape(s ConvShape) string {
	return "C" + itoa(s.C) + "H" + itoa(s.H) + "W" + itoa(s.W) + "K" + itoa(s.K) + "k" + itoa(s.KH) + "s" + itoa(s.Stride) + "p" + itoa(s.Pad)
}

func itoa(i int) string {
	if i < 10 {
		return string(rune('0' + i))
	}
	return itoa(i/10) + string(rune('0'+i%10))
}

func TestGradPool(t *testing.T) {
	t.Parallel()
	shapes := []PoolShape{
		{H: 6, W: 4, KH: 2, KW: 2, Stride: 2},
		{H: 7, W: 7, KH: 3, KW: 3, Stride: 2, Pad: 1},
		{H: 5, W: 5, KH: 5, KW: 5, Stride: 1},
		{H: 5, W: 6, KH: 2, KW: 3, Stride: 1, Pad: 1},
	}
	for _, s := range shapes {
		s.Init()
		r := rand.New(rand.NewPCG(4, uint64(s.KH*10+s.Pad)))
		planes := 3
		x := randVec(r, planes*s.H*s.W)
		ry := randVec(r, planes*s.OutH*s.OutW)
		y := make([]float64, len(ry))
		dx := make([]float64, len(x))

		MaxPoolBackward(&s, x, ry, dx, planes)
		checkGrad(t, "maxpool dx", x, dx, func() float64 { MaxPool(&s, x, y, planes); return dot(y, ry) })

		AvgPoolBackward(&s, ry, dx, planes)
		checkGrad(t, "avgpool dx", x, dx, func() float64 { AvgPool(&s, x, y, planes); return dot(y, ry) })
	}
}

func TestGradBatchNorm(t *testing.T) {
	t.Parallel()
	for _, sh := range [][3]int{{4, 3, 5}, {6, 2, 1}} {
		n, c, s := sh[0], sh[1], sh[2]
		r := rand.New(rand.NewPCG(5, uint64(s)))
		x, gamma, beta := randVec(r, n*c*s), randVec(r, c), randVec(r, c)
		ry := randVec(r, n*c*s)
		y := make([]float64, len(x))
		mean, invstd := make([]float64, c), make([]float64, c)
		rm, rv := make([]float64, c), make([]float64, c)
		loss := func() float64 {
			BatchNormTrain(x, gamma, beta, y, mean, invstd, rm, rv, n, c, s, 0.1, 1e-5)
			return dot(y, ry)
		}
		loss()
		dx, dg, db := make([]float64, len(x)), make([]float64, c), make([]float64, c)
		BatchNormBackward(x, gamma, ry, mean, invstd, dx, dg, db, n, c, s)
		checkGrad(t, "bn dx", x, dx, loss)
		checkGrad(t, "bn dgamma", gamma, dg, loss)
		checkGrad(t, "bn dbeta", beta, db, loss)

		// Eval mode is affine in x: check it against its own closed form.
		BatchNormEval(x, gamma, beta, rm, rv, y, n, c, s, 1e-5)
		for i := range y {
			ch := i / s % c
			want := (x[i]-rm[ch])/math.Sqrt(rv[ch]+1e-5)*gamma[ch] + beta[ch]
			if math.Abs(y[i]-want) > 1e-12 {
				t.Fatalf("bn eval y[%d] = %g, want %g", i, y[i], want)
			}
		}
	}
}

func TestGradElementwise(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(6, 7))
	n := 50
	x, ry := randVec(r, n), randVec(r, n)
	y, dx := make([]float64, n), make([]float64, n)

	ReLU(x, y)
	ReLUBackward(y, ry, dx)
	checkGrad(t, "relu dx", x, dx, func() float64 { ReLU(x, y); return dot(y, ry) })

	mask := make([]float64, n)
	DropoutMask(mask, 0.3, 42)
	Mul(dx, ry, mask)
	checkGrad(t, "dropout dx", x, dx, func() float64 { Mul(y, x, mask); return dot(y, ry) })

	// Residual add: y = a + b, both inputs get dy.
	b := randVec(r, n)
	checkGrad(t, "add da", x, ry, func() float64 { Add(y, x, b); return dot(y, ry) })
	checkGrad(t, "add db", b, ry, func() float64 { Add(y, x, b); return dot(y, ry) })
}

func TestGradSoftmaxCrossEntropy(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(8, 9))
	n, c := 5, 7
	logits := randVec(r, n*c)
	labels := make([]float64, n)
	for i := range labels {
		labels[i] = float64(r.IntN(c))
	}
	d := make([]float64, n*c)
	SoftmaxCrossEntropy(logits, labels, d, n, c)
	checkGrad(t, "xent dlogits", logits, d, func() float64 {
		l, _ := SoftmaxCrossEntropy(logits, labels, nil, n, c)
		return l / float64(n)
	})
}

func TestDropoutMaskRate(t *testing.T) {
	t.Parallel()
	mask := make([]float32, 100000)
	DropoutMask(mask, 0.25, 7)
	zeros := 0
	for _, v := range mask {
		switch v {
		case 0:
			zeros++
		case float32(1 / 0.75):
		default:
			t.Fatalf("mask value %g, want 0 or %g", v, 1/0.75)
		}
	}
	if rate := float64(zeros) / float64(len(mask)); math.Abs(rate-0.25) > 0.01 {
		t.Fatalf("drop rate %.4f, want 0.25±0.01", rate)
	}
}
