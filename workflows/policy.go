package workflows

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tempotrain/tempotrain/api"
)

// ShouldRestart decides, after a failed attempt, whether the run starts
// another. failures counts failed attempts of this Fit, the one just ended
// included; maxFailures is FailureConfig.MaxFailures (-1: no limit).
func ShouldRestart(failures, maxFailures int, nonRetryable bool) bool {
	if nonRetryable {
		return false
	}
	return maxFailures == -1 || failures <= maxFailures
}

// MaxErrorInHistory bounds an attempt's error in run.json's history (and the
// workflow's state, which every RecordRun and continue-as-new carries): a
// panic's stack in every one of hundreds of attempts would pass Temporal's
// 2 MB payload limit. The run's final error (Result.Error) is not clipped.
const MaxErrorInHistory = 2048

// clip shortens s to MaxErrorInHistory bytes, keeping its start and end
// (the failing rank and the error's cause, a stack's last frames).
func clip(s string) string {
	if len(s) <= MaxErrorInHistory {
		return s
	}
	const mark = " [... %d bytes ...] "
	cut := len(s) - MaxErrorInHistory + len(mark) + 8
	head := (len(s) - cut) * 3 / 4
	for head > 0 && !utf8.RuneStart(s[head]) {
		head--
	}
	tail := head + cut
	for tail < len(s) && !utf8.RuneStart(s[tail]) {
		tail++
	}
	return s[:head] + fmt.Sprintf(mark, tail-head) + s[tail:]
}

// RestartBackoff is the wait before the next attempt after stalled failed
// attempts in a row that committed no checkpoint: none after the first (a
// dead worker is replaced at once), then 1s, 2s, 4s, ... up to
// MaxRestartBackoff, so that a run that cannot make progress (a function
// that always crashes, a worker that never comes, max_failures -1) does not
// spin.
func RestartBackoff(stalled int) time.Duration {
	if stalled < 2 {
		return 0
	}
	d := time.Second
	for i := 2; i < stalled && d < MaxRestartBackoff; i++ {
		d *= 2
	}
	return min(d, MaxRestartBackoff)
}

// MaxRestartBackoff caps RestartBackoff.
const MaxRestartBackoff = time.Minute

// Retain applies CheckpointConfig to the committed checkpoints (any order).
// It keeps the NumToKeep best by ScoreAttribute (by recency without one) and,
// in addition, always the latest, so the run can resume from where it was.
// Both results are sorted by Seq.
func Retain(ckpts []api.Checkpoint, cfg api.CheckpointConfig) (keep, drop []api.Checkpoint) {
	if cfg.NumToKeep <= 0 || len(ckpts) <= cfg.NumToKeep {
		return sortedBySeq(ckpts), nil
	}
	ranked := BestFirst(ckpts, cfg)
	latest := ckpts[0]
	for _, c := range ckpts[1:] {
		if c.Seq > latest.Seq {
			latest = c
		}
	}
	for i, c := range ranked {
		if i < cfg.NumToKeep || c.Seq == latest.Seq {
			keep = append(keep, c)
		} else {
			drop = append(drop, c)
		}
	}
	return sortedBySeq(keep), sortedBySeq(drop)
}

// BestFirst orders checkpoints best first: by the score attribute in the
// score order, newer first among equals and for checkpoints that lack the
// attribute (which rank below all that have it). Without an attribute, newest
// first.
func BestFirst(ckpts []api.Checkpoint, cfg api.CheckpointConfig) []api.Checkpoint {
	out := append([]api.Checkpoint(nil), ckpts...)
	attr := cfg.ScoreAttribute
	score := func(c api.Checkpoint) (float64, bool) {
		if attr == "" {
			return 0, false
		}
		v, ok := c.Metrics[attr]
		if !ok || math.IsNaN(v) {
			return 0, false
		}
		if cfg.ScoreOrder == "min" {
			v = -v
		}
		return v, true
	}
	sort.SliceStable(out, func(i, j int) bool {
		si, oki := score(out[i])
		sj, okj := score(out[j])
		if oki != okj {
			return oki
		}
		if oki && si != sj {
			return si > sj
		}
		return out[i].Seq > out[j].Seq
	})
	return out
}

func sortedBySeq(c []api.Checkpoint) []api.Checkpoint {
	if c == nil {
		return nil
	}
	out := append([]api.Checkpoint(nil), c...)
	sort.Slice(out, func(i, j int) bool { return out[i].Seq < out[j].Seq })
	return out
}

