package gpu

import (
	"errors"
	"fmt"
	"math"
	"unsafe"

	"github.com/tempotrain/tempotrain/compute"
)

// Options configure a Backend. The zero value is the default.
type Options struct {
	// Precision of the GEMMs (Linear, Conv2D). Default FP32.
	Precision Precision
	// SyncEachOp waits for every op and reports a device error with the
	// op's name instead of at the next Download (debugging; slow).
	SyncEachOp bool
	// MaxScratchBytes bounds the convolutions' scratch memory (im2col
	// columns and the GEMM's output): a batch is processed in groups of
	// samples that fit. Default 1 GiB.
	MaxScratchBytes int
	// GraphWarmup is how many times RunGraph runs a step structure eagerly
	// before capturing it. Default 1: the second occurrence is captured,
	// after the first has loaded every kernel and library path.
	GraphWarmup int
}

const (
	chunkBytes   = 64 << 20
	align        = 256
	defaultWS    = 1 << 30
	maxElements  = math.MaxInt32
	maxArgs      = 16
	graphsKept   = 8
	defaultGWarm = 1
)

// Error is what Backend ops panic with when the device fails (ops have no
// error results, as compute.Backend's shape errors also panic).
type Error struct {
	Device, Op string
	Err        error
}

func (e *Error) Error() string { return fmt.Sprintf("%s: %s: %v", e.Device, e.Op, e.Err) }
func (e *Error) Unwrap() error { return e.Err }

// ErrInGraph is wrapped by the panic of an op RunGraph's function may not
// call (Download, New).
var ErrInGraph = errors.New("not allowed inside RunGraph: a graphed step must not read device memory or allocate")

type mode int

const (
	eager mode = iota
	record
)

// Backend implements compute.Backend on a Driver. It is not safe for
// concurrent use: one rank drives one Backend.
type Backend struct {
	d         Driver
	o         Options
	maxBlocks int

	chunks  []uintptr // arena chunks, freed by Close
	next    uintptr   // bump pointer into the last chunk
	left    int       // bytes left in it
	scratch uintptr   // convolution scratch
	scrLen  int       // its length in floats
	retired []uintptr // outgrown scratch buffers: recorded graphs may still use them

	mode   mode
	ops    []op // the step being recorded by RunGraph
	nops   int
	tmp    op // the op being issued eagerly
	graphs []*graph
	seen   map[uint64]int
	noCap  map[uint64]bool
	clock  uint64
	stats  GraphStats
	closed bool
}

var _ compute.Backend = (*Backend)(nil)

// New returns a backend on d.
func New(d Driver, o Options) *Backend {
	if o.MaxScratchBytes <= 0 {
		o.MaxScratchBytes = defaultWS
	}
	if o.GraphWarmup <= 0 {
		o.GraphWarmup = defaultGWarm
	}
	return &Backend{d: d, o: o, maxBlocks: max(d.MaxBlocks(), 1), seen: map[uint64]int{}, noCap: map[uint64]bool{}}
}

// Name is the driver's device name ("cuda:0").
func (b *Backend) Name() string { return b.d.Name() }

// Precision returns the GEMM precision; SetPrecision changes it for later
// ops.
func (b *Backend) Precision() Precision     { return b.o.Precision }
func (b *Backend) SetPrecision(p Precision) { b.o.Precision = p }

// Synchronize waits for all queued work and returns the first device error.
func (b *Backend) Synchronize() error {
	if err := b.d.Synchronize(); err != nil {
		return &Error{b.d.Name(), "synchronize", err}
	}
	return nil
}

// Close frees the backend's device memory, graphs and driver. Tensors of the
// backend must not be used afterwards.
func (b *Backend) Close() error {
	if b.closed {
		return nil
	}
	b.closed = true
	errs := []error{b.d.Synchronize()}
	for _, g := range b.graphs {
		errs = append(errs, b.freeGraph(g))
	}
	b.graphs = nil
	for _, p := range append(append(b.chunks, b.retired...), b.scratch) {
		if p != 0 {
			errs = append(errs, b.d.Free(p))
		}
	}
	b.chunks, b.retired, b.scratch = nil, nil, 0
	errs = append(errs, b.d.Close())
	if err := errors.Join(errs...); err != nil {
		return &Error{b.d.Name(), "close", err}
	}
	return nil
}

func (b *Backend) fail(op string, err error) {
	panic(&Error{b.d.Name(), op, err})
}

