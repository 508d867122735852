package collective

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tempotrain/tempotrain/api"
)

// Op is a reduction.
type Op int

const (
	// Sum adds the ranks' values.
	Sum Op = iota
	// Mean adds the ranks' values and divides by the world size.
	Mean
)

func (o Op) String() string {
	switch o {
	case Sum:
		return "Sum"
	case Mean:
		return "Mean"
	}
	return fmt.Sprintf("Op(%d)", int(o))
}

// Defaults of Options.
//
// Segment and socket buffer sizes were chosen by measuring processor time per
// all-reduce (BenchmarkAllReduce64MiB2Ranks/4Ranks, cpu-ms/op/rank) on the
// project's 2-core machine, whose L2 cache is 1 MiB per core: the ring is
// bound by memory traffic, mostly the kernel's copies, and 256 KiB segments
// with 256 KiB socket buffers keep a segment, its scratch copy and the
// kernel's buffers in L2. They cost 15-25% less than 1 MiB segments with 4 MiB
// buffers (28-30 against 34-39 ms per 64 MiB all-reduce, 2 ranks; 43-45
// against 50-58 ms, 4 ranks). On a link with a long round trip, raise
// SocketBuffer (or set -1 for the kernel's autotuning): a TCP connection
// carries at most about twice SocketBuffer per round trip.
//
// A group whose ring runs on TCP alone (ranks on different hosts, or
// TransportTCP) takes DefaultTCPSegmentBytes instead, unless Options sets
// SegmentBytes: measured with separate processes (go run ./bench/allreduce),
// 2 MiB segments take 25-35% less wall time per 64 MiB all-reduce than
// 256 KiB ones on loopback TCP (4 ranks: 61 against 82 ms, rank 0's
// processor time 29 against 38 ms) and between network namespaces over veth
// links (4 ranks: 85 against 131-137 ms); fewer, larger frames cost fewer
// wake-ups per byte, which the shared-memory links do not pay. Such a group
// also takes DefaultTCPSocketBuffer unless Options sets SocketBuffer: with
// 2 MiB segments and CUBIC, 512 KiB buffers took 53 against 61 ms (4
// ranks) and 20 against 23-24 ms (2 ranks) on loopback, and 58-60 against
// 67-73 ms between network namespaces over unlimited veth (4 ranks), the
// same at 10 Gbit/s (84-87% of the link).
const (
	DefaultTimeout      = 5 * time.Minute
	DefaultSegmentBytes = 256 << 10
	// DefaultTCPSegmentBytes is the segment of a group linked by TCP only.
	DefaultTCPSegmentBytes = 2 << 20
	DefaultSocketBuffer    = 256 << 10
	// DefaultTCPSocketBuffer is the socket buffer of a group linked by TCP
	// only (with its 2 MiB segments).
	DefaultTCPSocketBuffer = 512 << 10
	// DefaultCongestion is Options.Congestion's default: CUBIC, window-based
	// and not paced. BBR, the default of some kernels (this project's
	// machine among them), paces every burst with a timer where the link
	// has no fq qdisc; between network namespaces over veth links it took
	// 30-45% more processor time per all-reduce and 30% longer (64 MiB, 4
	// ranks, go run ./bench/allreduce -netns: README "The ring at link
	// speed").
	DefaultCongestion = "cubic"
	// DefaultMaxGather is Options.MaxGatherBytes's default.
	DefaultMaxGather = 1 << 30
	// handshakeTimeout bounds one connection's whole handshake (TLS's
	// included), so that a stray connection cannot hold up Connect.
	handshakeTimeout = 10 * time.Second
	// firstFlightTimeout bounds how long an accepted connection may take to
	// send its whole first flight (hello and MAC, wire.go): a dialer sends
	// it as soon as it connects, so one that says nothing or trickles gives
	// its handshake slot up soon.
	firstFlightTimeout = 2 * time.Second
)

