package compute

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
)

// State file format, version 1. All integers little-endian.
//
//	magic     8 bytes  "TTSTATE\x00"
//	version   u32      1
//	nTensors  u32
//	nInts     u32
//	nBlobs    u32
//	tensors   nTensors × { name: u16 length + bytes; rank: u8; dims: rank × u32; data: Π dims × f32 }
//	ints      nInts    × { name; value: i64 }
//	blobs     nBlobs   × { name; length: u32; bytes }
//	checksum  u32      CRC-32C (Castagnoli) of every byte before it
//
// Tensors keep their order; ints and blobs are written sorted by name so a
// state always encodes to the same bytes.
const (
	stateMagic   = "TTSTATE\x00"
	stateVersion = 1
	maxNameLen   = 1<<16 - 1
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrStateCorrupt is wrapped by every error ReadState returns for a file
// that is not a valid state (bad magic, truncation, checksum mismatch).
var ErrStateCorrupt = errors.New("corrupt state")

// StateTensor is a named float32 tensor of a State.
type StateTensor struct {
	Name  string
	Shape []int
	Data  []float32
}

// State is what a checkpoint holds: named tensors (model parameters,
// buffers, optimizer slots), integers (epoch, step counts) and blobs (RNG
// state, model name).
type State struct {
	Tensors []StateTensor
	Ints    map[string]int64
	Blobs   map[string][]byte
}

// NewState returns an empty state.
func NewState() *State {
	return &State{Ints: map[string]int64{}, Blobs: map[string][]byte{}}
}

// Tensor returns the tensor named name.
func (s *State) Tensor(name string) (StateTensor, bool) {
	for _, t := range s.Tensors {
		if t.Name == name {
			return t, true
		}
	}
	return StateTensor{}, false
}

// Int returns the integer named name, or an error naming it.
func (s *State) Int(name string) (int64, error) {
	v, ok := s.Ints[name]
	if !ok {
		return 0, fmt.Errorf("state has no integer %q", name)
	}
	return v, nil
}

// WriteTo encodes s.
func (s *State) WriteTo(w io.Writer) (int64, error) {
	var buf bytes.Buffer
	buf.WriteString(stateMagic)
	le := binary.LittleEndian
	u32 := func(v uint32) { buf.Write(le.AppendUint32(nil, v)) }
	name := func(n string) error {
		if len(n) > maxNameLen {
			return fmt.Errorf("write state: name of %d bytes", len(n))
		}
		buf.Write(le.AppendUint16(nil, uint16(len(n))))
		buf.WriteString(n)
		return nil
	}
	u32(stateVersion)
	u32(uint32(len(s.Tensors)))
	u32(uint32(len(s.Ints)))
	u32(uint32(len(s.Blobs)))
	for _, t := range s.Tensors {
		if prod(t.Shape) != len(t.Data) || len(t.Shape) > 255 {
			return 0, fmt.Errorf("write state: tensor %q: shape %v for %d elements", t.Name, t.Shape, len(t.Data))
		}
		if err := name(t.Name); err != nil {
			return 0, err
		}
		buf.WriteByte(byte(len(t.Shape)))
		for _, d := range t.Shape {
			u32(uint32(d))
		}
		b := make([]byte, 4*len(t.Data))
		for i, v := range t.Data {
			le.PutUint32(b[4*i:], math.Float32bits(v))
		}
		buf.Write(b)
	}
	for _, k := range sortedKeys(s.Ints) {
		if err := name(k); err != nil {
			return 0, err
		}
		buf.Write(le.AppendUint64(nil, uint64(s.Ints[k])))
	}
	for _, k := range sortedKeys(s.Blobs) {
		if err := name(k); err != nil {
			return 0, err
		}
		u32(uint32(len(s.Blobs[k])))
		buf.Write(s.Blobs[k])
	}
	u32(crc32.Checksum(buf.Bytes(), castagnoli))
	n, err := w.Write(buf.Bytes())
	return int64(n), err
}

func sortedKeys[V any](m map[string]V) []string {
	k := make([]string, 0, len(m))
	for n := range m {
		k = append(k, n)
	}
	sort.Strings(k)
	return k
}

// stateReader decodes with bounds checks; the first failure sticks.
type stateReader struct {
	b   []byte
	off int
	err error
}

func (r *stateReader) take(n int, what string) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > len(r.b)-r.off {
		r.err = fmt.Errorf("%w: truncated at byte %d reading %s (%d bytes wanted, %d left)", ErrStateCorrupt, r.off, what, n, len(r.b)-r.off)
		return nil
	}
	p := r.b[r.off : r.off+n]
	r.off += n
	return p
}

