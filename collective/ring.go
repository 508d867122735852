package collective

// Ring all-reduce: reduce-scatter, then all-gather, pipelined by segment.
//
// The buffer is cut into size chunks, chunk c holding elements
// [c*count/size, (c+1)*count/size). Each rank sends to its right neighbour and
// receives from its left neighbour. At ring step t (0 <= t < 2(size-1)) rank r
// sends chunk (r-t) mod size and receives chunk (r-t-1) mod size:
//
//   - reduce-scatter, t < size-1: the received chunk is added into place, so
//     after size-1 steps rank r holds the full reduction of chunk r+1 (for
//     Mean it divides that chunk by size, once, before passing it on);
//   - all-gather, t >= size-1: the received chunk, fully reduced, is read
//     straight into place.
//
// The chunk a rank sends at step t is the one it received at step t-1, so
// each chunk is further cut into nseg segments and the steps overlap: the
// sender goroutine writes segment j of step t as soon as the receiver has
// finished segment j of step t-1, while the receiver reads and reduces the
// next segment. Frames go in groups of ringGroup segments: every step of
// segments 0..3, then every step of segments 4..7, and so on; within a group,
// step by step, so frame u of group g is step t = (u - g*ringGroup*steps)/gl,
// segment j = g*ringGroup + (u - ...)%gl, for the group's gl segments. The
// frame that forwards a received segment is thus gl frames after it: close
// enough that a shared-memory link has its slot free and the receiver can
// write the result there directly (shm.go), and that a segment's bytes are
// still in cache when they come back reduced, where a step-major order would
// bring them back a whole chunk later, from memory. Two I/O operations are in
// flight on each rank, one on each connection, and the kernel's socket
// buffers or the shared slots carry a segment while the receiver reduces the
// previous one. Each rank sends 2(size-1)/size of the buffer, the minimum
// for an all-reduce. The order of frames changes nothing in what is added to
// what.
//
// A reduced value is computed by exactly one rank (the chunk's owner) and
// copied to the others, so all ranks end with identical bits.
//
// With reduceSteps = 0 and rank r owning chunk r, the same schedule is the
// ring all-gather that AllGather and Barrier use.

import (
	"context"
	"fmt"
	"unsafe"
)

// planKind selects the schedule of an operation.
type planKind uint8

const (
	planRing  planKind = iota // ring.go
	planChain                 // broadcast.go
	planLine                  // line.go
)

// plan is one operation, filled in by the caller under opMu and read by the
// sender goroutine and the receiver. It lives in the Comm and is reused, so
// an operation allocates nothing.
type plan struct {
	kind        planKind
	op          opcode
	data        []byte // the caller's buffer
	elem        int    // element size: 4 or 8 to reduce, 1 to move bytes
	bounds      []int  // ring: chunk c = elements [bounds[c], bounds[c+1]); line: records
	nseg        int    // segments per chunk (ring) or per buffer (chain, line)
	steps       int    // ring steps
	reduceSteps int    // the first reduceSteps steps reduce into place (line: 1 to reduce)
	mean        bool
	total       uint64 // elements (all-reduce) or bytes: checked across ranks
	root        int    // chain: the rank whose buffer is broadcast
	rank, size  int
}

// sendUnits is how many frames this rank sends in the operation.
func (p *plan) sendUnits() int {
	switch p.kind {
	case planChain:
		if (p.rank+1)%p.size == p.root {
			return 0
		}
		return p.nseg
	case planLine:
		return p.lineSendUnits()
	}
	return p.steps * p.nseg
}

// recvUnits is how many frames this rank receives in the operation.
func (p *plan) recvUnits() int {
	switch p.kind {
	case planChain:
		if p.rank == p.root {
			return 0
		}
		return p.nseg
	case planLine:
		return p.lineRecvUnits()
	}
	return p.steps * p.nseg
}

func (p *plan) sends() bool { return p.sendUnits() > 0 }

func (p *plan) receives() bool { return p.recvUnits() > 0 }

// ringGroup is how many segments of each chunk go through all the steps
// before the next ones start (see the top of this file).
const ringGroup = 4

// frame is the step t and segment j of ring frame u, and gl, the number of
// segments in u's group.
func (p *plan) frame(u int) (t, j, gl int) {
	g := u / (ringGroup * p.steps)
	off := u - g*ringGroup*p.steps
	gl = min(ringGroup, p.nseg-g*ringGroup)
	return off / gl, g*ringGroup + off%gl, gl
}

// sendNeeds is how many received frames must be complete before frame u can
// be sent: the frame carrying the same segment one step earlier.
func (p *plan) sendNeeds(u int) int {
	if p.kind == planLine {
		return p.lineSendNeeds(u)
	}
	if p.kind == planChain {
		if p.rank == p.root {
			return 0
		}
		return u + 1
	}
	t, _, gl := p.frame(u)
	if t == 0 {
		return 0
	}
	return u - gl + 1
}

