package collective

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// connectGroup connects n ranks on lns/peers with token and returns them
// (closed at the test's end) and how long Connect took.
func connectGroup(t *testing.T, lns []net.Listener, peers []string, token string) ([]*Comm, time.Duration) {
	t.Helper()
	n := len(peers)
	comms := make([]*Comm, n)
	start := time.Now()
	noErrors(t, "Connect", each(n, func(r int) error {
		var err error
		comms[r], err = Connect(context.Background(), lns[r], peers, Options{Rank: r, Size: n, Token: token, ConnectTimeout: 30 * time.Second})
		return err
	}))
	took := time.Since(start)
	t.Cleanup(func() {
		for _, c := range comms {
			_ = c.Close()
		}
	})
	noErrors(t, "Barrier", each(n, func(r int) error { return comms[r].Barrier(context.Background()) }))
	return comms, took
}

// Connections that open and say nothing (a port scanner, an attacker)
// cannot stop a group from forming: the acceptor handshakes them beside the
// real neighbour. (Handshaking one at a time, two silent connections held
// the acceptor 10 s each, and the neighbour's dial timed out meanwhile.)
func TestSilentConnectionsCannotStallTheGroup(t *testing.T) {
	t.Parallel()
	const n = 3
	lns, peers := listeners(t, n)
	for range 8 {
		conn, err := net.Dial("tcp", peers[1])
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
	}
	_, took := connectGroup(t, lns, peers, "secret")
	t.Logf("Connect with 8 silent connections queued before the neighbour: %v", took)
	if took > 5*time.Second {
		t.Errorf("Connect took %v: the silent connections held it up (handshake timeout %v)", took, handshakeTimeout)
	}
}

// A hello left in the acceptor's backlog by a dialer that gave up (a stale
// half-open connection, an earlier try) is not a link: it never proves the
// token, and the real neighbour's connection is taken instead.
func TestHelloOfADialerThatGaveUpIsNotALink(t *testing.T) {
	t.Parallel()
	const n = 2
	lns, peers := listeners(t, n)
	stale := newComm(nil, Options{Rank: 0, Size: n, Token: "secret"}.withDefaults())
	conn, err := net.Dial("tcp", peers[1])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write(appendHello(nil, stale.helloFor())); err != nil {
		t.Fatal(err)
	}
	_ = conn.Close() // gave up before any answer
	comms, _ := connectGroup(t, lns, peers, "secret")
	checkAllReduce[float32](t, comms, 1000, Sum, (*Comm).AllReduceFloat32)
}

// wireRecorder is a TCP proxy that forwards one connection to target and keeps
// the bytes that crossed it, both ways.
type wireRecorder struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	seen   bytes.Buffer
	wg     sync.WaitGroup
}

func newWireRecorder(t *testing.T, target string) *wireRecorder {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &wireRecorder{ln: ln, target: target}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				_ = in.Close()
				continue
			}
			for _, pair := range [][2]net.Conn{{in, out}, {out, in}} {
				p.wg.Add(1)
				go func() {
					defer p.wg.Done()
					_, _ = io.Copy(io.MultiWriter(pair[1], p), pair[0])
					_ = pair[1].(*net.TCPConn).CloseWrite()
				}()
			}
		}
	}()
	t.Cleanup(func() { _ = ln.Close() })
	return p
}

func (p *wireRecorder) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.seen.Write(b)
}

func (p *wireRecorder) bytes() []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	return bytes.Clone(p.seen.Bytes())
}

// The token never crosses the network: an eavesdropper on a link (here a
// proxy that records it, handshake and data) does not learn it.
func TestTokenNeverOnTheWire(t *testing.T) {
	t.Parallel()
	const n, token = 2, "the-attempt-token-0123456789abcdef"
	lns, peers := listeners(t, n)
	rec := newWireRecorder(t, peers[1])
	dialed := append([]string(nil), peers...)
	dialed[1] = rec.ln.Addr().String() // rank 0 reaches rank 1 through it
	comms, _ := connectGroup(t, lns, dialed, token)
	checkAllReduce[float32](t, comms, 1000, Sum, (*Comm).AllReduceFloat32)
	seen := rec.bytes()
	if len(seen) < helloLen {
		t.Fatalf("the wireRecorder saw %d bytes: the link did not go through it", len(seen))
	}
	if bytes.Contains(seen, []byte(token)) {
		t.Fatalf("the token crossed the network in clear")
	}
}

