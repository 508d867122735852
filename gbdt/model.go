package gbdt

import (
	"fmt"
	"math"
	"sort"
	"strings"
)

// Model is a trained gradient-boosted tree ensemble: the parts of an
// XGBoost gbtree model that prediction needs, saved and loaded in XGBoost
// 1.7's JSON model format (SaveJSON, LoadJSON).
type Model struct {
	Objective  string
	NumClass   int // 0 for single-output objectives
	NumFeature int
	// BaseScore is base_score as XGBoost stores it (a probability for
	// logistic objectives, a mean count for count:poisson); margins start
	// at its margin-space value.
	BaseScore float64
	// Trees in training order; TreeInfo[i] is tree i's output group (its
	// class for multi-class objectives, else 0).
	Trees    []*Tree
	TreeInfo []int
	// Attributes are XGBoost's learner attributes (best_iteration,
	// best_score when early stopping was on).
	Attributes   map[string]string
	FeatureNames []string
	// ScalePosWeight is written with logistic objectives' parameters.
	ScalePosWeight float64
}

// NumGroups is the number of outputs per row: NumClass for multi-class
// objectives, else 1.
func (m *Model) NumGroups() int {
	if m.NumClass > 1 {
		return m.NumClass
	}
	return 1
}

// NumRounds is the number of boosting rounds (trees per group).
func (m *Model) NumRounds() int { return len(m.Trees) / m.NumGroups() }

func (m *Model) clone() *Model {
	c := *m
	c.Trees = append([]*Tree(nil), m.Trees...)
	c.TreeInfo = append([]int(nil), m.TreeInfo...)
	c.Attributes = make(map[string]string, len(m.Attributes))
	for k, v := range m.Attributes {
		c.Attributes[k] = v
	}
	c.FeatureNames = append([]string(nil), m.FeatureNames...)
	return &c
}

// check validates the model before prediction or after loading.
func (m *Model) check() error {
	if !contains(objectives, m.Objective) {
		return fmt.Errorf("gbdt: model objective %q is not supported; supported: %s", m.Objective, strings.Join(objectives, ", "))
	}
	if len(m.TreeInfo) != len(m.Trees) {
		return fmt.Errorf("gbdt: model has %d trees and %d tree_info entries", len(m.Trees), len(m.TreeInfo))
	}
	k := m.NumGroups()
	for i, t := range m.Trees {
		if m.TreeInfo[i] < 0 || m.TreeInfo[i] >= k {
			return fmt.Errorf("gbdt: tree %d is for group %d, the model has %d", i, m.TreeInfo[i], k)
		}
		if err := t.check(m.NumFeature); err != nil {
			return fmt.Errorf("gbdt: tree %d: %w", i, err)
		}
	}
	return nil
}

// PredictMargin returns the raw scores of rows rows of x (row-major, each
// row NumFeature values, NaN missing): rows × NumGroups() values, row-major,
// each the base margin plus the leaves of the row's group's trees, summed
// in float32 in tree order as XGBoost's CPU predictor does. It lays the
// trees out anew (NewForest); a caller that predicts many times keeps a
// Forest.
func (m *Model) PredictMargin(x []float32, rows int) ([]float32, error) {
	if rows < 0 || len(x) != rows*m.NumFeature {
		return nil, fmt.Errorf("gbdt: predict: len(x) = %d, want rows×features = %d×%d", len(x), rows, m.NumFeature)
	}
	if len(m.TreeInfo) != len(m.Trees) {
		return nil, fmt.Errorf("gbdt: model has %d trees and %d tree_info entries", len(m.Trees), len(m.TreeInfo))
	}
	out := make([]float32, rows*m.NumGroups())
	b := baseMargin(m.Objective, m.BaseScore)
	for i := range out {
		out[i] = b
	}
	if err := m.addTrees(0, len(m.Trees), x, rows, out); err != nil {
		return nil, err
	}
	return out, nil
}

// addTrees adds trees [t0, t1) to margins out.
func (m *Model) addTrees(t0, t1 int, x []float32, rows int, out []float32) error {
	if t0 >= t1 {
		return nil
	}
	if !useC {
		predictGo(m.Trees[t0:t1], m.TreeInfo[t0:t1], x, rows, m.NumFeature, m.NumGroups(), out)
		return nil
	}
	f, err := layout(m.Trees[t0:t1], m.TreeInfo[t0:t1], m.NumFeature, m.NumGroups())
	if err != nil {
		return err
	}
	f.addTo(x, rows, out)
	return nil
}

// Predict returns transformed predictions: probabilities for
// binary:logistic and reg:logistic (rows values) and multi:softprob (rows ×
// num_class), class indices for multi:softmax (rows), expected counts for
// count:poisson, the margin for reg:squarederror.
func (m *Model) Predict(x []float32, rows int) ([]float32, error) {
	mg, err := m.PredictMargin(x, rows)
	if err != nil {
		return nil, err
	}
	return transform(m.Objective, m.NumGroups(), mg), nil
}

// Importance returns one score per feature, as XGBoost's get_score:
// "weight" (number of splits on the feature), "gain" (mean loss change of
// those splits), "total_gain", "cover" (mean sum of hessians of the split
// nodes), "total_cover". Features never split on score 0.
func (m *Model) Importance(kind string) ([]float64, error) {
	kinds := []string{"cover", "gain", "total_cover", "total_gain", "weight"}
	if !contains(kinds, kind) {
		return nil, fmt.Errorf("gbdt: importance type %q; valid types: %s", kind, strings.Join(kinds, ", "))
	}
	count := make([]float64, m.NumFeature)
	sum := make([]float64, m.NumFeature)
	for _, t := range m.Trees {
		for i := range t.Left {
			if t.Left[i] < 0 {
				continue
			}
			f := t.Feature[i]
			count[f]++
			switch kind {
			case "gain", "total_gain":
				sum[f] += float64(t.LossChange[i])
			case "cover", "total_cover":
				sum[f] += float64(t.SumHess[i])
			}
		}
	}
	switch kind {
	case "weight":
		return count, nil
	case "gain", "cover":
		for f := range sum {
			if count[f] > 0 {
				sum[f] /= count[f]
			}
		}
	}
	return sum, nil
}

// TopFeatures returns the features with non-zero importance, best first
// (ties by index).
func TopFeatures(imp []float64) []int {
	var fs []int
	for f, v := range imp {
		if v != 0 && !math.IsNaN(v) {
			fs = append(fs, f)
		}
	}
	sort.SliceStable(fs, func(i, j int) bool { return imp[fs[i]] > imp[fs[j]] })
	return fs
}
