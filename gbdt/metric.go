package gbdt

// Evaluation metrics over all ranks' rows, with XGBoost's definitions.
// Every metric but AUC is a ratio of two sums over rows (a weighted mean);
// each row's terms are put in a fixed point chosen from the global maximum
// (exactSums) and summed as integers, so the value has the same bits for
// every world size and split of the rows, and early stopping decides alike.
// AUC is exact too: every rank sends its distinct prediction values with
// the positive and negative weights (in a fixed point) at each, the lists
// are merged, and every rank computes the AUC of the merged list (ties
// count one half), as XGBoost's exact binary AUC. Multi-class AUC is the
// mean of the one-vs-rest AUCs weighted by each class's weight (XGBoost's
// MultiClassOVR).

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
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
// wscale is the fixed point of AUC's weights (0: unweighted, 1 per row).
func evalMetrics(ctx context.Context, c Collective, p *Params, name string, d *Dataset, margins []float32, nTotal int, wscale float64) ([]MetricValue, error) {
	k := p.groups()
	n := d.Rows
	pred := transform(probObjective(p.Objective), k, margins)
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
			if v, err = exactAUC(ctx, c, p, d, pred, wscale); err != nil {
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

// probObjective maps multi:softmax to multi:softprob: metrics need the
// probabilities.
func probObjective(obj string) string {
	if obj == MultiSoftmax {
		return MultiSoftprob
	}
	return obj
}

// aucEntry is one distinct prediction with its positive and negative
// weights in fixed point.
type aucEntry struct {
	k        uint32
	pos, neg uint64
}

// exactAUC computes the AUC of pred (rows × k probabilities) over all ranks.
func exactAUC(ctx context.Context, c Collective, p *Params, d *Dataset, pred []float32, wscale float64) (float64, error) {
	k := p.groups()
	var enc []byte
	lists := make([][]aucEntry, k)
	for cl := range k {
		var l []aucEntry
		for i, y := range d.Label {
			w := uint64(1)
			if wscale > 0 {
				w = uint64(math.RoundToEven(d.weight(i) * wscale))
			}
			e := aucEntry{k: key(pred[i*k+cl])}
			positive := y >= 0.5
			if k > 1 {
				positive = int(y) == cl
			}
			if positive {
				e.pos = w
			} else {
				e.neg = w
			}
			l = append(l, e)
		}
		lists[cl] = mergeAUC(l)
		enc = binary.LittleEndian.AppendUint32(enc, uint32(len(lists[cl])))
		for _, e := range lists[cl] {
			enc = binary.LittleEndian.AppendUint32(enc, e.k)
			enc = binary.LittleEndian.AppendUint64(enc, e.pos)
			enc = binary.LittleEndian.AppendUint64(enc, e.neg)
		}
	}
	parts := [][]byte{enc}
	if c.Size() > 1 {
		var err error
		if parts, err = c.AllGather(ctx, enc); err != nil {
			return 0, fmt.Errorf("gbdt: AUC: all-gather: %w", err)
		}
	}
	offs := make([]int, len(parts))
	var num, den float64
	for range k {
		var all []aucEntry
		for r, part := range parts {
			o := offs[r]
			if o+4 > len(part) {
				return 0, fmt.Errorf("gbdt: AUC: rank %d's lists are cut short", r)
			}
			cnt := int(binary.LittleEndian.Uint32(part[o:]))
			o += 4
			if o+20*cnt > len(part) {
				return 0, fmt.Errorf("gbdt: AUC: rank %d's lists are cut short", r)
			}
			for range cnt {
				all = append(all, aucEntry{binary.LittleEndian.Uint32(part[o:]), binary.LittleEndian.Uint64(part[o+4:]), binary.LittleEndian.Uint64(part[o+12:])})
				o += 20
			}
			offs[r] = o
		}
		all = mergeAUC(all)
		auc, pos, ok := aucOf(all)
		if k == 1 {
			if !ok {
				return math.NaN(), nil
			}
			return auc, nil
		}
		if ok {
			num += auc * pos
			den += pos
		}
	}
	if den == 0 {
		return math.NaN(), nil
	}
	return num / den, nil
}

// mergeAUC sorts entries by prediction and sums those with equal ones.
func mergeAUC(l []aucEntry) []aucEntry {
	slices.SortFunc(l, func(a, b aucEntry) int {
		switch {
		case a.k < b.k:
			return -1
		case a.k > b.k:
			return 1
		}
		return 0
	})
	m := l[:0]
	for _, e := range l {
		if n := len(m); n > 0 && m[n-1].k == e.k {
			m[n-1].pos += e.pos
			m[n-1].neg += e.neg
		} else {
			m = append(m, e)
		}
	}
	return m
}

// aucOf is the area under the ROC curve of entries sorted by ascending
// prediction: the probability that a positive ranks above a negative, ties
// one half. ok is false without positives or negatives.
func aucOf(l []aucEntry) (auc, pos float64, ok bool) {
	var P, N float64
	for _, e := range l {
		P += float64(e.pos)
		N += float64(e.neg)
	}
	if P == 0 || N == 0 {
		return 0, P, false
	}
	var area, negBelow float64
	for _, e := range l {
		area += float64(e.pos) * (negBelow + float64(e.neg)/2)
		negBelow += float64(e.neg)
	}
	return area / (P * N), P, true
}
