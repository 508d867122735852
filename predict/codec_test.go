package predict

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// TestDecodeInfer: flat and nested data, keys in any order, every datatype,
// escapes, null id, parameters skipped, requested outputs.
func TestDecodeInfer(t *testing.T) {
	body := `{
	  "parameters": {"binary_data_output": false, "nested": [1, {"a": null}]},
	  "inputs": [
	    {"data": [[1, 2.5, -3e2], [1e-3, 0, 16777217]], "name": "x", "shape": [2, 3], "datatype": "FP32"},
	    {"name": "ids", "datatype": "INT64", "shape": [2], "parameters": {}, "data": [-9007199254740993, 42]},
	    {"name": "t\u00e9xt", "datatype": "BYTES", "shape": [2, 1], "data": [["a\"b\\n"], ["\u00e9\n"]]}
	  ],
	  "id": "r\u002d1",
	  "outputs": [{"name": "y", "parameters": {"binary_data": true}}, {"name": "z"}]
	}`
	req, err := decodeInfer([]byte(body), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := &inferRequest{id: "r-1", hasID: true, outputs: []string{"y", "z"}, batch: Batch{Inputs: []Tensor{
		{Name: "x", Datatype: FP32, Shape: []int{2, 3}, FP32: []float32{1, 2.5, -300, 1e-3, 0, 16777216}},
		{Name: "ids", Datatype: INT64, Shape: []int{2}, INT64: []int64{-9007199254740993, 42}},
		{Name: "téxt", Datatype: BYTES, Shape: []int{2, 1}, Bytes: []string{`a"b\n`, "é\n"}},
	}}}
	if !reflect.DeepEqual(req, want) {
		t.Errorf("got  %+v\nwant %+v", req, want)
	}
	req, err = decodeInfer([]byte(`{"id": null, "inputs": [], "outputs": []}`), nil)
	if err != nil || req.hasID || req.outputs != nil || len(req.batch.Inputs) != 0 {
		t.Errorf("%+v %v", req, err)
	}
}

// TestDecodeInferErrors: every malformed request is ErrInvalidInput with a
// message that says what and, where there is one, names the input.
func TestDecodeInferErrors(t *testing.T) {
	for _, tt := range []struct{ body, want string }{
		{``, "malformed JSON: expected '{' at the end of the body"},
		{`[]`, `malformed JSON: expected '{' at byte 0`},
		{`{"inputs": [}`, `malformed JSON`},
		{`{"inputs": []} x`, `data after the request object`},
		{`{"id": 3, "inputs": []}`, `"id" must be a string`},
		{`{}`, `the request has no "inputs"`},
		{`{"inputs": [{"shape": [1], "datatype": "FP32", "data": [1]}]}`, `input 0 has no "name"`},
		{`{"inputs": [{"name": "a", "shape": [1], "data": [1]}]}`, `input "a" has no "datatype"`},
		{`{"inputs": [{"name": "a", "datatype": "FP32", "data": [1]}]}`, `input "a" has no "shape"`},
		{`{"inputs": [{"name": "a", "datatype": "FP32", "shape": [1]}]}`, `input "a" has no "data"`},
		{`{"inputs": [{"name": "a", "datatype": "FP32", "shape": [1, -1], "data": [1]}]}`, `input "a": shape must be a list of non-negative integers`},
		{`{"inputs": [{"name": "a", "datatype": "FP32", "shape": [1], "data": 1}]}`, `input "a": "data" must be an array`},
		{`{"inputs": [{"name": "a", "datatype": "FP32", "shape": [2], "data": [1, true]}]}`, `input "a": data element 1 (true]}]}) is not an FP32 number`},
		{`{"inputs": [{"name": "a", "datatype": "FP32", "shape": [1], "data": [1e99]}]}`, `input "a": data element 0 (1e99) is not an FP32 number`},
		{`{"inputs": [{"data": [1, "x"], "name": "a", "datatype": "FP32", "shape": [2]}]}`, `input "a": data element 1`},
		{`{"inputs": [{"name": "a", "datatype": "INT64", "shape": [2], "data": [1, 2.5]}]}`, `input "a": data element 1 (2.5) is not an INT64 integer`},
		{`{"inputs": [{"name": "a", "datatype": "BYTES", "shape": [1], "data": [1]}]}`, `input "a": data element 0 (1]}]}) is not a string`},
		{`{"inputs": [{"name": "a", "datatype": "FP16", "shape": [1], "data": [1]}]}`, `input "a" has datatype "FP16"; this server reads FP32, INT64 and BYTES`},
		{`{"inputs": [{"name": "a", "datatype": "FP32", "shape": [1], "data": [1]}, {"name": "a", "datatype": "FP32", "shape": [1], "data": [1]}]}`, `input "a" given twice`},
		{`{"inputs": [{"name": "a", "datatype": "FP32", "shape": [1], "data": ` + strings.Repeat("[", 40) + `1` + strings.Repeat("]", 40) + `}]}`, `nested deeper than 32`},
		{`{"inputs": [{"name": "a` + "\x01" + `", "datatype": "FP32", "shape": [1], "data": [1]}]}`, `control character in a string`},
		{`{"inputs": [{"name": "a\q", "datatype": "FP32", "shape": [1], "data": [1]}]}`, `bad string escape`},
	} {
		_, err := decodeInfer([]byte(tt.body), nil)
		if !errors.Is(err, ErrInvalidInput) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s:\n  %v\n  want ErrInvalidInput saying %s", tt.body, err, tt.want)
		}
	}
}

