//go:build cuda

// Package probe checks for a usable GPU before gorgonia.org/cu's package
// init does, so that a -tags cuda program on a machine without one stops
// with a message that says what is wrong (cu's init prints a link and exits
// with status 1), and a -tags cuda test binary reports a skip and exits 0.
//
// Order: Go initialises packages in import-path order among those whose
// imports are initialised (the Go 1.21 spec). This package's path sorts
// before "gorgonia.org/cu" and it imports only packages cu itself imports
// (os, strings), so its init always runs first in a binary holding both.
// compute/cuda imports it; TestCUDABinaryWithoutGPU (compute/cuda, run on
// machines without a GPU) checks that a -tags cuda test binary stops here.
//
// TEMPOTRAIN_REQUIRE_GPU=1 makes a test binary fail (status 1) instead of
// skipping: the GPU machine's check commands set it, so a broken driver
// cannot pass as a skip.
package probe

/*
#cgo LDFLAGS: -lcuda
#include <cuda.h>

static int tt_probe(int *count) {
	CUresult r = cuInit(0);
	if (r != CUDA_SUCCESS) return (int)r;
	return (int)cuDeviceGetCount(count);
}

static const char *tt_probe_error(int r) {
	const char *s = 0;
	cuGetErrorName((CUresult)r, &s);
	return s ? s : "an unknown CUDA error";
}
*/
import "C"

import (
	"os"
	"strings"
)

// Devices is the number of GPUs the driver reported at start (at least 1:
// with none, the program has exited).
var Devices int

func init() {
	var n C.int
	r := C.tt_probe(&n)
	if r == 0 && n > 0 {
		Devices = int(n)
		return
	}
	why := "the CUDA driver reports no GPU"
	if r != 0 {
		why = "cuInit failed with " + C.GoString(C.tt_probe_error(r))
	}
	if isTest() && os.Getenv("TEMPOTRAIN_REQUIRE_GPU") != "1" {
		os.Stdout.WriteString("--- SKIP: all tests of this -tags cuda binary: no usable GPU (" + why + "). " +
			"They run on a GPU machine: see compute/cuda/doc.go.\nPASS\n")
		os.Exit(0)
	}
	os.Stderr.WriteString("tempotrain: this program was built with -tags cuda and needs a GPU, but " + why +
		". Check the NVIDIA driver (nvidia-smi), or use a build without -tags cuda for CPU ranks.\n")
	os.Exit(1)
}

// isTest reports whether this is a test binary (go test's name.test, or its
// -test.* flags): the testing package cannot be imported here, see Order.
func isTest() bool {
	if strings.HasSuffix(os.Args[0], ".test") {
		return true
	}
	for _, a := range os.Args[1:] {
		if strings.HasPrefix(a, "-test.") {
			return true
		}
	}
	return false
}
