package gpu_test

import (
	"os"
	"regexp"
	"slices"
	"testing"

	"github.com/tempotrain/tempotrain/compute/computetest"
	"github.com/tempotrain/tempotrain/compute/cuda/internal/emu"
	"github.com/tempotrain/tempotrain/compute/cuda/internal/gpu"
)

func newBackend(t *testing.T, o gpu.Options) (*gpu.Backend, *emu.Driver) {
	t.Helper()
	d, err := emu.New()
	if err != nil {
		t.Fatal(err)
	}
	b := gpu.New(d, o)
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Error(err)
		}
		if n := d.Allocations(); n != 0 {
			t.Errorf("%d device allocations left after Close", n)
		}
	})
	return b, d
}

func TestTensorLayout(t *testing.T) {
	if err := gpu.LayoutError(); err != nil {
		t.Fatal(err)
	}
}

// The kernels the Go side launches are the PTX's entry points.
func TestKernelListMatchesPTX(t *testing.T) {
	want := slices.Clone(gpu.KernelNames[:])
	slices.Sort(want)
	entry := regexp.MustCompile(`(?m)^\.visible \.entry (\w+)\(`)
	const f = "../../kernels/kernels.ptx"
	src, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range entry.FindAllSubmatch(src, -1) {
		got = append(got, string(m[1]))
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("%s has entries %v, Go launches %v", f, got, want)
	}
}

// The CUDA backend's Go code and kernels, emulated on the CPU, pass the
// conformance suite the CPU backend passes (and the GPU run repeats on the
// device): FP32 at the default tolerance, TF32 and BF16 GEMMs at
// METHOD.md's levels for those precisions.
func TestConformanceEmulated(t *testing.T) {
	for _, c := range []struct {
		p   gpu.Precision
		tol computetest.Tolerance
	}{
		{gpu.FP32, computetest.DefaultTolerance},
		{gpu.TF32, TF32Tolerance},
		{gpu.BF16, BF16Tolerance},
	} {
		t.Run(c.p.String(), func(t *testing.T) {
			t.Parallel()
			b, _ := newBackend(t, gpu.Options{Precision: c.p})
			computetest.RunTol(t, b, c.tol)
		})
	}
}

// Tolerances of the reduced-precision GEMMs (METHOD.md: TF32 near 3e-4, BF16
// operands between 1e-3 and 1e-2 relative error), with the element-wise
// bound ten times looser, as the default's.
var (
	TF32Tolerance = computetest.Tolerance{Rel: 1e-3, Abs: 3e-3}
	BF16Tolerance = computetest.Tolerance{Rel: 1e-2, Abs: 2e-2}
)
