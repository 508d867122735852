package predict

// The JSON of the Open Inference Protocol's inference request and response,
// read and written by hand: a request is mostly one long array of numbers,
// and encoding/json's reflection (into []any for nested data, or even into
// []float32) costs several times what the scan below does (see
// BenchmarkDecodeInfer in codec_test.go).

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"
	"unsafe"
)

// inferRequest is a decoded POST /v2/models/{name}/infer body.
type inferRequest struct {
	id    string
	hasID bool
	batch Batch
	// outputs are the names of the requested outputs; nil is all of them.
	outputs []string
}

// Bounds of what a request may declare, checked before anything is
// allocated for it.
const (
	// maxNesting bounds how deeply data arrays may nest.
	maxNesting = 32
	// maxSkipDepth bounds how deeply values the server does not read
	// ("parameters", unknown keys) may nest: skip recurses once a level.
	maxSkipDepth = 64
	// maxDims bounds the dimensions of an input's shape.
	maxDims = 64
)

// decoder scans one JSON document in b.
type decoder struct {
	b []byte
	i int
	// bin is the binary section of a request that uses the binary tensor
	// data extension (after Inference-Header-Content-Length bytes of
	// JSON); binOff is how much of it the inputs read so far.
	bin    []byte
	binOff int
}

// syntaxErr is a malformed body: ErrInvalidInput, with the byte offset.
func (d *decoder) syntaxErr(what string) error {
	if d.i >= len(d.b) {
		return fmt.Errorf("%w: malformed JSON: %s at the end of the body", ErrInvalidInput, what)
	}
	return fmt.Errorf("%w: malformed JSON: %s at byte %d (%q)", ErrInvalidInput, what, d.i, d.b[d.i])
}

func (d *decoder) ws() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

// peek returns the next non-space byte (0 at the end).
func (d *decoder) peek() byte {
	d.ws()
	if d.i >= len(d.b) {
		return 0
	}
	return d.b[d.i]
}

func (d *decoder) expect(c byte) error {
	if d.peek() != c {
		return d.syntaxErr(fmt.Sprintf("expected %q", c))
	}
	d.i++
	return nil
}

// object calls field for each key of the object that starts here; field
// consumes the value. key is only valid during the call.
func (d *decoder) object(field func(key []byte) error) error {
	if err := d.expect('{'); err != nil {
		return err
	}
	if d.peek() == '}' {
		d.i++
		return nil
	}
	for {
		if d.peek() != '"' {
			return d.syntaxErr("expected a key")
		}
		key, err := d.rawString()
		if err != nil {
			return err
		}
		if err := d.expect(':'); err != nil {
			return err
		}
		if err := field(key); err != nil {
			return err
		}
		switch d.peek() {
		case ',':
			d.i++
		case '}':
			d.i++
			return nil
		default:
			return d.syntaxErr("expected ',' or '}'")
		}
	}
}

// array calls elem for each element of the array that starts here; elem
// consumes the element.
func (d *decoder) array(elem func() error) error {
	if err := d.expect('['); err != nil {
		return err
	}
	if d.peek() == ']' {
		d.i++
		return nil
	}
	for {
		d.ws()
		if err := elem(); err != nil {
			return err
		}
		switch d.peek() {
		case ',':
			d.i++
		case ']':
			d.i++
			return nil
		default:
			return d.syntaxErr("expected ',' or ']'")
		}
	}
}

// rawString returns the string that starts here, unescaped. Without escapes
// it aliases d.b; with them it is a new slice.
func (d *decoder) rawString() ([]byte, error) {
	start := d.i
	d.i++ // the opening quote
	escaped := false
	for d.i < len(d.b) {
		switch c := d.b[d.i]; {
		case c == '"':
			d.i++
			if !escaped {
				return d.b[start+1 : d.i-1], nil
			}
			var s string
			if err := json.Unmarshal(d.b[start:d.i], &s); err != nil {
				d.i = start
				return nil, d.syntaxErr("bad string escape")
			}
			return []byte(s), nil
		case c == '\\':
			escaped = true
			d.i += 2
		case c < 0x20:
			return nil, d.syntaxErr("control character in a string")
		default:
			d.i++
		}
	}
	return nil, d.syntaxErr("unterminated string")
}

func (d *decoder) str(what string) (string, error) {
	if d.peek() != '"' {
		return "", d.syntaxErr(what + " must be a string")
	}
	s, err := d.rawString()
	return string(s), err
}

