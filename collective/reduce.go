package collective

// Reduction kernels: dst[i] += src[i], out[i] = a[i] + b[i], dst[i] /= n, and
// a copy to two places.
//
// The add is the ring's inner loop: every received segment goes through it.
// On amd64 with AVX2 an assembly loop (reduce_amd64.s) adds 32 float32 or 16
// float64 per iteration; it is as fast as memory (see BenchmarkAdd* and the
// numbers in reduce_amd64.go). Elsewhere, or with -tags purego, the unrolled
// Go loops below run; they also finish the tail the vector loop leaves.

func addFloat32(dst, src []float32) {
	src = src[:len(dst)]
	if n := len(dst) &^ 31; useAVX2 && n > 0 {
		addFloat32AVX2(dst[:n], src[:n])
		dst, src = dst[n:], src[n:]
	}
	addFloat32Go(dst, src)
}

func addFloat64(dst, src []float64) {
	src = src[:len(dst)]
	if n := len(dst) &^ 15; useAVX2 && n > 0 {
		addFloat64AVX2(dst[:n], src[:n])
		dst, src = dst[n:], src[n:]
	}
	addFloat64Go(dst, src)
}

// sumFloat32 sets out = a + b: the same sums, to the bit, as addFloat32(a, b)
// would leave in a (IEEE addition is commutative), without writing a.
func sumFloat32(out, a, b []float32) {
	a, b = a[:len(out)], b[:len(out)]
	if n := len(out) &^ 31; useAVX2 && n > 0 {
		sumFloat32AVX2(out[:n], a[:n], b[:n])
		out, a, b = out[n:], a[n:], b[n:]
	}
	for i := range out {
		out[i] = a[i] + b[i]
	}
}

func sumFloat64(out, a, b []float64) {
	a, b = a[:len(out)], b[:len(out)]
	if n := len(out) &^ 15; useAVX2 && n > 0 {
		sumFloat64AVX2(out[:n], a[:n], b[:n])
		out, a, b = out[n:], a[n:], b[n:]
	}
	for i := range out {
		out[i] = a[i] + b[i]
	}
}

// copy2 copies src into both dst and out, reading src once (the second
// copy of a copy-then-copy reads it again: 4% of a 4-rank all-reduce's
// processor time). Non-temporal stores into dst, tried too, gained nothing.
func copy2(dst, out, src []byte) {
	src, out = src[:len(dst)], out[:len(dst)]
	if n := len(dst) &^ 127; useAVX2 && n > 0 {
		copy2AVX2(dst[:n], out[:n], src[:n])
		dst, out, src = dst[n:], out[n:], src[n:]
	}
	copy(dst, src)
	copy(out, src)
}

func divFloat32(dst []float32, d float32) {
	if n := len(dst) &^ 31; useAVX2 && n > 0 {
		divFloat32AVX2(dst[:n], d)
		dst = dst[n:]
	}
	for i := range dst {
		dst[i] /= d
	}
}

func divFloat64(dst []float64, d float64) {
	if n := len(dst) &^ 15; useAVX2 && n > 0 {
		divFloat64AVX2(dst[:n], d)
		dst = dst[n:]
	}
	for i := range dst {
		dst[i] /= d
	}
}

// addFloat32Go is unrolled by four: the compiler does not vectorise, but
// four independent adds per iteration keep the FP units busy and halve the
// loop overhead of the plain loop (BenchmarkAddFloat32 measures both).
func addFloat32Go(dst, src []float32) {
	src = src[:len(dst)]
	i := 0
	for ; i+4 <= len(dst); i += 4 {
		d, s := dst[i:i+4:i+4], src[i:i+4:i+4]
		d[0] += s[0]
		d[1] += s[1]
		d[2] += s[2]
		d[3] += s[3]
	}
	for ; i < len(dst); i++ {
		dst[i] += src[i]
	}
}

func addFloat64Go(dst, src []float64) {
	src = src[:len(dst)]
	i := 0
	for ; i+4 <= len(dst); i += 4 {
		d, s := dst[i:i+4:i+4], src[i:i+4:i+4]
		d[0] += s[0]
		d[1] += s[1]
		d[2] += s[2]
		d[3] += s[3]
	}
	for ; i < len(dst); i++ {
		dst[i] += src[i]
	}
}
