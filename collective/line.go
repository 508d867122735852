package collective

// The line: small all-reduces, all-gathers and barriers of large groups.
//
// The ring (ring.go) cuts a buffer into one chunk per rank, so every rank
// sends and receives 2(size-1) frames per all-reduce and size-1 per
// all-gather, whatever the buffer's size: an all-reduce of 16 floats over
// 1,024 ranks is 2,046 frames a rank, 2.1 million in the group, nearly all
// of them a bare header. Each frame is a write, a wake-up and a read, so when
// ranks share processors (many ranks a host, or a host that also runs their
// Temporal server) the group's time is that count of frames, not the bytes:
// at 1,024 ranks on 2 cores, about 18 s for the first all-reduce.
//
// The line sends the whole buffer along the same links, in two passes. The
// gathering pass runs from rank 0 to rank size-1: rank 0 sends its buffer,
// each next rank adds its own into what it received (an all-reduce) or
// appends its record to it (an all-gather) and passes it on, so rank size-1
// ends with the whole result (for Mean it divides, once). The spreading pass
// is the chain broadcast (broadcast.go) of that result from rank size-1
// round the ring: size-1 -> 0 -> 1 -> ... -> size-2. Every rank sends at most
// 2 frames a segment and receives at most 2: 4,092 frames in the group
// instead of 2.1 million. Both passes take size-1 hops, as the ring's
// 2(size-1) steps do, so the wait for the last rank is as many hops as the
// ring's, each carrying the buffer instead of a chunk of it: the line runs
// only where the buffer is small (lineMaxBytes for an all-reduce, one
// segment for an all-gather), and the group large (lineMinRanks).
//
// Bits: each element of the result is computed once, by rank size-1, and
// copied to the others, so every rank ends with identical bits, as with the
// ring. The order of the additions differs from the ring's (the ring adds
// chunk c starting at rank c+1): a small all-reduce of a large group gives
// other bits than the ring would, the same every time for the same group
// size and buffer length, which is what a resumed run needs. The choice
// depends on the world size, the length and the segment size only, which the
// ranks agree on (a rank with another length fails with ErrMismatch, as on
// the ring).
//
// The buffer fits one segment (lineFor), so each pass is one frame a link:
// on the link from rank r to rank r+1 the gathering pass is frame 0 and the
// spreading pass frame 1; rank size-1 sends the spreading pass as frame 0,
// as rank 0 receives only that one.

const (
	// lineMinRanks is the smallest group the line serves: from 4 ranks the
	// line took less time and processor than the ring for 64 bytes and for
	// 16 KiB, over shared memory and TCP (bench_test.go
	// BenchmarkSmallAllReduce, all ranks in one process on 2 cores: 4 ranks
	// 1.5-2.9x faster, 16 ranks 4.0-7.2x, 64 ranks 8.6-16x, 256 ranks 19x).
	// 2 and 3 ranks keep the ring, whose frames are as few there.
	lineMinRanks = 4
	// lineMaxBytes bounds an all-reduce the line serves: a buffer whose
	// transfer costs about what a hop's wake-up does (a few µs), so that
	// the line's hops are not much longer than the ring's where every rank
	// has a processor of its own.
	lineMaxBytes = 16 << 10
)

// lineFor says whether an operation of size ranks over bytes bytes (an
// all-reduce when reduce, else an all-gather or a barrier) runs the line.
func (c *Comm) lineFor(bytes int, reduce bool) bool {
	minRanks := lineMinRanks
	if c.opts.lineMinRanks != 0 {
		minRanks = c.opts.lineMinRanks
	}
	if minRanks < 0 || c.size < max(2, minRanks) || bytes > c.opts.SegmentBytes {
		return false
	}
	return !reduce || bytes <= lineMaxBytes
}

// linePlan prepares a line plan over data: an all-reduce of elements of elem
// bytes (reduce), or an all-gather of records cut by p.bounds. One frame a
// pass: lineFor checked that data fits a segment.
func (c *Comm) linePlan(op opcode, data []byte, elem int, reduce bool, total uint64) {
	p := &c.p
	p.kind, p.op, p.data, p.elem = planLine, op, data, elem
	p.rank, p.size, p.root, p.mean = c.rank, c.size, 0, false
	p.steps, p.reduceSteps, p.total, p.nseg = 0, 0, total, 1
	if reduce {
		p.reduceSteps = 1
	}
}

func (p *plan) lineReduces() bool { return p.reduceSteps > 0 }

func (p *plan) lineSendUnits() int {
	if p.rank >= p.size-2 { // size-2 does not pass the spreading on; size-1 gathers nothing
		return 1
	}
	return 2
}

func (p *plan) lineRecvUnits() int {
	if p.rank == 0 || p.rank == p.size-1 { // 0 receives the spreading only, size-1 the gathering
		return 1
	}
	return 2
}

// lineGathering says whether received frame u is of the gathering pass.
func (p *plan) lineGathering(u int) bool {
	return p.rank != 0 && u == 0
}

func (p *plan) lineSendNeeds(u int) int {
	if p.rank == 0 {
		return u // its gathering frame needs nothing, its spreading one the spreading received
	}
	return u + 1
}

func (p *plan) lineForwardOf(u int) (int, bool) {
	switch {
	case p.rank == 0:
		return 1, p.lineSendUnits() > 1
	case p.lineGathering(u):
		// A sum goes on as it is; a gathered prefix does not (the frame
		// that carries it on is longer: this rank's record is added).
		return 0, p.lineReduces()
	}
	return 1, p.rank != p.size-2
}

func (p *plan) lineSendSegment(u int) []byte {
	if !p.lineReduces() && p.rank < p.size-1 && u == 0 {
		return p.data[:p.bounds[p.rank+1]]
	}
	return p.data
}

func (p *plan) lineRecvSegment(u int) (seg []byte, reduce, final bool) {
	switch {
	case !p.lineGathering(u):
		return p.data, false, false
	case p.lineReduces():
		return p.data, true, p.rank == p.size-1
	}
	return p.data[:p.bounds[p.rank]], false, false
}
