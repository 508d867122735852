//go:build !cuda

package main

import "fmt"

func checkGPUs(d []int) error {
	if len(d) > 0 {
		return fmt.Errorf("-gpus %v: this worker was built without CUDA; build it with -tags cuda", d)
	}
	return nil
}
