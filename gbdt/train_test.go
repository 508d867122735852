package gbdt

import (
	"bytes"
	"context"
	"math"
	"strconv"
	"strings"
	"testing"
)

// TestStepFunctionSingleSplit: squared error with eta 1 and lambda 0 on a
// step learns the step exactly with one split at a cut between the steps.
func TestStepFunctionSingleSplit(t *testing.T) {
	const n = 200
	d := &Dataset{X: make([]float32, n*2), Rows: n, Cols: 2, Label: make([]float32, n)}
	for i := range n {
		x := float32(i) / n
		d.X[2*i] = float32(i % 7) // a distraction
		d.X[2*i+1] = x
		if x >= 0.6 {
			d.Label[i] = 3
		} else {
			d.Label[i] = -1
		}
	}
	p := mustParams(t, `{"objective":"reg:squarederror","eta":1,"lambda":0,"max_depth":1,"num_boost_round":1,"base_score":0}`)
	m, _, err := Train(context.Background(), Local(), p, d)
	if err != nil {
		t.Fatal(err)
	}
	tr := m.Trees[0]
	if tr.NumNodes() != 3 || tr.Feature[0] != 1 {
		t.Fatalf("tree: %d nodes, split on feature %d; want 3 nodes, feature 1", tr.NumNodes(), tr.Feature[0])
	}
	if c := tr.Cond[0]; !(c > 0.595 && c <= 0.6) {
		t.Fatalf("split condition %v, want in (0.595, 0.6]", c)
	}
	pred, _ := m.Predict(d.X, n)
	for i, y := range d.Label {
		if pred[i] != y {
			t.Fatalf("row %d: predicted %v, want %v", i, pred[i], y)
		}
	}
}

// TestConstantTargetGivesBaseScore: when the labels equal base_score every
// gradient is zero: every tree is one leaf of value 0 and predictions are
// base_score.
func TestConstantTargetGivesBaseScore(t *testing.T) {
	for _, obj := range []string{RegSquaredError, BinaryLogistic} {
		d := synth(300, 5, RegSquaredError, 0, 2)
		for i := range d.Label {
			d.Label[i] = 0.5
		}
		p := mustParams(t, `{"num_boost_round":3}`)
		p.Objective = obj
		m, _, err := Train(context.Background(), Local(), p, d)
		if err != nil {
			t.Fatal(err)
		}
		for i, tr := range m.Trees {
			if tr.NumNodes() != 1 || tr.Cond[0] != 0 {
				t.Fatalf("%s: tree %d has %d nodes, leaf %v", obj, i, tr.NumNodes(), tr.Cond[0])
			}
		}
		pred, _ := m.Predict(d.X, d.Rows)
		for i, v := range pred {
			if v != 0.5 {
				t.Fatalf("%s: row %d predicted %v, want 0.5", obj, i, v)
			}
		}
	}
}

// TestPoissonConstantCounts: constant counts give root-only trees whose
// leaves follow the closed-form Newton steps w = -n(e^m - y)/(n·e^(m+0.7) + λ),
// clipped to ±0.7 (max_delta_step's default for count:poisson), times eta.
func TestPoissonConstantCounts(t *testing.T) {
	const n, y = 400, 3.0
	d := synth(n, 4, RegSquaredError, 0, 3)
	for i := range d.Label {
		d.Label[i] = y
	}
	p := mustParams(t, `{"objective":"count:poisson","num_boost_round":30,"eta":0.5}`)
	m, _, err := Train(context.Background(), Local(), p, d)
	if err != nil {
		t.Fatal(err)
	}
	margin := float32(math.Log(0.5))
	for r, tr := range m.Trees {
		if tr.NumNodes() != 1 {
			t.Fatalf("round %d: %d nodes, want a single leaf", r, tr.NumNodes())
		}
		mg := float64(margin)
		w := -n * (math.Exp(mg) - y) / (n*math.Exp(mg+0.7) + 1)
		w = 0.5 * math.Copysign(math.Min(math.Abs(w), float64(float32(0.7))), w)
		if math.Abs(float64(tr.Cond[0])-w) > 1e-5*math.Max(1, math.Abs(w)) {
			t.Fatalf("round %d: leaf %v, closed form %v", r, tr.Cond[0], w)
		}
		margin += tr.Cond[0]
	}
	pred, _ := m.Predict(d.X, d.Rows)
	if math.Abs(float64(pred[0])-y) > 1e-3 {
		t.Fatalf("prediction %v, want %v", pred[0], y)
	}
}

