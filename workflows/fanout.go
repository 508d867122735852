package workflows

import (
	"errors"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/tempotrain/tempotrain/api"
)

// Bounds of the ranks of an attempt.
const (
	// rankRunTimeout is the StartToClose timeout of a rank: effectively none,
	// since a rank's liveness is its heartbeat, not its duration.
	rankRunTimeout = 10 * 365 * 24 * time.Hour
	// cancelGrace is how long an attempt waits, after its first failure
	// cancelled the other ranks, for those still running to end. A live
	// rank hears of the cancellation with its next heartbeat's reply (a
	// second) and ends; a rank whose worker process died cannot answer, and
	// waiting for its heartbeat timeout would hold the run for a minute
	// while its peers, which lost it, have long failed. So the attempt ends
	// without it: its token is retired with the attempt, and anything it
	// still sends is refused as stale.
	cancelGrace = 3 * time.Second
	// stopGrace is how long an attempt that a stop ended (a Tune's
	// scheduler) waits for its cancelled ranks, instead of cancelGrace: a
	// live rank ends within seconds, even on a loaded machine, and the
	// trial's Fit must not end before its ranks did, or the next trial's
	// rank waits for the rank slot the stopped one still holds. A rank
	// whose worker died is abandoned after it.
	stopGrace = 30 * time.Second
	// preemptWait bounds how long an attempt waits, after a rank stopped
	// for a preemption, for the other ranks, which are checkpointing at the
	// same step (they agreed on it), before it cancels them: cancelling at
	// once would kill rank 0's commit of that checkpoint.
	preemptWait = time.Minute
)

// fanout is the rank fan-out of one attempt, fixed-size or elastic: one
// RunRank per slot (a rank of a fixed-size attempt, an elastic slot), each
// with MaximumAttempts 1 and WaitForCancellation, in one selector, and the
// wait until they all ended. The first failure cancels the others (end);
// a preemption waits preemptWait for the group's checkpoint first; once
// cancelled, the slots still running get cancelGrace to end, and are
// abandoned after it.
//
// What differs between the two kinds of attempt comes in as hooks: ended
// judges a slot's end, top and bottom run at the top of each turn of the
// wait loop and just before it selects. Their order, and that of every
// timer and activity, is the order of the commands in the workflow's
// history: histories recorded before must replay.
type fanout struct {
	f   *fit
	sel workflow.Selector
	// cancel cancels every slot's activity (f.cancel too).
	cancel workflow.CancelFunc
	// tctx is the context of the attempt's timers, cancelled when the wait
	// ends (a timer left running would fire into the next attempt's
	// history).
	tctx       workflow.Context
	stopTimers workflow.CancelFunc
	// grace: the attempt stops waiting cancelGrace after it cancelled its
	// slots (versionCancelGrace, for a fixed-size attempt).
	grace bool

	done     []bool
	running  int
	failures []RankFailure
	// cancelled: the attempt cancelled its slots (a failure, the end of a
	// preemption's wait, a hook).
	cancelled bool
	// preempting: a rank stopped for a preemption; waiting: its wait runs.
	preempting, waiting bool
	// timing: the grace timer runs; graceOver: it fired.
	timing, graceOver bool
	// graceLen is the grace timer's length: cancelGrace, or stopGrace
	// once a stop ended the attempt (versionStopWaitsForRanks).
	graceLen time.Duration
	// wake wakes the wait loop when the attempt is ended from outside it
	// (a stop signal), so that its grace timer starts.
	wake workflow.Channel

	// ended judges slot s's end with err (nil: it succeeded): the failure
	// to count, or false to count none.
	ended func(s int, err error) (RankFailure, bool)
	// top and bottom, when set, run at the top of each turn of the wait
	// loop and just before it selects.
	top, bottom func()
	// again, when set, says whether slot s, which ended with err, is
	// started again in the same attempt (its end then judges nothing).
	again func(s int, err error) bool
}

// maxLostStarts is how many times a rank of a fixed-size attempt lost
// before it registered is started again in the same attempt (lostRank).
const maxLostStarts = 2

