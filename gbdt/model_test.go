package gbdt

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"
)

func TestXGBFloat(t *testing.T) {
	for f, want := range map[float32]string{
		0.5: "5E-1", 0: "0E0", 50: "5E1", 1.2820513: "1.2820513E0", -0.11764706: "-1.1764706E-1",
		1e-5: "1E-5", 3.4028235e38: "3.4028235E38", 1e-45: "1E-45",
	} {
		if got := xgbFloat(f); got != want {
			t.Errorf("xgbFloat(%v) = %s, want %s", f, got, want)
		}
	}
}

// TestModelJSONRoundTrip: save, load and save again give the same bytes and
// the same predictions; the file has XGBoost's layout.
func TestModelJSONRoundTrip(t *testing.T) {
	p := mustParams(t, `{"objective":"multi:softprob","num_class":3,"num_boost_round":4,"max_depth":4}`)
	d := synth(600, 6, p.Objective, p.NumClass, 17)
	m, _, err := Train(context.Background(), Local(), p, d)
	if err != nil {
		t.Fatal(err)
	}
	a := saveModel(t, m)
	m2, err := LoadJSON(bytes.NewReader(a))
	if err != nil {
		t.Fatal(err)
	}
	if b := saveModel(t, m2); !bytes.Equal(a, b) {
		t.Fatalf("save/load/save changed the file:\n%s", firstDiff(a, b))
	}
	p1, _ := m.PredictMargin(d.X, d.Rows)
	p2, _ := m2.PredictMargin(d.X, d.Rows)
	if !reflect.DeepEqual(p1, p2) {
		t.Fatal("predictions differ after loading")
	}
	var doc map[string]any
	if err := json.Unmarshal(a, &doc); err != nil {
		t.Fatal(err)
	}
	l := doc["learner"].(map[string]any)
	if got := l["learner_model_param"].(map[string]any)["num_class"]; got != "3" {
		t.Fatalf("num_class %v", got)
	}
	trees := l["gradient_booster"].(map[string]any)["model"].(map[string]any)["trees"].([]any)
	if len(trees) != 12 {
		t.Fatalf("%d trees, want 12", len(trees))
	}
	for _, k := range []string{"base_weights", "default_left", "left_children", "right_children", "loss_changes", "parents",
		"split_conditions", "split_indices", "split_type", "sum_hessian", "tree_param", "categories"} {
		if _, ok := trees[0].(map[string]any)[k]; !ok {
			t.Errorf("tree lacks %s", k)
		}
	}
}

func TestLoadJSONErrors(t *testing.T) {
	p := mustParams(t, `{"objective":"binary:logistic","num_boost_round":2}`)
	d := synth(200, 4, p.Objective, 0, 1)
	m, _, err := Train(context.Background(), Local(), p, d)
	if err != nil {
		t.Fatal(err)
	}
	good := string(saveModel(t, m))
	for _, tc := range []struct{ from, to, want string }{
		{`"name":"gbtree"`, `"name":"dart"`, `booster "dart"`},
		{`"name":"binary:logistic"`, `"name":"rank:pairwise"`, `objective "rank:pairwise"`},
		{`"categories":[]`, `"categories":[1]`, "categorical"},
		{`"left_children":[1,`, `"left_children":[5,`, "out of range"},
		{`"num_feature":"4","num_target"`, `"num_feature":"1","num_target"`, "feature"},
		{`"tree_info":[0,0]`, `"tree_info":[0]`, "tree_info"},
		{`"base_score":"5E-1"`, `"base_score":"x"`, "base_score"},
	} {
		if !strings.Contains(good, tc.from) {
			t.Fatalf("the model lacks %s", tc.from)
		}
		bad := strings.Replace(good, tc.from, tc.to, 1)
		if _, err := LoadJSON(strings.NewReader(bad)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s → %s: error %v, want it to mention %q", tc.from, tc.to, err, tc.want)
		}
	}
	if _, err := m.Predict(d.X[:7], 2); err == nil || !strings.Contains(err.Error(), "len(x) = 7") {
		t.Errorf("predict with a short x: %v", err)
	}
}

// TestPredictMissingGoesDefault: NaN follows each split's default side.
func TestPredictMissingGoesDefault(t *testing.T) {
	tr := &Tree{
		Left: []int32{1, -1, -1}, Right: []int32{2, -1, -1}, Parent: []int32{rootParent, 0, 0},
		Feature: []uint32{0, 0, 0}, Cond: []float32{0.5, -1, 1}, DefaultLeft: []bool{true, false, false},
		BaseWeight: make([]float32, 3), LossChange: make([]float32, 3), SumHess: make([]float32, 3),
	}
	m := &Model{Objective: RegSquaredError, NumFeature: 1, Trees: []*Tree{tr}, TreeInfo: []int{0}}
	nan := float32(math.NaN())
	for _, c := range []bool{true, false} {
		withC := func(f func()) {
			if c {
				f()
			} else {
				withGo(f)
			}
		}
		withC(func() {
			got, err := m.PredictMargin([]float32{0.2, 0.5, 0.7, nan}, 4)
			if err != nil {
				t.Fatal(err)
			}
			if want := []float32{-1, 1, 1, -1}; !reflect.DeepEqual(got, want) {
				t.Fatalf("C %v: %v, want %v", c, got, want)
			}
		})
	}
}
