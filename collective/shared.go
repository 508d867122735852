package collective

// Shared buffers and the direct all-reduce over them, as NCCL's user buffer
// registration (ncclMemAlloc, ncclCommRegister) and the two-shot all-reduce
// that vLLM's and TensorRT-LLM's custom all-reduce run over buffers every
// GPU of a node maps.
//
// AllocShared is collective: every rank creates a region (a file in
// /dev/shm, as shm.go's links), the ranks exchange the names over the ring,
// every rank maps every other rank's region, and once all have answered,
// each unlinks its own file. The buffer the caller gets is its own region;
// every rank can also read and write every other rank's. If any rank cannot
// share (a link over TCP, another host, a full /dev/shm, not Linux), every
// rank gets plain memory instead and the buffer works as any other slice:
// the decision is the group's, taken from what all ranks said.
//
// An all-reduce of at least directMinBytes on a buffer inside a shared
// buffer, on every rank, skips the ring. After an exchange of where each
// rank's buffer is (which also tells that every rank has entered, so every
// buffer holds its final input), rank r alone computes the chunk the ring
// would have it own, chunk r+1, segment by segment: it reads that segment of
// every rank's buffer, adds them in a scratch segment that stays in cache,
// and writes the sum into every rank's buffer, its own included. Only rank r
// touches chunk r+1 of any buffer, so no rank waits for another during the
// operation, and a byte of a buffer is read once and written once, as the
// memory floor of bench/allreduce: the ring over shared memory moves each
// segment through a slot and back (64 MiB, 4 ranks on 2 processors: 68 ms
// by the ring, 34 ms by this prototype, gloo 130 ms). A second exchange, a
// barrier, then tells that every chunk is written: no rank returns, and lets
// its caller write the buffer again, while another still reads it.
//
// The sums are the ring's to the bit: chunk k is added in the ring's order
// (x[k+1] + x[k], then + x[k+2], ..., + x[k-1]) with the same kernels, and
// Mean divides the sum once, by the same divisor.
//
// Smaller operations, and any operation where some rank's buffer is not
// shared, take the ring (the exchange says so to every rank, and costs a
// small all-gather on operations of directMinBytes or more, once the group
// has a shared buffer at all). Failure behaves as the ring's: the two
// exchanges are ring operations with its deadlines and peer checks, and the
// computation between them waits for no one. After a failed operation a
// peer may still be writing this rank's shared buffer until it notices the
// failure; the runtime then starts a new attempt anyway.

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"os"
	"time"
	"unsafe"
)

const (
	// directMinBytes is the smallest all-reduce that skips the ring when
	// its buffers are shared. A variable for tests.
	directSegBytes = 64 << 10 // a segment of the direct all-reduce: the scratch stays in L2
	// shareRecord is one rank's part of AllocShared's exchange: ok, nonce,
	// size, path length, path.
	shareRecord  = 128
	sharePathMax = shareRecord - 26
	// directRecord is one rank's part of the entry exchange: the
	// registration number of its buffer (or -1), the element size, the
	// offset in the buffer.
	directRecord = 16
	// shareHeader is the page at the start of a region: magic and nonce,
	// so that a rank checks it mapped the region it was told about.
	shareHeader = 4096
)

var (
	directMinBytes = 64 << 10
	shareMagic     = [8]byte{'T', 'T', 'C', 'L', 'B', 'U', 'F', '1'}
)

// SharedBuffer is memory that every rank of a Comm can reach, from
// AllocShared. All-reduces of slices of it run without the ring when every
// rank passes one (see the top of shared.go).
type SharedBuffer struct {
	c      *Comm
	index  int
	own    []byte // this rank's mapping of its region (header page first); nil if heap
	data   []byte // the caller's bytes
	shared bool
}

// peerViews are this rank's mappings of every rank's region of one
// registration (views[p] is rank p's data). They live until Close, so that
// every rank can always reach a region that any rank names, whatever it
// freed.
type peerViews struct {
	maps  [][]byte // the mappings, to unmap
	views [][]byte // the data in them; views[Rank()] is the own region's, until Free
	size  int
}

