package gbdt

// XGBoost 1.7's JSON model format (Booster.save_model("x.json")), written
// as XGBoost writes it: compact, keys sorted, numbers as XGBoost prints
// them (float32 in shortest form with an E exponent, model parameters as
// strings).

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
)

// Bounds of the models LoadJSON reads (and Train makes): a model's
// margins take NumGroups values per row and its inputs NumFeature, so a
// file cannot declare more than these (XGBoost's own files stay far
// below).
const (
	MaxClasses  = 1 << 16
	MaxFeatures = 1 << 24
)

// xgbVersion is the version the files say they come from.
var xgbVersion = [3]int{1, 7, 4}

// SaveJSON writes m in XGBoost's JSON model format.
func (m *Model) SaveJSON(w io.Writer) error {
	b, err := m.MarshalJSON()
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

// MarshalJSON is the XGBoost JSON model.
func (m *Model) MarshalJSON() ([]byte, error) {
	if err := m.check(); err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.WriteString(`{"learner":{"attributes":{`)
	keys := make([]string, 0, len(m.Attributes))
	for k := range m.Attributes {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		writeString(&b, k)
		b.WriteByte(':')
		writeString(&b, m.Attributes[k])
	}
	b.WriteString(`},"feature_names":[`)
	for i, n := range m.FeatureNames {
		if i > 0 {
			b.WriteByte(',')
		}
		writeString(&b, n)
	}
	b.WriteString(`],"feature_types":[`)
	for i := range m.FeatureNames {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`"float"`)
	}
	fmt.Fprintf(&b, `],"gradient_booster":{"model":{"gbtree_model_param":{"num_parallel_tree":"1","num_trees":"%d","size_leaf_vector":"0"},"tree_info":[`, len(m.Trees))
	for i, g := range m.TreeInfo {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(g))
	}
	b.WriteString(`],"trees":[`)
	for i, t := range m.Trees {
		if i > 0 {
			b.WriteByte(',')
		}
		writeTree(&b, t, i, m.NumFeature)
	}
	b.WriteString(`]},"name":"gbtree"},"learner_model_param":{"base_score":`)
	writeString(&b, xgbFloat(float32(m.BaseScore)))
	fmt.Fprintf(&b, `,"boost_from_average":"1","num_class":"%d","num_feature":"%d","num_target":"1"},"objective":{"name":"%s",`,
		m.NumClass, m.NumFeature, m.Objective)
	switch m.Objective {
	case MultiSoftprob, MultiSoftmax:
		fmt.Fprintf(&b, `"softmax_multiclass_param":{"num_class":"%d"}`, m.NumClass)
	case CountPoisson:
		b.WriteString(`"poisson_regression_param":{"max_delta_step":"0.699999988"}`)
	default:
		spw := m.ScalePosWeight
		if spw == 0 {
			spw = 1
		}
		b.WriteString(`"reg_loss_param":{"scale_pos_weight":`)
		writeString(&b, strconv.FormatFloat(spw, 'g', -1, 32))
		b.WriteString(`}`)
	}
	fmt.Fprintf(&b, `}},"version":[%d,%d,%d]}`, xgbVersion[0], xgbVersion[1], xgbVersion[2])
	return b.Bytes(), nil
}

func writeString(b *bytes.Buffer, s string) {
	q, _ := json.Marshal(s)
	b.Write(q)
}

// xgbFloat prints f as XGBoost does: the shortest digits that read back as
// the same float32, exponent with E and no padding ("5E-1", "1.2820513E0").
func xgbFloat(f float32) string {
	s := strconv.FormatFloat(float64(f), 'E', -1, 32)
	i := strings.IndexByte(s, 'E')
	if i < 0 {
		return s // NaN, Inf
	}
	mant, exp := s[:i], s[i+1:]
	sign := ""
	if exp[0] == '-' {
		sign = "-"
	}
	exp = strings.TrimLeft(exp[1:], "0")
	if exp == "" {
		exp = "0"
	}
	return mant + "E" + sign + exp
}

func writeTree(b *bytes.Buffer, t *Tree, id, nf int) {
	floats := func(name string, v []float32) {
		b.WriteString(`"` + name + `":[`)
		for i, x := range v {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(xgbFloat(x))
		}
		b.WriteString(`],`)
	}
	ints := func(name string, n int, at func(i int) int64) {
		b.WriteString(`"` + name + `":[`)
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strconv.FormatInt(at(i), 10))
		}
		b.WriteString(`],`)
	}
	n := len(t.Left)
	b.WriteByte('{')
	floats("base_weights", t.BaseWeight)
	b.WriteString(`"categories":[],"categories_nodes":[],"categories_segments":[],"categories_sizes":[],`)
	ints("default_left", n, func(i int) int64 {
		if t.DefaultLeft[i] {
			return 1
		}
		return 0
	})
	fmt.Fprintf(b, `"id":%d,`, id)
	ints("left_children", n, func(i int) int64 { return int64(t.Left[i]) })
	floats("loss_changes", t.LossChange)
	ints("parents", n, func(i int) int64 { return int64(t.Parent[i]) })
	ints("right_children", n, func(i int) int64 { return int64(t.Right[i]) })
	floats("split_conditions", t.Cond)
	ints("split_indices", n, func(i int) int64 { return int64(t.Feature[i]) })
	ints("split_type", n, func(int) int64 { return 0 })
	floats("sum_hessian", t.SumHess)
	fmt.Fprintf(b, `"tree_param":{"num_deleted":"0","num_feature":"%d","num_nodes":"%d","size_leaf_vector":"0"}}`, nf, n)
}

