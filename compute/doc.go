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
// Kernels are Go over []float32 (package internal/kern, written once over
// float32 and float64); GEMM is OpenBLAS's cblas_sgemm, called directly
// through cgo (the #cgo directive links -lopenblas; install libopenblas-dev
// to build, libopenblas0-pthread to run). Convolution is im2col + GEMM, a
// group of samples per GEMM when the output plane is small. SetThreads
// bounds OpenBLAS's threads; a data-parallel rank uses one.
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