// TestEmptyShard: a rank with no rows takes part in every collective and
// gets the same model as the others, equal to one rank's on all rows.
func TestEmptyShard(t *testing.T) {
	p := mustParams(t, `{"objective":"binary:logistic","num_boost_round":3,"subsample":0.9,"eval_metric":["auc","logloss"]}`)
	d := synth(500, 6, p.Objective, 0, 4)
	one, r1 := trainRanks(t, p, d, []int{d.Rows}, func(int) []Eval { return []Eval{{Name: "train", Data: d}} })
	sizes := []int{200, 0, 300}
	shards := shard(d, sizes...)
	three, r3 := trainRanks(t, p, d, sizes, func(r int) []Eval { return []Eval{{Name: "train", Data: shards[r]}} })
	for r := range three {
		if !bytes.Equal(three[r], one[0]) {
			t.Fatalf("rank %d (rows %d): model differs from one rank's", r, sizes[r])
		}
		if r3[r][2].Metrics[0] != r1[0][2].Metrics[0] {
			t.Fatalf("rank %d: metrics %v, want %v", r, r3[r][2].Metrics, r1[0][2].Metrics)
		}
	}
	// Every rank empty but one, and the training set empty everywhere.
	empty := &Dataset{Cols: 6}
	if _, rs := trainRanks(t, p, empty, []int{0, 0}, nil); len(rs[0]) != 3 {
		t.Fatalf("empty table: %d rounds", len(rs[0]))
	}
}

// TestConstantFeatureNeverSplit: synth's feature 1 is constant.
func TestConstantFeatureNeverSplit(t *testing.T) {
	p := mustParams(t, `{"objective":"reg:squarederror","num_boost_round":10,"max_depth":8,"min_child_weight":0,"lambda":0}`)
	d := synth(800, 6, p.Objective, 0, 5)
	m, _, err := Train(context.Background(), Local(), p, d)
	if err != nil {
		t.Fatal(err)
	}
	w, _ := m.Importance("weight")
	if w[1] != 0 {
		t.Fatalf("the constant feature was split on %v times", w[1])
	}
	if w[0] == 0 || w[2] == 0 {
		t.Fatalf("informative features unused: %v", w)
	}
}

func TestLabelsMustFitObjective(t *testing.T) {
	cases := []struct {
		params string
		label  float32
		want   string
	}{
		{`{"objective":"count:poisson"}`, -1, "Label[7] = -1: count:poisson needs non-negative labels"},
		{`{"objective":"multi:softprob","num_class":3}`, 3, "Label[7] = 3: multi:softprob with num_class = 3 needs integer labels in [0, 2]"},
		{`{"objective":"multi:softmax","num_class":3}`, 1.5, "Label[7] = 1.5"},
		{`{"objective":"binary:logistic"}`, 2, "Label[7] = 2: binary:logistic needs labels in [0, 1]"},
		{`{"objective":"reg:logistic"}`, -0.5, "Label[7] = -0.5"},
		{`{}`, float32(math.NaN()), "Label[7] = NaN: labels must be finite"},
	}
	for _, tc := range cases {
		p := mustParams(t, tc.params)
		d := synth(20, 3, p.Objective, p.NumClass, 1)
		d.Label[7] = tc.label
		_, _, err := Train(context.Background(), Local(), p, d)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.params, err, tc.want)
		}
	}
	d := synth(20, 3, RegSquaredError, 0, 1)
	d.X[5] = float32(math.Inf(1))
	if _, _, err := Train(context.Background(), Local(), DefaultParams(), d); err == nil || !strings.Contains(err.Error(), "X[row 1, feature 2] = +Inf") {
		t.Errorf("infinite feature: %v", err)
	}
	d = synth(20, 3, RegSquaredError, 0, 1)
	d.X = d.X[:10]
	if _, _, err := Train(context.Background(), Local(), DefaultParams(), d); err == nil || !strings.Contains(err.Error(), "len(X) = 10") {
		t.Errorf("short X: %v", err)
	}
}

