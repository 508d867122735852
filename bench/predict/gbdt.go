package main

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/tempotrain/tempotrain/bench/internal/benchdata"
	"github.com/tempotrain/tempotrain/data/format"
	"github.com/tempotrain/tempotrain/gbdt"
	"github.com/tempotrain/tempotrain/predict"
)

//go:embed xgb_peer.py
var xgbPeerScript string

// xgbTolerance is how far XGBoost's predictions may be from ours: the same
// float32 margins (the same leaves added in the same order) through
// sigmoid or softmax computed in float32 (XGBoost) or float64 (ours).
const xgbTolerance = 1e-5

// gbdtTable is one model and the rows it predicts.
type gbdtTable struct {
	name          string
	model         *gbdt.Model
	x             []float32
	rows, cols, k int
	trainRows     int
	trainSeconds  float64
}

type gbdtResult struct {
	t          *gbdtTable
	xgbVersion string
	ours, xgb  []float64 // rows/s per round, wall time
	ratios     []float64 // ours/XGBoost per round, wall time
	cpuRatios  []float64 // ours/XGBoost per round, processor time
	maxDiff    float64
}

// benchGBDT compares gbdt prediction through predict (a model file's
// Predictor: margins, then probabilities and classes) with XGBoost 1.7's
// inplace_predict on the same model, exported in XGBoost's JSON format.
func benchGBDT(f flags) error {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "bench-predict-gbdt-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	fmt.Printf("== gbdt prediction: ours (predict.Load of the model file, 1 goroutine, GOMAXPROCS 1) vs XGBoost inplace_predict (nthread=1)\n")
	fmt.Printf("load average before: %s\n", loadAvg())
	var results []gbdtResult
	for _, name := range f.gbdtTables {
		t, err := gbdtTrain(ctx, f, name)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		fmt.Printf("%s: %d trees (%d rounds × %d) trained on %d rows in %.1fs; predicting %d rows × %d features\n",
			name, len(t.model.Trees), t.model.NumRounds(), t.k, t.trainRows, t.trainSeconds, t.rows, t.cols)
		r, err := benchGBDTTable(ctx, f, dir, t)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		results = append(results, r)
	}
	fmt.Printf("\nmedians over %d rounds (each: every row, repeated for at least a second, on each side):\n\n", f.rounds)
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "table\trows×features\ttrees\tours rows/s\tXGBoost rows/s\tours/XGBoost\tper-round ratios\tours/XGBoost, processor time\tmax |Δ|\t")
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t%d×%d\t%d\t%.0f\t%.0f\t%.2f×\t%.2f–%.2f\t%.2f× (%.2f–%.2f)\t%.1e\t\n", r.t.name, r.t.rows, r.t.cols, len(r.t.model.Trees),
			medianF(r.ours), medianF(r.xgb), medianF(r.ratios), slices.Min(r.ratios), slices.Max(r.ratios),
			medianF(r.cpuRatios), slices.Min(r.cpuRatios), slices.Max(r.cpuRatios), r.maxDiff)
	}
	tw.Flush()
	if len(results) > 0 {
		fmt.Printf("XGBoost %s; ratios are medians of the per-round ratios (the order alternates between rounds);\n"+
			"processor time: rows per user+system second of each side (getrusage, time.process_time)\n", results[0].xgbVersion)
	}
	fmt.Printf("load average after: %s\n\n", loadAvg())
	return nil
}

// gbdtTrain trains a table's model (max_depth 6, eta 0.3, max_bin 256, as
// bench/gbdt) on one rank and makes the rows it predicts.
func gbdtTrain(ctx context.Context, f flags, name string) (*gbdtTable, error) {
	t := &gbdtTable{name: name}
	params := map[string]any{"max_depth": 6, "eta": 0.3, "max_bin": 256, "seed": 1}
	var train *gbdt.Dataset
	switch name {
	case "binary":
		x, y := benchdata.Binary(f.gbdtTrainRows, 1)
		train = &gbdt.Dataset{X: x, Label: y, Rows: f.gbdtTrainRows, Cols: benchdata.BinaryCols}
		t.x, _ = benchdata.Binary(f.gbdtRows, 1001)
		t.rows, t.cols, t.k = f.gbdtRows, benchdata.BinaryCols, 1
		params["objective"], params["num_boost_round"] = "binary:logistic", f.gbdtRounds
	case "fashion":
		tr, err := format.LoadFashionMNIST(format.DefaultFashionMNISTDir, "train")
		if err != nil {
			return nil, err
		}
		tr = tr.Subset(f.fashionTrain)
		te, err := format.LoadFashionMNIST(format.DefaultFashionMNISTDir, "t10k")
		if err != nil {
			return nil, err
		}
		train = &gbdt.Dataset{X: bytesF32(tr.Images), Rows: tr.N, Cols: tr.Pixels()}
		for _, l := range tr.Labels {
			train.Label = append(train.Label, float32(l))
		}
		t.x, t.rows, t.cols, t.k = bytesF32(te.Images), te.N, te.Pixels(), 10
		params["objective"], params["num_class"], params["num_boost_round"] = "multi:softprob", 10, f.fashionRounds
	default:
		return nil, fmt.Errorf("unknown table %q (binary, fashion)", name)
	}
	pj, _ := json.Marshal(params)
	p, err := gbdt.ParseParams(pj)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	m, _, err := gbdt.Train(ctx, gbdt.Local(), p, train)
	if err != nil {
		return nil, err
	}
	t.model, t.trainRows, t.trainSeconds = m, train.Rows, time.Since(start).Seconds()
	return t, nil
}

