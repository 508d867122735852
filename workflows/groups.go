package workflows

import (
	"fmt"

	"go.temporal.io/sdk/workflow"

	"github.com/tempotrain/tempotrain/api"
)

// Rank groups. One workflow execution serialises every write of its state:
// each rank's start (the server's RecordActivityTaskStarted), registration
// and heartbeat is one, under the execution's one lock. At 1,024 ranks on
// one Fit the starts ran at 6-10 a second here, and ranks that started
// early lost their heartbeats while waiting for the rest (docs/scale.md,
// "1,024 ranks"). A fixed-size attempt of more than the group size
// (Options.RankGroupSize, 128) therefore runs its ranks in rank groups:
// child workflows (api.GroupWorkflowType) of at most that many ranks each,
// every one with its own execution, history and lock. A group starts its
// ranks, takes their registrations and answers their rendezvous Query, and
// watches them as a fixed-size attempt does (lost ranks started again, the
// first failure cancels the group's ranks, the grace, the abandoned). The
// Fit keeps what is the run's: the attempt, the checkpoints and the
// reports (a rank of a group sends restored and its reports to the Fit,
// api.RunRankInput.Controller). The protocol between the two:
//
//   - a group whose ranks all registered signals the Fit its peers
//     (signalGroupEvent); once every group did, the Fit signals each group
//     the whole world's (signalGroupPeers), and the group's rendezvous
//     Query answers Ready;
//   - a group's first failure that ends the attempt (not a preemption) is
//     signalled to the Fit at once, which tells every group to end
//     (signalGroupStop), as the first failure of a fixed-size attempt
//     cancels every rank;
//   - a group returns its ranks' failures (groupResult); the Fit diagnoses
//     the attempt from all of them, as from its own ranks'.
//
// The attempt's events in the Fit's own history are then O(groups), and a
// group's O(its ranks).

// DefaultRankGroupSize is the most ranks a rank group runs, and the size
// past which a fixed-size attempt runs in groups (Options.RankGroupSize):
// 64-rank groups formed in 3-5 s and 256-rank ones in 12-14 s on one
// execution on the 2-core machine of docs/scale.md.
const DefaultRankGroupSize = 128

// versionRankGroups: a fixed-size attempt of more ranks than the group size
// runs them in rank groups.
const versionRankGroups = "rank-groups"

// Signals between a Fit and its rank groups.
const (
	signalGroupEvent = "tempotrain-rank-group-event"
	signalGroupPeers = "tempotrain-rank-group-peers"
	signalGroupStop  = "tempotrain-rank-group-stop"
)

// groupInput is a rank group's input: ranks [Lo, Hi) of the Fit's attempt
// Rank.Attempt, each started with Rank (its Rank set).
type groupInput struct {
	Fit   api.FitInput     `json:"fit"`
	Group int              `json:"group"`
	Lo    int              `json:"lo"`
	Hi    int              `json:"hi"`
	Rank  api.RunRankInput `json:"rank"`
}

// groupEvent is what a group signals its Fit: its ranks' peers once they
// all registered, or the first failure that ends the attempt.
type groupEvent struct {
	Attempt int          `json:"attempt"`
	Group   int          `json:"group"`
	Peers   []api.Peer   `json:"peers,omitempty"`
	Failed  *RankFailure `json:"failed,omitempty"`
}

// groupPeers is the whole world's peers, which the Fit signals each group
// once every group's ranks registered.
type groupPeers struct {
	Attempt int        `json:"attempt"`
	Peers   []api.Peer `json:"peers"`
}

// groupStop tells a group to end the attempt: Stopping when a stop signal
// ended it (its ranks then get stopGrace).
type groupStop struct {
	Attempt  int  `json:"attempt"`
	Stopping bool `json:"stopping,omitempty"`
}

// groupResult is a group's end: its ranks' failures (none: every rank
// succeeded).
type groupResult struct {
	Failures []RankFailure `json:"failures,omitempty"`
}

// rankGroup is the part of a group's fit that the Fit has not.
type rankGroup struct {
	in     groupInput
	parent api.ExecutionRef
	// told: the group signalled the Fit its peers, failed: its failure.
	told, failed bool
}

// groupSize is the rank group size of this Fit's fixed-size attempts of n
// ranks: 0 when they run as one group in the Fit itself.
func (f *fit) groupSize(ctx workflow.Context, n int) int {
	size := f.opts.RankGroupSize
	if size == 0 {
		size = DefaultRankGroupSize
	}
	if size < 0 || n <= size {
		return 0
	}
	if workflow.GetVersion(ctx, versionRankGroups, workflow.DefaultVersion, 1) < 1 {
		return 0
	}
	return size
}