// firstFlight is what a dialer with token sends first: hello h and its MAC.
func firstFlight(token string, h hello) []byte {
	hb := appendHello(nil, h)
	mh := handshakeMAC(token, roleHello, hb)
	return append(hb, mh[:]...)
}

// tcpPair returns the two ends of a loopback TCP connection, closed at the
// test's end.
func tcpPair(t *testing.T, ln net.Listener) (client, server *net.TCPConn) {
	t.Helper()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(); _ = s.Close() })
	return c.(*net.TCPConn), s.(*net.TCPConn)
}

// A recorded handshake cannot be replayed: the acceptor's fresh nonce
// makes the recorded proof worthless. And an acceptor that cannot prove the
// token (a listener of another attempt, an impostor on a rank's port) is
// refused by the dialer.
func TestHandshakeCannotBeReplayed(t *testing.T) {
	t.Parallel()
	const token = "tok"
	acceptor := newComm(nil, Options{Rank: 1, Size: 2, Token: token}.withDefaults())
	dialer := newComm(nil, Options{Rank: 0, Size: 2, Token: token}.withDefaults())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	deadline := time.Now().Add(10 * time.Second)

	// A genuine handshake, as an eavesdropper sees it: the first flight,
	// the acceptor's challenge, the dialer's proof.
	h := dialer.helloFor()
	hb := appendHello(nil, h)
	first := firstFlight(token, h)
	c1, s1 := tcpPair(t, ln)
	done := make(chan string, 1)
	go func() { r, _, _ := acceptor.checkHello(s1, deadline); done <- r }()
	if _, err := c1.Write(first); err != nil {
		t.Fatal(err)
	}
	var challenge [replyLen + nonceLen + macLen]byte
	if _, err := io.ReadFull(c1, challenge[:]); err != nil {
		t.Fatal(err)
	}
	proof := handshakeMAC(token, roleDialer, hb, challenge[replyLen:replyLen+nonceLen])
	if _, err := c1.Write(proof[:]); err != nil {
		t.Fatal(err)
	}
	if r := <-done; r != "" {
		t.Fatalf("the genuine handshake was refused: %s", r)
	}

	// The same bytes, replayed on a new connection.
	c2, s2 := tcpPair(t, ln)
	go func() { r, _, _ := acceptor.checkHello(s2, deadline); done <- r }()
	if _, err := c2.Write(first); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c2, challenge[:]); err != nil {
		t.Fatal(err)
	}
	if _, err := c2.Write(proof[:]); err != nil {
		t.Fatal(err)
	}
	if r := <-done; !strings.Contains(r, "wrong token") {
		t.Fatalf("a replayed handshake: acceptor's answer %q, want a refusal for the token", r)
	}
	if rp, err := readReply(c2); err != nil || rp.status != statusRefused {
		t.Fatalf("a replayed handshake: final reply %+v, %v, want refused", rp, err)
	}

	// A first flight whose MAC is not the token's is refused at once: no
	// challenge, no slot held for the round trip.
	c5, s5 := tcpPair(t, ln)
	go func() { r, _, _ := acceptor.checkHello(s5, deadline); done <- r }()
	if _, err := c5.Write(firstFlight("another-attempt", dialer.helloFor())); err != nil {
		t.Fatal(err)
	}
	if rp, err := readReply(c5); err != nil || rp.status != statusRefused || !strings.Contains(rp.reason, "wrong token") {
		t.Fatalf("a first flight with another token's MAC: reply %+v, %v, want refused for the token", rp, err)
	}
	<-done

	// An impostor acceptor: it answers the first flight with a challenge
	// it cannot sign (its token is another attempt's).
	c3, s3 := tcpPair(t, ln)
	go func() {
		defer s3.Close()
		if _, err := io.ReadFull(s3, make([]byte, len(first))); err != nil {
			return
		}
		na := newNonce()
		forged := handshakeMAC("another-attempt", roleAcceptor, hb, na[:])
		msg := appendReply(nil, protocolVersion, statusAccepted, 0, "")
		_, _ = s3.Write(append(append(msg, na[:]...), forged[:]...))
		_, _ = io.ReadFull(s3, make([]byte, macLen))
	}()
	_, err = dialer.dialHandshake(c3, dialer.helloFor(), deadline)
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "could not prove the attempt's token") {
		t.Fatalf("dialing an impostor: %v, want ErrRefused because it could not prove the token", err)
	}
	// An acceptor of another attempt refuses the first flight itself.
	impostor := newComm(nil, Options{Rank: 1, Size: 2, Token: "another-attempt"}.withDefaults())
	c4, s4 := tcpPair(t, ln)
	go func() { r, _, _ := impostor.checkHello(s4, deadline); done <- r }()
	_, err = dialer.dialHandshake(c4, dialer.helloFor(), deadline)
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "wrong token") {
		t.Fatalf("dialing a rank of another attempt: %v, want ErrRefused for the token", err)
	}
	<-done
}

