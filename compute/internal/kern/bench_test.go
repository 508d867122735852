package kern

import "testing"

// Kernel benchmarks at the shapes of the CNN's layers for a batch of 128.

func cnnConv1() ConvShape {
	s := ConvShape{C: 1, H: 28, W: 28, K: 32, KH: 3, KW: 3, Stride: 1, Pad: 1}
	s.Init()
	return s
}

func cnnConv2() ConvShape {
	s := ConvShape{C: 32, H: 14, W: 14, K: 64, KH: 3, KW: 3, Stride: 1, Pad: 1}
	s.Init()
	return s
}

func fill32(n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(i%13) - 6
	}
	return v
}

func benchIm2Col(b *testing.B, s ConvShape) {
	x, col := fill32(s.C*s.H*s.W), make([]float32, s.Col*s.Spatial)
	for b.Loop() {
		for range 128 {
			Im2Col(&s, x, col, s.Spatial)
		}
	}
}

func benchCol2Im(b *testing.B, s ConvShape) {
	dx, col := make([]float32, s.C*s.H*s.W), fill32(s.Col*s.Spatial)
	for b.Loop() {
		for range 128 {
			Col2ImTo(&s, col, dx, s.Spatial)
		}
	}
}

func benchConv(b *testing.B, s ConvShape, backward bool) {
	n := 128
	x, w, bias := fill32(n*s.C*s.H*s.W), fill32(s.K*s.Col), fill32(s.K)
	y, ws := make([]float32, n*s.K*s.Spatial), make([]float32, s.Workspace(n))
	dx, dw, db := make([]float32, len(x)), make([]float32, len(w)), make([]float32, s.K)
	Conv2D(&s, x, w, bias, y, ws, n, true)
	dy := fill32(len(y))
	for b.Loop() {
		if backward {
			Conv2DBackward(&s, x, w, y, dy, dx, dw, db, ws, n, true)
		} else {
			Conv2D(&s, x, w, bias, y, ws, n, true)
		}
	}
}

func benchMaxPool(b *testing.B, backward bool) {
	s := PoolShape{H: 28, W: 28, KH: 2, KW: 2, Stride: 2}
	s.Init()
	planes := 128 * 32
	x, y := fill32(planes*28*28), make([]float32, planes*14*14)
	dx := make([]float32, len(x))
	for b.Loop() {
		if backward {
			MaxPoolBackward(&s, x, y, dx, planes)
		} else {
			MaxPool(&s, x, y, planes)
		}
	}
}

func BenchmarkIm2ColConv1Batch128(b *testing.B)          { benchIm2Col(b, cnnConv1()) }
func BenchmarkIm2ColConv2Batch128(b *testing.B)          { benchIm2Col(b, cnnConv2()) }
func BenchmarkCol2ImConv2Batch128(b *testing.B)          { benchCol2Im(b, cnnConv2()) }
func BenchmarkConv1ForwardBatch128(b *testing.B)         { benchConv(b, cnnConv1(), false) }
func BenchmarkConv1BackwardBatch128(b *testing.B)        { benchConv(b, cnnConv1(), true) }
func BenchmarkConv2ForwardBatch128(b *testing.B)         { benchConv(b, cnnConv2(), false) }
func BenchmarkConv2BackwardBatch128(b *testing.B)        { benchConv(b, cnnConv2(), true) }
func BenchmarkMaxPool2x2Of28x28x32Batch128(b *testing.B) { benchMaxPool(b, false) }
func BenchmarkMaxPool2x2BackwardOf28x28x32Batch128(b *testing.B) {
	benchMaxPool(b, true)
}

func benchGemm(b *testing.B, transA, transB bool, m, n, k int) {
	a, bb, c := fill32(m*k), fill32(k*n), make([]float32, m*n)
	lda, ldb := k, n
	if transA {
		lda = m
	}
	if transB {
		ldb = k
	}
	b.SetBytes(int64(2 * m * n * k)) // reported MB/s = MFLOP/s
	for b.Loop() {
		Gemm(transA, transB, m, n, k, 1, a, lda, bb, ldb, 0, c, n)
	}
}

// MFLOP/s appear as MB/s.
func BenchmarkGemmConv2Fwd1Sample(b *testing.B)   { benchGemm(b, false, false, 64, 196, 288) }
func BenchmarkGemmConv2Fwd4Samples(b *testing.B)  { benchGemm(b, false, false, 64, 784, 288) }
func BenchmarkGemmConv2Fwd16Samples(b *testing.B) { benchGemm(b, false, false, 64, 3136, 288) }
func BenchmarkGemmConv2DW1Sample(b *testing.B)    { benchGemm(b, false, true, 64, 288, 196) }
func BenchmarkGemmConv2DW4Samples(b *testing.B)   { benchGemm(b, false, true, 64, 288, 784) }
func BenchmarkGemmConv2DCol1Sample(b *testing.B)  { benchGemm(b, true, false, 288, 196, 64) }
func BenchmarkGemmConv2DCol4Samples(b *testing.B) { benchGemm(b, true, false, 288, 784, 64) }
func BenchmarkGemmMLPFc1Fwd(b *testing.B)         { benchGemm(b, false, true, 128, 512, 784) }
func BenchmarkGemmMLPFc1DW(b *testing.B)          { benchGemm(b, true, false, 512, 784, 128) }
func BenchmarkGemmCNNFc1Fwd(b *testing.B)         { benchGemm(b, false, true, 128, 128, 3136) }
func BenchmarkGemmSquare1024(b *testing.B)        { benchGemm(b, false, false, 1024, 1024, 1024) }
