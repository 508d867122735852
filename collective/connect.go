package collective

// Connect: each rank dials its right neighbour and accepts its left one, at
// the same time (a ring where everyone waited to accept before dialing would
// deadlock). The dialer says hello (wire.go) with the world size, both ranks,
// its byte order and segment size; the acceptor refuses a connection that
// gets any of them wrong and tells the dialer why; then each end proves to
// the other that it holds the attempt's token (a challenge-response over both
// ends' nonces: the token never travels, and a recorded handshake cannot be
// replayed); the acceptor's final answer, which says whether the link runs
// over shared memory or TLS, is authenticated with the whole transcript, so
// a relay cannot turn TLS off. The acceptor handshakes every connection at
// once, in its own goroutine, and the first that completes both proofs is
// the link: connections that say nothing, strangers, and hellos left by
// dialers that gave up cannot keep the group from forming. Until its first
// flight proves the token, a connection holds one of a bounded number of
// slots, shared out by source address with a share of its own for the
// neighbour's (accept says how, and why a newcomer takes the oldest slot
// rather than being refused). The dialer retries refused TCP connections
// with backoff until the deadline (a peer may still be starting, or busy
// with strangers), but gives up at once when a peer refuses its hello or
// cannot prove the token, or its final answer is not authentic, since that
// will not change.
//
// Shared memory (shm.go) is negotiated in the same exchange: a dialer that
// may use it creates its region first and offers it in the hello with its
// host identity; an acceptor on the same host that may use it too maps the
// region, checks the nonce and unlinks the file, and says so in its reply.
// Both ends then agree on the link's transport; anything that fails on the
// way (another host, a full /dev/shm, shared memory turned off on one side)
// leaves the link on TCP, unless TransportSHM demands it.

import (
	"context"
	"crypto/hmac"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"slices"
	"sync"
	"syscall"
	"time"
)

// Connect joins the group: peers[i] is the address of rank i (peers[Rank],
// this rank's own, is not used). ln comes from Listen; Connect owns it from
// then on and closes it once the neighbours are connected (or on failure), so
// no stray connection can hang in its backlog. Connect returns when both
// neighbours are connected, within ConnectTimeout and ctx.
func Connect(ctx context.Context, ln net.Listener, peers []string, o Options) (*Comm, error) {
	o = o.withDefaults()
	if err := o.validate(len(peers)); err != nil {
		_ = ln.Close()
		return nil, err
	}
	c := newComm(ln, o)
	if o.Size == 1 {
		_ = ln.Close()
		c.ln = nil
		return c, nil
	}
	deadline := time.Now().Add(o.ConnectTimeout)
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	// Accept has no context: a deadline on the listener, moved to now when
	// ctx ends early, unblocks it.
	type deadliner interface{ SetDeadline(time.Time) error }
	if dl, ok := ln.(deadliner); ok {
		_ = dl.SetDeadline(deadline)
		stop := context.AfterFunc(ctx, func() { _ = dl.SetDeadline(time.Unix(1, 0)) })
		defer stop()
	}

	type dialed struct {
		conn net.Conn
		shm  *shmLink
		err  error
	}
	dialc := make(chan dialed, 1)
	go func() {
		conn, shm, err := c.dial(ctx, peers[c.right], deadline)
		dialc <- dialed{conn, shm, err}
	}()
	recv, recvShm, aerr := c.accept(ctx, peers[c.left], deadline)
	if aerr != nil {
		cancel()
	}
	d := <-dialc
	_ = ln.Close()
	c.ln = nil
	c.sendShm, c.recvShm = d.shm, recvShm
	if aerr != nil || d.err != nil {
		c.unmapShm()
		for _, conn := range []net.Conn{recv, d.conn} {
			if conn != nil {
				_ = conn.Close()
			}
		}
		if aerr != nil && d.err != nil && !errors.Is(d.err, context.Canceled) {
			return nil, errors.Join(aerr, d.err)
		}
		if aerr != nil {
			return nil, aerr
		}
		return nil, d.err
	}
	c.send, c.recv = d.conn, recv
	c.start()
	if o.segmentDefault {
		if err := c.agreeSegment(ctx); err != nil {
			_ = c.Close()
			return nil, err
		}
	}
	return c, nil
}

