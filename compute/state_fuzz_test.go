package compute

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"testing"
)

// FuzzReadState feeds ReadState bodies of any shape, with a valid header
// and checksum (the checksum alone would stop almost every random input
// before the parser): it must return a State or an ErrStateCorrupt error,
// never panic or allocate without bound, and a State it returns writes
// back to the same bytes.
func FuzzReadState(f *testing.F) {
	st := NewState()
	st.Tensors = append(st.Tensors, StateTensor{Name: "w", Shape: []int{2, 3}, Data: []float32{1, 2, 3, 4, 5, 6}})
	st.Ints["epoch"] = 3
	st.Blobs["opt"] = []byte("adam")
	var good bytes.Buffer
	if _, err := st.WriteTo(&good); err != nil {
		f.Fatal(err)
	}
	b := good.Bytes()
	f.Add(b[len(stateMagic)+4 : len(b)-4])
	f.Add([]byte{})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, body []byte) {
		in := append([]byte(stateMagic), 0, 0, 0, 0)
		binary.LittleEndian.PutUint32(in[len(stateMagic):], stateVersion)
		in = append(in, body...)
		in = binary.LittleEndian.AppendUint32(in, crc32.Checksum(in, castagnoli))
		got, err := ReadState(bytes.NewReader(in))
		if err != nil {
			if !errors.Is(err, ErrStateCorrupt) {
				t.Fatalf("error %v does not wrap ErrStateCorrupt", err)
			}
			return
		}
		var out bytes.Buffer
		if _, err := got.WriteTo(&out); err != nil {
			t.Fatal(err)
		}
		again, err := ReadState(bytes.NewReader(out.Bytes()))
		if err != nil {
			t.Fatalf("a state read back fails: %v", err)
		}
		var out2 bytes.Buffer
		_, _ = again.WriteTo(&out2)
		if !bytes.Equal(out.Bytes(), out2.Bytes()) {
			t.Fatal("write, read, write differs")
		}
	})
}
