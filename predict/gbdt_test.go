package predict_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/builtin"
	"github.com/tempotrain/tempotrain/data"
	"github.com/tempotrain/tempotrain/data/format"
	"github.com/tempotrain/tempotrain/gbdt"
	"github.com/tempotrain/tempotrain/predict"
	"github.com/tempotrain/tempotrain/storage"
	"github.com/tempotrain/tempotrain/storage/miniotest"
	"github.com/tempotrain/tempotrain/train"
	"github.com/tempotrain/tempotrain/train/trainrt"
)

// trainGBDT runs the built-in gbdt function on one rank and commits its
// checkpoints to a local run; it returns the last checkpoint and the
// metrics reported with it.
func trainGBDT(t *testing.T, cfg map[string]any, datasets map[string]api.DatasetSpec, pre []api.PreprocessorSpec) (*train.Checkpoint, train.Metrics) {
	t.Helper()
	ctx := context.Background()
	b, err := storage.Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	rep := &reporter{run: storage.NewRun(b, "r")}
	raw, _ := json.Marshal(cfg)
	tc := trainrt.NewContext(ctx, trainrt.ContextInfo{RunName: "r", Attempt: 1, WorldSize: 1, LocalWorldSize: 1,
		Config: raw, ScratchDir: t.TempDir(), Device: -1, Datasets: datasets, Preprocessors: pre}, nil, rep, nil)
	if err := builtin.GBDTFunc(ctx, tc); err != nil {
		t.Fatal(err)
	}
	if rep.ck == nil {
		t.Fatal("no checkpoint reported")
	}
	return rep.ck, rep.m
}

// classes3 turns a regression table's labels into three classes.
func classes3(tb table) table {
	out := tb
	out.label = make([]string, len(tb.label))
	for i, s := range tb.label {
		v, _ := strconv.ParseFloat(s, 64)
		switch {
		case v < 45:
			out.label[i] = "low"
		case v < 58:
			out.label[i] = "mid"
		default:
			out.label[i] = "high"
		}
	}
	return out
}

// aucOf is the AUC of scores against positives with ties counted one half,
// as gbdt's exact AUC (every count an integer, so the sums are exact).
func aucOf(score []float32, pos []bool) float64 {
	idx := make([]int, len(score))
	for i := range idx {
		idx[i] = i
	}
	sort.Slice(idx, func(a, b int) bool { return score[idx[a]] < score[idx[b]] })
	var P, N, area, negBelow float64
	for _, p := range pos {
		if p {
			P++
		} else {
			N++
		}
	}
	for i := 0; i < len(idx); {
		j := i
		var gp, gn float64
		for ; j < len(idx) && score[idx[j]] == score[idx[i]]; j++ {
			if pos[idx[j]] {
				gp++
			} else {
				gn++
			}
		}
		area += gp * (negBelow + gn/2)
		negBelow += gn
		i = j
	}
	return area / (P * N)
}

func outputNames(out []predict.Tensor) string {
	var n []string
	for _, o := range out {
		n = append(n, fmt.Sprintf("%s %s %v", o.Name, o.Datatype, o.Shape))
	}
	return strings.Join(n, ", ")
}

func specNames(specs []predict.TensorSpec) string {
	var n []string
	for _, s := range specs {
		n = append(n, fmt.Sprintf("%s %s %v", s.Name, s.Datatype, s.Shape))
	}
	return strings.Join(n, ", ")
}