// agreeSegment settles the segment size of a group whose SegmentBytes was
// left to the default: every rank says whether both its ring links are TCP
// (one byte each, a ring all-gather of small frames), and if all are, every
// rank moves to DefaultTCPSegmentBytes, and to DefaultTCPSocketBuffer where
// Options left SocketBuffer. Every rank sees the same bytes, so all pick the
// same size.
func (c *Comm) agreeSegment(ctx context.Context) error {
	c.opMu.Lock()
	defer c.opMu.Unlock()
	rec := make([]byte, c.size)
	if c.sendShm == nil && c.recvShm == nil {
		rec[c.rank] = 1
	}
	if err := c.gatherRecords(ctx, opLinks, rec, 1, uint64(len(rec))); err != nil {
		return err
	}
	for _, tcp := range rec {
		if tcp != 1 {
			return nil
		}
	}
	c.opts.SegmentBytes = DefaultTCPSegmentBytes
	c.scratch = bytesOf(make([]float64, c.opts.SegmentBytes/8))
	if c.opts.socketBufferDefault {
		c.opts.SocketBuffer = DefaultTCPSocketBuffer
		if tc := tcpOf(c.send); tc != nil {
			_ = tc.SetWriteBuffer(c.opts.SocketBuffer)
		}
		if tc := tcpOf(c.recv); tc != nil {
			_ = tc.SetReadBuffer(c.opts.SocketBuffer)
		}
	}
	return nil
}

func (c *Comm) helloFor() hello {
	return hello{
		tls:     c.opts.wantTLS(),
		version: protocolVersion,
		order:   nativeOrder,
		size:    uint32(c.size),
		from:    uint32(c.rank),
		to:      uint32(c.right),
		segment: uint32(c.opts.SegmentBytes),
		nonce:   newNonce(),
	}
}

// dial connects to the right neighbour and passes its handshake; it returns
// the link's shared-memory region if the neighbour took it.
func (c *Comm) dial(ctx context.Context, addr string, deadline time.Time) (net.Conn, *shmLink, error) {
	fail := func(err error) error {
		return fmt.Errorf("rank %d: connect to rank %d at %s: %w", c.rank, c.right, addr, err)
	}
	d := net.Dialer{Control: func(_, _ string, raw syscall.RawConn) error {
		setCongestion(raw, c.opts.Congestion)
		return nil
	}}
	backoff := 10 * time.Millisecond
	var last error
	for {
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			tc := conn.(*net.TCPConn)
			if c.opts.SocketBuffer > 0 {
				_ = tc.SetWriteBuffer(c.opts.SocketBuffer)
			}
			var shm *shmLink
			var tlsOn bool
			shm, tlsOn, err = c.sayHello(tc, deadline)
			if err == nil && tlsOn {
				var sc net.Conn
				if sc, err = c.tlsLink(tc, false, deadline); err == nil {
					return sc, shm, nil
				}
				err = fail(err) // the peer passed the token handshake: no retry
				_ = tc.Close()
				return nil, nil, err
			}
			if err == nil {
				return tc, shm, nil
			}
			_ = tc.Close()
			if errors.Is(err, ErrRefused) || errors.Is(err, errShmRequired) || errors.Is(err, errNotAuthentic) {
				return nil, nil, fail(err)
			}
		}
		last = err
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, nil, fail(fmt.Errorf("%w (last try: %v)", context.Cause(ctx), last))
		case <-t.C:
		}
		backoff = min(2*backoff, 500*time.Millisecond)
	}
}