// groupBounds are the rank ranges of n ranks in groups of at most size:
// as even as they go, in rank order.
func groupBounds(n, size int) [][2]int {
	g := (n + size - 1) / size
	out := make([][2]int, g)
	for i := range out {
		out[i] = [2]int{i * n / g, (i + 1) * n / g}
	}
	return out
}

// groupID is the workflow ID of group g of attempt a of the Fit fitID.
func groupID(fitID string, a, g int) string {
	return fmt.Sprintf("%s/attempt-%d/group-%d", fitID, a, g)
}

// runGroups runs a fixed-size attempt of n ranks in rank groups of at most
// size ranks (see the comment at the top of the file).
func (f *fit) runGroups(ctx workflow.Context, n, size int) attemptOutcome {
	candidates := f.beginAttempt(ctx, n, n)
	info := workflow.GetInfo(ctx)
	self := api.ExecutionRef{ID: info.WorkflowExecution.ID, RunID: info.WorkflowExecution.RunID}
	tmpl := f.rankInput(0, n, candidates)
	tmpl.Controller = &self
	bounds := groupBounds(n, size)
	ids := make([]string, len(bounds))
	for g := range bounds {
		ids[g] = groupID(self.ID, f.attempt, g)
	}

	var (
		failures  []RankFailure
		running   = len(bounds)
		in        = make([]bool, len(bounds))
		groupsIn  int
		ended     bool
		waiting   bool
		attempt   = f.attempt
		sel       = workflow.NewSelector(ctx)
		tctx, end = workflow.WithCancel(ctx)
	)
	// stopAll ends the attempt in every group, once.
	stopAll := func() {
		if ended {
			return
		}
		ended, f.ending = true, true
		for _, id := range ids {
			workflow.SignalExternalWorkflow(ctx, id, "", signalGroupStop, groupStop{Attempt: attempt, Stopping: f.stopping})
		}
	}
	f.cancel, f.stopRanks = stopAll, stopAll

	cctx := workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{
		TaskQueue:           info.TaskQueueName,
		WaitForCancellation: true,
	})
	for g, b := range bounds {
		gctx := workflow.WithWorkflowID(cctx, ids[g])
		gin := groupInput{Fit: f.in, Group: g, Lo: b[0], Hi: b[1], Rank: tmpl}
		sel.AddFuture(workflow.ExecuteChildWorkflow(gctx, api.GroupWorkflowType, gin), func(fu workflow.Future) {
			running--
			var res groupResult
			if err := fu.Get(ctx, &res); err != nil {
				if ctx.Err() == nil {
					failures = append(failures, RankFailure{Rank: b[0],
						Message: fmt.Sprintf("rank group %d (ranks %d-%d) ended: %v", g, b[0], b[1]-1, err)})
					stopAll()
				}
				return
			}
			failures = append(failures, res.Failures...)
			for _, rf := range res.Failures {
				if rf.Rank == 0 && rf.Abandoned {
					f.abandonedRank0()
				}
				switch {
				case rf.Preempted && !rf.Stopping:
					if !ended && !waiting {
						// The other groups' ranks stop on their own
						// after their checkpoint.
						waiting = true
						sel.AddFuture(workflow.NewTimer(tctx, preemptWait), func(workflow.Future) { stopAll() })
					}
				default:
					stopAll()
				}
			}
		})
	}
	events := workflow.GetSignalChannel(ctx, signalGroupEvent)
	sel.AddReceive(events, func(c workflow.ReceiveChannel, _ bool) {
		var ev groupEvent
		c.Receive(ctx, &ev)
		if ev.Attempt != attempt || ev.Group < 0 || ev.Group >= len(bounds) {
			return // a group of an attempt that ended
		}
		if ev.Failed != nil {
			stopAll()
			return
		}
		b := bounds[ev.Group]
		if in[ev.Group] || len(ev.Peers) != b[1]-b[0] {
			return
		}
		in[ev.Group] = true
		groupsIn++
		for i := range ev.Peers {
			f.peers[b[0]+i] = &ev.Peers[i]
		}
		f.registered += len(ev.Peers)
		if groupsIn == len(bounds) && !ended {
			all, _ := f.rendezvous(attempt)
			for _, id := range ids {
				workflow.SignalExternalWorkflow(ctx, id, "", signalGroupPeers, groupPeers{Attempt: attempt, Peers: all.Peers})
			}
		}
	})
	for running > 0 {
		sel.Select(ctx)
	}
	end()
	out := outcomeOf(f.attempt, failures)
	f.endAttempt(ctx, out)
	return out
}

