package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/tempotrain/tempotrain/api"
)

// An elastic attempt (ScalingConfig.MinWorkers/MaxWorkers) asks for
// MaxWorkers slots: one RunRank each, with no schedule-to-start timeout,
// on the rank queue. A slot registers when a worker took it. The group
// forms (the rendezvous closes) when every slot has registered, or
// LastCall after MinWorkers have, whichever is first; the registered slots,
// in slot order, become ranks 0..k-1 of a world of k, which the ranks learn
// from the rendezvous (Rendezvous.Slots). Slots that register later are
// standbys: they wait, holding their workers' capacity, and tell the
// workflow that the capacity is back; at the group's next committed
// checkpoint the workflow ends the attempt (a planned restart, not a
// failure), and the next one forms with more ranks. Slots no worker took are
// cancelled with the attempt (at once: they never started).
//
// A failure of a rank of the group ends the attempt as in a fixed-size run;
// the next attempt forms with the workers it finds, the dead one's slot
// staying in the queue. A slot that fails before the group formed is
// dropped (unless its error says no restart can help); one that fails as a
// standby is forgotten. If MinWorkers slots have not registered within
// StartTimeout the run fails, saying how many did.
type elasticAttempt struct {
	closed bool
	// slots[i] is the slot of rank i, once closed.
	slots []int
	// rankOf[s] is slot s's rank, -1 when not in the group.
	rankOf []int
	// standby holds the slots registered after the group formed, still
	// running: capacity for a larger group.
	standby map[int]time.Time // when each registered
	// comeBack is how many standbys the attempt was stopped to grow with.
	comeBack int
	// target, when positive, forms the group as soon as that many slots
	// registered, without the last call: the workers the attempt before
	// had, less those known gone (a rank that never answered its
	// cancellation, a worker stopping). More may join later as standbys.
	target    int
	lastCall  bool // the last-call timer runs
	wake      workflow.Channel
	startOver bool // StartTimeout passed before the group formed
}

// registerElastic records a slot's registration: before the group formed, a
// candidate rank (the group forms when all have come); after, a standby.
func (f *fit) registerElastic(ctx workflow.Context, req api.RegisterRequest) (api.Rendezvous, error) {
	e := f.el
	if e.closed {
		if e.rankOf[req.Rank] < 0 {
			if _, ok := e.standby[req.Rank]; !ok {
				e.standby[req.Rank] = workflow.Now(ctx)
			}
			return api.Rendezvous{State: api.RendezvousStandby, Attempt: f.attempt, Registered: f.registered, WorldSize: len(e.slots)}, nil
		}
		return f.rendezvous(req.Attempt)
	}
	if f.peers[req.Rank] == nil {
		f.registered++
	}
	f.peers[req.Rank] = &api.Peer{Addr: req.Addr, Node: req.Node}
	if f.registered == len(f.peers) || e.target > 0 && f.registered >= e.target {
		f.closeGroup(ctx)
	}
	e.wake.SendAsync(true)
	return f.rendezvous(req.Attempt)
}

// closeGroup forms the group of the registered slots.
func (f *fit) closeGroup(ctx workflow.Context) {
	e := f.el
	e.closed = true
	e.slots = e.slots[:0]
	for s, p := range f.peers {
		e.rankOf[s] = -1
		if p != nil {
			e.rankOf[s] = len(e.slots)
			e.slots = append(e.slots, s)
		}
	}
	last := &f.st.History[len(f.st.History)-1]
	last.WorldSize = len(e.slots)
	f.dirty = true
	f.upsert(ctx, temporal.NewSearchAttributeKeyInt64(api.SAWorldSize).ValueSet(int64(len(e.slots))))
}

// rendezvousElastic answers the rendezvous Query of an elastic attempt.
func (f *fit) rendezvousElastic() api.Rendezvous {
	e := f.el
	rv := api.Rendezvous{Attempt: f.attempt, Registered: f.registered, WorldSize: len(f.peers)}
	if !e.closed {
		rv.State = api.RendezvousWaiting
		return rv
	}
	rv.State, rv.WorldSize = api.RendezvousReady, len(e.slots)
	rv.Slots = append([]int(nil), e.slots...)
	rv.Peers = make([]api.Peer, len(e.slots))
	for i, s := range e.slots {
		rv.Peers[i] = *f.peers[s]
	}
	return rv
}