// errShmRequired: TransportSHM, and this link cannot have shared memory.
var errShmRequired = errors.New("shared memory required (Options.Transport = TransportSHM)")

func (c *Comm) sayHello(conn *net.TCPConn, deadline time.Time) (link *shmLink, tlsOn bool, err error) {
	h := c.helloFor()
	if c.opts.wantShm() {
		var offer *shmOffer
		link, offer, err = createShm(c.opts.SegmentBytes)
		if err != nil && c.opts.Transport == TransportSHM {
			return nil, false, fmt.Errorf("%w: %w", errShmRequired, err)
		}
		if err == nil {
			h.shm = offer
			// Whatever the answer, the name goes: the acceptor has mapped
			// the region or never will.
			defer unlinkShm(offer.path)
		}
	}
	defer func() {
		if err != nil && link != nil {
			shmUnmap(link.mem)
			link = nil
		}
	}()
	flags, err := c.dialHandshake(conn, h, deadline)
	if err != nil {
		return link, false, err
	}
	if flags&flagShm == 0 && link != nil {
		shmUnmap(link.mem)
		link = nil
	}
	if link == nil && c.opts.Transport == TransportSHM {
		return nil, false, fmt.Errorf("%w: rank %d did not map this rank's region", errShmRequired, c.right)
	}
	return link, flags&flagTLS != 0, nil
}

// dialHandshake is the dialer's side of the handshake (wire.go) with hello
// h: it returns the final reply's flags once both ends proved the token and
// the final reply proved to come from the acceptor, unchanged.
func (c *Comm) dialHandshake(conn *net.TCPConn, h hello, deadline time.Time) (uint8, error) {
	_ = conn.SetDeadline(earliest(deadline, time.Now().Add(handshakeTimeout)))
	hb := appendHello(nil, h)
	mh := handshakeMAC(c.opts.Token, roleHello, hb)
	first := append(hb, mh[:]...)
	if _, err := conn.Write(first); err != nil {
		return 0, fmt.Errorf("send hello: %w", err)
	}
	rp, err := readReply(conn)
	if err != nil {
		return 0, fmt.Errorf("read handshake reply: %w", err)
	}
	if rp.status != statusAccepted {
		return 0, fmt.Errorf("%w: %s", ErrRefused, rp.reason)
	}
	if rp.version != protocolVersion {
		return 0, fmt.Errorf("%w: peer accepted speaking protocol version %d, this rank %d", ErrRefused, rp.version, protocolVersion)
	}
	if rp.flags != 0 {
		return 0, fmt.Errorf("handshake reply: flags %#x before the proofs", rp.flags)
	}
	var ch [nonceLen + macLen]byte
	if _, err := io.ReadFull(conn, ch[:]); err != nil {
		return 0, fmt.Errorf("read handshake challenge: %w", err)
	}
	na := ch[:nonceLen]
	want := handshakeMAC(c.opts.Token, roleAcceptor, hb, na)
	acceptorProved := hmac.Equal(ch[nonceLen:], want[:])
	// The proof goes even to a peer that did not prove itself (it reveals
	// nothing of the token): its refusal then names the wrong token on its
	// side too.
	proof := handshakeMAC(c.opts.Token, roleDialer, hb, na)
	if _, err := conn.Write(proof[:]); err != nil {
		return 0, fmt.Errorf("send handshake proof: %w", err)
	}
	if !acceptorProved {
		return 0, fmt.Errorf("%w: wrong token: the peer could not prove the attempt's token (a rank of another attempt, or not a rank of this run)", ErrRefused)
	}
	fin, err := readReply(conn)
	if err != nil {
		return 0, fmt.Errorf("read handshake final reply: %w", err)
	}
	if fin.status != statusAccepted {
		return 0, fmt.Errorf("%w: %s", ErrRefused, fin.reason)
	}
	var mf [macLen]byte
	if _, err := io.ReadFull(conn, mf[:]); err != nil {
		return 0, fmt.Errorf("read handshake final reply's MAC: %w", err)
	}
	finb := appendReply(nil, fin.version, fin.status, fin.flags, fin.reason)
	wantf := handshakeMAC(c.opts.Token, roleFinal, first, appendReply(nil, rp.version, rp.status, rp.flags, rp.reason), ch[:], proof[:], finb)
	if !hmac.Equal(mf[:], wantf[:]) {
		return 0, fmt.Errorf("%w: the final reply (flags %#x) is not the acceptor's: changed on the way (a relay?)", errNotAuthentic, fin.flags)
	}
	if h.tls && fin.flags&(flagTLS|flagShm) == 0 {
		return 0, fmt.Errorf("%w: accepted without TLS, which this rank asked for (Options.Encrypt or %s=1): the link would carry data in plaintext", errNotAuthentic, EnvTLS)
	}
	_ = conn.SetDeadline(time.Time{})
	return fin.flags, nil
}