// lostRank says whether rank r, whose RunRank ended with err, was lost
// before it registered: its heartbeat timed out, and the group has not
// formed, so no rank trains yet. An overloaded server can record an
// activity task as started while the worker's poll that was to take it has
// already given up (measured at 1,024 ranks and under many runs at once on
// this 2-core machine): the task is lost until its heartbeat timeout, and
// failing the attempt for it would restart every rank (and, at 1,024 ranks,
// lose the next attempt's group the same way). Such a rank is started
// again instead, up to maxLostStarts times an attempt (version
// lost-rank-started-again).
func (f *fit) lostRank(ctx workflow.Context, fo *fanout, starts []int, r int, err error) bool {
	var timeout *temporal.TimeoutError
	if fo.cancelled || f.ending || f.peers[r] != nil || starts[r] >= maxLostStarts ||
		!errors.As(err, &timeout) || timeout.TimeoutType() != enumspb.TIMEOUT_TYPE_HEARTBEAT {
		return false
	}
	if workflow.GetVersion(ctx, versionLostRankAgain, workflow.DefaultVersion, 1) < 1 {
		return false
	}
	starts[r]++
	workflow.GetLogger(ctx).Warn("a rank lost before it registered is started again", "attempt", f.attempt, "rank", r, "error", err)
	return true
}

// rankOptions are the activity options of the ranks of an attempt. An
// elastic slot has no schedule-to-start timeout: it waits in the queue for
// a worker as long as the attempt lasts; the attempt bounds the wait for
// MinWorkers with StartTimeout itself.
func (f *fit) rankOptions() workflow.ActivityOptions {
	o := workflow.ActivityOptions{
		TaskQueue:           f.in.Scaling.RankQueue(),
		StartToCloseTimeout: rankRunTimeout,
		HeartbeatTimeout:    rankHeartbeatTimeout(f.in),
		WaitForCancellation: true,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 1},
	}
	if !f.in.Scaling.Elastic() {
		o.ScheduleToStartTimeout = f.in.Run.Failure.StartTimeout.D()
	}
	return o
}

// rankHeartbeatTimeout is the heartbeat timeout of in's ranks: the user's,
// raised to three heartbeat intervals for a world so large that its ranks
// heartbeat less often than every second (api.RankHeartbeatTimeout).
func rankHeartbeatTimeout(in api.FitInput) time.Duration {
	return api.RankHeartbeatTimeout(in.Run.Failure.HeartbeatTimeout.D(), in.Scaling.Bundles(in.Scaling.Slots()))
}

// startRanks starts the n slots of the current attempt, with the
// checkpoints they may resume from, and returns their fan-out; ended judges
// each slot's end (see fanout).
func (f *fit) startRanks(ctx workflow.Context, n int, candidates []api.Checkpoint, ended func(s int, err error) (RankFailure, bool)) *fanout {
	return f.startSlots(ctx, n, func(s int) api.RunRankInput { return f.rankInput(s, n, candidates) }, ended)
}

// startSlots starts n slots, slot s's RunRank with input(s), and returns
// their fan-out; ended judges each slot's end (see fanout).
func (f *fit) startSlots(ctx workflow.Context, n int, input func(s int) api.RunRankInput, ended func(s int, err error) (RankFailure, bool)) *fanout {
	actx, cancel := workflow.WithCancel(ctx)
	f.cancel = cancel
	actx = workflow.WithActivityOptions(actx, f.rankOptions())
	fo := &fanout{f: f, sel: workflow.NewSelector(ctx), cancel: cancel, grace: true,
		done: make([]bool, n), running: n, ended: ended}
	for s := 0; s < n; s++ {
		fo.start(ctx, actx, s, input(s))
	}
	fo.wake = workflow.NewBufferedChannel(ctx, 1)
	fo.sel.AddReceive(fo.wake, func(c workflow.ReceiveChannel, _ bool) { c.Receive(ctx, nil) })
	f.stopRanks = func() {
		fo.end()
		fo.wake.SendAsync(struct{}{})
	}
	fo.tctx, fo.stopTimers = workflow.WithCancel(ctx)
	return fo
}

// start starts slot s's RunRank with in, and judges its end.
func (fo *fanout) start(ctx, actx workflow.Context, s int, in api.RunRankInput) {
	fo.sel.AddFuture(workflow.ExecuteActivity(actx, api.ActivityRunRank, in), func(fu workflow.Future) {
		err := fu.Get(ctx, nil)
		if err != nil && fo.again != nil && fo.again(s, err) {
			fo.start(ctx, actx, s, in)
			return
		}
		fo.done[s] = true
		fo.running--
		rf, ok := fo.ended(s, err)
		if !ok {
			return
		}
		fo.failures = append(fo.failures, rf)
		switch {
		case fo.cancelled:
		case rf.Preempted && !rf.Stopping:
			fo.preempting = true
		default:
			fo.end()
		}
	})
}

