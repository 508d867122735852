package compute_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/tempotrain/tempotrain/compute"
)

// A frozen model predicts what it did before Freeze, at batch sizes on both
// sides of the kernel's row tile; Load and a training forward undo Freeze, so
// that new parameters are never shadowed by the weights packed before.
func TestFreeze(t *testing.T) {
	be := compute.CPU()
	m, err := compute.NewModel("mlp", be, 64, 1)
	if err != nil {
		t.Fatal(err)
	}
	other, err := compute.NewModel("mlp", be, 64, 2)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(5, 5))
	px := make([]float32, 64*784)
	for i := range px {
		px[i] = r.Float32()*2 - 1
	}
	forward := func(m *compute.Model, n int) []float32 {
		x := be.New(n, 1, 28, 28)
		be.Upload(x, px[:n*784])
		return m.Forward(x, false).Data()
	}
	near := func(name string, got, want []float32) {
		t.Helper()
		for i := range want {
			if d := math.Abs(float64(got[i] - want[i])); d > 1e-4*math.Max(1, math.Abs(float64(want[i]))) {
				t.Fatalf("%s: output %d is %v, want %v", name, i, got[i], want[i])
			}
		}
	}
	for _, n := range []int{1, 5, 13, 64} {
		want := forward(m, n)
		m.Freeze()
		near("frozen", forward(m, n), want)
		m.Unfreeze()
	}

	// Load: the loaded parameters count, not the packed ones.
	st := compute.NewState()
	other.Save(st)
	wantOther := forward(other, 7)
	m.Freeze()
	if err := m.Load(st); err != nil {
		t.Fatal(err)
	}
	near("frozen, then loaded", forward(m, 7), wantOther)

	// A training forward: the step after it changes the weights.
	m.Freeze()
	x := be.New(7, 1, 28, 28)
	be.Upload(x, px[:7*784])
	m.Forward(x, true)
	p := m.P.Data()
	for i := range p {
		p[i] *= 0.5
	}
	be.Upload(m.P, p)
	if err := other.Load(st); err != nil {
		t.Fatal(err)
	}
	q := other.P.Data()
	for i := range q {
		q[i] = p[i]
	}
	be.Upload(other.P, q)
	near("frozen, then trained", forward(m, 7), forward(other, 7))
}