// errNotAuthentic: the acceptor's final answer was altered, or breaks what
// this rank asked for. Retrying will not change it.
var errNotAuthentic = errors.New("handshake refused")

// accept waits for the left neighbour, whose listener is at addr: it
// handshakes every connection at once, refusing strangers, and returns the
// first that completes the handshake, with the shared-memory region it took,
// if any. Handshakes under way then finish in the background and close their
// connections.
//
// A stranger needs no token to open connections, so the slots are shared
// out (see maxHandshakes): a connection holds one only until its first
// flight proves the token (MACh, wire.go), at most firstFlightTimeout; the
// neighbour's address has its own share, each other source address a small
// one; and a newcomer whose share is full takes the slot of the oldest
// connection of that share that has not proven itself. Refusing the
// newcomer instead would let whoever holds the slots keep them, reconnecting
// as each is dropped, and the neighbour's retries would always find them
// full. A stranger on another host therefore never touches the neighbour's
// share; one that shares the neighbour's address (the same host, the same
// NAT) can only churn that share, and every connection, the neighbour's
// among them, still holds its slot while neighbourShare newer ones arrive:
// time enough for the neighbour, whose first flight follows its connect at
// once, to prove itself and leave the slots for good.
func (c *Comm) accept(ctx context.Context, addr string, deadline time.Time) (net.Conn, *shmLink, error) {
	type won struct {
		conn net.Conn
		link *shmLink
	}
	var (
		mu          sync.Mutex
		done        bool
		refused     int
		lastRefusal string
		live        = map[*net.TCPConn]bool{}
		waiting     []*unproven // oldest first
		nonces      = map[[nonceLen]byte]bool{}
		pending     sync.WaitGroup
	)
	ln := c.ln // Connect clears c.ln when it closes the listener
	winc := make(chan won, 1)
	errc := make(chan error, 1)
	refuse := func(conn net.Conn, why string) {
		mu.Lock()
		refused++
		lastRefusal = fmt.Sprintf("%s: %s", conn.RemoteAddr(), why)
		mu.Unlock()
	}
	unwait := func(p *unproven) { // with mu held
		if i := slices.Index(waiting, p); i >= 0 {
			waiting = slices.Delete(waiting, i, i+1)
		}
	}
	go func() {
		neighbour := sourceAddrs(ctx, addr)
		othersCap := maxHandshakes
		if len(neighbour) > 0 {
			othersCap -= neighbourShare
		}
		for {
			conn, err := ln.Accept()
			if err != nil {
				errc <- err
				return
			}
			tc, ok := conn.(*net.TCPConn)
			if !ok {
				_ = conn.Close()
				continue
			}
			p := &unproven{conn: tc, src: addrOf(tc.RemoteAddr())}
			p.neighbour = slices.Contains(neighbour, p.src)
			mu.Lock()
			if done {
				mu.Unlock()
				_ = tc.Close()
				continue
			}
			if v := victimFor(waiting, p, othersCap); v != nil {
				v.evicted = true
				unwait(v)
				_ = v.conn.Close()
			}
			waiting = append(waiting, p)
			live[tc] = true
			pending.Add(1)
			mu.Unlock()
			go func() {
				defer pending.Done()
				reason, link, tlsOn := c.handshake(tc, deadline, func(nd [nonceLen]byte) string {
					mu.Lock()
					defer mu.Unlock()
					switch {
					case p.evicted:
						return "evicted"
					case nonces[nd]:
						return "a hello this rank has already seen (replayed)"
					}
					nonces[nd] = true
					unwait(p)
					return ""
				})
				var conn net.Conn = tc
				if reason == "" && tlsOn {
					if sc, err := c.tlsLink(tc, true, deadline); err != nil {
						reason = err.Error()
					} else {
						conn = sc
					}
				}
				if reason == "" && c.opts.SocketBuffer > 0 {
					_ = tc.SetReadBuffer(c.opts.SocketBuffer)
				}
				if reason == "" {
					if raw, err := tc.SyscallConn(); err == nil {
						setCongestion(raw, c.opts.Congestion)
					}
				}
				mu.Lock()
				unwait(p)
				delete(live, tc)
				first := reason == "" && !done
				if first {
					done = true
				}
				if p.evicted {
					reason = "closed before it proved the token: newer connections from its address took its handshake slot"
				}
				mu.Unlock()
				switch {
				case first:
					winc <- won{conn, link}
					return
				case reason != "":
					refuse(tc, reason)
				}
				if link != nil {
					shmUnmap(link.mem)
				}
				_ = tc.Close()
			}()
		}
	}()
	var w won
	var aerr error
	select {
	case w = <-winc:
		// The handshakes past their first flight finish on their own (a
		// late valid one is closed), within handshakeTimeout; those still
		// waiting for it end now.
		mu.Lock()
		done = true
		for _, p := range waiting {
			_ = p.conn.Close()
		}
		mu.Unlock()
		_ = w.conn.SetDeadline(time.Time{})
		return w.conn, w.link, nil
	case aerr = <-errc:
	}
	mu.Lock()
	done = true
	if ctx.Err() != nil {
		// Cancelled: the handshakes end now. (At the deadline they end
		// with it: each has it.)
		for conn := range live {
			_ = conn.Close()
		}
	}
	mu.Unlock()
	pending.Wait()
	if w.conn == nil {
		// Accept failed (its deadline, or ctx); a handshake may have
		// completed meanwhile.
		select {
		case w = <-winc:
		default:
		}
	}
	if w.conn != nil {
		_ = w.conn.SetDeadline(time.Time{})
		return w.conn, w.link, nil
	}
	if ctx.Err() != nil || errors.Is(aerr, os.ErrDeadlineExceeded) {
		aerr = fmt.Errorf("none within the connect timeout (%v) or the context: %w", c.opts.ConnectTimeout, aerr)
	}
	mu.Lock()
	if refused > 0 {
		aerr = fmt.Errorf("%w (refused %d connection(s), last: %s)", aerr, refused, lastRefusal)
	}
	mu.Unlock()
	return nil, nil, fmt.Errorf("rank %d: wait for rank %d to connect: %w", c.rank, c.left, aerr)
}

