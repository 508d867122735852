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

// Gemm's AVX-512 path against float64 Gemm (OpenBLAS dgemm) in every
// transpose, with beta 0 and 1, row strides wider than the rows, and the
// edges of TestLinearPacked.
func TestGemmPacked(t *testing.T) {
	if !sgemmPacked(false, false, 1, 1, 1, make([]float32, 1), 1, make([]float32, 1), 1, false, make([]float32, 1), 1) {
		t.Skip("no AVX-512 on this processor: Gemm uses OpenBLAS alone")
	}
	r := rand.New(rand.NewPCG(6, 6))
	for _, s := range []struct{ m, n, k int }{{48, 32, 16}, {61, 50, 300}, {64, 288, 196}, {288, 196, 64}, {512, 784, 128}, {50, 33, 5000}, {1, 1, 1}, {13, 7, 17}} {
		for _, tr := range [][2]bool{{false, false}, {false, true}, {true, false}, {true, true}} {
			for _, beta := range []float64{0, 1} {
				ta, tb := tr[0], tr[1]
				t.Run(fmt.Sprintf("%dx%dx%d ta=%v tb=%v beta=%v", s.m, s.n, s.k, ta, tb, beta), func(t *testing.T) {
					// Row strides 3 wider than needed.
					rowsA, colsA := s.m, s.k
					if ta {
						rowsA, colsA = s.k, s.m
					}
					rowsB, colsB := s.k, s.n
					if tb {
						rowsB, colsB = s.n, s.k
					}
					lda, ldb, ldc := colsA+3, colsB+3, s.n+3
					a, b, c := randVec(r, rowsA*lda), randVec(r, rowsB*ldb), randVec(r, s.m*ldc)
					want := append([]float64(nil), c...)
					Gemm(ta, tb, s.m, s.n, s.k, 1, a, lda, b, ldb, beta, want, ldc)
					got := to32(c)
					if !sgemmPacked(ta, tb, s.m, s.n, s.k, to32(a), lda, to32(b), ldb, beta == 1, got, ldc) {
						t.Fatal("sgemmPacked did not run")
					}
					tol := 1e-6 * math.Sqrt(float64(s.k)) * 8
					for i := range s.m {
						for j := range ldc {
							g, w := float64(got[i*ldc+j]), want[i*ldc+j]
							if j >= s.n {
								w = float64(float32(c[i*ldc+j])) // past the row: untouched
							}
							if d := math.Abs(g - w); !(d <= tol*math.Max(1, math.Abs(w))) {
								t.Fatalf("c[%d,%d] = %v, want %v", i, j, g, w)
							}
						}
					}
				})
			}
		}
	}
}
