package api

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func tuneInput(space string, cfg TuneConfig) TuneInput {
	in := TuneInput{
		Trainer: FitInput{TrainFunc: "tabular-mlp", Config: json.RawMessage(`{"epochs": 20, "hidden": [64]}`),
			Scaling: ScalingConfig{NumWorkers: 1}, Run: RunConfig{Name: "search", StoragePath: "/tmp/runs"}},
		TuneConfig: cfg,
	}
	if err := json.Unmarshal([]byte(space), &in.ParamSpace); err != nil {
		panic(err)
	}
	return in.WithDefaults()
}

const space = `{"config.lr": {"loguniform": [0.0001, 0.1]}, "config.hidden": {"choice": [[32], [64, 32], [128, 64]]},
	"config.batch_size": {"grid_search": [32, 64]}, "config.seed": {"randint": [0, 10]},
	"config.dropout": {"quniform": [0, 0.5, 0.1]}, "config.momentum": {"uniform": [0.8, 0.99]},
	"scaling.num_workers": 2}`

func TestTuneTrialsDeterministic(t *testing.T) {
	in := tuneInput(space, TuneConfig{Metric: "valid_accuracy", Mode: "max", NumSamples: 5})
	a, err := in.Validate(7)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := in.Validate(7)
	c, _ := in.Validate(8)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("the same seed gave different trials")
	}
	if reflect.DeepEqual(a, c) {
		t.Fatal("seeds 7 and 8 gave the same trials")
	}
	// 5 samples times the grid of 2 batch sizes, the grid's values in order.
	if len(a) != 10 {
		t.Fatalf("%d trials, want 10", len(a))
	}
	for i, tr := range a {
		if tr.Name != TrialName(i) || tr.Index != i {
			t.Errorf("trial %d named %q index %d", i, tr.Name, tr.Index)
		}
		if want := []string{"32", "64"}[i%2]; string(tr.Params["config.batch_size"]) != want {
			t.Errorf("%s: batch_size %s, want %s", tr.Name, tr.Params["config.batch_size"], want)
		}
		var lr, drop, mom float64
		var seed int
		var hidden []int
		mustJSON(t, tr.Params["config.lr"], &lr)
		mustJSON(t, tr.Params["config.dropout"], &drop)
		mustJSON(t, tr.Params["config.momentum"], &mom)
		mustJSON(t, tr.Params["config.seed"], &seed)
		mustJSON(t, tr.Params["config.hidden"], &hidden)
		if lr < 1e-4 || lr >= 0.1 || mom < 0.8 || mom >= 0.99 || seed < 0 || seed >= 10 || len(hidden) == 0 {
			t.Errorf("%s: out of range: %s", tr.Name, tr.ParamString())
		}
		if q := drop * 10; q != float64(int(q+0.5)) || drop < 0 || drop > 0.5 {
			t.Errorf("%s: dropout %v is not a multiple of 0.1 in [0, 0.5]", tr.Name, drop)
		}
		if string(tr.Params["scaling.num_workers"]) != "2" {
			t.Errorf("%s: constant num_workers %s", tr.Name, tr.Params["scaling.num_workers"])
		}
		fi, err := in.TrialInput("search", tr)
		if err != nil {
			t.Fatal(err)
		}
		var cfg map[string]any
		mustJSON(t, fi.Config, &cfg)
		if cfg["epochs"] != 20.0 || cfg["lr"] != lr || fi.Scaling.NumWorkers != 2 {
			t.Errorf("%s: trial input config %v scaling %+v", tr.Name, cfg, fi.Scaling)
		}
		if fi.Run.StoragePath != "/tmp/runs/search" || fi.Run.Name != tr.Name ||
			fi.Run.Checkpoint.ScoreAttribute != "valid_accuracy" || fi.Run.Checkpoint.ScoreOrder != "max" {
			t.Errorf("%s: run %+v", tr.Name, fi.Run)
		}
	}
	// The template is not changed by a trial.
	if string(in.Trainer.Config) != `{"epochs": 20, "hidden": [64]}` || in.Trainer.Scaling.NumWorkers != 1 {
		t.Errorf("template changed: %s %+v", in.Trainer.Config, in.Trainer.Scaling)
	}
	// Log-uniform: about as many draws per decade.
	in = tuneInput(`{"config.lr": {"loguniform": [0.0001, 1]}}`, TuneConfig{Metric: "m", Mode: "max", NumSamples: 800})
	trials, err := in.Validate(1)
	if err != nil {
		t.Fatal(err)
	}
	var decades [4]int
	for _, tr := range trials {
		var lr float64
		mustJSON(t, tr.Params["config.lr"], &lr)
		switch {
		case lr < 1e-3:
			decades[0]++
		case lr < 1e-2:
			decades[1]++
		case lr < 1e-1:
			decades[2]++
		default:
			decades[3]++
		}
	}
	for i, n := range decades {
		if n < 150 || n > 250 {
			t.Errorf("decade %d has %d of 800 log-uniform draws, want about 200", i, n)
		}
	}
}

