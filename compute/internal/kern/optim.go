package kern

// #include "fast.h"
import "C"

import "math"

// SGD is one step of PyTorch's SGD on a flat parameter vector.
//
//	p, g, buf [len]; buf is the momentum buffer (unused when momentum == 0)
//	g' = g + wd·p
//	buf = first ? g' : momentum·buf + (1-dampening)·g'
//	p -= lr · (nesterov ? g' + momentum·buf : buf)      (lr·g' without momentum)
//
// g is left unchanged.
func SGD[T Float](p, g, buf []T, lr, momentum, dampening, wd float64, nesterov, first bool) {
	g = g[:len(p)]
	if momentum != 0 {
		buf = buf[:len(p)]
	}
	if isF32[T]() {
		var b *C.float
		if momentum != 0 {
			b = cf(buf)
		}
		C.tt_sgd(cf(p), cf(g), b, cl(len(p)), C.float(lr), C.float(momentum), C.float(dampening), C.float(wd), cb(nesterov), cb(first))
		return
	}
	l, mo, dm, w := T(lr), T(momentum), T(1-dampening), T(wd)
	if momentum == 0 {
		for i := range p {
			p[i] -= l * (g[i] + w*p[i])
		}
		return
	}
	buf = buf[:len(p)]
	for i := range p {
		d := g[i] + w*p[i]
		var b T
		if first {
			b = d
		} else {
			b = mo*buf[i] + dm*d
		}
		buf[i] = b
		if nesterov {
			d += mo * b
		} else {
			d = b
		}
		p[i] -= l * d
	}
}

// Adam is one step (step counts from 1) of PyTorch's Adam, or AdamW when
// decoupled: weight decay then shrinks p directly instead of adding wd·p
// to the gradient.
//
//	p, g, m, v [len]
func Adam[T Float](p, g, m, v []T, lr, beta1, beta2, eps, wd float64, decoupled bool, step int) {
	g, m, v = g[:len(p)], m[:len(p)], v[:len(p)]
	bc1 := 1 - math.Pow(beta1, float64(step))
	bc2 := 1 - math.Pow(beta2, float64(step))
	if isF32[T]() {
		C.tt_adam(cf(p), cf(g), cf(m), cf(v), cl(len(p)), C.float(lr), C.float(beta1), C.float(beta2), C.float(eps), C.float(wd),
			cb(decoupled), C.float(lr/bc1), C.float(math.Sqrt(bc2)))
		return
	}
	stepSize := T(lr / bc1)
	sq := T(math.Sqrt(bc2))
	b1, b2, e, w := T(beta1), T(beta2), T(eps), T(wd)
	shrink := T(1 - lr*wd)
	for i := range p {
		d := g[i]
		if decoupled {
			p[i] *= shrink
		} else {
			d += w * p[i]
		}
		mi := b1*m[i] + (1-b1)*d
		vi := b2*v[i] + (1-b2)*d*d
		m[i], v[i] = mi, vi
		p[i] -= stepSize * mi / (T(math.Sqrt(float64(vi)))/sq + e)
	}
}
