package activities

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/tempotrain/tempotrain/api"
)

// hubRank is a rank of a test process (a) as far as the rendezvous goes.
func hubRank(a *Activities, wf *fakeWorkflow, r, world int) *rank {
	in := rankInput("f", "", "run", r, world, "")
	return &rank{a: a, in: in, wf: wf, wfID: "wf", runID: "run-1", log: quiet, stopping: make(chan struct{})}
}

// rendezvousAll runs the rendezvous of ranks, each with its context, at
// once, and returns their peers and errors.
func rendezvousAll(ranks []*rank, ctxs []context.Context) ([][]api.Peer, []error) {
	peers := make([][]api.Peer, len(ranks))
	errs := make([]error, len(ranks))
	var wg sync.WaitGroup
	for i, r := range ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			if ctxs != nil {
				ctx = ctxs[i]
			}
			peers[i], errs[i] = r.rendezvous(ctx, fmt.Sprintf("127.0.0.1:%d", 7000+r.in.Rank))
		}()
	}
	wg.Wait()
	return peers, errs
}

// hubIdle waits until the hub holds no batcher and no poller: they end
// once no rank needs them.
func hubIdle(t *testing.T, h *rendezvousHub) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		h.mu.Lock()
		b, p := len(h.batches), len(h.pollers)
		h.mu.Unlock()
		if b == 0 && p == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("hub still holds %d batchers and %d pollers after every rank left", b, p)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// pollers is how many pollers h runs.
func pollers(h *rendezvousHub) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.pollers)
}

// The ranks of one process register in one Update and learn the group from
// one poller: while the group waits, the Queries are the poller's, not a
// rank's each.
func TestRendezvousOneBatchOnePollerPerProcess(t *testing.T) {
	const world = 16
	wf := newFakeWorkflow(1, world)
	wf.hold = make(chan struct{})
	a := newTestActivities(t, wf)
	a.rdv.window = 200 * time.Millisecond // every rank arrives within it, even on a loaded machine
	var ranks []*rank
	for r := range world {
		ranks = append(ranks, hubRank(a, wf, r, world))
	}
	const held = 500 * time.Millisecond
	time.AfterFunc(held, func() { close(wf.hold) })
	peers, errs := rendezvousAll(ranks, nil)
	for r := range world {
		if errs[r] != nil {
			t.Fatalf("rank %d: %v", r, errs[r])
		}
		if len(peers[r]) != world || peers[r][5].Addr != "127.0.0.1:7005" {
			t.Fatalf("rank %d peers %v", r, peers[r])
		}
	}
	wf.mu.Lock()
	batches, queries := wf.batches, wf.queries
	wf.mu.Unlock()
	if fmt.Sprint(batches) != fmt.Sprint([]int{world}) {
		t.Errorf("register-batch Updates of sizes %v, want one of %d", batches, world)
	}
	// One poller at 10 ms doubling to 50 ms asks at most ~13 times in
	// 500 ms; a poller per rank would have asked 16 times that.
	if queries < 2 || queries > 20 {
		t.Errorf("%d rendezvous Queries while the group was held %s, want one poller's (2 to 20)", queries, held)
	}
	hubIdle(t, &a.rdv)
}

// Two processes, each with its batcher and poller, form one group.
func TestRendezvousTwoProcesses(t *testing.T) {
	const world = 6
	wf := newFakeWorkflow(1, world)
	procs := []*Activities{newTestActivities(t, wf), newTestActivities(t, wf)}
	var ranks []*rank
	for r := range world {
		ranks = append(ranks, hubRank(procs[r%2], wf, r, world))
	}
	procs[0].rdv.window = 300 * time.Millisecond
	procs[1].rdv.window = 300 * time.Millisecond
	_, errs := rendezvousAll(ranks, nil)
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
	if got := fmt.Sprint(wf.batches); got != "[3 3]" {
		t.Errorf("register-batch Updates of sizes %s, want [3 3] (one per process)", got)
	}
	hubIdle(t, &procs[0].rdv)
	hubIdle(t, &procs[1].rdv)
}