// FuzzHandshakeAcceptor plays any bytes to the listening side of the
// handshake (checkHello over real TCP): it refuses them, with a reason,
// within its deadline, and never panics. (No input can carry a valid proof:
// it would need the token and the acceptor's fresh nonce.)
func FuzzHandshakeAcceptor(f *testing.F) {
	d := newComm(nil, Options{Rank: 0, Size: 2, Token: "tok"}.withDefaults())
	h := d.helloFor()
	f.Add(appendHello(nil, h))
	f.Add(append(appendHello(nil, h), make([]byte, macLen)...))
	// First flights with the right MAC, the challenge's answer missing or
	// wrong (no input can hold the proof: it covers a nonce the acceptor
	// makes for each connection).
	f.Add(firstFlight("tok", h))
	f.Add(append(firstFlight("tok", h), make([]byte, macLen)...))
	h.shm = &shmOffer{host: hostID(), path: "/dev/shm/" + shmNamePrefix + "1-00", slots: 4, slotBytes: 64}
	f.Add(append(appendHello(nil, h), make([]byte, macLen)...))
	f.Add(append(firstFlight("tok", h), make([]byte, macLen)...))
	f.Add([]byte("TTCL"))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	acceptor := newComm(nil, Options{Rank: 1, Size: 2, Token: "tok"}.withDefaults())
	f.Fuzz(func(t *testing.T, data []byte) {
		client, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = client.Close() }()
		server, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = server.Close() }()
		go func() {
			_, _ = client.Write(data)
			_ = client.(*net.TCPConn).CloseWrite()
			_, _ = io.Copy(io.Discard, client)
		}()
		start := time.Now()
		reason, link, _ := acceptor.checkHello(server.(*net.TCPConn), time.Now().Add(2*time.Second))
		if reason == "" || link != nil {
			t.Fatalf("accepted %q", data)
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Fatalf("took %v", d)
		}
	})
}

// handshakeRelay is a TCP proxy between a dialer and an acceptor (TCP links,
// no shared-memory offer) that passes the handshake through but rewrites the
// final reply's flags with edit, as a relay on the path could; it counts the
// bytes the dialer sends after the handshake.
type handshakeRelay struct {
	ln    net.Listener
	after atomic.Int64
	wg    sync.WaitGroup
}

func newHandshakeRelay(t *testing.T, target string, edit func(flags byte) byte) *handshakeRelay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &handshakeRelay{ln: ln}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		in, err := ln.Accept()
		if err != nil {
			return
		}
		defer in.Close()
		out, err := net.Dial("tcp", target)
		if err != nil {
			return
		}
		defer out.Close()
		if !relayHandshake(in, out, edit) {
			return
		}
		go func() { _, _ = io.Copy(in, out) }()
		n, _ := io.Copy(out, in)
		r.after.Store(n)
	}()
	t.Cleanup(func() { _ = ln.Close(); r.wg.Wait() })
	return r
}

