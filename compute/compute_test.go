package compute_test

import (
	"bytes"
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/tempotrain/tempotrain/collective"
	"github.com/tempotrain/tempotrain/compute"
	"github.com/tempotrain/tempotrain/compute/computetest"
)

func TestModelParamCounts(t *testing.T) {
	t.Parallel()
	// PyTorch's counts for the same models (torchvision's resnet18 with a
	// 1-channel stem and 10 classes).
	for name, want := range map[string]int{"mlp": 535818, "cnn": 421642, "resnet18": 11175370} {
		m, err := compute.NewModel(name, compute.CPU(), 2, 1)
		if err != nil {
			t.Fatal(err)
		}
		if m.NumParams() != want {
			t.Errorf("%s: %d parameters, want %d\n%s", name, m.NumParams(), want, m.Summary())
		}
		if got := m.OutShape(); len(got) != 1 || got[0] != 10 {
			t.Errorf("%s: output shape %v, want [10]", name, got)
		}
		// What a bucketed all-reduce can overlap: all but the first layer.
		first := map[string]int{"mlp": 784*512 + 512, "cnn": 32*9 + 32, "resnet18": 64 * 49}[name]
		if got, want := m.EarlyGradientShare(), 1-float64(first)/float64(want); math.Abs(got-want) > 1e-12 {
			t.Errorf("%s: early gradient share %g, want %g", name, got, want)
		}
	}
}

func TestSeededInit(t *testing.T) {
	t.Parallel()
	a, _ := compute.NewModel("cnn", compute.CPU(), 1, 3)
	b, _ := compute.NewModel("cnn", compute.CPU(), 1, 3)
	c, _ := compute.NewModel("cnn", compute.CPU(), 1, 4)
	if !equal(a.P.Data(), b.P.Data()) {
		t.Fatal("same seed, different parameters")
	}
	if equal(a.P.Data(), c.P.Data()) {
		t.Fatal("different seeds, same parameters")
	}
	// PyTorch's default bound for conv2 (fan in 32·3·3).
	w := a.Params()[2].W.Data()
	bound := 1 / math.Sqrt(288)
	var maxAbs float64
	for _, v := range w {
		maxAbs = math.Max(maxAbs, math.Abs(float64(v)))
	}
	if maxAbs > bound || maxAbs < 0.9*bound {
		t.Fatalf("conv2.weight max |w| = %g, want just under %g", maxAbs, bound)
	}
}