// Options configure Connect.
type Options struct {
	// Rank of this process in [0, Size).
	Rank int
	// Size is the number of ranks (world size), at least 1.
	Size int
	// Token is a per-attempt secret shared by all ranks. Required. Both
	// ends of every connection prove to each other that they hold it (a
	// challenge-response over fresh nonces, HMAC-SHA256): it never crosses
	// the network, a recorded handshake cannot be replayed, and a
	// connection that cannot prove it is refused. The data that follows is
	// not encrypted.
	Token string
	// Timeout is the deadline of every operation: an operation returns an
	// error at the latest this long after it started (or at its context's
	// deadline, if sooner). Default DefaultTimeout (5m).
	Timeout time.Duration
	// ConnectTimeout bounds Connect: all neighbours must have connected and
	// passed the handshake within it. Default: Timeout.
	ConnectTimeout time.Duration
	// SegmentBytes is the unit the ring pipelines: a rank reduces one segment
	// while the next is on the wire. Rounded down to a multiple of 8; must be
	// the same on every rank (the handshake checks). Default
	// DefaultSegmentBytes (256 KiB), which keeps a segment in cache, or
	// DefaultTCPSegmentBytes (2 MiB) where no rank has a shared-memory link.
	SegmentBytes int
	// segmentDefault: SegmentBytes was not set; Connect may raise it for a
	// TCP-only group (agreeSegment).
	segmentDefault bool
	// SocketBuffer sets SO_SNDBUF and SO_RCVBUF of the ring's connections
	// (the kernel doubles it, and caps it at net.core.wmem_max/rmem_max).
	// Default DefaultSocketBuffer (256 KiB), or DefaultTCPSocketBuffer
	// (512 KiB) where no rank has a shared-memory link; negative leaves the
	// kernel's autotuning, better for links with a long round trip.
	SocketBuffer int
	// socketBufferDefault: SocketBuffer was not set; agreeSegment may raise
	// it for a TCP-only group.
	socketBufferDefault bool
	// Congestion names the TCP congestion control of the ring's connections
	// (setsockopt TCP_CONGESTION, Linux). Default DefaultCongestion, or
	// what TEMPOTRAIN_COLLECTIVE_CONGESTION in the environment says;
	// "system" keeps the kernel's default. A name the kernel does not have,
	// or does not allow this process (without CAP_NET_ADMIN only those in
	// net.ipv4.tcp_allowed_congestion_control), keeps the kernel's default
	// too: Comm.Congestion says what a link got.
	Congestion string
	// Transport selects how data reaches a neighbour: TransportAuto (the
	// default) uses shared memory with a neighbour on the same host and TCP
	// otherwise; TransportTCP only TCP; TransportSHM requires shared memory.
	// The TCP connections exist in every case: they carry the handshake and,
	// on a shared-memory link, tell a rank that its neighbour is gone.
	// TEMPOTRAIN_COLLECTIVE_SHM=0 in the environment makes TransportAuto
	// mean TransportTCP.
	Transport Transport
	// Encrypt runs the TCP links of this rank over TLS 1.3, bound to the
	// attempt's token (tlsLink): for networks you do not trust. A link is
	// encrypted when either end asks; shared-memory links, which never
	// leave the host, are not. TEMPOTRAIN_COLLECTIVE_TLS=1 in the
	// environment sets it. Default false.
	Encrypt bool
	// MaxGatherBytes bounds what an AllGather may receive in all (every
	// rank's bytes together): a peer announcing more fails the operation
	// instead of making this rank allocate it. Default DefaultMaxGather
	// (1 GiB); the runtime's gathers (category sets, metrics) need far less.
	MaxGatherBytes int64
	// Observer, when set, is called after every operation on the calling
	// goroutine with the operation's ctx, whether it succeeded or not (also
	// on a group of one). It must be cheap; tracing and metrics hang off it.
	// Default nil.
	Observer func(ctx context.Context, info OpInfo)
	// lineMinRanks, for tests and benchmarks: the smallest group that runs
	// small operations on the line (line.go); 0 the default, negative never.
	lineMinRanks int
}

// OpInfo describes one finished collective operation.
type OpInfo struct {
	Op       string        // "allreduce", "broadcast", "allgather", "barrier"
	Bytes    int64         // payload bytes of this rank's buffer
	Start    time.Time     // when the call was made (before waiting for an operation in flight)
	Duration time.Duration // from Start until the operation returned
	Err      error         // the operation's error, nil on success
	// Direct: an all-reduce that ran the direct algorithm over shared
	// buffers (AllocShared) instead of the ring.
	Direct bool
}

// Names of operations in OpInfo.Op.
const (
	obsAllReduce = "allreduce"
	obsBroadcast = "broadcast"
	obsAllGather = "allgather"
	obsBarrier   = "barrier"
)

