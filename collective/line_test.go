package collective

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// onLine is the Options of a group whose small operations run on the line
// from 2 ranks up.
func onLine(o Options) Options {
	o.lineMinRanks = 2
	return o
}

// lineRan checks that every rank's last operation was a line, and that no
// rank sent or received more than 2 frames in it.
func lineRan(t *testing.T, comms []*Comm, what string) {
	t.Helper()
	for r, c := range comms {
		if c.p.kind != planLine {
			t.Fatalf("%s: rank %d ran plan %d, not the line", what, r, c.p.kind)
		}
		if s, got := c.sentUnits.Load(), c.recvDone.Load(); s > 2 || got > 2 {
			t.Fatalf("%s: rank %d sent %d and received %d frames, want at most 2 each", what, r, s, got)
		}
	}
}

// The line gives the closed form's sums and means, on every rank, for groups
// of 2 to 6 ranks and a default-sized 20, both float types, empty to 16 KiB.
func TestLineAllReduceClosedForm(t *testing.T) {
	t.Parallel()
	for _, n := range []int{2, 3, 4, 6, 20} {
		t.Run(fmt.Sprintf("ranks%d", n), func(t *testing.T) {
			t.Parallel()
			o := Options{SegmentBytes: 1 << 16}
			if n < lineMinRanks {
				o = onLine(o)
			}
			comms := newGroup(t, n, o)
			for _, count := range []int{0, 1, 7, 2048} {
				for _, op := range []Op{Sum, Mean} {
					checkAllReduce[float32](t, comms, count, op, (*Comm).AllReduceFloat32)
					lineRan(t, comms, fmt.Sprintf("float32 %v count %d", op, count))
					checkAllReduce[float64](t, comms, count, op, (*Comm).AllReduceFloat64)
					lineRan(t, comms, fmt.Sprintf("float64 %v count %d", op, count))
				}
			}
			// Past lineMaxBytes, and past the segment, the ring runs.
			for _, count := range []int{lineMaxBytes/4 + 1, 1 << 16} {
				checkAllReduce[float32](t, comms, count, Sum, (*Comm).AllReduceFloat32)
				if comms[0].p.kind != planRing {
					t.Fatalf("count %d: plan %d, want the ring", count, comms[0].p.kind)
				}
			}
		})
	}
}

// Rounding happens on the line too: every rank ends with rank size-1's bits,
// over TCP and over shared memory alike, and the same bits again when run
// again (what a resumed run needs).
func TestLineIdenticalBits(t *testing.T) {
	t.Parallel()
	const n, count = 7, 1000
	groups := [][]*Comm{newGroup(t, n, onLine(Options{Transport: TransportTCP, SegmentBytes: 4096}))}
	if shmSupported && (Options{}).wantShm() {
		groups = append(groups, newGroup(t, n, onLine(Options{Transport: TransportSHM, SegmentBytes: 4096})))
	}
	in := randomBufs[float32](n, count, 3)
	var first []byte
	for g, comms := range groups {
		for round := range 2 {
			bufs := cloneBufs(in)
			noErrors(t, "AllReduce", each(n, func(r int) error {
				return comms[r].AllReduceFloat32(context.Background(), bufs[r], Mean)
			}))
			lineRan(t, comms, "Mean")
			if first == nil {
				first = bytes.Clone(bytesOf(bufs[0]))
			}
			for r := range n {
				if !bytes.Equal(bytesOf(bufs[r]), first) {
					t.Fatalf("group %d (%v) round %d: rank %d's result differs from the first", g, comms[0].opts.Transport, round, r)
				}
			}
		}
	}
}

// An all-gather of records of different lengths (empty ones among them) and
// the barrier on the line; past a segment the all-gather runs the ring.
func TestLineAllGatherAndBarrier(t *testing.T) {
	t.Parallel()
	const n = 6
	comms := newGroup(t, n, onLine(Options{SegmentBytes: 1 << 12}))
	for _, lengths := range [][]int{{0, 1, 7, 300, 0, 5}, {0, 0, 0, 0, 0, 0}, {1000, 2000, 0, 0, 0, 1000}} {
		outs := make([][][]byte, n)
		noErrors(t, "AllGather", each(n, func(r int) error {
			var err error
			outs[r], err = comms[r].AllGather(context.Background(), bytes.Repeat([]byte{byte(r + 1)}, lengths[r]))
			return err
		}))
		total := 0
		for _, l := range lengths {
			total += l
		}
		if kind := comms[0].p.kind; (kind == planLine) != (total <= 1<<12) {
			t.Fatalf("lengths %v: plan %d", lengths, kind)
		}
		for r := range n {
			for i, b := range outs[r] {
				if !bytes.Equal(b, bytes.Repeat([]byte{byte(i + 1)}, lengths[i])) {
					t.Fatalf("lengths %v: rank %d: out[%d] = %d bytes, want %d bytes of %d", lengths, r, i, len(b), lengths[i], i+1)
				}
			}
		}
	}
	checkBarrier(t, comms, 3)
	lineRan(t, comms, "Barrier")
}

// A rank that dies on the line fails every rank at once, naming a peer, and
// lengths that differ fail with ErrMismatch: as on the ring.
func TestLineFailures(t *testing.T) {
	t.Parallel()
	const n, victim, timeout = 5, 2, time.Minute
	comms := newGroup(t, n, onLine(Options{Timeout: timeout}))
	comms[victim].hookRecv = func(int) { comms[victim].Abort() }
	start := time.Now()
	errs := each(n, func(r int) error {
		return comms[r].AllReduceFloat32(context.Background(), make([]float32, 16), Sum)
	})
	if elapsed := time.Since(start); elapsed > timeout/4 {
		t.Errorf("ranks took %v to notice, deadline %v", elapsed, timeout)
	}
	for r, err := range errs {
		if err == nil {
			t.Fatalf("rank %d: AllReduce succeeded with rank %d dead", r, victim)
		}
		if r != victim {
			mentionsRanks(t, err, r, (r+n-1)%n, (r+1)%n)
		}
	}

	comms = newGroup(t, 3, onLine(Options{Timeout: timeout}))
	errs = each(3, func(r int) error {
		return comms[r].AllReduceFloat32(context.Background(), make([]float32, 8+r%2), Sum)
	})
	mismatched := 0
	for _, err := range errs {
		if errors.Is(err, ErrMismatch) {
			mismatched++
		} else if err == nil {
			t.Fatal("AllReduce of different lengths succeeded")
		}
	}
	if mismatched == 0 {
		t.Fatalf("no rank reported ErrMismatch: %v", errs)
	}
}