// end cancels the slots still running, once. From then on the rendezvous
// Query calls the attempt stale: a rank that lost its heartbeats' replies
// (and with them the cancellation) asks it, and ends.
func (fo *fanout) end() {
	if !fo.cancelled {
		fo.cancelled = true
		fo.f.ending = true
		fo.cancel()
	}
}

// wait runs the selector until every slot ended, or cancelGrace after the
// attempt cancelled them, then stops the attempt's timers.
func (fo *fanout) wait(ctx workflow.Context) {
	for fo.running > 0 && !fo.graceOver {
		if fo.top != nil {
			fo.top()
		}
		if fo.preempting && !fo.cancelled && !fo.waiting {
			// The other ranks stop on their own after their checkpoint.
			fo.waiting = true
			fo.sel.AddFuture(workflow.NewTimer(fo.tctx, preemptWait), func(workflow.Future) { fo.end() })
		}
		if fo.grace && fo.cancelled && !fo.timing && ctx.Err() == nil {
			// Our own cancellation after a failure or a stop (not the
			// workflow's): the ranks still running get cancelGrace to
			// end, or stopGrace after a stop.
			fo.timing = true
			fo.graceLen = cancelGrace
			if fo.f.stopping && workflow.GetVersion(ctx, versionStopWaitsForRanks, workflow.DefaultVersion, 1) >= 1 {
				fo.graceLen = stopGrace
			}
			fo.sel.AddFuture(workflow.NewTimer(fo.tctx, fo.graceLen), func(workflow.Future) { fo.graceOver = true })
		}
		if fo.bottom != nil {
			fo.bottom()
		}
		fo.sel.Select(ctx)
	}
	fo.stopTimers()
}

// abandon counts the ranks that did not end within cancelGrace as failures;
// rankOf maps a slot to its rank (-1: none, the slot counts for nothing).
// It returns how many it abandoned.
func (fo *fanout) abandon(rankOf func(s int) int) (lost int) {
	if fo.running > 0 {
		for s, done := range fo.done {
			r := rankOf(s)
			if done || r < 0 {
				continue
			}
			lost++
			fo.failures = append(fo.failures, RankFailure{Rank: r, Abandoned: true,
				Message: fmt.Sprintf("did not stop within %s of the cancellation: its worker process died, froze or lost Temporal", fo.graceLen)})
			if r == 0 {
				fo.f.abandonedRank0()
			}
		}
	}
	return lost
}

// outcome is the attempt's outcome from its ranks' failures.
func (fo *fanout) outcome() attemptOutcome {
	return outcomeOf(fo.f.attempt, fo.failures)
}

// outcomeOf is the outcome of attempt from its ranks' failures.
func outcomeOf(attempt int, failures []RankFailure) attemptOutcome {
	var out attemptOutcome
	if len(failures) > 0 {
		out.err, out.nonRetryable = Diagnose(attempt, failures)
		out.preempted = WasPreempted(failures)
	}
	return out
}

// abandonedRank0 retires the next checkpoint number when the attempt ended
// without its rank 0: rank 0 may still be committing the checkpoint it was
// given; the next attempt numbers its own past it, and the run's end
// deletes it unless it was reported.
func (f *fit) abandonedRank0() {
	f.st.Abandoned = append(f.st.Abandoned, f.st.NextSeq)
	f.st.NextSeq++
}

// endAttempt ends the current attempt with out: its updates are stale from
// now on, and its history records its end.
func (f *fit) endAttempt(ctx workflow.Context, out attemptOutcome) {
	f.running, f.cancel, f.stopRanks = false, nil, nil
	last := &f.st.History[len(f.st.History)-1]
	last.End, last.Error, last.Preempted, last.Grown = workflow.Now(ctx), clip(out.err), out.preempted, f.growing
	f.dirty = true
}

type attemptOutcome struct {
	// err summarises the failure; empty when every rank succeeded.
	err          string
	nonRetryable bool
	// preempted: the ranks checkpointed and stopped for a preemption; not
	// a failure.
	preempted bool
}

