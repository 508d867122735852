// Command gbdt-xgboost trains gradient-boosted trees (the built-in gbdt,
// Ray's XGBoostTrainer) on a CSV table over two ranks of an in-process
// Temporal dev server, then opens the checkpoint's model.json, a model in
// XGBoost's JSON format, as any XGBoost model file: with
// predict.LoadXGBoost here, with xgboost.Booster(model_file=...) in Python.
//
//	go run ./examples/gbdt-xgboost [-data examples/data] [-storage DIR]
package main

import (
	"context"
	"encoding/csv"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"strconv"

	"github.com/tempotrain/tempotrain/app"
	"github.com/tempotrain/tempotrain/builtin"
	"github.com/tempotrain/tempotrain/examples/internal/local"
	"github.com/tempotrain/tempotrain/predict"
	"github.com/tempotrain/tempotrain/train"
)

// features are the columns the trees split on, in the model's order.
var features = []string{"tenure_months", "monthly_charges", "support_calls"}

func main() {
	dataDir := local.DataFlag()
	storage := local.StorageFlag()
	flag.Parse()
	if _, err := run(context.Background(), os.Stdout, *dataDir, *storage); err != nil {
		log.Fatal(err)
	}
}

// outcome is what the example found: the run, its model file, and the
// validation rows with the model's P(churned = yes) for each.
type outcome struct {
	Result *train.Result
	Model  string      // model.json of the run's latest checkpoint
	Rows   [][]float32 // churn_valid.csv's features
	Labels []int64     // 1 for churned = yes
	Prob   []float32   // P(yes) from predict.LoadXGBoost
}

func run(ctx context.Context, out io.Writer, dataDir, storage string) (*outcome, error) {
	abs, err := filepath.Abs(dataDir)
	if err != nil {
		return nil, err
	}
	builtin.Register()
	l, storage, err := local.Start("gbdt", app.WorkerOptions{Workflows: true, RankSlots: 2}, storage)
	if err != nil {
		return nil, err
	}
	defer l.Stop()

	// XGBoost's parameter names and defaults.
	params := map[string]any{"objective": "binary:logistic", "num_boost_round": 30, "eta": 0.3, "max_depth": 3,
		"eval_metric": []string{"logloss", "auc"}, "checkpoint_every": 10}
	datasets := map[string]train.DatasetSpec{
		"train": {URI: filepath.Join(abs, "churn_train.csv"), Label: "churned", Features: features},
		"valid": {URI: filepath.Join(abs, "churn_valid.csv"), Label: "churned", Features: features, Remainder: "exact"},
	}
	res, err := train.NewTrainer(l.Client, "gbdt", params, train.ScalingConfig{NumWorkers: 2},
		train.RunConfig{Name: "churn-gbdt", StoragePath: storage}, train.WithDatasets(datasets)).Fit(ctx)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "run %s: %d rounds reported, valid_auc %.3f, valid_logloss %.3f\n",
		res.Name, res.Reports, res.Metrics["valid_auc"], res.Metrics["valid_logloss"])

	o := &outcome{Result: res, Model: filepath.Join(res.Checkpoint.URI, builtin.GBDTModelFile)}
	if o.Rows, o.Labels, err = readTable(filepath.Join(abs, "churn_valid.csv")); err != nil {
		return nil, err
	}
	f, err := os.Open(o.Model)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	p, err := predict.LoadXGBoost(f) // any XGBoost JSON model file loads the same way
	if err != nil {
		return nil, err
	}
	defer p.Close()
	flat := make([]float32, 0, len(o.Rows)*len(features))
	for _, r := range o.Rows {
		flat = append(flat, r...)
	}
	outs, err := p.Predict(ctx, predict.Batch{Inputs: []predict.Tensor{
		{Name: "features", Datatype: predict.FP32, Shape: []int{len(o.Rows), len(features)}, FP32: flat}}})
	if err != nil {
		return nil, err
	}
	correct := 0
	for _, t := range outs {
		switch t.Name {
		case "probabilities": // [rows, 2]: P(no), P(yes)
			for i := range o.Rows {
				o.Prob = append(o.Prob, t.FP32[2*i+1])
			}
		case "class":
			for i, c := range t.INT64 {
				if c == o.Labels[i] {
					correct++
				}
			}
		}
	}
	fmt.Fprintf(out, "model: %s\n", o.Model)
	fmt.Fprintf(out, "predict.LoadXGBoost on churn_valid.csv: accuracy %.3f over %d rows\n", float64(correct)/float64(len(o.Rows)), len(o.Rows))
	fmt.Fprintf(out, "in Python: xgboost.Booster(model_file=%q).predict(xgboost.DMatrix(X)), X the columns %v\n", o.Model, features)
	return o, nil
}

// readTable reads a churn CSV's feature columns and its label.
func readTable(path string) (rows [][]float32, labels []int64, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil || len(recs) < 2 {
		return nil, nil, fmt.Errorf("%s: %v (%d records)", path, err, len(recs))
	}
	col := map[string]int{}
	for i, h := range recs[0] {
		col[h] = i
	}
	for n, r := range recs[1:] {
		row := make([]float32, len(features))
		for j, name := range features {
			v, err := strconv.ParseFloat(r[col[name]], 32)
			if err != nil {
				return nil, nil, fmt.Errorf("%s: row %d: column %s: %w", path, n+1, name, err)
			}
			row[j] = float32(v)
		}
		rows = append(rows, row)
		var y int64
		if r[col["churned"]] == "yes" {
			y = 1
		}
		labels = append(labels, y)
	}
	return rows, labels, nil
}