// TestInferResponse: the response is valid JSON that round-trips every
// float32 exactly; NaN cannot be written.
func TestInferResponse(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	fp := make([]float32, 1000)
	for i := range fp {
		fp[i] = float32(r.NormFloat64() * math.Pow(10, float64(r.IntN(60)-30)))
	}
	fp[0], fp[1] = math.MaxFloat32, math.SmallestNonzeroFloat32
	outs := []Tensor{
		{Name: "p", Datatype: FP32, Shape: []int{100, 10}, FP32: fp},
		{Name: "c", Datatype: INT64, Shape: []int{2}, INT64: []int64{math.MinInt64, 7}},
		{Name: "s", Datatype: BYTES, Shape: []int{2}, Bytes: []string{"plain", "quote\" é \x00"}},
	}
	buf, err := appendInferResponse(nil, "m\"odel", "3", &inferRequest{id: "x", hasID: true}, outs)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		ModelName    string `json:"model_name"`
		ModelVersion string `json:"model_version"`
		ID           string `json:"id"`
		Outputs      []struct {
			Name     string
			Datatype string
			Shape    []int
			Data     json.RawMessage
		}
	}
	if err := json.Unmarshal(buf, &got); err != nil {
		t.Fatalf("%v: %.200s", err, buf)
	}
	var p []float32
	var c []int64
	var s []string
	json.Unmarshal(got.Outputs[0].Data, &p)
	json.Unmarshal(got.Outputs[1].Data, &c)
	json.Unmarshal(got.Outputs[2].Data, &s)
	if got.ModelName != `m"odel` || got.ModelVersion != "3" || got.ID != "x" || !reflect.DeepEqual(p, fp) ||
		!reflect.DeepEqual(c, outs[1].INT64) || !reflect.DeepEqual(s, outs[2].Bytes) || fmt.Sprint(got.Outputs[0].Shape) != "[100 10]" {
		t.Errorf("round trip: %.300s", buf)
	}
	if buf, _ := appendInferResponse(nil, "m", "1", &inferRequest{}, nil); string(buf) != `{"model_name":"m","model_version":"1","outputs":[]}` {
		t.Errorf("no outputs, no id: %s", buf)
	}
	outs[0].FP32[5] = float32(math.NaN())
	if _, err := appendInferResponse(nil, "m", "1", &inferRequest{}, outs); err == nil || !strings.Contains(err.Error(), `output "p" element 5 is NaN`) {
		t.Errorf("NaN: %v", err)
	}
}

