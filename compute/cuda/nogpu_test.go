//go:build !cuda

package cuda_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// hasGPU reports whether the NVIDIA kernel driver sees a GPU. (Not
// /dev/nvidiactl: libcuda creates that node even where there is no GPU.)
func hasGPU() bool {
	gpus, err := os.ReadDir("/proc/driver/nvidia/gpus")
	return err == nil && len(gpus) > 0
}

func goTool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to build the -tags cuda tests with")
	}
	if _, err := os.Stat("/usr/include/cuda.h"); err != nil {
		t.Skip("no CUDA toolkit headers (/usr/include/cuda.h): install nvidia-cuda-dev (see .ci/setup) to build -tags cuda")
	}
	return p
}

// With a GPU (and a Go toolchain), the GPU tests run as a -tags cuda
// subprocess, so that a plain go test ./... covers them there.
func TestGPU(t *testing.T) {
	if !hasGPU() {
		t.Skip("no GPU here (none in /proc/driver/nvidia/gpus): the GPU checks run on a GPU machine, see bench/gpu/README.md")
	}
	cmd := exec.Command(goTool(t), "test", "-tags", "cuda", "-count=1", ".")
	cmd.Env = append(os.Environ(), "TEMPOTRAIN_REQUIRE_GPU=1")
	out, err := cmd.CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Fatalf("go test -tags cuda: %v", err)
	}
}

// A -tags cuda binary on a machine without a GPU stops in internal/probe,
// before gorgonia.org/cu's init would exit with its own message: a test
// binary reports a skip (exit 0), or fails when a GPU is required.
func TestCUDABinaryWithoutGPU(t *testing.T) {
	if hasGPU() {
		t.Skip("this machine has a GPU")
	}
	if _, err := os.Stat("/usr/lib/x86_64-linux-gnu/libcuda.so.1"); err != nil {
		t.Skip("no libcuda.so.1: a -tags cuda binary cannot even start here")
	}
	bin := filepath.Join(t.TempDir(), "cuda.test")
	if out, err := exec.Command(goTool(t), "test", "-c", "-tags", "cuda", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go test -c -tags cuda: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "-test.v").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- SKIP: all tests of this -tags cuda binary: no usable GPU") {
		t.Errorf("cuda.test without a GPU: %v\n%s", err, out)
	}
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "TEMPOTRAIN_REQUIRE_GPU=1")
	out, err = cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(out), "needs a GPU") {
		t.Errorf("cuda.test with TEMPOTRAIN_REQUIRE_GPU=1: %v\n%s", err, out)
	}
}
