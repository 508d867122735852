package gbdt

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

func TestParseParams(t *testing.T) {
	cases := []struct {
		name, js string
		check    func(p Params) bool
		err      []string // substrings of the error, nil for success
	}{
		{"defaults", `{}`, func(p Params) bool { return reflect.DeepEqual(p, DefaultParams()) }, nil},
		{"xgboost names and aliases", `{"objective":"binary:logistic","learning_rate":0.1,"reg_lambda":2,"reg_alpha":0.5,"min_split_loss":0.2,"max_depth":"4","subsample":"0.8","seed":-1,"eval_metric":"auc","tree_method":"hist","nthread":2}`,
			func(p Params) bool {
				return p.Eta == 0.1 && p.Lambda == 2 && p.Alpha == 0.5 && p.Gamma == 0.2 && p.MaxDepth == 4 && p.Subsample == 0.8 &&
					p.Seed == ^uint64(0) && reflect.DeepEqual(p.EvalMetric, []string{"auc"})
			}, nil},
		{"metric list", `{"objective":"multi:softprob","num_class":3,"eval_metric":["mlogloss","merror","auc"]}`,
			func(p Params) bool { return len(p.EvalMetric) == 3 }, nil},
		{"integer as float", `{"max_depth":6.0}`, func(p Params) bool { return p.MaxDepth == 6 }, nil},
		{"unknown parameter", `{"max_deph":3}`, nil, []string{`unknown parameter "max_deph"`, "max_depth", "colsample_bytree"}},
		{"unknown objective", `{"objective":"reg:pseudohuber"}`, nil, []string{`objective = "reg:pseudohuber"`, "binary:logistic", "count:poisson"}},
		{"unknown metric", `{"eval_metric":"ndcg"}`, nil, []string{`eval_metric = "ndcg"`, "valid metrics", "rmse"}},
		{"metric for another objective", `{"objective":"reg:squarederror","eval_metric":"mlogloss"}`, nil, []string{"eval_metric", "multi-class"}},
		{"softprob without classes", `{"objective":"multi:softprob"}`, nil, []string{"num_class = 0", "at least 2"}},
		{"classes without multi", `{"num_class":3}`, nil, []string{"num_class = 3"}},
		{"eta", `{"eta":-0.1}`, nil, []string{"eta = -0.1"}},
		{"subsample", `{"subsample":0}`, nil, []string{"subsample = 0", "(0, 1]"}},
		{"colsample", `{"colsample_bytree":1.5}`, nil, []string{"colsample_bytree = 1.5"}},
		{"max_bin", `{"max_bin":1}`, nil, []string{"max_bin = 1"}},
		{"grow policy", `{"grow_policy":"leafwise"}`, nil, []string{`grow_policy = "leafwise"`, "lossguide"}},
		{"unbounded", `{"max_depth":0}`, nil, []string{"max_depth"}},
		{"lossguide unbounded depth", `{"grow_policy":"lossguide","max_depth":0,"max_leaves":8}`, func(p Params) bool { return p.MaxLeaves == 8 }, nil},
		{"logistic base score", `{"objective":"binary:logistic","base_score":1}`, nil, []string{"base_score = 1", "(0, 1)"}},
		{"string for number", `{"lambda":"x"}`, nil, []string{"lambda", "want a number"}},
		{"tree method", `{"tree_method":"exact"}`, nil, []string{"tree_method", "only hist"}},
		{"not an object", `[1]`, nil, []string{"params"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := ParseParams([]byte(tc.js))
			if tc.err == nil {
				if err != nil {
					t.Fatal(err)
				}
				if !tc.check(p) {
					t.Fatalf("parsed %+v", p)
				}
				return
			}
			if err == nil {
				t.Fatalf("no error; parsed %+v", p)
			}
			for _, s := range tc.err {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q lacks %q", err, s)
				}
			}
		})
	}
}

func TestParamsJSONRoundTrip(t *testing.T) {
	p := mustParams(t, `{"objective":"multi:softmax","num_class":4,"eta":0.05,"max_leaves":31,"grow_policy":"lossguide","seed":18446744073709551615,"eval_metric":["merror"],"early_stopping_rounds":5,"colsample_bytree":0.5}`)
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	var q Params
	if err := json.Unmarshal(b, &q); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(p, q) {
		t.Fatalf("round trip:\n%+v\n%+v", p, q)
	}
}
