package kern

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// The packed AVX-512 Linear against the float64 reference, at shapes that
// reach every edge: rows not a multiple of the kernel's 12 (tails of 4 or
// fewer, and of 5 to 11), columns not a multiple of the panel's 32 (fewer than 16, between
// 16 and 32), k split into blocks (a wide layer), no bias, no ReLU.
func TestLinearPacked(t *testing.T) {
	if !linearPacked(make([]float32, 1), make([]float32, 1), nil, make([]float32, 1), 1, 1, 1, false) {
		t.Skip("no AVX-512 on this processor: Linear uses OpenBLAS alone")
	}
	r := rand.New(rand.NewPCG(3, 3))
	for _, c := range []struct {
		n, in, out int
		bias, relu bool
	}{
		{1, 1, 1, true, false},
		{256, 784, 512, true, true}, // the mlp's fc1: k in blocks
		{256, 512, 256, true, true},
		{256, 256, 10, true, false},
		{50, 3136, 128, true, true}, // the cnn's fc1: a tail of 2 rows
		{61, 300, 50, false, true},  // a tail of 1 row, 18 columns in the last panel
		{13, 17, 7, true, false},
		{58, 129, 40, true, true},     // a tail of 10 rows
		{7, 64, 64, false, false},     // fewer rows than the kernel's
		{100, 5000, 33, false, false}, // k in blocks, 1 column in the last panel
		{4, 9, 16, true, true},
	} {
		t.Run(fmt.Sprintf("%dx%d→%d bias=%v relu=%v", c.n, c.in, c.out, c.bias, c.relu), func(t *testing.T) {
			x, w := randVec(r, c.n*c.in), randVec(r, c.out*c.in)
			var b []float64
			if c.bias {
				b = randVec(r, c.out)
			}
			want := make([]float64, c.n*c.out)
			Linear(x, w, b, want, c.n, c.in, c.out, c.relu)
			x32, w32, b32 := to32(x), to32(w), to32(b)
			got := make([]float32, c.n*c.out+1)
			got[len(got)-1] = 42 // past the end: must stay
			for i := range got[:c.n*c.out] {
				got[i] = float32(math.NaN()) // every element must be written
			}
			if !linearPacked(x32, w32, b32, got[:c.n*c.out], c.n, c.in, c.out, c.relu) {
				t.Fatal("linearPacked did not run")
			}
			// Packed once (PackLinear), run without packing: the same sums.
			pre := make([]float32, c.n*c.out)
			if !LinearPrepacked(x32, PackLinear(w32, c.in, c.out), b32, pre, c.n, c.in, c.out, c.relu) {
				t.Fatal("LinearPrepacked did not run")
			}
			for i := range pre {
				if pre[i] != got[i] {
					t.Fatalf("y[%d]: %v prepacked, %v packed per call", i, pre[i], got[i])
				}
			}
			if got[len(got)-1] != 42 {
				t.Fatalf("wrote past y's end: %v", got[len(got)-1])
			}
			// float32 sums of in products of unit normals: error grows as √in.
			tol := 1e-6 * math.Sqrt(float64(c.in)) * 8
			for i, v := range got[:c.n*c.out] {
				if d := math.Abs(float64(v) - want[i]); !(d <= tol*math.Max(1, math.Abs(want[i]))) {
					t.Fatalf("y[%d,%d] = %v, want %v (|Δ| %.3g > %.3g)", i/c.out, i%c.out, v, want[i], d, tol)
				}
			}
		})
	}
}

func to32(v []float64) []float32 {
	if v == nil {
		return nil
	}
	out := make([]float32, len(v))
	for i, x := range v {
		out[i] = float32(x)
	}
	return out
}

// Linear takes the packed kernel on one BLAS thread, OpenBLAS otherwise;
// both give the same product to float32 rounding.
func TestLinearPackedAndOpenBLASAgree(t *testing.T) {
	threads := Threads()
	defer SetThreads(threads)
	r := rand.New(rand.NewPCG(4, 4))
	n, in, out := 64, 784, 512
	x, w, b := to32(randVec(r, n*in)), to32(randVec(r, out*in)), to32(randVec(r, out))
	SetThreads(1)
	one := make([]float32, n*out)
	Linear(x, w, b, one, n, in, out, true)
	SetThreads(2)
	two := make([]float32, n*out)
	Linear(x, w, b, two, n, in, out, true)
	for i := range one {
		if d := math.Abs(float64(one[i] - two[i])); d > 1e-3*math.Max(1, math.Abs(float64(two[i]))) {
			t.Fatalf("y[%d]: %v on one thread, %v on two", i, one[i], two[i])
		}
	}
}
