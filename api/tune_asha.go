package api

import (
	"fmt"
	"math"
	"slices"
	"sort"
)

// ASHA is the state of an asynchronous successive halving scheduler (Ray
// Tune's AsyncHyperBandScheduler with one bracket): rungs at
// grace_period * reduction_factor^k up to max_t, and at each rung the
// reward each trial had when it reached it. A trial reaching a rung goes on
// only when its reward is at least the (1 - 1/reduction_factor) quantile of
// the rewards recorded there before it (the top 1/reduction_factor);
// nothing waits for a rung to fill, so a trial early to a rung is judged
// against fewer. A reward is the metric for mode max, its negation for min.
//
// It is plain data, so the Tune workflow carries it across continue-as-new,
// and a pure function of the reports it was given in order (ASHADecide).
type ASHA struct {
	TimeAttr        string  `json:"time_attr"`
	MaxT            float64 `json:"max_t"`
	ReductionFactor float64 `json:"reduction_factor"`
	StopLastTrials  bool    `json:"stop_last_trials"`
	// Rungs, highest milestone first (as Ray walks them).
	Rungs []Rung `json:"rungs"`
}

// Rung is one milestone of ASHA and the rewards recorded there.
type Rung struct {
	Milestone float64 `json:"milestone"`
	// Recorded maps a trial to its reward at this rung.
	Recorded map[string]float64 `json:"recorded"`
}

// Decision is the scheduler's answer to one report.
type Decision struct {
	// Stop the trial.
	Stop bool `json:"stop,omitempty"`
	// Rung is the milestone the report was judged at (0: none).
	Rung float64 `json:"rung,omitempty"`
	// Cutoff the reward was compared with (when Rung is set and the rung
	// had rewards recorded).
	Cutoff float64 `json:"cutoff,omitempty"`
	// MaxT: the trial reached max_t (stop_last_trials). The Tune lets a
	// report at max_t exactly go on and stops the trial at a later one.
	MaxT bool `json:"max_t,omitempty"`
	// Reason says why, for a stop.
	Reason string `json:"reason,omitempty"`
}

// NewASHA returns the scheduler of s (after WithDefaults).
func NewASHA(s SchedulerConfig) *ASHA {
	s = s.WithDefaults()
	a := &ASHA{TimeAttr: s.TimeAttr, MaxT: s.MaxT, ReductionFactor: s.ReductionFactor, StopLastTrials: *s.StopLastTrials}
	// Milestones grace * rf^k that do not pass max_t (Ray: MAX_RUNGS =
	// int(log(max_t/grace)/log(rf) + 1)); the tolerance keeps a max_t that
	// is exactly a power, 9 with rf 3, a rung despite rounding.
	var ms []float64
	for m := s.GracePeriod; m <= s.MaxT*(1+1e-9); m *= s.ReductionFactor {
		ms = append(ms, m)
	}
	for i := len(ms) - 1; i >= 0; i-- {
		a.Rungs = append(a.Rungs, Rung{Milestone: ms[i], Recorded: map[string]float64{}})
	}
	return a
}

// OnResult judges a report of trial at time t (the report's TimeAttr) with
// metric value v in mode, and records it (Ray's _Bracket.on_result).
func (a *ASHA) OnResult(trial string, t, v float64, mode string) Decision {
	if t >= a.MaxT && a.StopLastTrials {
		return Decision{Stop: true, MaxT: true, Reason: fmt.Sprintf("%s %g reached max_t %g", a.TimeAttr, t, a.MaxT)}
	}
	reward := v
	if mode == "min" {
		reward = -v
	}
	for i := range a.Rungs {
		r := &a.Rungs[i]
		_, seen := r.Recorded[trial]
		if t >= r.Milestone && seen {
			// Judged at this rung (the highest it reached) already.
			break
		}
		if t < r.Milestone || seen {
			continue
		}
		d := Decision{Rung: r.Milestone}
		if len(r.Recorded) > 0 {
			cut := quantile(r.Recorded, 1-1/a.ReductionFactor)
			d.Cutoff = cut
			if mode == "min" {
				d.Cutoff = -cut
			}
			if reward < cut {
				d.Stop = true
				d.Reason = fmt.Sprintf("asha: at rung %s=%g its %g is not in the top 1/%g of the %d trials there (cutoff %g)",
					a.TimeAttr, r.Milestone, v, a.ReductionFactor, len(r.Recorded), d.Cutoff)
			}
		}
		// A NaN is recorded too (the trial was judged here) and left out
		// of later cutoffs, as Ray's nanpercentile does.
		r.Recorded[trial] = reward
		return d
	}
	return Decision{}
}

