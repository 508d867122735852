package activities

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/train/trainrt"
)

// rate turns a rank's sample count into samples/s over the last heartbeat
// interval.
type rate struct {
	at      time.Time
	samples int64
	perSec  float64
}

func (r *rank) progress(rt *rate) api.Progress {
	p := api.Progress{Attempt: r.in.Attempt, Rank: -1, Slot: r.in.Rank, Phase: r.phase.Load().(api.Phase), Epoch: -1, Step: -1,
		Reports: int(r.reports.Load()), Checkpoint: int(r.ckpt.Load())}
	if !r.in.Elastic {
		p.Rank = r.in.Rank
	}
	if tc := r.tc.Load(); tc != nil {
		p.Rank = tc.WorldRank()
		p.Epoch, p.Step = tc.Progress()
		p.Samples = trainrt.Samples(tc)
		r.tr.Samples(p.Samples) // Prometheus's tempotrain_samples_total
		now := time.Now()
		if rt != nil {
			if dt := now.Sub(rt.at).Seconds(); !rt.at.IsZero() && dt > 0 && p.Samples >= rt.samples {
				rt.perSec = float64(p.Samples-rt.samples) / dt
			}
			rt.at, rt.samples = now, p.Samples
			p.SamplesPerSec = rt.perSec
		}
	}
	return p
}

// heartbeat records progress every `every` until ctx ends (the SDK sends
// at most one heartbeat per throttle interval, 1s). every is the worker's
// HeartbeatInterval, stretched with the world size so that the ranks of
// one attempt send their Fit about api.RankHeartbeatsPerSecond heartbeats a
// second whatever its size (api.RankHeartbeatInterval). Each reply can
// carry a cancellation; the process's rendezvous poller (watch) carries it
// sooner. The calls use the activity's values but not its cancellation, so
// heartbeats go on after an outage of the server cancelled actx.
//
// Once a heartbeat was lost (the SDK gives each call its throttle interval,
// a second, and cancels the activity's context when one fails: watch sets
// hbLost), the rank heartbeats itself through the client (directHeartbeat),
// at the same interval, each call allowed up to min(every,
// heartbeatCallLimit). On a loaded server (1,024 ranks on 2 cores,
// docs/scale.md) heartbeat calls took more than a second for a minute,
// and ranks that heartbeat every 16 s lost every one of them to the SDK's
// deadline until their heartbeat timeout failed the attempt. A failed call
// is not sent again sooner: on a server that slow, early retries of
// hundreds of ranks were a storm that made every call slower (tried:
// heartbeat calls then took 5 s at the median). The SDK's path can no
// longer cancel the rank by then (its context is already cancelled); the
// poller does.
func (r *rank) heartbeat(ctx, actx context.Context, every time.Duration) {
	heartbeat(ctx, actx, every, []*rank{r})
}

