package compute

import (
	"fmt"
	"strings"
)

// MaxRank is the largest number of dimensions a Tensor has (NCHW).
const MaxRank = 4

// Tensor is a dense row-major float32 array owned by a Backend. It is a small
// value: copying it copies the header, not the data, so views (Reshape,
// Rows) cost no allocation.
type Tensor struct {
	dims [MaxRank]int
	rank int
	// host holds the elements of a tensor in host memory (the CPU backend).
	host []float32
	// Dev is the device address of element 0 for device backends; 0 for
	// host tensors. Views of device tensors offset it.
	Dev uintptr
	// Off is the element offset of a device view from Dev's allocation,
	// kept for backends that address memory by (buffer, offset).
	Off int
}

// HostTensor wraps host memory as a tensor of the given shape; data must hold
// exactly the product of the dimensions.
func HostTensor(data []float32, shape ...int) Tensor {
	var t Tensor
	t.setShape(shape)
	if len(data) != t.Len() {
		badShape(fmt.Sprintf("HostTensor of %d elements", len(data)), shape)
	}
	t.host = data
	return t
}

func (t *Tensor) setShape(shape []int) {
	if len(shape) > MaxRank {
		badShape("more than 4 dimensions", shape)
	}
	t.rank = len(shape)
	for i, d := range shape {
		if d < 0 {
			badShape("negative dimension", shape)
		}
		t.dims[i] = d
	}
}

// badShape panics with a copy of shape, so that shape itself does not escape
// and a caller's variadic shape stays on its stack.
func badShape(what string, shape []int) {
	panic(fmt.Sprintf("compute: shape %v: %s", append([]int(nil), shape...), what))
}

// Rank is the number of dimensions.
func (t Tensor) Rank() int { return t.rank }

// Dim returns dimension i.
func (t Tensor) Dim(i int) int { return t.dims[i] }

// Shape returns a copy of the dimensions.
func (t Tensor) Shape() []int { return append([]int(nil), t.dims[:t.rank]...) }

// Len is the number of elements.
func (t Tensor) Len() int {
	if t.rank == 0 {
		return 0
	}
	n := 1
	for _, d := range t.dims[:t.rank] {
		n *= d
	}
	return n
}

// IsZero reports whether t is the zero Tensor (no shape, no memory): how an
// optional argument says "not wanted".
func (t Tensor) IsZero() bool { return t.rank == 0 && t.host == nil && t.Dev == 0 }

// Data returns the elements of a host tensor (nil for a device tensor). The
// slice aliases the tensor.
func (t Tensor) Data() []float32 { return t.host }

// Reshape returns a view with another shape of the same number of elements.
func (t Tensor) Reshape(shape ...int) Tensor {
	v := t
	v.setShape(shape)
	if v.Len() != t.Len() {
		badShape(fmt.Sprintf("reshape of %v", t.Shape()), shape)
	}
	return v
}

// Rows returns the view of rows [i, j) along the first dimension.
func (t Tensor) Rows(i, j int) Tensor {
	if i < 0 || j < i || j > t.dims[0] {
		panic(fmt.Sprintf("compute: rows [%d, %d) of %v", i, j, t.Shape()))
	}
	row := t.Len() / max(t.dims[0], 1)
	return t.span(i*row, j*row, j-i)
}

// Flat returns the view of elements [i, j) as a 1-D tensor.
func (t Tensor) Flat(i, j int) Tensor {
	if i < 0 || j < i || j > t.Len() {
		panic(fmt.Sprintf("compute: elements [%d, %d) of %v", i, j, t.Shape()))
	}
	v := t.span(i, j, j-i)
	v.rank = 1
	return v
}

func (t Tensor) span(i, j, d0 int) Tensor {
	v := t
	v.dims[0] = d0
	if t.host != nil {
		v.host = t.host[i:j:j]
	} else if t.Dev != 0 {
		v.Dev = t.Dev + uintptr(i)*4
		v.Off = t.Off + i
	}
	return v
}

func (t Tensor) String() string {
	var b strings.Builder
	b.WriteString("Tensor")
	fmt.Fprint(&b, t.Shape())
	return b.String()
}
