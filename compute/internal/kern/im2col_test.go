package kern

import (
	"math/rand/v2"
	"testing"
)

// The float32 im2col and col2im (C, with a path of their own for small
// planes) against the float64 loops in Go, on integer values, where both
// are exact: the same bits are required. Shapes: ResNet-18's (small planes
// of 7×7 to 1×1, strides 1 and 2, 1×1 and 3×3 kernels; the 7×7 stem) and
// the CNN's (large planes: the general path), with ld wider than a plane.
func TestIm2ColCol2ImMatchGo(t *testing.T) {
	t.Parallel()
	// Past the models' shapes: a rectangular kernel without padding, a plane
	// just over the small path's limit.
	odd := []ConvShape{
		{C: 2, H: 5, W: 6, K: 1, KH: 3, KW: 2, Stride: 1, Pad: 0},
		{C: 2, H: 9, W: 9, K: 1, KH: 3, KW: 3, Stride: 1, Pad: 1},
	}
	shapes := append(append(resnetConvs(), cnnConv1(), cnnConv2()), odd...)
	r := rand.New(rand.NewPCG(7, 32))
	for _, s := range shapes {
		s.Init()
		ld := s.Spatial + 3
		in := s.C * s.H * s.W
		x32, x64 := make([]float32, in), make([]float64, in)
		for i := range x32 {
			v := float64(r.IntN(19) - 9)
			x32[i], x64[i] = float32(v), v
		}
		col32, col64 := make([]float32, s.Col*ld), make([]float64, s.Col*ld)
		for i := range col32 { // garbage the copies must overwrite, or leave (past a plane)
			col32[i], col64[i] = 99, 99
		}
		Im2Col(&s, x32, col32, ld)
		Im2Col(&s, x64, col64, ld)
		for i := range col32 {
			if float64(col32[i]) != col64[i] {
				t.Fatalf("%s: im2col col[%d] (row %d, column %d) = %v, Go %v", fmtShape(s), i, i/ld, i%ld, col32[i], col64[i])
			}
		}
		for i := range col32 {
			v := float64(r.IntN(19) - 9)
			col32[i], col64[i] = float32(v), v
		}
		dx32, dx64 := make([]float32, in), make([]float64, in)
		for i := range dx32 { // Col2ImTo adds to what dx holds
			v := float64(r.IntN(5) - 2)
			dx32[i], dx64[i] = float32(v), v
		}
		Col2ImTo(&s, col32, dx32, ld)
		Col2ImTo(&s, col64, dx64, ld)
		for i := range dx32 {
			if float64(dx32[i]) != dx64[i] {
				t.Fatalf("%s: col2im dx[%d] = %v, Go %v", fmtShape(s), i, dx32[i], dx64[i])
			}
		}
	}
}
