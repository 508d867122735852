package gpu_test

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/tempotrain/tempotrain/compute"
	"github.com/tempotrain/tempotrain/compute/cuda/internal/gpu"
)

// trainer drives one model through training steps on a backend, the way a
// GPU training loop does: the batch is uploaded, and loss statistics are
// summed on the device (no Download inside a step).
type trainer struct {
	be          compute.Backend
	m           *compute.Model
	opt         *compute.Optimizer
	x, y        compute.Tensor
	dl, st, acc compute.Tensor
	step        int
}

func newTrainer(t *testing.T, be compute.Backend, layers func() []compute.Named, batch int, ocfg compute.OptimizerConfig) *trainer {
	t.Helper()
	m, err := compute.Build(be, []int{1, 28, 28}, batch, 7, layers()...)
	if err != nil {
		t.Fatal(err)
	}
	opt, err := compute.NewOptimizer(m, ocfg)
	if err != nil {
		t.Fatal(err)
	}
	return &trainer{be: be, m: m, opt: opt, x: be.New(batch, 1, 28, 28), y: be.New(batch),
		dl: be.New(batch, 10), st: be.New(2), acc: be.New(2)}
}

// batch is step i's inputs: fixed pseudo-random images and labels.
func batch(i, n int) (x, y []float32) {
	r := rand.New(rand.NewPCG(uint64(i), 3))
	x, y = make([]float32, n*784), make([]float32, n)
	for j := range x {
		x[j] = float32(r.NormFloat64())
	}
	for j := range y {
		y[j] = float32(r.IntN(10))
	}
	return x, y
}

// upload loads step i's batch of n samples and returns its views.
func (tr *trainer) upload(n int) (x, y compute.Tensor) {
	hx, hy := batch(tr.step, n)
	x, y = tr.x.Rows(0, n), tr.y.Rows(0, n)
	tr.be.Upload(x, hx)
	tr.be.Upload(y, hy)
	return x, y
}

// compute is the step's device work on the uploaded batch.
func (tr *trainer) compute(x, y compute.Tensor) {
	n := x.Dim(0)
	tr.m.SetDropoutSeed(uint64(1000 + tr.step))
	logits := tr.m.Forward(x, true)
	tr.be.SoftmaxCrossEntropy(logits, y, tr.dl.Rows(0, n), tr.st)
	tr.be.AddTo(tr.acc, tr.st)
	tr.m.Backward(tr.dl.Rows(0, n), nil)
	tr.opt.Step(0.01 * float64(1+tr.step%3)) // a schedule: the LR changes
	tr.step++
}

func (tr *trainer) get(t compute.Tensor) []float32 {
	h := make([]float32, t.Len())
	tr.be.Download(h, t)
	return h
}

func mlpDropout() []compute.Named {
	return []compute.Named{{Layer: compute.NewFlatten()}, {Name: "fc1", Layer: compute.NewLinearReLU(784, 32)},
		{Layer: compute.NewDropout(0.3)}, {Name: "fc2", Layer: compute.NewLinear(32, 10)}}
}

func cnn() []compute.Named {
	return []compute.Named{{Name: "conv1", Layer: compute.NewConv2DReLUPool(1, 4, 3, 1, 1)},
		{Name: "conv2", Layer: compute.NewConv2DReLUPool(4, 8, 3, 1, 1)}, {Layer: compute.NewFlatten()},
		{Name: "fc1", Layer: compute.NewLinearReLU(392, 16)}, {Name: "fc2", Layer: compute.NewLinear(16, 10)}}
}

// Steps through RunGraph compute exactly what the same steps do op by op:
// the graph is captured once, relaunched with patched arguments (learning
// rate, Adam's step, dropout seed), and a smaller last batch gets a graph
// of its own.
func TestRunGraphMatchesEager(t *testing.T) {
	for _, c := range []struct {
		name   string
		layers func() []compute.Named
		opt    compute.OptimizerConfig
	}{
		{"mlp-dropout-adam", mlpDropout, compute.OptimizerConfig{Name: "adam"}},
		{"cnn-sgd-momentum", cnn, compute.OptimizerConfig{Name: "sgd", Momentum: 0.9}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			const n, steps = 6, 5
			ebe, _ := newBackend(t, gpu.Options{})
			gbe, _ := newBackend(t, gpu.Options{})
			eager := newTrainer(t, ebe, c.layers, n, c.opt)
			graphed := newTrainer(t, gbe, c.layers, n, c.opt)
			sizes := []int{n, n, n, n, 4, n, 4}
			for _, bs := range sizes {
				eager.compute(eager.upload(bs))
				// Uploads inside the graphed step: the graph copies each
				// step's batch from its pinned slots.
				if err := gbe.RunGraph(func() { graphed.compute(graphed.upload(bs)) }); err != nil {
					t.Fatal(err)
				}
			}
			for _, pair := range [][2]compute.Tensor{{eager.m.P, graphed.m.P}, {eager.m.B, graphed.m.B}, {eager.acc, graphed.acc}} {
				e, g := eager.get(pair[0]), graphed.get(pair[1])
				for i := range e {
					if math.Float32bits(e[i]) != math.Float32bits(g[i]) {
						t.Fatalf("element %d of %v: graphed %v, eager %v", i, pair[0], g[i], e[i])
					}
				}
			}
			st := gbe.Stats()
			// Batch n: eager once, captured at its second step, launched
			// from then on; batch 4: eager, then captured.
			want := gpu.GraphStats{Steps: len(sizes), Eager: 2, Captures: 2, Launches: len(sizes) - 2}
			if st.Steps != want.Steps || st.Eager != want.Eager || st.Captures != want.Captures || st.Launches != want.Launches ||
				st.CaptureFailures != 0 || st.Patched == 0 {
				t.Errorf("stats %+v, want %+v with patched nodes", st, want)
			}
			if acc := graphed.get(graphed.acc); acc[0] <= 0 || acc[1] < 0 || acc[1] > float32(5*n+8) {
				t.Errorf("accumulated loss and correct count %v", acc)
			}
		})
	}
}

