package collective

// Connect: each rank dials its right neighbour and accepts its left one, at
// the same time (a ring where everyone waited to accept before dialing would
// deadlock). The dialer says hello (wire.go) with the token, the world size,
// both ranks, its byte order and segment size; the acceptor refuses a
// connection that gets any of them wrong, tells the dialer why, and goes on
// waiting for the right one, so a stray or stale connection cannot join nor
// keep the group from forming. The dialer retries refused TCP connections
// with backoff until the deadline (a peer may still be starting), but gives up
// at once when a peer refuses its hello, since that will not change.
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
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
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
		conn *net.TCPConn
		shm  *shmLink
		err  error
	}
	dialc := make(chan dialed, 1)
	go func() {
		conn, shm, err := c.dial(ctx, peers[c.right], deadline)
		dialc <- dialed{conn, shm, err}
	}()
	recv, recvShm, aerr := c.accept(ctx, deadline)
	if aerr != nil {
		cancel()
	}
	d := <-dialc
	_ = ln.Close()
	c.ln = nil
	c.sendShm, c.recvShm = d.shm, recvShm
	if aerr != nil || d.err != nil {
		c.unmapShm()
		for _, conn := range []*net.TCPConn{recv, d.conn} {
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
	if o.SocketBuffer > 0 {
		_ = d.conn.SetWriteBuffer(o.SocketBuffer)
		_ = recv.SetReadBuffer(o.SocketBuffer)
	}
	c.send, c.recv = d.conn, recv
	c.start()
	return c, nil
}

func (c *Comm) helloFor() hello {
	return hello{
		version: protocolVersion,
		order:   nativeOrder,
		size:    uint32(c.size),
		from:    uint32(c.rank),
		to:      uint32(c.right),
		segment: uint32(c.opts.SegmentBytes),
		token:   c.opts.Token,
	}
}

// dial connects to the right neighbour and passes its handshake; it returns
// the link's shared-memory region if the neighbour took it.
func (c *Comm) dial(ctx context.Context, addr string, deadline time.Time) (*net.TCPConn, *shmLink, error) {
	fail := func(err error) error {
		return fmt.Errorf("rank %d: connect to rank %d at %s: %w", c.rank, c.right, addr, err)
	}
	var d net.Dialer
	backoff := 10 * time.Millisecond
	var last error
	for {
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			tc := conn.(*net.TCPConn)
			var shm *shmLink
			shm, err = c.sayHello(tc, deadline)
			if err == nil {
				return tc, shm, nil
			}
			_ = tc.Close()
			if errors.Is(err, ErrRefused) || errors.Is(err, errShmRequired) {
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

func (c *Comm) sayHello(conn *net.TCPConn, deadline time.Time) (link *shmLink, err error) {
	h := c.helloFor()
	if c.opts.wantShm() {
		var offer *shmOffer
		link, offer, err = createShm(c.opts.SegmentBytes)
		if err != nil && c.opts.Transport == TransportSHM {
			return nil, fmt.Errorf("%w: %w", errShmRequired, err)
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
	_ = conn.SetDeadline(earliest(deadline, time.Now().Add(handshakeTimeout)))
	if _, err := conn.Write(appendHello(nil, h)); err != nil {
		return nil, fmt.Errorf("send hello: %w", err)
	}
	rp, err := readReply(conn)
	if err != nil {
		return nil, fmt.Errorf("read handshake reply: %w", err)
	}
	if rp.status != statusAccepted {
		return nil, fmt.Errorf("%w: %s", ErrRefused, rp.reason)
	}
	if rp.version != protocolVersion {
		return nil, fmt.Errorf("%w: peer accepted speaking protocol version %d, this rank %d", ErrRefused, rp.version, protocolVersion)
	}
	if rp.flags&flagShm == 0 && link != nil {
		shmUnmap(link.mem)
		link = nil
	}
	if link == nil && c.opts.Transport == TransportSHM {
		return nil, fmt.Errorf("%w: rank %d did not map this rank's region", errShmRequired, c.right)
	}
	_ = conn.SetDeadline(time.Time{})
	return link, nil
}

// accept waits for the left neighbour, refusing every other connection; it
// returns the link's shared-memory region if it took the neighbour's offer.
func (c *Comm) accept(ctx context.Context, deadline time.Time) (*net.TCPConn, *shmLink, error) {
	refused, lastRefusal := 0, ""
	for {
		conn, err := c.ln.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, os.ErrDeadlineExceeded) {
				err = fmt.Errorf("none within the connect timeout (%v) or the context: %w", c.opts.ConnectTimeout, err)
			}
			if refused > 0 {
				err = fmt.Errorf("%w (refused %d connection(s), last: %s)", err, refused, lastRefusal)
			}
			return nil, nil, fmt.Errorf("rank %d: wait for rank %d to connect: %w", c.rank, c.left, err)
		}
		tc, ok := conn.(*net.TCPConn)
		if !ok {
			_ = conn.Close()
			continue
		}
		reason, link := c.checkHello(tc, deadline)
		if reason == "" {
			_ = tc.SetDeadline(time.Time{})
			return tc, link, nil
		}
		refused++
		lastRefusal = fmt.Sprintf("%s: %s", tc.RemoteAddr(), reason)
		_ = tc.Close()
	}
}

// checkHello reads a hello and answers it; it returns why it refused, or ""
// and the shared-memory region it mapped, if any.
func (c *Comm) checkHello(conn *net.TCPConn, deadline time.Time) (string, *shmLink) {
	_ = conn.SetDeadline(earliest(deadline, time.Now().Add(handshakeTimeout)))
	h, err := readHello(conn)
	reason := ""
	switch {
	case err != nil && !errors.Is(err, errBadVersion):
		return fmt.Sprintf("bad hello: %v", err), nil // not a peer worth answering
	case err != nil:
		reason = err.Error()
	case subtle.ConstantTimeCompare([]byte(h.token), []byte(c.opts.Token)) != 1:
		reason = "wrong token (a stray connection, or a rank of another attempt)"
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
	var link *shmLink
	if reason == "" && c.opts.wantShm() {
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
			reason = fmt.Sprintf("%v: %v", errShmRequired, why)
		}
	}
	status, flags := uint8(statusAccepted), uint8(0)
	if reason != "" {
		status = statusRefused
	} else if link != nil {
		flags = flagShm
	}
	if _, err := conn.Write(appendReply(nil, protocolVersion, status, flags, reason)); err != nil && reason == "" {
		if link != nil {
			shmUnmap(link.mem)
		}
		return fmt.Sprintf("send handshake reply: %v", err), nil
	}
	if reason != "" {
		// Closing with unread input would reset the connection and could
		// destroy the reply before the dialer reads why it was refused.
		_ = conn.CloseWrite()
		_ = conn.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		_, _ = io.Copy(io.Discard, io.LimitReader(conn, 1<<16))
	}
	return reason, link
}

func earliest(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
