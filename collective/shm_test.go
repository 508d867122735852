package collective

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The package's tests run over shared memory by default (newGroup checks
// they do); this runs all of them again, in a child process, with shared
// memory turned off by the environment variable, so that both transports
// pass the same suite in one `go test`.
func TestWholeSuiteOverTCP(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole suite again; skipped with -short")
	}
	if os.Getenv(EnvSHM) == "0" {
		t.Skip("this run is over TCP already")
	}
	if !shmSupported {
		t.Skip("no shared memory links on this OS: the suite ran over TCP")
	}
	cmd := exec.Command(os.Args[0], "-test.skip=^TestWholeSuiteOverTCP$", "-test.count=1")
	cmd.Env = append(os.Environ(), EnvSHM+"=0")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the suite over TCP failed: %v\n%s", err, out)
	}
	if !bytes.Contains(out, []byte("PASS")) {
		t.Fatalf("the suite over TCP did not pass:\n%s", out)
	}
}

// TCP and shared memory run the same schedule and kernels: every rank ends
// with the same bits on both.
func TestTransportsBitIdentical(t *testing.T) {
	t.Parallel()
	skipWithoutShm(t)
	for _, n := range []int{2, 3, 5} {
		t.Run(fmt.Sprintf("ranks%d", n), func(t *testing.T) {
			t.Parallel()
			tcp := newGroup(t, n, Options{Transport: TransportTCP, SegmentBytes: 4096})
			shm := newGroup(t, n, Options{Transport: TransportSHM, SegmentBytes: 4096})
			const count = 50_021
			for _, op := range []Op{Sum, Mean} {
				in32 := randomBufs[float32](n, count, 1)
				in64 := randomBufs[float64](n, count, 2)
				var out [2][][]byte
				for i, comms := range [][]*Comm{tcp, shm} {
					b32, b64 := cloneBufs(in32), cloneBufs(in64)
					noErrors(t, fmt.Sprintf("%v over %v", op, comms[0].opts.Transport), each(n, func(r int) error {
						if err := comms[r].AllReduceFloat32(context.Background(), b32[r], op); err != nil {
							return err
						}
						return comms[r].AllReduceFloat64(context.Background(), b64[r], op)
					}))
					for r := range n {
						out[i] = append(out[i], bytes.Clone(bytesOf(b32[r])), bytes.Clone(bytesOf(b64[r])))
					}
				}
				for k := range out[0] {
					if !bytes.Equal(out[0][k], out[1][k]) {
						t.Fatalf("%v: buffer %d (rank %d, float%d) differs between TCP and shared memory", op, k, k/2, 32*(1+k%2))
					}
					if !bytes.Equal(out[1][k], out[1][k%2]) {
						t.Fatalf("%v: rank %d's float%d result differs from rank 0's", op, k/2, 32*(1+k%2))
					}
				}
			}
		})
	}
}

// skipWithoutShm skips tests of shared memory itself where it is off: on
// other OSes, and in the TCP run of TestWholeSuiteOverTCP.
func skipWithoutShm(t *testing.T) {
	t.Helper()
	if !shmSupported || os.Getenv(EnvSHM) == "0" {
		t.Skip("shared memory links are off here")
	}
}

func randomBufs[T float](n, count int, seed uint64) [][]T {
	bufs := make([][]T, n)
	for r := range n {
		rng := rand.New(rand.NewPCG(seed, uint64(r)))
		bufs[r] = make([]T, count)
		for i := range bufs[r] {
			bufs[r][i] = T(rng.NormFloat64() * 1e3)
		}
	}
	return bufs
}

func cloneBufs[T float](bufs [][]T) [][]T {
	out := make([][]T, len(bufs))
	for r, b := range bufs {
		out[r] = append([]T(nil), b...)
	}
	return out
}

// regionFiles lists the region files of this process that still have a name.
func regionFiles(t *testing.T) []string {
	t.Helper()
	var found []string
	for _, dir := range shmDirs() {
		m, err := filepath.Glob(filepath.Join(dir, fmt.Sprintf("%s%d-*", shmNamePrefix, os.Getpid())))
		if err != nil {
			t.Fatal(err)
		}
		found = append(found, m...)
	}
	return found
}

// A region's name goes as soon as both ends have mapped it, and at once when
// the neighbour refused the connection (here for a wrong token): nothing is
// left in /dev/shm. Not parallel: other tests' handshakes create regions.
func TestSharedMemoryNamesGoAtOnce(t *testing.T) {
	skipWithoutShm(t)
	comms := newGroup(t, 3, Options{Transport: TransportSHM})
	if left := regionFiles(t); len(left) > 0 {
		t.Fatalf("regions still named after Connect: %v", left)
	}
	noErrors(t, "Barrier", each(3, func(r int) error { return comms[r].Barrier(context.Background()) }))

	staleTokenConnect(t, 3, TransportSHM)
	if left := regionFiles(t); len(left) > 0 {
		t.Fatalf("regions still named after refused connections: %v", left)
	}
}