func TestRunGraphRefusesReads(t *testing.T) {
	be, _ := newBackend(t, gpu.Options{})
	x := be.New(4)
	for name, fn := range map[string]func(){
		"Download": func() { be.Download(make([]float32, 4), x) },
		"New":      func() { be.New(3) },
		"RunGraph": func() {
			if err := be.RunGraph(func() {}); err != nil {
				panic(err)
			}
		},
	} {
		var got any
		func() {
			defer func() { got = recover() }()
			if err := be.RunGraph(fn); err != nil {
				t.Fatal(err)
			}
		}()
		err, _ := got.(error)
		if !errors.Is(err, gpu.ErrInGraph) {
			t.Errorf("%s inside RunGraph: panic %v, want ErrInGraph", name, got)
		}
	}
	// The backend is usable afterwards.
	be.Fill(x, 2)
	if h := make([]float32, 4); func() []float32 { be.Download(h, x); return h }()[3] != 2 {
		t.Errorf("after refused steps: %v", h)
	}
}

// The CUDA backend trains the built-in models as the CPU backend does: the
// same loss, gradients and parameters within float32 reassociation. (Batch
// norm in training mode amplifies rounding where a channel holds very few
// values, as ResNet-18's last stage at 1×1 does: with 2 samples the CPU and
// the GPU already differ by 2e-3 after one forward, with 8 by 5e-6.)
func TestModelsMatchCPU(t *testing.T) {
	for _, c := range []struct {
		model    string
		n, steps int
		tol      float64
	}{{"cnn", 4, 2, 1e-4}, {"mlp", 8, 2, 1e-4}, {"resnet18", 8, 1, 1e-4}} {
		t.Run(c.model, func(t *testing.T) {
			t.Parallel()
			if testing.Short() && c.model == "resnet18" {
				t.Skip("ResNet-18 on the emulator takes a while")
			}
			gbe, _ := newBackend(t, gpu.Options{})
			var tr [2]*trainer
			for k, be := range []compute.Backend{compute.CPU(), gbe} {
				m, err := compute.NewModel(c.model, be, c.n, 11)
				if err != nil {
					t.Fatal(err)
				}
				opt, err := compute.NewOptimizer(m, compute.OptimizerConfig{Momentum: 0.9})
				if err != nil {
					t.Fatal(err)
				}
				tr[k] = &trainer{be: be, m: m, opt: opt, x: be.New(c.n, 1, 28, 28), y: be.New(c.n),
					dl: be.New(c.n, 10), st: be.New(2), acc: be.New(2)}
				for s := 0; s < c.steps; s++ {
					tr[k].compute(tr[k].upload(c.n))
				}
			}
			for _, pair := range [][2]compute.Tensor{{tr[0].acc, tr[1].acc}, {tr[0].m.G, tr[1].m.G}, {tr[0].m.P, tr[1].m.P}, {tr[0].m.B, tr[1].m.B}} {
				want, got := tr[0].get(pair[0]), tr[1].get(pair[1])
				if len(want) == 0 {
					continue
				}
				var d, nrm float64
				for i := range want {
					d += math.Pow(float64(got[i]-want[i]), 2)
					nrm += math.Pow(float64(want[i]), 2)
				}
				if rel := math.Sqrt(d / nrm); !(rel < c.tol) {
					t.Errorf("%v: relative difference %.3g from the CPU backend, want < %g", pair[0], rel, c.tol)
				}
			}
		})
	}
}

// The built-in CNN's first training step is a step structure of its own
// (the MLP's is not): through RunGraph its full batch runs eagerly twice
// before it is captured. Seen first on an H200 (compute/cuda's TestRunGraph
// counted 3 eager steps where 2 were expected); this pins the counts on the
// emulator, so that a change to them shows here.
func TestRunGraphFirstStepOfCNN(t *testing.T) {
	for _, c := range []struct {
		model string
		eager int
	}{{"cnn", 3}, {"mlp", 2}} {
		t.Run(c.model, func(t *testing.T) {
			t.Parallel()
			const n = 8
			be, _ := newBackend(t, gpu.Options{})
			m, err := compute.NewModel(c.model, be, n, 5)
			if err != nil {
				t.Fatal(err)
			}
			opt, err := compute.NewOptimizer(m, compute.OptimizerConfig{Name: "adam"})
			if err != nil {
				t.Fatal(err)
			}
			tr := &trainer{be: be, m: m, opt: opt, x: be.New(n, 1, 28, 28), y: be.New(n), dl: be.New(n, 10), st: be.New(2), acc: be.New(2)}
			sizes := []int{n, n, n, n, 5, n, 5, n}
			for i, bs := range sizes {
				hx, hy := batch(i, bs)
				x, y := tr.x.Rows(0, bs), tr.y.Rows(0, bs)
				be.Upload(x, hx)
				be.Upload(y, hy)
				if err := be.RunGraph(func() { tr.compute(x, y) }); err != nil {
					t.Fatal(err)
				}
			}
			st := be.Stats()
			if st.Eager != c.eager || st.Captures != 2 || st.Launches != len(sizes)-c.eager || st.CaptureFailures != 0 {
				t.Errorf("stats %+v: want %d eager steps, 2 captures, %d launches", st, c.eager, len(sizes)-c.eager)
			}
		})
	}
}
