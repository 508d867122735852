package collective

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// allocShared allocates count float64s' worth of shared buffer on every rank.
func allocShared(t testing.TB, comms []*Comm, bytes int) []*SharedBuffer {
	t.Helper()
	bufs := make([]*SharedBuffer, len(comms))
	noErrors(t, "AllocShared", each(len(comms), func(r int) error {
		var err error
		bufs[r], err = comms[r].AllocShared(context.Background(), bytes)
		return err
	}))
	t.Cleanup(func() {
		for _, b := range bufs {
			b.Free()
		}
	})
	return bufs
}

// The direct all-reduce over shared buffers gives every rank the ring's bits
// (over TCP, the reference), for float32 and float64, Sum and Mean, world
// sizes 2 to 5, buffers at different offsets on each rank, and counts that
// do not divide by the world size or the segment.
func TestSharedAllReduceMatchesRingBitForBit(t *testing.T) {
	t.Parallel()
	skipWithoutShm(t)
	for _, n := range []int{2, 3, 4, 5} {
		t.Run(fmt.Sprintf("ranks%d", n), func(t *testing.T) {
			t.Parallel()
			tcp := newGroup(t, n, Options{Transport: TransportTCP, SegmentBytes: 4096})
			shm := newGroup(t, n, Options{Transport: TransportSHM})
			const count = 100_003 // 400 KB of float32, over directMinBytes
			bufs := allocShared(t, shm, 8*(count+n))
			for r, b := range bufs {
				if !b.Shared() || len(b.Float64s()) != count+n {
					t.Fatalf("rank %d: shared %v, %d float64s; want a shared buffer of %d", r, b.Shared(), len(b.Float64s()), count+n)
				}
			}
			for _, op := range []Op{Sum, Mean} {
				in32 := randomBufs[float32](n, count, 3)
				in64 := randomBufs[float64](n, count, 4)
				want32, want64 := cloneBufs(in32), cloneBufs(in64)
				noErrors(t, "ring over TCP", each(n, func(r int) error {
					if err := tcp[r].AllReduceFloat32(context.Background(), want32[r], op); err != nil {
						return err
					}
					return tcp[r].AllReduceFloat64(context.Background(), want64[r], op)
				}))
				before := shm[0].directOps
				got32 := make([][]float32, n)
				got64 := make([][]float64, n)
				noErrors(t, "direct", each(n, func(r int) error {
					// Rank r's slice starts r elements into its buffer.
					b32 := bufs[r].Float32s()[r : r+count]
					copy(b32, in32[r])
					if err := shm[r].AllReduceFloat32(context.Background(), b32, op); err != nil {
						return err
					}
					got32[r] = append([]float32(nil), b32...)
					b64 := bufs[r].Float64s()[r : r+count]
					copy(b64, in64[r])
					if err := shm[r].AllReduceFloat64(context.Background(), b64, op); err != nil {
						return err
					}
					got64[r] = append([]float64(nil), b64...)
					return nil
				}))
				if d := shm[0].directOps - before; d != 2 {
					t.Fatalf("%v: %d direct all-reduces, want 2 (the ring ran instead)", op, d)
				}
				for r := range n {
					for i := range count {
						if math.Float32bits(got32[r][i]) != math.Float32bits(want32[r][i]) {
							t.Fatalf("%v float32 rank %d [%d]: %v, ring %v", op, r, i, got32[r][i], want32[r][i])
						}
						if math.Float64bits(got64[r][i]) != math.Float64bits(want64[r][i]) {
							t.Fatalf("%v float64 rank %d [%d]: %v, ring %v", op, r, i, got64[r][i], want64[r][i])
						}
					}
				}
			}
		})
	}
}

// The region files are gone once AllocShared returns: only the mappings
// hold the memory.
func TestAllocSharedLeavesNoFiles(t *testing.T) {
	skipWithoutShm(t)
	before := len(regionFiles(t))
	comms := newGroup(t, 3, Options{Transport: TransportSHM})
	bufs := allocShared(t, comms, 1<<20)
	if !bufs[0].Shared() {
		t.Fatal("not shared")
	}
	if after := len(regionFiles(t)); after != before {
		t.Fatalf("%d region files after AllocShared, %d before", after, before)
	}
}

