package kern

// #include "fast.h"
import "C"

// ConvShape describes a 2-D convolution without dilation or groups.
type ConvShape struct {
	C, H, W      int // input channels, height, width
	K            int // output channels
	KH, KW       int // kernel height, width
	Stride, Pad  int // same in both directions
	OutH, OutW   int // set by Init
	Col, Spatial int // C·KH·KW and OutH·OutW, set by Init
	pointwise    bool
}

// Init fills the derived fields; it must be called once before use.
func (s *ConvShape) Init() {
	s.OutH = (s.H+2*s.Pad-s.KH)/s.Stride + 1
	s.OutW = (s.W+2*s.Pad-s.KW)/s.Stride + 1
	s.Col = s.C * s.KH * s.KW
	s.Spatial = s.OutH * s.OutW
	s.pointwise = s.KH == 1 && s.KW == 1 && s.Stride == 1 && s.Pad == 0
}

// Columns one GEMM should cover at least: samples are grouped until the
// GEMM is this wide. Small output planes (late ResNet stages: 2×2, 1×1) would
// otherwise turn each GEMM into a thin matrix-vector product, and the weight
// gradient's GEMM (a sum over the columns) runs faster over several samples.
// Grouping costs a transposing copy of the group's output or gradient.
var (
	FwdSpan = 256
	BwdSpan = 256
)

func group(n, spatial, span int) int {
	return max(1, min(n, (span+spatial-1)/spatial))
}

// Workspace is the number of scratch elements Conv2D and Conv2DBackward need
// for a batch of n.
func (s *ConvShape) Workspace(n int) int {
	g := max(group(n, s.Spatial, FwdSpan), group(n, s.Spatial, BwdSpan))
	return 2*s.Col*g*s.Spatial + s.K*g*s.Spatial
}

// Im2Col unrolls one image x [C, H, W] into the columns of col, a
// [C·KH·KW, ld] matrix: col[(c·KH+i)·KW+j, oy·OutW+ox] = x[c, oy·S-P+i, ox·S-P+j]
// (0 outside the image). ld ≥ OutH·OutW lets several images share col.
func Im2Col[T Float](s *ConvShape, x, col []T, ld int) {
	_ = x[s.C*s.H*s.W-1]
	_ = col[(s.Col-1)*ld+s.Spatial-1]
	if isF32[T]() {
		C.tt_im2col(cf(x), cf(col), cl(ld), cl(s.C), cl(s.H), cl(s.W), cl(s.KH), cl(s.KW), cl(s.Stride), cl(s.Pad), cl(s.OutH), cl(s.OutW))
		return
	}
	for c := 0; c < s.C; c++ {
		plane := x[c*s.H*s.W : (c+1)*s.H*s.W]
		for ki := 0; ki < s.KH; ki++ {
			for kj := 0; kj < s.KW; kj++ {
				row := col[((c*s.KH+ki)*s.KW+kj)*ld:]
				// Output columns whose input column ox·S-P+kj lies inside [0, W).
				lo, hi := validRange(s.W, s.OutW, s.Stride, s.Pad, kj)
				for oy := 0; oy < s.OutH; oy++ {
					dst := row[oy*s.OutW : (oy+1)*s.OutW]
					iy := oy*s.Stride - s.Pad + ki
					if iy < 0 || iy >= s.H {
						clear(dst)
						continue
					}
					src := plane[iy*s.W : (iy+1)*s.W]
					clear(dst[:lo])
					if s.Stride == 1 {
						copy(dst[lo:hi], src[lo-s.Pad+kj:])
					} else {
						for ox := lo; ox < hi; ox++ {
							dst[ox] = src[ox*s.Stride-s.Pad+kj]
						}
					}
					clear(dst[hi:])
				}
			}
		}
	}
}

