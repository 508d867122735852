package kern

// #include "fast.h"
import "C"

import "math"

// Scal sets x *= a. a == 0 writes zeros (so NaNs in x do not survive).
func Scal[T Float](a T, x []T) {
	if a == 0 {
		clear(x)
		return
	}
	for i := range x {
		x[i] *= a
	}
}

// Add sets dst = a + b, all of one length.
func Add[T Float](dst, a, b []T) {
	b = b[:len(a)]
	dst = dst[:len(a)]
	if isF32[T]() {
		C.tt_add(cf(dst), cf(a), cf(b), cl(len(a)))
		return
	}
	for i := range a {
		dst[i] = a[i] + b[i]
	}
}

// AddTo sets dst += src.
func AddTo[T Float](dst, src []T) {
	dst = dst[:len(src)]
	if isF32[T]() {
		C.tt_addto(cf(dst), cf(src), cl(len(src)))
		return
	}
	for i := range src {
		dst[i] += src[i]
	}
}

// ReLU sets y = max(x, 0). y may alias x.
func ReLU[T Float](x, y []T) {
	y = y[:len(x)]
	if isF32[T]() {
		C.tt_relu(cf(x), cf(y), cl(len(x)))
		return
	}
	for i, v := range x {
		if v > 0 {
			y[i] = v
		} else {
			y[i] = 0
		}
	}
}

// ReLUBackward sets dx = dy where y > 0, else 0. y is the forward output; dx may
// alias dy.
func ReLUBackward[T Float](y, dy, dx []T) {
	dy = dy[:len(y)]
	dx = dx[:len(y)]
	if isF32[T]() {
		C.tt_relu_bwd(cf(y), cf(dy), cf(dx), cl(len(y)))
		return
	}
	for i, v := range y {
		if v > 0 {
			dx[i] = dy[i]
		} else {
			dx[i] = 0
		}
	}
}

// DropoutMask fills mask with 0 (dropped, probability p) or 1/(1-p). The
// draw for element i depends only on (seed, i): a counter-based generator
// that any backend can reproduce bit for bit, in any order.
func DropoutMask[T Float](mask []T, p float64, seed uint64) {
	keep := T(1 / (1 - p))
	// A threshold on 24 uniform bits: compare integers, no float rounding.
	thr := uint64(p * (1 << 24))
	for i := range mask {
		if Hash64(seed, uint64(i))>>40 < thr {
			mask[i] = 0
		} else {
			mask[i] = keep
		}
	}
}

// Mul sets dst = a * b element-wise (dropout forward and backward).
func Mul[T Float](dst, a, b []T) {
	b = b[:len(a)]
	dst = dst[:len(a)]
	if isF32[T]() {
		C.tt_mul(cf(dst), cf(a), cf(b), cl(len(a)))
		return
	}
	for i := range a {
		dst[i] = a[i] * b[i]
	}
}

// Hash64 mixes (seed, i) with splitmix64's finaliser.
func Hash64(seed, i uint64) uint64 {
	z := seed + (i+1)*0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// SoftmaxCrossEntropy computes the mean cross-entropy of softmax(logits)
// against integer labels and its gradient.
//
//	logits [n, c], labels [n] (class indices stored as floats), dlogits [n, c]
//
// dlogits = (softmax(logits) - onehot(labels)) / n. It returns the summed
// (not averaged) loss over the n rows and how many rows have their label as
// the first maximum logit. dlogits may be nil (evaluation).
func SoftmaxCrossEntropy[T Float](logits, labels, dlogits []T, n, c int) (lossSum float64, correct int) {
	inv := 1 / float64(n)
	for i := 0; i < n; i++ {
		row := logits[i*c : (i+1)*c]
		label := int(labels[i])
		mx, arg := row[0], 0
		for j, v := range row {
			if v > mx {
				mx, arg = v, j
			}
		}
		if arg == label {
			correct++
		}
		var sum float64
		for _, v := range row {
			sum += math.Exp(float64(v - mx))
		}
		lossSum += math.Log(sum) + float64(mx) - float64(row[label])
		if dlogits == nil {
			continue
		}
		d := dlogits[i*c : (i+1)*c]
		scale := inv / sum
		for j, v := range row {
			d[j] = T(math.Exp(float64(v-mx)) * scale)
		}
		d[label] -= T(inv)
	}
	return lossSum, correct
}

// BiasAct adds a bias per group and applies the activation, in place:
//
//	y [rows, groups, m] += b[groups] (b nil: no bias); y = max(y, 0) when relu
//
// m = 1 is a Linear layer's [n, out], m = OutH·OutW a convolution's.
func BiasAct[T Float](y, b []T, rows, groups, m int, relu bool) {
	if b == nil && !relu {
		return
	}
	y = y[:rows*groups*m]
	if isF32[T]() {
		C.tt_bias_act(cf(y), cf(b), cl(rows), cl(groups), cl(m), cb(relu))
		return
	}
	for i := range y {
		v := y[i]
		if b != nil {
			v += b[i/m%groups]
		}
		if relu && v < 0 {
			v = 0
		}
		y[i] = v
	}
}

// ActBackwardSum is BiasAct's backward: with relu, dy = dy ⊙ (y > 0) in
// place (y is the activated output); then db[g] = Σ dy over rows and m
// (db nil: skipped), or db[g] += Σ ... when add.
func ActBackwardSum[T Float](y, dy, db []T, rows, groups, m int, relu, add bool) {
	if db == nil && !relu {
		return
	}
	dy = dy[:rows*groups*m]
	if isF32[T]() {
		C.tt_act_bwd_sum(cf(y), cf(dy), cf(db), cl(rows), cl(groups), cl(m), cb(relu), cb(add))
		return
	}
	if relu {
		y = y[:len(dy)]
		for i, v := range y {
			if !(v > 0) {
				dy[i] = 0
			}
		}
	}
	if db != nil {
		if !add {
			clear(db[:groups])
		}
		for i, v := range dy {
			db[i/m%groups] += v
		}
	}
}
