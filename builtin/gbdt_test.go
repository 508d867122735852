package builtin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/tempotrain/tempotrain/compute/computetest"
	"github.com/tempotrain/tempotrain/data"
	"github.com/tempotrain/tempotrain/gbdt"
	"github.com/tempotrain/tempotrain/train"
	"github.com/tempotrain/tempotrain/train/trainrt"
)

// writeGBDTTable writes a CSV of n rows with a learnable label: numeric x0..x3
// (x2 sometimes empty: missing), a categorical color, and y, 1 when
// x0 + x1/2 (+1 for "red") is positive, flipped for one row in 11.
func writeGBDTTable(t *testing.T, path string, n, seed int) {
	t.Helper()
	var b strings.Builder
	b.WriteString("x0,x1,x2,x3,color,y\n")
	colors := []string{"red", "green", "blue"}
	for i := range n {
		v := func(k int) float64 { return float64((i*(7919+k*104729)+seed*31+k*17)%2001)/1000 - 1 }
		x0, x1, x2, x3 := v(0), v(1), v(2), v(3)
		color := colors[(i*7+seed)%3]
		s := x0 + x1/2
		if color == "red" {
			s++
		}
		y := 0
		if s > 0.3 {
			y = 1
		}
		if i%11 == 3 {
			y = 1 - y
		}
		x2s := fmt.Sprintf("%.4f", x2)
		if i%13 == 5 {
			x2s = ""
		}
		fmt.Fprintf(&b, "%.4f,%.4f,%s,%.4f,%s,%d\n", x0, x1, x2s, x3, color, y)
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// gbdtRecorder commits rank 0's checkpoints (copies) and keeps the metrics;
// it fails the report of round stopAfter, after its commit, as a rank
// killed right then.
type gbdtRecorder struct {
	dir       string
	stopAfter int
	mu        sync.Mutex
	metrics   []train.Metrics
	ckpts     []*train.Checkpoint
}

func (r *gbdtRecorder) Report(_ context.Context, m train.Metrics, ck *train.Checkpoint) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.metrics = append(r.metrics, m)
	if ck != nil {
		dst := filepath.Join(r.dir, fmt.Sprintf("checkpoint_%06d", len(r.ckpts)+1))
		if err := copyDir(ck.Dir, dst); err != nil {
			return err
		}
		r.ckpts = append(r.ckpts, &train.Checkpoint{Dir: dst, Seq: len(r.ckpts) + 1, Metrics: m, Meta: ck.Meta})
	}
	if r.stopAfter > 0 && int(m["round"]) == r.stopAfter {
		return errInterrupted
	}
	return nil
}

// gbdtRun runs GBDTFunc on world ranks over real loopback connections,
// resuming from ck when not nil; it returns rank 0's recorder.
func gbdtRun(t *testing.T, world int, cfg map[string]any, datasets map[string]train.DatasetSpec, pre []train.PreprocessorSpec, ck *train.Checkpoint, stopAfter int) (*gbdtRecorder, error) {
	t.Helper()
	raw, _ := json.Marshal(cfg)
	comms := computetest.ConnectTCP(t, world)
	rec := &gbdtRecorder{dir: t.TempDir(), stopAfter: stopAfter}
	errs := make([]error, world)
	var wg sync.WaitGroup
	for r := 0; r < world; r++ {
		var rep trainrt.Reporter = &gbdtRecorder{dir: t.TempDir()}
		if r == 0 {
			rep = rec
		}
		tc := trainrt.NewContext(context.Background(), trainrt.ContextInfo{RunName: t.Name(), Attempt: 1, WorldRank: r, WorldSize: world,
			LocalWorldSize: world, Config: raw, Checkpoint: ck, ScratchDir: t.TempDir(), Device: -1,
			Datasets: datasets, Preprocessors: pre}, comms[r], rep, nil)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if errs[r] = GBDTFunc(context.Background(), tc); errs[r] != nil {
				comms[r].Abort()
			}
		}()
	}
	wg.Wait()
	return rec, errors.Join(errs...)
}

