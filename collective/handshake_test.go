package collective

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
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
	pair := func() (client, server *net.TCPConn) {
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
	deadline := time.Now().Add(10 * time.Second)

	// A genuine handshake, as an eavesdropper sees it: the hello, the
	// acceptor's challenge, the dialer's proof.
	h := dialer.helloFor()
	hb := appendHello(nil, h)
	c1, s1 := pair()
	done := make(chan string, 1)
	go func() { r, _, _ := acceptor.checkHello(s1, deadline); done <- r }()
	if _, err := c1.Write(hb); err != nil {
		t.Fatal(err)
	}
	var challenge [replyLen + nonceLen + macLen]byte
	if _, err := io.ReadFull(c1, challenge[:]); err != nil {
		t.Fatal(err)
	}
	proof := handshakeMAC(token, roleDialer, hb, [nonceLen]byte(challenge[replyLen:replyLen+nonceLen]))
	if _, err := c1.Write(proof[:]); err != nil {
		t.Fatal(err)
	}
	if r := <-done; r != "" {
		t.Fatalf("the genuine handshake was refused: %s", r)
	}

	// The same bytes, replayed on a new connection.
	c2, s2 := pair()
	go func() { r, _, _ := acceptor.checkHello(s2, deadline); done <- r }()
	if _, err := c2.Write(hb); err != nil {
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

	// An impostor acceptor: it answers with a challenge it cannot sign.
	impostor := newComm(nil, Options{Rank: 1, Size: 2, Token: "another-attempt"}.withDefaults())
	c3, s3 := pair()
	go func() { r, _, _ := impostor.checkHello(s3, deadline); done <- r }()
	_, err = dialer.dialHandshake(c3, dialer.helloFor(), deadline)
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "could not prove the attempt's token") {
		t.Fatalf("dialing an impostor: %v, want ErrRefused because it could not prove the token", err)
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
	h.shm = &shmOffer{host: hostID(), path: "/dev/shm/" + shmNamePrefix + "1-00", slots: 4, slotBytes: 64}
	f.Add(append(appendHello(nil, h), make([]byte, macLen)...))
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
