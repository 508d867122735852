package builtin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/compute"
	"github.com/tempotrain/tempotrain/data"
	"github.com/tempotrain/tempotrain/train"
	"github.com/tempotrain/tempotrain/train/trainrt"
)

// writeTable writes n rows of a table with a clear signal as CSV: numeric
// x0..x3 (x3 sometimes missing), a categorical color, and the label: a
// class "low", "mid" or "high" of a noisy linear score (task
// classification), or 100 + 20·score (regression).
func writeTable(t testing.TB, path string, n int, seed uint64, task string) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 99))
	colors := []string{"red", "green", "blue"}
	effect := map[string]float64{"red": -0.8, "green": 0, "blue": 0.8}
	var b strings.Builder
	b.WriteString("x0,x1,x2,x3,color,label\n")
	for range n {
		var x [4]float64
		for j := range x {
			x[j] = rng.NormFloat64()*float64(1+j) + float64(j)
		}
		c := colors[rng.IntN(3)]
		score := x[0] + 0.4*(x[1]-1) - 0.3*(x[2]-2) + effect[c] + 0.15*rng.NormFloat64()
		x3 := strconv.FormatFloat(x[3], 'g', 6, 64)
		if rng.IntN(20) == 0 {
			x3 = "NA"
		}
		var label string
		if task == "regression" {
			label = strconv.FormatFloat(100+20*score, 'g', 8, 64)
		} else {
			label = "mid"
			if score < -0.6 {
				label = "low"
			} else if score > 0.6 {
				label = "high"
			}
		}
		fmt.Fprintf(&b, "%.6g,%.6g,%.6g,%s,%s,%s\n", x[0], x[1], x[2], x3, c, label)
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// tables writes a train table (train rows) and a valid table (valid rows)
// and returns their datasets; valid is evaluated with remainder exact.
func tables(t testing.TB, task string, trainRows, validRows int) map[string]api.DatasetSpec {
	dir := t.TempDir()
	writeTable(t, filepath.Join(dir, "train.csv"), trainRows, 1, task)
	writeTable(t, filepath.Join(dir, "valid.csv"), validRows, 2, task)
	return map[string]api.DatasetSpec{
		"train": {URI: filepath.Join(dir, "train.csv"), Label: "label", Task: task},
		"valid": {URI: filepath.Join(dir, "valid.csv"), Label: "label", Task: task, Remainder: "exact"},
	}
}

// dsRun is one attempt of a run on datasets: world ranks over the real TCP
// collective, each through FuncWith(model, o), resuming from ck when not
// nil. It returns rank 0's recorder and the ranks' errors joined.
type dsRun struct {
	model    string
	world    int
	cfg      any
	datasets map[string]api.DatasetSpec
	pre      []api.PreprocessorSpec
	ck       *train.Checkpoint
	o        Options
}

func (d dsRun) attempt(t *testing.T) (*recorder, error) {
	t.Helper()
	raw, err := json.Marshal(d.cfg)
	if err != nil {
		t.Fatal(err)
	}
	comms, _, abort := tcpGroup(t, d.world)
	recs := make([]*recorder, d.world)
	errs := make([]error, d.world)
	attempt := 1
	if d.ck != nil {
		attempt = 2
	}
	var wg sync.WaitGroup
	for r := range d.world {
		recs[r] = &recorder{dir: t.TempDir()}
		info := trainrt.ContextInfo{RunName: t.Name(), Attempt: attempt, WorldRank: r, WorldSize: d.world,
			LocalRank: r, LocalWorldSize: d.world, Config: raw, Checkpoint: d.ck, ScratchDir: t.TempDir(), Device: -1,
			Datasets: d.datasets, Preprocessors: d.pre}
		tc := trainrt.NewContext(context.Background(), info, comms[r], recs[r], nil)
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			errs[r] = FuncWith(d.model, d.o)(context.Background(), tc)
			if errs[r] != nil {
				abort()
			}
		}(r)
	}
	wg.Wait()
	return recs[0], errors.Join(errs...)
}

