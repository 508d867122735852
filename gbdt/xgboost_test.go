package gbdt

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// The interoperability tests run XGBoost 1.7 (Debian's python3-xgboost)
// under /usr/bin/python3. They skip when it cannot import xgboost, and fail
// instead when TEMPOTRAIN_REQUIRE_XGBOOST=1.

const systemPython = "/usr/bin/python3"

func needXGBoost(t *testing.T) {
	t.Helper()
	out, err := exec.Command(systemPython, "-c", "import numpy, xgboost; print(xgboost.__version__)").CombinedOutput()
	if err == nil {
		return
	}
	msg := fmt.Sprintf("%s cannot import xgboost and numpy (apt-get install python3-xgboost): %v: %s", systemPython, err, bytes.TrimSpace(out))
	if os.Getenv("TEMPOTRAIN_REQUIRE_XGBOOST") == "1" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// xgbScript runs jobs (a JSON list; one Python start for all, as importing
// xgboost takes a second): each predicts with a model file, training it first
// when "params" is set, and writes [len(margins), margins..., predictions...]
// as float32 to "out".
const xgbScript = `
import json, sys
import numpy as np
import xgboost as xgb
for job in json.load(open(sys.argv[1])):
    X = np.fromfile(job["x"], dtype=np.float32).reshape(job["rows"], job["cols"])
    if job.get("params"):
        params = dict(job["params"])
        y = np.fromfile(job["y"], dtype=np.float32)
        rounds = params.pop("num_boost_round")
        b = xgb.train(params, xgb.DMatrix(X, label=y), num_boost_round=rounds)
        b.save_model(job["model"])
    b = xgb.Booster(model_file=job["model"])
    d = xgb.DMatrix(X)
    m = b.predict(d, output_margin=True).ravel()
    np.concatenate([[len(m)], m, b.predict(d).ravel()]).astype(np.float32).tofile(job["out"])
`

// xgbJob is one job of xgbScript.
type xgbJob struct {
	Model  string         `json:"model"`
	X      string         `json:"x"`
	Rows   int            `json:"rows"`
	Cols   int            `json:"cols"`
	Out    string         `json:"out"`
	Params map[string]any `json:"params,omitempty"`
	Y      string         `json:"y,omitempty"`
}

// newJob writes d's features (and labels) under dir/name.* for a job.
func newJob(t *testing.T, dir, name, model string, d *Dataset) xgbJob {
	t.Helper()
	j := xgbJob{Model: model, X: filepath.Join(dir, name+".x"), Rows: d.Rows, Cols: d.Cols, Out: filepath.Join(dir, name+".out"),
		Y: filepath.Join(dir, name+".y")}
	writeFloats(t, j.X, d.X)
	writeFloats(t, j.Y, d.Label)
	return j
}

// runXGBoost runs the jobs; it returns each job's margins and predictions.
func runXGBoost(t *testing.T, dir string, jobs []xgbJob) (margins, preds [][]float32) {
	t.Helper()
	b, err := json.Marshal(jobs)
	if err != nil {
		t.Fatal(err)
	}
	jf := filepath.Join(dir, "jobs.json")
	if err := os.WriteFile(jf, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(systemPython, "-c", xgbScript, jf).CombinedOutput(); err != nil {
		t.Fatalf("xgboost: %v\n%s", err, out)
	}
	for _, j := range jobs {
		all := readFloats(t, j.Out)
		nm := int(all[0])
		margins = append(margins, all[1:1+nm])
		preds = append(preds, all[1+nm:])
	}
	return margins, preds
}

func writeFloats(t *testing.T, path string, v []float32) {
	t.Helper()
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func readFloats(t *testing.T, path string) []float32 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v
}

func closeTo(t *testing.T, what string, got, want []float32, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	worst, at := 0.0, 0
	for i := range got {
		if d := math.Abs(float64(got[i]) - float64(want[i])); d > worst || d != d {
			worst, at = d, i
		}
	}
	if !(worst <= tol) {
		t.Fatalf("%s: |ours - xgboost| = %g at %d (ours %v, xgboost %v), want ≤ %g", what, worst, at, got[at], want[at], tol)
	}
}

// TestXGBoostLoadsOurModels writes models of ours, has XGBoost load them
// (Booster(model_file=...)) and predict the training rows, and compares
// with our predictions: margins and transformed, within 1e-5.
func TestXGBoostLoadsOurModels(t *testing.T) {
	needXGBoost(t)
	dir := t.TempDir()
	type ours struct {
		p            Params
		margin, pred []float32
	}
	var cases []ours
	var jobs []xgbJob
	for i, params := range []string{
		`{"objective":"binary:logistic","num_boost_round":8,"max_depth":5}`,
		`{"objective":"multi:softprob","num_class":4,"num_boost_round":5,"max_depth":4}`,
		`{"objective":"reg:squarederror","num_boost_round":8,"grow_policy":"lossguide","max_leaves":12,"base_score":0.3}`,
		`{"objective":"count:poisson","num_boost_round":5}`,
		`{"objective":"multi:softmax","num_class":3,"num_boost_round":3}`,
		`{"objective":"reg:logistic","num_boost_round":3,"scale_pos_weight":2}`,
	} {
		p := mustParams(t, params)
		d := synth(400, 7, p.Objective, p.NumClass, 3)
		m, _, err := Train(context.Background(), Local(), p, d)
		if err != nil {
			t.Fatal(err)
		}
		name := fmt.Sprintf("ours%d", i)
		path := filepath.Join(dir, name+".json")
		if err := os.WriteFile(path, saveModel(t, m), 0o644); err != nil {
			t.Fatal(err)
		}
		om, err := m.PredictMargin(d.X, d.Rows)
		if err != nil {
			t.Fatal(err)
		}
		op, err := m.Predict(d.X, d.Rows)
		if err != nil {
			t.Fatal(err)
		}
		cases = append(cases, ours{p, om, op})
		jobs = append(jobs, newJob(t, dir, name, path, d))
	}
	xm, xp := runXGBoost(t, dir, jobs)
	for i, c := range cases {
		closeTo(t, c.p.Objective+" margins", c.margin, xm[i], 1e-5)
		closeTo(t, c.p.Objective+" predictions", c.pred, xp[i], 1e-5)
	}
}

// TestWeLoadXGBoostModels trains with XGBoost (hist), loads its JSON models
// into ours and compares predictions within 1e-5. It also trains ours with
// the same parameters on the same rows and requires held-out quality close
// to XGBoost's.
func TestWeLoadXGBoostModels(t *testing.T) {
	needXGBoost(t)
	dir := t.TempDir()
	var jobs []xgbJob
	var ps []Params
	var data []*Dataset
	raw := []map[string]any{
		{"objective": "binary:logistic", "num_boost_round": 10, "max_depth": 5},
		{"objective": "multi:softprob", "num_class": 3, "num_boost_round": 6},
		{"objective": "reg:squarederror", "num_boost_round": 10},
		{"objective": "count:poisson", "num_boost_round": 5},
	}
	for i, pm := range raw {
		pm["tree_method"] = "hist"
		js, _ := json.Marshal(pm)
		p := mustParams(t, string(js))
		d := synth(1500, 6, p.Objective, p.NumClass, 9)
		train, test := shard(d, 1000, 500)[0], shard(d, 1000, 500)[1]
		name := fmt.Sprintf("xgb%d", i)
		j := newJob(t, dir, name, filepath.Join(dir, name+".json"), train)
		j.Params = pm
		jobs = append(jobs, j, newJob(t, dir, name+"test", j.Model, test))
		ps, data = append(ps, p), append(data, d)
	}
	_, xp := runXGBoost(t, dir, jobs)
	for i, p := range ps {
		train, test := shard(data[i], 1000, 500)[0], shard(data[i], 1000, 500)[1]
		f, err := os.Open(jobs[2*i].Model)
		if err != nil {
			t.Fatal(err)
		}
		m, err := LoadJSON(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		if m.NumRounds() != p.NumBoostRound {
			t.Fatalf("%s: loaded %d rounds, trained %d", p.Objective, m.NumRounds(), p.NumBoostRound)
		}
		op, err := m.Predict(train.X, train.Rows)
		if err != nil {
			t.Fatal(err)
		}
		closeTo(t, p.Objective+" predictions", op, xp[2*i], 1e-5)
		// It writes back what it read: the same predictions again.
		m2, err := LoadJSON(bytes.NewReader(saveModel(t, m)))
		if err != nil {
			t.Fatal(err)
		}
		op2, _ := m2.Predict(train.X, train.Rows)
		closeTo(t, p.Objective+" predictions after a round trip", op2, op, 0)
		// Our training against XGBoost's, on the held-out rows.
		mine, _, err := Train(context.Background(), Local(), p, train)
		if err != nil {
			t.Fatal(err)
		}
		pp := p
		pp.EvalMetric = nil
		metric := pp.metrics()[0]
		oursV, err := evalMetrics(context.Background(), Local(), &pp, "test", test, mustMargin(t, mine, test), test.Rows, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		theirs, err := evalMetrics(context.Background(), Local(), &pp, "test", test, mustMargin(t, m, test), test.Rows, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		a, b := oursV[0].Value, theirs[0].Value
		t.Logf("%s: test %s ours %.5f, xgboost %.5f", p.Objective, metric, a, b)
		if a > b*1.05+0.005 {
			t.Errorf("%s: test %s ours %.5f, xgboost %.5f: more than 5%% worse", p.Objective, metric, a, b)
		}
	}
}

func mustMargin(t *testing.T, m *Model, d *Dataset) []float32 {
	t.Helper()
	mg, err := m.PredictMargin(d.X, d.Rows)
	if err != nil {
		t.Fatal(err)
	}
	return mg
}