// FuzzDecodeInfer: the decoder never panics, its errors are
// ErrInvalidInput, and the numbers it reads from valid JSON are those
// encoding/json reads.
func FuzzDecodeInfer(f *testing.F) {
	f.Add(`{"inputs":[{"name":"a","datatype":"FP32","shape":[2],"data":[1.5,[2]]}]}`)
	f.Add(`{"inputs":[{"data":[[1e3,-0.25]],"name":"a","datatype":"FP32","shape":[2]}]}`)
	f.Add(`{"inputs":[{"name":"a","datatype":"INT64","shape":[1],"data":[-7]}],"id":"\u0041"}`)
	f.Add(`{"inputs":[{"name":"a","datatype":"BYTES","shape":[1],"data":["\ud83d\ude00"]}],"outputs":[{"name":"o"}]}`)
	// Issue 30's rows 1 and 9, short (large seeds slow every execution
	// and the minimizing of what they lead to; hostile_test.go has them
	// whole): 4096 levels nest past the bound as 4 Mi do; row 9's shape
	// with one value, and 2^48 × 2^16, whose product wraps to the 0 values
	// given as row 9's wraps to its 13,312.
	f.Add(`{"parameters":` + strings.Repeat("[", 4096))
	f.Add(`{"inputs":[{"name":"pixels","datatype":"FP32","shape":[980375429087455,3,224,224],"data":[0]}]}`)
	f.Add(`{"inputs":[{"name":"x","datatype":"FP32","shape":[281474976710656,65536],"data":[]}]}`)
	f.Add(`{"inputs":[{"name":"x","datatype":"INT64","shape":[1099511627776,0],"data":[]}]}`)
	f.Fuzz(func(t *testing.T, body string) {
		req, err := decodeInfer([]byte(body), nil)
		if err != nil {
			if !errors.Is(err, ErrInvalidInput) {
				t.Fatalf("error not ErrInvalidInput: %v", err)
			}
			return
		}
		checkDecoded(t, req)
		var std struct {
			Inputs []struct {
				Data any `json:"data"`
			} `json:"inputs"`
		}
		dec := json.NewDecoder(strings.NewReader(body))
		dec.UseNumber()
		if dec.Decode(&std) != nil || len(std.Inputs) != len(req.batch.Inputs) {
			return // duplicate keys, lenient numbers: nothing to compare
		}
		for i, in := range req.batch.Inputs {
			var leaves []string
			var walk func(v any)
			walk = func(v any) {
				switch v := v.(type) {
				case []any:
					for _, e := range v {
						walk(e)
					}
				case json.Number:
					leaves = append(leaves, string(v))
				}
			}
			walk(std.Inputs[i].Data)
			n := max(len(in.FP32), len(in.INT64))
			if in.Datatype != BYTES && n != len(leaves) {
				t.Fatalf("input %d: %d elements, encoding/json reads %v", i, n, leaves)
			}
			for j, v := range in.FP32 {
				if f, _ := strconv.ParseFloat(leaves[j], 32); v != float32(f) {
					t.Fatalf("input %d element %d: %v, encoding/json reads %s", i, j, v, leaves[j])
				}
			}
			for j, v := range in.INT64 {
				if w, _ := strconv.ParseInt(leaves[j], 10, 64); v != w {
					t.Fatalf("input %d element %d: %v, encoding/json reads %s", i, j, v, leaves[j])
				}
			}
		}
	})
}

// checkDecoded: every input of a decoded request either fails Check (as
// the model's spec, its shape all -1, sees it) with ErrInvalidInput, or
// holds the elements its shape says, and its batch size is bounded by them.
func checkDecoded(t *testing.T, req *inferRequest) {
	for _, in := range req.batch.Inputs {
		spec := TensorSpec{Name: in.Name, Datatype: in.Datatype, Shape: make([]int, len(in.Shape))}
		for i := range spec.Shape {
			spec.Shape[i] = -1
		}
		err := Check([]TensorSpec{spec}, Batch{Inputs: []Tensor{in}})
		if err != nil {
			if !errors.Is(err, ErrInvalidInput) {
				t.Fatalf("input %q: Check error not ErrInvalidInput: %v", in.Name, err)
			}
			continue
		}
		if n := in.dataLen(); n != in.Len() || in.Rows() > n {
			t.Fatalf("input %q passes Check with shape %v (Len %d) and %d elements", in.Name, in.Shape, in.Len(), n)
		}
	}
}

