package compute

import "github.com/tempotrain/tempotrain/compute/internal/kern"

// KernelPath names the CPU kernels this process runs on this processor
// ("avx512 + OpenBLAS SkylakeX", "portable + OpenBLAS Haswell", ...): what a
// benchmark says it measured. Results are bit-identical only between
// processes on the same path.
func KernelPath() string { return kern.Path() }