// began is the start time of an operation for the Observer; without one it
// costs nothing.
func (c *Comm) began() time.Time {
	if c.opts.Observer == nil {
		return time.Time{}
	}
	return time.Now()
}

// observe reports a finished operation to the Observer, if any.
func (c *Comm) observe(ctx context.Context, op string, bytes int, start time.Time, err error) {
	c.observeDirect(ctx, op, bytes, start, err, false)
}

func (c *Comm) observeDirect(ctx context.Context, op string, bytes int, start time.Time, err error, direct bool) {
	if c.opts.Observer == nil {
		return
	}
	c.opts.Observer(ctx, OpInfo{Op: op, Bytes: int64(bytes), Start: start, Duration: time.Since(start), Err: err, Direct: direct})
}

func (o Options) withDefaults() Options {
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = o.Timeout
	}
	if o.SegmentBytes <= 0 {
		o.SegmentBytes = DefaultSegmentBytes
		o.segmentDefault = true
	}
	o.SegmentBytes &^= 7
	if o.SegmentBytes == 0 {
		o.SegmentBytes = 8
	}
	if o.SocketBuffer == 0 {
		o.SocketBuffer = DefaultSocketBuffer
		o.socketBufferDefault = true
	}
	if o.Congestion == "" {
		o.Congestion = DefaultCongestion
		if env := os.Getenv(EnvCongestion); env != "" {
			o.Congestion = env
		}
	}
	if o.MaxGatherBytes <= 0 {
		o.MaxGatherBytes = DefaultMaxGather
	}
	return o
}

func (o Options) validate(npeers int) error {
	switch {
	case o.Size < 1:
		return fmt.Errorf("collective: Size %d: must be at least 1", o.Size)
	case o.Rank < 0 || o.Rank >= o.Size:
		return fmt.Errorf("collective: Rank %d: must be in [0, %d)", o.Rank, o.Size)
	case npeers != o.Size:
		return fmt.Errorf("collective: %d peer addresses for Size %d", npeers, o.Size)
	case o.Token == "":
		return errors.New("collective: empty Token: every attempt needs a secret")
	case len(o.Token) > maxToken:
		return fmt.Errorf("collective: Token of %d bytes: at most %d", len(o.Token), maxToken)
	case o.SegmentBytes > 1<<30:
		return fmt.Errorf("collective: SegmentBytes %d: at most 1 GiB", o.SegmentBytes)
	case !validCongestion(o.Congestion):
		return fmt.Errorf("collective: Congestion %q (Options.Congestion or "+EnvCongestion+"): want a kernel's algorithm name (such as cubic, bbr, reno: at most 15 of a-z, 0-9, _) or \"system\"", o.Congestion)
	case o.Transport > TransportSHM:
		return fmt.Errorf("collective: unknown %v", o.Transport)
	case o.Transport == TransportSHM && !shmSupported:
		return fmt.Errorf("collective: TransportSHM: %w", errNoShmHere)
	}
	return nil
}

// EnvCongestion names the environment variable that sets
// Options.Congestion where the Options leave it empty (an operator's switch,
// read at Connect): an algorithm's name, or "system".
const EnvCongestion = "TEMPOTRAIN_COLLECTIVE_CONGESTION"

// validCongestion says whether name can be a TCP congestion control's name
// (TCP_CA_NAME_MAX is 16 with the NUL).
func validCongestion(name string) bool {
	if name == "" || len(name) > 15 {
		return false
	}
	for _, r := range name {
		if (r < 'a' || r > 'z') && (r < '0' || r > '9') && r != '_' {
			return false
		}
	}
	return true
}

// Errors callers may branch on.
var (
	// ErrClosed: the Comm was closed (by Close, here).
	ErrClosed = errors.New("collective: comm closed")
	// ErrAborted: the Comm was cut by Abort.
	ErrAborted = errors.New("collective: comm aborted")
	// ErrRefused: a peer refused this rank's connection (wrong token, world
	// size, rank, protocol version, byte order or segment size).
	ErrRefused = errors.New("connection refused by peer")
	// ErrPeerGone: a neighbour's connection ended: it failed, was killed, or
	// closed its Comm.
	ErrPeerGone = errors.New("connection to peer lost")
	// ErrMismatch: ranks called different collectives, or the same one with
	// different lengths or roots.
	ErrMismatch = errors.New("collective mismatch across ranks")
)