func gbdtDatasets(t *testing.T) (map[string]train.DatasetSpec, []train.PreprocessorSpec) {
	dir := t.TempDir()
	writeGBDTTable(t, filepath.Join(dir, "train.csv"), 3000, 1)
	writeGBDTTable(t, filepath.Join(dir, "valid.csv"), 800, 2)
	return map[string]train.DatasetSpec{
			"train": {URI: filepath.Join(dir, "train.csv"), Label: "y"},
			"valid": {URI: filepath.Join(dir, "valid.csv"), Label: "y"},
		}, []train.PreprocessorSpec{
			{Type: "ordinal_encoder", Columns: []string{"color"}},
		}
}

func modelBytes(t *testing.T, ck *train.Checkpoint) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(ck.Dir, GBDTModelFile))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestGBDTSameModelOnAnyWorldSize: the built-in gbdt function makes the same
// model, byte for byte, on 1, 2 and 3 ranks, with row subsampling (drawn
// from row ids, not from how rows are split), and it learns.
func TestGBDTSameModelOnAnyWorldSize(t *testing.T) {
	ds, pre := gbdtDatasets(t)
	cfg := map[string]any{"objective": "binary:logistic", "num_boost_round": 12, "max_depth": 4, "eta": 0.3,
		"subsample": 0.8, "colsample_bytree": 0.8, "seed": 5, "eval_metric": []string{"logloss", "auc"}, "checkpoint_every": 5}
	var want []byte
	var wantMetrics train.Metrics
	for world := 1; world <= 3; world++ {
		rec, err := gbdtRun(t, world, cfg, ds, pre, nil, 0)
		if err != nil {
			t.Fatalf("%d ranks: %v", world, err)
		}
		if len(rec.metrics) != 12 || len(rec.ckpts) != 3 { // rounds 5, 10 and 12
			t.Fatalf("%d ranks: %d reports, %d checkpoints; want 12 and 3", world, len(rec.metrics), len(rec.ckpts))
		}
		last := rec.metrics[len(rec.metrics)-1]
		got := modelBytes(t, rec.ckpts[2])
		if want == nil {
			want, wantMetrics = got, last
			if last["valid_auc"] < 0.85 || last["round"] != 12 {
				t.Errorf("metrics %v: it did not learn", last)
			}
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%d ranks: model differs from 1 rank's", world)
		}
		if fmt.Sprint(last) != fmt.Sprint(wantMetrics) {
			t.Errorf("%d ranks: metrics %v, 1 rank %v", world, last, wantMetrics)
		}
	}
	// The checkpoint is what predict and XGBoost read: a model, the
	// preprocessors, the importance by feature name.
	ck := filepath.Join(t.TempDir(), "x")
	rec, _ := gbdtRun(t, 1, cfg, ds, pre, nil, 0)
	if err := copyDir(rec.ckpts[2].Dir, ck); err != nil {
		t.Fatal(err)
	}
	m, err := gbdt.LoadJSON(bytes.NewReader(modelBytes(t, rec.ckpts[2])))
	if err != nil || m.NumRounds() != 12 {
		t.Fatalf("model.json: %v rounds, %v", m, err)
	}
	if p, err := data.LoadPipeline(ck); err != nil || len(p.Features) != 5 {
		t.Errorf("pipeline %+v, %v", p, err)
	}
	var imp map[string]map[string]float64
	b, _ := os.ReadFile(filepath.Join(ck, GBDTImportanceFile))
	if err := json.Unmarshal(b, &imp); err != nil || imp["gain"]["x0"] <= imp["gain"]["x3"] {
		t.Errorf("importance %v (%v): x0 carries the signal, x3 none", imp, err)
	}
	if meta := rec.ckpts[2].Meta; meta["format"] != GBDTFormat || meta["objective"] != "binary:logistic" || meta["rounds"] != "12" {
		t.Errorf("meta %v", meta)
	}
}