// number returns the number token that starts here (not validated beyond
// its characters: the parsers that read it are).
func (d *decoder) number() []byte {
	start := d.i
	for d.i < len(d.b) {
		switch c := d.b[d.i]; {
		case c >= '0' && c <= '9', c == '-', c == '+', c == '.', c == 'e', c == 'E':
			d.i++
		default:
			return d.b[start:d.i]
		}
	}
	return d.b[start:d.i]
}

// skip consumes any value, nested at most maxSkipDepth deep.
func (d *decoder) skip() error { return d.skipDepth(0) }

func (d *decoder) skipDepth(depth int) error {
	switch c := d.peek(); {
	case c == '{' || c == '[':
		if depth >= maxSkipDepth {
			return d.syntaxErr(fmt.Sprintf("values nested deeper than %d", maxSkipDepth))
		}
		inner := func() error { return d.skipDepth(depth + 1) }
		if c == '[' {
			return d.array(inner)
		}
		return d.object(func([]byte) error { return inner() })
	case c == '"':
		_, err := d.rawString()
		return err
	case c == '-' || c >= '0' && c <= '9':
		if len(d.number()) == 0 {
			return d.syntaxErr("bad number")
		}
		return nil
	default:
		for _, lit := range []string{"true", "false", "null"} {
			if len(d.b)-d.i >= len(lit) && string(d.b[d.i:d.i+len(lit)]) == lit {
				d.i += len(lit)
				return nil
			}
		}
		return d.syntaxErr("expected a value")
	}
}

// flat calls elem for every leaf of the (possibly nested) array that starts
// here, in row-major order.
func (d *decoder) flat(depth int, elem func() error) error {
	if depth > maxNesting {
		return d.syntaxErr(fmt.Sprintf("arrays nested deeper than %d", maxNesting))
	}
	return d.array(func() error {
		if d.peek() == '[' {
			return d.flat(depth+1, elem)
		}
		return elem()
	})
}