// Where the group cannot share memory, AllocShared gives every rank
// ordinary memory and the all-reduce runs the ring, with the same results.
// Where one rank passes ordinary memory, every rank takes the ring.
func TestSharedFallsBackToTheRing(t *testing.T) {
	t.Parallel()
	const n, count = 3, 70_001
	check := func(t *testing.T, comms []*Comm, bufs [][]float32, wantDirect int) {
		t.Helper()
		before := comms[1].directOps
		for r := range n {
			for i := range bufs[r] {
				bufs[r][i] = float32(r*count + i)
			}
		}
		noErrors(t, "AllReduce", each(n, func(r int) error { return comms[r].AllReduceFloat32(context.Background(), bufs[r], Sum) }))
		for r := range n {
			for i, v := range bufs[r] {
				if want := float32(3*i + 3*count); v != want {
					t.Fatalf("rank %d [%d] = %v, want %v", r, i, v, want)
				}
			}
		}
		if d := comms[1].directOps - before; d != wantDirect {
			t.Fatalf("%d direct all-reduces, want %d", d, wantDirect)
		}
	}
	// unshared allocates on every rank and checks that no rank's buffer is
	// shared.
	unshared := func(t *testing.T, comms []*Comm) [][]float32 {
		t.Helper()
		bufs := make([][]float32, n)
		for r, b := range allocShared(t, comms, 4*count) {
			if b.Shared() {
				t.Fatalf("rank %d: shared", r)
			}
			bufs[r] = b.Float32s()[:count]
		}
		return bufs
	}
	t.Run("tcp", func(t *testing.T) {
		t.Parallel()
		comms := newGroup(t, n, Options{Transport: TransportTCP})
		check(t, comms, unshared(t, comms), 0)
	})
	t.Run("one rank cannot create its region", func(t *testing.T) {
		t.Parallel()
		skipWithoutShm(t)
		comms := newGroup(t, n, Options{Transport: TransportSHM})
		comms[1].shareDir = filepath.Join(t.TempDir(), "missing") // as a full /dev/shm
		check(t, comms, unshared(t, comms), 0)
	})
	t.Run("one rank unshared", func(t *testing.T) {
		t.Parallel()
		skipWithoutShm(t)
		comms := newGroup(t, n, Options{Transport: TransportSHM})
		sb := allocShared(t, comms, 4*count)
		bufs := make([][]float32, n)
		for r, b := range sb {
			bufs[r] = b.Float32s()[:count]
		}
		check(t, comms, bufs, 1)
		bufs[2] = make([]float32, count)
		check(t, comms, bufs, 0)
		sb[0].Free() // rank 0's buffer is gone: it passes ordinary memory
		if sb[0].Float32s() != nil {
			t.Fatal("Free left the slice")
		}
		bufs[0], bufs[2] = make([]float32, count), sb[2].Float32s()[:count]
		check(t, comms, bufs, 0)
	})
}

// The ranks must agree: different sizes fail AllocShared on every rank, and
// different element types fail the all-reduce, as mismatches.
func TestSharedMismatch(t *testing.T) {
	t.Parallel()
	skipWithoutShm(t)
	comms := newGroup(t, 2, Options{Transport: TransportSHM, Timeout: 10 * time.Second})
	errs := each(2, func(r int) error {
		_, err := comms[r].AllocShared(context.Background(), 1<<20+8*r)
		return err
	})
	if !errors.Is(errs[0], ErrMismatch) && !errors.Is(errs[1], ErrMismatch) {
		t.Errorf("AllocShared of different sizes: %v; want ErrMismatch", errs)
	}
	for r, err := range errs {
		if !errors.Is(err, ErrMismatch) && !errors.Is(err, ErrPeerGone) {
			t.Errorf("rank %d: %v, want ErrMismatch (or the other's failure)", r, err)
		}
	}
	comms = newGroup(t, 2, Options{Transport: TransportSHM, Timeout: 10 * time.Second})
	bufs := allocShared(t, comms, 1<<20)
	errs = each(2, func(r int) error {
		if r == 0 {
			return comms[r].AllReduceFloat32(context.Background(), bufs[r].Float32s()[:1<<17], Sum)
		}
		return comms[r].AllReduceFloat64(context.Background(), bufs[r].Float64s()[:1<<17], Sum)
	})
	for r, err := range errs {
		if !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), "byte elements") {
			t.Errorf("rank %d: %v, want ErrMismatch naming the element sizes", r, err)
		}
	}
}