// TestLearns checks that training does learn (test accuracy of a held-out
// part well above chance) for each objective family, depthwise and
// lossguide, so that a silently broken sketch or split search fails here.
func TestLearns(t *testing.T) {
	for _, js := range []string{
		`{"objective":"binary:logistic","num_boost_round":20,"eval_metric":["error","auc"]}`,
		`{"objective":"binary:logistic","num_boost_round":20,"grow_policy":"lossguide","max_leaves":16,"eval_metric":["error","auc"]}`,
		`{"objective":"multi:softprob","num_class":3,"num_boost_round":20,"eval_metric":["merror"]}`,
		`{"objective":"reg:squarederror","num_boost_round":20,"eval_metric":["rmse"]}`,
	} {
		p := mustParams(t, js)
		all := synth(3000, 8, p.Objective, p.NumClass, 12)
		parts := shard(all, 2000, 1000)
		_, rounds, err := Train(context.Background(), Local(), p, parts[0], Eval{Name: "valid", Data: parts[1]})
		if err != nil {
			t.Fatal(err)
		}
		first, last := rounds[0].Map(), rounds[len(rounds)-1].Map()
		t.Logf("%s: %v -> %v", js, first, last)
		switch p.Objective {
		case BinaryLogistic:
			if last["valid_error"] > 0.12 || last["valid_auc"] < 0.95 {
				t.Errorf("%s: valid %v", js, last)
			}
		case MultiSoftprob:
			if last["valid_merror"] > 0.25 {
				t.Errorf("%s: valid %v", js, last)
			}
		default:
			if last["valid_rmse"] > 0.6*first["valid_rmse"] {
				t.Errorf("%s: valid rmse %v after round 1, %v after 20", js, first["valid_rmse"], last["valid_rmse"])
			}
		}
	}
}

func TestEarlyStopping(t *testing.T) {
	// Labels are noise: the validation loss stops improving quickly.
	p := mustParams(t, `{"objective":"binary:logistic","num_boost_round":100,"early_stopping_rounds":3,"eta":0.5,"max_depth":8,"min_child_weight":0}`)
	d := synth(600, 5, p.Objective, 0, 13)
	v := synth(300, 5, p.Objective, 0, 14)
	for i := range d.Label {
		d.Label[i] = float32(i % 2)
	}
	tr, err := NewTrainer(context.Background(), Local(), p, d, Eval{Name: "train", Data: d}, Eval{Name: "valid", Data: v})
	if err != nil {
		t.Fatal(err)
	}
	var rounds []Round
	if err := tr.Run(context.Background(), func(r Round) error { rounds = append(rounds, r); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(rounds) >= 100 {
		t.Fatalf("did not stop: %d rounds", len(rounds))
	}
	best, bestAt := math.Inf(1), -1
	for _, r := range rounds {
		if v := r.Map()["valid_logloss"]; v < best {
			best, bestAt = v, r.Iteration
		}
	}
	if got := len(rounds) - 1 - bestAt; got != 3 {
		t.Fatalf("stopped %d rounds after the best (%d), want 3", got, bestAt)
	}
	m := tr.Model()
	if m.Attributes["best_iteration"] != strconv.Itoa(bestAt) || m.NumRounds() != len(rounds) {
		t.Fatalf("attributes %v, %d rounds kept; best %d of %d", m.Attributes, m.NumRounds(), bestAt, len(rounds))
	}
	if _, err := tr.Step(context.Background()); err == nil {
		t.Fatal("Step after stopping did not fail")
	}
	if _, err := NewTrainer(context.Background(), Local(), p, d); err == nil || !strings.Contains(err.Error(), "early_stopping_rounds = 3 needs") {
		t.Fatalf("early stopping without evaluation sets: %v", err)
	}
}

func TestImportance(t *testing.T) {
	p := mustParams(t, `{"objective":"reg:squarederror","num_boost_round":5,"max_depth":3}`)
	d := synth(500, 5, p.Objective, 0, 15)
	m, _, err := Train(context.Background(), Local(), p, d)
	if err != nil {
		t.Fatal(err)
	}
	w, _ := m.Importance("weight")
	g, _ := m.Importance("gain")
	tg, _ := m.Importance("total_gain")
	c, _ := m.Importance("cover")
	tc, _ := m.Importance("total_cover")
	splits := 0.0
	for _, tr := range m.Trees {
		for i := range tr.Left {
			if !tr.IsLeaf(i) {
				splits++
			}
		}
	}
	sum := 0.0
	for f := range w {
		sum += w[f]
		if w[f] > 0 && (math.Abs(g[f]*w[f]-tg[f]) > 1e-9*tg[f] || math.Abs(c[f]*w[f]-tc[f]) > 1e-9*tc[f]) {
			t.Fatalf("feature %d: mean × count != total", f)
		}
	}
	if sum != splits {
		t.Fatalf("weights sum to %v, the model has %v splits", sum, splits)
	}
	if top := TopFeatures(tg); len(top) == 0 || tg[top[0]] < tg[top[len(top)-1]] {
		t.Fatalf("top features %v", top)
	}
	if _, err := m.Importance("split"); err == nil || !strings.Contains(err.Error(), "total_gain") {
		t.Fatalf("unknown importance type: %v", err)
	}
}
