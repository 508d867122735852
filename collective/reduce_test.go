package collective

import (
	"bytes"
	"fmt"
	"testing"
)

// The vector kernels against the plain loops, for every length up to a few
// vector iterations and at unaligned starts.
func TestReduceKernelsMatchPlainLoops(t *testing.T) {
	t.Parallel()
	for off := range 3 {
		for n := range 200 {
			checkKernels[float32](t, off, n, addFloat32, divFloat32)
			checkKernels[float64](t, off, n, addFloat64, divFloat64)
			checkSum[float32](t, off, n, addFloat32, sumFloat32)
			checkSum[float64](t, off, n, addFloat64, sumFloat64)
		}
	}
}

// copy2 fills both outputs, for every length around the vector loop's.
func TestCopy2(t *testing.T) {
	t.Parallel()
	for n := range 600 {
		src := make([]byte, n+3)
		for i := range src {
			src[i] = byte(i*7 + 1)
		}
		dst, out := make([]byte, n+3), make([]byte, n+3)
		copy2(dst[1:n+1], out[2:n+2], src[3:n+3])
		if !bytes.Equal(dst[1:n+1], src[3:n+3]) || !bytes.Equal(out[2:n+2], src[3:n+3]) || dst[0] != 0 || out[n+2] != 0 {
			t.Fatalf("copy2 of %d bytes: wrong bytes or out of bounds", n)
		}
	}
}

// The three-operand sum gives the bits the in-place add gives, and writes
// only its output.
func checkSum[T float](t *testing.T, off, n int, add func(dst, src []T), sum func(out, a, b []T)) {
	t.Helper()
	a, b, out := make([]T, off+n+1), make([]T, off+n+1), make([]T, off+n+1)
	for i := range a {
		a[i], b[i], out[i] = T(i)*0.37-5, T(i*i)*0.11+1, -7
	}
	want := append([]T(nil), a...)
	add(want[off:off+n], b[off:off+n])
	sum(out[off:off+n], a[off:off+n], b[off:off+n])
	for i := range out {
		w := want[i]
		if i < off || i >= off+n {
			w = -7
		}
		if out[i] != w {
			t.Fatalf("%T sum off %d len %d: [%d] = %v, want %v", T(0), off, n, i, out[i], w)
		}
		if i >= off && i < off+n && a[i] != T(i)*0.37-5 {
			t.Fatalf("%T sum off %d len %d: wrote its input a[%d]", T(0), off, n, i)
		}
	}
}

func checkKernels[T float](t *testing.T, off, n int, add func(dst, src []T), div func([]T, T)) {
	t.Helper()
	dst, src := make([]T, off+n+1), make([]T, off+n+1)
	want := make([]T, off+n+1)
	for i := range dst {
		dst[i], src[i] = T(i)*0.37-5, T(i*i)*0.11+1
		want[i] = dst[i]
	}
	for i := off; i < off+n; i++ {
		want[i] = (want[i] + src[i]) / 3
	}
	add(dst[off:off+n], src[off:off+n])
	div(dst[off:off+n], 3)
	for i := range dst {
		if dst[i] != want[i] {
			t.Fatalf("%T off %d len %d: [%d] = %v, want %v", T(0), off, n, i, dst[i], want[i])
		}
	}
}

func addFloat32Plain(dst, src []float32) {
	for i := range dst {
		dst[i] += src[i]
	}
}

// benchAdd measures a kernel on one default segment, the size the ring
// reduces at a time (it stays in cache, as in the ring).
func benchAdd(b *testing.B, add func(dst, src []float32)) {
	dst, src := make([]float32, DefaultSegmentBytes/4), make([]float32, DefaultSegmentBytes/4)
	b.SetBytes(DefaultSegmentBytes)
	for b.Loop() {
		add(dst, src)
	}
}

func BenchmarkAddFloat32(b *testing.B) {
	for _, k := range []struct {
		name string
		f    func(dst, src []float32)
	}{
		{"Plain", addFloat32Plain},
		{"Unrolled", addFloat32Go},
		{"Dispatch", addFloat32},
	} {
		b.Run(fmt.Sprintf("%s1MiB", k.name), func(b *testing.B) { benchAdd(b, k.f) })
	}
}
