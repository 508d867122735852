// Package gpu is the device-independent half of compute/cuda: Backend
// implements compute.Backend by queueing the kernels of kernels.cu and
// column-major GEMMs on a Driver, and RunGraph turns a training step into
// one graph launch. compute/cuda's Driver is the CUDA driver API with
// cuBLAS; internal/emu's runs the same kernels on the CPU, which is how this
// package is tested on machines without a GPU.
//
// Memory: tensors come from 64 MiB arena chunks (compute.Backend has no
// Free; Close frees everything); the convolutions' im2col scratch is one
// growing buffer per backend, sized for the backward pass already at the
// forward, so that a step's addresses are the same from its first run.
//
// Device tensors are built by writing compute.Tensor's fields through a
// mirror struct (tensor.go), checked against compute.Tensor at start: compute
// has no exported constructor for a tensor with a device address yet.
package gpu
