package gbdt

import (
	"bytes"
	"context"
	"math"
	"strings"
	"testing"
)

// hugeClassModel is issue 30's row 2: a valid-looking XGBoost JSON model
// of one tree whose num_class says 10,000,000,000. Before num_class was
// bounded, loading it passed every check and its first prediction (or a
// predictor's setup) allocated 40 GB of margins.
const hugeClassModel = `{"learner":{"attributes":{},"feature_names":[],"feature_types":[],"gradient_booster":{"model":{` +
	`"gbtree_model_param":{"num_parallel_tree":"1","num_trees":"1","size_leaf_vector":"0"},"tree_info":[0],"trees":[{` +
	`"base_weights":[0E0,0E0,0E0],"default_left":[1,0,0],"id":0,"left_children":[1,-1,-1],"loss_changes":[0E0,0E0,0E0],` +
	`"parents":[2147483647,0,0],"right_children":[2,-1,-1],"split_conditions":[5E-1,-2.5E-1,2.5E-1],"split_indices":[0,0,0],` +
	`"split_type":[0,0,0],"sum_hessian":[0E0,0E0,0E0],"tree_param":{"num_deleted":"0","num_feature":"1","num_nodes":"3",` +
	`"size_leaf_vector":"0"}}]},"name":"gbtree"},"learner_model_param":{"base_score":"5E-1","boost_from_average":"1",` +
	`"num_class":"10000000000","num_feature":"1","num_target":"1"},"objective":{"name":"multi:softprob",` +
	`"softmax_multiclass_param":{"num_class":"10000000000"}}},"version":[1,7,4]}`

// Every size an XGBoost JSON model declares is bounded and checked against
// what the file holds before anything of that size is allocated, with an
// error that names the field and its value.
func TestLoadJSONBoundsSizes(t *testing.T) {
	ok := strings.Replace(hugeClassModel, `"num_class":"10000000000","num_feature"`, `"num_class":"0","num_feature"`, 1)
	ok = strings.Replace(ok, "multi:softprob", "reg:squarederror", 1)
	if _, err := LoadJSON(strings.NewReader(ok)); err != nil {
		t.Fatalf("the model with num_class 0: %v", err)
	}
	for _, tc := range []struct{ from, to, want string }{
		{`"num_class":"0"`, `"num_class":"10000000000"`, "num_class = 10000000000"},
		{`"num_class":"0"`, `"num_class":"65537"`, "num_class = 65537"},
		{`"num_class":"0"`, `"num_class":"2"`, "num_class = 2: want 0 to 65536, and no more than the model's 1 trees"},
		{`"num_class":"0"`, `"num_class":"-3"`, "num_class = -3"},
		{`"num_feature":"1","num_target"`, `"num_feature":"10000000000","num_target"`, "num_feature = 10000000000"},
		{`"num_feature":"1","num_target"`, `"num_feature":"-1","num_target"`, "num_feature = -1"},
		{`"feature_names":[]`, `"feature_names":["a","b"]`, "2 feature_names for num_feature = 1"},
		{`"num_trees":"1"`, `"num_trees":"1000000"`, "num_trees = 1000000, the model holds 1 trees"},
		{`"num_nodes":"3"`, `"num_nodes":"2147483647"`, `num_nodes = "2147483647", the tree holds 3 nodes`},
		{`"split_indices":[0,0,0]`, `"split_indices":[4294967296,0,0]`, "split index 4294967296"},
		{`"left_children":[1,-1,-1]`, `"left_children":[0,-1,-1]`, "out of range or reached twice"},
		{`"left_children":[1,-1,-1]`, `"left_children":[2147483648,-1,-1]`, "left_children"},
		{`"left_children":[1,-1,-1],`, `"left_children":[],"right_children":[],"split_conditions":[],"split_indices":[],"default_left":[],`, "the tree holds 0 nodes"},
	} {
		if !strings.Contains(ok, tc.from) {
			t.Fatalf("the model lacks %s", tc.from)
		}
		bad := strings.Replace(ok, tc.from, tc.to, 1)
		if _, err := LoadJSON(strings.NewReader(bad)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s → %s: error %v, want it to mention %q", tc.from, tc.to, err, tc.want)
		}
	}
	if _, err := LoadJSON(strings.NewReader(hugeClassModel)); err == nil || !strings.Contains(err.Error(), "num_class = 10000000000") {
		t.Errorf("issue 30's model: %v", err)
	}
}

// FuzzXGBoostJSON: any bytes either fail LoadJSON or are a model within
// the bounds that lays out into a Forest, predicts the Go reference's
// margins, and saves and loads back to the same margins. Nothing panics,
// nothing allocates more than the bounds allow.
func FuzzXGBoostJSON(f *testing.F) {
	f.Add([]byte(hugeClassModel))
	f.Add([]byte(strings.ReplaceAll(hugeClassModel, "10000000000", "1")))
	for _, js := range []string{
		`{"objective":"binary:logistic","num_boost_round":2,"max_depth":3}`,
		`{"objective":"multi:softprob","num_class":3,"num_boost_round":2,"max_depth":2}`,
		`{"objective":"count:poisson","num_boost_round":1,"max_depth":2}`,
	} {
		p := mustParams(f, js)
		d := synth(60, 3, p.Objective, p.NumClass, 1)
		m, _, err := Train(context.Background(), Local(), p, d)
		if err != nil {
			f.Fatal(err)
		}
		b, err := m.MarshalJSON()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := LoadJSON(bytes.NewReader(b))
		if err != nil {
			return
		}
		if m.NumGroups() > MaxClasses || m.NumFeature > MaxFeatures {
			t.Fatalf("loaded a model of %d groups and %d features", m.NumGroups(), m.NumFeature)
		}
		fo, err := NewForest(m)
		if err != nil {
			t.Fatalf("a loaded model does not lay out: %v", err)
		}
		if m.NumFeature > 1<<12 {
			return // valid, but its rows are too wide to predict here quickly
		}
		const rows = 3
		x := make([]float32, rows*m.NumFeature)
		for i := range x {
			x[i] = []float32{float32(math.NaN()), 0, 0.5, -1e30}[i%4]
		}
		got := make([]float32, rows*m.NumGroups())
		fo.Margins(x, rows, got)
		want := referenceMargins(m, x, rows)
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("margin %d: forest %v, Go reference %v", i, got[i], want[i])
			}
		}
		out, err := m.MarshalJSON()
		if err != nil {
			t.Fatalf("a loaded model does not save: %v", err)
		}
		back, err := LoadJSON(bytes.NewReader(out))
		if err != nil {
			t.Fatalf("a saved model does not load: %v\n%s", err, out)
		}
		again, err := back.PredictMargin(x, rows)
		if err != nil {
			t.Fatal(err)
		}
		for i := range want {
			if math.Float32bits(again[i]) != math.Float32bits(want[i]) {
				t.Fatalf("margin %d after a save and load: %v, before %v", i, again[i], want[i])
			}
		}
	})
}
