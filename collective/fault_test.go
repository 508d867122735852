package collective

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// mentionsRanks checks an error names this rank and its peer, so that a
// failed run's report says who could not reach whom.
func mentionsRanks(t *testing.T, err error, self int, peers ...int) {
	t.Helper()
	msg := err.Error()
	if !strings.Contains(msg, fmt.Sprintf("rank %d:", self)) {
		t.Errorf("rank %d's error does not name it: %v", self, err)
	}
	for _, p := range peers {
		if strings.Contains(msg, fmt.Sprintf("rank %d", p)) {
			return
		}
	}
	t.Errorf("rank %d's error names none of the peers %v: %v", self, peers, err)
}

// A rank cut mid-AllReduce (its connections reset, as a crash or a network
// fault would): every other rank errors long before the deadline.
func TestPeerDeathMidAllReduce(t *testing.T) {
	t.Parallel()
	const n, victim, timeout = 4, 2, time.Minute
	comms := newGroup(t, n, Options{Timeout: timeout, SegmentBytes: 1 << 16})
	comms[victim].hookRecv = func(unit int) {
		if unit == 5 {
			comms[victim].Abort()
		}
	}
	start := time.Now()
	errs := each(n, func(r int) error {
		return comms[r].AllReduceFloat32(context.Background(), make([]float32, 1<<22), Sum)
	})
	elapsed := time.Since(start)
	if elapsed > timeout/4 {
		t.Errorf("ranks took %v to notice, deadline %v", elapsed, timeout)
	}
	for r, err := range errs {
		if err == nil {
			t.Fatalf("rank %d: AllReduce succeeded with rank %d dead", r, victim)
		}
		if r == victim {
			if !errors.Is(err, ErrAborted) {
				t.Errorf("victim: %v, want ErrAborted", err)
			}
			continue
		}
		mentionsRanks(t, err, r, (r+n-1)%n, (r+1)%n)
		if !errors.Is(err, ErrPeerGone) {
			t.Errorf("rank %d: %v, want ErrPeerGone", r, err)
		}
		// The Comm stays failed, with the same error.
		if err2 := comms[r].Barrier(context.Background()); !errors.Is(err2, ErrPeerGone) {
			t.Errorf("rank %d: Barrier after failure: %v", r, err2)
		}
	}
}

// A peer that stays connected but never calls the operation: every other rank
// errors at the operation's deadline, no earlier and not much later.
func TestSilentPeerErrorsAtDeadline(t *testing.T) {
	t.Parallel()
	for _, viaContext := range []bool{false, true} {
		t.Run(fmt.Sprintf("context%v", viaContext), func(t *testing.T) {
			t.Parallel()
			const n, silent, deadline = 3, 1, time.Second
			o := Options{Timeout: deadline}
			if viaContext {
				o.Timeout = time.Hour
			}
			comms := newGroup(t, n, o)
			start := time.Now()
			errs := each(n, func(r int) error {
				if r == silent {
					return nil
				}
				ctx := context.Background()
				if viaContext {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, deadline)
					defer cancel()
				}
				return comms[r].AllReduceFloat64(ctx, make([]float64, 1000), Sum)
			})
			elapsed := time.Since(start)
			if elapsed < deadline-50*time.Millisecond || elapsed > deadline+5*time.Second {
				t.Errorf("errors after %v, deadline %v", elapsed, deadline)
			}
			for r, err := range errs {
				if r == silent {
					continue
				}
				if err == nil {
					t.Fatalf("rank %d: AllReduce succeeded without rank %d", r, silent)
				}
				mentionsRanks(t, err, r, (r+n-1)%n)
			}
			// The rank downstream of the silent one timed out itself.
			if err := errs[silent+1]; !errors.Is(err, os.ErrDeadlineExceeded) && !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("rank %d: %v, want a deadline error", silent+1, err)
			}
		})
	}
}