// Comm is one rank's end of a connected group. Operations are collective:
// every rank must call the same operations in the same order, with buffers of
// the same length (AllGather excepted) and the same root. One operation runs
// at a time; concurrent calls are serialised, which only makes sense if every
// rank serialises them alike.
//
// Any failed operation (peer lost, deadline, cancelled context, mismatch, a
// call this rank cannot make such as a root out of range) leaves the Comm
// unusable: the byte streams between ranks are then in an
// unknown state. It closes its connections at once so that its neighbours
// fail fast too, and every later operation returns the first error. The
// runtime then starts a new attempt with a new Comm.
type Comm struct {
	rank, size  int
	left, right int // ranks this one receives from and sends to
	opts        Options

	ln net.Listener
	// The ring's connections (TCP; any net.Conn in the fuzz test), nil when
	// size == 1.
	send net.Conn // to right
	recv net.Conn // from left
	// Shared-memory links (shm.go), nil where the link is TCP. The TCP
	// connection of such a link carries no data, only a goodbye.
	sendShm, recvShm *shmLink

	opMu     sync.Mutex // one operation at a time; guards seq, p, deadline
	seq      uint32
	p        plan
	deadline time.Time // of the operation in flight
	sendBase uint32    // c.sendShm's frame count when the operation started

	// recvDone counts the frames the receiver has finished this operation;
	// the sender waits on it for frames it forwards. wake (capacity 1) nudges
	// a waiting sender; it never blocks the receiver.
	recvDone  atomic.Int64
	wake      chan struct{}
	startSend chan struct{}
	sendDone  chan error
	watchCtx  chan context.Context
	watchEnd  chan struct{}

	scratch   []byte // receives one segment to be reduced
	sendHdr   [headerLen]byte
	recvHdr   [headerLen]byte
	sendIov   [2][]byte
	sendBufs  net.Buffers
	hookRecv  func(unit int) // tests: called after each received frame
	sentUnits atomic.Int64   // frames sent this operation, for error messages

	stateMu sync.Mutex
	err     error         // first failure; guarded by stateMu
	failed  chan struct{} // closed at the first failure (or Close)
	dead    atomic.Bool   // set at the first failure, for shared-memory waiters
	quit    chan struct{} // closed by Close/Abort: goroutines exit
	quitted bool
	wg      sync.WaitGroup
	// Operations using the shared-memory mappings, and whether Close has
	// released them (the last operation out unmaps); guarded by stateMu.
	shmUsers    int
	shmReleased bool

	// Shared buffers (shared.go): this rank's mappings of every rank's
	// region, by registration (nil where the group could not share);
	// guarded by opMu, and stateMu to append. anyShared: some registration
	// shared memory, so large all-reduces exchange where their buffers are.
	shared     []*peerViews
	anyShared  bool
	dx         []byte        // the direct all-reduce's entry exchange
	dviews     [][]byte      // every rank's buffer, during a direct all-reduce
	dacc       []byte        // its scratch segment
	directOps  int           // direct all-reduces done, for tests
	hookDirect func(seg int) // tests: called before each segment a direct all-reduce computes
	shareDir   string        // tests: where AllocShared creates regions, instead of /dev/shm
}

// Listen opens the TCP listener of a rank; the runtime publishes ln.Addr()
// to the other ranks and passes ln to Connect, which owns it from then on.
func Listen(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("collective: listen on %s: %w", addr, err)
	}
	return ln, nil
}

// Rank is this rank's index in [0, Size).
func (c *Comm) Rank() int { return c.rank }

// Size is the number of ranks.
func (c *Comm) Size() int { return c.size }

// Timeout is the bound on each operation (Options.Timeout).
func (c *Comm) Timeout() time.Duration { return c.opts.Timeout }

func newComm(ln net.Listener, o Options) *Comm {
	c := &Comm{
		rank:      o.Rank,
		size:      o.Size,
		left:      (o.Rank - 1 + o.Size) % o.Size,
		right:     (o.Rank + 1) % o.Size,
		opts:      o,
		ln:        ln,
		wake:      make(chan struct{}, 1),
		startSend: make(chan struct{}),
		sendDone:  make(chan error, 1),
		watchCtx:  make(chan context.Context),
		watchEnd:  make(chan struct{}),
		failed:    make(chan struct{}),
		quit:      make(chan struct{}),
	}
	c.p.bounds = make([]int, o.Size+1)
	return c
}

