package gpu

import (
	"fmt"
	"unsafe"
)

// Driver is what a Backend needs from a device: memory, one stream of
// ordered work (copies, kernel launches, GEMMs) and stream capture into
// graphs. compute/cuda implements it with the CUDA driver API and cuBLAS;
// internal/emu runs the same kernels on the CPU. Device addresses are
// uintptrs; a Driver is used from one goroutine at a time.
type Driver interface {
	// Name identifies the device in errors ("cuda:0").
	Name() string
	// MaxBlocks bounds the grid of a grid-stride kernel: enough blocks to
	// fill the device.
	MaxBlocks() int
	// Alloc returns device memory aligned to 256 bytes, contents undefined.
	Alloc(bytes int) (uintptr, error)
	Free(p uintptr) error
	// AllocHost returns page-locked host memory the device can copy from
	// while the host goes on (CopyHtoD).
	AllocHost(bytes int) (unsafe.Pointer, error)
	FreeHost(p unsafe.Pointer) error
	// Upload copies host memory to the device in stream order; src may be
	// reused as soon as Upload returns.
	Upload(dst uintptr, src unsafe.Pointer, bytes int) error
	// CopyHtoD copies from AllocHost memory in stream order, reading src
	// when the stream reaches the copy (in a graph: at every launch).
	CopyHtoD(dst uintptr, src unsafe.Pointer, bytes int) error
	// Download waits for the stream's work, then copies device memory to
	// the host.
	Download(dst unsafe.Pointer, src uintptr, bytes int) error
	// Launch queues kernel k on grid×block threads (1-D) with one 64-bit
	// word per parameter.
	Launch(k Kernel, grid, block uint32, args []uint64) error
	// Gemm queues a column-major GEMM with cuBLAS's semantics.
	Gemm(g *GemmOp) error
	// Synchronize waits for the stream's work and reports its first error.
	Synchronize() error

	// BeginCapture makes the stream record instead of run until
	// EndCapture, which returns the recorded work as a launchable graph.
	// LastNode is the graph node of the last kernel launched while
	// capturing, for SetKernelParams.
	BeginCapture() error
	LastNode() (Node, error)
	EndCapture() (Graph, error)
	LaunchGraph(g Graph) error
	// SetKernelParams changes the grid, block and arguments of kernel node
	// n of g for its later launches (the kernel stays the same).
	SetKernelParams(g Graph, n Node, k Kernel, grid, block uint32, args []uint64) error
	DestroyGraph(g Graph) error

	// Close releases the stream and libraries; memory from Alloc and
	// AllocHost must be freed first.
	Close() error
}

// Node and Graph are a Driver's handles.
type (
	Node  uintptr
	Graph uintptr
)

// Precision selects how GEMMs multiply float32 matrices.
type Precision int

const (
	// FP32 multiplies in float32 on the CUDA cores (cuBLAS's
	// CUBLAS_COMPUTE_32F): results within float32 rounding.
	FP32 Precision = iota
	// TF32 rounds the operands to TF32 (10-bit mantissa) for the tensor
	// cores and accumulates in float32: relative error near 3e-4.
	TF32
	// BF16 rounds the operands to bfloat16 (7-bit mantissa) for the tensor
	// cores and accumulates in float32: relative error 1e-3 to 1e-2.
	BF16
)

func (p Precision) String() string {
	switch p {
	case FP32:
		return "fp32"
	case TF32:
		return "tf32"
	case BF16:
		return "bf16"
	}
	return fmt.Sprintf("Precision(%d)", int(p))
}

// ParsePrecision reads "fp32", "tf32" or "bf16".
func ParsePrecision(s string) (Precision, error) {
	for _, p := range []Precision{FP32, TF32, BF16} {
		if s == p.String() {
			return p, nil
		}
	}
	return 0, fmt.Errorf("precision %q: want fp32, tf32 or bf16", s)
}

// GemmOp is one column-major GEMM as cuBLAS takes it:
// C [M×N] = Alpha·op(A)·op(B) + Beta·C, op(A) M×K, op(B) K×N, op(X) = Xᵀ when
// TransX; LDx are column strides. Beta == 0 does not read C.
type GemmOp struct {
	TransA, TransB bool
	M, N, K        int
	Alpha, Beta    float32
	A, B, C        uintptr
	LDA, LDB, LDC  int
	Precision      Precision
}
