package main

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tempotrain/tempotrain/api"
)

func TestReadTuneInput(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "tune.json")
	if err := os.WriteFile(good, []byte(`{"trainer": {"train_func": "tabular-mlp", "scaling": {"num_workers": 1}, "run": {"name": "s", "storage_path": "/tmp/r"}},
		"param_space": {"config.lr": {"loguniform": [0.0001, 0.1]}},
		"tune_config": {"metric": "valid_loss", "mode": "min", "num_samples": 4, "scheduler": {"type": "asha", "time_attr": "epoch", "max_t": 9}}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	in, err := readTuneInput(good)
	if err != nil {
		t.Fatal(err)
	}
	if in.TuneConfig.Scheduler.MaxT != 9 || string(in.ParamSpace["config.lr"]) != `{"loguniform": [0.0001, 0.1]}` {
		t.Errorf("read %+v", in)
	}
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"tune_config": {"metrik": "x"}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := readTuneInput(bad); err == nil || !strings.Contains(err.Error(), `unknown field "metrik"`) {
		t.Errorf("a misspelt field: %v", err)
	}
}

func TestPrintTuneResult(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	r := &api.TuneResult{Name: "s", Metric: "valid_loss", Mode: "min", Seed: 3, Done: true, BestFile: "/r/s/best.json",
		Trials: []api.TrialResult{
			{Name: "trial_0001", Status: api.TrialCompleted, Metric: f(0.1), BestEpoch: 9, Epochs: 9, Params: map[string]json.RawMessage{"config.lr": json.RawMessage("0.01")}, Checkpoint: "/r/s/trial_0001/checkpoint_000009"},
			{Name: "trial_0000", Status: api.TrialStopped, Metric: f(0.6), BestEpoch: 1, Epochs: 2, StopReason: "asha: at rung epoch=1 ..."},
			{Name: "trial_0002", Status: api.TrialFailed, Error: "boom, it failed"},
		}}
	r.Best = &r.Trials[0]
	var b bytes.Buffer
	printTuneResult(&b, r, false, false)
	out := b.String()
	for _, want := range []string{"search s (done): min valid_loss, seed 3, 3 trials", "trial_0001  completed  0.1", "config.lr=0.01",
		"trial_0000  stopped    0.6", "asha: at rung epoch=1", "trial_0002  failed     -", "boom, it failed",
		"best: trial_0001, valid_loss 0.1 at epoch 9: /r/s/trial_0001/checkpoint_000009", "best.json: /r/s/best.json"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	b.Reset()
	printTuneResult(&b, r, false, true)
	rows, err := csv.NewReader(&b).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 4 || rows[0][2] != "valid_loss" || rows[1][0] != "trial_0001" || rows[1][2] != "0.1" || rows[3][9] != "boom, it failed" {
		t.Errorf("csv %q", rows)
	}
}

func TestTrialsPlot(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	res := &api.TuneResult{Name: "s", Metric: "valid_loss", Mode: "min", Trials: []api.TrialResult{
		{Name: "trial_0000", Status: api.TrialCompleted, Metric: f(0.2)},
		{Name: "trial_0001", Status: api.TrialStopped, Metric: f(0.6)},
		{Name: "trial_0002", Status: api.TrialFailed},
	}}
	rec := func(epoch, loss float64) api.ReportRecord {
		return api.ReportRecord{Metrics: api.Metrics{"epoch": epoch, "valid_loss": loss}}
	}
	curves := map[string][]api.ReportRecord{
		"trial_0000": {rec(1, 0.5), rec(2, 0.3), rec(3, 0.2)},
		"trial_0001": {rec(1, 0.7), {Metrics: api.Metrics{"epoch": 1.5}}},
	}
	p, err := trialsPlot(res, curves, "valid_loss")
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "trials.png")
	if err := p.Save(400, 240, out); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(out); err != nil || st.Size() < 1000 {
		t.Fatalf("png: %v %v", st, err)
	}
	if p.X.Max != 3 || p.Y.Min != 0.2 || p.Y.Max != 0.7 {
		t.Errorf("ranges x ≤ %g, y %g..%g: want the two trials' points", p.X.Max, p.Y.Min, p.Y.Max)
	}
	if _, err := trialsPlot(res, curves, "valid_accuracy"); err == nil || !strings.Contains(err.Error(), `reported "valid_accuracy"`) {
		t.Errorf("a metric no trial has: %v", err)
	}
}