// forwardOf is the frame this rank sends that carries on the segment of
// received frame u, if it sends one.
func (p *plan) forwardOf(u int) (int, bool) {
	if !p.sends() {
		return 0, false
	}
	if p.kind == planLine {
		return p.lineForwardOf(u)
	}
	if p.kind == planChain {
		return u, true
	}
	t, _, gl := p.frame(u)
	return u + gl, t+1 < p.steps
}

// segment j of elements [lo, hi), in bytes.
func (p *plan) segment(lo, hi, j int) []byte {
	n := hi - lo
	a := lo + n*j/p.nseg
	b := lo + n*(j+1)/p.nseg
	return p.data[a*p.elem : b*p.elem : b*p.elem]
}

func mod(a, n int) int {
	a %= n
	if a < 0 {
		a += n
	}
	return a
}

// sendSegment is the payload of frame u.
func (p *plan) sendSegment(u int) []byte {
	if p.kind == planLine {
		return p.lineSendSegment(u)
	}
	if p.kind == planChain {
		return p.segment(0, len(p.data), u)
	}
	t, j, _ := p.frame(u)
	c := mod(p.rank-t, p.size)
	return p.segment(p.bounds[c], p.bounds[c+1], j)
}

// recvSegment is where frame u lands, whether it is reduced into place, and
// whether that reduction completes the segment.
func (p *plan) recvSegment(u int) (seg []byte, reduce, final bool) {
	if p.kind == planLine {
		return p.lineRecvSegment(u)
	}
	if p.kind == planChain {
		return p.segment(0, len(p.data), u), false, false
	}
	t, j, _ := p.frame(u)
	c := mod(p.rank-t-1, p.size)
	return p.segment(p.bounds[c], p.bounds[c+1], j), t < p.reduceSteps, t == p.reduceSteps-1
}

// setSegments picks the segment count so that no segment exceeds the
// configured size (and there is at least one frame per step, so that even
// an empty operation synchronises the ranks and checks they agree).
func (p *plan) setSegments(maxBytes, segBytes int) {
	p.nseg = max(1, (maxBytes+segBytes-1)/segBytes)
}

// ringPlan prepares a ring plan over data cut into chunks by p.bounds: an
// all-reduce (reduceSteps size-1) or an all-gather (0). A small one of a
// large group runs the line instead (line.go).
func (c *Comm) ringPlan(op opcode, data []byte, elem, reduceSteps int, total uint64) {
	if c.lineFor(len(data), reduceSteps > 0) {
		c.linePlan(op, data, elem, reduceSteps > 0, total)
		return
	}
	p := &c.p
	p.kind, p.op, p.data, p.elem = planRing, op, data, elem
	p.rank, p.size, p.root, p.mean = c.rank, c.size, 0, false
	p.steps, p.reduceSteps, p.total = 0, reduceSteps, total
	if c.size > 1 {
		p.steps = c.size - 1 + reduceSteps
	}
	biggest := 0
	for i := 0; i < c.size; i++ {
		biggest = max(biggest, p.bounds[i+1]-p.bounds[i])
	}
	p.setSegments(biggest*elem, c.opts.SegmentBytes)
}

func (c *Comm) sendPlan() error {
	p := &c.p
	h := header{typ: frameData, op: p.op, seq: c.seq, total: p.total, arg: uint32(p.root)}
	for u := range p.sendUnits() {
		if need := p.sendNeeds(u); need > 0 {
			if err := c.waitRecv(need); err != nil {
				return err
			}
		}
		seg := p.sendSegment(u)
		h.unit, h.length = uint32(u), uint32(len(seg))
		if err := c.writeFrame(&h, seg); err != nil {
			return err
		}
	}
	return nil
}

func (c *Comm) receive() error {
	p := &c.p
	want := header{typ: frameData, op: p.op, seq: c.seq, total: p.total, arg: uint32(p.root)}
	for u := range p.recvUnits() {
		seg, reduce, final := p.recvSegment(u)
		want.unit, want.length = uint32(u), uint32(len(seg))
		in, err := c.recvFrame(&want, seg, reduce)
		if err != nil {
			return err
		}
		c.land(u, seg, in, reduce, final)
		if c.recvShm != nil {
			c.shmRelease()
		}
		c.received(u)
	}
	return nil
}

