package workflows

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tempotrain/tempotrain/api"
)

func ck(seq int, m api.Metrics) api.Checkpoint { return api.Checkpoint{Seq: seq, Metrics: m} }

func seqs(c []api.Checkpoint) []int {
	out := []int{}
	for _, x := range c {
		out = append(out, x.Seq)
	}
	return out
}

func TestShouldRestart(t *testing.T) {
	t.Parallel()
	tests := []struct {
		failures, max int
		nonRetryable  bool
		want          bool
	}{
		{1, 0, false, false},
		{1, 1, false, true},
		{2, 1, false, false},
		{3, 3, false, true},
		{100, -1, false, true},
		{1, -1, true, false},
		{1, 5, true, false},
	}
	for _, tt := range tests {
		if got := ShouldRestart(tt.failures, tt.max, tt.nonRetryable); got != tt.want {
			t.Errorf("ShouldRestart(%d, %d, %v) = %v, want %v", tt.failures, tt.max, tt.nonRetryable, got, tt.want)
		}
	}
}

func TestRetain(t *testing.T) {
	t.Parallel()
	acc := func(v float64) api.Metrics { return api.Metrics{"acc": v} }
	five := []api.Checkpoint{ck(1, acc(0.5)), ck(2, acc(0.9)), ck(3, acc(0.7)), ck(4, acc(0.8)), ck(5, acc(0.6))}
	tests := []struct {
		name       string
		in         []api.Checkpoint
		cfg        api.CheckpointConfig
		keep, drop []int
	}{
		{"keep all by default", five, api.CheckpointConfig{}, []int{1, 2, 3, 4, 5}, nil},
		{"fewer than num_to_keep", five[:2], api.CheckpointConfig{NumToKeep: 3}, []int{1, 2}, nil},
		{"recency", five, api.CheckpointConfig{NumToKeep: 2}, []int{4, 5}, []int{1, 2, 3}},
		{"max score keeps latest too", five, api.CheckpointConfig{NumToKeep: 2, ScoreAttribute: "acc", ScoreOrder: "max"}, []int{2, 4, 5}, []int{1, 3}},
		{"min score", five, api.CheckpointConfig{NumToKeep: 2, ScoreAttribute: "acc", ScoreOrder: "min"}, []int{1, 5}, []int{2, 3, 4}},
		{"latest among best", []api.Checkpoint{ck(1, acc(0.1)), ck(2, acc(0.2)), ck(3, acc(0.9))}, api.CheckpointConfig{NumToKeep: 1, ScoreAttribute: "acc", ScoreOrder: "max"}, []int{3}, []int{1, 2}},
		{"missing attribute ranks last", []api.Checkpoint{ck(1, acc(0.1)), ck(2, nil), ck(3, acc(0.3)), ck(4, acc(0.2))}, api.CheckpointConfig{NumToKeep: 2, ScoreAttribute: "acc", ScoreOrder: "max"}, []int{3, 4}, []int{1, 2}},
		{"unsorted input", []api.Checkpoint{ck(3, nil), ck(1, nil), ck(2, nil)}, api.CheckpointConfig{NumToKeep: 1}, []int{3}, []int{1, 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			keep, drop := Retain(tt.in, tt.cfg)
			if !reflect.DeepEqual(seqs(keep), tt.keep) {
				t.Errorf("keep = %v, want %v", seqs(keep), tt.keep)
			}
			if tt.drop == nil {
				tt.drop = []int{}
			}
			if !reflect.DeepEqual(seqs(drop), tt.drop) {
				t.Errorf("drop = %v, want %v", seqs(drop), tt.drop)
			}
		})
	}
}

func TestBestFirst(t *testing.T) {
	t.Parallel()
	in := []api.Checkpoint{ck(1, api.Metrics{"loss": 0.3}), ck(2, api.Metrics{"loss": 0.1}), ck(3, api.Metrics{"loss": 0.1}), ck(4, nil)}
	got := seqs(BestFirst(in, api.CheckpointConfig{ScoreAttribute: "loss", ScoreOrder: "min"}))
	if want := []int{3, 2, 1, 4}; !reflect.DeepEqual(got, want) {
		t.Errorf("min loss order = %v, want %v (ties newer first, missing last)", got, want)
	}
	got = seqs(BestFirst(in, api.CheckpointConfig{}))
	if want := []int{4, 3, 2, 1}; !reflect.DeepEqual(got, want) {
		t.Errorf("recency order = %v, want %v", got, want)
	}
}

