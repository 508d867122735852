// Package compute is tempotrain's training stack inside a rank: float32
// tensors, layers with forward and backward, optimizers, LR schedules, the
// models of the built-in training functions, checkpoint state, and the
// data-parallel helper PrepareModel (Ray's prepare_model).
//
// # Contract
//
//   - A Tensor is a small value (shape + memory handle) owned by a Backend;
//     copying it copies the header. Views (Reshape, Rows, Flat) share memory.
//   - Backend is the small interface every device implements: the ops of the
//     layers (linear, conv2d, pooling, batch norm, ReLU, dropout, add,
//     softmax cross-entropy) and the optimizer updates, all on float32. Ops
//     overwrite their outputs; an optional output given as the zero Tensor
//     is skipped. The CPU backend (CPU) is the reference; every backend must
//     pass compute/computetest's conformance suite, which checks it against
//     float64 reference kernels. The float64 kernels' backward passes are
//     checked against finite differences (relative error < 1e-4).
//   - A Model is built once for a largest batch (Build, NewModel). Its
//     parameters, gradients and buffers live in three flat arenas (P, G, B)
//     of which each Param's W and G are views: the optimizer updates the
//     whole model in one call, the gradient all-reduce needs no copies, and
//     a checkpoint is a walk over the arenas. Forward and Backward then run on
//     any batch up to that size without allocating: every activation is
//     preallocated and smaller batches use views of it.
//   - Backward overwrites gradients (there is no accumulation across
//     backward calls, so no zero_grad). Layers may overwrite the gradient they
//     are given; ReLU works in place.
//   - Everything is deterministic: a seed fixes initialisation, dropout
//     masks depend only on (seed, step, layer, element), and kernels reduce
//     in a fixed order. OpenBLAS gives the same bits run to run at a fixed
//     thread count.
//
// # CPU backend
//
// Package internal/kern writes every kernel once in Go over float32 and
// float64; the float64 instantiation is the reference. The float32 hot loops
// run in C (fast.c, compiled with -O3 and GCC target clones for AVX-512,
// AVX2 and baseline x86-64, plus hand-written AVX-512 for the pooling
// epilogues), GEMM is OpenBLAS's cblas_sgemm called directly through cgo (the
// #cgo directives link -lopenblas and -lm: install libopenblas-dev to build,
// libopenblas0-pthread to run). Convolution is im2col + GEMM per sample (a
// group of samples per GEMM when the output plane is small); bias and ReLU
// run right after each GEMM while its output is in cache, and a following
// 2×2 max pooling is fused in too, so the convolution's full output is never
// written to memory (ConvPool2D). SetThreads bounds OpenBLAS's threads; a
// data-parallel rank uses one.
//
// On processors with AVX-512, GEMM on one BLAS thread is a kernel of our
// own (packed.c) from 48 rows up: Debian's OpenBLAS 0.3.21 runs its AVX2
// kernel on processors it does not know, at half of what a full-width
// AVX-512 core does (on a Zen 5 core, the mlp's first layer at batch 256:
// 133 GFLOP/s against 220; every GEMM of the mlp and the cnn gains 1.5-1.8x).
// op(B) is packed, one block of k at a time, into panels of 32 columns, and
// a 12×32 register tile accumulates, broadcasting op(A)'s values; a Linear
// layer's bias and ReLU are fused into the stores. Below 48 rows, packing
// costs more than it saves and OpenBLAS runs. Model.Freeze packs a Linear
// layer's weights once for a model whose parameters stay (inference,
// package predict), and then every batch size takes the kernel (one mlp
// image: 23 µs against 131).
//
// gorgonia.org/tensor (ENVIRONMENT.md) was measured first, with OpenBLAS
// through netlib, for the MLP's first layer (128×784 by 784×512, one thread):
// tensor.MatMul reaches the same GEMM speed as a direct cblas_sgemm only with
// WithReuse, and still allocates 7 times per call (12 without reuse); a
// transposed operand, which Linear's forward (x·wᵀ) and weight gradient
// (dyᵀ·x) need, is materialised first and halves the speed (62 vs 115
// GFLOP/s, 20 allocations). Direct sgemm on preallocated slices takes the
// transposes for free and allocates nothing, so the hot path does not use
// gorgonia; nor does the rest, which would need kernels gorgonia lacks
// (im2col, pooling, batch norm, fused epilogues).
//
// # Data parallelism
//
// PrepareModel broadcasts rank 0's parameters and buffers to all ranks and
// returns a DDP whose Backward leaves the mean gradient over ranks in every
// replica: with a bucketed GradReducer (collective's Reducer) buckets are
// all-reduced while backward goes on, otherwise one all-reduce of the flat
// gradient arena follows backward. Communicator is the slice of
// *collective.Comm it needs, so tests can use computetest.FakeGroup.
package compute
