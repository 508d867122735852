package gpu

import (
	"fmt"
	"reflect"
	"unsafe"

	"github.com/tempotrain/tempotrain/compute"
)

// tensorHeader mirrors compute.Tensor, whose shape fields are unexported:
// compute has no constructor for a device tensor yet (its doc asks for one:
// compute.DeviceTensor(dev, shape...)). checkLayout makes any drift in
// compute.Tensor fail at start, loudly, instead of corrupting shapes.
type tensorHeader struct {
	dims [compute.MaxRank]int
	rank int
	host []float32
	Dev  uintptr
	Off  int
}

var layoutErr = checkLayout()

func checkLayout() error {
	want, got := reflect.TypeOf(tensorHeader{}), reflect.TypeOf(compute.Tensor{})
	if want.Size() != got.Size() || want.NumField() != got.NumField() {
		return fmt.Errorf("compute.Tensor has %d fields of %d bytes, the CUDA backend expects %d of %d",
			got.NumField(), got.Size(), want.NumField(), want.Size())
	}
	for i := 0; i < want.NumField(); i++ {
		w, g := want.Field(i), got.Field(i)
		if w.Name != g.Name || w.Offset != g.Offset || w.Type.String() != g.Type.String() {
			return fmt.Errorf("compute.Tensor field %d is %s %s at %d, the CUDA backend expects %s %s at %d",
				i, g.Name, g.Type, g.Offset, w.Name, w.Type, w.Offset)
		}
	}
	return nil
}

// deviceTensor returns a tensor of the given shape at device address dev.
func deviceTensor(dev uintptr, shape []int) compute.Tensor {
	if layoutErr != nil {
		panic("compute/cuda: " + layoutErr.Error())
	}
	if len(shape) > compute.MaxRank {
		panic(fmt.Sprintf("compute/cuda: shape %v: more than %d dimensions", shape, compute.MaxRank))
	}
	var t compute.Tensor
	h := (*tensorHeader)(unsafe.Pointer(&t))
	for i, d := range shape {
		if d < 0 {
			panic(fmt.Sprintf("compute/cuda: shape %v: negative dimension", shape))
		}
		h.dims[i] = d
	}
	h.rank = len(shape)
	h.Dev = dev
	return t
}

// LayoutError reports whether compute.Tensor still has the layout this
// package writes (nil: it has).
func LayoutError() error { return layoutErr }
