package compute_test

import (
	"math"
	"strings"
	"testing"

	"github.com/tempotrain/tempotrain/compute"
)

func TestSchedules(t *testing.T) {
	t.Parallel()
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-12 }
	step := compute.StepLR{Base: 0.1, Gamma: 0.5, Every: 10}
	for s, want := range map[int]float64{0: 0.1, 9: 0.1, 10: 0.05, 25: 0.025} {
		if got := step.LR(s); !near(got, want) {
			t.Errorf("StepLR(%d) = %g, want %g", s, got, want)
		}
	}
	cos := compute.CosineLR{Base: 1, Min: 0.1, Total: 110, Warmup: 10}
	for s, want := range map[int]float64{0: 0.1, 4: 0.5, 9: 1, 10: 1, 60: 0.55, 110: 0.1, 500: 0.1} {
		if got := cos.LR(s); !near(got, want) {
			t.Errorf("CosineLR(%d) = %g, want %g", s, got, want)
		}
	}
	if got := compute.ConstantLR(0.3).LR(1e6); got != 0.3 {
		t.Errorf("ConstantLR = %g", got)
	}
}

func TestOptimizerConfig(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		cfg  compute.OptimizerConfig
		want string
	}{
		{compute.OptimizerConfig{Name: "rmsprop"}, "unknown optimizer"},
		{compute.OptimizerConfig{Nesterov: true}, "nesterov needs momentum"},
		{compute.OptimizerConfig{Name: "adam", Beta1: 1.5}, "betas"},
		{compute.OptimizerConfig{Momentum: -1}, "momentum"},
	} {
		if err := c.cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: err = %v, want %q", c.cfg, err, c.want)
		}
	}
	m, _ := compute.NewModel("mlp", compute.CPU(), 1, 1)
	o, err := compute.NewOptimizer(m, compute.OptimizerConfig{Name: "adamw"})
	if err != nil {
		t.Fatal(err)
	}
	if c := o.Config(); c.WeightDecay != 0.01 || c.Beta1 != 0.9 || c.Beta2 != 0.999 || c.Eps != 1e-8 {
		t.Errorf("adamw defaults: %+v", c)
	}
}

// Every optimizer drives a small regression's loss down; weight decay
// shrinks parameters that get no gradient.
func TestOptimizersDescend(t *testing.T) {
	t.Parallel()
	be := compute.CPU()
	for _, cfg := range []compute.OptimizerConfig{
		{}, {Momentum: 0.9}, {Momentum: 0.9, Nesterov: true, WeightDecay: 1e-4},
		{Name: "adam"}, {Name: "adamw"},
	} {
		m, err := compute.Build(be, []int{4}, 8, 1, compute.Named{Name: "fc", Layer: compute.NewLinear(4, 3)})
		if err != nil {
			t.Fatal(err)
		}
		o, _ := compute.NewOptimizer(m, cfg)
		x := be.New(8, 4)
		for i := range x.Data() {
			x.Data()[i] = float32(math.Sin(float64(i)))
		}
		labels := compute.HostTensor([]float32{0, 1, 2, 0, 1, 2, 0, 1}, 8)
		loss := compute.NewCrossEntropy(be, 8, 3)
		lr := 0.1
		if cfg.Name != "" {
			lr = 0.01
		}
		var first, last float64
		for i := 0; i < 200; i++ {
			l, _ := loss.Forward(m.Forward(x, true), labels, true)
			m.Backward(loss.Grad(8), nil)
			o.Step(lr)
			if i == 0 {
				first = l
			}
			last = l
		}
		if !(last < 0.5*first) {
			t.Errorf("%+v: loss %g → %g, want at least halved", cfg, first, last)
		}
	}

	// Decoupled decay alone (zero gradient) scales parameters by 1 - lr·wd.
	m, _ := compute.Build(be, []int{2}, 1, 1, compute.Named{Name: "fc", Layer: compute.NewLinear(2, 2)})
	o, _ := compute.NewOptimizer(m, compute.OptimizerConfig{Name: "adamw", WeightDecay: 0.5})
	before := append([]float32(nil), m.P.Data()...)
	o.Step(0.1)
	for i, v := range m.P.Data() {
		if want := before[i] * float32(1-0.1*0.5); math.Abs(float64(v-want)) > 1e-7 {
			t.Fatalf("adamw decay: p[%d] = %g, want %g", i, v, want)
		}
	}
}