// Cancelling the context of an operation in flight ends it on this rank with
// the context's error and on its peer with a lost connection.
func TestCancelMidOperation(t *testing.T) {
	t.Parallel()
	comms := newGroup(t, 2, Options{SegmentBytes: 1 << 16})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	comms[0].hookRecv = func(unit int) {
		if unit == 3 {
			cancel()
		}
	}
	errs := each(2, func(r int) error {
		c := context.Background()
		if r == 0 {
			c = ctx
		}
		return comms[r].AllReduceFloat32(c, make([]float32, 1<<22), Sum)
	})
	if !errors.Is(errs[0], context.Canceled) {
		t.Errorf("rank 0: %v, want context.Canceled", errs[0])
	}
	if !errors.Is(errs[1], ErrPeerGone) {
		t.Errorf("rank 1: %v, want ErrPeerGone", errs[1])
	}
}

// Close during an operation ends it with ErrClosed; the peer learns the
// connection is gone. Close after a clean run tells the peer it left.
func TestCloseDuringAndAfterOperation(t *testing.T) {
	t.Parallel()
	comms := newGroup(t, 2, Options{SegmentBytes: 1 << 16})
	comms[0].hookRecv = func(unit int) {
		if unit == 3 {
			_ = comms[0].Close()
		}
	}
	errs := each(2, func(r int) error {
		return comms[r].AllReduceFloat32(context.Background(), make([]float32, 1<<22), Sum)
	})
	if !errors.Is(errs[0], ErrClosed) {
		t.Errorf("rank 0: %v, want ErrClosed", errs[0])
	}
	if !errors.Is(errs[1], ErrPeerGone) {
		t.Errorf("rank 1: %v, want ErrPeerGone", errs[1])
	}

	comms = newGroup(t, 2, Options{})
	noErrors(t, "Barrier", each(2, func(r int) error { return comms[r].Barrier(context.Background()) }))
	_ = comms[0].Close()
	err := comms[1].Barrier(context.Background())
	if !errors.Is(err, ErrPeerGone) || !strings.Contains(err.Error(), "rank 0 closed its Comm") {
		t.Errorf("rank 1 after rank 0's Close: %v, want rank 0's goodbye", err)
	}
	if err := comms[0].Barrier(context.Background()); !errors.Is(err, ErrClosed) {
		t.Errorf("Barrier on a closed Comm: %v, want ErrClosed", err)
	}
}

func TestMismatchedCallsFail(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		call func(c *Comm) error
		want string // the error of the rank at fault, if not ErrMismatch
		all  bool   // every rank must fail
	}{
		{"lengths", func(c *Comm) error {
			return c.AllReduceFloat32(context.Background(), make([]float32, 10+c.Rank()), Sum)
		}, "", true},
		{"types", func(c *Comm) error {
			if c.Rank() == 0 {
				return c.AllReduceFloat32(context.Background(), make([]float32, 8), Sum)
			}
			return c.AllReduceFloat64(context.Background(), make([]float64, 4), Sum)
		}, "", true},
		{"operations", func(c *Comm) error {
			if c.Rank() == 0 {
				return c.Barrier(context.Background())
			}
			return c.Broadcast(context.Background(), make([]byte, 3), 1)
		}, "", false},
		{"roots", func(c *Comm) error {
			return c.Broadcast(context.Background(), make([]byte, 3), c.Rank()%2)
		}, "", false},
		// One rank cannot even start: the others learn at once.
		{"root out of range", func(c *Comm) error {
			return c.Broadcast(context.Background(), make([]byte, 3), 2*c.Rank())
		}, "not in [0, 3)", false},
		{"cancelled context", func(c *Comm) error {
			ctx, cancel := context.WithCancel(context.Background())
			if c.Rank() == 1 {
				cancel()
			}
			defer cancel()
			return c.AllReduceFloat32(ctx, make([]float32, 100), Sum)
		}, "context canceled", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			comms := newGroup(t, 3, Options{Timeout: 30 * time.Second})
			errs := each(3, func(r int) error { return tc.call(comms[r]) })
			mismatch := 0
			for r, err := range errs {
				if err == nil {
					// A rank that only sends (a broadcast root, one that
					// forwards before the rank at fault) may finish; it
					// meets the failure at its next operation.
					if tc.all {
						t.Errorf("rank %d: no error", r)
					}
					continue
				}
				if errors.Is(err, os.ErrDeadlineExceeded) {
					t.Errorf("rank %d waited for the deadline: %v", r, err)
				}
				if errors.Is(err, ErrMismatch) || strings.Contains(err.Error(), tc.want) {
					mismatch++
				}
			}
			if mismatch == 0 {
				t.Fatalf("no rank reported the mismatch (%q): %v", tc.want, errs)
			}
		})
	}
}

