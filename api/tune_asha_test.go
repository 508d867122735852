package api

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"testing"
)

// refASHA is a second, independent reading of Ray's AsyncHyperBandScheduler
// (one bracket, s = 0) over recorded reports: the rungs from Ray's formula,
// each rung's rewards an ordered list, the cutoff recomputed by numpy's
// linear percentile. It returns, per report, whether the trial is stopped.
func refASHA(grace, maxT, rf float64, mode string, reports []ASHAReport) []bool {
	nRungs := int(math.Log(maxT/grace)/math.Log(rf) + 1)
	type entry struct {
		trial  string
		reward float64
	}
	milestones := make([]float64, nRungs) // ascending
	for k := range milestones {
		milestones[k] = grace * math.Pow(rf, float64(k))
	}
	recorded := make([][]entry, nRungs)
	has := func(k int, trial string) bool {
		for _, e := range recorded[k] {
			if e.trial == trial {
				return true
			}
		}
		return false
	}
	percentile := func(es []entry, p float64) (float64, bool) {
		var xs []float64
		for _, e := range es {
			if !math.IsNaN(e.reward) {
				xs = append(xs, e.reward)
			}
		}
		if len(xs) == 0 {
			return 0, false
		}
		sort.Float64s(xs)
		rank := p / 100 * float64(len(xs)-1)
		i := int(rank)
		if i+1 >= len(xs) {
			return xs[len(xs)-1], true
		}
		return xs[i]*(1-(rank-float64(i))) + xs[i+1]*(rank-float64(i)), true
	}
	dead := map[string]bool{}
	out := make([]bool, len(reports))
	for j, r := range reports {
		if dead[r.Trial] {
			out[j] = true
			continue
		}
		if r.T >= maxT {
			dead[r.Trial], out[j] = true, true
			continue
		}
		reward := r.Value
		if mode == "min" {
			reward = -reward
		}
		for k := nRungs - 1; k >= 0; k-- {
			if r.T >= milestones[k] && has(k, r.Trial) {
				break
			}
			if r.T < milestones[k] || has(k, r.Trial) {
				continue
			}
			if cut, ok := percentile(recorded[k], (1-1/rf)*100); ok && reward < cut {
				dead[r.Trial], out[j] = true, true
			}
			recorded[k] = append(recorded[k], entry{r.Trial, reward})
			break
		}
	}
	return out
}

func TestASHAByHand(t *testing.T) {
	s := SchedulerConfig{Type: "asha", TimeAttr: "epoch", MaxT: 20, GracePeriod: 1, ReductionFactor: 3}
	a := NewASHA(s)
	var ms []float64
	for _, r := range a.Rungs {
		ms = append(ms, r.Milestone)
	}
	if fmt.Sprint(ms) != "[9 3 1]" {
		t.Fatalf("rungs %v, want [9 3 1]", ms)
	}
	ds := ASHADecide(s, "max", []ASHAReport{
		{"a", 1, 0.5}, {"b", 1, 0.4}, {"c", 1, 0.6}, {"c", 2, 0.7}, {"b", 2, 0.9}, {"a", 3, 0.55}, {"c", 3, 0.5}, {"a", 20, 0.9},
	})
	want := []struct {
		stop   bool
		rung   float64
		cutoff float64
	}{
		{false, 1, 0}, {true, 1, 0.5}, {false, 1, 0.4 + 0.1*2.0/3}, {false, 0, 0}, {true, 1, 0.5},
		{false, 3, 0}, {true, 3, 0.55}, {true, 0, 0},
	}
	for i, w := range want {
		d := ds[i]
		if d.Stop != w.stop || d.Rung != w.rung || math.Abs(d.Cutoff-w.cutoff) > 1e-12 {
			t.Errorf("report %d: %+v, want stop %v rung %g cutoff %g", i, d, w.stop, w.rung, w.cutoff)
		}
	}
	if !ds[7].MaxT {
		t.Errorf("the report at max_t: %+v", ds[7])
	}
	// mode min: lower is better, the cutoff in the metric's units.
	ds = ASHADecide(s, "min", []ASHAReport{{"a", 1, 0.5}, {"b", 1, 0.6}, {"c", 1, 0.1}})
	if ds[1].Stop != true || ds[1].Cutoff != 0.5 || ds[2].Stop {
		t.Errorf("min: %+v", ds)
	}
}

// TestASHAMatchesReference replays recorded learning curves of many trials,
// reports interleaved as asynchronous trials produce them, through ASHA and
// the reference, for several configurations and both modes.
func TestASHAMatchesReference(t *testing.T) {
	for _, c := range []struct {
		grace, maxT, rf float64
	}{{1, 20, 3}, {1, 100, 4}, {2, 30, 2}, {1, 9, 3}, {3, 27, 3}} {
		for _, mode := range []string{"max", "min"} {
			for seed := uint64(1); seed <= 20; seed++ {
				reports := curves(seed, 24, int(c.maxT), mode)
				s := SchedulerConfig{Type: "asha", MaxT: c.maxT, GracePeriod: c.grace, ReductionFactor: c.rf}
				got := ASHADecide(s, mode, reports)
				want := refASHA(c.grace, c.maxT, c.rf, mode, reports)
				stops := 0
				for i := range reports {
					if got[i].Stop != want[i] {
						t.Fatalf("grace %g max_t %g rf %g %s seed %d: report %d %+v: stop %v, reference %v",
							c.grace, c.maxT, c.rf, mode, seed, i, reports[i], got[i].Stop, want[i])
					}
					if got[i].Stop && (i == 0 || !got[i-1].Stop) {
						stops++
					}
				}
				if stops == 0 {
					t.Fatalf("%+v seed %d: nothing stopped: the comparison proves little", c, seed)
				}
			}
		}
	}
}

