package gbdt

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"
)

// pairAUC is the AUC by its definition: over all (positive, negative) pairs,
// the weight of those ranked right plus half of the ties.
func pairAUC(pred []float32, pos []bool, w []float64) float64 {
	var num, den float64
	for i := range pred {
		if !pos[i] {
			continue
		}
		for j := range pred {
			if pos[j] {
				continue
			}
			ww := w[i] * w[j]
			den += ww
			switch {
			case pred[i] > pred[j]:
				num += ww
			case pred[i] == pred[j]:
				num += ww / 2
			}
		}
	}
	return num / den
}

// TestMetrics checks every metric on 1, 2 and 3 ranks against its formula
// computed directly over all rows, and that the ranks agree bit for bit.
func TestMetrics(t *testing.T) {
	const n = 400
	rng := rand.New(rand.NewPCG(3, 3))
	for _, tc := range []struct {
		obj     string
		classes int
		metrics []string
	}{
		{BinaryLogistic, 0, []string{"logloss", "error", "auc", "rmse", "mae"}},
		{MultiSoftprob, 3, []string{"mlogloss", "merror", "auc"}},
		{CountPoisson, 0, []string{"poisson-nloglik", "rmse"}},
	} {
		p := DefaultParams()
		p.Objective, p.NumClass, p.EvalMetric = tc.obj, tc.classes, tc.metrics
		k := p.groups()
		d := synth(n, 2, tc.obj, tc.classes, 8)
		d.Weight = make([]float32, n)
		margins := make([]float32, n*k)
		for i := range margins {
			// Coarse margins: many ties for AUC.
			margins[i] = float32(rng.IntN(9)-4) / 2
		}
		for i := range d.Weight {
			d.Weight[i] = float32(1 + rng.IntN(3))
		}
		pred := transform(probObjective(tc.obj), k, margins)
		want := map[string]float64{}
		var sw float64
		sums := map[string]float64{}
		for i := range n {
			w := float64(d.Weight[i])
			y := float64(d.Label[i])
			pr := float64(pred[i*k])
			sw += w
			sums["rmse"] += w * (pr - y) * (pr - y)
			sums["mae"] += w * math.Abs(pr-y)
			c := min(max(pr, 1e-16), 1-1e-16)
			sums["logloss"] += w * (-y*math.Log(c) - (1-y)*math.Log(1-c))
			if (pr > 0.5) != (y == 1) {
				sums["error"] += w
			}
			lg, _ := math.Lgamma(y + 1)
			sums["poisson-nloglik"] += w * (lg + pr - math.Log(pr)*y)
			if k > 1 {
				sums["mlogloss"] += w * -math.Log(float64(pred[i*k+int(y)]))
				if argmax(pred[i*k:(i+1)*k]) != int(y) {
					sums["merror"] += w
				}
			}
		}
		for m, s := range sums {
			want[m] = s / sw
		}
		want["rmse"] = math.Sqrt(want["rmse"])
		w := make([]float64, n)
		for i := range w {
			w[i] = float64(d.Weight[i])
		}
		if k == 1 {
			pos := make([]bool, n)
			for i := range pos {
				pos[i] = d.Label[i] == 1
			}
			want["auc"] = pairAUC(pred, pos, w)
		} else {
			var num, den float64
			for c := range k {
				pos := make([]bool, n)
				pc := make([]float32, n)
				var wp float64
				for i := range pos {
					pos[i] = int(d.Label[i]) == c
					pc[i] = pred[i*k+c]
					if pos[i] {
						wp += w[i]
					}
				}
				num += pairAUC(pc, pos, w) * wp
				den += wp
			}
			want["auc"] = num / den
		}
		var ref []MetricValue
		for ranks := 1; ranks <= 3; ranks++ {
			sizes := unevenSizes(n, ranks)
			comms := group(t, ranks)
			shards := shard(d, sizes...)
			got := make([][]MetricValue, ranks)
			wmax := []float64{3, 1}
			_, e := math.Frexp(wmax[0])
			wscale := math.Ldexp(1, 31-e)
			if err := firstErr(each(ranks, func(r int) error {
				at := 0
				for _, s := range sizes[:r] {
					at += s
				}
				var err error
				got[r], err = evalMetrics(context.Background(), comms[r], &p, "valid", shards[r], margins[at*k:(at+shards[r].Rows)*k], n, wscale)
				return err
			})); err != nil {
				t.Fatal(err)
			}
			for r := range ranks {
				for j, mv := range got[r] {
					if mv.Name != "valid_"+tc.metrics[j] {
						t.Fatalf("metric %d named %s", j, mv.Name)
					}
					if math.Abs(mv.Value-want[mv.Metric]) > 1e-9*math.Max(1, math.Abs(want[mv.Metric])) {
						t.Errorf("%s %s, %d ranks: %v, want %v", tc.obj, mv.Metric, ranks, mv.Value, want[mv.Metric])
					}
					if ref != nil && mv != ref[j] {
						t.Errorf("%s %s: %d ranks give %v, 1 rank %v", tc.obj, mv.Metric, ranks, mv.Value, ref[j].Value)
					}
				}
			}
			if ref == nil {
				ref = got[0]
			}
		}
	}
}