// Issue 16: the predictor of a gbdt checkpoint, given the valid table's raw
// columns (the checkpoint's one-hot encoder applied, missing values NaN),
// scores exactly what the run reported for that checkpoint: the binary
// classifier's error rate and AUC, the multi-class error rate, to float
// rounding the regression's RMSE.
func TestGBDTPredictorMatchesReportedMetrics(t *testing.T) {
	if predict.GBDTFormat != builtin.GBDTFormat {
		t.Fatalf("predict.GBDTFormat %q, builtin.GBDTFormat %q", predict.GBDTFormat, builtin.GBDTFormat)
	}
	pre := []api.PreprocessorSpec{{Type: "one_hot_encoder", Columns: []string{"kind"}}}
	for _, tt := range []struct {
		objective, task string
		metrics         []string
		outputs         string
	}{
		{"binary:logistic", "classification", []string{"logloss", "error", "auc"},
			"probabilities FP32 [301 2], class INT64 [301], label BYTES [301], margin FP32 [301]"},
		{"multi:softprob", "multi", []string{"mlogloss", "merror"},
			"probabilities FP32 [301 3], class INT64 [301], label BYTES [301], margin FP32 [301 3]"},
		{"reg:squarederror", "regression", []string{"rmse"}, "value FP32 [301], margin FP32 [301]"},
	} {
		t.Run(tt.objective, func(t *testing.T) {
			dir := t.TempDir()
			task := tt.task
			if task == "multi" {
				task = "regression"
			}
			trainT, validT := genTable(1500, 1, task), genTable(301, 2, task)
			if tt.task == "multi" {
				trainT, validT = classes3(trainT), classes3(validT)
			}
			trainT.write(t, filepath.Join(dir, "train.csv"))
			validT.write(t, filepath.Join(dir, "valid.csv"))
			ds := map[string]api.DatasetSpec{
				"train": {URI: filepath.Join(dir, "train.csv"), Label: "label"},
				"valid": {URI: filepath.Join(dir, "valid.csv"), Label: "label"},
			}
			ck, m := trainGBDT(t, map[string]any{"objective": tt.objective, "num_boost_round": 15, "max_depth": 4,
				"eta": 0.3, "subsample": 0.9, "seed": 3, "eval_metric": tt.metrics, "checkpoint_every": 100}, ds, pre)
			t.Logf("reported %v", m)
			p, err := predict.Load(context.Background(), ck.URI)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			md := p.Metadata()
			if md.Name != builtin.GBDT || md.Format != predict.GBDTFormat || md.Checkpoint != ck.URI ||
				specNames(md.Inputs) != "a FP32 [-1], b FP32 [-1], kind BYTES [-1]" {
				t.Errorf("metadata %+v", md)
			}
			out, err := p.Predict(context.Background(), validT.inputs(t))
			if err != nil {
				t.Fatal(err)
			}
			if got := outputNames(out); got != tt.outputs {
				t.Fatalf("outputs %s, want %s", got, tt.outputs)
			}
			if want := specNames(md.Outputs); strings.ReplaceAll(outputNames(out), "301", "-1") != want {
				t.Errorf("outputs %s, metadata says %s", outputNames(out), want)
			}
			n := len(validT.a)
			margin := out[len(out)-1].FP32
			switch tt.objective {
			case "binary:logistic":
				wrong := 0
				score := make([]float32, n)
				pos := make([]bool, n)
				for i := range n {
					p0, p1 := out[0].FP32[2*i], out[0].FP32[2*i+1]
					if want := float32(1 / (1 + math.Exp(-float64(margin[i])))); math.Abs(float64(p1-want)) > 1e-6 || p0 != 1-p1 {
						t.Fatalf("row %d: probabilities %v %v, margin %v", i, p0, p1, margin[i])
					}
					c := out[1].INT64[i]
					if (c == 1) != (p1 > 0.5) || out[2].Bytes[i] != []string{"no", "yes"}[c] {
						t.Fatalf("row %d: p(1) %v, class %d, label %q", i, p1, c, out[2].Bytes[i])
					}
					if out[2].Bytes[i] != validT.label[i] {
						wrong++
					}
					score[i], pos[i] = p1, validT.label[i] == "yes"
				}
				if e := float64(wrong) / float64(n); e != m["valid_error"] {
					t.Errorf("predictor error rate %v (%d/%d), the run reported %v", e, wrong, n, m["valid_error"])
				}
				if auc := aucOf(score, pos); auc != m["valid_auc"] {
					t.Errorf("predictor AUC %v, the run reported %v", auc, m["valid_auc"])
				}
				if m["valid_auc"] < 0.9 {
					t.Errorf("valid AUC %v: it did not learn", m["valid_auc"])
				}
			case "multi:softprob":
				wrong := 0
				var nll float64
				classes := []string{"high", "low", "mid"}
				for i := range n {
					pr := out[0].FP32[3*i : 3*i+3]
					c := out[1].INT64[i]
					if s := pr[0] + pr[1] + pr[2]; math.Abs(float64(s)-1) > 1e-6 || int(c) != slices.Index(pr, slices.Max(pr)) ||
						out[2].Bytes[i] != classes[c] {
						t.Fatalf("row %d: probabilities %v, class %d, label %q", i, pr, c, out[2].Bytes[i])
					}
					if out[2].Bytes[i] != validT.label[i] {
						wrong++
					}
					nll -= math.Log(max(float64(pr[slices.Index(classes, validT.label[i])]), 1e-16))
				}
				if e := float64(wrong) / float64(n); e != m["valid_merror"] {
					t.Errorf("predictor error rate %v (%d/%d), the run reported %v", e, wrong, n, m["valid_merror"])
				}
				if nll /= float64(n); math.Abs(nll-m["valid_mlogloss"]) > 1e-9 {
					t.Errorf("predictor mlogloss %v, the run reported %v", nll, m["valid_mlogloss"])
				}
				if m["valid_merror"] > 0.3 {
					t.Errorf("valid merror %v: it did not learn", m["valid_merror"])
				}
			default:
				var sq float64
				for i, v := range out[0].FP32 {
					if v != margin[i] {
						t.Fatalf("row %d: value %v, margin %v", i, v, margin[i])
					}
					y, _ := strconv.ParseFloat(validT.label[i], 32)
					d := float64(v) - float64(float32(y))
					sq += d * d
				}
				// The run sums in a fixed point: agreement to ~1e-9.
				if rmse := math.Sqrt(sq / float64(n)); math.Abs(rmse-m["valid_rmse"]) > 1e-9*m["valid_rmse"] {
					t.Errorf("predictor RMSE %v, the run reported %v", rmse, m["valid_rmse"])
				}
				if m["valid_rmse"] > 5 {
					t.Errorf("valid RMSE %v on a target of std ≈ 13: it did not learn", m["valid_rmse"])
				}
			}
		})
	}
}