// AllocShared allocates a buffer of bytes bytes (rounded up to 8) that every
// rank can reach. It is collective: every rank calls it, in the same order
// relative to the other operations, with the same size. The buffer is zeroed
// and aligned for float64 (to 64 bytes when shared). Where the group cannot
// share memory, every rank gets ordinary memory (Shared reports which); the
// buffer works either way.
//
// The memory stays valid until Free, even after Close.
func (c *Comm) AllocShared(ctx context.Context, bytes int) (*SharedBuffer, error) {
	if bytes < 0 || bytes > maxShared {
		return nil, c.badCall(fmt.Errorf("AllocShared: size %d out of range [0, %d]", bytes, uint64(maxShared)))
	}
	size := (bytes + 7) &^ 7
	c.opMu.Lock()
	defer c.opMu.Unlock()
	b := &SharedBuffer{c: c, index: len(c.shared)}
	if c.size == 1 {
		b.setHeap(size)
		return b, c.soloErr(opShare)
	}
	// This rank's record: a region if both its links are shared memory.
	n := c.size
	recs := make([]byte, shareRecord*n)
	mine := recs[shareRecord*c.rank : shareRecord*(c.rank+1)]
	if c.sendShm != nil && c.recvShm != nil && size > 0 {
		// /dev/shm only: a buffer as large as a model's gradients in a
		// file on disk would be written back to it.
		dir := shmDirs()[0]
		if c.shareDir != "" {
			dir = c.shareDir
		}
		sweepDead()
		path := regionName(dir)
		mem, err := createRegion(path, shareHeader+size)
		if err == nil {
			// Every rank has mapped it, or never will, once this returns.
			defer unlinkShm(path)
		}
		if err == nil && len(path) > sharePathMax {
			shmUnmap(mem)
			err = fmt.Errorf("region path %q longer than %d bytes", path, sharePathMax)
		}
		if err == nil {
			var nonce [16]byte
			_, _ = rand.Read(nonce[:])
			copy(mem, shareMagic[:])
			copy(mem[8:], nonce[:])
			b.own = mem
			mine[0] = 1
			copy(mine[1:17], nonce[:])
			binary.LittleEndian.PutUint64(mine[17:], uint64(size))
			mine[25] = byte(len(path))
			copy(mine[26:], path)
		}
	}
	failed := func(err error) (*SharedBuffer, error) {
		if b.own != nil {
			shmUnmap(b.own)
		}
		return nil, err
	}
	if err := c.gatherRecords(ctx, opShare, recs, shareRecord, uint64(size)); err != nil {
		return failed(err)
	}
	// Map every other rank's region, if every rank offered one.
	pv := peerViews{maps: make([][]byte, n), views: make([][]byte, n), size: size}
	ok := b.own != nil
	for p := 0; p < n && ok; p++ {
		r := recs[shareRecord*p : shareRecord*(p+1)]
		if p == c.rank {
			continue
		}
		if r[0] != 1 || binary.LittleEndian.Uint64(r[17:]) != uint64(size) || int(r[25]) > sharePathMax {
			ok = false
			break
		}
		mem, err := openRegion(string(r[26:26+int(r[25])]), shareHeader+size)
		if err != nil || [8]byte(mem[:8]) != shareMagic || [16]byte(mem[8:24]) != [16]byte(r[1:17]) {
			if err == nil {
				shmUnmap(mem)
			}
			ok = false
			break
		}
		pv.maps[p], pv.views[p] = mem, mem[shareHeader:]
	}
	// Tell the others whether this rank reached every region.
	verdict := make([]byte, 8*n)
	if ok {
		verdict[8*c.rank] = 1
	}
	err := c.gatherRecords(ctx, opShare, verdict, 8, uint64(size))
	for p := 0; p < n && err == nil; p++ {
		ok = ok && verdict[8*p] == 1
	}
	if err != nil || !ok {
		for _, m := range pv.maps {
			if m != nil {
				shmUnmap(m)
			}
		}
		if err != nil {
			return failed(err)
		}
		if b.own != nil {
			shmUnmap(b.own)
			b.own = nil
		}
		b.setHeap(size)
		c.shared = append(c.shared, nil)
		return b, nil
	}
	b.data, b.shared = b.own[shareHeader:shareHeader+size:shareHeader+size], true
	pv.views[c.rank] = b.data
	c.stateMu.Lock()
	c.shared = append(c.shared, &pv)
	c.stateMu.Unlock()
	c.anyShared = true
	if c.dx == nil {
		c.dx = make([]byte, directRecord*n)
		c.dviews = make([][]byte, n)
		c.dacc = bytesOf(make([]float64, directSegBytes/8))
	}
	return b, nil
}

