//go:build cuda

package cuda

import (
	_ "embed"
	"errors"
	"fmt"
	"strings"

	"gorgonia.org/cu"

	"github.com/tempotrain/tempotrain/compute"
	"github.com/tempotrain/tempotrain/compute/cuda/internal/gpu"
	// Before gorgonia.org/cu's init: see the package's doc.
	_ "github.com/tempotrain/tempotrain/compute/cuda/internal/probe"
)

// The kernels, compiled for compute_80 by kernels/gen.sh (go generate).
//
//go:embed kernels/kernels.ptx
var kernelsPTX string

// ptxFor returns the kernels' PTX for a GPU of compute capability major.x:
// the driver compiles PTX for its target and every newer GPU, so one PTX
// serves 8.0 and newer (A100, H100, H200).
func ptxFor(major int) (string, bool) {
	if major < 8 {
		return "", false
	}
	return kernelsPTX, true
}

type (
	// Backend is the CUDA backend: compute.Backend plus RunGraph, MatMul,
	// Synchronize, SetPrecision and Close.
	Backend = gpu.Backend
	// Options configure New; the zero value is FP32 GEMMs.
	Options = gpu.Options
	// Precision of the GEMMs: FP32, TF32 or BF16.
	Precision = gpu.Precision
	// GraphStats counts what RunGraph did.
	GraphStats = gpu.GraphStats
	// Error is what Backend ops panic with when the device fails.
	Error = gpu.Error
)

const (
	FP32 = gpu.FP32
	TF32 = gpu.TF32
	BF16 = gpu.BF16
)

// ParsePrecision reads "fp32", "tf32" or "bf16".
func ParsePrecision(s string) (Precision, error) { return gpu.ParsePrecision(s) }

// ErrInGraph is wrapped by the panic of an op that RunGraph's function may
// not call.
var ErrInGraph = gpu.ErrInGraph

var _ compute.Backend = (*Backend)(nil)

// New returns the backend of GPU ordinal (as nvidia-smi numbers them, unless
// CUDA_VISIBLE_DEVICES says otherwise). It loads the kernels (the driver
// compiles their PTX on first use) and cuBLAS. Close it when done.
func New(ordinal int, o Options) (*Backend, error) {
	d, err := newDriver(ordinal)
	if err != nil {
		return nil, err
	}
	return gpu.New(d, o), nil
}

// Device describes a GPU.
type Device struct {
	Ordinal      int
	Name         string
	Major, Minor int // compute capability
	MemoryBytes  int64
	SMs          int
}

func (d Device) String() string {
	return fmt.Sprintf("GPU %d: %s (sm_%d%d, %d SMs, %.0f GiB)", d.Ordinal, d.Name, d.Major, d.Minor, d.SMs, float64(d.MemoryBytes)/(1<<30))
}

// Devices lists the GPUs the driver sees.
func Devices() ([]Device, error) {
	n, err := cu.NumDevices()
	if err != nil {
		return nil, fmt.Errorf("count GPUs: %w", err)
	}
	out := make([]Device, n)
	for i := range out {
		d := cu.Device(i)
		out[i].Ordinal = i
		var errs [4]error
		out[i].Name, errs[0] = d.Name()
		out[i].Major, out[i].Minor, errs[1] = d.ComputeCapability()
		out[i].MemoryBytes, errs[2] = d.TotalMem()
		out[i].SMs, errs[3] = d.Attribute(cu.MultiprocessorCount)
		if err := errors.Join(errs[:]...); err != nil {
			return nil, fmt.Errorf("GPU %d: %w", i, err)
		}
	}
	return out, nil
}

// Check verifies that each ordinal names a GPU this package can run on; the
// error lists the GPUs there are.
func Check(ordinals []int) error {
	devs, err := Devices()
	if err != nil {
		return err
	}
	var have []string
	for _, d := range devs {
		have = append(have, d.String())
	}
	for _, o := range ordinals {
		if o < 0 || o >= len(devs) {
			return fmt.Errorf("GPU %d: %w; this machine has %d: %s", o, ErrNoDevice, len(devs), strings.Join(have, "; "))
		}
		if _, ok := ptxFor(devs[o].Major); !ok {
			return fmt.Errorf("%s: compute capability %d.%d is too old (compute/cuda needs 8.0 or newer)", devs[o], devs[o].Major, devs[o].Minor)
		}
	}
	return nil
}
