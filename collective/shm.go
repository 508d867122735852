package collective

// Shared-memory links, as NCCL's SHM transport.
//
// When a rank's right neighbour runs on the same host, the rank (the dialer
// of that link, its sender) creates a region: a file in /dev/shm, mapped by
// both processes and unlinked as soon as the neighbour has mapped it, so
// nothing outlives the two processes. Its first page is the control block
// (shmCtl); after it come `slots` slots, each a 32-byte frame header (the
// wire format's), padding to 64 bytes, and room for one segment.
//
// Frame k of the link's life (counted across operations) goes to slot
// k mod slots. The sender waits until consumed >= k+1-slots, writes the header
// and copies the segment into the slot, and publishes written = k+1. The
// receiver waits until written >= k+1, checks the header exactly as a TCP
// frame's, adds (or copies) the payload straight out of the slot into place,
// and publishes consumed = k+1. A byte is thus copied once, by the sender,
// and read once, by the receiver's reduction, where TCP copies it into the
// kernel and out again into a scratch segment before the reduction reads it.
// The schedule, the segments and the reduction kernels are the ring's own,
// so results are bit-identical to TCP's.
//
// A rank whose links are both shared memory runs an operation on one
// goroutine (driveShm), not on a sender and a receiver as over TCP: nothing
// waits on a wire, and the second goroutine only competed for processors
// (64 MiB, 2 ranks: 22-26 ms against 39-40 ms, system time 0.2-2.8 against
// 3.5-3.9 ms per operation; 4 and 8 ranks: the same within noise).
//
// Forwarding, as NCCL's recvReduceSend: a segment the receiver reduces (or
// gathers) is usually sent on to the right at the next step. When the right
// link is shared memory and that frame's slot is already free, the receiver
// writes its result straight into the slot and marks the frame forwarded;
// the sender then only writes the header and publishes it. A partial sum of
// the reduce-scatter is then written only there (sumFloat32), not back into
// the caller's buffer, whose chunk the all-gather overwrites anyway. The
// receiver never waits for the slot (it would deadlock a ring whose slots
// are all full of step-0 segments); when it is busy, the segment takes the
// ordinary way, through the buffer and the sender's copy.
//
// Waiting: a waiter first polls its counter a few times (shmSpins), then
// raises its waiting flag in the control block, says which counter value it
// waits for, checks the counter once more and parks its goroutine on the
// link's bell, a channel. The other side stores its counter, then, only if
// the flag is up and the value reached, writes one doorbell byte on the
// link's TCP connection, whose reading goroutine rings the bell. The flag
// and counter accesses are sequentially consistent, so either the waiter
// sees the new counter or the other side sees the flag. A sender waiting for
// a free slot asks for half the ring, so that a slow receiver rings once per
// half ring rather than once per slot. Parking on the network poller, not a
// futex, matters to Go: a goroutine blocked in FUTEX_WAIT holds its
// processor until the runtime's monitor takes it back, which made a 4 KiB
// all-reduce between ranks of one process 5 times slower than over TCP (212
// against 40 µs, BenchmarkAllReduce4KiB2Ranks); with the doorbell it costs
// what TCP costs.
//
// Liveness: the TCP connection of the link stays open, carrying only
// doorbells, and a goroutine of each end reads it. The kernel closes it when
// a process dies; a rank that fails closes it (reset by Abort); a rank that
// closes its Comm sends its goodbye on it. The reading goroutine then marks
// the link gone and rings the bell: a receiver still drains the frames
// already published (as it would read bytes left in a socket) and fails with
// ErrPeerGone when it must wait for more; a sender fails when it must wait
// for a free slot. Tokens, deadlines, cancellation and Abort behave as over
// TCP.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// doorbell is the byte a rank writes on a shared-memory link's connection to
// wake the other end; unlike the frame types, it is never the first byte of
// a header.
const doorbell = 0xDB