// rawHello dials addr and presents h; it returns the acceptor's reply.
func rawHello(t *testing.T, addr string, h hello) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write(appendHello(nil, h)); err != nil {
		t.Fatal(err)
	}
	return conn
}

// Connections with a wrong token, world size or rank are refused with the
// reason, and the group forms anyway. A rank whose own token is wrong cannot
// join: its Connect fails with ErrRefused at once.
func TestHandshakeRefusesStrangers(t *testing.T) {
	t.Parallel()
	const n = 3
	lns, peers := listeners(t, n)
	// Each stranger differs from rank 0's hello in one field; the key is
	// what rank 1's refusal must say.
	strangers := map[string]func(h *hello){
		"world size 4":            func(h *hello) { h.size = 4 },
		"only its left neighbour": func(h *hello) { h.from = 2 },
		"segment size":            func(h *hello) { h.segment = 4096 },
		"protocol version":        func(h *hello) { h.version = 99 },
	}
	// Queued in rank 1's backlog before any rank connects, so rank 1 meets
	// them first.
	conns := map[string]net.Conn{}
	for want, change := range strangers {
		h := hello{version: protocolVersion, order: nativeOrder, size: n, from: 0, to: 1, segment: DefaultSegmentBytes, nonce: newNonce()}
		change(&h)
		conns[want] = rawHello(t, peers[1], h)
	}
	// A stranger with every parameter right but the token: it cannot prove
	// it, nor can rank 1 prove the token to it.
	// Connected before the ranks start, so that rank 1 accepts it first
	// (a dial after the group formed would find the listener closed).
	wtConn, err := net.Dial("tcp", peers[1])
	if err != nil {
		t.Fatal(err)
	}
	wrongTok := make(chan error, 1)
	go func() {
		conn := wtConn
		defer func() { _ = conn.Close() }()
		c := newComm(nil, Options{Rank: 0, Size: n, Token: "secret-of-attempt-1"}.withDefaults())
		_, err = c.dialHandshake(conn.(*net.TCPConn), c.helloFor(), time.Now().Add(10*time.Second))
		wrongTok <- err
	}()
	comms := make([]*Comm, n)
	noErrors(t, "Connect", each(n, func(r int) error {
		var err error
		// A bound well under the default (Timeout, 5m): should a stranger
		// pass for rank 0 (a broken token check), rank 0 would dial a
		// closed listener until then, and the test would hang instead of
		// failing.
		comms[r], err = Connect(context.Background(), lns[r], peers, Options{Rank: r, Size: n, Token: "secret", ConnectTimeout: 20 * time.Second})
		return err
	}))
	defer func() {
		for _, c := range comms {
			_ = c.Close()
		}
	}()
	for want, conn := range conns {
		rp, err := readReply(conn)
		_ = conn.Close()
		if err != nil {
			t.Errorf("%s: no reply: %v", want, err)
			continue
		}
		if rp.status != statusRefused || !strings.Contains(rp.reason, want) {
			t.Errorf("stranger with %s: status %d, reason %q", want, rp.status, rp.reason)
		}
	}
	if err := <-wrongTok; !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "wrong token") {
		t.Errorf("stranger with the wrong token: %v, want ErrRefused for the token", err)
	}
	noErrors(t, "Barrier", each(n, func(r int) error { return comms[r].Barrier(context.Background()) }))

	// A rank with the wrong token.
	start := time.Now()
	errs := staleTokenConnect(t, n, TransportAuto)
	// Rank 1 waited for a valid rank 0 until its connect timeout.
	if errs[1] == nil || !strings.Contains(errs[1].Error(), "wrong token") {
		t.Errorf("rank 1: %v, want a timeout that mentions the refused token", errs[1])
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Connect took %v with a 2s connect timeout", d)
	}
}