// relayHandshake passes a handshake (TCP links, no shared-memory offer)
// from dialer to acceptor and back, step by step, with the final reply's
// flags rewritten by edit; it reports whether the handshake got through.
func relayHandshake(dialer, acceptor net.Conn, edit func(flags byte) byte) bool {
	relay := func(dst, src net.Conn, n int) bool {
		_, err := io.CopyN(dst, src, int64(n))
		return err == nil
	}
	if !relay(acceptor, dialer, helloLen+macLen) || !relay(dialer, acceptor, replyLen+nonceLen+macLen) || !relay(acceptor, dialer, macLen) {
		return false
	}
	fin := make([]byte, replyLen+macLen)
	if _, err := io.ReadFull(acceptor, fin); err != nil {
		return false
	}
	fin[7] = edit(fin[7])
	_, err := dialer.Write(fin)
	return err == nil
}

// A relay between two ranks that clears the TLS flag of the acceptor's
// final reply (so that the dialer would send its data in plaintext) is
// caught at once: the final reply is under the MAC of the whole transcript,
// and the dialer refuses it, sending nothing, whichever end asked for TLS.
func TestRelayCannotTurnTLSOff(t *testing.T) {
	t.Parallel()
	for _, asks := range []int{0, 1} {
		t.Run(fmt.Sprintf("rank %d asks", asks), func(t *testing.T) {
			t.Parallel()
			const n = 2
			lns, peers := listeners(t, n)
			relay := newHandshakeRelay(t, peers[1], func(flags byte) byte { return flags &^ flagTLS })
			dialed := []string{peers[0], relay.ln.Addr().String()}
			took := make([]time.Duration, n)
			errs := each(n, func(r int) error {
				// Rank 1 would wait for a good link until its timeout.
				timeout := 30 * time.Second
				if r == 1 {
					timeout = 3 * time.Second
				}
				start := time.Now()
				c, err := Connect(context.Background(), lns[r], dialed, Options{Rank: r, Size: n, Token: "tok",
					Transport: TransportTCP, Encrypt: r == asks, ConnectTimeout: timeout})
				took[r] = time.Since(start)
				if err == nil {
					_ = c.Close()
				}
				return err
			})
			want := fmt.Sprintf("rank 0: connect to rank 1 at %s: handshake refused: the final reply (flags 0x0) is not the acceptor's", dialed[1])
			if errs[0] == nil || !strings.Contains(errs[0].Error(), want) {
				t.Fatalf("rank 0 through a relay that clears the TLS flag: %v, want %q", errs[0], want)
			}
			if took[0] > 5*time.Second {
				t.Errorf("rank 0 refused the link after %v: want at once (its connect timeout 30s)", took[0])
			}
			_ = relay.ln.Close()
			relay.wg.Wait()
			if got := relay.after.Load(); got != 0 {
				t.Errorf("rank 0 sent %d bytes after the handshake", got)
			}
		})
	}
}

// A dialer that asked for TLS refuses a final reply that runs its link in
// plaintext, even one that comes, authenticated, from a peer with the token
// (a rank built without the rule): the data would cross the network in
// clear.
func TestDialerThatAskedForTLSRefusesPlaintext(t *testing.T) {
	t.Parallel()
	const token = "tok"
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	dialer := newComm(nil, Options{Rank: 0, Size: 2, Token: token, Encrypt: true}.withDefaults())
	h := dialer.helloFor()
	client, server := tcpPair(t, ln)
	go func() {
		// An acceptor that answers every step right but leaves TLS off.
		first := make([]byte, len(firstFlight(token, h)))
		if _, err := io.ReadFull(server, first); err != nil {
			return
		}
		na := newNonce()
		ma := handshakeMAC(token, roleAcceptor, first[:helloLen], na[:])
		msg := append(append(appendReply(nil, protocolVersion, statusAccepted, 0, ""), na[:]...), ma[:]...)
		if _, err := server.Write(msg); err != nil {
			return
		}
		proof := make([]byte, macLen)
		if _, err := io.ReadFull(server, proof); err != nil {
			return
		}
		fin := appendReply(nil, protocolVersion, statusAccepted, 0, "")
		mf := handshakeMAC(token, roleFinal, first, msg, proof, fin)
		_, _ = server.Write(append(fin, mf[:]...))
	}()
	_, err = dialer.dialHandshake(client, h, time.Now().Add(10*time.Second))
	if !errors.Is(err, errNotAuthentic) || !strings.Contains(err.Error(), "accepted without TLS, which this rank asked for") {
		t.Fatalf("dialer asking for TLS, acceptor leaving it off: %v, want a refusal naming TLS", err)
	}
}