// TestGBDTResumesByteIdentical: a run stopped after round 7's checkpoint
// resumes from it, on another world size, and ends with the model of an
// uninterrupted run.
func TestGBDTResumesByteIdentical(t *testing.T) {
	ds, pre := gbdtDatasets(t)
	cfg := map[string]any{"objective": "binary:logistic", "num_boost_round": 15, "max_depth": 3, "subsample": 0.7, "seed": 2, "checkpoint_every": 7}
	clean, err := gbdtRun(t, 2, cfg, ds, pre, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	cut, err := gbdtRun(t, 2, cfg, ds, pre, nil, 7)
	if !errors.Is(err, errInterrupted) || len(cut.ckpts) != 1 {
		t.Fatalf("interrupted run: %v, %d checkpoints", err, len(cut.ckpts))
	}
	resumed, err := gbdtRun(t, 3, cfg, ds, pre, cut.ckpts[0], 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(resumed.metrics) != 8 || resumed.metrics[0]["round"] != 8 {
		t.Fatalf("resumed run reported %d rounds from %v, want 8 from round 8", len(resumed.metrics), resumed.metrics[0]["round"])
	}
	if !bytes.Equal(modelBytes(t, resumed.ckpts[len(resumed.ckpts)-1]), modelBytes(t, clean.ckpts[len(clean.ckpts)-1])) {
		t.Error("the resumed run's model differs from the uninterrupted run's")
	}
}

func TestGBDTMultiClassAndRegression(t *testing.T) {
	dir := t.TempDir()
	var b strings.Builder
	b.WriteString("a,b,kind,value\n")
	for i := range 1200 {
		a, bb := float64(i%40)/40, float64((i*7)%50)/50
		kind := []string{"low", "mid", "high"}[int(a*3)]
		fmt.Fprintf(&b, "%.3f,%.3f,%s,%.4f\n", a, bb, kind, 3*a-bb+0.1*math.Sin(float64(i)))
	}
	path := filepath.Join(dir, "t.csv")
	os.WriteFile(path, []byte(b.String()), 0o644)
	// Classes from a string label; num_class from the data.
	rec, err := gbdtRun(t, 2, map[string]any{"objective": "multi:softprob", "num_boost_round": 6},
		map[string]train.DatasetSpec{"train": {URI: path, Label: "kind", Features: []string{"a", "b"}}}, nil, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	if last := rec.metrics[len(rec.metrics)-1]; last["train_mlogloss"] > 0.3 {
		t.Errorf("multi-class metrics %v", last)
	}
	// Regression on a numeric label the dataset would call classes.
	rec, err = gbdtRun(t, 2, map[string]any{"objective": "reg:squarederror", "num_boost_round": 20},
		map[string]train.DatasetSpec{"train": {URI: path, Label: "value", Features: []string{"a", "b"}}}, nil, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	if last := rec.metrics[len(rec.metrics)-1]; last["train_rmse"] > 0.1 {
		t.Errorf("regression metrics %v", last)
	}
}

func TestGBDTBadInputIsNonRetryable(t *testing.T) {
	ds, pre := gbdtDatasets(t)
	for _, tt := range []struct {
		cfg  map[string]any
		ds   map[string]train.DatasetSpec
		want string
	}{
		{map[string]any{"objective": "binary:logistic", "max_dpeth": 3}, ds, `unknown parameter "max_dpeth"`},
		{map[string]any{"objective": "rank:pairwise"}, ds, "rank:pairwise"},
		{map[string]any{"objective": "count:poisson"}, map[string]train.DatasetSpec{"train": {URI: ds["train"].URI, Label: "x0"}}, "x0"},
		{map[string]any{"checkpoint_every": 0}, ds, "checkpoint_every = 0"},
	} {
		_, err := gbdtRun(t, 2, tt.cfg, tt.ds, pre, nil, 0)
		if !train.IsNonRetryable(err) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("config %v: %v, want a non-retryable error saying %q", tt.cfg, err, tt.want)
		}
	}
}