// bstr is b as a string without a copy, for the strconv parsers (which do
// not keep it).
func bstr(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

// smallInt parses an optionally negative run of at most 15 digits; ok false
// for anything else.
func smallInt(tok []byte) (v int64, ok bool) {
	neg := false
	if len(tok) > 0 && tok[0] == '-' {
		neg, tok = true, tok[1:]
	}
	if len(tok) == 0 || len(tok) > 15 {
		return 0, false
	}
	for _, c := range tok {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + int64(c-'0')
	}
	if neg {
		v = -v
	}
	return v, true
}

// decodeInfer reads an inference request: body is its JSON, bin the binary
// section of the binary tensor data extension (nil without it). Errors are
// ErrInvalidInput and name the input they are about.
func decodeInfer(body, bin []byte) (*inferRequest, error) {
	d := &decoder{b: body, bin: bin}
	req := &inferRequest{}
	seenInputs := false
	err := d.object(func(key []byte) error {
		switch string(key) {
		case "id":
			if d.peek() == 'n' { // null
				return d.skip()
			}
			s, err := d.str(`"id"`)
			req.id, req.hasID = s, true
			return err
		case "inputs":
			seenInputs = true
			return d.array(func() error {
				t, err := d.input(len(req.batch.Inputs))
				if err != nil {
					return err
				}
				for _, o := range req.batch.Inputs {
					if o.Name == t.Name {
						return fmt.Errorf("%w: input %q given twice", ErrInvalidInput, t.Name)
					}
				}
				req.batch.Inputs = append(req.batch.Inputs, t)
				return nil
			})
		case "outputs": // none listed is all of them
			return d.array(func() error {
				return d.object(func(key []byte) error {
					if string(key) != "name" {
						return d.skip()
					}
					s, err := d.str(`an output's "name"`)
					req.outputs = append(req.outputs, s)
					return err
				})
			})
		default: // "parameters" and anything else
			return d.skip()
		}
	})
	if err != nil {
		return nil, err
	}
	if d.peek() != 0 {
		return nil, d.syntaxErr("data after the request object")
	}
	if !seenInputs {
		return nil, fmt.Errorf(`%w: the request has no "inputs"`, ErrInvalidInput)
	}
	if d.binOff != len(d.bin) {
		return nil, fmt.Errorf("%w: %d bytes of binary data after the inputs' binary_data_size (%d bytes)", ErrInvalidInput, len(d.bin)-d.binOff, d.binOff)
	}
	return req, nil
}

// input reads one element of "inputs" (the n-th).
func (d *decoder) input(n int) (Tensor, error) {
	var t Tensor
	var hasName, hasShape, hasData bool
	binSize := int64(-1) // parameters.binary_data_size
	dataStart := -1      // of data seen before the datatype
	err := d.object(func(key []byte) error {
		switch string(key) {
		case "name":
			s, err := d.str(fmt.Sprintf(`"name" of input %d`, n))
			t.Name, hasName = s, true
			return err
		case "datatype":
			s, err := d.str(fmt.Sprintf(`"datatype" of input %s`, inputLabel(t.Name, n)))
			t.Datatype = s
			return err
		case "shape":
			hasShape = true
			t.Shape = []int{}
			return d.array(func() error {
				v, ok := smallInt(d.number())
				if !ok || v < 0 {
					return fmt.Errorf("%w: input %s: shape must be a list of non-negative integers", ErrInvalidInput, inputLabel(t.Name, n))
				}
				if len(t.Shape) == maxDims {
					return fmt.Errorf("%w: input %s: shape has more than %d dimensions", ErrInvalidInput, inputLabel(t.Name, n), maxDims)
				}
				t.Shape = append(t.Shape, int(v))
				return nil
			})
		case "data":
			hasData = true
			if t.Datatype != "" && hasName {
				return d.data(&t)
			}
			// Parsed once the datatype is known.
			d.ws()
			dataStart = d.i
			return d.skipSpan()
		case "parameters":
			return d.object(func(key []byte) error {
				if string(key) != "binary_data_size" {
					return d.skip()
				}
				v, ok := smallInt(d.number())
				if !ok || v < 0 {
					return fmt.Errorf("%w: input %s: binary_data_size must be a non-negative integer", ErrInvalidInput, inputLabel(t.Name, n))
				}
				binSize = v
				return nil
			})
		default:
			return d.skip()
		}
	})
	if err != nil {
		return t, err
	}
	label := inputLabel(t.Name, n)
	if binSize >= 0 {
		switch {
		case hasData:
			return t, fmt.Errorf(`%w: input %s has both "data" and binary_data_size`, ErrInvalidInput, label)
		case !hasName || t.Datatype == "" || !hasShape:
			return t, fmt.Errorf(`%w: input %s needs "name", "datatype" and "shape"`, ErrInvalidInput, label)
		case d.bin == nil:
			return t, fmt.Errorf("%w: input %s has binary_data_size but the request has no Inference-Header-Content-Length", ErrInvalidInput, label)
		case binSize > int64(len(d.bin)-d.binOff):
			return t, fmt.Errorf("%w: input %s: binary_data_size %d, but %d bytes of binary data are left", ErrInvalidInput, label, binSize, len(d.bin)-d.binOff)
		}
		raw := d.bin[d.binOff : d.binOff+int(binSize)]
		d.binOff += int(binSize)
		return t, binaryData(&t, raw, label)
	}
	switch {
	case !hasName:
		return t, fmt.Errorf(`%w: input %d has no "name"`, ErrInvalidInput, n)
	case t.Datatype == "":
		return t, fmt.Errorf(`%w: input %s has no "datatype"`, ErrInvalidInput, label)
	case !hasShape:
		return t, fmt.Errorf(`%w: input %s has no "shape"`, ErrInvalidInput, label)
	case !hasData:
		return t, fmt.Errorf(`%w: input %s has no "data" and no binary_data_size`, ErrInvalidInput, label)
	}
	if dataStart >= 0 {
		sub := &decoder{b: d.b, i: dataStart}
		if err := sub.data(&t); err != nil {
			return t, err
		}
	}
	return t, nil
}

// data reads the "data" of t, whose name and datatype are known, into t.
// Its length is checked against the shape by Check; the shape only sizes the
// allocation, bounded by what the body can hold (each element takes at
// least two bytes).
func (d *decoder) data(t *Tensor) error {
	if d.peek() != '[' {
		return fmt.Errorf(`%w: input %q: "data" must be an array`, ErrInvalidInput, t.Name)
	}
	hint := max(0, min(t.Len(), (len(d.b)-d.i)/2+1)) // Len is -1 if it overflows
	switch t.Datatype {
	case FP32:
		t.FP32 = make([]float32, 0, hint)
		return d.numbers(t, 0)
	case INT64:
		t.INT64 = make([]int64, 0, hint)
		return d.numbers(t, 0)
	case BYTES:
		t.Bytes = make([]string, 0, hint)
		return d.flat(0, func() error {
			if d.peek() != '"' {
				return d.elemErr(t, len(t.Bytes), "a string", nil)
			}
			s, err := d.rawString()
			t.Bytes = append(t.Bytes, string(s))
			return err
		})
	}
	return fmt.Errorf("%w: input %q has datatype %q; this server reads FP32, INT64 and BYTES", ErrInvalidInput, t.Name, t.Datatype)
}

// binaryData decodes raw, an input's bytes in the binary section, by t's
// datatype: FP32 and INT64 little-endian, as many elements as the shape
// says; BYTES each a 4-byte little-endian length and its bytes.
func binaryData(t *Tensor, raw []byte, label string) error {
	n := t.Len() // -1 if it overflows
	switch t.Datatype {
	case FP32, INT64:
		size := 4
		if t.Datatype == INT64 {
			size = 8
		}
		// Divided, not multiplied: n*size can wrap (n = 2^62, size 4 is 0).
		if n < 0 || len(raw)%size != 0 || len(raw)/size != n {
			return fmt.Errorf("%w: input %s: %d bytes of binary data for shape %v of %s (%d bytes each)", ErrInvalidInput, label, len(raw), t.Shape, t.Datatype, size)
		}
		if t.Datatype == FP32 {
			t.FP32 = make([]float32, n)
			for i := range t.FP32 {
				t.FP32[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
			}
		} else {
			t.INT64 = make([]int64, n)
			for i := range t.INT64 {
				t.INT64[i] = int64(binary.LittleEndian.Uint64(raw[8*i:]))
			}
		}
		return nil
	case BYTES:
		for len(raw) > 0 {
			if len(raw) < 4 {
				return fmt.Errorf("%w: input %s: binary BYTES element %d: a length needs 4 bytes, %d left", ErrInvalidInput, label, len(t.Bytes), len(raw))
			}
			l := binary.LittleEndian.Uint32(raw)
			if uint64(l) > uint64(len(raw)-4) {
				return fmt.Errorf("%w: input %s: binary BYTES element %d: length %d, %d bytes left", ErrInvalidInput, label, len(t.Bytes), l, len(raw)-4)
			}
			t.Bytes = append(t.Bytes, string(raw[4:4+l]))
			raw = raw[4+l:]
		}
		return nil
	}
	return fmt.Errorf("%w: input %s has datatype %q; this server reads FP32, INT64 and BYTES", ErrInvalidInput, label, t.Datatype)
}

// elemErr is element k of t's data (tok, or what follows d.i) that is not
// what t's datatype needs.
func (d *decoder) elemErr(t *Tensor, k int, what string, tok []byte) error {
	if len(tok) == 0 {
		tok = d.b[d.i:min(d.i+8, len(d.b))]
	}
	return fmt.Errorf("%w: input %q: data element %d (%s) is not %s", ErrInvalidInput, t.Name, k, truncateTok(tok), what)
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// numbers appends the leaves of the (possibly nested) array of numbers at
// d.i to t.FP32 or t.INT64, as t's datatype says. It is the hot loop of a
// request: one pass, whole numbers of up to 7 (FP32) or 18 (INT64) digits
// accumulated as they are scanned, strconv only for the others.
func (d *decoder) numbers(t *Tensor, depth int) error {
	if depth > maxNesting {
		return d.syntaxErr(fmt.Sprintf("arrays nested deeper than %d", maxNesting))
	}
	fp := t.Datatype == FP32
	b := d.b
	i := d.i + 1 // past '['
	first := true
	for {
		for i < len(b) && isSpace(b[i]) {
			i++
		}
		if i >= len(b) {
			d.i = i
			return d.syntaxErr("unterminated array")
		}
		switch c := b[i]; {
		case c == ']' && first:
			d.i = i + 1
			return nil
		case c == '[':
			d.i = i
			if err := d.numbers(t, depth+1); err != nil {
				return err
			}
			i = d.i
		default:
			start := i
			neg := c == '-'
			if neg {
				i++
			}
			digits := i
			var v int64
			for i < len(b) && b[i]-'0' <= 9 && i-digits < 18 {
				v = v*10 + int64(b[i]-'0')
				i++
			}
			n := i - digits
			whole := n > 0 && (i == len(b) || b[i] != '.' && b[i] != 'e' && b[i] != 'E' && b[i]-'0' > 9)
			if neg {
				v = -v
			}
			switch {
			case fp && whole && n <= 7:
				t.FP32 = append(t.FP32, float32(v))
			case !fp && whole:
				t.INT64 = append(t.INT64, v)
			default:
				d.i = start
				tok := d.number()
				i = d.i
				d.i = start
				if fp {
					f, err := strconv.ParseFloat(bstr(tok), 32)
					if err != nil || len(tok) == 0 {
						return d.elemErr(t, len(t.FP32), "an FP32 number", tok)
					}
					t.FP32 = append(t.FP32, float32(f))
				} else {
					v, err := strconv.ParseInt(bstr(tok), 10, 64)
					if err != nil || len(tok) == 0 {
						return d.elemErr(t, len(t.INT64), "an INT64 integer", tok)
					}
					t.INT64 = append(t.INT64, v)
				}
			}
		}
		for i < len(b) && isSpace(b[i]) {
			i++
		}
		if i < len(b) && b[i] == ',' {
			i++
			first = false
			continue
		}
		d.i = i
		if i < len(b) && b[i] == ']' {
			d.i++
			return nil
		}
		return d.syntaxErr("expected ',' or ']'")
	}
}

// skipSpan skips the value at d.i like skip, but checks no more than that
// brackets balance outside strings: for data that is parsed (and so
// checked) afterwards.
func (d *decoder) skipSpan() error {
	if c := d.peek(); c != '[' && c != '{' {
		return d.skip()
	}
	depth := 0
	for ; d.i < len(d.b); d.i++ {
		switch d.b[d.i] {
		case '[', '{':
			depth++
		case ']', '}':
			if depth--; depth == 0 {
				d.i++
				return nil
			}
		case '"':
			if _, err := d.rawString(); err != nil {
				return err
			}
			d.i--
		}
	}
	return d.syntaxErr("unterminated array")
}

func inputLabel(name string, n int) string {
	if name == "" {
		return strconv.Itoa(n)
	}
	return strconv.Quote(name)
}

func truncateTok(tok []byte) string {
	if len(tok) > 24 {
		return string(tok[:24]) + "…"
	}
	if len(tok) == 0 {
		return "empty"
	}
	return string(tok)
}

// appendString appends s as a JSON string.
func appendString(buf []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c >= utf8.RuneSelf {
			q, _ := json.Marshal(s) // cannot fail for a string
			return append(buf, q...)
		}
	}
	buf = append(buf, '"')
	buf = append(buf, s...)
	return append(buf, '"')
}

func appendShape(buf []byte, shape []int) []byte {
	buf = append(buf, '[')
	for i, s := range shape {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = strconv.AppendInt(buf, int64(s), 10)
	}
	return append(buf, ']')
}

// appendInferResponse appends the response to a request: the model's name
// and version, the request's id and the outputs, data flat in row-major
// order.
func appendInferResponse(buf []byte, model, version string, req *inferRequest, outs []Tensor) ([]byte, error) {
	buf = append(buf, `{"model_name":`...)
	buf = appendString(buf, model)
	buf = append(buf, `,"model_version":`...)
	buf = appendString(buf, version)
	if req.hasID {
		buf = append(buf, `,"id":`...)
		buf = appendString(buf, req.id)
	}
	buf = append(buf, `,"outputs":[`...)
	for i := range outs {
		t := &outs[i]
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = append(buf, `{"name":`...)
		buf = appendString(buf, t.Name)
		buf = append(buf, `,"datatype":`...)
		buf = appendString(buf, t.Datatype)
		buf = append(buf, `,"shape":`...)
		buf = appendShape(buf, t.Shape)
		buf = append(buf, `,"data":[`...)
		switch t.Datatype {
		case FP32:
			for j, v := range t.FP32 {
				if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
					return buf, fmt.Errorf("predict: output %q element %d is %v, which JSON cannot carry", t.Name, j, v)
				}
				if j > 0 {
					buf = append(buf, ',')
				}
				buf = strconv.AppendFloat(buf, float64(v), 'g', -1, 32)
			}
		case INT64:
			for j, v := range t.INT64 {
				if j > 0 {
					buf = append(buf, ',')
				}
				buf = strconv.AppendInt(buf, v, 10)
			}
		case BYTES:
			for j, v := range t.Bytes {
				if j > 0 {
					buf = append(buf, ',')
				}
				buf = appendString(buf, v)
			}
		default:
			return buf, fmt.Errorf("predict: output %q has datatype %q, which the server cannot write", t.Name, t.Datatype)
		}
		buf = append(buf, "]}"...)
	}
	return append(buf, "]}"...), nil
}
