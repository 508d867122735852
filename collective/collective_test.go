package collective

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// newGroup connects n ranks over loopback TCP; they are closed at the end of
// the test.
func newGroup(t testing.TB, n int, o Options) []*Comm {
	t.Helper()
	lns, peers := listeners(t, n)
	comms := make([]*Comm, n)
	errs := each(n, func(r int) error {
		oo := o
		oo.Rank, oo.Size = r, n
		if oo.Token == "" {
			oo.Token = "test-token"
		}
		var err error
		comms[r], err = Connect(context.Background(), lns[r], peers, oo)
		return err
	})
	t.Cleanup(func() {
		for _, c := range comms {
			if c != nil {
				_ = c.Close()
			}
		}
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: Connect: %v", r, err)
		}
	}
	// The tests run over shared memory unless told otherwise, and must not
	// fall back to TCP silently (TestWholeSuiteOverTCP runs them over TCP).
	want := TransportTCP
	if n > 1 && (o.Transport == TransportSHM || o.Transport == TransportAuto && o.wantShm()) {
		want = TransportSHM
	}
	for r, c := range comms {
		if send, recv := c.Links(); send != want || recv != want {
			t.Fatalf("rank %d: links %v/%v, want %v", r, send, recv, want)
		}
	}
	return comms
}

// tryConnect connects n ranks with opts(r) (Rank and Size filled in) on
// fresh listeners, closes whatever connected and returns each rank's
// Connect error.
func tryConnect(t testing.TB, n int, opts func(r int) Options) []error {
	t.Helper()
	lns, peers := listeners(t, n)
	return each(n, func(r int) error {
		o := opts(r)
		o.Rank, o.Size = r, n
		c, err := Connect(context.Background(), lns[r], peers, o)
		if err == nil {
			_ = c.Close()
		}
		return err
	})
}

// listeners opens n loopback listeners and returns them with their addresses.
func listeners(t testing.TB, n int) ([]net.Listener, []string) {
	t.Helper()
	lns := make([]net.Listener, n)
	peers := make([]string, n)
	for r := range n {
		ln, err := Listen("127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns[r], peers[r] = ln, ln.Addr().String()
	}
	return lns, peers
}

// each runs f for every rank at once and returns each rank's error.
func each(n int, f func(r int) error) []error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() { errs[r] = f(r) })
	}
	wg.Wait()
	return errs
}

func noErrors(t testing.TB, what string, errs []error) {
	t.Helper()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("%s: rank %d: %v", what, r, err)
		}
	}
}

var testCounts = []int{0, 1, 7, 1 << 20}

// Rank r contributes r+i at index i, so the sum is n*i + n(n-1)/2, exact in
// float32 for every count tested (below 2^24).
func TestAllReduceClosedForm(t *testing.T) {
	t.Parallel()
	for _, seg := range []int{0, 1000} { // default (1 MiB) and odd, tiny segments
		for n := 1; n <= 8; n++ {
			t.Run(fmt.Sprintf("segment%d/ranks%d", seg, n), func(t *testing.T) {
				t.Parallel()
				comms := newGroup(t, n, Options{SegmentBytes: seg})
				for _, count := range testCounts {
					for _, op := range []Op{Sum, Mean} {
						checkAllReduce[float32](t, comms, count, op, (*Comm).AllReduceFloat32)
						checkAllReduce[float64](t, comms, count, op, (*Comm).AllReduceFloat64)
					}
				}
			})
		}
	}
}

func checkAllReduce[T float](t *testing.T, comms []*Comm, count int, op Op, f func(*Comm, context.Context, []T, Op) error) {
	t.Helper()
	n := len(comms)
	bufs := make([][]T, n)
	for r := range n {
		bufs[r] = make([]T, count)
		for i := range bufs[r] {
			bufs[r][i] = T(r + i)
		}
	}
	noErrors(t, fmt.Sprintf("%T %v count %d", T(0), op, count), each(n, func(r int) error {
		return f(comms[r], context.Background(), bufs[r], op)
	}))
	for i := range count {
		want := T(n*i + n*(n-1)/2)
		if op == Mean {
			want /= T(n)
		}
		for r := range n {
			if bufs[r][i] != want {
				t.Fatalf("%T %v count %d ranks %d: rank %d [%d] = %v, want %v", T(0), op, count, n, r, i, bufs[r][i], want)
			}
		}
	}
}

// Ranks must end with identical bits even where rounding happens.
func TestAllReduceIdenticalBitsOnRandomData(t *testing.T) {
	t.Parallel()
	const n, count = 5, 100_003
	comms := newGroup(t, n, Options{SegmentBytes: 4096})
	bufs := make([][]float32, n)
	for r := range n {
		bufs[r] = make([]float32, count)
		x := uint32(r*7919 + 1)
		for i := range bufs[r] {
			x = x*1664525 + 1013904223
			bufs[r][i] = float32(x>>8)/float32(1<<24) - 0.5
		}
	}
	noErrors(t, "AllReduce", each(n, func(r int) error {
		return comms[r].AllReduceFloat32(context.Background(), bufs[r], Mean)
	}))
	for r := 1; r < n; r++ {
		if !bytes.Equal(bytesOf(bufs[r]), bytesOf(bufs[0])) {
			t.Fatalf("rank %d's result differs from rank 0's", r)
		}
	}
}