// RankFailure is how one rank of a failed attempt ended.
type RankFailure struct {
	Rank int
	// Message says why, without the rank.
	Message string
	// NonRetryable: a restart cannot help (bad config, unknown function).
	NonRetryable bool
	// Cancelled: the workflow cancelled the rank after another failed.
	Cancelled bool
	// PeerLost: the rank failed because a peer's connection broke, which is
	// what every rank sees when one of them dies.
	PeerLost bool
	// Abandoned: the rank did not end within cancelGrace of the
	// cancellation, and the attempt ended without it: most likely the rank
	// whose worker died, so it reads as a cause.
	Abandoned bool
	// Preempted: the rank checkpointed and stopped because a worker of its
	// group is stopping (train.ErrPreempted), or (with Stopping) a stopping
	// worker refused the rank.
	Preempted bool
	Stopping  bool
	// Stall: the rank reached a collective operation's deadline waiting
	// for rank Stall.Peer (the api.Stall detail of its error).
	Stall *api.Stall
	// Progress is the rank's last progress, when it returned it (a
	// cancelled rank does).
	Progress *api.Progress
}

// WasPreempted says whether an attempt that ended with failures was
// preempted: some rank stopped for a preemption and every other rank only
// followed (preempted too, cancelled, or lost a peer). Such an attempt is
// not a failure: its ranks checkpointed, and the next one resumes there.
func WasPreempted(failures []RankFailure) bool {
	any := false
	for _, f := range failures {
		switch {
		case f.Preempted:
			any = true
		case f.Cancelled, f.PeerLost:
		default:
			return false
		}
	}
	return any
}

// Diagnose summarises a failed attempt in one line: the rank that failed
// first and why, then the other ranks grouped by identical message, so that
// eight ranks failing the same way read as one line. Ranks that only lost a
// peer come after the causes, whatever order they ended in, since a rank's
// death breaks its neighbours' connections before its own failure is known.
// failures are in the order the workflow saw them. nonRetryable is true when
// any rank's error says a restart cannot help.
func Diagnose(attempt int, failures []RankFailure) (summary string, nonRetryable bool) {
	type group struct {
		msg       string
		ranks     []int
		preempted bool // ranks that stopped for a preemption: not failures
		abandoned bool
	}
	var groups []*group
	// hungFirst: when every rank that failed on its own timed out in a
	// collective operation on healthy links, and a rank did not even stop
	// when cancelled, that rank is the one the others waited for (it hangs
	// in the training function, or its host froze): it leads.
	hungFirst := func(gs []*group) {
		var hung *group
		for _, g := range gs {
			switch {
			case g.abandoned:
				if hung == nil {
					hung = g
				}
			case !strings.Contains(g.msg, api.CollectiveTimeoutText) || strings.Contains(g.msg, api.LinkDownText):
				return
			}
		}
		if hung == nil || gs[0] == hung {
			return
		}
		i := slices.Index(gs, hung)
		copy(gs[1:i+1], gs[:i])
		gs[0] = hung
		hung.msg += "; the other ranks timed out in a collective operation waiting for it: it hangs outside the collective operations (in the training function) or its host froze"
	}
	byMsg := map[string]*group{}
	var cancelled, peerLost []int
	firstPeerLost := ""
	culprit, lead := waitedFor(failures)
	for _, f := range failures {
		nonRetryable = nonRetryable || f.NonRetryable
		if lead != "" && f.Rank == culprit {
			continue
		}
		if f.Cancelled {
			cancelled = append(cancelled, f.Rank)
			continue
		}
		if f.PeerLost {
			if firstPeerLost == "" {
				firstPeerLost = f.Message
			}
			peerLost = append(peerLost, f.Rank)
			continue
		}
		g := byMsg[f.Message]
		if g == nil {
			g = &group{msg: f.Message, preempted: f.Preempted, abandoned: f.Abandoned}
			byMsg[f.Message] = g
			groups = append(groups, g)
		}
		g.ranks = append(g.ranks, f.Rank)
	}
	hungFirst(groups)
	var b strings.Builder
	switch {
	case lead != "":
		fmt.Fprintf(&b, "attempt %d: %s", attempt, lead)
		for _, g := range groups {
			fmt.Fprintf(&b, "; then %s: %s", rankList(g.ranks), g.msg)
		}
		if len(peerLost) > 0 {
			fmt.Fprintf(&b, "; %s lost a peer", rankList(peerLost))
		}
	case len(groups) > 0:
		verb := "failed"
		if groups[0].preempted {
			verb = "stopped"
		}
		fmt.Fprintf(&b, "attempt %d: %s %s: %s", attempt, rankList(groups[0].ranks), verb, groups[0].msg)
		for _, g := range groups[1:] {
			fmt.Fprintf(&b, "; then %s: %s", rankList(g.ranks), g.msg)
		}
		if len(peerLost) > 0 {
			fmt.Fprintf(&b, "; %s lost a peer", rankList(peerLost))
		}
	case len(peerLost) > 0:
		fmt.Fprintf(&b, "attempt %d: %s lost a peer: %s", attempt, rankList(peerLost), firstPeerLost)
	default:
		return fmt.Sprintf("attempt %d: cancelled (%s)", attempt, rankList(cancelled)), nonRetryable
	}
	if len(cancelled) > 0 {
		fmt.Fprintf(&b, "; %s cancelled", rankList(cancelled))
	}
	return b.String(), nonRetryable
}