// land puts the payload in of received frame u where it belongs: added into
// (reduce) or copied to (not) seg, its place in the caller's buffer; and,
// where the right link is shared memory and the slot free, straight into the
// slot of the frame that forwards it.
func (c *Comm) land(u int, seg, in []byte, reduce, final bool) {
	p := &c.p
	out, k := c.forwardSlot(u, len(seg))
	switch {
	case !reduce:
		switch {
		case c.recvShm == nil: // TCP read it straight into place
			if out != nil {
				copy(out, seg)
			}
		case out != nil:
			copy2(seg, out, in)
		default:
			copy(seg, in)
		}
	case out != nil && !final:
		// A partial sum only travels on: the chunk is overwritten by the
		// all-gather, so it need not be written back here.
		switch p.op {
		case opAllReduceFloat32:
			sumFloat32(floatsOf[float32](out), floatsOf[float32](seg), floatsOf[float32](in))
		case opAllReduceFloat64:
			sumFloat64(floatsOf[float64](out), floatsOf[float64](seg), floatsOf[float64](in))
		}
	default:
		switch p.op {
		case opAllReduceFloat32:
			dst := floatsOf[float32](seg)
			addFloat32(dst, floatsOf[float32](in))
			if final && p.mean {
				divFloat32(dst, float32(p.size))
			}
		case opAllReduceFloat64:
			dst := floatsOf[float64](seg)
			addFloat64(dst, floatsOf[float64](in))
			if final && p.mean {
				divFloat64(dst, float64(p.size))
			}
		}
		if out != nil {
			copy(out, seg)
		}
	}
	if out != nil {
		c.forwarded(k)
	}
}

// recvFrame receives frame want, whose payload belongs in seg, and returns
// the payload. Over TCP a frame that is not reduced lands straight in seg
// (and the result is seg itself), one to be reduced in the scratch segment;
// over shared memory the payload is read in its slot, until shmRelease.
func (c *Comm) recvFrame(want *header, seg []byte, reduce bool) ([]byte, error) {
	if c.recvShm != nil {
		return c.shmRecv(want)
	}
	if err := c.readHeader(want); err != nil {
		return nil, err
	}
	in := seg
	if reduce {
		in = c.scratch[:len(seg)]
	}
	if err := c.readPayload(in); err != nil {
		return nil, err
	}
	return in, nil
}

// AllReduceFloat32 reduces buf across all ranks, in place: on return every
// rank's buf holds the same sum (or mean) of all ranks' buffers. Every rank
// passes a buffer of the same length.
func (c *Comm) AllReduceFloat32(ctx context.Context, buf []float32, op Op) error {
	start := c.began()
	direct, err := c.allReduce(ctx, opAllReduceFloat32, bytesOf(buf), 4, len(buf), op)
	c.observeDirect(ctx, obsAllReduce, 4*len(buf), start, err, direct)
	return err
}

// AllReduceFloat64 is AllReduceFloat32 for float64.
func (c *Comm) AllReduceFloat64(ctx context.Context, buf []float64, op Op) error {
	start := c.began()
	direct, err := c.allReduce(ctx, opAllReduceFloat64, bytesOf(buf), 8, len(buf), op)
	c.observeDirect(ctx, obsAllReduce, 8*len(buf), start, err, direct)
	return err
}

// allReduce reports whether it ran the direct algorithm (shared.go).
func (c *Comm) allReduce(ctx context.Context, code opcode, data []byte, elem, count int, op Op) (bool, error) {
	if op != Sum && op != Mean {
		return false, c.badCall(fmt.Errorf("%v: unknown Op %d", code, int(op)))
	}
	c.opMu.Lock()
	defer c.opMu.Unlock()
	if c.size == 1 {
		return false, c.soloErr(code)
	}
	if c.anyShared && len(data) >= directMinBytes {
		// Buffers every rank can reach skip the ring (shared.go).
		if done, err := c.directAllReduce(ctx, code, data, elem, count, op == Mean); done {
			return true, err
		}
	}
	c.seq++
	for i := range c.size + 1 {
		c.p.bounds[i] = i * count / c.size
	}
	c.ringPlan(code, data, elem, c.size-1, uint64(count))
	c.p.mean = op == Mean
	return false, c.run(ctx)
}

// soloErr is the result of an operation on a group of one: nothing to do,
// unless the Comm was closed.
func (c *Comm) soloErr(code opcode) error {
	if err := c.firstErr(); err != nil {
		return fmt.Errorf("rank %d: %v: %w", c.rank, code, err)
	}
	return nil
}

type float interface{ float32 | float64 }

// bytesOf views a float slice as its bytes, for the wire.
func bytesOf[T float](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*int(unsafe.Sizeof(s[0])))
}

// floatsOf views bytes (cut from a float slice, so aligned) as floats.
func floatsOf[T float](b []byte) []T {
	if len(b) == 0 {
		return nil
	}
	var zero T
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/int(unsafe.Sizeof(zero)))
}