// heartbeat is rank.heartbeat for the ranks of one activity: one rank's,
// or a bundle's (runBundle), whose heartbeat carries the first rank's
// progress, then every rank's ([]api.Progress), and goes through the
// client once any of them saw the SDK's heartbeat lost.
func heartbeat(ctx, actx context.Context, every time.Duration, ranks []*rank) {
	hb := context.WithoutCancel(actx)
	r := ranks[0]
	direct, _ := r.wf.(heartbeater)
	rts := make([]rate, len(ranks))
	details := func() []any {
		if len(ranks) == 1 {
			return []any{r.progress(&rts[0])}
		}
		ps := make([]api.Progress, len(ranks))
		for i, lr := range ranks {
			ps[i] = lr.progress(&rts[i])
		}
		return []any{ps[0], ps}
	}
	lost := func() bool {
		for _, lr := range ranks {
			if lr.hbLost.Load() {
				return true
			}
		}
		return false
	}
	for {
		if ctx.Err() == nil {
			if direct != nil && lost() {
				if err := r.directHeartbeat(hb, direct, every, details()...); err != nil {
					r.log.Debug("heartbeat failed", "error", err, "next in", every)
				}
			} else {
				r.a.recordHeartbeat(hb, details()...)
			}
		}
		t := time.NewTimer(every)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// heartbeater is the client's own heartbeat call, which client.Client has.
type heartbeater interface {
	RecordActivityHeartbeat(ctx context.Context, taskToken []byte, details ...any) error
}

// heartbeatCallLimit bounds a rank's own heartbeat call after a lost one
// (at least a second, at most the interval).
const heartbeatCallLimit = 10 * time.Second

// directHeartbeat records details through the client, within min(every,
// heartbeatCallLimit). A cancellation the reply carries is left to the
// poller, which tells a stale attempt; every other error is the call's.
func (r *rank) directHeartbeat(ctx context.Context, c heartbeater, every time.Duration, details ...any) error {
	ctx, cancel := context.WithTimeout(ctx, max(time.Second, min(every, heartbeatCallLimit)))
	defer cancel()
	err := c.RecordActivityHeartbeat(ctx, r.taskToken, details...)
	var gone *serviceerror.NotFound
	if err != nil && (temporal.IsCanceledError(err) || errors.As(err, &gone)) {
		// Recorded, with a cancellation; or the activity is gone (timed
		// out). The attempt's end reaches the rank through the poller.
		return nil
	}
	return err
}

// watch cancels the rank when its attempt ends, as soon as one of two
// sources tells:
//
//   - the activity is cancelled (a heartbeat's reply carried it);
//   - once the rank joined its group (joined closed), the process's
//     rendezvous poller, which asks the workflow's rendezvous Query once a
//     second for every rank of the attempt in this process, answers stale
//     (the attempt cancelled its ranks): in a large world a rank heartbeats
//     only every few seconds, so this is what stops it within a second,
//     at one Query per process, not per rank.
//
// The SDK also cancels an activity whose heartbeat could not reach the
// server (restarted, unreachable) for a throttle interval (heartbeatLost
// tells that cause from the server's word); then the rank
// keeps training, since the group is intact, and learns from the same
// poller, once the server answers, whether its attempt is still current.
func (r *rank) watch(actx, ctx context.Context, cancel context.CancelCauseFunc, joined <-chan struct{}) {
	done := actx.Done()
	lost := func() bool {
		cause := context.Cause(actx)
		if !heartbeatLost(cause) {
			cancel(cause)
			return false
		}
		r.log.Warn("lost contact with the Temporal server; training goes on while the attempt is current", "error", cause)
		r.hbLost.Store(true)
		done = nil
		return true
	}
	select {
	case <-ctx.Done():
		return
	case <-done:
		if !lost() {
			return
		}
	case <-joined:
	}
	// The poller runs at a standby's pace (once a second) for these.
	w := r.a.rdv.watch(r.wf, r.a.o.Logger, r.pollKey())
	w.stand()
	defer w.leave()
	r.offline.watching(w.kick)
	defer r.offline.watching(nil)
	for {
		var res pollResult
		select {
		case <-ctx.Done():
			return
		case <-done:
			if !lost() {
				return
			}
			continue
		case res = <-w.next():
		}
		if !res.at.IsZero() {
			r.offline.ok(res.at) // the server answered a Query
		}
		if res.err == nil && res.rv.State == api.RendezvousStale {
			cancel(temporal.NewApplicationError(
				fmt.Sprintf("attempt %d ended (current %d): the rank stops", r.in.Attempt, res.rv.Attempt), api.ErrStaleAttempt.String()))
			return
		}
	}
}

// contact is when the process's poller last heard from the workflow (a
// Query it sent at okAt answered), for a rank that ends to make sure the
// server takes its result. Its zero value has no poller (kick nil).
type contact struct {
	mu      sync.Mutex
	okAt    time.Time
	changed chan struct{} // closed when okAt moves
	kick    func()        // asks the poller to Query now
}

// watching sets the poller's kick (nil: watch ended, nobody hears the
// workflow for this rank any more; wait returns).
func (c *contact) watching(kick func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.kick = kick
	if kick == nil && c.changed != nil {
		close(c.changed)
		c.changed = nil
	}
}

func (c *contact) ok(at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if at.After(c.okAt) {
		c.okAt = at
		if c.changed != nil {
			close(c.changed)
			c.changed = nil
		}
	}
}

// wait returns once the workflow answered a Query sent at end or later
// (the server is there to take the rank's result), or after limit; it
// says whether it answered. Without a poller (the rank never joined) it
// returns at once.
func (c *contact) wait(end time.Time, limit time.Duration, log *slog.Logger) bool {
	t := time.NewTimer(limit)
	defer t.Stop()
	warned := false
	for {
		c.mu.Lock()
		if c.kick == nil || !c.okAt.Before(end) {
			c.mu.Unlock()
			if warned {
				log.Info("the Temporal server answers again: the rank's result goes")
			}
			return true
		}
		if c.changed == nil {
			c.changed = make(chan struct{})
		}
		ch, kick := c.changed, c.kick
		c.mu.Unlock()
		kick()
		select {
		case <-ch:
		case <-time.After(2 * time.Second):
			if !warned {
				warned = true
				log.Warn("the rank ended while the Temporal server does not answer: its result waits for the server", "limit", limit)
			}
		case <-t.C:
			log.Warn("the Temporal server did not answer within the rank's heartbeat timeout", "limit", limit)
			return false
		}
	}
}

// heartbeatLost says whether cause, the cause of the activity context's
// cancellation, is the SDK's own after a heartbeat call that failed (the
// server restarting or unreachable), rather than the server's word (cancel
// requested; the activity gone, paused or reset) or the worker's shutdown
// (context.Canceled). The SDK cancels on whatever error the call returned
// but those, not just the ones transient lists: while a server starts, an
// Internal, a NamespaceUnavailable or a plain error (gRPC's Unknown) too. A
// rank cancelled for one of those would stop, its cancellation refused by
// the server (none was requested), and its attempt would fail after the
// heartbeat timeout.
func heartbeatLost(cause error) bool {
	var (
		notFound    *serviceerror.NotFound
		nsNotActive *serviceerror.NamespaceNotActive
		nsNotFound  *serviceerror.NamespaceNotFound
	)
	switch {
	case cause == nil, errors.Is(cause, context.Canceled), temporal.IsCanceledError(cause),
		errors.As(cause, &notFound), errors.As(cause, &nsNotActive), errors.As(cause, &nsNotFound),
		errors.Is(cause, activity.ErrActivityPaused), errors.Is(cause, activity.ErrActivityReset):
		return false
	}
	return true
}

// transient says whether a Temporal client error may go away on retry.
func transient(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var (
		exhausted   *serviceerror.ResourceExhausted
		unavailable *serviceerror.Unavailable
		deadline    *serviceerror.DeadlineExceeded
		aborted     *serviceerror.Aborted
	)
	return errors.As(err, &exhausted) || errors.As(err, &unavailable) || errors.As(err, &deadline) || errors.As(err, &aborted)
}