func mustJSON(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
}

func TestTuneGridSearch(t *testing.T) {
	in := tuneInput(`{"config.hidden": {"choice": [[32], [64]]}, "config.seed": {"randint": [0, 3]}, "config.dropout": {"quniform": [0, 0.2, 0.1]}}`,
		TuneConfig{Metric: "m", Mode: "min", Search: "grid"})
	trials, err := in.Validate(0)
	if err != nil {
		t.Fatal(err)
	}
	if len(trials) != 2*3*3 {
		t.Fatalf("%d trials, want 18", len(trials))
	}
	seen := map[string]bool{}
	for _, tr := range trials {
		seen[tr.ParamString()] = true
	}
	if len(seen) != 18 {
		t.Errorf("%d distinct points of 18", len(seen))
	}
	if got := trials[0].ParamString(); got != "config.dropout=0 config.hidden=[32] config.seed=0" {
		t.Errorf("first point %s", got)
	}
	if got := trials[1].ParamString(); got != "config.dropout=0 config.hidden=[32] config.seed=1" {
		t.Errorf("second point %s (the last key varies fastest)", got)
	}
	if got := trials[17].ParamString(); got != "config.dropout=0.2 config.hidden=[64] config.seed=2" {
		t.Errorf("last point %s", got)
	}
}