// An acceptor maps a region only if the offer comes from its own host and the
// file is the one the dialer created; otherwise the link is TCP.
func TestSharedMemoryOffersChecked(t *testing.T) {
	t.Parallel()
	skipWithoutShm(t)
	foreign := filepath.Join(t.TempDir(), shmNamePrefix+"x")
	if err := os.WriteFile(foreign, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		offer func(o *shmOffer)
		want  bool
	}{
		{"same host", func(*shmOffer) {}, true},
		{"another host", func(o *shmOffer) { o.host = "other-boot-id/other-host" }, false},
		{"another nonce", func(o *shmOffer) { o.nonce[0]++ }, false},
		{"a path elsewhere", func(o *shmOffer) { o.path = foreign }, false},
		{"a path escaping", func(o *shmOffer) { o.path = "/dev/shm/../../etc/passwd" }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			link, offer, err := createShm(DefaultSegmentBytes)
			if err != nil {
				t.Fatal(err)
			}
			defer shmUnmap(link.mem)
			defer unlinkShm(offer.path)
			tc.offer(offer)
			dialer := newComm(nil, Options{Rank: 0, Size: 2, Token: "tok"}.withDefaults())
			h := dialer.helloFor()
			h.shm = offer
			c := newComm(nil, Options{Rank: 1, Size: 2, Token: "tok"}.withDefaults())
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = ln.Close() }()
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
			type answer struct {
				flags uint8
				err   error
			}
			dialed := make(chan answer, 1)
			go func() {
				flags, err := dialer.dialHandshake(client.(*net.TCPConn), h, time.Now().Add(10*time.Second))
				dialed <- answer{flags, err}
			}()
			reason, got, _ := c.checkHello(server.(*net.TCPConn), time.Now().Add(10*time.Second))
			a := <-dialed
			if a.err != nil || reason != "" {
				t.Fatalf("dialer %v, acceptor reason %q: want accepted", a.err, reason)
			}
			if (got != nil) != tc.want || (a.flags&flagShm != 0) != tc.want {
				t.Fatalf("mapped %v, reply flags %#x: want shared memory %v", got != nil, a.flags, tc.want)
			}
			if got != nil {
				// The acceptor maps the dialer's very region.
				link.ctl.written.Store(42)
				if got.ctl.written.Load() != 42 {
					t.Error("the acceptor's mapping does not see the dialer's writes")
				}
				shmUnmap(got.mem)
			}
		})
	}
}

// Ranks choose per link: a rank that turns shared memory off makes both of
// its links TCP and leaves the others alone; a rank that demands it cannot
// join one that refuses it.
func TestSharedMemoryNegotiation(t *testing.T) {
	t.Parallel()
	skipWithoutShm(t)
	const n = 4
	lns, peers := listeners(t, n)
	comms := make([]*Comm, n)
	noErrors(t, "Connect", each(n, func(r int) error {
		o := Options{Rank: r, Size: n, Token: "mixed", SegmentBytes: 1 << 12, Transport: TransportSHM, ConnectTimeout: 20 * time.Second}
		if r == 2 {
			o.Transport = TransportTCP
		} else if r != 0 {
			o.Transport = TransportAuto
		}
		var err error
		comms[r], err = Connect(context.Background(), lns[r], peers, o)
		return err
	}))
	t.Cleanup(func() {
		for _, c := range comms {
			_ = c.Close()
		}
	})
	// Rank 0 demands shared memory: its neighbours 3 and 1 gave it.
	want := [][2]Transport{{TransportSHM, TransportSHM}, {TransportTCP, TransportSHM}, {TransportTCP, TransportTCP}, {TransportSHM, TransportTCP}}
	for r, c := range comms {
		if send, recv := c.Links(); [2]Transport{send, recv} != want[r] {
			t.Errorf("rank %d: links %v/%v, want %v/%v", r, send, recv, want[r][0], want[r][1])
		}
	}
	for _, count := range []int{0, 7, 100_003} {
		checkAllReduce[float32](t, comms, count, Mean, (*Comm).AllReduceFloat32)
		checkAllReduce[float64](t, comms, count, Sum, (*Comm).AllReduceFloat64)
	}

	errs := tryConnect(t, 2, func(r int) Options {
		o := Options{Token: "x", ConnectTimeout: 2 * time.Second, Transport: TransportSHM}
		if r == 1 {
			o.Transport = TransportTCP
		}
		return o
	})
	if errs[0] == nil || !strings.Contains(errs[0].Error(), "shared memory required") {
		t.Errorf("rank 0 demanding shared memory of a TCP-only rank: %v", errs[0])
	}
	if !errors.Is(errs[1], ErrRefused) || !strings.Contains(errs[1].Error(), "shared memory required") {
		t.Errorf("TCP-only rank 1 dialing a rank that demands shared memory: %v, want ErrRefused saying why", errs[1])
	}
}