// classify turns a rank's activity error into a RankFailure whose message
// reads well in Result.Error.
func classify(rank int, err error, cancelledByUs bool, in api.FitInput) RankFailure {
	return classifyAt(rank, err, cancelledByUs, in, false)
}

// classifyBundle is classify for the bundle of ranks from lo
// (api.ScalingConfig.RanksPerProcess): the failure is that of the rank its
// error names (api.BundleFailure, its first detail), or of a cancelled
// rank's progress, or else lo's.
func classifyBundle(lo int, err error, cancelledByUs bool, in api.FitInput) RankFailure {
	var app *temporal.ApplicationError
	var bf api.BundleFailure
	if errors.As(err, &app) && app.HasDetails() && app.Details(&bf) == nil && bf.Local > 1 {
		return classifyAt(bf.Rank, err, cancelledByUs, in, true)
	}
	rf := classifyAt(lo, err, cancelledByUs, in, false)
	if rf.Progress != nil && rf.Progress.Rank >= 0 {
		rf.Rank = rf.Progress.Rank
	}
	return rf
}

// classifyAt is classify; bundled: the error's details begin with an
// api.BundleFailure, and the rank's own detail follows it.
func classifyAt(rank int, err error, cancelledByUs bool, in api.FitInput, bundled bool) RankFailure {
	rf := RankFailure{Rank: rank}
	detail := func(app *temporal.ApplicationError, v any) bool {
		if !app.HasDetails() {
			return false
		}
		if bundled {
			var bf api.BundleFailure
			return app.Details(&bf, v) == nil
		}
		return app.Details(v) == nil
	}
	var canceled *temporal.CanceledError
	var timeout *temporal.TimeoutError
	var app *temporal.ApplicationError
	switch {
	case errors.As(err, &canceled):
		rf.Cancelled = true
		rf.Message = "cancelled"
		var p api.Progress
		if canceled.HasDetails() && canceled.Details(&p) == nil {
			rf.Progress = &p // where it was, should the others have waited for it
		}
	case errors.As(err, &timeout):
		switch timeout.TimeoutType() {
		case enumspb.TIMEOUT_TYPE_HEARTBEAT:
			rf.Message = fmt.Sprintf("no heartbeat for %s: its worker process died, froze or lost its connection to Temporal", api.Duration(rankHeartbeatTimeout(in)))
		case enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START:
			if r := in.Scaling.Resources(); !r.IsZero() {
				rf.Message = fmt.Sprintf("no worker with resources %s took it from task queue %q within %s: only workers that have at least %s (cmd/worker -cpus, -gpus) and a free rank slot poll that queue",
					r, in.Scaling.RankQueue(), in.Run.Failure.StartTimeout, shapeText(r))
				break
			}
			rf.Message = fmt.Sprintf("no worker took it from task queue %q within %s: is a worker with free rank slots polling that queue?", in.Scaling.RankQueue(), in.Run.Failure.StartTimeout)
		default:
			rf.Message = timeout.Error()
		}
	case errors.As(err, &app):
		rf.Message = app.Message()
		rf.NonRetryable = app.NonRetryable()
		rf.PeerLost = api.ErrorKind(app.Type()) == api.ErrPeerLost
		rf.Preempted = api.ErrorKind(app.Type()) == api.ErrPreempted
		if api.ErrorKind(app.Type()) == api.ErrWorkerStopping {
			// Not a failure, like a preemption; but no group is
			// checkpointing: the attempt ends at once.
			rf.Preempted, rf.Stopping = true, true
		}
		if cancelledByUs && api.ErrorKind(app.Type()) == api.ErrStaleAttempt {
			// A rank whose process's poller saw the attempt end before
			// the cancellation reached it: its details are its progress.
			// A consequence of the cancellation, it ends nothing itself.
			rf.Cancelled, rf.NonRetryable = true, false
			var p api.Progress
			if detail(app, &p) && p.Attempt > 0 {
				rf.Progress = &p
			}
			return rf
		}
		var st api.Stall
		if detail(app, &st) && st.Op != "" {
			rf.Stall = &st // it waited in a collective operation for st.Peer
		}
	default:
		rf.Message = err.Error()
	}
	return rf
}

// shapeText is what a worker needs to poll r's shape queue: its counts
// rounded up to powers of two.
func shapeText(r api.Resources) string {
	cpus, gpus := r.Shape()
	return api.Resources{CPU: float64(cpus), GPU: gpus}.String()
}