func TestTuneInvalid(t *testing.T) {
	ok := TuneConfig{Metric: "valid_accuracy", Mode: "max", NumSamples: 2}
	for _, c := range []struct {
		space string
		cfg   TuneConfig
		field string
		want  string
	}{
		{`{"config.lr": {"log_uniform": [0.1, 1]}}`, ok, "param_space.config.lr", "unknown sampler"},
		{`{"config.lr": {"uniform": [1, 0.1]}}`, ok, "param_space.config.lr.uniform", "lower must be below upper"},
		{`{"config.lr": {"loguniform": [0, 1]}}`, ok, "param_space.config.lr.loguniform", "positive"},
		{`{"config.lr": {"choice": []}}`, ok, "param_space.config.lr.choice", "non-empty list"},
		{`{"config.lr": {"randint": [0.5, 3]}}`, ok, "param_space.config.lr.randint", "integers"},
		{`{"scaling.num_worker": {"choice": [1, 2]}}`, ok, "param_space", "unknown field \"num_worker\""},
		{`{"scaling.num_workers": {"choice": ["two"]}}`, ok, "param_space", "cannot unmarshal string"},
		{`{"scaling.num_workers": {"choice": [0]}}`, ok, "trainer.scaling.num_workers", "at least 1"},
		{`{"lr": {"uniform": [0, 1]}}`, ok, "param_space.lr", "must start with a field"},
		{`{"run.name": "x"}`, ok, "param_space.run.name", "set by the search"},
		{`{"config..lr": 1}`, ok, "param_space.config..lr", "dotted path"},
		{`{"config.lr": {"uniform": [0, 1]}}`, TuneConfig{Metric: "m", Mode: "max", NumSamples: MaxTrials + 1}, "tune_config.num_samples", "at most 1000"},
		{`{"config.a": {"grid_search": [1,2,3,4,5,6,7,8,9,10]}, "config.b": {"grid_search": [1,2,3,4,5,6,7,8,9,10]}}`, TuneConfig{Metric: "m", Mode: "max", NumSamples: 11}, "param_space", "at most 1000 trials"},
		{`{"config.lr": {"uniform": [0, 1]}}`, TuneConfig{Metric: "m", Mode: "max", Search: "grid"}, "param_space.config.lr", "cannot be enumerated"},
		{`{"config.lr": 1}`, TuneConfig{Metric: "", Mode: "max"}, "tune_config.metric", "must name"},
		{`{"config.lr": 1}`, TuneConfig{Metric: "m", Mode: "maximum"}, "tune_config.mode", `"max" or "min"`},
		{`{"config.lr": 1}`, TuneConfig{Metric: "m", Mode: "max", Search: "bayes"}, "tune_config.search", "random"},
		{`{"config.lr": 1}`, TuneConfig{Metric: "m", Mode: "max", Scheduler: &SchedulerConfig{Type: "pbt"}}, "tune_config.scheduler.type", "asha"},
		{`{"config.lr": 1}`, TuneConfig{Metric: "m", Mode: "max", Scheduler: &SchedulerConfig{Type: "asha", ReductionFactor: 1}}, "tune_config.scheduler.reduction_factor", "greater than 1"},
		{`{"config.lr": 1}`, TuneConfig{Metric: "m", Mode: "max", Scheduler: &SchedulerConfig{Type: "asha", MaxT: 5, GracePeriod: 10}}, "tune_config.scheduler.grace_period", "at most max_t"},
		{`{}`, ok, "param_space", "at least one key"},
	} {
		_, err := tuneInput(c.space, c.cfg).Validate(1)
		var e *InvalidTuneError
		if !errors.As(err, &e) {
			t.Errorf("%s %+v: error %v, want an InvalidTuneError", c.space, c.cfg, err)
			continue
		}
		if e.Field != c.field || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "invalid Tune input: "+c.field+" = ") {
			t.Errorf("%s: %v\nwant field %s and %q", c.space, err, c.field, c.want)
		}
	}
}

func TestTuneDefaults(t *testing.T) {
	in := tuneInput(`{"config.lr": 1}`, TuneConfig{Metric: "m", Mode: "max", Scheduler: &SchedulerConfig{Type: "asha"}})
	s := in.TuneConfig.Scheduler
	if s.TimeAttr != "training_iteration" || s.MaxT != 100 || s.GracePeriod != 1 || s.ReductionFactor != 4 || !*s.StopLastTrials ||
		in.TuneConfig.NumSamples != 1 || in.TuneConfig.Search != "random" {
		t.Errorf("defaults %+v %+v", in.TuneConfig, *s)
	}
}

func TestSortTrials(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	trials := []TrialResult{{Name: "a"}, {Name: "b", Metric: f(0.5)}, {Name: "c", Metric: f(0.9)}, {Name: "d", Metric: f(0.7)}}
	SortTrials(trials, "max")
	var got []string
	for _, tr := range trials {
		got = append(got, tr.Name)
	}
	if strings.Join(got, "") != "cdba" {
		t.Errorf("max order %v", got)
	}
	SortTrials(trials, "min")
	got = got[:0]
	for _, tr := range trials {
		got = append(got, tr.Name)
	}
	if strings.Join(got, "") != "bdca" {
		t.Errorf("min order %v", got)
	}
}