// quantile is numpy's nanpercentile(values, q*100) with linear
// interpolation: NaNs left out.
func quantile(rec map[string]float64, q float64) float64 {
	vs := make([]float64, 0, len(rec))
	for _, v := range rec {
		if !math.IsNaN(v) {
			vs = append(vs, v)
		}
	}
	if len(vs) == 0 {
		return math.NaN()
	}
	sort.Float64s(vs)
	pos := q * float64(len(vs)-1)
	lo := math.Floor(pos)
	hi := math.Ceil(pos)
	return vs[int(lo)] + (vs[int(hi)]-vs[int(lo)])*(pos-lo)
}

// ASHAReport is one recorded report, as the scheduler sees it.
type ASHAReport struct {
	Trial string  `json:"trial"`
	T     float64 `json:"t"`
	Value float64 `json:"value"`
}

// ASHADecide is ASHA as a pure function: the decision on each of reports,
// given in the order they arrived. Reports of a trial after the one that
// stopped it are not judged (its decision repeats the stop).
func ASHADecide(s SchedulerConfig, mode string, reports []ASHAReport) []Decision {
	a := NewASHA(s)
	stopped := map[string]Decision{}
	out := make([]Decision, len(reports))
	for i, r := range reports {
		if d, ok := stopped[r.Trial]; ok {
			out[i] = d
			continue
		}
		out[i] = a.OnResult(r.Trial, r.T, r.Value, mode)
		if out[i].Stop {
			stopped[r.Trial] = out[i]
		}
	}
	return out
}

// Judging says which of a trial's reports an ASHA scheduler can stop it
// at, so that the trial's Fit holds only those for the Tune's answer (Ray
// judges a trial once per rung): a report at or past a rung the trial has
// not been recorded at, when that rung is the highest it reaches, or one
// at max_t with stop_last_trials. A Tune with stop conditions judges every
// report and gives its trials none.
type Judging struct {
	TimeAttr       string    `json:"time_attr"`
	Milestones     []float64 `json:"milestones"` // highest first
	MaxT           float64   `json:"max_t"`
	StopLastTrials bool      `json:"stop_last_trials"`
}

// Judging is a's rule for which reports it judges.
func (a *ASHA) Judging() *Judging {
	j := &Judging{TimeAttr: a.TimeAttr, MaxT: a.MaxT, StopLastTrials: a.StopLastTrials}
	for _, r := range a.Rungs {
		j.Milestones = append(j.Milestones, r.Milestone)
	}
	return j
}

// Time is a report's time: its TimeAttr, or for training_iteration its
// index in the run plus one, as the Tune counts it; false when the report
// has none (the scheduler does not judge it).
func (j *Judging) Time(index int, m Metrics) (float64, bool) {
	if j.TimeAttr == TimeAttrIteration {
		return float64(index + 1), true
	}
	t, ok := m[j.TimeAttr]
	return t, ok && !math.IsNaN(t)
}

// Judged says whether the scheduler judges a trial's report at time t,
// given the rungs the trial's earlier reports with the metric were
// recorded at, and returns those with this report's: ASHA.OnResult's walk
// for one trial.
func (j *Judging) Judged(recorded []float64, t float64) (bool, []float64) {
	if t >= j.MaxT && j.StopLastTrials {
		return true, recorded
	}
	for _, m := range j.Milestones {
		if t < m {
			continue
		}
		if slices.Contains(recorded, m) {
			return false, recorded
		}
		return true, append(recorded, m)
	}
	return false, recorded
}