// A rank that never joins leaves the others to their deadline; one that
// fails while it computes its chunk fails the others at the exit barrier.
func TestSharedAllReduceFailures(t *testing.T) {
	t.Parallel()
	skipWithoutShm(t)
	const n = 3
	t.Run("deadline", func(t *testing.T) {
		t.Parallel()
		comms := newGroup(t, n, Options{Transport: TransportSHM, Timeout: 300 * time.Millisecond})
		bufs := allocShared(t, comms, 1<<20)
		start := time.Now()
		errs := each(n, func(r int) error {
			if r == 2 {
				return nil
			}
			return comms[r].AllReduceFloat32(context.Background(), bufs[r].Float32s(), Sum)
		})
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("took %v, timeout 300ms", d)
		}
		for r := range 2 {
			if !errors.Is(errs[r], os.ErrDeadlineExceeded) && !errors.Is(errs[r], ErrPeerGone) {
				t.Errorf("rank %d: %v, want a deadline (or its neighbour's failure)", r, errs[r])
			}
		}
	})
	t.Run("abort while computing", func(t *testing.T) {
		t.Parallel()
		comms := newGroup(t, n, Options{Transport: TransportSHM, Timeout: time.Minute})
		bufs := allocShared(t, comms, 4<<20)
		comms[1].hookDirect = func(seg int) {
			if seg == 3 {
				comms[1].Abort()
			}
		}
		start := time.Now()
		errs := each(n, func(r int) error {
			return comms[r].AllReduceFloat32(context.Background(), bufs[r].Float32s(), Sum)
		})
		if d := time.Since(start); d > 15*time.Second {
			t.Errorf("took %v to notice", d)
		}
		if !errors.Is(errs[1], ErrAborted) {
			t.Errorf("rank 1: %v, want ErrAborted", errs[1])
		}
		for _, r := range []int{0, 2} {
			if !errors.Is(errs[r], ErrPeerGone) {
				t.Errorf("rank %d: %v, want ErrPeerGone", r, errs[r])
			}
		}
	})
	t.Run("cancelled while computing", func(t *testing.T) {
		t.Parallel()
		comms := newGroup(t, n, Options{Transport: TransportSHM, Timeout: time.Minute})
		bufs := allocShared(t, comms, 8<<20)
		ctx, cancel := context.WithCancel(context.Background())
		comms[0].hookDirect = func(seg int) {
			if seg == 1 {
				cancel()
			}
		}
		errs := each(n, func(r int) error {
			c := context.Background()
			if r == 0 {
				c = ctx
			}
			return comms[r].AllReduceFloat32(c, bufs[r].Float32s(), Sum)
		})
		if !errors.Is(errs[0], context.Canceled) {
			t.Errorf("rank 0: %v, want context.Canceled", errs[0])
		}
		for _, r := range []int{1, 2} {
			if errs[r] == nil {
				t.Errorf("rank %d: succeeded after rank 0 was cancelled", r)
			}
		}
	})
}

// Ranks in different processes share buffers: rank 1 runs in a helper
// process, the sums are exact (integer values), and every rank ran the
// direct all-reduce. Then the helper kills itself while it computes its
// chunk; the others fail with ErrPeerGone well before their deadline.
func TestSharedAcrossProcesses(t *testing.T) {
	t.Parallel()
	skipWithoutShm(t)
	const n, helper, count, timeout = 3, 1, 1 << 20, time.Minute
	lns, peers, out, cmd := startHelper(t, "shared", helper, n, TransportSHM)
	start := time.Now()
	errs := each(n, func(r int) error {
		if r == helper {
			return nil
		}
		c, err := Connect(context.Background(), lns[r], peers, Options{Rank: r, Size: n, Token: "helper", Timeout: timeout, Transport: TransportSHM})
		if err != nil {
			return fmt.Errorf("connect: %w", err)
		}
		defer func() { _ = c.Close() }()
		b, err := c.AllocShared(context.Background(), 4*count)
		if err != nil {
			return err
		}
		defer b.Free()
		if !b.Shared() {
			return errors.New("not shared across processes")
		}
		if err := sharedRounds(c, b.Float32s()); err != nil {
			return err
		}
		if c.directOps != 3 {
			return fmt.Errorf("%d direct all-reduces, want 3", c.directOps)
		}
		return c.AllReduceFloat32(context.Background(), b.Float32s(), Sum) // the helper dies in it
	})
	if d := time.Since(start); d > timeout/4 {
		t.Errorf("took %v to notice the death, deadline %v", d, timeout)
	}
	for r, err := range errs {
		if r == helper {
			continue
		}
		if !errors.Is(err, ErrPeerGone) {
			t.Errorf("rank %d: %v, want ErrPeerGone from the last all-reduce", r, err)
		}
	}
	if msg, _ := out.ReadString('\n'); strings.TrimSpace(msg) != "rounds ok" {
		t.Errorf("helper said %q, want its rounds ok", msg)
	}
	if err := cmd.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Errorf("helper: %v, want killed", err)
	}
}

// sharedRounds runs three all-reduces of integer values on buf and checks
// the exact sums.
func sharedRounds(c *Comm, buf []float32) error {
	for round := range 3 {
		for i := range buf {
			buf[i] = float32(c.Rank()*1000 + i%1000 + round)
		}
		if err := c.AllReduceFloat32(context.Background(), buf, Sum); err != nil {
			return fmt.Errorf("round %d: %w", round, err)
		}
		n := c.Size()
		for i, v := range buf {
			if want := float32(1000*n*(n-1)/2 + n*(i%1000+round)); v != want {
				return fmt.Errorf("round %d: [%d] = %v, want %v", round, i, v, want)
			}
		}
	}
	return nil
}

// sharedHelperRank is rank 1 of TestSharedAcrossProcesses, in its own
// process.
func sharedHelperRank() {
	c := helperComm(0)
	b, err := c.AllocShared(context.Background(), 4<<20)
	if err != nil || !b.Shared() {
		panic(fmt.Sprint("AllocShared: ", err, b.Shared()))
	}
	if err := sharedRounds(c, b.Float32s()); err != nil {
		fmt.Println(err)
		os.Exit(2)
	}
	fmt.Println("rounds ok")
	c.hookDirect = func(seg int) {
		if seg == 5 {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
	}
	_ = c.AllReduceFloat32(context.Background(), b.Float32s(), Sum)
	os.Exit(3)
}
