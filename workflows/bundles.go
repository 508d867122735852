package workflows

import (
	"go.temporal.io/sdk/workflow"

	"github.com/tempotrain/tempotrain/api"
)

// Bundles of ranks. What a large attempt costs the Temporal server is its
// activities: each rank's start (RecordActivityTaskStarted, a write of the
// execution under its lock), heartbeats and end. At 1,024 ranks the starts
// alone took 11-15 s of a 2-core server (docs/scale.md, "After the line"),
// whatever the ranks did. A run with api.ScalingConfig.RanksPerProcess k
// over 1 (torchrun's --nproc-per-node) therefore runs each attempt as
// ceil(n/k) RunRank activities, bundle s running ranks [s*k, min((s+1)*k,
// n)) together in one worker process (activities.runBundle). The ranks are
// the same ranks: each registers its own address, connects, restores and
// reports as before, and the Fit's rendezvous, checkpoints and reports see
// no difference. What changes is the fan-out's slot: a bundle, whose
// failure names the rank that failed first (api.BundleFailure), whose loss
// before it registered starts it again (lostRank, by its first rank), and
// which, abandoned after the cancel grace, counts as its first rank's
// abandonment. The Fit runs its bundles in its own execution: at most
// ceil(api.MaxWorkers/k) activities, where rank groups (groups.go) split
// attempts of more than 128 single-rank activities.

// runBundles runs one fixed-size attempt of n ranks in bundles of k.
func (f *fit) runBundles(ctx workflow.Context, n, k int) attemptOutcome {
	candidates := f.beginAttempt(ctx, n, n)
	bundles := f.in.Scaling.Bundles(n)
	input := func(s int) api.RunRankInput {
		in := f.rankInput(s*k, n, candidates)
		in.Local, in.Activities = min(k, n-s*k), bundles
		return in
	}
	var fo *fanout
	fo = f.startSlots(ctx, bundles, input, func(s int, err error) (RankFailure, bool) {
		if err == nil {
			return RankFailure{}, false
		}
		return classifyBundle(s*k, err, fo.cancelled, f.in), true
	})
	starts := make([]int, n)
	fo.again = func(s int, err error) bool { return f.lostRank(ctx, fo, starts, s*k, err) }
	fo.wait(ctx)
	fo.abandon(func(s int) int { return s * k })
	out := fo.outcome()
	f.endAttempt(ctx, out)
	return out
}
