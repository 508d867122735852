package kern

/*
#cgo CFLAGS: -O3
#cgo LDFLAGS: -lm
#include "fast.h"
*/
import "C"

import "unsafe"

// isF32 reports whether T is float32: the kernels then run in C (fast.c),
// vectorised; float64 stays in Go as the reference.
func isF32[T Float]() bool {
	var z T
	return unsafe.Sizeof(z) == 4
}

// cf passes a float32 slice to C (nil when empty). Only called when
// isF32[T]().
func cf[T Float](s []T) *C.float {
	if len(s) == 0 {
		return nil
	}
	return (*C.float)(unsafe.Pointer(&s[0]))
}

func cl(n int) C.long { return C.long(n) }

func cb(b bool) C.int {
	if b {
		return 1
	}
	return 0
}

// SetPortable makes the kernels with hand-written AVX-512 paths take their
// portable C paths instead, so that tests cover those on any machine. Not
// safe to call while kernels run.
func SetPortable(on bool) { C.tt_portable = cb(on) }

// Path names the CPU kernels this process runs, which decide the bits of
// every result: the version of fast.c's vectorised kernels the processor
// runs (GCC's target_clones: avx512f, avx2+fma or baseline, which differ in
// FMA contraction and reduction order), whether the hand-written AVX-512
// GEMM and pooling paths run (off without AVX-512 or with SetPortable),
// and the kernel OpenBLAS chose for this processor (its core name:
// Haswell, SkylakeX, Zen...). Two processes with one Path compute the same
// bits from the same inputs; with different Paths, results differ in the
// last bits and a resumed run is no longer bit-identical to one that ran
// without interruption.
func Path() string {
	packed := "off"
	if C.tt_has_avx512() != 0 {
		packed = "avx512"
	}
	return "clones=" + C.GoString(C.tt_clone_level()) + " packed=" + packed + " openblas=" + blasCore()
}

// packedMinRows is the fewest rows Gemm and Linear give the packed kernel:
// below it, packing op(B) costs more than the kernel saves. Measured on a
// Zen 5 core against OpenBLAS 0.3.21's AVX2 sgemm, [n, 784]·[512, 784]ᵀ:
// 0.85× at 16 rows, 1.17× at 32, 1.34× at 48, 1.65× at 256.
const packedMinRows = 48

// linearPacked runs Linear's forward in packed.c's AVX-512 kernel and
// reports whether it did (false: no AVX-512, or SetPortable).
func linearPacked[T Float](x, w, b, y []T, n, in, out int, relu bool) bool {
	_, _, _ = x[n*in-1], w[out*in-1], y[n*out-1]
	if b != nil {
		_ = b[out-1]
	}
	return C.tt_linear_packed(cf(x), cf(w), cf(b), cf(y), cl(n), cl(in), cl(out), cb(relu)) != 0
}

// PackLinear packs a Linear layer's weights w [out, in] for LinearPrepacked,
// which then skips the packing Linear does on every call: for a model whose
// weights stay as they are (inference). Nil where the processor lacks
// AVX-512 (or SetPortable): Linear is the way there.
func PackLinear(w []float32, in, out int) []float32 {
	if C.tt_has_avx512() == 0 {
		return nil
	}
	_ = w[out*in-1]
	n := int(C.tt_linear_pack_len(cl(in), cl(out)))
	// The kernel's aligned loads want 64 bytes; the Go heap does not move.
	raw := make([]float32, n+16)
	off := 0
	for uintptr(unsafe.Pointer(&raw[off]))%64 != 0 {
		off++
	}
	p := raw[off : off+n : off+n]
	C.tt_linear_pack(cf(w), cl(in), cl(out), cf(p))
	return p
}

// LinearPrepacked is Linear's forward with w as PackLinear packed it, any
// number of rows. It reports false, having done nothing, where the
// processor lacks AVX-512 (or SetPortable).
func LinearPrepacked(x, p, b, y []float32, n, in, out int, relu bool) bool {
	if n == 0 {
		return true
	}
	_, _, _ = x[n*in-1], p[int(C.tt_linear_pack_len(cl(in), cl(out)))-1], y[n*out-1]
	if b != nil {
		_ = b[out-1]
	}
	return C.tt_linear_prepacked(cf(x), cf(p), cf(b), cf(y), cl(n), cl(in), cl(out), cb(relu)) != 0
}

// sgemmPacked runs Gemm (alpha 1, beta 0 or 1) in packed.c's AVX-512
// kernel and reports whether it did (false: no AVX-512, or SetPortable).
// Only for float32 (isF32); Gemm has checked the bounds.
func sgemmPacked[T Float](transA, transB bool, m, n, k int, a []T, lda int, b []T, ldb int, beta1 bool, c []T, ldc int) bool {
	return C.tt_sgemm(cb(transA), cb(transB), cl(m), cl(n), cl(k), cf(a), cl(lda), cf(b), cl(ldb), cb(beta1), cf(c), cl(ldc)) != 0
}