// alloc returns device memory for n floats from the arena. compute.Backend
// has no Free: tensors live as long as the backend.
func (b *Backend) alloc(n int) uintptr {
	bytes := (max(n, 1)*4 + align - 1) &^ (align - 1)
	if bytes > b.left {
		size := max(bytes, chunkBytes)
		p, err := b.d.Alloc(size)
		if err != nil {
			b.fail(fmt.Sprintf("allocate %d bytes", size), err)
		}
		b.chunks = append(b.chunks, p)
		b.next, b.left = p, size
	}
	p := b.next
	b.next += uintptr(bytes)
	b.left -= bytes
	return p
}

// scratchFloats returns scratch memory of at least n floats. A grown scratch
// replaces the old one, which is kept until Close: queued work and recorded
// graphs may still use it.
func (b *Backend) scratchFloats(n int) uintptr {
	if n <= b.scrLen {
		return b.scratch
	}
	p, err := b.d.Alloc(n * 4)
	if err != nil {
		b.fail(fmt.Sprintf("allocate %d bytes of convolution scratch", n*4), err)
	}
	if b.scratch != 0 {
		b.retired = append(b.retired, b.scratch)
	}
	b.scratch, b.scrLen = p, n
	return p
}

// New returns a zeroed tensor.
func (b *Backend) New(shape ...int) compute.Tensor {
	if b.mode == record {
		b.fail("New", ErrInGraph)
	}
	n := 1
	for _, d := range shape {
		n *= max(d, 0)
	}
	if len(shape) == 0 {
		n = 0
	}
	if n > maxElements {
		panic(fmt.Sprintf("compute/cuda: shape %v: %d elements, at most %d", shape, n, maxElements))
	}
	p := b.alloc(n)
	t := deviceTensor(p, shape)
	if n > 0 {
		b.Fill(t, 0)
	}
	return t
}

// ptr returns t's device address; t must be a tensor of a device backend.
func ptr(t compute.Tensor) uintptr {
	if t.Data() != nil {
		panic(fmt.Sprintf("compute/cuda: given a host tensor %v", t))
	}
	if t.Dev == 0 && t.Len() > 0 {
		panic(fmt.Sprintf("compute/cuda: given a tensor %v without device memory", t))
	}
	return t.Dev
}

// opt is ptr for an optional argument: 0 for the zero Tensor.
func opt(t compute.Tensor) uintptr {
	if t.IsZero() {
		return 0
	}
	return ptr(t)
}

func checkLen(op string, t compute.Tensor, n int) {
	if t.Len() != n {
		panic(fmt.Sprintf("compute/cuda: %s: tensor %v has %d elements, want %d", op, t, t.Len(), n))
	}
}

// Upload copies host data into t.
func (b *Backend) Upload(t compute.Tensor, src []float32) {
	checkLen("Upload", t, len(src))
	if len(src) == 0 {
		return
	}
	o := b.op(opUpload)
	o.dst, o.bytes = ptr(t), len(src)*4
	bytes := unsafe.Slice((*byte)(unsafe.Pointer(&src[0])), len(src)*4)
	if b.mode == record {
		o.data = append(o.data, bytes...)
		return
	}
	if err := b.d.Upload(o.dst, unsafe.Pointer(&src[0]), len(bytes)); err != nil {
		b.fail(fmt.Sprintf("upload %d bytes", len(bytes)), err)
	}
	b.afterEager(o)
}

// Download waits for queued work and copies t into host data.
func (b *Backend) Download(dst []float32, t compute.Tensor) {
	checkLen("Download", t, len(dst))
	if b.mode == record {
		b.fail("Download", ErrInGraph)
	}
	if len(dst) == 0 {
		return
	}
	if err := b.d.Download(unsafe.Pointer(&dst[0]), ptr(t), len(dst)*4); err != nil {
		b.fail("Download", err)
	}
	// The stream is idle: no graph reads its upload slots any more.
	for _, g := range b.graphs {
		g.pending = false
	}
}

// ---- issuing work ----------------------------------------------------------

type opKind uint8

const (
	opKernel opKind = iota
	opGemm
	opUpload
)

// op is one piece of stream work, issued at once (eager) or recorded for a
// graph (RunGraph).
type op struct {
	kind        opKind
	k           Kernel
	grid, block uint32
	nargs       int
	args        [maxArgs]uint64
	gemm        GemmOp
	dst         uintptr
	bytes       int    // upload length
	data        []byte // upload contents, when recorded
}