// A registration the workflow refuses fails its rank alone, with the
// workflow's message; the others of its batch form the group.
func TestRendezvousRefusedRankAlone(t *testing.T) {
	wf := newFakeWorkflow(1, 2)
	wf.refuseRank = map[int]string{2: "register: rank 2 out of range [0, 2)"}
	a := newTestActivities(t, wf)
	a.rdv.window = 200 * time.Millisecond
	ranks := []*rank{hubRank(a, wf, 0, 2), hubRank(a, wf, 1, 2), hubRank(a, wf, 2, 2)}
	_, errs := rendezvousAll(ranks, nil)
	if errs[0] != nil || errs[1] != nil {
		t.Errorf("ranks 0 and 1: %v, %v; want the group formed", errs[0], errs[1])
	}
	if errs[2] == nil || !strings.Contains(errs[2].Error(), "rank 2 out of range [0, 2)") {
		t.Errorf("rank 2: %v, want the workflow's refusal", errs[2])
	}
	if fmt.Sprint(wf.batches) != "[3]" {
		t.Errorf("batches %v, want [3]", wf.batches)
	}
}

// An error of the rendezvous Query that a retry cannot help reaches every
// waiting rank; one that may go away (the server busy) is retried.
func TestRendezvousQueryErrorReachesEveryRank(t *testing.T) {
	const world = 4
	wf := newFakeWorkflow(1, world+1) // never complete
	wf.queryErrs = []error{serviceerror.NewResourceExhausted(0, "busy"), errors.New("workflow gone")}
	a := newTestActivities(t, wf)
	var ranks []*rank
	for r := range world {
		ranks = append(ranks, hubRank(a, wf, r, world+1))
	}
	_, errs := rendezvousAll(ranks, nil)
	for r, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "rendezvous query: workflow gone") {
			t.Errorf("rank %d: %v, want the query's error", r, err)
		}
	}
	hubIdle(t, &a.rdv)
	wf.mu.Lock()
	defer wf.mu.Unlock()
	// The busy server's answer was retried; the error ended every wait
	// (one more Query may have left before the last rank did).
	if wf.queries < 2 || wf.queries > 3 {
		t.Errorf("%d queries, want 2 (one retried after the busy server, then the error for all)", wf.queries)
	}
}

// A rank whose context ends stops waiting, in the batch (its registration
// is not sent) or on the poller (which goes on for the others, and stops
// when the last leaves).
func TestRendezvousCancelledRankLeaves(t *testing.T) {
	wf := newFakeWorkflow(1, 3)
	a := newTestActivities(t, wf)
	a.rdv.window = 300 * time.Millisecond
	ranks := []*rank{hubRank(a, wf, 0, 3), hubRank(a, wf, 1, 3), hubRank(a, wf, 2, 3)}
	early, cancelEarly := context.WithCancel(context.Background())
	late, cancelLate := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancelEarly) // rank 2, while its batch gathers
	var wg sync.WaitGroup
	wg.Add(1)
	var errs []error
	go func() {
		defer wg.Done()
		_, errs = rendezvousAll(ranks, []context.Context{context.Background(), late, early})
	}()
	time.Sleep(600 * time.Millisecond) // ranks 0 and 1 registered and wait on the poller
	cancelLate()
	time.Sleep(200 * time.Millisecond)
	if n := pollers(&a.rdv); n != 1 {
		t.Errorf("%d pollers while rank 0 waits, want 1", n)
	}
	// Rank 2 comes back and completes rank 0's group.
	_, again := rendezvousAll([]*rank{hubRank(a, wf, 2, 3)}, nil)
	wg.Wait()
	if !errors.Is(errs[2], context.Canceled) || !errors.Is(errs[1], context.Canceled) {
		t.Errorf("cancelled ranks 2 and 1: %v, %v; want context canceled", errs[2], errs[1])
	}
	if errs[0] != nil || again[0] != nil {
		t.Errorf("rank 0: %v; rank 2 again: %v", errs[0], again[0])
	}
	hubIdle(t, &a.rdv)
	if fmt.Sprint(wf.batches) != "[2 1]" {
		t.Errorf("batches %v, want [2 1]: rank 2 left before its first batch was sent", wf.batches)
	}
}