// start launches the Comm's two goroutines once its connections are up.
func (c *Comm) start() {
	// float64 backing keeps the scratch segment aligned for either float type.
	if c.recvShm == nil {
		c.scratch = bytesOf(make([]float64, c.opts.SegmentBytes/8))
	}
	c.wg.Add(2)
	go c.sender()
	go c.watcher()
	if c.recvShm != nil {
		c.recvShm.setConn(c.recv)
		c.wg.Add(1)
		go c.watchShmLink(c.recvShm, c.left, true)
	}
	if c.sendShm != nil {
		c.sendShm.setConn(c.send)
		c.wg.Add(1)
		go c.watchShmLink(c.sendShm, c.right, false)
	}
}

// fail records the first failure and closes the connections, which unblocks
// this rank's I/O and tells its neighbours at once (they fail in turn, so
// a failure travels round the ring instead of waiting for deadlines).
func (c *Comm) fail(err error) {
	c.failWith(err, false)
}

func (c *Comm) failWith(err error, abrupt bool) {
	c.stateMu.Lock()
	defer c.stateMu.Unlock()
	if c.err != nil {
		return
	}
	c.err = err
	close(c.failed)
	c.dead.Store(true)
	for _, conn := range []net.Conn{c.send, c.recv} {
		if conn == nil {
			continue
		}
		if tc, ok := conn.(*tls.Conn); ok {
			// Close the socket, not the session: a close_notify could
			// block on a peer that reads nothing.
			conn = tc.NetConn()
		}
		if tc, ok := conn.(*net.TCPConn); ok && abrupt {
			// Linger 0 makes close send RST, as a crashed host's kernel
			// or a network fault would, instead of an orderly FIN.
			_ = tc.SetLinger(0)
		}
		_ = conn.Close()
	}
	if c.ln != nil {
		_ = c.ln.Close()
	}
}

func (c *Comm) firstErr() error {
	c.stateMu.Lock()
	defer c.stateMu.Unlock()
	return c.err
}

// Close says goodbye to the right neighbour if no operation is in flight,
// closes the connections and the listener, and returns once every goroutine
// of the Comm has exited. An operation in flight fails with ErrClosed.
// Shared-memory mappings are released when the operation in flight, if any,
// has returned. Close is idempotent.
func (c *Comm) Close() error {
	if c.send != nil && c.firstErr() == nil && c.opMu.TryLock() {
		c.sayBye()
		c.opMu.Unlock()
	}
	c.fail(fmt.Errorf("rank %d: %w", c.rank, ErrClosed))
	c.stop()
	c.wg.Wait()
	c.releaseShm()
	return nil
}

// Abort cuts this rank's connections abruptly (TCP RST, no goodbye), as a
// network fault or a crash would; tests and fault injection use it. The
// Comm's goroutines exit soon after; Close waits for them and releases the
// shared memory, so an aborted Comm must still be closed.
func (c *Comm) Abort() {
	c.failWith(fmt.Errorf("rank %d: %w", c.rank, ErrAborted), true)
	c.stop()
}

func (c *Comm) stop() {
	c.stateMu.Lock()
	defer c.stateMu.Unlock()
	if !c.quitted {
		c.quitted = true
		close(c.quit)
	}
}

// sayBye tells the right neighbour that this rank left on purpose, so that a
// neighbour still waiting for data reports a closed peer rather than a crash.
func (c *Comm) sayBye() {
	reason := fmt.Sprintf("rank %d closed its Comm", c.rank)
	h := header{typ: frameBye, length: uint32(len(reason))}
	h.encode(&c.sendHdr)
	_ = c.send.SetWriteDeadline(time.Now().Add(time.Second))
	c.sendIov = [2][]byte{c.sendHdr[:], []byte(reason)}
	c.sendBufs = c.sendIov[:]
	_, _ = c.sendBufs.WriteTo(c.send)
}

// watcher turns a cancelled context into a failure of the operation in
// flight. It runs for the Comm's lifetime so that an operation costs a
// channel send instead of a goroutine and allocations.
func (c *Comm) watcher() {
	defer c.wg.Done()
	for {
		select {
		case ctx := <-c.watchCtx:
			select {
			case <-ctx.Done():
				c.fail(c.opErr(fmt.Errorf("%w, with %d of %d frames received from rank %d and %d sent to rank %d",
					context.Cause(ctx), c.recvDone.Load(), c.p.recvUnits(), c.left, c.sentUnits.Load(), c.right)))
				select {
				case <-c.watchEnd:
				case <-c.quit:
					return
				}
			case <-c.watchEnd:
			case <-c.quit:
				return
			}
		case <-c.quit:
			return
		}
	}
}

