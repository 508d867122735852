package gpu

import (
	"errors"
	"fmt"
	"unsafe"
)

// GraphStats counts what RunGraph did.
type GraphStats struct {
	// Steps is the number of RunGraph calls.
	Steps int
	// Eager steps ran op by op: a structure's warm-up, or one that could
	// not be captured.
	Eager int
	// Captures counts graphs captured and instantiated; Launches, graph
	// launches; Patched, kernel nodes whose arguments changed between
	// launches (a learning rate, Adam's step, a dropout seed).
	Captures, Launches, Patched int
	// CaptureFailures counts structures that could not be captured (they
	// then run eagerly); LastCaptureError says why.
	CaptureFailures  int
	LastCaptureError error
}

// Stats returns RunGraph's counters.
func (b *Backend) Stats() GraphStats { return b.stats }

// graph is an instantiated capture of one step structure.
type graph struct {
	key     uint64
	ops     []op   // as last launched (kernel arguments follow patches)
	nodes   []Node // kernel node of each kernel op
	slots   []unsafe.Pointer
	exec    Graph
	used    uint64
	pending bool // launched since the last Synchronize of its uploads
}

// RunGraph runs the device work of fn, a training step or any sequence of
// ops, through a CUDA graph: fn's ops are recorded (not run), and a graph of
// the same structure (the same kernels, launch shapes, GEMMs and copies in
// the same order) is launched with the recorded arguments, so a step costs
// one launch instead of one per op. A structure is captured after
// Options.GraphWarmup eager runs; arguments that change between steps (the
// learning rate, Adam's step, dropout seeds, tensors views) are patched into
// the graph's kernel nodes. Graphs of a few structures are kept (a last,
// smaller batch is another structure).
//
// fn must not read device memory (Download), allocate (New) or call
// RunGraph; Upload is allowed (its data is copied at record time, and a
// graph reads it from pinned memory at launch, after the previous launch of
// that graph finished). fn runs exactly once per call, on the calling
// goroutine.
func (b *Backend) RunGraph(fn func()) error {
	if b.mode != eager {
		return fmt.Errorf("%s: RunGraph: %w", b.d.Name(), ErrInGraph)
	}
	b.nops = 0
	b.mode = record
	func() {
		defer func() { b.mode = eager }()
		fn()
	}()
	ops := b.ops[:b.nops]
	b.stats.Steps++
	key := structure(ops)
	g := b.findGraph(key, ops)
	if g == nil {
		b.seen[key]++
		if b.noCap[key] || b.seen[key] <= b.o.GraphWarmup {
			b.stats.Eager++
			return b.runEager(ops)
		}
		var err error
		if g, err = b.capture(key, ops); err != nil {
			b.noCap[key] = true
			b.stats.CaptureFailures++
			b.stats.LastCaptureError = err
			b.stats.Eager++
			return b.runEager(ops)
		}
	} else if err := b.patch(g, ops); err != nil {
		return &Error{b.d.Name(), "patch graph", err}
	}
	b.clock++
	g.used = b.clock
	if err := b.d.LaunchGraph(g.exec); err != nil {
		return &Error{b.d.Name(), "launch graph", err}
	}
	g.pending = true
	b.stats.Launches++
	if b.o.SyncEachOp {
		return b.Synchronize()
	}
	return nil
}

func (b *Backend) runEager(ops []op) error {
	for i := range ops {
		if err := b.exec(&ops[i]); err != nil {
			return &Error{b.d.Name(), ops[i].String(), err}
		}
		if b.o.SyncEachOp {
			if err := b.d.Synchronize(); err != nil {
				return &Error{b.d.Name(), ops[i].String(), err}
			}
		}
	}
	return nil
}

// structure hashes what a graph fixes: kinds, kernels, launch shapes, GEMMs
// and copy destinations, not kernel arguments (FNV-1a over 64-bit words; no
// allocation, as it runs every step).
func structure(ops []op) uint64 {
	h := uint64(14695981039346656037)
	put := func(v uint64) {
		h = (h ^ v) * 1099511628211
	}
	for i := range ops {
		o := &ops[i]
		put(uint64(o.kind))
		switch o.kind {
		case opKernel:
			put(uint64(o.k))
			put(uint64(o.grid)<<32 | uint64(o.block))
		case opGemm:
			g := &o.gemm
			put(uint64(g.M)<<32 | uint64(g.N))
			put(uint64(g.K)<<32 | uint64(g.Precision))
			put(uint64(g.A))
			put(uint64(g.B))
			put(uint64(g.C))
			put(uint64(g.LDA)<<32 | uint64(g.LDB))
			put(uint64(g.LDC))
		case opUpload:
			put(uint64(o.dst))
			put(uint64(o.bytes))
		}
	}
	return h
}