// Shares of the acceptor's handshake slots (accept), which connections hold
// until their first flight proves the token: maxHandshakes in all, at most
// neighbourShare from the left neighbour's address (sourceAddrs of its
// listener's), at most sourceShare from any other address, and the others
// together at most maxHandshakes-neighbourShare. So a flood of silent
// connections costs a bounded number of goroutines, each for
// firstFlightTimeout at most.
const (
	maxHandshakes  = 32
	neighbourShare = 16
	sourceShare    = 4
)

// unproven is an accepted connection whose first flight has not proven the
// token yet; accept's mutex guards it.
type unproven struct {
	conn      *net.TCPConn
	src       netip.Addr
	neighbour bool // src is the left neighbour's address
	evicted   bool // closed to make room for a newer connection
}

// victimFor returns the connection whose slot p takes (the oldest unproven
// one of its share), nil if p's share has room. waiting is oldest first.
func victimFor(waiting []*unproven, p *unproven, othersCap int) *unproven {
	var same, others int
	var oldestSame, oldestOther *unproven
	for _, w := range waiting {
		if w.neighbour && p.neighbour || w.src == p.src {
			same++
			if oldestSame == nil {
				oldestSame = w
			}
		}
		if !w.neighbour {
			others++
			if oldestOther == nil {
				oldestOther = w
			}
		}
	}
	share := sourceShare
	if p.neighbour {
		share = neighbourShare
	}
	switch {
	case same >= share:
		return oldestSame
	case !p.neighbour && others >= othersCap:
		return oldestOther
	}
	return nil
}

