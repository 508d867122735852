//go:build goexperiment.simd && amd64

package collective

import (
	"simd/archsimd"
	"testing"
)

// Go 1.26's archsimd (GOEXPERIMENT=simd), measured against the assembly:
//
//	GOEXPERIMENT=simd go test ./collective -run '^$' -bench AddFloat32
func addFloat32Archsimd(dst, src []float32) {
	src = src[:len(dst)]
	i := 0
	for ; i+8 <= len(dst); i += 8 {
		archsimd.LoadFloat32x8Slice(dst[i:]).Add(archsimd.LoadFloat32x8Slice(src[i:])).StoreSlice(dst[i:])
	}
	addFloat32Go(dst[i:], src[i:])
}

func BenchmarkAddFloat32Archsimd1MiB(b *testing.B) { benchAdd(b, addFloat32Archsimd) }