type xgbTreeJSON struct {
	BaseWeights     []json.Number `json:"base_weights"`
	Categories      []json.Number `json:"categories"`
	DefaultLeft     []int         `json:"default_left"`
	LeftChildren    []int32       `json:"left_children"`
	LossChanges     []json.Number `json:"loss_changes"`
	Parents         []int64       `json:"parents"`
	RightChildren   []int32       `json:"right_children"`
	SplitConditions []json.Number `json:"split_conditions"`
	SplitIndices    []int64       `json:"split_indices"`
	SplitType       []int         `json:"split_type"`
	SumHessian      []json.Number `json:"sum_hessian"`
	TreeParam       struct {
		NumFeature     string `json:"num_feature"`
		NumNodes       string `json:"num_nodes"`
		SizeLeafVector string `json:"size_leaf_vector"`
	} `json:"tree_param"`
}

type xgbModelJSON struct {
	Learner struct {
		Attributes      map[string]string `json:"attributes"`
		FeatureNames    []string          `json:"feature_names"`
		GradientBooster struct {
			Name  string `json:"name"`
			Model struct {
				Param struct {
					NumTrees string `json:"num_trees"`
				} `json:"gbtree_model_param"`
				TreeInfo []int         `json:"tree_info"`
				Trees    []xgbTreeJSON `json:"trees"`
			} `json:"model"`
		} `json:"gradient_booster"`
		LearnerModelParam struct {
			BaseScore  string `json:"base_score"`
			NumClass   string `json:"num_class"`
			NumFeature string `json:"num_feature"`
			NumTarget  string `json:"num_target"`
		} `json:"learner_model_param"`
		Objective struct {
			Name         string `json:"name"`
			RegLossParam struct {
				ScalePosWeight string `json:"scale_pos_weight"`
			} `json:"reg_loss_param"`
		} `json:"objective"`
	} `json:"learner"`
	Version []int `json:"version"`
}

// LoadJSON reads a model in XGBoost's JSON model format (as written by
// SaveJSON or by XGBoost's save_model with a .json name). Only gbtree
// boosters with numerical splits and the objectives of this package are
// supported; anything else is an error that says what.
func LoadJSON(r io.Reader) (*Model, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	m := &Model{}
	if err := m.UnmarshalJSON(data); err != nil {
		return nil, err
	}
	return m, nil
}

// UnmarshalJSON reads the XGBoost JSON model.
func (m *Model) UnmarshalJSON(data []byte) error {
	var x xgbModelJSON
	if err := json.Unmarshal(data, &x); err != nil {
		return fmt.Errorf("gbdt: XGBoost JSON model: %w", err)
	}
	l := &x.Learner
	if l.GradientBooster.Name != "gbtree" {
		return fmt.Errorf("gbdt: XGBoost JSON model: booster %q is not supported (only gbtree)", l.GradientBooster.Name)
	}
	atoi := func(name, s string) (int, error) {
		if s == "" {
			return 0, nil
		}
		v, err := strconv.Atoi(s)
		if err != nil {
			return 0, fmt.Errorf("gbdt: XGBoost JSON model: %s = %q: not an integer", name, s)
		}
		return v, nil
	}
	var err error
	out := Model{Objective: l.Objective.Name, Attributes: l.Attributes, FeatureNames: l.FeatureNames, ScalePosWeight: 1}
	if out.Attributes == nil {
		out.Attributes = map[string]string{}
	}
	if out.NumClass, err = atoi("num_class", l.LearnerModelParam.NumClass); err != nil {
		return err
	}
	// Every size the file declares is checked against a bound and against
	// what the file holds before anything of that size is allocated: a
	// model's margins take NumGroups values per row, its inputs NumFeature.
	trees := l.GradientBooster.Model.Trees
	if out.NumClass < 0 || out.NumClass > MaxClasses || (len(trees) > 0 && out.NumClass > len(trees)) {
		return fmt.Errorf("gbdt: XGBoost JSON model: num_class = %d: want 0 to %d, and no more than the model's %d trees", out.NumClass, MaxClasses, len(trees))
	}
	if out.NumFeature, err = atoi("num_feature", l.LearnerModelParam.NumFeature); err != nil {
		return err
	}
	if out.NumFeature < 0 || out.NumFeature > MaxFeatures {
		return fmt.Errorf("gbdt: XGBoost JSON model: num_feature = %d: want 0 to %d", out.NumFeature, MaxFeatures)
	}
	if n := len(l.FeatureNames); n > 0 && n != out.NumFeature {
		return fmt.Errorf("gbdt: XGBoost JSON model: %d feature_names for num_feature = %d", n, out.NumFeature)
	}
	if s := l.GradientBooster.Model.Param.NumTrees; s != "" {
		if nt, err := atoi("num_trees", s); err != nil {
			return err
		} else if nt != len(trees) {
			return fmt.Errorf("gbdt: XGBoost JSON model: num_trees = %d, the model holds %d trees", nt, len(trees))
		}
	}
	if nt, err := atoi("num_target", l.LearnerModelParam.NumTarget); err != nil {
		return err
	} else if nt > 1 {
		return fmt.Errorf("gbdt: XGBoost JSON model: num_target = %d: multi-target models are not supported", nt)
	}
	bs, err := strconv.ParseFloat(l.LearnerModelParam.BaseScore, 32)
	if err != nil {
		return fmt.Errorf("gbdt: XGBoost JSON model: base_score = %q: %v", l.LearnerModelParam.BaseScore, err)
	}
	out.BaseScore = bs
	if s := l.Objective.RegLossParam.ScalePosWeight; s != "" {
		if out.ScalePosWeight, err = strconv.ParseFloat(s, 64); err != nil {
			return fmt.Errorf("gbdt: XGBoost JSON model: scale_pos_weight = %q: %v", s, err)
		}
	}
	out.TreeInfo = l.GradientBooster.Model.TreeInfo
	for i, tj := range trees {
		t, err := tj.tree()
		if err != nil {
			return fmt.Errorf("gbdt: XGBoost JSON model: tree %d: %w", i, err)
		}
		out.Trees = append(out.Trees, t)
	}
	if err := out.check(); err != nil {
		return err
	}
	*m = out
	return nil
}