// stranger connects to target from source address src (127.0.0.x: another
// host, as the acceptor sees it, but for 127.0.0.1), over and over until
// ctx ends: each connection says nothing, or, if trickle, sends a hello's
// bytes one a second, until the acceptor drops it; then it reconnects at once.
func stranger(ctx context.Context, target, src string, trickle bool, dials *atomic.Int64) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	hb := appendHello(nil, hello{version: protocolVersion, order: nativeOrder, size: 4, from: 0, to: 1, segment: DefaultSegmentBytes, nonce: newNonce()})
	for ctx.Err() == nil {
		conn, err := d.DialContext(ctx, "tcp", target)
		if err != nil {
			// The listener is gone (the group formed): wait, not spin.
			select {
			case <-ctx.Done():
			case <-time.After(10 * time.Millisecond):
			}
			continue
		}
		dials.Add(1)
		stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
		if trickle {
			go func() {
				for _, b := range hb {
					if _, err := conn.Write([]byte{b}); err != nil {
						return
					}
					time.Sleep(time.Second)
				}
			}()
		}
		_, _ = io.Copy(io.Discard, conn) // until the acceptor drops it
		stop()
		_ = conn.Close()
	}
}

// Strangers that need no token cannot keep a group from forming by holding
// the acceptor's handshake slots: 64 of them (half from the neighbour's own
// address, half from four others; some silent, some trickling a byte a
// second), each reconnecting as soon as it is dropped, all at rank 1, the
// acceptor of rank 0. Before the slots were shared out and the first flight
// bounded, they held all 32 for 10 s at a time and rank 0 was refused on
// every try.
func TestStrangersCannotHoldTheHandshakeSlots(t *testing.T) {
	t.Parallel()
	const n, strangers = 4, 64
	lns, peers := listeners(t, n)
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var dials atomic.Int64
	for i := range strangers {
		src := "127.0.0.1"
		if i%2 == 1 {
			src = fmt.Sprintf("127.0.0.%d", 2+i/2%4)
		}
		wg.Go(func() { stranger(ctx, peers[1], src, i%4 >= 2, &dials) })
	}
	defer wg.Wait()
	defer stop()
	// Rank 1 and the others start, and the strangers churn rank 1's slots
	// for longer than a first flight may take; then rank 0 dials.
	const late = firstFlightTimeout + time.Second
	comms := make([]*Comm, n)
	var took time.Duration
	noErrors(t, "Connect", each(n, func(r int) error {
		if r == 0 {
			time.Sleep(late)
		}
		start := time.Now()
		var err error
		comms[r], err = Connect(context.Background(), lns[r], peers, Options{Rank: r, Size: n, Token: "secret", ConnectTimeout: 30 * time.Second})
		if r == 0 {
			took = time.Since(start)
		}
		return err
	}))
	stop()
	t.Cleanup(func() {
		for _, c := range comms {
			_ = c.Close()
		}
	})
	t.Logf("rank 0's Connect with %d strangers at rank 1: %v (%d stranger connections)", strangers, took, dials.Load())
	if took > 15*time.Second {
		t.Errorf("rank 0's Connect took %v with %d strangers at rank 1", took, strangers)
	}
	if dials.Load() <= 2*strangers {
		t.Errorf("the strangers connected %d times: too few were dropped, the slots were not contested", dials.Load())
	}
	checkAllReduce[float32](t, comms, 1000, Sum, (*Comm).AllReduceFloat32)
}
