package collective

// Reduction kernels: dst[i] += src[i] and dst[i] /= n.

func addFloat32(dst, src []float32) {
	src = src[:len(dst)]
	for i := range dst {
		dst[i] += src[i]
	}
}

func addFloat64(dst, src []float64) {
	src = src[:len(dst)]
	for i := range dst {
		dst[i] += src[i]
	}
}

func divFloat32(dst []float32, n float32) {
	for i := range dst {
		dst[i] /= n
	}
}

func divFloat64(dst []float64, n float64) {
	for i := range dst {
		dst[i] /= n
	}
}
