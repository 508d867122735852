package kern

// Linear is a fully connected layer, weights laid out as PyTorch's.
//
//	x [n, in], w [out, in], b [out] (nil: no bias), y [n, out]
//	y = x·wᵀ + b
func Linear[T Float](x, w, b, y []T, n, in, out int) {
	Gemm(false, true, n, out, in, 1, x, in, w, in, 0, y, out)
	if b == nil {
		return
	}
	b = b[:out]
	for i := 0; i < n; i++ {
		row := y[i*out : (i+1)*out]
		for j := range row {
			row[j] += b[j]
		}
	}
}

// LinearBackward is Linear's backward.
//
//	dy [n, out] → dx [n, in] (nil: not wanted), dw [out, in], db [out] (nil: no bias)
//	dx = dy·w, dw = dyᵀ·x, db = Σ_n dy
func LinearBackward[T Float](x, w, dy, dx, dw, db []T, n, in, out int) {
	Gemm(true, false, out, in, n, 1, dy, out, x, in, 0, dw, in)
	if dx != nil {
		Gemm(false, false, n, in, out, 1, dy, out, w, in, 0, dx, in)
	}
	if db != nil {
		ColumnSum(dy, db, n, out)
	}
}

// ColumnSum: s[j] = Σ_i a[i, j] for a [n, m].
func ColumnSum[T Float](a, s []T, n, m int) {
	s = s[:m]
	clear(s)
	for i := 0; i < n; i++ {
		row := a[i*m : (i+1)*m]
		for j, v := range row {
			s[j] += v
		}
	}
}