func (tj *xgbTreeJSON) tree() (*Tree, error) {
	n := len(tj.LeftChildren)
	if len(tj.Categories) > 0 {
		return nil, fmt.Errorf("categorical splits are not supported")
	}
	for _, st := range tj.SplitType {
		if st != 0 {
			return nil, fmt.Errorf("split type %d (categorical) is not supported", st)
		}
	}
	if s := tj.TreeParam.SizeLeafVector; s != "" && s != "0" {
		return nil, fmt.Errorf("size_leaf_vector = %s: vector leaves are not supported", s)
	}
	if s := tj.TreeParam.NumNodes; s != "" && s != strconv.Itoa(n) {
		return nil, fmt.Errorf("num_nodes = %q, the tree holds %d nodes (left_children)", s, n)
	}
	if n == 0 {
		return nil, fmt.Errorf("no nodes")
	}
	for name, l := range map[string]int{"right_children": len(tj.RightChildren), "split_indices": len(tj.SplitIndices),
		"split_conditions": len(tj.SplitConditions), "default_left": len(tj.DefaultLeft)} {
		if l != n {
			return nil, fmt.Errorf("%s has %d entries, left_children %d", name, l, n)
		}
	}
	t := &Tree{Left: tj.LeftChildren, Right: tj.RightChildren, Parent: make([]int32, n),
		Feature: make([]uint32, n), DefaultLeft: make([]bool, n)}
	for i := range n {
		if tj.SplitIndices[i] < 0 || tj.SplitIndices[i] > MaxFeatures {
			return nil, fmt.Errorf("node %d: split index %d (want 0 to %d)", i, tj.SplitIndices[i], MaxFeatures)
		}
		t.Feature[i] = uint32(tj.SplitIndices[i])
		t.DefaultLeft[i] = tj.DefaultLeft[i] != 0
		if i < len(tj.Parents) {
			t.Parent[i] = int32(tj.Parents[i])
		}
	}
	var err error
	if t.Cond, err = floats32("split_conditions", tj.SplitConditions, n); err != nil {
		return nil, err
	}
	if t.BaseWeight, err = floats32("base_weights", tj.BaseWeights, n); err != nil {
		return nil, err
	}
	if t.LossChange, err = floats32("loss_changes", tj.LossChanges, n); err != nil {
		return nil, err
	}
	if t.SumHess, err = floats32("sum_hessian", tj.SumHessian, n); err != nil {
		return nil, err
	}
	return t, nil
}

// floats32 parses numbers as float32 (absent arrays read as zeros).
func floats32(name string, v []json.Number, n int) ([]float32, error) {
	out := make([]float32, n)
	if len(v) == 0 {
		return out, nil
	}
	if len(v) != n {
		return nil, fmt.Errorf("%s has %d entries, want %d", name, len(v), n)
	}
	for i, s := range v {
		f, err := strconv.ParseFloat(string(s), 32)
		if err != nil {
			return nil, fmt.Errorf("%s[%d] = %s: %v", name, i, s, err)
		}
		out[i] = float32(f)
	}
	return out, nil
}