// A batch is named by its content: the same batch retried is the same
// Update (recorded once), another batch another.
func TestBatchUpdateID(t *testing.T) {
	a := []api.RegisterRequest{{Rank: 0, Addr: "h:1"}, {Rank: 1, Addr: "h:2"}}
	b := []api.RegisterRequest{{Rank: 0, Addr: "h:1"}, {Rank: 1, Addr: "h:3"}}
	if again := slices.Clone(a); batchUpdateID(1, a) != batchUpdateID(1, again) {
		t.Error("the same batch has two IDs")
	}
	if batchUpdateID(1, a) == batchUpdateID(1, b) || batchUpdateID(1, a) == batchUpdateID(2, a) {
		t.Errorf("different batches share an ID: %s", batchUpdateID(1, a))
	}
}

// Ranks that lost their heartbeats' replies learn that their attempt ended
// from their process's poller, one for all of them.
func TestWatchSharesThePoller(t *testing.T) {
	wf := newFakeWorkflow(1, 2)
	a := newTestActivities(t, wf)
	lost, lose := context.WithCancelCause(context.Background())
	lose(context.DeadlineExceeded) // the heartbeat's deadline: transient
	type watched struct {
		ctx    context.Context
		cancel context.CancelCauseFunc
	}
	var ws []watched
	var wg sync.WaitGroup
	for r := range 2 {
		ctx, cancel := context.WithCancelCause(context.Background())
		defer cancel(nil)
		ws = append(ws, watched{ctx, cancel})
		wg.Add(1)
		go func() {
			defer wg.Done()
			hubRank(a, wf, r, 2).watch(lost, ctx, cancel, nil)
		}()
	}
	time.Sleep(300 * time.Millisecond)
	if n := pollers(&a.rdv); n != 1 {
		t.Errorf("%d pollers for two watching ranks, want 1", n)
	}
	for r, w := range ws {
		if w.ctx.Err() != nil {
			t.Fatalf("rank %d cancelled while its attempt runs: %v", r, context.Cause(w.ctx))
		}
	}
	wf.mu.Lock()
	wf.stale = true
	wf.mu.Unlock()
	wg.Wait()
	for r, w := range ws {
		if err := context.Cause(w.ctx); err == nil || !strings.Contains(err.Error(), "attempt 1 ended") {
			t.Errorf("rank %d: cause %v, want its attempt ended", r, err)
		}
	}
	hubIdle(t, &a.rdv)
}

// A Fit worker older than register-batch rejects it as unknown: the batch's
// ranks register with a register Update each, as before.
func TestRendezvousOlderWorkflowWithoutBatches(t *testing.T) {
	const world = 4
	wf := newFakeWorkflow(1, world)
	wf.noBatch = true
	a := newTestActivities(t, wf)
	a.rdv.window = 200 * time.Millisecond
	var ranks []*rank
	for r := range world {
		ranks = append(ranks, hubRank(a, wf, r, world))
	}
	peers, errs := rendezvousAll(ranks, nil)
	for r := range world {
		if errs[r] != nil || len(peers[r]) != world {
			t.Errorf("rank %d: %v, %d peers", r, errs[r], len(peers[r]))
		}
	}
	if wf.singles != world || len(wf.batches) != 0 {
		t.Errorf("%d register Updates and batches %v recorded, want %d and none", wf.singles, wf.batches, world)
	}
	hubIdle(t, &a.rdv)
}