func benchGBDTTable(ctx context.Context, f flags, dir string, t *gbdtTable) (gbdtResult, error) {
	res := gbdtResult{t: t}
	model := filepath.Join(dir, t.name+".json")
	mf, err := os.Create(model)
	if err != nil {
		return res, err
	}
	if err := t.model.SaveJSON(mf); err != nil {
		mf.Close()
		return res, err
	}
	if err := mf.Close(); err != nil {
		return res, err
	}
	shape, _ := json.Marshal(map[string]int{"rows": t.rows, "cols": t.cols})
	if err := os.WriteFile(filepath.Join(dir, t.name+".shape.json"), shape, 0o644); err != nil {
		return res, err
	}
	if err := os.WriteFile(filepath.Join(dir, t.name+".x"), f32Bytes(t.x), 0o644); err != nil {
		return res, err
	}
	xp, err := startPeer(f.python, dir, "xgb_peer.py", xgbPeerScript, dir, t.name)
	if err != nil {
		return res, err
	}
	defer xp.close()
	res.xgbVersion = xp.version
	p, err := predict.Load(ctx, model)
	if err != nil {
		return res, err
	}
	defer p.Close()
	in := predict.Batch{Inputs: []predict.Tensor{{Name: "features", Datatype: predict.FP32, Shape: []int{t.rows, t.cols}, FP32: t.x}}}

	// The same predictions: XGBoost's within xgbTolerance of ours.
	out, err := p.Predict(ctx, in)
	if err != nil {
		return res, err
	}
	ours := out[0].FP32
	if t.k == 1 { // binary: p(1)
		ours = make([]float32, t.rows)
		for i := range ours {
			ours[i] = out[0].FP32[2*i+1]
		}
	}
	if line, err := xp.command("check"); err != nil || line != "ok" {
		return res, fmt.Errorf("xgb_peer.py check: %q %v", line, err)
	}
	ref, err := readF32(filepath.Join(dir, t.name+".pred"))
	if err != nil {
		return res, err
	}
	if len(ref) != len(ours) {
		return res, fmt.Errorf("XGBoost gave %d predictions, ours %d", len(ref), len(ours))
	}
	if res.maxDiff = maxDiff(ours, ref); res.maxDiff > xgbTolerance {
		return res, fmt.Errorf("XGBoost's predictions differ from ours by up to %.3g (tolerance %g)", res.maxDiff, xgbTolerance)
	}
	fmt.Printf("%s: XGBoost's predictions within %.1e of ours on all %d rows\n", t.name, res.maxDiff, t.rows)

	procs := runtime.GOMAXPROCS(1)
	defer runtime.GOMAXPROCS(procs)
	for r := range f.rounds {
		var o, oc, x, xc float64
		runOurs := func() error {
			n, start, cpu := 0, time.Now(), cpuSeconds()
			for {
				if _, err := p.Predict(ctx, in); err != nil {
					return err
				}
				n++
				if el := time.Since(start).Seconds(); el >= 1 {
					o, oc = float64(n*t.rows)/el, float64(n*t.rows)/(cpuSeconds()-cpu)
					return nil
				}
			}
		}
		runXGB := func() (err error) {
			x, xc, err = xp.numbers("round")
			return err
		}
		if err := alternate(r, runOurs, runXGB); err != nil {
			return res, err
		}
		res.ours, res.xgb, res.ratios = append(res.ours, o), append(res.xgb, x), append(res.ratios, o/x)
		res.cpuRatios = append(res.cpuRatios, oc/xc)
		fmt.Printf("%s round %d: ours %9.0f rows/s, XGBoost %9.0f rows/s, %.2f×; processor time %.2f×\n", t.name, r+1, o, x, o/x, oc/xc)
	}
	return res, nil
}

func bytesF32(b []byte) []float32 {
	x := make([]float32, len(b))
	for i, v := range b {
		x[i] = float32(v)
	}
	return x
}
