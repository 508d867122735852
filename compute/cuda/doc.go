// Package cuda is tempotrain's GPU backend: compute.Backend on an NVIDIA GPU
// through gorgonia.org/cu (devices, contexts, memory) and the CUDA driver API
// (kernel launches, stream capture), with GEMMs from cuBLAS loaded at run
// time. Everything but this comment builds only with -tags cuda: cu's package
// init exits the process on a machine without a GPU, so nothing that imports
// it may be linked into ordinary binaries and tests.
//
// # Contract
//
//   - New(ordinal, Options) returns a Backend for one GPU; one rank drives
//     it from one goroutine at a time. Tensors live in device memory
//     (Tensor.Dev; Data() is nil) until Close; Upload and Download copy to and
//     from the host, Download waiting for the queued work.
//   - Every op of compute.Backend runs as kernels of kernels/kernels.cu, in
//     float32 with the CPU backend's formulas (sums of batch norm, losses and
//     bias gradients in double, in a fixed order: a run gives the same bits
//     every time), and GEMMs through cuBLAS (cublasGemmEx): FP32 by default,
//     TF32 or BF16 tensor-core paths with Options.Precision. Dropout masks
//     are bit-identical to the CPU's. Ops are queued on one stream and
//     return at once; a device error panics with an *Error at the next
//     Download or Synchronize (Options.SyncEachOp: at the op).
//   - Convolutions are im2col + one GEMM per group of samples (the whole
//     batch when Options.MaxScratchBytes allows) with bias, activation and
//     the fused 2×2 max pooling in the epilogue kernel; the backward's input
//     gradient is a col2im gather (no atomics).
//   - RunGraph(fn) runs a step's ops as a CUDA graph: the ops fn issues are
//     recorded, captured once per structure (kernels, shapes, GEMMs, copies)
//     and relaunched with changed kernel arguments patched into the graph's
//     nodes (learning rate, Adam's step, dropout seeds). fn must not
//     Download or allocate. See gpu.Backend.RunGraph.
//
// # cuBLAS
//
// The binary links libcuda.so.1 (the driver's) and no CUDA library: cuBLAS is
// dlopen'ed at the first New, from $TEMPOTRAIN_CUBLAS, else
// libcublas.so.13, .12, .11 by name, else the newest such file under
// /usr/local, /opt, /usr/lib, /root, /home (where PyTorch's wheels keep
// theirs), with its libcublasLt loaded first.
//
// # Kernels
//
// kernels/kernels.cu is compiled to one PTX for compute_80 by Debian's nvcc
// 11.8 (kernels/gen.sh, run by go generate ./compute/cuda; CI regenerates
// and diffs) and embedded; the driver JIT-compiles it for the GPU at New
// (sm_80, sm_90 or newer).
// The same file, compiled as C++ by internal/emu, runs on the CPU with
// CUDA's threads emulated by fibers: internal/gpu's tests run the
// conformance suite, graph capture and the built-in models against that
// emulator in every go test ./..., so the Go side and the kernels' logic are
// checked on machines without a GPU.
//
// # Without a GPU
//
// A -tags cuda program first runs internal/probe, which checks cuInit before
// cu's init can: a program stops with a clear message; a test binary prints a
// skip and exits 0 (TEMPOTRAIN_REQUIRE_GPU=1: exits 1). The untagged test
// of this package skips without a GPU, and with one (and a Go toolchain)
// runs the -tags cuda tests as a subprocess. The GPU checks themselves
// (conformance on the device, graphs, GEMM and training speed against
// PyTorch) are one command: see bench/gpu/README.md.
package cuda

//go:generate sh kernels/gen.sh
