// Command predict-serve uses a trained model two ways, on an in-process
// Temporal dev server: BatchPredict runs every row of a CSV table through
// a committed checkpoint and writes the predictions beside their rows;
// predict.NewServer answers the Open Inference Protocol (KServe v2 REST),
// as `starter serve` does, and the example sends it one row over HTTP.
// The model is gradient-boosted trees trained first on examples/data.
//
//	go run ./examples/predict-serve [-data examples/data] [-storage DIR]
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"

	"go.temporal.io/sdk/client"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/app"
	"github.com/tempotrain/tempotrain/builtin"
	"github.com/tempotrain/tempotrain/examples/internal/local"
	"github.com/tempotrain/tempotrain/predict"
	"github.com/tempotrain/tempotrain/train"
)

func main() {
	dataDir := local.DataFlag()
	storage := local.StorageFlag()
	flag.Parse()
	if _, err := run(context.Background(), os.Stdout, *dataDir, *storage); err != nil {
		log.Fatal(err)
	}
}

// outcome is what the example produced.
type outcome struct {
	Checkpoint string                  // the model's checkpoint
	Batch      *api.BatchPredictResult // BatchPredict's result
	Answer     map[string]any          // the server's answer to one row
}

func run(ctx context.Context, out io.Writer, dataDir, storage string) (*outcome, error) {
	abs, err := filepath.Abs(dataDir)
	if err != nil {
		return nil, err
	}
	builtin.Register()
	l, storage, err := local.Start("predict-serve", app.WorkerOptions{Workflows: true, RankSlots: 2}, storage)
	if err != nil {
		return nil, err
	}
	defer l.Stop()

	// 1. A model: boosted trees over every column, plan encoded as numbers.
	res, err := train.NewTrainer(l.Client, "gbdt",
		map[string]any{"objective": "binary:logistic", "num_boost_round": 10, "max_depth": 3},
		train.ScalingConfig{NumWorkers: 2}, train.RunConfig{Name: "churn", StoragePath: storage},
		train.WithDatasets(map[string]train.DatasetSpec{"train": {URI: filepath.Join(abs, "churn_train.csv"), Label: "churned"}}),
		train.WithPreprocessors(train.PreprocessorSpec{Type: "ordinal_encoder", Columns: []string{"plan"}}),
	).Fit(ctx)
	if err != nil {
		return nil, err
	}
	o := &outcome{Checkpoint: res.Checkpoint.URI}
	fmt.Fprintf(out, "trained %s: checkpoint %s\n", res.Name, o.Checkpoint)

	// 2. BatchPredict: the same JSON as `starter predict` and `temporal
	// workflow start --type BatchPredict --input ...` take.
	in := api.BatchPredictInput{
		Dataset:     api.DatasetSpec{URI: filepath.Join(abs, "churn_valid.csv")},
		Checkpoint:  o.Checkpoint,
		Output:      filepath.Join(storage, "predictions"),
		Format:      "csv",
		PassThrough: []string{"churned"},
	}
	wr, err := l.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "predict-churn", TaskQueue: train.DefaultTaskQueue},
		api.BatchPredictWorkflowType, in)
	if err != nil {
		return nil, err
	}
	o.Batch = new(api.BatchPredictResult)
	if err := wr.Get(ctx, o.Batch); err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "BatchPredict: %d rows in %d shards, columns %v\n  in %s: %v\n", o.Batch.RowsOut, o.Batch.Shards, columnNames(o.Batch), o.Batch.Output, o.Batch.Files)

	// 3. Serving: what `starter serve -checkpoint URI` runs.
	p, err := predict.Load(ctx, o.Checkpoint)
	if err != nil {
		return nil, err
	}
	srv := predict.NewServer(p, predict.ServerOptions{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	go func() { _ = srv.Serve(ln) }()
	defer func() { _ = srv.Shutdown(context.Background()) }()
	base := "http://" + ln.Addr().String()
	name := p.Metadata().Name
	req := `{"inputs": [
	  {"name": "tenure_months",   "shape": [1], "datatype": "FP32",  "data": [3]},
	  {"name": "monthly_charges", "shape": [1], "datatype": "FP32",  "data": [24.5]},
	  {"name": "plan",            "shape": [1], "datatype": "BYTES", "data": ["basic"]},
	  {"name": "support_calls",   "shape": [1], "datatype": "FP32",  "data": [5]}]}`
	fmt.Fprintf(out, "POST %s/v2/models/%s/infer\n%s\n", base, name, req)
	resp, err := http.Post(base+"/v2/models/"+name+"/infer", "application/json", bytes.NewBufferString(req))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("infer: %s: %s", resp.Status, body)
	}
	fmt.Fprintf(out, "%s\n", body)
	if err := json.Unmarshal(body, &o.Answer); err != nil {
		return nil, fmt.Errorf("infer answered %q: %w", body, err)
	}
	return o, nil
}

func columnNames(r *api.BatchPredictResult) []string {
	var names []string
	for _, c := range r.Columns {
		names = append(names, c.Name)
	}
	return names
}