const (
	// shmSlots is the number of segments a link holds: the sender can run
	// this far ahead of the receiver. Twice ringGroup, so that the slot of
	// the frame forwarding a segment (ringGroup frames later) is usually
	// free when the segment arrives: with 8, 80% of a 64 MiB all-reduce's
	// forwards went straight into the slot; with 4, 46%.
	shmSlots = 2 * ringGroup
	// shmCtlBytes is the control block's page; slots follow it.
	shmCtlBytes = 4096
	// shmSlotHeader is the room for a frame header at the start of a slot,
	// keeping payloads 64-byte aligned.
	shmSlotHeader = 64
	// shmMaxRegion bounds a link's region; a larger SegmentBytes uses TCP.
	shmMaxRegion = 256 << 20
	// shmNamePrefix starts the name of every region file.
	shmNamePrefix = "tempotrain-collective-"
)

// shmSpins is how many times a waiter polls its counter before it parks: a
// few hundred nanoseconds, for a frame that is landing. Spinning longer (20
// and 100 µs, yielding the processor between polls) made a 4 KiB all-reduce
// no faster on the project's 2-core machine, where a spinning rank takes
// the processor from the rank it waits for.
var shmSpins = 64

var shmMagic = [8]byte{'T', 'T', 'C', 'L', 'S', 'H', 'M', '1'}

// shmCtl is the control block at the start of a region. The sender writes
// written and sendWaiting, the receiver consumed and recvWaiting.
type shmCtl struct {
	magic       [8]byte
	nonce       [16]byte
	slots       uint32
	slotBytes   uint32
	_           [32]byte
	written     atomic.Uint32 // offset 64: frames published by the sender
	recvWaiting atomic.Uint32 // the receiver is parked, waiting for written
	recvWake    atomic.Uint32 // ... to reach this
	_           [52]byte
	consumed    atomic.Uint32 // offset 128: frames released by the receiver
	sendWaiting atomic.Uint32 // the sender is parked, waiting for consumed
	sendWake    atomic.Uint32 // ... to reach this
	_           [52]byte
}

// Compile-time layout checks: counters on their own cache lines, the block
// within its page.
var (
	_ [64 - unsafe.Offsetof(shmCtl{}.written)]struct{}
	_ [unsafe.Offsetof(shmCtl{}.written) - 64]struct{}
	_ [128 - unsafe.Offsetof(shmCtl{}.consumed)]struct{}
	_ [unsafe.Offsetof(shmCtl{}.consumed) - 128]struct{}
	_ [shmCtlBytes - unsafe.Sizeof(shmCtl{})]struct{}
)

// shmGeometry is the stride between slots and the region's size for slots
// of slotBytes payload.
func shmGeometry(slots, slotBytes int) (stride, size int) {
	stride = (shmSlotHeader + slotBytes + 63) &^ 63
	size = shmCtlBytes + slots*stride
	return stride, (size + 4095) &^ 4095
}

// attach points l at a mapping of a region with the given geometry.
func (l *shmLink) attach(mem []byte, slots, slotBytes int) {
	l.mem = mem
	l.ctl = (*shmCtl)(unsafe.Pointer(unsafe.SliceData(mem)))
	l.slots = uint32(slots)
	l.stride, _ = shmGeometry(slots, slotBytes)
}

// slot is the bytes of the slot of frame k: header room, then payload.
func (l *shmLink) slot(k uint32) []byte {
	off := shmCtlBytes + int(k%l.slots)*l.stride
	return l.mem[off : off+l.stride : off+l.stride]
}

// ring wakes this end's waiter, if it is parked (or makes its next park
// return at once: the waiter then checks again).
func (l *shmLink) ring() {
	select {
	case l.bell <- struct{}{}:
	default:
	}
}

// wake tells the other end that counter moved to v, if it is parked waiting
// for that. Lowering the waiter's flag here makes it one doorbell per park,
// not one per frame until the waiter runs again: on a 64 MiB all-reduce of
// 2 ranks, 263 doorbells per operation and rank became 72, and parks fell
// from 109 to 72 (fewer spurious wake-ups). The waiter raises the flag again
// if it must wait again. The write
// fails only if the connection is gone, which its reading goroutine reports.
func (l *shmLink) wake(v uint32, waiting, wakeAt *atomic.Uint32) {
	if waiting.Load() != 0 && int32(v-wakeAt.Load()) >= 0 && waiting.CompareAndSwap(1, 0) {
		_, _ = l.conn.Write(l.doorbell[:])
	}
}