// run executes the plan c.p (already filled in by the caller, under opMu):
// the sender goroutine sends, this goroutine receives.
func (c *Comm) run(ctx context.Context) error {
	if c.sendShm != nil || c.recvShm != nil {
		if !c.holdShm() {
			return fmt.Errorf("rank %d: %v: %w", c.rank, c.p.op, ErrClosed)
		}
		defer c.dropShm()
	}
	if err := c.firstErr(); err != nil {
		return fmt.Errorf("rank %d: %v: comm unusable after an earlier failure: %w", c.rank, c.p.op, err)
	}
	if err := ctx.Err(); err != nil {
		// The other ranks are entering this operation: failing the Comm
		// tells them now rather than at their deadline.
		err = c.opErr(err)
		c.fail(err)
		return err
	}
	deadline := time.Now().Add(c.opts.Timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	c.deadline = deadline
	if c.sendShm != nil {
		c.sendBase = c.sendShm.next // the sender is idle between operations
	}
	// A shared-memory link's connection is read by watchShmLink for its
	// whole life (a read deadline there would read as a lost peer); this
	// rank writes doorbells on both ends of it.
	if c.recvShm == nil {
		_ = c.recv.SetReadDeadline(deadline)
	} else {
		_ = c.recv.SetWriteDeadline(deadline)
	}
	_ = c.send.SetWriteDeadline(deadline)
	watching := ctx.Done() != nil
	if watching {
		select {
		case c.watchCtx <- ctx:
		case <-c.quit:
			return c.opErr(ErrClosed)
		}
	}
	c.recvDone.Store(0)
	c.sentUnits.Store(0)
	if c.sendShm != nil && c.recvShm != nil {
		// Both links shared memory: one goroutine drives both (shm.go).
		err := c.driveShm()
		if err != nil {
			c.fail(err)
		}
		c.endWatch(watching)
		if err != nil {
			return c.firstErr()
		}
		return nil
	}
	sending := c.p.sends()
	if sending {
		select {
		case c.startSend <- struct{}{}:
		case <-c.quit:
			c.endWatch(watching)
			return c.opErr(ErrClosed)
		}
	}
	var rerr, serr error
	if c.p.receives() {
		if rerr = c.receive(); rerr != nil {
			c.fail(rerr)
		}
	}
	if sending {
		// Always wait: the sender reads the caller's buffer until it is done.
		serr = <-c.sendDone
	}
	c.endWatch(watching)
	if rerr != nil || serr != nil {
		// The first failure is the cause; the other side's error, if any,
		// is only its consequence (a closed connection).
		return c.firstErr()
	}
	return nil
}

func (c *Comm) endWatch(watching bool) {
	if watching {
		select {
		case c.watchEnd <- struct{}{}:
		case <-c.quit:
		}
	}
}

// sender runs the sending half of each operation.
func (c *Comm) sender() {
	defer c.wg.Done()
	for {
		select {
		case <-c.startSend:
			err := c.sendPlan()
			if err != nil {
				c.fail(err)
			}
			c.sendDone <- err
		case <-c.quit:
			return
		}
	}
}

// waitRecv blocks until the receiver has finished n frames of this operation.
func (c *Comm) waitRecv(n int) error {
	for c.recvDone.Load() < int64(n) {
		select {
		case <-c.wake:
		case <-c.failed:
			return c.firstErr()
		}
	}
	return nil
}

// received publishes that frame unit is complete.
func (c *Comm) received(unit int) {
	c.recvDone.Store(int64(unit + 1))
	select {
	case c.wake <- struct{}{}:
	default:
	}
	if c.hookRecv != nil {
		c.hookRecv(unit)
	}
}

// writeFrame sends one header and payload with a single vectored write.
func (c *Comm) writeFrame(h *header, payload []byte) error {
	if c.sendShm != nil {
		return c.shmSend(h, payload)
	}
	h.encode(&c.sendHdr)
	c.sendIov[0], c.sendIov[1] = c.sendHdr[:], payload
	c.sendBufs = c.sendIov[:]
	if _, err := c.sendBufs.WriteTo(c.send); err != nil {
		return c.ioErr("send to", c.right, err)
	}
	c.sentUnits.Add(1)
	return nil
}

// readHeader reads the next frame header and checks it is the frame want.
func (c *Comm) readHeader(want *header) error {
	if _, err := io.ReadFull(c.recv, c.recvHdr[:]); err != nil {
		return c.ioErr("recv from", c.left, err)
	}
	h, err := decodeHeader(&c.recvHdr)
	if err != nil {
		return c.opErr(fmt.Errorf("recv from rank %d: %w", c.left, err))
	}
	if h.typ == frameBye {
		reason := make([]byte, h.length)
		_, _ = io.ReadFull(c.recv, reason)
		return c.opErr(fmt.Errorf("recv from rank %d: %w: %s", c.left, ErrPeerGone, reason))
	}
	if err := h.expect(want); err != nil {
		return c.opErr(fmt.Errorf("recv from rank %d: %w: %w", c.left, ErrMismatch, err))
	}
	return nil
}

func (c *Comm) readPayload(b []byte) error {
	if _, err := io.ReadFull(c.recv, b); err != nil {
		return c.ioErr("recv from", c.left, err)
	}
	return nil
}

// badCall fails the Comm for a call this rank cannot make (an unknown Op, a
// root out of range): the other ranks are entering the operation, and the
// failure tells them at once instead of at their deadline.
func (c *Comm) badCall(err error) error {
	err = fmt.Errorf("collective: rank %d: %w", c.rank, err)
	c.fail(err)
	return err
}

// opErr prefixes an error with this rank and the operation in flight.
func (c *Comm) opErr(err error) error {
	return fmt.Errorf("rank %d: %v #%d: %w", c.rank, c.p.op, c.seq, err)
}

// linkBlameGrace is how long a rank that timed out on a healthy link
// waits before reporting it.
const linkBlameGrace = 500 * time.Millisecond

// ioErr explains an I/O error on the connection with peer. A deadline is a
// *StallError naming the peer this rank waited for.
func (c *Comm) ioErr(what string, peer int, err error) error {
	stalled, down := false, false
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		stalled = true
		var why string
		if why, down = c.sendLinkStuck(); down {
			err = fmt.Errorf("%s (timeout %v or the context's), and the link from rank %d to rank %d is down (%s): %s: %w",
				api.CollectiveTimeoutText, c.opts.Timeout, c.rank, c.right, why, api.LinkDownText, err)
			break
		}
		err = fmt.Errorf("%s (timeout %v or the context's): %w", api.CollectiveTimeoutText, c.opts.Timeout, err)
		// Every rank of a ring that stalls times out at about the same
		// time. One whose own link is healthy waits a moment, so that a
		// rank that sees its link down (above) reports first and is blamed.
		time.Sleep(linkBlameGrace)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		err = fmt.Errorf("%w (rank %d died, failed or closed its Comm): %w", ErrPeerGone, peer, err)
	}
	err = c.opErr(fmt.Errorf("%s rank %d: %w", what, peer, err))
	if stalled {
		err = &StallError{Rank: c.rank, Peer: peer, Op: c.p.op.String(), Seq: int(c.seq), Timeout: c.opts.Timeout, LinkDown: down, err: err}
	}
	return err
}

// StallError is a collective operation that reached its deadline
// (Options.Timeout, or the context's) waiting for a neighbour: Peer is the
// rank this one waited to receive from, or to take what it sent. When a
// ring stalls because one rank stopped calling collectives (it hangs in its
// own code, or its process froze), following Peer from rank to rank ends at
// that rank, which the runtime then names. LinkDown: this rank saw its own
// link to its right neighbour drop packets, so the network is the cause.
type StallError struct {
	Rank, Peer int
	// Op is the operation in flight ("AllReduceFloat32", "Barrier", ...),
	// Seq its number on this Comm, counting from 1.
	Op       string
	Seq      int
	Timeout  time.Duration
	LinkDown bool
	err      error
}

func (e *StallError) Error() string {
	if e.err == nil { // one built outside this package (a torch collective's)
		return fmt.Sprintf("rank %d waited %v in %s for rank %d", e.Rank, e.Timeout, e.Op, e.Peer)
	}
	return e.err.Error()
}
func (e *StallError) Unwrap() error { return e.err }