// waitedFor finds the rank a stalled group waited for. Every rank that
// reached a collective operation's deadline names the neighbour it waited
// for (RankFailure.Stall); following those names from rank to rank ends at
// a rank that did not stall itself and did not fail on its own: it was
// cancelled (it was in its training function, or elsewhere outside the
// operation) or did not even stop when cancelled (its process hangs or its
// host froze). That rank leads the diagnosis, with the operation it did not
// reach and its last progress. No lead when no rank stalled, when a rank
// saw its link drop packets (the network is the cause; that rank leads as
// it reports first), or when some rank failed on its own (that error is the
// cause).
func waitedFor(failures []RankFailure) (culprit int, lead string) {
	byRank := map[int]RankFailure{}
	start := -1
	for _, f := range failures {
		byRank[f.Rank] = f
		switch {
		case f.Stall != nil && f.Stall.LinkDown:
			return -1, ""
		case f.Stall != nil:
			if start < 0 {
				start = f.Rank
			}
		case f.Cancelled, f.Abandoned, f.PeerLost:
		default:
			return -1, ""
		}
	}
	if start < 0 {
		return -1, ""
	}
	at, stall := start, api.Stall{}
	for seen := map[int]bool{}; ; {
		f, ok := byRank[at]
		if !ok || f.Stall == nil {
			break
		}
		if seen[at] {
			return -1, "" // a cycle: every rank waited; none is to blame
		}
		seen[at], stall, at = true, *f.Stall, f.Stall.Peer
	}
	f, ok := byRank[at]
	if !ok || !(f.Cancelled || f.Abandoned) {
		return -1, ""
	}
	var b strings.Builder
	op := stall.Op
	if stall.Seq > 0 { // a torch collective's number is not known
		op = fmt.Sprintf("%s #%d", stall.Op, stall.Seq)
	}
	if f.Abandoned {
		fmt.Fprintf(&b, "rank %d did not take part in %s within %v and did not stop when cancelled: its process hangs or its host froze", at, op, stall.Timeout)
	} else {
		fmt.Fprintf(&b, "rank %d did not reach %s within %v", at, op, stall.Timeout)
	}
	if p := f.Progress; p != nil {
		switch {
		case p.Phase != "" && p.Phase != api.PhaseTrain:
			fmt.Fprintf(&b, "; it was in its %s phase", p.Phase)
		case p.Epoch >= 0:
			fmt.Fprintf(&b, "; its last progress: epoch %d, step %d", p.Epoch, p.Step)
		default:
			b.WriteString("; it was in its training function, which had set no progress")
		}
	}
	return at, b.String()
}

// rankList writes ranks as "rank 3" or "ranks 0-2,5".
func rankList(ranks []int) string {
	r := append([]int(nil), ranks...)
	sort.Ints(r)
	var parts []string
	for i := 0; i < len(r); {
		j := i
		for j+1 < len(r) && r[j+1] == r[j]+1 {
			j++
		}
		switch {
		case j == i:
			parts = append(parts, strconv.Itoa(r[i]))
		case j == i+1:
			parts = append(parts, strconv.Itoa(r[i]), strconv.Itoa(r[j]))
		default:
			parts = append(parts, fmt.Sprintf("%d-%d", r[i], r[j]))
		}
		i = j + 1
	}
	if len(r) == 1 {
		return "rank " + parts[0]
	}
	return "ranks " + strings.Join(parts, ",")
}