// addrOf is the IP address of a TCP endpoint, IPv4 unmapped.
func addrOf(a net.Addr) netip.Addr {
	if ta, ok := a.(*net.TCPAddr); ok {
		if ip, ok := netip.AddrFromSlice(ta.IP); ok {
			return ip.Unmap()
		}
	}
	return netip.Addr{}
}

// sourceAddrs resolves the host of hostport, a rank's published listener
// address: where its connections are expected to come from. It gives up
// after a second (a name that does not resolve leaves no preference).
func sourceAddrs(ctx context.Context, hostport string) []netip.Addr {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return nil
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{ip.WithZone("").Unmap()}
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	ips, _ := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	for i, ip := range ips {
		ips[i] = ip.WithZone("").Unmap()
	}
	return ips
}

// teeReader copies what it reads into buf: the hello's bytes, which the
// proofs cover.
type teeReader struct {
	r   io.Reader
	buf []byte
}

func (t *teeReader) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	t.buf = append(t.buf, p[:n]...)
	return n, err
}

// checkHello is the acceptor's side of the handshake (wire.go): it reads a
// first flight, answers it with a challenge, checks the dialer's proof of
// the token and gives its final answer. It returns why it refused, or "" and
// the shared-memory region it mapped, if any, and whether the link runs TLS.
func (c *Comm) checkHello(conn *net.TCPConn, deadline time.Time) (string, *shmLink, bool) {
	return c.handshake(conn, deadline, nil)
}