// FuzzDecodeInferBinary: requests in the binary tensor data extension as the
// server splits them (the first hlen bytes of the body JSON, the rest the
// inputs' bytes) decode or fail with ErrInvalidInput, never panic, and what
// they decode passes Check only with the elements its shape says.
func FuzzDecodeInferBinary(f *testing.F) {
	add := func(header string, bin []byte) {
		f.Add(uint32(len(header)), append([]byte(header), bin...))
	}
	le := func(vals ...uint64) (b []byte) {
		for _, v := range vals {
			b = binary.LittleEndian.AppendUint32(b, uint32(v))
		}
		return b
	}
	add(`{"inputs":[{"name":"x","datatype":"FP32","shape":[2,2],"parameters":{"binary_data_size":16}},`+
		`{"name":"t","datatype":"INT64","shape":[2],"parameters":{"binary_data_size":16}}],"outputs":[{"name":"y"}]}`,
		append(le(0x3f800000, 0x40000000, 0xbf800000, 0), binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64(nil, 7), 1<<63)...))
	add(`{"inputs":[{"name":"s","datatype":"BYTES","shape":[2],"parameters":{"binary_data_size":11}}]}`,
		append(append(le(3), "abc"...), le(0)...))
	add(`{"inputs":[{"name":"x","datatype":"FP32","shape":[1],"data":[1]},{"name":"y","datatype":"FP32","shape":[1],"parameters":{"binary_data_size":4}}]}`, le(0x7fc00000))
	// Issue 30's rows 8 and 9 in binary (row 9 as in FuzzDecodeInfer).
	add(row8Header, nil)
	add(`{"inputs":[{"name":"x","datatype":"INT64","shape":[281474976710656,65536],"parameters":{"binary_data_size":0}}]}`, nil)
	add(`{"inputs":[{"name":"pixels","datatype":"FP32","shape":[980375429087455,3,224,224],"parameters":{"binary_data_size":4}}]}`, le(0))
	f.Fuzz(func(t *testing.T, hlen uint32, body []byte) {
		n := min(int(hlen), len(body))
		req, err := decodeInfer(body[:n], body[n:])
		if err != nil {
			if !errors.Is(err, ErrInvalidInput) {
				t.Fatalf("error not ErrInvalidInput: %v", err)
			}
			return
		}
		checkDecoded(t, req)
	})
}

// imagesRequest is a request of n 28×28 images with values 0..255, nested
// as [n][1][28][28] or flat.
func imagesRequest(n int, nested bool) []byte {
	r := rand.New(rand.NewPCG(3, 4))
	px := make([]float32, n*784)
	for i := range px {
		if r.IntN(2) == 0 { // Fashion-MNIST is about half zeros
			px[i] = float32(r.IntN(256))
		}
	}
	var data any = px
	if nested {
		x := make([][][][]float32, n)
		for i := range x {
			x[i] = [][][]float32{make([][]float32, 28)}
			for j := range 28 {
				x[i][0][j] = px[i*784+j*28 : i*784+(j+1)*28]
			}
		}
		data = x
	}
	b, _ := json.Marshal(map[string]any{"id": "1", "inputs": []map[string]any{{"name": "pixels", "datatype": "FP32", "shape": []int{n, 1, 28, 28}, "data": data}}})
	return b
}

// BenchmarkDecodeInfer compares the decoder with encoding/json for requests
// of 1 and 64 Fashion-MNIST images: into a struct with []float32 data (flat
// data only) and into []any (what nested data would need).
func BenchmarkDecodeInfer(b *testing.B) {
	type jsonInput struct {
		Name     string    `json:"name"`
		Datatype string    `json:"datatype"`
		Shape    []int     `json:"shape"`
		Data     []float32 `json:"data"`
	}
	type jsonRequest struct {
		ID     string      `json:"id"`
		Inputs []jsonInput `json:"inputs"`
	}
	for _, n := range []int{1, 64} {
		flat, nested := imagesRequest(n, false), imagesRequest(n, true)
		run := func(name string, body []byte, decode func([]byte) error) {
			b.Run(fmt.Sprintf("%s/images=%d", name, n), func(b *testing.B) {
				b.SetBytes(int64(len(body)))
				b.ReportAllocs()
				for b.Loop() {
					if err := decode(body); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
		ours := func(body []byte) error { _, err := decodeInfer(body, nil); return err }
		run("ours-flat", flat, ours)
		run("ours-nested", nested, ours)
		run("encoding-json-flat", flat, func(body []byte) error {
			var r jsonRequest
			return json.Unmarshal(body, &r)
		})
		run("encoding-json-any-nested", nested, func(body []byte) error {
			var r map[string]any
			return json.Unmarshal(body, &r)
		})
	}
}

// BenchmarkInferResponse writes the mnist classifier's response to 64
// images.
func BenchmarkInferResponse(b *testing.B) {
	r := rand.New(rand.NewPCG(5, 6))
	p := make([]float32, 640)
	for i := range p {
		p[i] = r.Float32()
	}
	outs := []Tensor{{Name: "probabilities", Datatype: FP32, Shape: []int{64, 10}, FP32: p},
		{Name: "class", Datatype: INT64, Shape: []int{64}, INT64: make([]int64, 64)}}
	var buf []byte
	b.ReportAllocs()
	for b.Loop() {
		buf, _ = appendInferResponse(buf[:0], "mnist-mlp", "1", &inferRequest{}, outs)
	}
	b.SetBytes(int64(len(buf)))
}
