package kern

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

// Group returns how many samples one GEMM covers. Small output planes (late
// ResNet stages: 2×2, 1×1) would otherwise turn each GEMM into a thin
// matrix-vector product; grouping samples makes the GEMM wide again at the
// cost of a transposing copy.
func (s *ConvShape) Group(n int) int {
	g := (256 + s.Spatial - 1) / s.Spatial
	if g > n {
		g = n
	}
	if g < 1 {
		g = 1
	}
	return g
}

// Workspace is the number of scratch elements Conv2D and Conv2DBackward need
// for a batch of n.
func (s *ConvShape) Workspace(n int) int {
	g := s.Group(n)
	return 2*s.Col*g*s.Spatial + s.K*g*s.Spatial
}

// Im2Col unrolls one image x [C, H, W] into the columns of col, a
// [C·KH·KW, ld] matrix: col[(c·KH+i)·KW+j, oy·OutW+ox] = x[c, oy·S-P+i, ox·S-P+j]
// (0 outside the image). ld ≥ OutH·OutW lets several images share col.
func Im2Col[T Float](s *ConvShape, x, col []T, ld int) {
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
// image dx [C, H, W] (dx += col2im(col)).
func Col2ImTo[T Float](s *ConvShape, col, dx []T, ld int) {
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

// Conv2D is a 2-D convolution by im2col and GEMM, a group of samples at a time.
//
//	x [n, C, H, W], w [K, C, KH, KW], b [K] (nil: no bias), y [n, K, OutH, OutW]
//	ws: Workspace(n) scratch elements
func Conv2D[T Float](s *ConvShape, x, w, b, y, ws []T, n int) {
	in, out, P := s.C*s.H*s.W, s.K*s.Spatial, s.Spatial
	g := s.Group(n)
	col := ws[:s.Col*g*P]
	tmp := ws[2*s.Col*g*P:]
	for n0 := 0; n0 < n; n0 += g {
		gn := min(g, n-n0)
		ld := gn * P
		var bcol []T
		switch {
		case s.pointwise && gn == 1:
			bcol = x[n0*in : (n0+1)*in]
		default:
			for j := 0; j < gn; j++ {
				Im2Col(s, x[(n0+j)*in:(n0+j+1)*in], col[j*P:], ld)
			}
			bcol = col
		}
		if gn == 1 {
			Gemm(false, false, s.K, P, s.Col, 1, w, s.Col, bcol, ld, 0, y[n0*out:(n0+1)*out], P)
		} else {
			Gemm(false, false, s.K, ld, s.Col, 1, w, s.Col, bcol, ld, 0, tmp, ld)
			// tmp [K, gn·P] → y [gn, K, P]
			for j := 0; j < gn; j++ {
				yj := y[(n0+j)*out : (n0+j+1)*out]
				for k := 0; k < s.K; k++ {
					copy(yj[k*P:(k+1)*P], tmp[k*ld+j*P:])
				}
			}
		}
	}
	if b == nil {
		return
	}
	for i := 0; i < n; i++ {
		for k := 0; k < s.K; k++ {
			bk := b[k]
			row := y[i*out+k*P : i*out+(k+1)*P]
			for p := range row {
				row[p] += bk
			}
		}
	}
}

// Conv2DBackward is Conv2D's backward.
//
//	dy [n, K, OutH, OutW] → dx [n, C, H, W] (nil: not wanted), dw [K, C, KH, KW], db [K] (nil: no bias)
//	ws: Workspace(n) scratch elements
func Conv2DBackward[T Float](s *ConvShape, x, w, dy, dx, dw, db, ws []T, n int) {
	in, out, P := s.C*s.H*s.W, s.K*s.Spatial, s.Spatial
	g := s.Group(n)
	col := ws[:s.Col*g*P]
	dcol := ws[s.Col*g*P : 2*s.Col*g*P]
	tmp := ws[2*s.Col*g*P:]
	if dx != nil {
		clear(dx[:n*in])
	}
	for n0 := 0; n0 < n; n0 += g {
		gn := min(g, n-n0)
		ld := gn * P
		// dy of the group as a [K, gn·P] matrix.
		var dyg []T
		if gn == 1 {
			dyg = dy[n0*out : (n0+1)*out]
		} else {
			for j := 0; j < gn; j++ {
				dyj := dy[(n0+j)*out : (n0+j+1)*out]
				for k := 0; k < s.K; k++ {
					copy(tmp[k*ld+j*P:k*ld+(j+1)*P], dyj[k*P:(k+1)*P])
				}
			}
			dyg = tmp
		}
		// x of the group as a [Col, gn·P] matrix.
		var bcol []T
		if s.pointwise && gn == 1 {
			bcol = x[n0*in : (n0+1)*in]
		} else {
			for j := 0; j < gn; j++ {
				Im2Col(s, x[(n0+j)*in:(n0+j+1)*in], col[j*P:], ld)
			}
			bcol = col
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
			Col2ImTo(s, dcol[j*P:], dx[(n0+j)*in:(n0+j+1)*in], ld)
		}
	}
	if db == nil {
		return
	}
	clear(db[:s.K])
	for i := 0; i < n; i++ {
		for k := 0; k < s.K; k++ {
			var sum T
			for _, v := range dy[i*out+k*P : i*out+(k+1)*P] {
				sum += v
			}
			db[k] += sum
		}
	}
}
