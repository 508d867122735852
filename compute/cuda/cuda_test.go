//go:build cuda

package cuda_test

// The GPU checks of compute/cuda. They run only in a -tags cuda test binary
// on a machine with a GPU (internal/probe skips the whole binary without
// one); bench/gpu/run.sh runs them on the GPU machine. TEMPOTRAIN_GPU picks
// the ordinal (default 0).

import (
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"

	"github.com/tempotrain/tempotrain/compute"
	"github.com/tempotrain/tempotrain/compute/computetest"
	"github.com/tempotrain/tempotrain/compute/cuda"
)

// Tolerances of the reduced-precision GEMMs, as in internal/gpu's emulated
// run (METHOD.md: TF32 near 3e-4, BF16 operands 1e-3 to 1e-2).
var (
	tf32Tolerance = computetest.Tolerance{Rel: 1e-3, Abs: 3e-3}
	bf16Tolerance = computetest.Tolerance{Rel: 1e-2, Abs: 2e-2}
)

func ordinal(t testing.TB) int {
	s := os.Getenv("TEMPOTRAIN_GPU")
	if s == "" {
		return 0
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("TEMPOTRAIN_GPU=%q: %v", s, err)
	}
	return n
}

func newBackend(t testing.TB, o cuda.Options) *cuda.Backend {
	t.Helper()
	b, err := cuda.New(ordinal(t), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Error(err)
		}
	})
	return b
}

func TestDevice(t *testing.T) {
	devs, err := cuda.Devices()
	if err != nil || len(devs) == 0 {
		t.Fatalf("devices %v, %v", devs, err)
	}
	for _, d := range devs {
		t.Log(d)
	}
	if err := cuda.Check([]int{len(devs)}); err == nil {
		t.Errorf("Check of GPU %d on a machine with %d: no error", len(devs), len(devs))
	}
	newBackend(t, cuda.Options{})
	t.Logf("cuBLAS: %s", cuda.CuBLASPath())
}

// The device runs the CPU backend's conformance suite.
func TestConformance(t *testing.T) {
	for _, c := range []struct {
		p   cuda.Precision
		tol computetest.Tolerance
	}{{cuda.FP32, computetest.DefaultTolerance}, {cuda.TF32, tf32Tolerance}, {cuda.BF16, bf16Tolerance}} {
		t.Run(c.p.String(), func(t *testing.T) {
			computetest.RunTol(t, newBackend(t, cuda.Options{Precision: c.p, SyncEachOp: true}), c.tol)
		})
	}
}

// A large GEMM against a float64 reference at each precision (fresh random
// operands, output poisoned).
func TestGemmPrecision(t *testing.T) {
	const m, n, k = 384, 256, 1024
	r := rand.New(rand.NewPCG(rand.Uint64(), 0))
	a, bm := make([]float32, m*k), make([]float32, k*n)
	for i := range a {
		a[i] = float32(r.NormFloat64())
	}
	for i := range bm {
		bm[i] = float32(r.NormFloat64())
	}
	want := make([]float64, m*n)
	for i := 0; i < m; i++ {
		for l := 0; l < k; l++ {
			ail := float64(a[i*k+l])
			for j := 0; j < n; j++ {
				want[i*n+j] += ail * float64(bm[l*n+j])
			}
		}
	}
	for _, c := range []struct {
		p      cuda.Precision
		maxRel float64
		minRel float64 // a reduced precision that is not used shows as an error far below its rounding
		// BF16 asks cuBLAS for CUBLAS_COMPUTE_32F_FAST_16BF on float32
		// operands, which lets it use BF16 or TF32 tensor cores: on an H200
		// with cuBLAS 13.1 it ran at TF32's accuracy (2.93e-4, TF32's own).
		// The floor proves tensor cores ran; which kind is logged.
		comment string
	}{{cuda.FP32, 1e-5, 0, "float32"}, {cuda.TF32, 1e-3, 3e-5, "TF32"}, {cuda.BF16, 1e-2, 3e-5, "BF16 or TF32"}} {
		b := newBackend(t, cuda.Options{Precision: c.p})
		at, bt, ct := b.New(m, k), b.New(k, n), b.New(m, n)
		b.Upload(at, a)
		b.Upload(bt, bm)
		b.Fill(ct, float32(math.NaN()))
		b.MatMul(false, false, m, n, k, 1, at, k, bt, n, 0, ct, n)
		got := make([]float32, m*n)
		b.Download(got, ct)
		var d, nrm float64
		for i, w := range want {
			if math.IsNaN(float64(got[i])) {
				t.Fatalf("%s: element %d not written", c.p, i)
			}
			d += (float64(got[i]) - w) * (float64(got[i]) - w)
			nrm += w * w
		}
		rel := math.Sqrt(d / nrm)
		t.Logf("%s GEMM %dx%dx%d: relative error %.3g", c.p, m, n, k, rel)
		if !(rel < c.maxRel && rel >= c.minRel) {
			t.Errorf("%s GEMM: relative error %.3g, want in [%g, %g) for %s", c.p, rel, c.minRel, c.maxRel, c.comment)
		}
	}
}

// trainStep is one training step with device-side loss statistics.
type trainer struct {
	be          compute.Backend
	m           *compute.Model
	opt         *compute.Optimizer
	x, y        compute.Tensor
	dl, st, acc compute.Tensor
	step        int
}