// handshake is checkHello; proven, when not nil, is told the dialer's nonce
// as soon as the first flight proves the token (accept frees the
// connection's slot then), and refuses the connection by returning why.
func (c *Comm) handshake(conn *net.TCPConn, deadline time.Time, proven func(nd [nonceLen]byte) string) (string, *shmLink, bool) {
	start := time.Now()
	// A dialer sends its first flight as soon as it connects: one that
	// trickles or says nothing is not a rank, and gives its slot up soon.
	_ = conn.SetDeadline(earliest(deadline, start.Add(firstFlightTimeout)))
	tee := &teeReader{r: conn}
	h, err := readHello(tee)
	reason := ""
	switch {
	case err != nil && !errors.Is(err, errBadVersion):
		return fmt.Sprintf("bad hello: %v", err), nil, false // not a peer worth answering
	case err != nil:
		reason = err.Error()
	case h.size != uint32(c.size):
		reason = fmt.Sprintf("world size %d, this group has %d", h.size, c.size)
	case h.to != uint32(c.rank):
		reason = fmt.Sprintf("dialed rank %d, reached rank %d", h.to, c.rank)
	case h.from != uint32(c.left):
		reason = fmt.Sprintf("rank %d may not connect to rank %d: only its left neighbour %d", h.from, c.rank, c.left)
	case h.order != nativeOrder:
		reason = "float byte order differs"
	case h.segment != uint32(c.opts.SegmentBytes):
		reason = fmt.Sprintf("segment size %d, this rank uses %d", h.segment, c.opts.SegmentBytes)
	}
	if reason != "" {
		return c.refuseHello(conn, reason), nil, false
	}
	const wrongToken = "wrong token (a stray connection, a replayed handshake, or a rank of another attempt)"
	hb := tee.buf
	var mh [macLen]byte
	if _, err := io.ReadFull(conn, mh[:]); err != nil {
		return fmt.Sprintf("no whole first flight (hello and MAC) within %v: %v", firstFlightTimeout, err), nil, false
	}
	if want := handshakeMAC(c.opts.Token, roleHello, hb); !hmac.Equal(mh[:], want[:]) {
		return c.refuseHello(conn, wrongToken), nil, false
	}
	if proven != nil {
		if why := proven(h.nonce); why != "" {
			return c.refuseHello(conn, why), nil, false
		}
	}
	_ = conn.SetDeadline(earliest(deadline, start.Add(handshakeTimeout)))
	// The challenge: this end's nonce and proof.
	na := newNonce()
	proof := handshakeMAC(c.opts.Token, roleAcceptor, hb, na[:])
	msg := appendReply(nil, protocolVersion, statusAccepted, 0, "")
	msg = append(append(msg, na[:]...), proof[:]...)
	if _, err := conn.Write(msg); err != nil {
		return fmt.Sprintf("send handshake challenge: %v", err), nil, false
	}
	var got [macLen]byte
	if _, err := io.ReadFull(conn, got[:]); err != nil {
		return fmt.Sprintf("no proof of the token (the dialer gave up, or is not a rank): %v", err), nil, false
	}
	if want := handshakeMAC(c.opts.Token, roleDialer, hb, na[:]); !hmac.Equal(got[:], want[:]) {
		return c.refuseHello(conn, wrongToken), nil, false
	}
	var link *shmLink
	if c.opts.wantShm() {
		var why error
		switch {
		case h.shm == nil:
			why = fmt.Errorf("rank %d offered none", h.from)
		case h.shm.host != hostID():
			why = fmt.Errorf("rank %d is on host %q, this rank on %q", h.from, h.shm.host, hostID())
		default:
			link, why = openShm(h.shm, c.opts.SegmentBytes)
		}
		if link == nil && c.opts.Transport == TransportSHM {
			return c.refuseHello(conn, fmt.Sprintf("%v: %v", errShmRequired, why)), nil, false
		}
	}
	flags := uint8(0)
	if link != nil {
		flags = flagShm
	}
	// TLS when either end asks, on a link whose data crosses TCP.
	tlsOn := link == nil && (h.tls || c.opts.wantTLS())
	if tlsOn {
		flags |= flagTLS
	}
	// The final reply, under the MAC of the whole transcript: a relay that
	// changed its flags (turned TLS off) is caught by the dialer.
	fin := appendReply(nil, protocolVersion, statusAccepted, flags, "")
	mf := handshakeMAC(c.opts.Token, roleFinal, hb, mh[:], msg, got[:], fin)
	if _, err := conn.Write(append(fin, mf[:]...)); err != nil {
		if link != nil {
			shmUnmap(link.mem)
		}
		return fmt.Sprintf("send handshake final reply: %v", err), nil, false
	}
	return "", link, tlsOn
}

// refuseHello tells the dialer why it is refused and returns the reason.
func (c *Comm) refuseHello(conn *net.TCPConn, reason string) string {
	_, _ = conn.Write(appendReply(nil, protocolVersion, statusRefused, 0, reason))
	// Closing with unread input would reset the connection and could
	// destroy the reply before the dialer reads why it was refused.
	_ = conn.CloseWrite()
	_ = conn.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	_, _ = io.Copy(io.Discard, io.LimitReader(conn, 1<<16))
	return reason
}

func earliest(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