// epochReports are the end-of-epoch reports (the mid-epoch ones have no
// train_loss).
func epochReports(rec *recorder) []train.Metrics {
	var out []train.Metrics
	for _, m := range rec.metrics {
		if _, ok := m["train_loss"]; ok {
			out = append(out, m)
		}
	}
	return out
}

func TestTabularClassification(t *testing.T) {
	t.Parallel()
	ds := tables(t, "classification", 1500, 401)
	cfg := TabularConfig{Config: Config{Epochs: 6, Seed: 3}}
	rec, err := dsRun{model: TabularMLP, world: 2, cfg: cfg, datasets: ds}.attempt(t)
	if err != nil {
		t.Fatal(err)
	}
	reps := epochReports(rec)
	if len(reps) != 6 || len(rec.ckpts) != 6 {
		t.Fatalf("%d epoch reports, %d checkpoints; want 6 of each", len(reps), len(rec.ckpts))
	}
	for _, m := range reps {
		t.Logf("%v", m)
	}
	first, last := reps[0], reps[len(reps)-1]
	for _, k := range []string{"epoch", "train_loss", "train_accuracy", "valid_loss", "valid_accuracy", "samples_per_s", "epoch_time_s", "cpu_s"} {
		if _, ok := last[k]; !ok {
			t.Errorf("no metric %q in %v", k, last)
		}
	}
	if !(last["train_loss"] < first["train_loss"]) {
		t.Errorf("train loss did not fall: %v → %v", first["train_loss"], last["train_loss"])
	}
	if acc := last["valid_accuracy"]; acc < 0.85 {
		t.Errorf("valid accuracy %.4f, want ≥ 0.85", acc)
	}
	// The checkpoint: state (model, optimizer, what the model is), the
	// fitted pipeline (default preprocessors: the categorical column
	// one-hot encoded), the train shard's position.
	ck := rec.last()
	if ck.Meta["format"] != StateFormat || ck.Meta["model"] != TabularMLP || ck.Meta["file"] != CheckpointFile {
		t.Errorf("meta %v", ck.Meta)
	}
	st, err := compute.LoadFile(ck.Path(CheckpointFile))
	if err != nil {
		t.Fatal(err)
	}
	mi, ok, err := ReadModelInfo(st)
	if err != nil || !ok {
		t.Fatalf("model info: %v %v", ok, err)
	}
	if mi.Task != "classification" || mi.Outputs != 3 || !slices.Equal(mi.Classes, []string{"high", "low", "mid"}) ||
		!slices.Equal(mi.Hidden, DefaultHidden) || !slices.Equal(mi.Input, []int{7}) || string(st.Blobs["model"]) != TabularMLP {
		t.Errorf("model info %+v", mi)
	}
	pipe, err := data.LoadPipeline(ck.Dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(pipe.Features, " "); got != "x0 x1 x2 x3 color=blue color=green color=red" {
		t.Errorf("features %s", got)
	}
	if _, err := os.Stat(ck.Path(data.StateFile("train"))); err != nil {
		t.Errorf("no train position in the checkpoint: %v", err)
	}
}

func TestTabularRegression(t *testing.T) {
	t.Parallel()
	ds := tables(t, "regression", 1500, 400)
	cfg := TabularConfig{Config: Config{Epochs: 8, Seed: 5}}
	rec, err := dsRun{model: TabularMLP, world: 2, cfg: cfg, datasets: ds}.attempt(t)
	if err != nil {
		t.Fatal(err)
	}
	reps := epochReports(rec)
	last := reps[len(reps)-1]
	t.Logf("first %v\nlast %v", reps[0], last)
	for _, k := range []string{"train_loss", "train_rmse", "valid_loss", "valid_rmse", "valid_mae", "valid_r2"} {
		if _, ok := last[k]; !ok {
			t.Errorf("no metric %q in %v", k, last)
		}
	}
	// The target is 100 + 20·score (std about 25), score noise 0.15: an
	// RMSE of 3 is in the noise's neighbourhood.
	if last["valid_r2"] < 0.95 || last["valid_rmse"] > 6 {
		t.Errorf("valid r2 %.4f rmse %.3f, want ≥ 0.95 and ≤ 6", last["valid_r2"], last["valid_rmse"])
	}
	st, _ := compute.LoadFile(rec.last().Path(CheckpointFile))
	mi, _, _ := ReadModelInfo(st)
	if mi.Task != "regression" || mi.Outputs != 1 || math.Abs(mi.TargetMean-100) > 5 || mi.TargetStd < 15 || mi.TargetStd > 35 {
		t.Errorf("model info %+v: want regression, 1 output, the target standardised (mean ≈ 100, std ≈ 25)", mi)
	}
}

// Issue 14 item 3 at the rank level: a run killed after a mid-epoch
// checkpoint and resumed from it ends with the state, bit for bit, of a
// run never interrupted, and its epoch metrics too; the resumed attempt
// uses the checkpoint's preprocessors (the run's are changed for it, and
// nothing changes) and its data position (an epoch started over would
// give other parameters).
func TestTabularResumeMidEpoch(t *testing.T) {
	t.Parallel()
	for _, task := range []string{"classification", "regression"} {
		t.Run(task, func(t *testing.T) {
			t.Parallel()
			ds := tables(t, task, 900, 201)
			pre := []api.PreprocessorSpec{
				{Type: api.SimpleImputer, Columns: []string{"x3"}},
				{Type: api.StandardScaler, Columns: []string{"x0", "x1", "x2", "x3"}},
				{Type: api.OneHotEncoder, Columns: []string{"color"}},
			}
			// 900 rows, 2 ranks, batches of 32: 15 steps an epoch;
			// checkpoints after steps 4, 8 and 12 and at the end.
			cfg := TabularConfig{Config: Config{Epochs: 3, BatchSize: 32, Seed: 11, Optimizer: "adam", Schedule: "cosine", CheckpointEverySteps: 4}}
			run := dsRun{model: TabularMLP, world: 2, cfg: cfg, datasets: ds, pre: pre}
			full, err := run.attempt(t)
			if err != nil {
				t.Fatal(err)
			}
			if len(full.ckpts) != 12 {
				t.Fatalf("uninterrupted run: %d checkpoints, want 12 (3 mid-epoch and 1 at the end of each epoch)", len(full.ckpts))
			}

			// Rank 1 fails in epoch 2 (index 1) after step 10, two steps past
			// the checkpoint of step 8.
			failing := run
			failing.o.AfterStep = func(tc *train.Context, epoch, step int) error {
				if tc.WorldRank() == 1 && epoch == 1 && step == 10 {
					return errInterrupted
				}
				return nil
			}
			first, err := failing.attempt(t)
			if !errors.Is(err, errInterrupted) {
				t.Fatalf("interrupted attempt: %v, want the injected failure", err)
			}
			if n := len(first.ckpts); n != 6 {
				t.Fatalf("interrupted attempt: %d checkpoints, want 6 (epoch 1's four, epoch 2's first two)", n)
			}
			ck := first.last()
			if e := ck.Metrics["epoch"]; math.Abs(e-(1+8.0/15)) > 1e-12 {
				t.Fatalf("last checkpoint of the interrupted attempt at epoch %v, want 1+8/15", e)
			}
			resume := run
			resume.ck = ck
			// Other preprocessors: a refit would change everything.
			resume.pre = []api.PreprocessorSpec{{Type: api.MinMaxScaler, Columns: []string{"x0"}}, {Type: api.OrdinalEncoder, Columns: []string{"color"}}}
			second, err := resume.attempt(t)
			if err != nil {
				t.Fatal(err)
			}
			want, got := stateBytes(t, full.last()), stateBytes(t, second.last())
			if !bytes.Equal(want, got) {
				t.Fatal("the resumed run's final state differs from the uninterrupted run's")
			}
			for _, f := range []string{data.PipelineFile, data.StateFile("train")} {
				a, _ := full.last().ReadFile(f)
				b, _ := second.last().ReadFile(f)
				if !bytes.Equal(a, b) {
					t.Errorf("%s differs:\n%s\n%s", f, a, b)
				}
			}
			// The epoch the failure cut, and the last: the same metrics.
			fe, se := epochReports(full), epochReports(second)
			if len(se) != 2 {
				t.Fatalf("resumed attempt: %d epoch reports, want 2", len(se))
			}
			for i, m := range se {
				w := fe[i+1]
				for _, k := range []string{"epoch", "train_loss", "train_accuracy", "train_rmse", "valid_loss", "valid_accuracy", "valid_rmse"} {
					if m[k] != w[k] {
						t.Errorf("epoch %v %s: resumed %v, uninterrupted %v", w["epoch"], k, m[k], w[k])
					}
				}
			}
			if bytes.Equal(stateBytes(t, full.ckpts[0]), stateBytes(t, full.last())) {
				t.Error("training did not move the state")
			}
			// Mid-epoch checkpoints change nothing but themselves: a run
			// without them ends in the same state, with the same metrics
			// (the loss summed in another order).
			plainCfg := cfg
			plainCfg.CheckpointEverySteps = 0
			plain := run
			plain.cfg = plainCfg
			pr, err := plain.attempt(t)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(stateBytes(t, pr.last()), want) {
				t.Error("a run without mid-epoch checkpoints ends in another state")
			}
			for i, m := range epochReports(pr) {
				w := fe[i]
				if m["train_accuracy"] != w["train_accuracy"] || m["valid_accuracy"] != w["valid_accuracy"] || m["valid_rmse"] != w["valid_rmse"] ||
					math.Abs(m["train_loss"]-w["train_loss"]) > 1e-12*w["train_loss"] || math.Abs(m["train_rmse"]-w["train_rmse"]) > 1e-12*w["train_rmse"] {
					t.Errorf("epoch %v: without mid-epoch checkpoints %v, with them %v", w["epoch"], m, w)
				}
			}
		})
	}
}

// Errors that no restart fixes end the run: bad config fields, named, and
// data that cannot be trained on.
func TestTabularNonRetryable(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good := filepath.Join(dir, "good.csv")
	writeTable(t, good, 60, 1, "classification")
	one := filepath.Join(dir, "one.csv")
	os.WriteFile(one, []byte("a,b,label\n1,2,x\n3,4,x\n5,6,x\n"), 0o644)
	trainOn := func(uri, label string) map[string]api.DatasetSpec {
		return map[string]api.DatasetSpec{"train": {URI: uri, Label: label}}
	}
	for _, tt := range []struct {
		name     string
		cfg      string
		datasets map[string]api.DatasetSpec
		want     string
	}{
		{"hidden", `{"hidden": [8, 0]}`, trainOn(good, "label"), "hidden [8 0]: layer 2 has 0 units"},
		{"task", `{"task": "ranking"}`, trainOn(good, "label"), `task "ranking"`},
		{"optimizer", `{"optimizer": "rmsprop"}`, trainOn(good, "label"), `unknown optimizer "rmsprop"`},
		{"data_dir", `{"data_dir": "/tmp"}`, trainOn(good, "label"), `data_dir "/tmp"`},
		{"checkpoint_every_steps", `{"checkpoint_every_steps": -1}`, trainOn(good, "label"), "checkpoint_every_steps -1"},
		{"no train", `{}`, map[string]api.DatasetSpec{"valid": {URI: good, Label: "label"}}, `no "train" dataset`},
		{"no label", `{}`, trainOn(good, ""), "has no label"},
		{"one class", `{}`, trainOn(one, "label"), "has one class"},
		{"regression of strings", `{"task": "regression"}`, trainOn(good, "label"), "holds strings"},
		{"missing column", `{}`, trainOn(good, "price"), "price"},
		{"valid without label", `{}`, map[string]api.DatasetSpec{"train": {URI: good, Label: "label"}, "valid": {URI: good}}, "datasets.valid has no label"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			info := trainrt.ContextInfo{RunName: "bad", WorldSize: 1, LocalWorldSize: 1, ScratchDir: t.TempDir(), Device: -1,
				Config: json.RawMessage(tt.cfg), Datasets: tt.datasets}
			err := Func(TabularMLP)(context.Background(), trainrt.NewContext(context.Background(), info, nil, &recorder{dir: t.TempDir()}, nil))
			if err == nil || !train.IsNonRetryable(err) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want a non-retryable error saying %q", err, tt.want)
			}
		})
	}
}

