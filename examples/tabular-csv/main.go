// Command tabular-csv trains the built-in tabular-mlp on a CSV table: a
// churn classifier from examples/data, with preprocessors fitted across two
// ranks, on an in-process Temporal dev server. The run is fit.json, the
// same JSON that `starter dev -input`, `starter fit -input` and
// `temporal workflow start --input` take.
//
//	go run ./examples/tabular-csv [-data examples/data] [-storage DIR]
package main

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"

	"github.com/tempotrain/tempotrain/app"
	"github.com/tempotrain/tempotrain/builtin"
	"github.com/tempotrain/tempotrain/examples/internal/local"
	"github.com/tempotrain/tempotrain/train"
)

//go:embed fit.json
var fitJSON []byte

func main() {
	dataDir := local.DataFlag()
	storage := local.StorageFlag()
	flag.Parse()
	if _, err := run(context.Background(), os.Stdout, *dataDir, *storage); err != nil {
		log.Fatal(err)
	}
}

// input reads fit.json. A Fit input names files by absolute paths (every
// worker reads the same name), so the example joins its datasets' file
// names with dataDir, and sets the storage path.
func input(dataDir, storage string) (train.FitInput, error) {
	var in train.FitInput
	dec := json.NewDecoder(bytes.NewReader(fitJSON))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		return in, fmt.Errorf("fit.json: %w", err)
	}
	abs, err := filepath.Abs(dataDir)
	if err != nil {
		return in, err
	}
	for name, d := range in.Datasets {
		d.URI = filepath.Join(abs, d.URI)
		in.Datasets[name] = d
	}
	in.Run.StoragePath = storage
	return in, nil
}

func run(ctx context.Context, out io.Writer, dataDir, storage string) (*train.Result, error) {
	builtin.Register() // mnist-mlp, ..., tabular-mlp, gbdt: what cmd/worker offers
	l, storage, err := local.Start("tabular-csv", app.WorkerOptions{Workflows: true, RankSlots: 2}, storage)
	if err != nil {
		return nil, err
	}
	defer l.Stop()
	in, err := input(dataDir, storage)
	if err != nil {
		return nil, err
	}

	res, err := train.NewTrainerFromInput(l.Client, in).Fit(ctx)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "run %s: %d epochs, train_loss %.3f, valid_accuracy %.3f\n",
		res.Name, res.Reports, res.Metrics["train_loss"], res.Metrics["valid_accuracy"])
	if len(res.BestCheckpoints) > 0 {
		fmt.Fprintf(out, "best checkpoint (valid_accuracy): %s\n", res.BestCheckpoints[0].URI)
	}
	return res, nil
}