// staleTokenConnect connects n ranks, rank 0 with a wrong token, and checks
// that rank 0 is refused for it; it returns every rank's Connect error.
func staleTokenConnect(t *testing.T, n int, tr Transport) []error {
	t.Helper()
	errs := tryConnect(t, n, func(r int) Options {
		o := Options{Token: "secret", ConnectTimeout: 2 * time.Second, Transport: tr}
		if r == 0 {
			o.Token = "stale"
		}
		return o
	})
	if !errors.Is(errs[0], ErrRefused) || !strings.Contains(errs[0].Error(), "wrong token") {
		t.Errorf("rank 0 with a wrong token: %v, want ErrRefused for the token", errs[0])
	}
	return errs
}

func TestOptionsValidated(t *testing.T) {
	t.Parallel()
	for _, o := range []Options{
		{Rank: 0, Size: 0, Token: "x"},
		{Rank: 2, Size: 2, Token: "x"},
		{Rank: 0, Size: 2},
	} {
		ln, err := Listen("127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		peers := make([]string, max(o.Size, 0))
		if _, err := Connect(context.Background(), ln, peers, o); err == nil {
			t.Errorf("Connect accepted %+v", o)
		}
		if _, err := ln.Accept(); err == nil {
			t.Errorf("Connect left the listener open after rejecting %+v", o)
		}
	}
}

// collectiveGoroutines lists the goroutines running code of a Comm.
func collectiveGoroutines() []string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var found []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "collective.(*Comm)") || strings.Contains(g, "collective.Connect") || strings.Contains(g, "collective.(*Reducer)") {
			found = append(found, g)
		}
	}
	return found
}

// noGoroutinesLeft waits, by yielding, for goroutines that have signalled
// their exit to finish returning; then any left are leaks.
func noGoroutinesLeft() []string {
	deadline := time.Now().Add(5 * time.Second)
	for {
		left := collectiveGoroutines()
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		runtime.Gosched()
	}
}

func TestMain(m *testing.M) {
	switch os.Getenv("COLLECTIVE_HELPER") {
	case "":
	case "shared":
		sharedHelperRank()
		return
	default:
		helperRank()
		return
	}
	code := m.Run()
	if code == 0 {
		if left := noGoroutinesLeft(); len(left) > 0 {
			fmt.Fprintf(os.Stderr, "goroutines of closed Comms still running:\n%s\n", strings.Join(left, "\n\n"))
			code = 1
		}
	}
	os.Exit(code)
}

// Not parallel: it counts the package's goroutines, so other tests' Comms
// must not be running (parallel tests are paused while it runs).
func TestCloseLeavesNoGoroutine(t *testing.T) {
	// Goroutines of Comms earlier tests closed may still be returning
	// (runnable, on a loaded machine): wait for them as after Close below.
	if left := noGoroutinesLeft(); len(left) > 0 {
		t.Fatalf("goroutines before the test: %v", left)
	}
	comms := newGroup(t, 4, Options{})
	noErrors(t, "AllReduce", each(4, func(r int) error {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		return comms[r].AllReduceFloat32(ctx, make([]float32, 1000), Sum)
	}))
	if len(collectiveGoroutines()) == 0 {
		t.Fatal("found no goroutine of a live Comm: the check cannot see them")
	}
	comms[1].Abort()
	for _, c := range comms {
		_ = c.Close()
	}
	if left := noGoroutinesLeft(); len(left) > 0 {
		t.Fatalf("after Close:\n%s", strings.Join(left, "\n\n"))
	}
	for r, c := range comms {
		for _, l := range []*shmLink{c.sendShm, c.recvShm} {
			if l != nil && l.mem != nil {
				t.Errorf("rank %d: a shared-memory mapping outlived Close", r)
			}
		}
	}
}

// A rank in another process is killed (SIGKILL) in the middle of an
// AllReduce: the ranks in this process error well before the deadline, over
// TCP and over shared memory (where nothing but the idle TCP connection
// tells them, and the dead process's mapping must not matter).
func TestPeerProcessKilledMidAllReduce(t *testing.T) {
	t.Parallel()
	for _, tr := range []Transport{TransportTCP, TransportSHM} {
		t.Run(tr.String(), func(t *testing.T) {
			t.Parallel()
			if tr == TransportSHM {
				skipWithoutShm(t)
			}
			peerProcessKilled(t, tr)
		})
	}
}