// A 2-rank evaluation under remainder "pad" (the default) in memory counts
// every row once: the accuracy equals that of one rank over all rows.
func TestEvalCountsEveryRowOnce(t *testing.T) {
	t.Parallel()
	ds := tables(t, "classification", 300, 101)
	v := ds["valid"]
	v.Remainder = ""
	ds["valid"] = v
	cfg := TabularConfig{Config: Config{Epochs: 1, Seed: 3}}
	two, err := dsRun{model: TabularMLP, world: 2, cfg: cfg, datasets: ds}.attempt(t)
	if err != nil {
		t.Fatal(err)
	}
	// The same model evaluated by one rank over all 101 rows.
	ck := two.last()
	st, _ := compute.LoadFile(ck.Path(CheckpointFile))
	mi, _, _ := ReadModelInfo(st)
	m, err := BuildModel(compute.CPU(), mi, 101, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Load(st); err != nil {
		t.Fatal(err)
	}
	pipe, _ := data.LoadPipeline(ck.Dir)
	s, err := data.Open(context.Background(), ds["valid"], data.ShardOptions{Name: "valid", BatchSize: 101}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.SetPipeline(pipe); err != nil {
		t.Fatal(err)
	}
	x, y := make([]float32, 101*s.Width()), make([]float32, 101)
	n, err := s.Next(context.Background(), x, y)
	if err != nil || n != 101 {
		t.Fatal(n, err)
	}
	ce := compute.NewCrossEntropy(compute.CPU(), 101, mi.Outputs)
	_, correct := ce.Forward(m.Forward(compute.HostTensor(x, 101, s.Width()), false), compute.HostTensor(y, 101), false)
	if got, want := epochReports(two)[0]["valid_accuracy"], float64(correct)/101; got != want {
		t.Errorf("2 ranks report valid_accuracy %v, one rank over all rows %v (%d/101)", got, want, correct)
	}
}

// The config's task "regression" over datasets that read a numeric label
// as classes (their default task) trains a regression on the classes'
// values; a valid value the train data lacks is an error that says how to
// avoid it.
func TestTabularTaskOverride(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tr, va := filepath.Join(dir, "train.csv"), filepath.Join(dir, "valid.csv")
	writeTable(t, tr, 400, 1, "regression")
	writeTable(t, va, 100, 2, "regression")
	cfg := TabularConfig{Config: Config{Epochs: 3, Seed: 1}, Task: "regression"}
	same := map[string]api.DatasetSpec{"train": {URI: tr, Label: "label"}, "valid": {URI: tr, Label: "label", Remainder: "exact"}}
	rec, err := dsRun{model: TabularMLP, world: 2, cfg: cfg, datasets: same}.attempt(t)
	if err != nil {
		t.Fatal(err)
	}
	last := epochReports(rec)[2]
	if _, ok := last["valid_rmse"]; !ok || last["valid_r2"] < 0.5 {
		t.Errorf("metrics %v: want a regression's, r2 ≥ 0.5", last)
	}
	st, _ := compute.LoadFile(rec.last().Path(CheckpointFile))
	if mi, _, _ := ReadModelInfo(st); mi.Task != "regression" || mi.Outputs != 1 || mi.Classes != nil {
		t.Errorf("model info %+v", mi)
	}
	other := map[string]api.DatasetSpec{"train": {URI: tr, Label: "label"}, "valid": {URI: va, Label: "label"}}
	_, err = dsRun{model: TabularMLP, world: 1, cfg: cfg, datasets: other}.attempt(t)
	if err == nil || !train.IsNonRetryable(err) || !strings.Contains(err.Error(), `set "task": "regression" on every dataset`) {
		t.Errorf("valid values outside the train data's: %v", err)
	}
}
