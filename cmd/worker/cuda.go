//go:build cuda

package main

import (
	"fmt"

	"github.com/tempotrain/tempotrain/builtin"
	"github.com/tempotrain/tempotrain/compute"
	"github.com/tempotrain/tempotrain/compute/cuda"
)

// checkGPUs makes sure every listed GPU exists and runs the CUDA backend
// before the worker polls the GPU queue: each one is opened once (its
// kernels JIT-compiled, cuBLAS loaded), so that a wrong ordinal, an old GPU
// or a missing cuBLAS is an error at start, not in the first rank.
func checkGPUs(d []int) error {
	if len(d) == 0 {
		return nil
	}
	if err := cuda.Check(d); err != nil {
		return fmt.Errorf("-gpus %v: %w", d, err)
	}
	for _, o := range d {
		b, err := cuda.New(o, cuda.Options{})
		if err != nil {
			return fmt.Errorf("-gpus %v: %w", d, err)
		}
		if err := b.Close(); err != nil {
			return fmt.Errorf("-gpus %v: GPU %d: %w", d, o, err)
		}
	}
	return nil
}

// builtinOptions are the options of the built-in training functions: they
// run GPU ranks on the CUDA backend.
func builtinOptions() builtin.Options {
	return builtin.Options{GPUBackend: func(device int) (compute.Backend, error) { return cuda.New(device, cuda.Options{}) }}
}
