package gbdt

// Evaluation metrics over all ranks' rows, with XGBoost's definitions.
// Every metric but AUC is a ratio of two sums over rows (a weighted mean);
// each row's terms are put in a fixed point chosen from the global maximum
// (exactSums) and summed as integers, so the value has the same bits for
// every world size and split of the rows, and early stopping decides alike.
// AUC is exact too (auc.go).

import (
	"context"
	"fmt"
	"math"
)

// metricFits says why metric m does not apply to objective obj, or nil.
func metricFits(m, obj string) error {
	multi := obj == MultiSoftprob || obj == MultiSoftmax
	switch m {
	case "mlogloss", "merror":
		if !multi {
			return fmt.Errorf("needs a multi-class objective, not %s", obj)
		}
	case "logloss", "error":
		if obj != BinaryLogistic && obj != RegLogistic {
			return fmt.Errorf("needs binary:logistic or reg:logistic, not %s", obj)
		}
	case "auc":
		if obj != BinaryLogistic && obj != RegLogistic && !multi {
			return fmt.Errorf("needs a binary or multi-class objective, not %s", obj)
		}
	default: // rmse, mae, poisson-nloglik
		if multi {
			return fmt.Errorf("is not defined for %s", obj)
		}
	}
	return nil
}

// higherIsBetter reports the direction of a metric, for early stopping.
func higherIsBetter(m string) bool { return m == "auc" }

const metricEps = 1e-16

// evalMetrics computes the metrics of p on one dataset (all ranks) from its
// margins; names are "{name}_{metric}".
// wscale is the fixed point of AUC's weights (0: unweighted, 1 per row);
// sc (nil: none) keeps the predictions (sc.pred) and AUC's buffers from
// round to round.
func evalMetrics(ctx context.Context, c Collective, p *Params, name string, d *Dataset, margins []float32, nTotal int, wscale float64, sc *evalScratch) ([]MetricValue, error) {
	k := p.groups()
	n := d.Rows
	if sc == nil {
		sc = &evalScratch{}
	}
	pred := sc.given
	if pred == nil {
		pred = transformInto(probObjective(p.Objective), k, margins, sc.pred)
		sc.pred = pred
	}
	var terms [][]float64
	var idx []int // metric → index of its first term, or -1 for AUC
	for _, m := range p.metrics() {
		if m == "auc" {
			idx = append(idx, -1)
			continue
		}
		num, den := make([]float64, n), make([]float64, n)
		for i := range n {
			w := d.weight(i)
			y := float64(d.Label[i])
			var t float64
			switch m {
			case "rmse":
				e := float64(pred[i]) - y
				t = e * e
			case "mae":
				t = math.Abs(float64(pred[i]) - y)
			case "logloss":
				pr := min(max(float64(pred[i]), metricEps), 1-metricEps)
				t = -y*math.Log(pr) - (1-y)*math.Log(1-pr)
			case "error":
				if pred[i] > 0.5 {
					t = 1 - y
				} else {
					t = y
				}
			case "poisson-nloglik":
				py := max(float64(pred[i]), metricEps)
				lg, _ := math.Lgamma(y + 1)
				t = lg + py - math.Log(py)*y
			case "mlogloss":
				pr := float64(pred[i*k+int(y)])
				t = -math.Log(max(pr, metricEps))
			case "merror":
				if argmax(pred[i*k:(i+1)*k]) != int(y) {
					t = 1
				}
			}
			num[i], den[i] = w*t, w
		}
		idx = append(idx, len(terms))
		terms = append(terms, num, den)
	}
	var sums []float64
	if len(terms) > 0 {
		var err error
		if sums, err = exactSums(ctx, c, terms, nTotal); err != nil {
			return nil, err
		}
	}
	var out []MetricValue
	for j, m := range p.metrics() {
		var v float64
		if idx[j] < 0 {
			var err error
			if v, err = exactAUC(ctx, c, p, d, pred, wscale, &sc.auc); err != nil {
				return nil, err
			}
		} else {
			num, den := sums[idx[j]], sums[idx[j]+1]
			v = num / den
			if den == 0 {
				v = math.NaN()
			}
			if m == "rmse" {
				v = math.Sqrt(v)
			}
		}
		out = append(out, MetricValue{Name: name + "_" + m, Metric: m, Value: v})
	}
	return out, nil
}

// evalScratch is an evaluation set's buffers from round to round.
type evalScratch struct {
	pred  []float32 // the last evaluation's predictions
	given []float32 // when not nil: the predictions of margins, computed already
	auc   aucScratch
}

// probObjective maps multi:softmax to multi:softprob: metrics need the
// probabilities.
func probObjective(obj string) string {
	if obj == MultiSoftmax {
		return MultiSoftprob
	}
	return obj
}