func peerProcessKilled(t *testing.T, tr Transport) {
	const n, victim, timeout = 3, 1, time.Minute
	lns, peers, _, cmd := startHelper(t, "1", victim, n, tr)
	start := time.Now()
	errs := each(n, func(r int) error {
		if r == victim {
			return nil
		}
		c, err := Connect(context.Background(), lns[r], peers, Options{Rank: r, Size: n, Token: "helper", Timeout: timeout, SegmentBytes: 1 << 16, Transport: tr})
		if err != nil {
			return fmt.Errorf("connect: %w", err)
		}
		defer func() { _ = c.Close() }()
		if send, recv := c.Links(); tr == TransportSHM && (send != TransportSHM || recv != TransportSHM) {
			return fmt.Errorf("connect: links %v/%v, want shared memory", send, recv)
		}
		return c.AllReduceFloat32(context.Background(), make([]float32, 1<<22), Sum)
	})
	if d := time.Since(start); d > timeout/4 {
		t.Errorf("took %v to notice the death, deadline %v", d, timeout)
	}
	for r, err := range errs {
		if r == victim {
			continue
		}
		if err == nil || strings.Contains(err.Error(), "connect:") {
			t.Fatalf("rank %d: %v, want a failed AllReduce", r, err)
		}
		mentionsRanks(t, err, r, 0, 1, 2) // a neighbour: the victim, or the one that failed first
		if !errors.Is(err, ErrPeerGone) {
			t.Errorf("rank %d: %v, want ErrPeerGone", r, err)
		}
	}
	if err := cmd.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Errorf("helper: %v, want killed", err)
	}
}

// startHelper starts rank of an n-rank group in a helper process (this test
// binary, with COLLECTIVE_HELPER=mode) and tells it every rank's address. It
// returns the other ranks' listeners, the addresses, the helper's output
// after its address, and the process, killed when the test ends.
func startHelper(t *testing.T, mode string, rank, n int, tr Transport) ([]net.Listener, []string, *bufio.Reader, *exec.Cmd) {
	t.Helper()
	lns, peers := listeners(t, n)
	_ = lns[rank].Close() // the helper listens in its own process
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "COLLECTIVE_HELPER="+mode, fmt.Sprintf("HELPER_RANK=%d", rank),
		fmt.Sprintf("HELPER_SIZE=%d", n), fmt.Sprintf("HELPER_TRANSPORT=%d", tr))
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	out := bufio.NewReader(stdout)
	line, err := out.ReadString('\n')
	if err != nil {
		t.Fatalf("helper: %v", err)
	}
	peers[rank] = strings.TrimSpace(line)
	if _, err := io.WriteString(stdin, strings.Join(peers, " ")+"\n"); err != nil {
		t.Fatal(err)
	}
	return lns, peers, out, cmd
}

// helperComm is the Comm of a helper process's rank, connected as
// startHelper arranged.
func helperComm(segment int) *Comm {
	rank, _ := strconv.Atoi(os.Getenv("HELPER_RANK"))
	size, _ := strconv.Atoi(os.Getenv("HELPER_SIZE"))
	tr, _ := strconv.Atoi(os.Getenv("HELPER_TRANSPORT"))
	ln, err := Listen("127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	fmt.Println(ln.Addr().String())
	line, err := bufio.NewReader(os.Stdin).ReadString('\n')
	if err != nil {
		panic(err)
	}
	c, err := Connect(context.Background(), ln, strings.Fields(line), Options{Rank: rank, Size: size, Token: "helper", SegmentBytes: segment, Transport: Transport(tr)})
	if err != nil {
		panic(err)
	}
	return c
}

// helperRank is the victim process of TestPeerProcessKilledMidAllReduce: it
// prints its address, reads the peers' addresses, and kills itself with
// SIGKILL after a few frames of the AllReduce.
func helperRank() {
	c := helperComm(1 << 16)
	c.hookRecv = func(unit int) {
		if unit == 5 {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
	}
	_ = c.AllReduceFloat32(context.Background(), make([]float32, 1<<22), Sum)
	os.Exit(3)
}
