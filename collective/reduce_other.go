//go:build !amd64 || purego

package collective

const useAVX2 = false

func addFloat32AVX2(dst, src []float32)       { panic("unreachable") }
func addFloat64AVX2(dst, src []float64)       { panic("unreachable") }
func divFloat32AVX2(dst []float32, d float32) { panic("unreachable") }
func divFloat64AVX2(dst []float64, d float64) { panic("unreachable") }
func sumFloat32AVX2(out, a, b []float32)      { panic("unreachable") }
func sumFloat64AVX2(out, a, b []float64)      { panic("unreachable") }
func copy2AVX2(dst, out, src []byte)          { panic("unreachable") }
