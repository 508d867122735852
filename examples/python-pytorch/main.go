// Command python-pytorch runs a PyTorch training function written for Ray
// Train (train.py beside this file, with ray.train replaced by
// tempotrain.train) on two ranks of an in-process Temporal dev server:
// each rank starts the interpreter with torch's environment, initialises
// the gloo process group, and calls train_func(config); reports and
// checkpoints go through the same commit as a Go function's.
//
//	go run ./examples/python-pytorch [-dir examples/python-pytorch] [-interpreter /usr/bin/python3] [-storage DIR]
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"

	"github.com/tempotrain/tempotrain/app"
	"github.com/tempotrain/tempotrain/examples/internal/local"
	"github.com/tempotrain/tempotrain/python"
	"github.com/tempotrain/tempotrain/train"
)

func main() {
	dir := flag.String("dir", "examples/python-pytorch", "the directory of train.py (the run's working_dir)")
	interp := flag.String("interpreter", "python3", "a Python with torch (Debian's: /usr/bin/python3)")
	storage := local.StorageFlag()
	flag.Parse()
	if _, err := run(context.Background(), os.Stdout, *dir, *interp, *storage); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, out io.Writer, dir, interp, storage string) (*train.Result, error) {
	wd, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	// A worker runs Python functions only when it registers the runner
	// (cmd/worker -allow-python): whoever can start a Fit can then run
	// code on it.
	if err := python.Register(python.Options{}); err != nil {
		return nil, err
	}
	l, storage, err := local.Start("python", app.WorkerOptions{Workflows: true, RankSlots: 2}, storage)
	if err != nil {
		return nil, err
	}
	defer l.Stop()

	spec := train.PythonSpec{Entrypoint: "train.py:train_func", WorkingDir: wd, Interpreter: interp,
		Env: map[string]string{"OMP_NUM_THREADS": "1"}}
	res, err := train.NewTrainer(l.Client, "python", map[string]any{"epochs": 5, "lr": 0.5},
		train.ScalingConfig{NumWorkers: 2},
		train.RunConfig{Name: "python-logreg", StoragePath: storage, Failure: train.FailureConfig{MaxFailures: 1}},
		train.WithPython(spec)).Fit(ctx)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "run %s: %d reports, loss %.3f, accuracy %.3f\ncheckpoint %s\n",
		res.Name, res.Reports, res.Metrics["loss"], res.Metrics["accuracy"], res.Checkpoint.URI)
	fmt.Fprintf(out, "what the ranks printed: go run ./cmd/starter logs -name %s -storage %s\n", res.Name, storage)
	return res, nil
}