// Col2ImTo is Im2Col's adjoint: it adds the columns of col back into the
// image dx [C, H, W] (dx += col2im(col)). col is scratch: it may be
// overwritten.
func Col2ImTo[T Float](s *ConvShape, col, dx []T, ld int) {
	_ = dx[s.C*s.H*s.W-1]
	_ = col[(s.Col-1)*ld+s.Spatial-1]
	if isF32[T]() {
		C.tt_col2im(cf(col), cf(dx), cl(ld), cl(s.C), cl(s.H), cl(s.W), cl(s.KH), cl(s.KW), cl(s.Stride), cl(s.Pad), cl(s.OutH), cl(s.OutW))
		return
	}
	for c := 0; c < s.C; c++ {
		plane := dx[c*s.H*s.W : (c+1)*s.H*s.W]
		for ki := 0; ki < s.KH; ki++ {
			for kj := 0; kj < s.KW; kj++ {
				row := col[((c*s.KH+ki)*s.KW+kj)*ld:]
				lo, hi := validRange(s.W, s.OutW, s.Stride, s.Pad, kj)
				for oy := 0; oy < s.OutH; oy++ {
					iy := oy*s.Stride - s.Pad + ki
					if iy < 0 || iy >= s.H {
						continue
					}
					src := row[oy*s.OutW : (oy+1)*s.OutW]
					dst := plane[iy*s.W : (iy+1)*s.W]
					if s.Stride == 1 {
						d := dst[lo-s.Pad+kj : hi-s.Pad+kj]
						sr := src[lo:hi]
						for i := range d {
							d[i] += sr[i]
						}
					} else {
						for ox := lo; ox < hi; ox++ {
							dst[ox*s.Stride-s.Pad+kj] += src[ox]
						}
					}
				}
			}
		}
	}
}

// validRange returns the output columns [lo, hi) whose input column
// ox·stride-pad+kj falls inside [0, w).
func validRange(w, outW, stride, pad, kj int) (lo, hi int) {
	// ox·stride ≥ pad-kj
	if d := pad - kj; d > 0 {
		lo = (d + stride - 1) / stride
	}
	// ox·stride ≤ w-1+pad-kj
	hi = (w-1+pad-kj)/stride + 1
	if w-1+pad-kj < 0 {
		hi = 0
	}
	if hi > outW {
		hi = outW
	}
	if lo > hi {
		lo = hi
	}
	return lo, hi
}

// Conv2D is a 2-D convolution by im2col and GEMM, a group of samples at a
// time, with an optional fused ReLU.
//
//	x [n, C, H, W], w [K, C, KH, KW], b [K] (nil: no bias), y [n, K, OutH, OutW]
//	ws: Workspace(n) scratch elements
func Conv2D[T Float](s *ConvShape, x, w, b, y, ws []T, n int, relu bool) {
	conv2D(s, x, w, b, y, nil, ws, n, relu, false)
}

// Conv2DPool is Conv2D followed by 2×2 max pooling with stride 2 (windows
// past an odd edge are dropped, as PyTorch's floor mode), fused: the
// convolution's output only exists in scratch, a group of samples at a time.
//
//	y, idx [n, K, OutH/2, OutW/2]; idx: position (0..3) of each window's first maximum
func Conv2DPool[T Float](s *ConvShape, x, w, b, y, idx, ws []T, n int, relu bool) {
	conv2D(s, x, w, b, y, idx, ws, n, relu, true)
}

// PooledLen is the number of elements of one sample of Conv2DPool's output.
func (s *ConvShape) PooledLen() int { return s.K * (s.OutH / 2) * (s.OutW / 2) }

