package activities

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/api/serviceerror"

	"github.com/tempotrain/tempotrain/api"
)

// fakeHeartbeats is a workflow client whose own heartbeat calls fail the
// first `fail` times (the server too slow), then succeed.
type fakeHeartbeats struct {
	*fakeWorkflow
	mu    sync.Mutex
	fail  int
	calls []time.Time
	token []byte
	limit time.Duration // the first call's deadline
}

func (f *fakeHeartbeats) RecordActivityHeartbeat(ctx context.Context, token []byte, details ...any) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.calls) == 0 {
		d, _ := ctx.Deadline()
		f.limit = time.Until(d)
	}
	f.calls = append(f.calls, time.Now())
	f.token = token
	if len(f.calls) <= f.fail {
		return serviceerror.NewDeadlineExceeded("context deadline exceeded")
	}
	return nil
}

func (f *fakeHeartbeats) times() []time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Time(nil), f.calls...)
}

// Once the SDK lost a heartbeat, a rank heartbeats through the client, with
// more than the SDK's second per call, at its interval (a failed call is
// not sent again sooner: that was a storm on a slow server); before, it
// leaves heartbeats to the SDK.
func TestHeartbeatAfterALostOneTakesLonger(t *testing.T) {
	wf := &fakeHeartbeats{fakeWorkflow: newFakeWorkflow(1, 2), fail: 1}
	var sdk atomic.Int32
	r := &rank{a: &Activities{recordHeartbeat: func(context.Context, ...any) { sdk.Add(1) }},
		in: api.RunRankInput{Attempt: 1, Rank: 0, WorldSize: 2}, wf: wf, log: quiet, taskToken: []byte("tok")}
	r.phase.Store(api.PhaseTrain)
	run := func(every, d time.Duration) {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		r.heartbeat(ctx, context.Background(), every)
	}
	run(time.Hour, 100*time.Millisecond)
	if sdk.Load() != 1 || len(wf.times()) != 0 {
		t.Fatalf("before a lost heartbeat: %d through the SDK, %d own calls; want 1 and 0", sdk.Load(), len(wf.times()))
	}
	r.hbLost.Store(true)
	run(20*time.Second, 100*time.Millisecond)
	if n := len(wf.times()); n != 1 || wf.limit < 9*time.Second || string(wf.token) != "tok" || sdk.Load() != 1 {
		t.Fatalf("after a lost heartbeat: %d own calls (want 1), deadline %v (want %v), token %q, SDK calls %d (want none more)",
			n, wf.limit, heartbeatCallLimit, wf.token, sdk.Load())
	}
	// Its first call failed; the next goes an interval later, not sooner.
	every := 400 * time.Millisecond
	run(every, 3*every/2)
	calls := wf.times()
	if len(calls) != 3 {
		t.Fatalf("%d own calls, want 3", len(calls))
	}
	if gap := calls[2].Sub(calls[1]); gap < every*9/10 {
		t.Errorf("a heartbeat after a failed one went %v later, want the interval %v", gap, every)
	}
}