// curves is n trials' reports, epochs 1..maxT, each trial at its own pace,
// ordered by when they would arrive; the values rise (mode max) or fall
// (min) toward a level of each trial's, with noise and now and then a NaN.
func curves(seed uint64, n, maxT int, mode string) []ASHAReport {
	rng := rand.New(rand.NewPCG(seed, 99))
	type ev struct {
		at float64
		r  ASHAReport
	}
	var evs []ev
	for i := range n {
		level, pace, start := rng.Float64(), 0.5+rng.Float64(), rng.Float64()*3
		name := fmt.Sprintf("t%02d", i)
		for e := 1; e <= maxT; e++ {
			v := level * (1 - math.Exp(-float64(e)/3)) * (1 + 0.05*rng.NormFloat64())
			if mode == "min" {
				v = 1 - v
			}
			if rng.IntN(60) == 0 {
				v = math.NaN()
			}
			evs = append(evs, ev{start + pace*float64(e), ASHAReport{name, float64(e), v}})
		}
	}
	sort.SliceStable(evs, func(a, b int) bool { return evs[a].at < evs[b].at })
	out := make([]ASHAReport, len(evs))
	for i, e := range evs {
		out[i] = e.r
	}
	return out
}

// TestJudgingMatchesDecisions checks Judging against ASHA itself: a report
// is judged (a rung decision or a stop) exactly when Judging says so from
// the rungs the trial's earlier reports were recorded at, for times that step, jump past rungs,
// repeat and go back (a restart from an older checkpoint).
func TestJudgingMatchesDecisions(t *testing.T) {
	for _, c := range []struct {
		grace, maxT, rf float64
		stopLast        bool
	}{{1, 20, 3, true}, {1, 100, 4, true}, {2, 30, 2, false}, {1, 9, 3, true}, {3, 27, 3, false}} {
		for seed := uint64(1); seed <= 30; seed++ {
			rng := rand.New(rand.NewPCG(seed, 7))
			s := SchedulerConfig{Type: "asha", MaxT: c.maxT, GracePeriod: c.grace, ReductionFactor: c.rf, StopLastTrials: &c.stopLast}
			a := NewASHA(s)
			j := a.Judging()
			type trial struct {
				at       float64
				recorded []float64
				stopped  bool
			}
			trials := make([]trial, 12)
			judged, skipped := 0, 0
			for range 600 {
				i := rng.IntN(len(trials))
				tr := &trials[i]
				if tr.stopped || tr.at > c.maxT*1.5 {
					continue
				}
				switch k := rng.IntN(10); {
				case k == 0:
					tr.at = math.Max(0, tr.at-float64(1+rng.IntN(4))) // a restart
				case k == 1: // the same time again
				case k < 4:
					tr.at += float64(2 + rng.IntN(6)) // past a rung or two
				case k == 4:
					tr.at += 0.5
				default:
					tr.at++
				}
				var want bool
				want, tr.recorded = j.Judged(tr.recorded, tr.at)
				d := a.OnResult(fmt.Sprintf("t%02d", i), tr.at, rng.Float64(), "max")
				if got := d.Rung != 0 || d.Stop; got != want {
					t.Fatalf("%+v seed %d: trial %d at %g: ASHA judged %v (%+v), Judging says %v", c, seed, i, tr.at, got, d, want)
				}
				if want {
					judged++
				} else {
					skipped++
				}
				tr.stopped = d.Stop
			}
			if judged == 0 || skipped == 0 {
				t.Fatalf("%+v seed %d: %d judged, %d not: the comparison proves little", c, seed, judged, skipped)
			}
		}
	}
}

func TestJudgingTime(t *testing.T) {
	j := &Judging{TimeAttr: TimeAttrIteration}
	if at, ok := j.Time(4, Metrics{TimeAttrIteration: 99}); !ok || at != 5 {
		t.Fatalf("training_iteration of report 4: %g %v, want 5 (the Tune's count)", at, ok)
	}
	j.TimeAttr = "epoch"
	if _, ok := j.Time(0, Metrics{"loss": 1}); ok {
		t.Fatal("a report without the time attribute has a time")
	}
	if _, ok := j.Time(0, Metrics{"epoch": math.NaN()}); ok {
		t.Fatal("a NaN time is a time")
	}
	if at, ok := j.Time(0, Metrics{"epoch": 3}); !ok || at != 3 {
		t.Fatalf("epoch 3: %g %v", at, ok)
	}
}