func TestDropoutLayer(t *testing.T) {
	t.Parallel()
	be := compute.CPU()
	m, err := compute.Build(be, []int{1000}, 2, 1, compute.Named{Name: "drop", Layer: compute.NewDropout(0.3)})
	if err != nil {
		t.Fatal(err)
	}
	x := be.New(2, 1000)
	be.Fill(x, 1)
	if y := m.Forward(x, false); !equal(y.Data(), x.Data()) {
		t.Fatal("dropout changes its input in evaluation")
	}
	m.SetDropoutSeed(5)
	a := append([]float32(nil), m.Forward(x, true).Data()...)
	m.SetDropoutSeed(6)
	b := append([]float32(nil), m.Forward(x, true).Data()...)
	m.SetDropoutSeed(5)
	c := m.Forward(x, true).Data()
	if !equal(a, c) || equal(a, b) {
		t.Fatal("dropout masks must depend on the seed, and only on it")
	}
	zeros := 0
	for _, v := range a {
		if v == 0 {
			zeros++
		} else if math.Abs(float64(v)-1/0.7) > 1e-6 {
			t.Fatalf("kept value %g, want %g", v, 1/0.7)
		}
	}
	if r := float64(zeros) / float64(len(a)); r < 0.25 || r > 0.35 {
		t.Fatalf("dropped %.3f, want about 0.3", r)
	}
	// Backward passes dy through the same mask.
	m.SetDropoutSeed(5)
	m.Forward(x, true)
	dy := be.New(2, 1000)
	be.Fill(dy, 2)
	var g []float32
	m.Backward(dy, nil)
	g = dy.Data() // dropout's backward works in place
	for i := range g {
		if (a[i] == 0) != (g[i] == 0) {
			t.Fatalf("element %d: forward %g, backward %g", i, a[i], g[i])
		}
	}
}

func TestResNet18Shapes(t *testing.T) {
	t.Parallel()
	m, err := compute.NewModel("resnet18", compute.CPU(), 3, 1)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string][]int{}
	for _, p := range m.Params() {
		names[p.Name] = p.Shape
	}
	for n, want := range map[string][]int{
		"conv1.weight":                 {64, 1, 7, 7},
		"layer2.0.downsample.0.weight": {128, 64, 1, 1},
		"layer4.1.conv2.weight":        {512, 512, 3, 3},
		"fc.weight":                    {10, 512},
	} {
		if got := names[n]; len(got) != len(want) || got[0] != want[0] {
			t.Errorf("%s: shape %v, want %v", n, got, want)
		}
	}
	if len(m.Buffers()) != 2*20 {
		t.Errorf("%d buffers, want 40 (running mean and var of 20 batch norms)", len(m.Buffers()))
	}
	x := compute.CPU().New(3, 1, 28, 28)
	for i := range x.Data() {
		x.Data()[i] = float32(i%11) / 11
	}
	y := m.Forward(x, true)
	if y.Dim(0) != 3 || y.Dim(1) != 10 {
		t.Fatalf("output %v, want [3 10]", y.Shape())
	}
	loss := compute.NewCrossEntropy(compute.CPU(), 3, 10)
	loss.Forward(y, compute.HostTensor([]float32{1, 2, 3}, 3), true)
	m.Backward(loss.Grad(3), nil)
	var norm float64
	for _, v := range m.Params()[0].G.Data() {
		norm += float64(v) * float64(v)
	}
	if norm == 0 || math.IsNaN(norm) {
		t.Fatalf("stem gradient norm² %g", norm)
	}
}