func TestBroadcastFromEveryRoot(t *testing.T) {
	t.Parallel()
	for n := 1; n <= 8; n++ {
		t.Run(fmt.Sprintf("ranks%d", n), func(t *testing.T) {
			t.Parallel()
			comms := newGroup(t, n, Options{SegmentBytes: 1 << 16})
			for root := range n {
				for _, size := range testCounts {
					bufs := make([][]byte, n)
					for r := range n {
						bufs[r] = make([]byte, size)
						for i := range bufs[r] {
							bufs[r][i] = byte(r*31 + i*7)
						}
					}
					want := bytes.Clone(bufs[root])
					noErrors(t, fmt.Sprintf("root %d size %d", root, size), each(n, func(r int) error {
						return comms[r].Broadcast(context.Background(), bufs[r], root)
					}))
					for r := range n {
						if !bytes.Equal(bufs[r], want) {
							t.Fatalf("root %d size %d: rank %d got other bytes", root, size, r)
						}
					}
				}
			}
			// The float32 form, from the last rank.
			fbufs := make([][]float32, n)
			for r := range n {
				fbufs[r] = []float32{float32(r), float32(r) + 0.5, -1}
			}
			noErrors(t, "BroadcastFloat32", each(n, func(r int) error {
				return comms[r].BroadcastFloat32(context.Background(), fbufs[r], n-1)
			}))
			for r := range n {
				if fbufs[r][0] != float32(n-1) || fbufs[r][1] != float32(n-1)+0.5 || fbufs[r][2] != -1 {
					t.Fatalf("BroadcastFloat32: rank %d got %v", r, fbufs[r])
				}
			}
		})
	}
}

func TestAllGatherDifferentLengths(t *testing.T) {
	t.Parallel()
	for n := 1; n <= 8; n++ {
		t.Run(fmt.Sprintf("ranks%d", n), func(t *testing.T) {
			t.Parallel()
			comms := newGroup(t, n, Options{SegmentBytes: 1 << 12})
			// Rank r sends lengths[r] bytes of value r: empty, tiny, odd and
			// larger than a segment.
			length := func(r int) int { return []int{0, 1, 7, 1 << 14, 3, 0, 100_001, 5}[r] }
			outs := make([][][]byte, n)
			noErrors(t, "AllGather", each(n, func(r int) error {
				var err error
				outs[r], err = comms[r].AllGather(context.Background(), bytes.Repeat([]byte{byte(r)}, length(r)))
				return err
			}))
			for r := range n {
				if len(outs[r]) != n {
					t.Fatalf("rank %d: %d slices, want %d", r, len(outs[r]), n)
				}
				for i, b := range outs[r] {
					if !bytes.Equal(b, bytes.Repeat([]byte{byte(i)}, length(i))) {
						t.Fatalf("rank %d: out[%d] has %d bytes, want %d bytes of %d", r, i, len(b), length(i), i)
					}
				}
			}
		})
	}
}

// No rank leaves the barrier before every rank has entered it.
func TestBarrier(t *testing.T) {
	t.Parallel()
	for n := 1; n <= 8; n++ {
		t.Run(fmt.Sprintf("ranks%d", n), func(t *testing.T) {
			t.Parallel()
			checkBarrier(t, newGroup(t, n, Options{}), 3)
		})
	}
}

// checkBarrier runs rounds barriers and checks that no rank left one before
// every rank had entered it.
func checkBarrier(t *testing.T, comms []*Comm, rounds int) {
	t.Helper()
	n := len(comms)
	for round := range rounds {
		var entered atomic.Int64
		seen := make([]int64, n)
		noErrors(t, "Barrier", each(n, func(r int) error {
			entered.Add(1)
			err := comms[r].Barrier(context.Background())
			seen[r] = entered.Load()
			return err
		}))
		for r, s := range seen {
			if s != int64(n) {
				t.Fatalf("round %d: rank %d left the barrier when %d of %d ranks had entered", round, r, s, n)
			}
		}
	}
}

// TestSegmentAgreement: a group left to the default segment takes
// DefaultTCPSegmentBytes when every ring link is TCP, keeps
// DefaultSegmentBytes when any rank links by shared memory, and a
// SegmentBytes set in Options is kept; the sums are right in every case.
func TestSegmentAgreement(t *testing.T) {
	cases := []struct {
		name string
		o    Options
		want int
		shm  bool
	}{
		{"tcp, default", Options{Transport: TransportTCP}, DefaultTCPSegmentBytes, false},
		{"tcp, set", Options{Transport: TransportTCP, SegmentBytes: 64 << 10}, 64 << 10, false},
		{"shm, default", Options{Transport: TransportSHM}, DefaultSegmentBytes, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.shm {
				skipWithoutShm(t)
			}
			comms := newGroup(t, 3, tc.o)
			bufs := make([][]float32, 3)
			errs := each(3, func(r int) error {
				if got := comms[r].opts.SegmentBytes; got != tc.want {
					return fmt.Errorf("segment %d, want %d", got, tc.want)
				}
				bufs[r] = make([]float32, 3<<20) // 12 MiB: several segments of either size
				for i := range bufs[r] {
					bufs[r][i] = float32(r + i%7)
				}
				return comms[r].AllReduceFloat32(context.Background(), bufs[r], Sum)
			})
			for r, err := range errs {
				if err != nil {
					t.Fatalf("rank %d: %v", r, err)
				}
			}
			for r := range bufs {
				for i, v := range bufs[r] {
					if want := float32(3 + 3*(i%7)); v != want {
						t.Fatalf("rank %d: element %d = %v, want %v", r, i, v, want)
					}
				}
			}
		})
	}
}