// The interval stays the worker's up to 64 ranks, then grows with the
// world so that an attempt's ranks send about 64 heartbeats a second; the
// timeout the workflow gives them is never below the user's, and at least
// three intervals once they stretch past a second.
func TestRankHeartbeatInterval(t *testing.T) {
	for _, c := range []struct {
		base    time.Duration
		n       int
		want    time.Duration
		user    time.Duration
		timeout time.Duration
	}{
		{time.Second, 1, time.Second, time.Second, time.Second},
		{time.Second, 64, time.Second, 2 * time.Second, 2 * time.Second},
		{time.Second, 128, 2 * time.Second, 2 * time.Second, 6 * time.Second},
		{time.Second, 256, 4 * time.Second, api.DefaultHeartbeatTimeout, api.DefaultHeartbeatTimeout},
		{time.Second, 256, 4 * time.Second, 5 * time.Second, 12 * time.Second},
		{5 * time.Second, 256, 5 * time.Second, time.Minute, time.Minute},
		{time.Second, 1024, 16 * time.Second, time.Minute, time.Minute},
		{time.Second, 4096, 64 * time.Second, time.Minute, 192 * time.Second},
	} {
		if got := api.RankHeartbeatInterval(c.base, c.n); got != c.want {
			t.Errorf("interval(%v, %d ranks) = %v, want %v", c.base, c.n, got, c.want)
		}
		if per := float64(c.n) / api.RankHeartbeatInterval(c.base, c.n).Seconds(); per > api.RankHeartbeatsPerSecond {
			t.Errorf("%d ranks heartbeat %.0f times a second, want at most %d", c.n, per, api.RankHeartbeatsPerSecond)
		}
		if got := api.RankHeartbeatTimeout(c.user, c.n); got != c.timeout {
			t.Errorf("timeout(user %v, %d ranks) = %v, want %v", c.user, c.n, got, c.timeout)
		}
	}
}

// Ranks that joined their group learn that their attempt ended from their
// process's poller, within about a second, without a heartbeat's reply:
// every rank of the process is cancelled with StaleAttempt, and the
// process asked one Query a second, not one per rank.
func TestWatchCancelsJoinedRanksOnStale(t *testing.T) {
	const n = 8
	wf := newFakeWorkflow(1, n)
	a := newTestActivities(t, wf)
	never := context.Background() // no heartbeat reply cancels them
	joined := make(chan struct{})
	var ctxs []context.Context
	var wg sync.WaitGroup
	for r := range n {
		ctx, cancel := context.WithCancelCause(context.Background())
		defer cancel(nil)
		ctxs = append(ctxs, ctx)
		wg.Add(1)
		go func() {
			defer wg.Done()
			hubRank(a, wf, r, n).watch(never, ctx, cancel, joined)
		}()
	}
	time.Sleep(200 * time.Millisecond)
	wf.mu.Lock()
	before := wf.queries
	wf.stale = true
	wf.mu.Unlock()
	if before != 0 || pollers(&a.rdv) != 0 {
		t.Fatalf("%d Queries and %d pollers before the ranks joined their group, want none", before, pollers(&a.rdv))
	}
	start := time.Now()
	close(joined)
	wg.Wait()
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("ranks stopped %v after their attempt ended, want within the poller's second", d)
	}
	for r, ctx := range ctxs {
		var app *temporal.ApplicationError
		if err := context.Cause(ctx); !errors.As(err, &app) || app.Type() != api.ErrStaleAttempt.String() {
			t.Errorf("rank %d: cause %v, want a %s error", r, err, api.ErrStaleAttempt)
		}
	}
	wf.mu.Lock()
	q := wf.queries
	wf.mu.Unlock()
	if q > 3 {
		t.Errorf("%d rendezvous Queries for %d ranks of one process, want the poller's (at most 3)", q, n)
	}
	hubIdle(t, &a.rdv)
}