func (b *SharedBuffer) setHeap(size int) {
	b.data = bytesOf(make([]float64, size/8)) // float64 backing: aligned for either float type
	if b.data == nil {
		b.data = []byte{}
	}
}

// Shared reports whether the other ranks can reach the buffer: false where
// the group could not share memory, and the buffer is ordinary memory.
func (b *SharedBuffer) Shared() bool { return b.shared }

// Bytes is the buffer.
func (b *SharedBuffer) Bytes() []byte { return b.data }

// Float32s is the buffer as float32s.
func (b *SharedBuffer) Float32s() []float32 { return floatsOf[float32](b.data) }

// Float64s is the buffer as float64s.
func (b *SharedBuffer) Float64s() []float64 { return floatsOf[float64](b.data) }

// Free releases this rank's mapping of the buffer: its slices must not be
// used afterwards. It waits for an operation in flight. Other ranks' mappings
// of the region, and this rank's of theirs, go with their Comms' Close; the
// memory returns to the system when the last is gone. Free is idempotent.
func (b *SharedBuffer) Free() {
	b.c.opMu.Lock()
	defer b.c.opMu.Unlock()
	if b.own != nil {
		shmUnmap(b.own)
	}
	if b.shared {
		b.c.shared[b.index].views[b.c.rank] = nil
	}
	b.own, b.data, b.shared = nil, nil, false
}

// sharedIndex is the registration number of the live shared buffer holding
// data, and data's offset in it; -1 if none does.
func (c *Comm) sharedIndex(data []byte) (int, uint64) {
	if len(data) == 0 {
		return -1, 0
	}
	p := uintptr(unsafe.Pointer(unsafe.SliceData(data)))
	for i, pv := range c.shared {
		if pv == nil || pv.views[c.rank] == nil {
			continue
		}
		v := pv.views[c.rank]
		base := uintptr(unsafe.Pointer(unsafe.SliceData(v)))
		if p >= base && p+uintptr(len(data)) <= base+uintptr(len(v)) {
			return i, uint64(p - base)
		}
	}
	return -1, 0
}