func TestDiagnose(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name         string
		in           []RankFailure
		want         string
		nonRetryable bool
	}{
		{
			"root cause first, cascade grouped",
			[]RankFailure{
				{Rank: 1, Message: "boom at epoch 2"},
				{Rank: 0, Message: "peer closed"},
				{Rank: 3, Message: "peer closed"},
				{Rank: 2, Message: "peer closed"},
			},
			"attempt 2: rank 1 failed: boom at epoch 2; then ranks 0,2,3: peer closed", false,
		},
		{
			"identical errors on all ranks read as one",
			[]RankFailure{
				{Rank: 2, Message: `unknown training function "x"`, NonRetryable: true},
				{Rank: 0, Message: `unknown training function "x"`, NonRetryable: true},
				{Rank: 1, Message: `unknown training function "x"`, NonRetryable: true},
				{Rank: 3, Message: `unknown training function "x"`, NonRetryable: true},
			},
			`attempt 2: ranks 0-3 failed: unknown training function "x"`, true,
		},
		{
			"cancelled ranks listed last",
			[]RankFailure{{Rank: 4, Message: "oom"}, {Rank: 0, Cancelled: true}, {Rank: 1, Cancelled: true}},
			"attempt 2: rank 4 failed: oom; ranks 0,1 cancelled", false,
		},
		{
			"one non-retryable rank decides",
			[]RankFailure{{Rank: 0, Message: "a"}, {Rank: 1, Message: "bad config", NonRetryable: true}},
			"attempt 2: rank 0 failed: a; then rank 1: bad config", true,
		},
		{
			"a rank that hangs: its peers time out waiting, it does not stop when cancelled",
			[]RankFailure{
				{Rank: 2, Message: "AllReduceFloat64 #23: recv from rank 1: " + api.CollectiveTimeoutText + " (timeout 5s): i/o timeout"},
				{Rank: 0, Cancelled: true},
				{Rank: 1, Abandoned: true, Message: "did not stop within 3s of the cancellation"},
			},
			"attempt 2: rank 1 failed: did not stop within 3s of the cancellation; the other ranks timed out in a collective operation waiting for it: it hangs outside the collective operations (in the training function) or its host froze; then rank 2: AllReduceFloat64 #23: recv from rank 1: " + api.CollectiveTimeoutText + " (timeout 5s): i/o timeout; rank 0 cancelled", false,
		},
		{
			"a link seen down leads over a rank that did not stop",
			[]RankFailure{
				{Rank: 1, Message: api.CollectiveTimeoutText + ", and the link from rank 1 to rank 2 is down: " + api.LinkDownText},
				{Rank: 2, Abandoned: true, Message: "did not stop within 3s of the cancellation"},
			},
			"attempt 2: rank 1 failed: " + api.CollectiveTimeoutText + ", and the link from rank 1 to rank 2 is down: " + api.LinkDownText + "; then rank 2: did not stop within 3s of the cancellation", false,
		},
		{
			"a cause that ends after its consequences still leads",
			[]RankFailure{
				{Rank: 2, Message: "recv from rank 1: connection to peer lost", PeerLost: true},
				{Rank: 0, Message: "recv from rank 3: connection to peer lost", PeerLost: true},
				{Rank: 1, Message: "no heartbeat for 1m0s"},
				{Rank: 3, Cancelled: true},
			},
			"attempt 2: rank 1 failed: no heartbeat for 1m0s; ranks 0,2 lost a peer; rank 3 cancelled", false,
		},
		{
			"only lost peers",
			[]RankFailure{{Rank: 2, Message: "recv from rank 1: connection to peer lost", PeerLost: true}, {Rank: 0, PeerLost: true, Message: "x"}},
			"attempt 2: ranks 0,2 lost a peer: recv from rank 1: connection to peer lost", false,
		},
		{
			"only cancelled",
			[]RankFailure{{Rank: 0, Cancelled: true}},
			"attempt 2: cancelled (rank 0)", false,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, nr := Diagnose(2, tt.in)
			if got != tt.want {
				t.Errorf("Diagnose =\n  %s\nwant\n  %s", got, tt.want)
			}
			if nr != tt.nonRetryable {
				t.Errorf("nonRetryable = %v, want %v", nr, tt.nonRetryable)
			}
		})
	}
}

func TestRankList(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"3":           "rank 3",
		"0,1":         "ranks 0,1",
		"0,1,2,3":     "ranks 0-3",
		"5,0,2,1,7,6": "ranks 0-2,5-7",
		"0,2,4":       "ranks 0,2,4",
	} {
		var r []int
		for _, s := range strings.Split(in, ",") {
			var v int
			for _, c := range s {
				v = v*10 + int(c-'0')
			}
			r = append(r, v)
		}
		if got := rankList(r); got != want {
			t.Errorf("rankList(%s) = %q, want %q", in, got, want)
		}
	}
}