// RankGroup is a rank group: it runs ranks [Lo, Hi) of one attempt of its
// parent Fit (see the comment at the top of the file).
func (c *Controller) RankGroup(ctx workflow.Context, in groupInput) (groupResult, error) {
	info := workflow.GetInfo(ctx)
	if info.ParentWorkflowExecution == nil {
		return groupResult{}, fmt.Errorf("a rank group runs as a Fit's child workflow")
	}
	g := &rankGroup{in: in, parent: api.ExecutionRef{ID: info.ParentWorkflowExecution.ID, RunID: info.ParentWorkflowExecution.RunID}}
	f := &fit{opts: c.o, in: in.Fit, group: g,
		attempt: in.Rank.Attempt, token: in.Rank.Token, running: true,
		peers: make([]*api.Peer, in.Rank.WorldSize)}
	if err := f.registerRendezvousHandlers(ctx); err != nil {
		return groupResult{}, err
	}

	n := in.Hi - in.Lo
	actx, cancel := workflow.WithCancel(ctx)
	f.cancel = cancel
	actx = workflow.WithActivityOptions(actx, f.rankOptions())
	fo := &fanout{f: f, sel: workflow.NewSelector(ctx), cancel: cancel, grace: true,
		done: make([]bool, n), running: n}
	fo.ended = func(s int, err error) (RankFailure, bool) {
		if err == nil {
			return RankFailure{}, false
		}
		rf := classify(in.Lo+s, err, fo.cancelled, f.in)
		if !fo.cancelled && !(rf.Preempted && !rf.Stopping) && !g.failed {
			// The Fit ends the attempt in every group at once.
			g.failed = true
			r := rf
			g.signal(ctx, groupEvent{Attempt: f.attempt, Group: in.Group, Failed: &r})
		}
		return rf, true
	}
	starts := make([]int, len(f.peers))
	fo.again = func(s int, err error) bool { return f.lostRank(ctx, fo, starts, in.Lo+s, err) }
	for s := 0; s < n; s++ {
		ri := in.Rank
		ri.Rank = in.Lo + s
		fo.start(ctx, actx, s, ri)
	}
	fo.sel.AddReceive(workflow.GetSignalChannel(ctx, signalGroupPeers), func(c workflow.ReceiveChannel, _ bool) {
		var p groupPeers
		c.Receive(ctx, &p)
		if p.Attempt != f.attempt || len(p.Peers) != len(f.peers) || fo.cancelled {
			return
		}
		for i := range p.Peers {
			f.peers[i] = &p.Peers[i]
		}
		f.registered = len(f.peers)
	})
	fo.sel.AddReceive(workflow.GetSignalChannel(ctx, signalGroupStop), func(c workflow.ReceiveChannel, _ bool) {
		var s groupStop
		c.Receive(ctx, &s)
		if s.Attempt == f.attempt {
			f.stopping = f.stopping || s.Stopping
			fo.end()
		}
	})
	fo.tctx, fo.stopTimers = workflow.WithCancel(ctx)
	fo.wait(ctx)
	fo.abandon(func(s int) int { return in.Lo + s })
	f.running = false
	return groupResult{Failures: fo.failures}, nil
}

// registered is called by a group's register for each new registration:
// once every rank of the group registered, the group signals the Fit its
// peers.
func (g *rankGroup) registered(ctx workflow.Context, f *fit) {
	if g.told || f.registered < g.in.Hi-g.in.Lo {
		return
	}
	g.told = true
	peers := make([]api.Peer, 0, g.in.Hi-g.in.Lo)
	for _, p := range f.peers[g.in.Lo:g.in.Hi] {
		peers = append(peers, *p)
	}
	g.signal(ctx, groupEvent{Attempt: f.attempt, Group: g.in.Group, Peers: peers})
}

// signal signals ev to the group's Fit.
func (g *rankGroup) signal(ctx workflow.Context, ev groupEvent) {
	workflow.SignalExternalWorkflow(ctx, g.parent.ID, g.parent.RunID, signalGroupEvent, ev)
}
