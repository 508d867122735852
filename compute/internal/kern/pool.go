package kern

// #include "fast.h"
import "C"

// PoolShape describes a 2-D pooling window over each channel plane.
type PoolShape struct {
	H, W        int // input height, width
	KH, KW      int // window
	Stride, Pad int
	OutH, OutW  int // set by Init
}

// Init fills the derived fields.
func (s *PoolShape) Init() {
	s.OutH = (s.H+2*s.Pad-s.KH)/s.Stride + 1
	s.OutW = (s.W+2*s.Pad-s.KW)/s.Stride + 1
}

func (s *PoolShape) is2x2() bool {
	return s.KH == 2 && s.KW == 2 && s.Stride == 2 && s.Pad == 0
}

// MaxPool takes the maximum of each window; padding never wins.
//
//	x [planes, H, W] → y [planes, OutH, OutW]   (planes = n·C)
func MaxPool[T Float](s *PoolShape, x, y []T, planes int) {
	in, out := s.H*s.W, s.OutH*s.OutW
	if isF32[T]() && s.is2x2() {
		_, _ = x[planes*in-1], y[planes*out-1]
		C.tt_maxpool2(cf(x), cf(y), cl(planes), cl(s.H), cl(s.W))
		return
	}
	for p := 0; p < planes; p++ {
		xp, yp := x[p*in:(p+1)*in], y[p*out:(p+1)*out]
		if s.is2x2() {
			for oy := 0; oy < s.OutH; oy++ {
				r0 := xp[2*oy*s.W : (2*oy+1)*s.W]
				r1 := xp[(2*oy+1)*s.W : (2*oy+2)*s.W]
				yr := yp[oy*s.OutW : (oy+1)*s.OutW]
				for ox := range yr {
					m := r0[2*ox]
					if v := r0[2*ox+1]; v > m {
						m = v
					}
					if v := r1[2*ox]; v > m {
						m = v
					}
					if v := r1[2*ox+1]; v > m {
						m = v
					}
					yr[ox] = m
				}
			}
			continue
		}
		for oy := 0; oy < s.OutH; oy++ {
			for ox := 0; ox < s.OutW; ox++ {
				yp[oy*s.OutW+ox] = xp[maxIndex(s, xp, oy, ox)]
			}
		}
	}
}

// maxIndex returns the index in the plane xp of the first maximum of output
// window (oy, ox), scanning rows then columns.
func maxIndex[T Float](s *PoolShape, xp []T, oy, ox int) int {
	best := -1
	var m T
	for i := 0; i < s.KH; i++ {
		iy := oy*s.Stride - s.Pad + i
		if iy < 0 || iy >= s.H {
			continue
		}
		for j := 0; j < s.KW; j++ {
			ix := ox*s.Stride - s.Pad + j
			if ix < 0 || ix >= s.W {
				continue
			}
			if v := xp[iy*s.W+ix]; best < 0 || v > m {
				best, m = iy*s.W+ix, v
			}
		}
	}
	return best
}

// MaxPoolBackward routes each dy to the first maximum of its window (the
// element MaxPool picked), summing where windows overlap.
//
//	x [planes, H, W], dy [planes, OutH, OutW] → dx [planes, H, W]
func MaxPoolBackward[T Float](s *PoolShape, x, dy, dx []T, planes int) {
	in, out := s.H*s.W, s.OutH*s.OutW
	if isF32[T]() && s.is2x2() {
		_, _, _ = x[planes*in-1], dy[planes*out-1], dx[planes*in-1]
		C.tt_maxpool2_bwd(cf(x), cf(dy), cf(dx), cl(planes), cl(s.H), cl(s.W))
		return
	}
	clear(dx[:planes*in])
	for p := 0; p < planes; p++ {
		xp, dyp, dxp := x[p*in:(p+1)*in], dy[p*out:(p+1)*out], dx[p*in:(p+1)*in]
		if s.is2x2() {
			for oy := 0; oy < s.OutH; oy++ {
				r0 := 2 * oy * s.W
				r1 := r0 + s.W
				for ox := 0; ox < s.OutW; ox++ {
					i, m := r0+2*ox, xp[r0+2*ox]
					if v := xp[r0+2*ox+1]; v > m {
						i, m = r0+2*ox+1, v
					}
					if v := xp[r1+2*ox]; v > m {
						i, m = r1+2*ox, v
					}
					if v := xp[r1+2*ox+1]; v > m {
						i = r1 + 2*ox + 1
					}
					dxp[i] = dyp[oy*s.OutW+ox]
				}
			}
			continue
		}
		for oy := 0; oy < s.OutH; oy++ {
			for ox := 0; ox < s.OutW; ox++ {
				dxp[maxIndex(s, xp, oy, ox)] += dyp[oy*s.OutW+ox]
			}
		}
	}
}

// AvgPool averages each window, counting padding as zeros (PyTorch's
// count_include_pad=True).
//
//	x [planes, H, W] → y [planes, OutH, OutW]
func AvgPool[T Float](s *PoolShape, x, y []T, planes int) {
	in, out := s.H*s.W, s.OutH*s.OutW
	inv := 1 / T(s.KH*s.KW)
	for p := 0; p < planes; p++ {
		xp, yp := x[p*in:(p+1)*in], y[p*out:(p+1)*out]
		for oy := 0; oy < s.OutH; oy++ {
			for ox := 0; ox < s.OutW; ox++ {
				var sum T
				for i := 0; i < s.KH; i++ {
					iy := oy*s.Stride - s.Pad + i
					if iy < 0 || iy >= s.H {
						continue
					}
					for j := 0; j < s.KW; j++ {
						if ix := ox*s.Stride - s.Pad + j; ix >= 0 && ix < s.W {
							sum += xp[iy*s.W+ix]
						}
					}
				}
				yp[oy*s.OutW+ox] = sum * inv
			}
		}
	}
}

// AvgPoolBackward spreads each dy evenly over its window.
//
//	dy [planes, OutH, OutW] → dx [planes, H, W]
func AvgPoolBackward[T Float](s *PoolShape, dy, dx []T, planes int) {
	in, out := s.H*s.W, s.OutH*s.OutW
	inv := 1 / T(s.KH*s.KW)
	clear(dx[:planes*in])
	for p := 0; p < planes; p++ {
		dyp, dxp := dy[p*out:(p+1)*out], dx[p*in:(p+1)*in]
		for oy := 0; oy < s.OutH; oy++ {
			for ox := 0; ox < s.OutW; ox++ {
				g := dyp[oy*s.OutW+ox] * inv
				for i := 0; i < s.KH; i++ {
					iy := oy*s.Stride - s.Pad + i
					if iy < 0 || iy >= s.H {
						continue
					}
					for j := 0; j < s.KW; j++ {
						if ix := ox*s.Stride - s.Pad + j; ix >= 0 && ix < s.W {
							dxp[iy*s.W+ix] += g
						}
					}
				}
			}
		}
	}
}
