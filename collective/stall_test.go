package collective

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestStallNamesTheRankWaitedFor: rank 2 of 4 takes part in the first
// all-reduce and then stops calling collectives (as a rank that hangs in its
// training function). Its right neighbour's deadline error is a *StallError
// naming rank 2, the operation and its number; every rank that stalled names
// the rank it waited for, and following those names ends at rank 2.
func TestStallNamesTheRankWaitedFor(t *testing.T) {
	t.Parallel()
	const n, silent = 4, 2
	comms := newGroup(t, n, Options{Timeout: 700 * time.Millisecond, Transport: TransportTCP})
	ctx := context.Background()
	if errs := each(n, func(r int) error { return comms[r].AllReduceFloat32(ctx, make([]float32, 4096), Sum) }); errors.Join(errs...) != nil {
		t.Fatal(errors.Join(errs...))
	}
	seq := int(comms[0].seq) + 1 // the stalled operation's number (Connect's agreement counts too)
	errs := each(n, func(r int) error {
		if r == silent {
			return nil
		}
		return comms[r].AllReduceFloat32(ctx, make([]float32, 4096), Sum)
	})
	waited := map[int]int{} // rank -> the rank it stalled waiting for
	for r, err := range errs {
		if r == silent {
			continue
		}
		var se *StallError
		if errors.As(err, &se) {
			if se.Rank != r || se.Op != "AllReduceFloat32" || se.Seq != seq || se.Timeout != 700*time.Millisecond || se.LinkDown {
				t.Errorf("rank %d: %+v, want rank %d, AllReduceFloat32 #%d, timeout 700ms, link up", r, se, r, seq)
			}
			waited[r] = se.Peer
			continue
		}
		if !errors.Is(err, ErrPeerGone) {
			t.Errorf("rank %d: %v, want a *StallError or ErrPeerGone", r, err)
		}
	}
	if waited[silent+1] != silent {
		t.Fatalf("rank %d stalled waiting for %v, want rank %d (errors %v)", silent+1, waited, silent, errs)
	}
	for r := range waited {
		seen := map[int]bool{}
		at := r
		for {
			next, ok := waited[at]
			if !ok || seen[at] {
				break
			}
			seen[at], at = true, next
		}
		if at != silent {
			t.Errorf("from rank %d the waits %v lead to rank %d, want %d", r, waited, at, silent)
		}
	}
}