func conv2D[T Float](s *ConvShape, x, w, b, y, idx, ws []T, n int, relu, pool bool) {
	in, P := s.C*s.H*s.W, s.Spatial
	out := s.K * P
	if pool {
		out = s.PooledLen()
	}
	g := group(n, P, FwdSpan)
	col := ws[:s.Col*g*P]
	tmp := ws[2*s.Col*g*P:]
	for n0 := 0; n0 < n; n0 += g {
		gn := min(g, n-n0)
		ld := gn * P
		bcol := col
		if s.pointwise && gn == 1 {
			bcol = x[n0*in : (n0+1)*in]
		} else {
			for j := 0; j < gn; j++ {
				Im2Col(s, x[(n0+j)*in:(n0+j+1)*in], col[j*P:], ld)
			}
		}
		// The epilogue (bias, activation, pooling) runs per group, while the
		// GEMM's output is in cache.
		if !pool && gn == 1 {
			Gemm(false, false, s.K, P, s.Col, 1, w, s.Col, bcol, ld, 0, y[n0*out:(n0+1)*out], P)
			BiasAct(y[n0*out:(n0+1)*out], b, 1, s.K, P, relu)
			continue
		}
		Gemm(false, false, s.K, ld, s.Col, 1, w, s.Col, bcol, ld, 0, tmp, ld)
		for j := 0; j < gn; j++ {
			yj := y[(n0+j)*out : (n0+j+1)*out]
			if pool {
				BiasActPool2(tmp[j*P:], ld, b, yj, idx[(n0+j)*out:(n0+j+1)*out], s.K, s.OutH, s.OutW, relu)
				continue
			}
			// tmp [K, gn·P] → y [gn, K, P]
			for k := 0; k < s.K; k++ {
				copy(yj[k*P:(k+1)*P], tmp[k*ld+j*P:])
			}
		}
		if !pool {
			BiasAct(y[n0*out:(n0+gn)*out], b, gn, s.K, P, relu)
		}
	}
}

// Conv2DBackward is Conv2D's backward. With relu, dy is first masked in
// place by y > 0 (y: Conv2D's output).
//
//	dy [n, K, OutH, OutW] → dx [n, C, H, W] (nil: not wanted), dw [K, C, KH, KW], db [K] (nil: no bias)
//	ws: Workspace(n) scratch elements
func Conv2DBackward[T Float](s *ConvShape, x, w, y, dy, dx, dw, db, ws []T, n int, relu bool) {
	conv2DBackward(s, x, w, y, nil, dy, dx, dw, db, ws, n, relu, false)
}

// Conv2DPoolBackward is Conv2DPool's backward; y and idx are its outputs.
//
//	dy [n, K, OutH/2, OutW/2] → dx [n, C, H, W] (nil: not wanted), dw, db (nil: no bias)
func Conv2DPoolBackward[T Float](s *ConvShape, x, w, y, idx, dy, dx, dw, db, ws []T, n int, relu bool) {
	conv2DBackward(s, x, w, y, idx, dy, dx, dw, db, ws, n, relu, true)
}

func conv2DBackward[T Float](s *ConvShape, x, w, y, idx, dy, dx, dw, db, ws []T, n int, relu, pool bool) {
	in, P := s.C*s.H*s.W, s.Spatial
	out := s.K * P
	if pool {
		out = s.PooledLen()
	}
	g := group(n, P, BwdSpan)
	col := ws[:s.Col*g*P]
	dcol := ws[s.Col*g*P : 2*s.Col*g*P]
	tmp := ws[2*s.Col*g*P:]
	for n0 := 0; n0 < n; n0 += g {
		gn := min(g, n-n0)
		ld := gn * P
		// dL/d(convolution output) of the group as a [K, gn·P] matrix, with
		// the activation's mask and the bias gradient applied while dy is
		// in cache.
		dyg := tmp
		if pool {
			for j := 0; j < gn; j++ {
				r := (n0 + j) * out
				Pool2Scatter(dy[r:r+out], y[r:r+out], idx[r:r+out], tmp[j*P:], ld, db, s.K, s.OutH, s.OutW, relu, n0+j > 0)
			}
		} else {
			var yg []T
			if relu {
				yg = y[n0*out : (n0+gn)*out]
			}
			ActBackwardSum(yg, dy[n0*out:(n0+gn)*out], db, gn, s.K, P, relu, n0 > 0)
			if gn == 1 {
				dyg = dy[n0*out : (n0+1)*out]
			} else {
				for j := 0; j < gn; j++ {
					dyj := dy[(n0+j)*out : (n0+j+1)*out]
					for k := 0; k < s.K; k++ {
						copy(tmp[k*ld+j*P:k*ld+(j+1)*P], dyj[k*P:(k+1)*P])
					}
				}
			}
		}
		// x of the group as a [Col, gn·P] matrix.
		bcol := col
		if s.pointwise && gn == 1 {
			bcol = x[n0*in : (n0+1)*in]
		} else {
			for j := 0; j < gn; j++ {
				Im2Col(s, x[(n0+j)*in:(n0+j+1)*in], col[j*P:], ld)
			}
		}
		var beta T
		if n0 > 0 {
			beta = 1
		}
		// dw (+)= dy·colᵀ
		Gemm(false, true, s.K, s.Col, ld, 1, dyg, ld, bcol, ld, beta, dw, s.Col)
		if dx == nil {
			continue
		}
		if s.pointwise && gn == 1 {
			Gemm(true, false, s.Col, P, s.K, 1, w, s.Col, dyg, ld, 0, dx[n0*in:(n0+1)*in], P)
			continue
		}
		// dcol = wᵀ·dy, folded back into the images.
		Gemm(true, false, s.Col, ld, s.K, 1, w, s.Col, dyg, ld, 0, dcol, ld)
		for j := 0; j < gn; j++ {
			dxj := dx[(n0+j)*in : (n0+j+1)*in]
			clear(dxj)
			Col2ImTo(s, dcol[j*P:], dxj, ld)
		}
	}
}