// directAllReduce runs an all-reduce of count elements of elem bytes in data
// without the ring if every rank's buffer is shared; it reports whether it
// did (or failed). Called under opMu.
func (c *Comm) directAllReduce(ctx context.Context, code opcode, data []byte, elem, count int, mean bool) (bool, error) {
	p := &c.p
	n := c.size
	idx, off := c.sharedIndex(data)
	mine := c.dx[directRecord*c.rank : directRecord*(c.rank+1)]
	binary.LittleEndian.PutUint32(mine, uint32(int32(idx)))
	binary.LittleEndian.PutUint32(mine[4:], uint32(elem))
	binary.LittleEndian.PutUint64(mine[8:], off)
	if err := c.gatherRecords(ctx, opDirect, c.dx, directRecord, uint64(count)); err != nil {
		return true, err
	}
	if !c.holdShm() {
		return true, fmt.Errorf("rank %d: %v: %w", c.rank, code, ErrClosed)
	}
	defer c.dropShm()
	// No reference to a buffer outlives the operation, whichever way it ends.
	defer clear(c.dviews)
	for q := range n {
		r := c.dx[directRecord*q : directRecord*(q+1)]
		qi := int(int32(binary.LittleEndian.Uint32(r)))
		qe := int(binary.LittleEndian.Uint32(r[4:]))
		qo := binary.LittleEndian.Uint64(r[8:])
		if qi < 0 {
			return false, nil // some rank's buffer is not shared: the ring
		}
		if q == c.rank {
			c.dviews[q] = data
			continue
		}
		var pv *peerViews
		if qi < len(c.shared) {
			pv = c.shared[qi]
		}
		switch {
		case qe != elem:
			err := c.opErr(fmt.Errorf("%w: rank %d reduces %d-byte elements, this rank %d", ErrMismatch, q, qe, elem))
			c.fail(err)
			return true, err
		case pv == nil || qo > uint64(pv.size) || uint64(len(data)) > uint64(pv.size)-qo:
			err := c.opErr(fmt.Errorf("%w: rank %d names shared buffer %d at offset %d, which this rank cannot reach", ErrMismatch, q, qi, qo))
			c.fail(err)
			return true, err
		}
		c.dviews[q] = pv.views[q][qo : qo+uint64(len(data)) : qo+uint64(len(data))]
	}
	if err := c.directReduce(ctx, code, elem, count, mean); err != nil {
		c.fail(err)
		return true, err
	}
	c.seq++
	clear(p.bounds)
	c.ringPlan(opDirectDone, nil, 1, 0, uint64(count))
	if err := c.run(ctx); err != nil {
		return true, err
	}
	c.directOps++
	return true, nil
}

// directReduce computes this rank's chunk into every rank's buffer
// (c.dviews), a segment at a time.
func (c *Comm) directReduce(ctx context.Context, code opcode, elem, count int, mean bool) error {
	n := c.size
	k := (c.rank + 1) % n
	lo, hi := count*k/n, count*(k+1)/n
	seg := directSegBytes / elem
	deadline := c.deadline // the operation's, set by its entry exchange
	for s, i := lo, 0; s < hi; s, i = s+seg, i+1 {
		if c.dead.Load() {
			return c.firstErr()
		}
		if i%16 == 15 {
			if err := ctx.Err(); err != nil {
				return c.opErr(fmt.Errorf("%w, computing the shared buffers' chunk %d", context.Cause(ctx), k))
			}
			if time.Now().After(deadline) {
				return c.opErr(fmt.Errorf("computing the shared buffers' chunk %d: %w", k, os.ErrDeadlineExceeded))
			}
		}
		if c.hookDirect != nil {
			c.hookDirect(i)
		}
		e := min(s+seg, hi)
		a, b := s*elem, e*elem
		acc := c.dacc[:b-a]
		v := c.dviews
		if code == opAllReduceFloat32 {
			sumChunk(floatsOf[float32](acc), v, a, b, k, mean, sumFloat32, addFloat32, divFloat32)
		} else {
			sumChunk(floatsOf[float64](acc), v, a, b, k, mean, sumFloat64, addFloat64, divFloat64)
		}
		for q := range n {
			copy(v[q][a:b], acc)
		}
	}
	return nil
}

// sumChunk sets acc to the sum (or mean) of bytes [a, b) of every buffer in
// v, added in the ring's order for chunk k: v[k] + v[k+1], then + v[k+2], ...
func sumChunk[T float](acc []T, v [][]byte, a, b, k int, mean bool,
	sum func(out, x, y []T), add func(dst, src []T), div func(dst []T, d T)) {
	n := len(v)
	sum(acc, floatsOf[T](v[k][a:b]), floatsOf[T](v[(k+1)%n][a:b]))
	for j := 2; j < n; j++ {
		add(acc, floatsOf[T](v[(k+j)%n][a:b]))
	}
	if mean {
		div(acc, T(n))
	}
}

// unmapShared unmaps this rank's mappings of the other ranks' regions.
func (c *Comm) unmapShared() {
	for _, pv := range c.shared {
		if pv == nil {
			continue
		}
		for i, m := range pv.maps {
			if m != nil {
				shmUnmap(m)
				pv.maps[i], pv.views[i] = nil, nil
			}
		}
	}
}