func (r *stateReader) u32(what string) uint32 {
	if p := r.take(4, what); p != nil {
		return binary.LittleEndian.Uint32(p)
	}
	return 0
}

func (r *stateReader) name(what string) string {
	p := r.take(2, what+" name length")
	if p == nil {
		return ""
	}
	return string(r.take(int(binary.LittleEndian.Uint16(p)), what+" name"))
}

// ReadState decodes a state written by WriteTo. Errors for malformed input
// wrap ErrStateCorrupt and say which field is at fault.
func ReadState(rd io.Reader) (*State, error) {
	b, err := io.ReadAll(rd)
	if err != nil {
		return nil, fmt.Errorf("read state: %w", err)
	}
	if len(b) < len(stateMagic) || string(b[:len(stateMagic)]) != stateMagic {
		head := b[:min(len(b), len(stateMagic))]
		return nil, fmt.Errorf("%w: magic %q, want %q", ErrStateCorrupt, head, stateMagic)
	}
	if len(b) < len(stateMagic)+8 {
		return nil, fmt.Errorf("%w: truncated: %d bytes", ErrStateCorrupt, len(b))
	}
	if v := binary.LittleEndian.Uint32(b[len(stateMagic):]); v != stateVersion {
		return nil, fmt.Errorf("%w: version %d, this build reads version %d", ErrStateCorrupt, v, stateVersion)
	}
	body, sum := b[:len(b)-4], binary.LittleEndian.Uint32(b[len(b)-4:])
	if got := crc32.Checksum(body, castagnoli); got != sum {
		return nil, fmt.Errorf("%w: checksum: file says %08x, content hashes to %08x (truncated or modified)", ErrStateCorrupt, sum, got)
	}
	r := &stateReader{b: body, off: len(stateMagic) + 4}
	nt, ni, nb := r.u32("tensor count"), r.u32("int count"), r.u32("blob count")
	s := NewState()
	for i := 0; i < int(nt) && r.err == nil; i++ {
		t := StateTensor{Name: r.name("tensor")}
		rank := r.take(1, "rank of tensor "+t.Name)
		if rank == nil {
			break
		}
		n := 1
		for d := 0; d < int(rank[0]); d++ {
			v := int(r.u32("dims of tensor " + t.Name))
			t.Shape = append(t.Shape, v)
			if v > 0 && n > (len(body)-r.off)/v {
				n = len(body) // cannot fit: take reports truncation below
			} else {
				n *= v
			}
		}
		p := r.take(4*n, "data of tensor "+t.Name)
		if p == nil {
			break
		}
		t.Data = make([]float32, n)
		for j := range t.Data {
			t.Data[j] = math.Float32frombits(binary.LittleEndian.Uint32(p[4*j:]))
		}
		s.Tensors = append(s.Tensors, t)
	}
	for i := 0; i < int(ni) && r.err == nil; i++ {
		k := r.name("int")
		if p := r.take(8, "value of int "+k); p != nil {
			s.Ints[k] = int64(binary.LittleEndian.Uint64(p))
		}
	}
	for i := 0; i < int(nb) && r.err == nil; i++ {
		k := r.name("blob")
		n := r.u32("length of blob " + k)
		if p := r.take(int(n), "blob "+k); p != nil {
			s.Blobs[k] = append([]byte(nil), p...)
		}
	}
	if r.err != nil {
		return nil, r.err
	}
	if r.off != len(body) {
		return nil, fmt.Errorf("%w: %d bytes after the last field", ErrStateCorrupt, len(body)-r.off)
	}
	return s, nil
}

