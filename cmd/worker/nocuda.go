//go:build !cuda

package main

import (
	"fmt"

	"github.com/tempotrain/tempotrain/builtin"
)

func checkGPUs(d []int) error {
	if len(d) > 0 {
		return fmt.Errorf("-gpus %v: this worker was built without CUDA; build it with -tags cuda", d)
	}
	return nil
}

// builtinOptions are the options of the built-in training functions: no
// GPU backend in a build without CUDA (checkGPUs refuses -gpus).
func builtinOptions() builtin.Options { return builtin.Options{} }