// BiasActPool2 is the fused epilogue of Conv2DPool for one sample: conv
// holds k planes of h×w, plane g at conv[g·cs:];
//
//	y [k, h/2, w/2] = act(max of each 2×2 window + b[g]); idx: the window position (0..3) of its first maximum
func BiasActPool2[T Float](conv []T, cs int, b, y, idx []T, k, h, w int, relu bool) {
	oh, ow := h/2, w/2
	_ = conv[(k-1)*cs+h*w-1]
	_, _ = y[k*oh*ow-1], idx[k*oh*ow-1]
	if isF32[T]() {
		C.tt_bias_act_pool2(cf(conv), cl(cs), cf(b), cf(y), cf(idx), cl(k), cl(h), cl(w), cb(relu))
		return
	}
	for g := 0; g < k; g++ {
		cp := conv[g*cs:]
		var bg T
		if b != nil {
			bg = b[g]
		}
		for oy := 0; oy < oh; oy++ {
			for ox := 0; ox < ow; ox++ {
				m, at := cp[2*oy*w+2*ox], 0
				for q, v := range [3]T{cp[2*oy*w+2*ox+1], cp[(2*oy+1)*w+2*ox], cp[(2*oy+1)*w+2*ox+1]} {
					if v > m {
						m, at = v, q+1
					}
				}
				m += bg
				if relu && !(m > 0) {
					m = 0
				}
				y[(g*oh+oy)*ow+ox], idx[(g*oh+oy)*ow+ox] = m, T(at)
			}
		}
	}
}

// Pool2Scatter is BiasActPool2's backward: dconv (plane g at dconv[g·cs:],
// every element written) gets dy at each window's recorded maximum when
// !relu or y > 0, and 0 elsewhere; db[g] (nil: skipped) is the sum routed,
// or is increased by it when add.
func Pool2Scatter[T Float](dy, y, idx, dconv []T, cs int, db []T, k, h, w int, relu, add bool) {
	oh, ow := h/2, w/2
	_ = dconv[(k-1)*cs+h*w-1]
	_, _, _ = dy[k*oh*ow-1], y[k*oh*ow-1], idx[k*oh*ow-1]
	if isF32[T]() {
		C.tt_pool2_scatter(cf(dy), cf(y), cf(idx), cf(dconv), cl(cs), cf(db), cl(k), cl(h), cl(w), cb(relu), cb(add))
		return
	}
	for g := 0; g < k; g++ {
		dp := dconv[g*cs : g*cs+h*w]
		clear(dp)
		var sum T
		for o := g * oh * ow; o < (g+1)*oh*ow; o++ {
			v := dy[o]
			if relu && !(y[o] > 0) {
				v = 0
			}
			sum += v
			oy, ox, q := (o/ow)%oh, o%ow, int(idx[o])
			dp[(2*oy+q/2)*w+2*ox+q%2] = v
		}
		if db != nil {
			if add {
				db[g] += sum
			} else {
				db[g] = sum
			}
		}
	}
}