// A gbdt checkpoint's predictor gives a row alone exactly what it gives it
// in a batch (trees add up the same leaves), takes missing values and
// unseen categories, is safe for concurrent use, and rejects inputs that do
// not match, naming them; its model.json, loaded as a model file, gives the
// same margins on the features the pipeline makes.
func TestGBDTPredictorInputs(t *testing.T) {
	dir := t.TempDir()
	genTable(800, 1, "classification").write(t, filepath.Join(dir, "train.csv"))
	ck, _ := trainGBDT(t, map[string]any{"objective": "binary:logistic", "num_boost_round": 8, "max_depth": 3},
		map[string]api.DatasetSpec{"train": {URI: filepath.Join(dir, "train.csv"), Label: "label"}},
		[]api.PreprocessorSpec{{Type: "ordinal_encoder", Columns: []string{"kind"}}})
	ctx := context.Background()
	p, err := predict.Load(ctx, ck.URI)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	tb := genTable(20000, 5, "classification") // more rows than one chunk
	tb.kind[3], tb.b[4], tb.kind[5] = "k9", "", ""
	in := tb.inputs(t)
	whole, err := p.Predict(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{0, 3, 4, 5, 16383, 16384, 19999} {
		one := table{a: tb.a[i : i+1], b: tb.b[i : i+1], kind: tb.kind[i : i+1], label: tb.label[i : i+1]}
		out, err := p.Predict(ctx, one.inputs(t))
		if err != nil {
			t.Fatal(err)
		}
		if out[3].FP32[0] != whole[3].FP32[i] || out[1].INT64[0] != whole[1].INT64[i] || out[2].Bytes[0] != whole[2].Bytes[i] {
			t.Errorf("row %d alone: margin %v class %d %q; in the batch %v %d %q", i, out[3].FP32[0], out[1].INT64[0], out[2].Bytes[0],
				whole[3].FP32[i], whole[1].INT64[i], whole[2].Bytes[i])
		}
	}
	// Concurrent calls give the batch's answers.
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lo := g * 1000
			part := table{a: tb.a[lo : lo+1000], b: tb.b[lo : lo+1000], kind: tb.kind[lo : lo+1000]}
			out, err := p.Predict(ctx, part.inputs(t))
			if err != nil {
				t.Error(err)
				return
			}
			if !slices.Equal(out[3].FP32, whole[3].FP32[lo:lo+1000]) {
				t.Errorf("goroutine %d: margins differ from the batch's", g)
			}
		}()
	}
	wg.Wait()

	// The checkpoint's model.json as a model file: the same margins on the
	// features the checkpoint's pipeline makes of the rows.
	pipe, err := data.LoadPipeline(ck.URI)
	if err != nil {
		t.Fatal(err)
	}
	const n = 500
	raw := format.NewBatch(pipe.Inputs, n)
	raw.Reset(n)
	for i := range n {
		raw.Num[0][i] = in.Inputs[0].FP32[i]
		raw.Num[1][i] = in.Inputs[1].FP32[i]
		if tb.kind[i] != "" {
			raw.SetString(2, i, tb.kind[i])
		}
	}
	x := make([]float32, n*pipe.Width())
	if err := pipe.Apply(raw, x); err != nil {
		t.Fatal(err)
	}
	fp, err := predict.Load(ctx, ck.URI+"/model.json")
	if err != nil {
		t.Fatal(err)
	}
	defer fp.Close()
	// A schedule's promoted.json is followed to the checkpoint it names.
	ptr := filepath.Join(t.TempDir(), "nightly", api.PromotedFile)
	if err := os.MkdirAll(filepath.Dir(ptr), 0o755); err != nil {
		t.Fatal(err)
	}
	pb, _ := json.Marshal(api.Pointer{Schedule: "nightly", Run: "r", Checkpoint: ck.URI, Seq: ck.Seq})
	if err := os.WriteFile(ptr, pb, 0o644); err != nil {
		t.Fatal(err)
	}
	viaPtr, err := predict.Load(ctx, ptr)
	if err != nil {
		t.Fatalf("load through %s: %v", ptr, err)
	}
	if md := viaPtr.Metadata(); md.Checkpoint != ck.URI {
		t.Errorf("through the pointer: checkpoint %q, want %q", md.Checkpoint, ck.URI)
	}
	viaPtr.Close()
	if md := fp.Metadata(); md.Format != predict.XGBoostFormat || specNames(md.Inputs) != "features FP32 [-1 3]" ||
		specNames(md.Outputs) != "probabilities FP32 [-1 2], class INT64 [-1], margin FP32 [-1]" {
		t.Errorf("model file metadata %+v", md)
	}
	fout, err := fp.Predict(ctx, predict.Batch{Inputs: []predict.Tensor{{Name: "features", Datatype: predict.FP32, Shape: []int{n, 3}, FP32: x}}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(fout[2].FP32, whole[3].FP32[:n]) || !slices.Equal(fout[0].FP32, whole[0].FP32[:2*n]) {
		t.Error("the model file's margins or probabilities differ from the checkpoint's")
	}

	checkTableInputErrors(t, p, tb)
	if _, err := fp.Predict(ctx, predict.Batch{Inputs: []predict.Tensor{{Name: "features", Datatype: predict.FP32, Shape: []int{2, 4}, FP32: make([]float32, 8)}}}); !errors.Is(err, predict.ErrInvalidInput) {
		t.Errorf("4 features for a model of 3: %v, want ErrInvalidInput", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := p.Predict(cctx, in); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled context: %v", err)
	}
}

// The interoperability tests run XGBoost 1.7 (Debian's python3-xgboost)
// under /usr/bin/python3: they skip when it cannot import xgboost, and fail
// instead when TEMPOTRAIN_REQUIRE_XGBOOST=1.
func needXGBoost(t *testing.T) {
	t.Helper()
	out, err := python("-c", "import numpy, xgboost; print(xgboost.__version__)")
	if err == nil {
		return
	}
	msg := fmt.Sprintf("/usr/bin/python3 cannot import xgboost and numpy (apt-get install python3-xgboost): %v: %s", err, bytes.TrimSpace(out))
	if os.Getenv("TEMPOTRAIN_REQUIRE_XGBOOST") == "1" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// xgbModelsScript trains one small model per objective with XGBoost on the
// same features (NaN missing), saves each with save_model, and writes what
// XGBoost predicts for them: margins and predictions, from inplace_predict
// and, for multi:softmax's class, predict.
const xgbModelsScript = `
import json, sys
import numpy as np
import xgboost as xgb
d = sys.argv[1]
spec = json.load(open(d + "/spec.json"))
X = np.fromfile(d + "/x.bin", dtype=np.float32).reshape(spec["rows"], spec["cols"])
for job in spec["jobs"]:
    y = np.fromfile(d + "/" + job["name"] + ".y", dtype=np.float32)
    params = dict(job["params"], nthread=1, max_depth=4, eta=0.3, seed=1)
    b = xgb.train(params, xgb.DMatrix(X, label=y, missing=np.nan), num_boost_round=12)
    b.save_model(d + "/" + job["name"] + ".json")
    b = xgb.Booster(model_file=d + "/" + job["name"] + ".json")
    b.set_param({"nthread": 1})
    m = b.inplace_predict(X, predict_type="margin").astype(np.float32).ravel()
    p = b.inplace_predict(X).astype(np.float32).ravel()
    c = b.predict(xgb.DMatrix(X, missing=np.nan)).astype(np.float32).ravel()
    for ext, v in (("margin", m), ("pred", p), ("class", c)):
        v.tofile(d + "/" + job["name"] + "." + ext)
`

// python runs /usr/bin/python3 with args, returning its output.
func python(args ...string) ([]byte, error) {
	return exec.Command("/usr/bin/python3", args...).CombinedOutput()
}

func writeF32(t *testing.T, path string, v []float32) {
	t.Helper()
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func readF32(t *testing.T, path string) []float32 {
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

// Issue 16: predict.Load of a model XGBoost itself saved (save_model with a
// .json name) predicts what XGBoost predicts, within 1e-5, for each
// objective; by path and by file:// URI.
func TestXGBoostModelFileMatchesXGBoost(t *testing.T) {
	needXGBoost(t)
	dir := t.TempDir()
	const rows, cols = 600, 6
	x := make([]float32, rows*cols)
	ys := map[string][]float32{}
	for i := range rows {
		r := x[i*cols : (i+1)*cols]
		for f := range cols {
			r[f] = float32(math.Sin(float64(i*(f+3)+f*f)) * float64(f+1))
		}
		if i%7 == 2 {
			r[1] = float32(math.NaN())
		}
		if i%11 == 5 {
			r[4] = float32(math.NaN())
		}
		s := float64(r[0]) + 0.5*float64(r[2]) - 0.3*float64(r[3])
		if !math.IsNaN(float64(r[1])) {
			s += 0.2 * float64(r[1])
		}
		ys["binary"] = append(ys["binary"], b2f(s > 0.1))
		ys["multi"] = append(ys["multi"], float32(min(2, max(0, int(s/1.5+1)))))
		ys["softmax"] = ys["multi"]
		ys["reg"] = append(ys["reg"], float32(3*s+1))
		ys["logistic"] = append(ys["logistic"], float32(1/(1+math.Exp(-s))))
		ys["poisson"] = append(ys["poisson"], float32(math.Round(math.Exp(s/3)*2)))
	}
	jobs := []map[string]any{
		{"name": "binary", "params": map[string]any{"objective": "binary:logistic"}},
		{"name": "multi", "params": map[string]any{"objective": "multi:softprob", "num_class": 3}},
		{"name": "softmax", "params": map[string]any{"objective": "multi:softmax", "num_class": 3}},
		{"name": "reg", "params": map[string]any{"objective": "reg:squarederror"}},
		{"name": "logistic", "params": map[string]any{"objective": "reg:logistic"}},
		{"name": "poisson", "params": map[string]any{"objective": "count:poisson"}},
	}
	writeF32(t, filepath.Join(dir, "x.bin"), x)
	for name, y := range ys {
		writeF32(t, filepath.Join(dir, name+".y"), y)
	}
	spec, _ := json.Marshal(map[string]any{"rows": rows, "cols": cols, "jobs": jobs})
	if err := os.WriteFile(filepath.Join(dir, "spec.json"), spec, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := python("-c", xgbModelsScript, dir); err != nil {
		t.Fatalf("xgboost: %v\n%s", err, out)
	}
	in := predict.Batch{Inputs: []predict.Tensor{{Name: "features", Datatype: predict.FP32, Shape: []int{rows, cols}, FP32: x}}}
	for i, job := range jobs {
		name := job["name"].(string)
		t.Run(name, func(t *testing.T) {
			uri := filepath.Join(dir, name+".json")
			if i%2 == 1 {
				uri = "file://" + uri
			}
			p, err := predict.Load(context.Background(), uri)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			md := p.Metadata()
			if md.Name != "xgboost" || md.Format != predict.XGBoostFormat || md.Checkpoint != uri || specNames(md.Inputs) != "features FP32 [-1 6]" {
				t.Errorf("metadata %+v", md)
			}
			out, err := p.Predict(context.Background(), in)
			if err != nil {
				t.Fatal(err)
			}
			ref := func(ext string) []float32 { return readF32(t, filepath.Join(dir, name+"."+ext)) }
			margin, pred, cls := ref("margin"), ref("pred"), ref("class")
			close := func(what string, got, want []float32) {
				t.Helper()
				if len(got) != len(want) {
					t.Fatalf("%s: %d values, XGBoost %d", what, len(got), len(want))
				}
				worst := 0.0
				for i := range got {
					d := math.Abs(float64(got[i]) - float64(want[i]))
					worst = max(worst, d/max(1, math.Abs(float64(want[i]))))
				}
				if worst > 1e-5 {
					t.Errorf("%s: differs from XGBoost's by up to %.3g (relative above 1)", what, worst)
				}
			}
			close("margin", out[len(out)-1].FP32, margin)
			switch name {
			case "binary":
				p1 := make([]float32, rows)
				for i := range p1 {
					p1[i] = out[0].FP32[2*i+1]
				}
				close("p(1)", p1, pred)
				for i, c := range out[1].INT64 {
					if (c == 1) != (pred[i] > 0.5) {
						t.Errorf("row %d: class %d, XGBoost's p(1) %v", i, c, pred[i])
					}
				}
			case "multi", "softmax":
				if name == "multi" {
					close("probabilities", out[0].FP32, pred)
					// predict gives multi:softprob's probabilities: the
					// class is their first largest.
					cls = make([]float32, rows)
					for i := range cls {
						pr := pred[3*i : 3*i+3]
						cls[i] = float32(slices.Index(pr, slices.Max(pr)))
					}
				}
				for i, c := range out[1].INT64 {
					if float32(c) != cls[i] {
						t.Errorf("row %d: class %d, XGBoost's predict %v", i, c, cls[i])
					}
				}
			default:
				close("value", out[0].FP32, pred)
			}
			if got := outputNames(out); !strings.HasSuffix(got, fmt.Sprintf("margin FP32 %v", out[len(out)-1].Shape)) {
				t.Errorf("outputs %s", got)
			}
		})
	}
}

func b2f(b bool) float32 {
	if b {
		return 1
	}
	return 0
}

// A model file loads from S3 (MinIO) as from a path; a missing file is
// storage.ErrNotFound, a file that is no model says so.
func TestModelFileFromS3AndErrors(t *testing.T) {
	ctx := context.Background()
	d := &gbdt.Dataset{Rows: 200, Cols: 2}
	for i := range d.Rows {
		a, b := float32(i%17)/17, float32(i%5)
		d.X = append(d.X, a, b)
		d.Label = append(d.Label, 2*a+b)
	}
	params, err := gbdt.ParseParams([]byte(`{"objective":"reg:squarederror","num_boost_round":5,"max_depth":2}`))
	if err != nil {
		t.Fatal(err)
	}
	model, _, err := gbdt.Train(ctx, gbdt.Local(), params, d)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := model.SaveJSON(&buf); err != nil {
		t.Fatal(err)
	}
	want, err := model.Predict(d.X, d.Rows)
	if err != nil {
		t.Fatal(err)
	}
	in := predict.Batch{Inputs: []predict.Tensor{{Name: "features", Datatype: predict.FP32, Shape: []int{d.Rows, 2}, FP32: d.X}}}

	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "m.json"), buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "other.json"), []byte(`{"learner":{"gradient_booster":{"name":"gblinear"}}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		uri  string
		want error
		says string
	}{
		{filepath.Join(dir, "nope.json"), storage.ErrNotFound, "nope.json"},
		{filepath.Join(dir, "other.json"), nil, "gblinear"},
		{"s3:///m.json", storage.ErrMisconfigured, "no bucket"},
	} {
		_, err := predict.Load(ctx, tt.uri)
		if err == nil || (tt.want != nil && !errors.Is(err, tt.want)) || !strings.Contains(err.Error(), tt.says) {
			t.Errorf("Load(%s): %v, want an error saying %q", tt.uri, err, tt.says)
		}
	}

	srv := miniotest.Start(t)
	srv.SetEnv(t)
	bucket := srv.CreateBucket(t, "")
	be, err := storage.Open(ctx, "s3://"+bucket+"/models")
	if err != nil {
		t.Fatal(err)
	}
	if err := be.Put(ctx, "m.json", bytes.NewReader(buf.Bytes()), int64(buf.Len())); err != nil {
		t.Fatal(err)
	}
	for _, uri := range []string{"s3://" + bucket + "/models/m.json", filepath.Join(dir, "m.json")} {
		p, err := predict.Load(ctx, uri)
		if err != nil {
			t.Fatalf("Load(%s): %v", uri, err)
		}
		out, err := p.Predict(ctx, in)
		p.Close()
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(out[0].FP32, want) {
			t.Errorf("%s: values differ from the model's own Predict", uri)
		}
	}
	if _, err := predict.Load(ctx, "s3://"+bucket+"/models/missing.json"); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("missing S3 object: %v, want storage.ErrNotFound", err)
	}
}