// shmWait blocks until counter reaches target (modulo 2^32), this rank
// fails, the link's peer is gone with nothing left to wait for, or the
// operation's deadline passes. Once parked, it asks to be woken when
// counter reaches wakeAt (at or after target).
func (c *Comm) shmWait(l *shmLink, counter *atomic.Uint32, target, wakeAt uint32, waiting, wake *atomic.Uint32, what string, peer int) error {
	for spin := 0; ; spin++ {
		if c.dead.Load() {
			return c.firstErr()
		}
		if int32(counter.Load()-target) >= 0 {
			raceAcquire()
			return nil
		}
		if spin < shmSpins {
			continue
		}

		wake.Store(wakeAt)
		waiting.Store(1)
		if int32(counter.Load()-target) >= 0 {
			waiting.Store(0)
			raceAcquire()
			return nil
		}
		if c.dead.Load() {
			waiting.Store(0)
			return c.firstErr()
		}
		if g := l.gone.Load(); g != nil {
			waiting.Store(0)
			return c.opErr(fmt.Errorf("%s rank %d: %w", what, peer, g.err))
		}
		d := time.Until(c.deadline)
		if d <= 0 {
			waiting.Store(0)
			return c.ioErr(what, peer, os.ErrDeadlineExceeded)
		}
		l.timer.Reset(d)
		select {
		case <-l.bell:
		case <-c.failed:
		case <-l.timer.C:
		}
		l.timer.Stop()
		waiting.Store(0)
	}
}

// shmSend is writeFrame on a shared-memory link.
func (c *Comm) shmSend(h *header, payload []byte) error {
	l := c.sendShm
	ctl := l.ctl
	need := l.next + 1 - l.slots
	if err := c.shmWait(l, &ctl.consumed, need, need+l.slots/2-1, &ctl.sendWaiting, &ctl.sendWake, "send to", c.right); err != nil {
		return err
	}
	c.shmPublish(h, payload)
	return nil
}

// shmPublish writes frame h into its slot (the payload unless the receiver
// put it there already) and publishes it; the slot is free.
func (c *Comm) shmPublish(h *header, payload []byte) {
	l := c.sendShm
	ctl := l.ctl
	s := l.slot(l.next)
	h.encode((*[headerLen]byte)(s))
	if l.forwarded[l.next%l.slots] != l.next+1 {
		copy(s[shmSlotHeader:], payload)
	}
	l.next++
	raceRelease()
	ctl.written.Store(l.next)
	l.wake(l.next, &ctl.recvWaiting, &ctl.recvWake)
	c.sentUnits.Add(1)
}

// forwardSlot returns where the segment of received frame u (n bytes) may be
// written for the right neighbour, and the frame that will carry it: the
// frame's slot, if the right link is shared memory and the slot is free now.
func (c *Comm) forwardSlot(u, n int) ([]byte, int) {
	l := c.sendShm
	if l == nil {
		return nil, 0
	}
	k, ok := c.p.forwardOf(u)
	if !ok {
		return nil, 0
	}
	abs := c.sendBase + uint32(k)
	if int32(l.ctl.consumed.Load()-(abs+1-l.slots)) < 0 {
		return nil, 0
	}
	raceAcquire() // the sender is done with the slot's (and its mark's) last use
	return l.slot(abs)[shmSlotHeader : shmSlotHeader+n], k
}

// forwarded records that this operation's frame k is in its slot already.
// The sender reads the mark after waiting for the received frame it
// forwards, which orders the two.
func (c *Comm) forwarded(k int) {
	abs := c.sendBase + uint32(k)
	c.sendShm.forwarded[abs%c.sendShm.slots] = abs + 1
}

// shmRecv waits for the next frame on the shared-memory link from the left,
// checks it is the frame want and returns its payload, in the slot: the
// caller reads it, then calls shmRelease.
func (c *Comm) shmRecv(want *header) ([]byte, error) {
	l := c.recvShm
	ctl := l.ctl
	if err := c.shmWait(l, &ctl.written, l.next+1, l.next+1, &ctl.recvWaiting, &ctl.recvWake, "recv from", c.left); err != nil {
		return nil, err
	}
	return c.shmFrame(want)
}

