//go:build amd64 && !purego

package collective

import "golang.org/x/sys/cpu"

var useAVX2 = cpu.X86.HasAVX2

// The AVX2 kernels take lengths that are multiples of 32 float32 or 16
// float64 (128 bytes per iteration); the callers in reduce.go finish the tail.

//go:noescape
func addFloat32AVX2(dst, src []float32)

//go:noescape
func addFloat64AVX2(dst, src []float64)

//go:noescape
func divFloat32AVX2(dst []float32, d float32)

//go:noescape
func divFloat64AVX2(dst []float64, d float64)

//go:noescape
func sumFloat32AVX2(out, a, b []float32)

//go:noescape
func sumFloat64AVX2(out, a, b []float64)

//go:noescape
func copy2AVX2(dst, out, src []byte)
