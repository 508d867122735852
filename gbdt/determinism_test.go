package gbdt

import (
	"bytes"
	"fmt"
	"testing"
)

// TestWorldSizesGiveIdenticalModels trains the same rows on 1, 2, 3 and 4
// ranks, split unevenly, and requires byte-identical model files and
// identical metrics, for each objective and both growth policies, with
// subsample, colsample, weights and missing values.
func TestWorldSizesGiveIdenticalModels(t *testing.T) {
	cases := []struct {
		name   string
		params string
		rows   int
		weight bool
	}{
		{"binary", `{"objective":"binary:logistic","num_boost_round":4,"max_depth":4,"eval_metric":["logloss","auc","error"]}`, 600, false},
		{"softprob-lossguide", `{"objective":"multi:softprob","num_class":3,"num_boost_round":3,"grow_policy":"lossguide","max_leaves":9,"max_depth":0}`, 500, false},
		{"squarederror-sampled", `{"objective":"reg:squarederror","num_boost_round":4,"subsample":0.7,"colsample_bytree":0.6,"seed":5,"alpha":0.5,"gamma":0.1,"max_bin":16,"eval_metric":["rmse","mae"]}`, 700, true},
		{"poisson", `{"objective":"count:poisson","num_boost_round":3,"max_depth":3}`, 400, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := mustParams(t, tc.params)
			d := synth(tc.rows, 9, p.Objective, p.NumClass, 11)
			if tc.weight {
				d.Weight = make([]float32, d.Rows)
				for i := range d.Weight {
					d.Weight[i] = float32(1 + i%3)
				}
			}
			var ref []byte
			var refRounds []Round
			for n := 1; n <= 4; n++ {
				sizes := unevenSizes(d.Rows, n)
				models, rounds := trainRanks(t, p, d, sizes, func(r int) []Eval {
					return []Eval{{Name: "train", Data: shard(d, sizes...)[r]}}
				})
				for r := 1; r < n; r++ {
					if !bytes.Equal(models[r], models[0]) {
						t.Fatalf("%d ranks: rank %d's model differs from rank 0's", n, r)
					}
				}
				if ref == nil {
					ref, refRounds = models[0], rounds[0]
					continue
				}
				if !bytes.Equal(models[0], ref) {
					t.Fatalf("%d ranks (rows %v): model differs from 1 rank's:\n%s", n, sizes, firstDiff(ref, models[0]))
				}
				if fmt.Sprint(rounds[0]) != fmt.Sprint(refRounds) {
					t.Fatalf("%d ranks: metrics %v, 1 rank %v", n, rounds[0], refRounds)
				}
			}
			if len(ref) < 500 {
				t.Fatalf("model too small to be trained: %s", ref)
			}
		})
	}
}

func firstDiff(a, b []byte) string {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	lo := max(0, i-80)
	return fmt.Sprintf("at byte %d:\n  %s\n  %s", i, a[lo:min(len(a), i+80)], b[lo:min(len(b), i+80)])
}
