package workflows

import (
	"fmt"
	"strings"
	"testing"

	"github.com/tempotrain/tempotrain/api"
)

func TestGroupBounds(t *testing.T) {
	for _, c := range []struct {
		n, size int
		want    string
	}{
		{5, 2, "[[0 1] [1 3] [3 5]]"},
		{129, 128, "[[0 64] [64 129]]"},
		{256, 128, "[[0 128] [128 256]]"},
		{1000, 128, "[[0 125] [125 250] [250 375] [375 500] [500 625] [625 750] [750 875] [875 1000]]"},
	} {
		if got := fmt.Sprint(groupBounds(c.n, c.size)); got != c.want {
			t.Errorf("groupBounds(%d, %d) = %s, want %s", c.n, c.size, got, c.want)
		}
	}
	// Every rank in exactly one group, none larger than the size.
	for n := 2; n <= 1100; n += 37 {
		for _, size := range []int{1, 2, 7, 128, 256} {
			next := 0
			for _, b := range groupBounds(n, size) {
				if b[0] != next || b[1] <= b[0] || b[1]-b[0] > size {
					t.Fatalf("groupBounds(%d, %d): %v", n, size, groupBounds(n, size))
				}
				next = b[1]
			}
			if next != n {
				t.Fatalf("groupBounds(%d, %d) covers %d ranks", n, size, next)
			}
		}
	}
}

func TestGroupSizeLeavesSmallRunsAlone(t *testing.T) {
	for _, c := range []struct{ opt, n int }{{0, 2}, {0, DefaultRankGroupSize}, {-1, 4096}, {8, 8}} {
		f := &fit{opts: Options{RankGroupSize: c.opt}}
		// No workflow context is needed: these never reach GetVersion.
		if got := f.groupSize(nil, c.n); got != 0 {
			t.Errorf("RankGroupSize %d, %d ranks: group size %d, want 0 (one group, in the Fit)", c.opt, c.n, got)
		}
	}
}

// A group takes the registrations of its own ranks only, and tells its Fit
// once they are all in (registered) and not before.
func TestGroupRegistersItsRanksOnly(t *testing.T) {
	f := &fit{attempt: 3, running: true, peers: make([]*api.Peer, 6),
		group: &rankGroup{in: groupInput{Group: 1, Lo: 2, Hi: 4}}}
	for _, r := range []int{0, 1, 4, 5} {
		err := f.validateRegister(nil, api.RegisterRequest{Attempt: 3, Rank: r, Addr: "h:1"})
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("rank %d is not in rank group 1 (ranks 2-3)", r)) {
			t.Errorf("rank %d in group 1 of ranks 2-3: %v", r, err)
		}
	}
	for _, r := range []int{2, 3} {
		if err := f.validateRegister(nil, api.RegisterRequest{Attempt: 3, Rank: r, Addr: "h:1"}); err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
	if err := f.validateRegister(nil, api.RegisterRequest{Attempt: 2, Rank: 2, Addr: "h:1"}); err == nil {
		t.Error("a registration of another attempt was accepted")
	}
	// One of two registered: the rendezvous waits, and the group has not
	// told its Fit (registered returns before signalling; a nil context
	// would panic in SignalExternalWorkflow).
	f.peers[2], f.registered = &api.Peer{Addr: "h:1"}, 1
	f.group.registered(nil, f)
	if f.group.told {
		t.Error("the group told its Fit with one of its two ranks registered")
	}
	if rv, _ := f.rendezvous(3); rv.State != api.RendezvousWaiting {
		t.Errorf("rendezvous %s, want waiting", rv.State)
	}
}
