package compute_test

import (
	"testing"

	"github.com/tempotrain/tempotrain/compute"
	"github.com/tempotrain/tempotrain/compute/computetest"
	"github.com/tempotrain/tempotrain/compute/internal/kern"
)

// The CPU backend's float32 kernels (C, vectorised) against the float64
// reference kernels (Go).
func TestCPUConformance(t *testing.T) {
	computetest.Run(t, compute.CPU())
}

// The same with the hand-written AVX-512 kernels replaced by their portable
// C versions, as on a machine without AVX-512. Not parallel: the switch is
// process-wide.
func TestCPUConformancePortable(t *testing.T) {
	kern.SetPortable(true)
	defer kern.SetPortable(false)
	computetest.Run(t, compute.CPU())
}

// The same on one BLAS thread, as a rank runs: every GEMM of 48 rows or
// more then takes the AVX-512 kernel where the processor has it. Not
// parallel: the thread count is process-wide.
func TestCPUConformanceOneThread(t *testing.T) {
	threads := compute.Threads()
	compute.SetThreads(1)
	defer compute.SetThreads(threads)
	computetest.Run(t, compute.CPU())
}
