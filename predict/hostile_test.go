package predict

import (
	"errors"
	"strings"
	"testing"
)

// Inputs that once killed or crashed the server (issue 30's rows 1, 8 and
// 9), each now a 400 naming what is wrong. The fuzz targets start from
// them (codec_test.go).

// row1Body is `{"parameters":` followed by 4 MiB of '[': skip recursed once
// a level and overflowed the goroutine stack, a fatal error no recover
// catches.
func row1Body() string { return `{"parameters":` + strings.Repeat("[", 4<<20) }

// row8Header declares 2^31 × 2^31 FP32 elements in 0 bytes of binary data:
// n*4 wrapped to 0, the size check passed, make panicked.
const row8Header = `{"inputs":[{"name":"x","datatype":"FP32","shape":[2147483648,2147483648],"parameters":{"binary_data_size":0}}]}`

// row9Shape × the 13,312 values present: 980375429087455·3·224·224 is
// 13,312 modulo 2^64, so Check's comparison passed and later allocations
// by the batch size panicked.
var row9Shape = []int{980375429087455, 3, 224, 224}

// TestDeepParametersRefused: row 1, values nested 4 Mi deep where the
// server skips them, is a 400-class error, not a stack overflow.
func TestDeepParametersRefused(t *testing.T) {
	_, err := decodeInfer([]byte(row1Body()), nil)
	if !errors.Is(err, ErrInvalidInput) || !strings.Contains(err.Error(), "values nested deeper than 64") {
		t.Fatalf("4 MiB of '[' in parameters: %v", err)
	}
	// 64 levels are still skipped, and so are values beside them.
	ok := `{"parameters":{"a":` + strings.Repeat("[", 63) + strings.Repeat("]", 63) + `,"b":{"c":[1,"x",null]}},"inputs":[]}`
	if _, err := decodeInfer([]byte(ok), nil); err != nil {
		t.Errorf("64 levels: %v", err)
	}
	deep := `{"inputs":[{"name":"a","parameters":{"p":` + strings.Repeat(`{"k":`, 100) + `1` + strings.Repeat("}", 100) + `}}]}`
	if _, err := decodeInfer([]byte(deep), nil); !errors.Is(err, ErrInvalidInput) || !strings.Contains(err.Error(), "nested deeper than 64") {
		t.Errorf("objects 100 deep in an input's parameters: %v", err)
	}
}

// TestBinaryShapeWrapRefused: row 8, a shape whose byte size wraps to the
// binary_data_size given, is refused before anything is allocated.
func TestBinaryShapeWrapRefused(t *testing.T) {
	_, err := decodeInfer([]byte(row8Header), []byte{})
	if !errors.Is(err, ErrInvalidInput) || !strings.Contains(err.Error(), `input "x": 0 bytes of binary data for shape [2147483648 2147483648] of FP32`) {
		t.Fatalf("row 8: %v", err)
	}
	// INT64: 2^61 elements of 8 bytes wrap to 0 as well.
	h := strings.NewReplacer("FP32", "INT64", "2147483648,2147483648", "2147483648,1073741824").Replace(row8Header)
	if _, err := decodeInfer([]byte(h), []byte{}); !errors.Is(err, ErrInvalidInput) {
		t.Errorf("INT64 2^61 elements in 0 bytes: %v", err)
	}
	// A shape that overflows an int altogether, and one with too many
	// dimensions.
	h = strings.Replace(row8Header, "2147483648,2147483648", "999999999999999,999999999999999", 1)
	if _, err := decodeInfer([]byte(h), []byte{}); !errors.Is(err, ErrInvalidInput) {
		t.Errorf("a shape past MaxInt: %v", err)
	}
	h = strings.Replace(row8Header, "2147483648,2147483648", strings.Repeat("1,", 64)+"1", 1)
	if _, err := decodeInfer([]byte(h), []byte{}); !errors.Is(err, ErrInvalidInput) || !strings.Contains(err.Error(), "more than 64 dimensions") {
		t.Errorf("65 dimensions: %v", err)
	}
}

// TestCheckShapeOverflowRefused: row 9, a shape whose element count wraps
// to the number of values present fails Check, naming the input; so do
// rows of no elements, which cost no bytes but size the outputs.
func TestCheckShapeOverflowRefused(t *testing.T) {
	specs := []TensorSpec{{Name: "pixels", Datatype: FP32, Shape: []int{-1, 3, 224, 224}}}
	in := Tensor{Name: "pixels", Datatype: FP32, Shape: row9Shape, FP32: make([]float32, 13312)}
	err := Check(specs, Batch{Inputs: []Tensor{in}})
	if !errors.Is(err, ErrInvalidInput) || !strings.Contains(err.Error(), `input "pixels" has shape [980375429087455 3 224 224], whose number of elements does not fit an int`) {
		t.Fatalf("row 9: %v", err)
	}
	if in.Len() != -1 {
		t.Errorf("Len of row 9's shape: %d, want -1", in.Len())
	}
	// And through the decoder, as the server sees it.
	body := `{"inputs":[{"name":"pixels","datatype":"FP32","shape":[980375429087455,3,224,224],"data":[` + strings.Repeat("0,", 13311) + `0]}]}`
	req, err := decodeInfer([]byte(body), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := Check(specs, req.batch); !errors.Is(err, ErrInvalidInput) {
		t.Errorf("row 9 decoded: Check says %v", err)
	}
	empty := Tensor{Name: "x", Datatype: FP32, Shape: []int{1 << 40, 0}}
	specs = []TensorSpec{{Name: "x", Datatype: FP32, Shape: []int{-1, -1}}}
	if err := Check(specs, Batch{Inputs: []Tensor{empty}}); !errors.Is(err, ErrInvalidInput) || !strings.Contains(err.Error(), "1099511627776 rows of no elements") {
		t.Errorf("2^40 rows of nothing: %v", err)
	}
	// An empty batch is still fine.
	empty.Shape = []int{0, 5}
	if err := Check(specs, Batch{Inputs: []Tensor{empty}}); err != nil {
		t.Errorf("an empty batch: %v", err)
	}
}