func TestWasPreempted(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in   []RankFailure
		want bool
	}{
		{[]RankFailure{{Rank: 0, Preempted: true}, {Rank: 1, Preempted: true}}, true},
		{[]RankFailure{{Rank: 1, Preempted: true}, {Rank: 0, PeerLost: true}, {Rank: 2, Cancelled: true}}, true},
		{[]RankFailure{{Rank: 1, Preempted: true}, {Rank: 0, Message: "disk full"}}, false},
		{[]RankFailure{{Rank: 1, Preempted: true}, {Rank: 0, Abandoned: true}}, false},
		{[]RankFailure{{Rank: 0, PeerLost: true}, {Rank: 1, Cancelled: true}}, false},
		{nil, false},
	} {
		if got := WasPreempted(tt.in); got != tt.want {
			t.Errorf("WasPreempted(%+v) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

// TestDiagnoseNamesTheRankWaitedFor: in a 3-rank ring where rank 2 stopped
// calling collectives, rank 0 times out waiting for rank 2 and rank 1 for
// rank 0, and the workflow then cancels rank 2: the headline is rank 2, the
// operation it did not reach and its last progress, not rank 0.
func TestDiagnoseNamesTheRankWaitedFor(t *testing.T) {
	t.Parallel()
	stall := func(peer int, linkDown bool) *api.Stall {
		return &api.Stall{Peer: peer, Op: "AllReduceFloat32", Seq: 5, Timeout: api.Duration(10 * time.Second), LinkDown: linkDown}
	}
	m0 := "rank 0: AllReduceFloat32 #5: recv from rank 2: no progress before the operation's deadline"
	m1 := "rank 1: AllReduceFloat32 #5: recv from rank 0: no progress before the operation's deadline"
	for _, tt := range []struct {
		name string
		in   []RankFailure
		want string
	}{
		{"a hang in the training function", []RankFailure{
			{Rank: 0, Message: m0, Stall: stall(2, false)},
			{Rank: 1, Message: m1, Stall: stall(0, false)},
			{Rank: 2, Message: "cancelled", Cancelled: true, Progress: &api.Progress{Rank: 2, Phase: api.PhaseTrain, Epoch: 1, Step: 0}},
		}, "attempt 2: rank 2 did not reach AllReduceFloat32 #5 within 10s; its last progress: epoch 1, step 0; then rank 0: " + m0 + "; then rank 1: " + m1},
		{"a hang before the function set progress", []RankFailure{
			{Rank: 1, Message: m1, Stall: stall(0, false)},
			{Rank: 0, Message: m0, Stall: stall(2, false)},
			{Rank: 2, Message: "cancelled", Cancelled: true, Progress: &api.Progress{Rank: 2, Phase: api.PhaseTrain, Epoch: -1, Step: -1}},
		}, "attempt 2: rank 2 did not reach AllReduceFloat32 #5 within 10s; it was in its training function, which had set no progress; then rank 1: " + m1 + "; then rank 0: " + m0},
		{"a hang inside a collective operation (a frozen process)", []RankFailure{
			{Rank: 0, Message: m0, Stall: stall(2, false)},
			{Rank: 1, Message: "connection to peer lost", PeerLost: true},
			{Rank: 2, Message: "did not stop within 5s of its cancellation", Abandoned: true},
		}, "attempt 2: rank 2 did not take part in AllReduceFloat32 #5 within 10s and did not stop when cancelled: its process hangs or its host froze; then rank 0: " + m0 + "; rank 1 lost a peer"},
		{"a dead link: the rank that saw it leads", []RankFailure{
			{Rank: 1, Message: "link down " + m1, Stall: stall(0, true)},
			{Rank: 0, Message: m0, Stall: stall(2, false)},
			{Rank: 2, Message: "cancelled", Cancelled: true},
		}, "attempt 2: rank 1 failed: link down " + m1 + "; then rank 0: " + m0 + "; rank 2 cancelled"},
		{"a rank's own error is the cause", []RankFailure{
			{Rank: 2, Message: "loss is NaN"},
			{Rank: 0, Message: m0, Stall: stall(2, false)},
		}, "attempt 2: rank 2 failed: loss is NaN; then rank 0: " + m0},
	} {
		got, _ := Diagnose(2, tt.in)
		if got != tt.want {
			t.Errorf("%s:\n got %s\nwant %s", tt.name, got, tt.want)
		}
	}
}