// shmFrame checks that the frame in the next slot from the left, which has
// landed, is the frame want and returns its payload.
func (c *Comm) shmFrame(want *header) ([]byte, error) {
	s := c.recvShm.slot(c.recvShm.next)
	copy(c.recvHdr[:], s)
	h, err := decodeHeader(&c.recvHdr)
	switch {
	case err != nil:
		return nil, c.opErr(fmt.Errorf("recv from rank %d: shared memory: %w", c.left, err))
	case h.typ != frameData:
		return nil, c.opErr(fmt.Errorf("recv from rank %d: shared memory: frame type %d in a slot", c.left, h.typ))
	}
	if err := h.expect(want); err != nil {
		return nil, c.opErr(fmt.Errorf("recv from rank %d: %w: %w", c.left, ErrMismatch, err))
	}
	if int(h.length) > len(s)-shmSlotHeader { // cannot pass expect; kept as the bound
		return nil, c.opErr(fmt.Errorf("recv from rank %d: frame of %d bytes over a slot", c.left, h.length))
	}
	return s[shmSlotHeader : shmSlotHeader+int(h.length)], nil
}

// driveShm runs the operation in c.p on the calling goroutine alone, when
// both of this rank's links are shared memory: it publishes every frame it
// can (its segment ready, its slot free), then takes the next received frame
// if it has landed, and parks on both links' bells when neither moves.
func (c *Comm) driveShm() error {
	p := &c.p
	sl, rl := c.sendShm, c.recvShm
	sunits, runits := p.sendUnits(), p.recvUnits()
	hs := header{typ: frameData, op: p.op, seq: c.seq, total: p.total, arg: uint32(p.root)}
	want := hs
	us, ur := 0, 0 // next frame to send, to receive
	for spin := 0; us < sunits || ur < runits; spin++ {
		if c.dead.Load() {
			return c.firstErr()
		}
		moved, slotBusy := false, false
		for us < sunits && ur >= p.sendNeeds(us) {
			if int32(sl.ctl.consumed.Load()-(sl.next+1-sl.slots)) < 0 {
				slotBusy = true
				break
			}
			raceAcquire()
			seg := p.sendSegment(us)
			hs.unit, hs.length = uint32(us), uint32(len(seg))
			c.shmPublish(&hs, seg)
			us++
			moved = true
		}
		if ur < runits && int32(rl.ctl.written.Load()-(rl.next+1)) >= 0 {
			raceAcquire()
			seg, reduce, final := p.recvSegment(ur)
			want.unit, want.length = uint32(ur), uint32(len(seg))
			in, err := c.shmFrame(&want)
			if err != nil {
				return err
			}
			c.land(ur, seg, in, reduce, final)
			c.shmRelease()
			c.received(ur)
			ur++
			moved = true
		}
		if moved {
			spin = 0
			continue
		}
		if spin < shmSpins {
			continue
		}
		if err := c.shmPark(ur < runits, slotBusy); err != nil {
			return err
		}
	}
	return nil
}

