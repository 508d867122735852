// Package kern holds the numerical kernels of compute's CPU backend, written
// once in Go over float32 and float64. The float64 instantiation is the
// reference that gradient checks (finite differences) and the backend
// conformance suite compare against. The float32 instantiation is the CPU
// backend: its hot loops hand off to C (fast.c: vectorised by GCC, with
// target clones and a few AVX-512 kernels) and GEMM to OpenBLAS (blas.go),
// so that the Go loop and the C loop of a kernel must agree: the conformance
// suite checks exactly that.
//
// Conventions: every tensor is a dense row-major slice; images are NCHW.
// Kernels never allocate and never keep a slice after they return. Outputs
// are overwritten, never accumulated into, unless a kernel's name ends in
// "To" or its comment says otherwise. Shapes are written at the top of each
// kernel as in llm.c.
package kern

// Float is the element type of a kernel.
type Float interface{ ~float32 | ~float64 }