func newTrainer(t *testing.T, be compute.Backend, model string, n int, o compute.OptimizerConfig) *trainer {
	m, err := compute.NewModel(model, be, n, 5)
	if err != nil {
		t.Fatal(err)
	}
	opt, err := compute.NewOptimizer(m, o)
	if err != nil {
		t.Fatal(err)
	}
	return &trainer{be: be, m: m, opt: opt, x: be.New(n, 1, 28, 28), y: be.New(n), dl: be.New(n, 10), st: be.New(2), acc: be.New(2)}
}

func (tr *trainer) upload(n int) (x, y compute.Tensor) {
	r := rand.New(rand.NewPCG(uint64(tr.step), 9))
	hx, hy := make([]float32, n*784), make([]float32, n)
	for i := range hx {
		hx[i] = float32(r.NormFloat64())
	}
	for i := range hy {
		hy[i] = float32(r.IntN(10))
	}
	x, y = tr.x.Rows(0, n), tr.y.Rows(0, n)
	tr.be.Upload(x, hx)
	tr.be.Upload(y, hy)
	return x, y
}

func (tr *trainer) compute(x, y compute.Tensor) {
	n := x.Dim(0)
	tr.m.SetDropoutSeed(uint64(tr.step))
	tr.be.SoftmaxCrossEntropy(tr.m.Forward(x, true), y, tr.dl.Rows(0, n), tr.st)
	tr.be.AddTo(tr.acc, tr.st)
	tr.m.Backward(tr.dl.Rows(0, n), nil)
	tr.opt.Step(0.01 * float64(1+tr.step%3))
	tr.step++
}

func (tr *trainer) get(t compute.Tensor) []float32 {
	h := make([]float32, t.Len())
	tr.be.Download(h, t)
	return h
}

func relDiff(a, b []float32) float64 {
	var d, n float64
	for i := range a {
		d += math.Pow(float64(a[i]-b[i]), 2)
		n += math.Pow(float64(a[i]), 2)
	}
	if n == 0 {
		return math.Sqrt(d)
	}
	return math.Sqrt(d / n)
}

// Graphed steps compute what eager steps do, with one capture per batch
// size and patched arguments (Adam's step, the learning rate).
func TestRunGraph(t *testing.T) {
	for _, model := range []string{"cnn", "resnet18"} {
		t.Run(model, func(t *testing.T) {
			eb, gb := newBackend(t, cuda.Options{}), newBackend(t, cuda.Options{})
			e := newTrainer(t, eb, model, 64, compute.OptimizerConfig{Name: "adam"})
			g := newTrainer(t, gb, model, 64, compute.OptimizerConfig{Name: "adam"})
			sizes := []int{64, 64, 64, 64, 40, 64, 40, 64}
			for _, n := range sizes {
				e.compute(e.upload(n))
				x, y := g.upload(n)
				if err := gb.RunGraph(func() { g.compute(x, y) }); err != nil {
					t.Fatal(err)
				}
			}
			// The same kernels and cuBLAS calls give the same bits; the bounds
			// leave room for a GEMM algorithm picked differently under capture
			// (Adam turns tiny gradient differences into visible updates).
			for _, p := range []struct {
				e, g compute.Tensor
				tol  float64
			}{{e.acc, g.acc, 1e-5}, {e.m.P, g.m.P, 1e-4}, {e.m.B, g.m.B, 1e-4}} {
				d := relDiff(e.get(p.e), g.get(p.g))
				t.Logf("%v: graphed steps differ from eager ones by %.3g", p.e, d)
				if !(d <= p.tol) {
					t.Errorf("%v: graphed steps differ from eager ones by %.3g, want ≤ %g", p.e, d, p.tol)
				}
			}
			// The first step of these models is a structure of its own (seen
			// on an H200, and on the emulator: internal/gpu's
			// TestRunGraphFirstStepOfCNN), so the full batch runs eagerly
			// twice before its capture: 3 eager steps, 2 captures.
			st := gb.Stats()
			t.Logf("%+v", st)
			if st.Eager != 3 || st.Captures != 2 || st.Launches != len(sizes)-3 || st.Patched == 0 || st.CaptureFailures != 0 {
				t.Errorf("stats %+v: want 3 eager steps, 2 captures, %d launches, patched nodes, no failures", st, len(sizes)-3)
			}
		})
	}
}

// The device trains the built-in models as the CPU backend does.
func TestModelsMatchCPU(t *testing.T) {
	for _, c := range []struct {
		model string
		n     int
	}{{"mlp", 64}, {"cnn", 32}, {"resnet18", 16}} {
		t.Run(c.model, func(t *testing.T) {
			var tr [2]*trainer
			for k, be := range []compute.Backend{compute.CPU(), newBackend(t, cuda.Options{})} {
				tr[k] = newTrainer(t, be, c.model, c.n, compute.OptimizerConfig{Momentum: 0.9})
				for s := 0; s < 2; s++ {
					tr[k].compute(tr[k].upload(c.n))
				}
			}
			for _, p := range [][2]compute.Tensor{{tr[0].acc, tr[1].acc}, {tr[0].m.P, tr[1].m.P}, {tr[0].m.B, tr[1].m.B}} {
				if p[0].Len() == 0 {
					continue
				}
				if d := relDiff(tr[0].get(p[0]), tr[1].get(p[1])); !(d < 1e-4) {
					t.Errorf("%v: GPU differs from CPU by %.3g", p[0], d)
				}
			}
		})
	}
}
