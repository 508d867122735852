package kern

// Linear is a fully connected layer, weights laid out as PyTorch's, with an
// optional fused ReLU.
//
//	x [n, in], w [out, in], b [out] (nil: no bias), y [n, out]
//	y = x·wᵀ + b, then y = max(y, 0) when relu
//
// In float32 on one BLAS thread with at least packedMinRows rows, it runs
// the AVX-512 kernel of packed.c where the processor has AVX-512.
func Linear[T Float](x, w, b, y []T, n, in, out int, relu bool) {
	if isF32[T]() && n >= packedMinRows && Threads() == 1 && linearPacked(x, w, b, y, n, in, out, relu) {
		return
	}
	Gemm(false, true, n, out, in, 1, x, in, w, in, 0, y, out)
	BiasAct(y, b, n, out, 1, relu)
}

// LinearBackward is Linear's backward. With relu, dy is first masked in
// place by y > 0 (y: Linear's output).
//
//	dy [n, out] → dx [n, in] (nil: not wanted), dw [out, in], db [out] (nil: no bias)
//	dx = dy·w, dw = dyᵀ·x, db = Σ_n dy
func LinearBackward[T Float](x, w, y, dy, dx, dw, db []T, n, in, out int, relu bool) {
	ActBackwardSum(y, dy, db, n, out, 1, relu, false)
	Gemm(true, false, out, in, n, 1, dy, out, x, in, 0, dw, in)
	if dx != nil {
		Gemm(false, false, n, in, out, 1, dy, out, w, in, 0, dx, in)
	}
}