func equal(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

func TestStateRoundTripAndCorruption(t *testing.T) {
	t.Parallel()
	m, _ := compute.NewModel("cnn", compute.CPU(), 4, 9)
	o, err := compute.NewOptimizer(m, compute.OptimizerConfig{Name: "adamw"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range m.G.Data() {
		m.G.Data()[i] = float32(i%7) - 3
	}
	o.Step(0.01)
	st := compute.NewState()
	st.Ints["epoch"] = 3
	st.Blobs["rng"] = []byte{1, 2, 3}
	m.Save(st)
	o.Save(st)
	path := filepath.Join(t.TempDir(), "s")
	if err := st.SaveFile(path); err != nil {
		t.Fatal(err)
	}

	m2, _ := compute.NewModel("cnn", compute.CPU(), 4, 10)
	o2, _ := compute.NewOptimizer(m2, compute.OptimizerConfig{Name: "adamw"})
	st2, err := compute.LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := m2.Load(st2); err != nil {
		t.Fatal(err)
	}
	if err := o2.Load(st2); err != nil {
		t.Fatal(err)
	}
	if !equal(m.P.Data(), m2.P.Data()) || o2.Steps() != 1 || st2.Ints["epoch"] != 3 || !bytes.Equal(st2.Blobs["rng"], []byte{1, 2, 3}) {
		t.Fatal("round trip lost something")
	}
	// The same state encodes to the same bytes.
	var b1, b2 bytes.Buffer
	st.WriteTo(&b1)
	st2.WriteTo(&b2)
	if !bytes.Equal(b1.Bytes(), b2.Bytes()) {
		t.Fatal("re-encoding a loaded state gives other bytes")
	}
	// Both Adam moments came back: one more identical step stays identical.
	copy(m2.G.Data(), m.G.Data())
	o.Step(0.01)
	o2.Step(0.01)
	if !equal(m.P.Data(), m2.P.Data()) {
		t.Fatal("optimizer state not restored: next steps differ")
	}

	raw := b1.Bytes()
	flip := append([]byte(nil), raw...)
	flip[len(flip)/2] ^= 1
	wrongVersion := append([]byte(nil), raw...)
	wrongVersion[8] = 9
	for name, c := range map[string]struct {
		b    []byte
		want string
	}{
		"bad magic":     {append([]byte("XXXXXXXX"), raw[8:]...), "magic"},
		"truncated":     {raw[:len(raw)-100], "checksum"},
		"flipped bit":   {flip, "checksum"},
		"version":       {wrongVersion, "version 9"},
		"empty":         {nil, "magic"},
		"only a header": {raw[:12], "truncated"},
	} {
		_, err := compute.ReadState(bytes.NewReader(c.b))
		if !errors.Is(err, compute.ErrStateCorrupt) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want ErrStateCorrupt saying %q", name, err, c.want)
		}
	}

	// A state of another model names the tensor at fault.
	mlp, _ := compute.NewModel("mlp", compute.CPU(), 4, 1)
	if err := mlp.Load(st2); err == nil || !strings.Contains(err.Error(), "fc1.weight") {
		t.Fatalf("loading a cnn state into an mlp: %v", err)
	}
	os.Remove(path)
}

// Two data-parallel ranks on half batches take the same step as one rank on
// the whole batch (up to float rounding), and stay identical to each other.
func TestDDPAveragesGradients(t *testing.T) {
	t.Parallel()
	const n = 8
	x := make([]float32, n*784)
	y := make([]float32, n)
	for i := range x {
		x[i] = float32(math.Sin(float64(i)))
	}
	for i := range y {
		y[i] = float32(i % 10)
	}
	step := func(m *compute.Model, d *compute.DDP, xs, ys []float32) {
		be := m.Backend()
		k := len(ys)
		loss := compute.NewCrossEntropy(be, k, 10)
		logits := m.Forward(compute.HostTensor(xs, k, 1, 28, 28), true)
		loss.Forward(logits, compute.HostTensor(ys, k), true)
		if err := d.Backward(context.Background(), loss.Grad(k)); err != nil {
			t.Error(err)
		}
	}

	single, _ := compute.NewModel("cnn", compute.CPU(), n, 5)
	sd, _ := compute.PrepareModel(context.Background(), single, nil, compute.DDPOptions{})
	step(single, sd, x, y)

	g := computetest.NewFakeGroup(2)
	models := make([]*compute.Model, 2)
	var wg sync.WaitGroup
	for r := 0; r < 2; r++ {
		// Rank 1 starts from another seed: PrepareModel must overwrite it.
		m, _ := compute.NewModel("cnn", compute.CPU(), n/2, uint64(5+r))
		models[r] = m
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			d, err := compute.PrepareModel(context.Background(), m, g.Rank(r), compute.DDPOptions{})
			if err != nil {
				t.Error(err)
				return
			}
			h := n / 2
			step(m, d, x[r*h*784:(r+1)*h*784], y[r*h:(r+1)*h])
		}(r)
	}
	wg.Wait()
	if !equal(models[0].P.Data(), single.P.Data()) || !equal(models[1].P.Data(), single.P.Data()) {
		t.Fatal("ranks do not start from rank 0's parameters")
	}
	if !equal(models[0].G.Data(), models[1].G.Data()) {
		t.Fatal("ranks' averaged gradients differ")
	}
	var diff, norm float64
	for i, v := range single.G.Data() {
		d := float64(v - models[0].G.Data()[i])
		diff += d * d
		norm += float64(v) * float64(v)
	}
	if rel := math.Sqrt(diff / norm); rel > 1e-5 {
		t.Fatalf("2-rank averaged gradient vs 1-rank gradient: relative difference %g", rel)
	}
}

// A training step in steady state allocates nothing.
func TestTrainingStepDoesNotAllocate(t *testing.T) {
	for _, name := range []string{"mlp", "cnn", "resnet18"} {
		n := 16
		m, _ := compute.NewModel(name, compute.CPU(), n, 1)
		o, _ := compute.NewOptimizer(m, compute.OptimizerConfig{Momentum: 0.9})
		d, _ := compute.PrepareModel(context.Background(), m, nil, compute.DDPOptions{})
		loss := compute.NewCrossEntropy(m.Backend(), n, 10)
		x := compute.CPU().New(n, 1, 28, 28)
		y := compute.CPU().New(n)
		ctx := context.Background()
		step := func() {
			logits := m.Forward(x.Rows(0, n-1), true)
			loss.Forward(logits, y.Rows(0, n-1), true)
			d.Backward(ctx, loss.Grad(n-1))
			o.Step(0.01)
		}
		// AllocsPerRun counts every allocation of the process, so a goroutine
		// an earlier test left winding down can add to one measurement; an
		// allocation in the step shows in all of them.
		allocs := testing.AllocsPerRun(2, step)
		for i := 0; i < 3 && allocs != 0; i++ {
			allocs = min(allocs, testing.AllocsPerRun(2, step))
		}
		if allocs != 0 {
			t.Errorf("%s: %v allocations per step, want 0", name, allocs)
		}
	}
}

// Over the real TCP collective, bucketed reduction (collective.Reducer,
// overlapping backward) and one flat all-reduce give the same gradients, bit
// for bit, on every rank.
func TestDDPBucketsEqualFlatTCP(t *testing.T) {
	t.Parallel()
	const world, n = 2, 8
	comms := computetest.ConnectTCP(t, world)
	grads := make([][2][]float32, world)
	var wg sync.WaitGroup
	for r := 0; r < world; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			ctx := context.Background()
			comm := comms[r]
			x := make([]float32, n*784)
			y := make([]float32, n)
			for i := range x {
				x[i] = float32(math.Cos(float64(i * (r + 1)))) // each rank its own data
			}
			for i := range y {
				y[i] = float32((i + r) % 10)
			}
			for mode, opts := range []compute.DDPOptions{
				{NewReducer: func(g [][]float32, b int) (compute.GradReducer, error) { return collective.NewReducer(comm, g, b) }, BucketBytes: 64 << 10},
				{},
			} {
				m, _ := compute.NewModel("cnn", compute.CPU(), n, 3)
				d, err := compute.PrepareModel(ctx, m, comm, opts)
				if err != nil {
					t.Error(err)
					return
				}
				loss := compute.NewCrossEntropy(m.Backend(), n, 10)
				loss.Forward(m.Forward(compute.HostTensor(x, n, 1, 28, 28), true), compute.HostTensor(y, n), true)
				if err := d.Backward(ctx, loss.Grad(n)); err != nil {
					t.Error(err)
					return
				}
				grads[r][mode] = append([]float32(nil), m.G.Data()...)
			}
		}(r)
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	for r := 0; r < world; r++ {
		if !equal(grads[r][0], grads[0][1]) || !equal(grads[r][1], grads[0][1]) {
			t.Fatalf("rank %d: bucketed and flat gradients differ", r)
		}
	}
}