func sameStructure(a, b *op) bool {
	if a.kind != b.kind {
		return false
	}
	switch a.kind {
	case opKernel:
		return a.k == b.k && a.grid == b.grid && a.block == b.block && a.nargs == b.nargs
	case opGemm:
		return a.gemm == b.gemm
	default:
		return a.dst == b.dst && a.bytes == b.bytes
	}
}

func (b *Backend) findGraph(key uint64, ops []op) *graph {
	for _, g := range b.graphs {
		if g.key != key || len(g.ops) != len(ops) {
			continue
		}
		same := true
		for i := range ops {
			if !sameStructure(&g.ops[i], &ops[i]) {
				same = false
				break
			}
		}
		if same {
			return g
		}
	}
	return nil
}

// capture records ops into a new graph (without running them) and
// instantiates it.
func (b *Backend) capture(key uint64, ops []op) (*graph, error) {
	g := &graph{key: key, nodes: make([]Node, len(ops)), slots: make([]unsafe.Pointer, len(ops))}
	g.ops = make([]op, len(ops))
	for i := range ops {
		g.ops[i] = ops[i]
		g.ops[i].data = nil
	}
	fail := func(err error) (*graph, error) {
		if _, endErr := b.d.EndCapture(); endErr != nil {
			err = errors.Join(err, endErr)
		}
		return nil, errors.Join(err, b.freeGraph(g))
	}
	if err := b.d.BeginCapture(); err != nil {
		return nil, fmt.Errorf("begin capture: %w", err)
	}
	for i := range ops {
		o := &ops[i]
		switch o.kind {
		case opKernel:
			if err := b.d.Launch(o.k, o.grid, o.block, o.args[:o.nargs]); err != nil {
				return fail(fmt.Errorf("capture %s: %w", o, err))
			}
			n, err := b.d.LastNode()
			if err != nil {
				return fail(fmt.Errorf("capture %s: %w", o, err))
			}
			g.nodes[i] = n
		case opGemm:
			if err := b.d.Gemm(&o.gemm); err != nil {
				return fail(fmt.Errorf("capture %s: %w", o, err))
			}
		case opUpload:
			slot, err := b.d.AllocHost(len(o.data))
			if err != nil {
				return fail(fmt.Errorf("capture %s: %w", o, err))
			}
			g.slots[i] = slot
			copy(unsafe.Slice((*byte)(slot), len(o.data)), o.data)
			if err := b.d.CopyHtoD(o.dst, slot, len(o.data)); err != nil {
				return fail(fmt.Errorf("capture %s: %w", o, err))
			}
		}
	}
	exec, err := b.d.EndCapture()
	if err != nil {
		return nil, errors.Join(fmt.Errorf("end capture: %w", err), b.freeGraph(g))
	}
	g.exec = exec
	if len(b.graphs) == graphsKept {
		old := 0
		for i, h := range b.graphs {
			if h.used < b.graphs[old].used {
				old = i
			}
		}
		if err := b.freeGraph(b.graphs[old]); err != nil {
			return nil, err
		}
		b.graphs = append(b.graphs[:old], b.graphs[old+1:]...)
	}
	b.graphs = append(b.graphs, g)
	b.stats.Captures++
	return g, nil
}

// patch brings g's kernel arguments and upload data to those of ops (of the
// same structure).
func (b *Backend) patch(g *graph, ops []op) error {
	waited := false
	for i := range ops {
		o, c := &ops[i], &g.ops[i]
		switch o.kind {
		case opKernel:
			if o.args == c.args {
				continue
			}
			if err := b.d.SetKernelParams(g.exec, g.nodes[i], o.k, o.grid, o.block, o.args[:o.nargs]); err != nil {
				return fmt.Errorf("%s: %w", o, err)
			}
			c.args = o.args
			b.stats.Patched++
		case opUpload:
			// The slot is read by the graph's previous launch, which may
			// still be running.
			if g.pending && !waited {
				if err := b.d.Synchronize(); err != nil {
					return err
				}
				waited = true
				g.pending = false
			}
			copy(unsafe.Slice((*byte)(g.slots[i]), len(o.data)), o.data)
		}
	}
	return nil
}

func (b *Backend) freeGraph(g *graph) error {
	var errs []error
	if g.pending {
		// Its copies may still read the pinned slots.
		errs = append(errs, b.d.Synchronize())
	}
	if g.exec != 0 {
		errs = append(errs, b.d.DestroyGraph(g.exec))
		g.exec = 0
	}
	for i, s := range g.slots {
		if s != nil {
			errs = append(errs, b.d.FreeHost(s))
			g.slots[i] = nil
		}
	}
	return errors.Join(errs...)
}