// shmPark parks driveShm until a frame lands from the left (waitRecv) or
// slots free up on the right (waitSend), this rank fails, or a link it waits
// on is gone, or the deadline passes; as shmWait, for two links.
func (c *Comm) shmPark(waitRecv, waitSend bool) error {
	rl, sl := c.recvShm, c.sendShm
	rc, sc := rl.ctl, sl.ctl
	landed := func() bool { return int32(rc.written.Load()-(rl.next+1)) >= 0 }
	free := func() bool { return int32(sc.consumed.Load()-(sl.next+1-sl.slots)) >= 0 }
	if waitRecv {
		rc.recvWake.Store(rl.next + 1)
		rc.recvWaiting.Store(1)
		defer rc.recvWaiting.Store(0)
	}
	if waitSend {
		need := sl.next + 1 - sl.slots
		sc.sendWake.Store(need + sl.slots/2 - 1)
		sc.sendWaiting.Store(1)
		defer sc.sendWaiting.Store(0)
	}
	switch {
	case waitRecv && landed(), waitSend && free():
		return nil
	case c.dead.Load():
		return c.firstErr()
	}
	if g := rl.gone.Load(); waitRecv && g != nil {
		return c.opErr(fmt.Errorf("recv from rank %d: %w", c.left, g.err))
	}
	if g := sl.gone.Load(); waitSend && g != nil {
		return c.opErr(fmt.Errorf("send to rank %d: %w", c.right, g.err))
	}
	d := time.Until(c.deadline)
	if d <= 0 {
		if waitRecv {
			return c.ioErr("recv from", c.left, os.ErrDeadlineExceeded)
		}
		return c.ioErr("send to", c.right, os.ErrDeadlineExceeded)
	}
	rl.timer.Reset(d)
	select {
	case <-rl.bell:
	case <-sl.bell:
	case <-c.failed:
	case <-rl.timer.C:
	}
	rl.timer.Stop()
	return nil
}

// shmRelease hands the slot of the frame just read back to the sender.
func (c *Comm) shmRelease() {
	l := c.recvShm
	l.next++
	raceRelease()
	l.ctl.consumed.Store(l.next)
	l.wake(l.next, &l.ctl.sendWaiting, &l.ctl.sendWake)
}

// watchShmLink reads a shared-memory link's connection for its whole life:
// doorbells ring the bell; anything else ends the link: a goodbye (only from
// the left), the connection's end, or bytes that are neither.
func (c *Comm) watchShmLink(l *shmLink, peer int, fromLeft bool) {
	defer c.wg.Done()
	var buf [64]byte
	var err error
	for err == nil {
		var n int
		n, err = l.conn.Read(buf[:])
		for i := 0; i < n && err == nil; i++ {
			switch {
			case buf[i] == doorbell:
				l.ring()
			case buf[i] == frameBye && fromLeft:
				err = readBye(l.conn, buf[i:n])
			default:
				err = fmt.Errorf("byte %#x on the connection of a shared-memory link", buf[i])
			}
		}
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
		err = fmt.Errorf("%w (rank %d died, failed or closed its Comm): %w", ErrPeerGone, peer, err)
	}
	l.gone.Store(&goneErr{err})
	l.ring()
}

// readBye reads the goodbye that starts with have (the rest of a read) and
// returns it as an ErrPeerGone error with its reason.
func readBye(r io.Reader, have []byte) error {
	r = io.MultiReader(bytes.NewReader(have), r)
	var b [headerLen]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return err
	}
	h, err := decodeHeader(&b)
	if err != nil || h.typ != frameBye {
		return fmt.Errorf("bad goodbye on the connection of a shared-memory link: %v", err)
	}
	reason := make([]byte, h.length)
	_, _ = io.ReadFull(r, reason)
	return fmt.Errorf("%w: %s", ErrPeerGone, reason)
}

// holdShm keeps the mappings alive for an operation; false once Close has
// released them.
func (c *Comm) holdShm() bool {
	c.stateMu.Lock()
	defer c.stateMu.Unlock()
	if c.shmReleased {
		return false
	}
	c.shmUsers++
	return true
}

func (c *Comm) dropShm() {
	c.stateMu.Lock()
	defer c.stateMu.Unlock()
	c.shmUsers--
	if c.shmUsers == 0 && c.shmReleased {
		c.unmapShm()
	}
}

// releaseShm unmaps the regions now, or when the operation in flight ends
// (Close may run inside it, from a test hook or another goroutine).
func (c *Comm) releaseShm() {
	c.stateMu.Lock()
	defer c.stateMu.Unlock()
	if c.shmReleased {
		return
	}
	c.shmReleased = true
	if c.shmUsers == 0 {
		c.unmapShm()
	}
}

func (c *Comm) unmapShm() {
	for _, l := range []*shmLink{c.sendShm, c.recvShm} {
		if l != nil && l.mem != nil {
			shmUnmap(l.mem)
			l.mem, l.ctl = nil, nil
		}
	}
	c.unmapShared()
}