// runElastic is runAttempt for an elastic run.
func (f *fit) runElastic(ctx workflow.Context) attemptOutcome {
	n, least := f.in.Scaling.Slots(), f.in.Scaling.Min()
	candidates := f.beginAttempt(ctx, n, 0)
	target := max(f.nextTarget, least)
	if f.nextTarget == 0 {
		target = 0
	}
	f.nextTarget = 0
	e := &elasticAttempt{target: target, rankOf: make([]int, n), standby: map[int]time.Time{}, wake: workflow.NewBufferedChannel(ctx, n+1)}
	for s := range e.rankOf {
		e.rankOf[s] = -1
	}
	f.el = e

	var fo *fanout
	fo = f.startRanks(ctx, n, candidates, func(s int, err error) (RankFailure, bool) {
		inGroup := e.closed && e.rankOf[s] >= 0
		if !inGroup {
			delete(e.standby, s)
		}
		if err == nil {
			if !inGroup && !fo.cancelled {
				// Only a rank of a group trains; a slot outside it
				// ends with the attempt.
				return RankFailure{Rank: s, Message: "a slot outside the group ended before the attempt"}, true
			}
			return RankFailure{}, false
		}
		rf := classify(s, err, fo.cancelled, f.in)
		switch {
		case inGroup:
			rf.Rank = e.rankOf[s]
		case fo.cancelled || e.closed:
			// A standby, or a slot no worker took, ending with the
			// attempt or on its own: not the group's business.
			return RankFailure{}, false
		case !rf.NonRetryable:
			// Before the group formed: the slot is dropped; the group
			// forms with the others.
			if f.peers[s] != nil {
				f.peers[s] = nil
				f.registered--
			}
			workflow.GetLogger(ctx).Warn("slot failed before the group formed", "slot", s, "error", rf.Message)
			if fo.running >= least {
				return RankFailure{}, false
			}
			rf.Message = fmt.Sprintf("slot %d: %s (and fewer than min_workers %d slots are left)", s, rf.Message, least)
		}
		return rf, true
	})
	fo.sel.AddReceive(e.wake, func(c workflow.ReceiveChannel, _ bool) { c.Receive(ctx, nil) })
	fo.sel.AddFuture(workflow.NewTimer(fo.tctx, f.in.Run.Failure.StartTimeout.D()), func(workflow.Future) {
		if !e.closed && !fo.cancelled {
			e.startOver = true
			fo.end()
		}
	})
	fo.top = func() {
		if !e.closed && !e.lastCall && !fo.cancelled && f.registered >= least {
			e.lastCall = true
			fo.sel.AddFuture(workflow.NewTimer(fo.tctx, f.in.Scaling.LastCall.D()), func(workflow.Future) {
				e.lastCall = false
				if !e.closed && !fo.cancelled && f.registered >= least {
					f.closeGroup(ctx)
				}
			})
		}
	}
	fo.bottom = func() {
		if e.closed && !fo.cancelled && groupRunning(e, fo.done) == 0 {
			// Every rank of the group ended well: the slots left are
			// standbys and slots no worker took.
			fo.end()
		}
	}
	fo.wait(ctx)
	lost := fo.abandon(func(s int) int { return e.rankOf[s] })

	var out attemptOutcome
	switch {
	case e.startOver:
		out = attemptOutcome{nonRetryable: true, err: fmt.Sprintf("attempt %d: only %d of min_workers %d ranks started within start_timeout %s: %d workers took a rank from task queue %q (max_workers %d); start more workers with free rank slots on that queue, or lower scaling.min_workers",
			f.attempt, f.registered, least, f.in.Run.Failure.StartTimeout, f.registered, f.in.Scaling.RankQueue(), n)}
	case f.growing:
		// Not a failure (the Fit loop sees f.growing): the message says
		// what happened, in the history.
		out.err = fmt.Sprintf("attempt %d: stopped at its checkpoint to grow: %d ranks, %d workers came back", f.attempt, len(e.slots), e.comeBack)
	default:
		out = fo.outcome()
	}
	switch {
	case !e.closed || f.growing:
	case lost > 0:
		// Their workers are gone: the next group forms without waiting
		// for them.
		f.nextTarget = len(e.slots) - lost
	case out.preempted:
		f.nextTarget = len(e.slots) - 1
	}
	f.endAttempt(ctx, out)
	return out
}

// standbyGrace is how long a standby must have waited before the group
// grows for it: a slot taken by a worker that is stopping leaves within a
// second or so (its rendezvous sees the worker stop), and growing for it
// would restart the group for nothing.
const standbyGrace = 3 * time.Second

// settledStandbys counts the standbys registered at least standbyGrace ago.
func (e *elasticAttempt) settledStandbys(now time.Time) int {
	k := 0
	for _, t := range e.standby {
		if now.Sub(t) >= standbyGrace {
			k++
		}
	}
	return k
}

// groupRunning counts the ranks of the group still running.
func groupRunning(e *elasticAttempt, done []bool) int {
	k := 0
	for s, d := range done {
		if !d && e.rankOf[s] >= 0 {
			k++
		}
	}
	return k
}
