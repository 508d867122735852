package kern

// GEMM goes straight to OpenBLAS's cblas interface: gorgonia.org/tensor's
// MatMul allocates its result and dispatches through reflection-heavy
// paths, which costs more than the product itself at the layer sizes of the
// models here (see compute/doc.go for the measurement).

/*
#cgo LDFLAGS: -lopenblas
#include <cblas.h>
*/
import "C"

import "unsafe"

// SetThreads sets the number of threads OpenBLAS uses for every later call in
// this process. A data-parallel rank uses one, so that ranks sharing a
// machine do not fight over cores.
func SetThreads(n int) {
	if n < 1 {
		n = 1
	}
	C.openblas_set_num_threads(C.int(n))
}

// blasCore is the name of the kernel OpenBLAS chose for this processor.
func blasCore() string {
	s := C.GoString(C.openblas_get_corename())
	if s == "" {
		return "unknown"
	}
	return s
}

// Threads returns the number of threads OpenBLAS uses.
func Threads() int { return int(C.openblas_get_num_threads()) }

func trans(t bool) C.enum_CBLAS_TRANSPOSE {
	if t {
		return C.CblasTrans
	}
	return C.CblasNoTrans
}

// Gemm computes C = alpha·op(A)·op(B) + beta·C on row-major matrices, where
// op(A) is m×k, op(B) is k×n and C is m×n; lda, ldb, ldc are row strides.
// beta == 0 overwrites C without reading it.
func Gemm[T Float](transA, transB bool, m, n, k int, alpha T, a []T, lda int, b []T, ldb int, beta T, c []T, ldc int) {
	if m == 0 || n == 0 {
		return
	}
	if k == 0 {
		Scal(beta, c[:(m-1)*ldc+n])
		return
	}
	// Bounds checks here keep a bad shape a Go panic instead of memory
	// corruption inside C.
	rowsA, colsA := m, k
	if transA {
		rowsA, colsA = k, m
	}
	rowsB, colsB := k, n
	if transB {
		rowsB, colsB = n, k
	}
	_ = a[(rowsA-1)*lda+colsA-1]
	_ = b[(rowsB-1)*ldb+colsB-1]
	_ = c[(m-1)*ldc+n-1]
	var zero T
	if unsafe.Sizeof(zero) == 4 {
		// On one thread, from packedMinRows rows, our AVX-512 kernel
		// (packed.c) where the processor has it.
		if m >= packedMinRows && alpha == 1 && (beta == 0 || beta == 1) && Threads() == 1 &&
			sgemmPacked(transA, transB, m, n, k, a, lda, b, ldb, beta == 1, c, ldc) {
			return
		}
		C.cblas_sgemm(C.CblasRowMajor, trans(transA), trans(transB), C.blasint(m), C.blasint(n), C.blasint(k),
			C.float(alpha), (*C.float)(unsafe.Pointer(&a[0])), C.blasint(lda),
			(*C.float)(unsafe.Pointer(&b[0])), C.blasint(ldb),
			C.float(beta), (*C.float)(unsafe.Pointer(&c[0])), C.blasint(ldc))
		return
	}
	C.cblas_dgemm(C.CblasRowMajor, trans(transA), trans(transB), C.blasint(m), C.blasint(n), C.blasint(k),
		C.double(alpha), (*C.double)(unsafe.Pointer(&a[0])), C.blasint(lda),
		(*C.double)(unsafe.Pointer(&b[0])), C.blasint(ldb),
		C.double(beta), (*C.double)(unsafe.Pointer(&c[0])), C.blasint(ldc))
}
