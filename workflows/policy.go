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
	for _, f := range failures {
		nonRetryable = nonRetryable || f.NonRetryable
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