// The SDK cancels an activity on whatever error its heartbeat call returns
// (a server restarting answers Internal, NamespaceUnavailable or plain
// errors too): watch keeps such a rank training; the server's word
// (cancel requested, the activity gone, paused or reset) and the worker's
// shutdown stop it at once with that cause.
func TestWatchTellsALostServerFromItsWord(t *testing.T) {
	cases := []struct {
		cause error
		keeps bool
	}{
		{context.DeadlineExceeded, true},
		{serviceerror.NewUnavailable("connection refused"), true},
		{serviceerror.NewInternal("shard status unknown"), true},
		{serviceerror.NewNamespaceUnavailable("default"), true},
		{errors.New("transport is closing"), true}, // gRPC's Unknown
		{serviceerror.NewResourceExhausted(enumspb.RESOURCE_EXHAUSTED_CAUSE_RPS_LIMIT, "busy"), true},
		{temporal.NewCanceledError(), false},
		{serviceerror.NewNotFound("activity not found"), false},
		{serviceerror.NewNamespaceNotFound("default"), false},
		{activity.ErrActivityPaused, false},
		{activity.ErrActivityReset, false},
		{context.Canceled, false},
	}
	for _, c := range cases {
		wf := newFakeWorkflow(1, 1)
		a := newTestActivities(t, wf)
		lost, lose := context.WithCancelCause(context.Background())
		lose(c.cause)
		ctx, cancel := context.WithCancelCause(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			hubRank(a, wf, 0, 1).watch(lost, ctx, cancel, nil)
		}()
		select {
		case <-done:
		case <-time.After(300 * time.Millisecond):
		}
		switch got := context.Cause(ctx); {
		case c.keeps && got != nil:
			t.Errorf("cause %T %v: the rank stopped (%v) while its attempt runs", c.cause, c.cause, got)
		case !c.keeps && !errors.Is(got, c.cause):
			t.Errorf("cause %T %v: the rank's cause %v, want it stopped with that cause", c.cause, c.cause, got)
		}
		cancel(nil)
		<-done
		hubIdle(t, &a.rdv)
	}
}

// A rank that ends waits until its process's poller hears from the
// workflow after that (a Query sent at once): a result completed while the
// server is away would be lost.
func TestWatchTellsWhenTheServerIsBack(t *testing.T) {
	wf := newFakeWorkflow(1, 1)
	for range 5 { // about 0.3 s of Queries the server does not answer
		wf.queryErrs = append(wf.queryErrs, serviceerror.NewUnavailable("connection refused"))
	}
	a := newTestActivities(t, wf)
	lost, lose := context.WithCancelCause(context.Background())
	lose(serviceerror.NewUnavailable("connection refused"))
	ctx, cancel := context.WithCancelCause(context.Background())
	r := hubRank(a, wf, 0, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.watch(lost, ctx, cancel, nil)
	}()
	time.Sleep(100 * time.Millisecond)
	if r.offline.wait(time.Now(), 0, quiet) {
		t.Error("in contact while the server answers no Query")
	}
	start := time.Now()
	if !r.offline.wait(start, 5*time.Second, quiet) {
		t.Error("not in contact 5 s after the server answers again")
	}
	if d := time.Since(start); d < 100*time.Millisecond {
		t.Errorf("in contact after %v, before the server answered a Query", d)
	}
	if ctx.Err() != nil {
		t.Errorf("the rank stopped: %v", context.Cause(ctx))
	}
	// In contact, a rank that ends has the poller Query at once.
	start = time.Now()
	if !r.offline.wait(start, 5*time.Second, quiet) || time.Since(start) > 500*time.Millisecond {
		t.Errorf("a Query answered %v after the rank's end, want at once", time.Since(start))
	}
	cancel(nil)
	<-done
	hubIdle(t, &a.rdv)
	if !r.offline.wait(time.Now(), time.Hour, quiet) {
		t.Error("a rank with no poller waits")
	}
}