// SaveFile writes s to path atomically: a temporary file in the same
// directory, fsynced, then renamed over path.
func (s *State) SaveFile(path string) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".state-*")
	if err != nil {
		return fmt.Errorf("save state %s: %w", path, err)
	}
	defer os.Remove(f.Name())
	if _, err := s.WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("save state %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("save state %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("save state %s: %w", path, err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("save state %s: %w", path, err)
	}
	return nil
}

// LoadFile reads a state file.
func LoadFile(path string) (*State, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("load state: %w", err)
	}
	defer f.Close()
	s, err := ReadState(f)
	if err != nil {
		return nil, fmt.Errorf("load state %s: %w", path, err)
	}
	return s, nil
}

// Save adds the model's parameters ("param.<name>") and buffers
// ("buffer.<name>") to s.
func (m *Model) Save(s *State) {
	for _, p := range m.params {
		s.Tensors = append(s.Tensors, m.stateTensor("param."+p.Name, p.Shape, p.W))
	}
	for _, p := range m.buffers {
		s.Tensors = append(s.Tensors, m.stateTensor("buffer."+p.Name, p.Shape, p.W))
	}
}

func (m *Model) stateTensor(name string, shape []int, t Tensor) StateTensor {
	h := make([]float32, t.Len())
	m.be.Download(h, t)
	return StateTensor{Name: name, Shape: append([]int(nil), shape...), Data: h}
}

// Load sets the model's parameters and buffers from s; every one must be
// present with its shape. It undoes Freeze.
func (m *Model) Load(s *State) error {
	m.Unfreeze()
	for _, l := range []struct {
		prefix string
		ps     []*Param
	}{{"param.", m.params}, {"buffer.", m.buffers}} {
		for _, p := range l.ps {
			if err := m.loadTensor(s, l.prefix+p.Name, p.Shape, p.W); err != nil {
				return err
			}
		}
	}
	return nil
}

func (m *Model) loadTensor(s *State, name string, shape []int, dst Tensor) error {
	t, ok := s.Tensor(name)
	if !ok {
		return fmt.Errorf("load model: state has no tensor %q", name)
	}
	if fmt.Sprint(t.Shape) != fmt.Sprint(shape) {
		return fmt.Errorf("load model: tensor %q has shape %v in the state, the model wants %v", name, t.Shape, shape)
	}
	m.be.Upload(dst, t.Data)
	return nil
}

// Save adds the optimizer's slots ("opt.<slot>.<param>"), its step count
// ("opt.steps") and its name ("opt.name") to s.
func (o *Optimizer) Save(s *State) {
	s.Blobs["opt.name"] = []byte(o.cfg.Name)
	s.Ints["opt.steps"] = int64(o.steps)
	for i, slot := range o.slots {
		for _, p := range o.m.params {
			s.Tensors = append(s.Tensors, o.m.stateTensor("opt."+o.names[i]+"."+p.Name, p.Shape, slot.Flat(p.Offset, p.Offset+p.Len())))
		}
	}
}

// Load restores the optimizer's state from s, saved by an optimizer of the
// same kind over the same model.
func (o *Optimizer) Load(s *State) error {
	if name := string(s.Blobs["opt.name"]); name != o.cfg.Name {
		return fmt.Errorf("load optimizer: state is of optimizer %q, this one is %q", name, o.cfg.Name)
	}
	steps, err := s.Int("opt.steps")
	if err != nil {
		return fmt.Errorf("load optimizer: %w", err)
	}
	for i, slot := range o.slots {
		for _, p := range o.m.params {
			if err := o.m.loadTensor(s, "opt."+o.names[i]+"."+p.Name, p.Shape, slot.Flat(p.Offset, p.Offset+p.Len()).Reshape(p.Shape...)); err != nil {
				return fmt.Errorf("load optimizer: %w", err)
			}
		}
	}
	o.steps = int(steps)
	return nil
}