// op returns the op to fill: the next recording slot, or b.tmp.
func (b *Backend) op(kind opKind) *op {
	var o *op
	if b.mode == record {
		if b.nops == len(b.ops) {
			b.ops = append(b.ops, op{})
		}
		o = &b.ops[b.nops]
		b.nops++
	} else {
		o = &b.tmp
	}
	data := o.data
	*o = op{kind: kind, data: data[:0]}
	return o
}

// exec issues o to the driver.
func (b *Backend) exec(o *op) error {
	switch o.kind {
	case opKernel:
		return b.d.Launch(o.k, o.grid, o.block, o.args[:o.nargs])
	case opGemm:
		return b.d.Gemm(&o.gemm)
	default:
		return b.d.Upload(o.dst, unsafe.Pointer(&o.data[0]), len(o.data))
	}
}

func (o *op) String() string {
	switch o.kind {
	case opKernel:
		return o.k.String()
	case opGemm:
		g := &o.gemm
		return fmt.Sprintf("gemm %dx%dx%d (%s)", g.M, g.N, g.K, g.Precision)
	default:
		return fmt.Sprintf("upload %d bytes", o.bytes)
	}
}

func (b *Backend) afterEager(o *op) {
	if !b.o.SyncEachOp {
		return
	}
	if err := b.d.Synchronize(); err != nil {
		b.fail(o.String(), err)
	}
}

func (b *Backend) issue(o *op) {
	if b.mode == record {
		return
	}
	if err := b.exec(o); err != nil {
		b.fail(o.String(), err)
	}
	b.afterEager(o)
}

// launch runs a grid-stride kernel over n elements.
func (b *Backend) launch(k Kernel, n int, args ...uint64) {
	if n <= 0 {
		return
	}
	if n > maxElements {
		panic(fmt.Sprintf("compute/cuda: %s over %d elements, at most %d", k, n, maxElements))
	}
	grid := min((n+blockThreads-1)/blockThreads, b.maxBlocks)
	b.kernel(k, grid, blockThreads, args)
}

// launchBlocks runs a reduction kernel with one block of redThreads per
// channel or row.
func (b *Backend) launchBlocks(k Kernel, blocks int, args ...uint64) {
	if blocks <= 0 {
		return
	}
	b.kernel(k, blocks, redThreads, args)
}

func (b *Backend) kernel(k Kernel, grid, block int, args []uint64) {
	o := b.op(opKernel)
	o.k, o.grid, o.block = k, uint32(grid), uint32(block)
	o.nargs = copy(o.args[:], args)
	if o.nargs != len(args) {
		panic(fmt.Sprintf("compute/cuda: %s: %d arguments, at most %d", k, len(args), maxArgs))
	}
	b.issue(o)
}

// gemm runs C [m×n] = alpha·op(A)·op(B) + beta·C on row-major matrices (the
// arguments of kern.Gemm): row-major C is column-major Cᵀ = op(B)ᵀ·op(A)ᵀ,
// so cuBLAS gets B for A, A for B and the dimensions swapped.
func (b *Backend) gemm(transA, transB bool, m, n, k int, alpha float32, a uintptr, lda int, bm uintptr, ldb int, beta float32, c uintptr, ldc int) {
	if m == 0 || n == 0 {
		return
	}
	o := b.op(opGemm)
	o.gemm = GemmOp{TransA: transB, TransB: transA, M: n, N: m, K: k, Alpha: alpha, Beta: beta,
		A: bm, LDA: ldb, B: a, LDB: lda, C: c, LDC: ldc, Precision: b.o.Precision}
	b.issue(o)
}

// MatMul is a row-major GEMM on tensors, C [m×n] = alpha·op(A)·op(B) +
// beta·C with row strides lda, ldb, ldc (benchmarks and custom layers).
func (b *Backend) MatMul(transA, transB bool, m, n, k int, alpha float32, a compute.Tensor, lda int, bt compute.Tensor, ldb int, beta float32, c compute.Tensor, ldc int) {
	b.gemm(transA, transB, m, n, k, alpha, ptr(a), lda, ptr(bt), ldb, beta, ptr(c), ldc)
}

// Argument words.
func w(t compute.Tensor) uint64  { return uint64(ptr(t)) }
func wo(t compute.Tensor) uint64 { return uint64(opt(t)) }
func wp(a uintptr) uint64        { return uint64(a) }
func wi(n int) uint64            { return uint64(int64(n)) }
func wf(x float64) uint64        { return math.Float64bits(x) }
func wb(v bool) uint64 {
	if v {
		return 1
	}
	return 0
}
