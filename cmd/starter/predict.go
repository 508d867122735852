package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/train"
)

// predictFlags builds a BatchPredictInput from a JSON file and/or flags: a
// flag given on the command line wins over the file, as for fit.
type predictFlags struct {
	fs                                                       *flag.FlagSet
	file, checkpoint, dataset, datasetFormat, output, format string
	passThrough, outputs, features, label, queue             string
	concurrency, batchSize, maxAttempts                      int
	shardRows                                                int64
	gpu, overwrite                                           bool
	heartbeat                                                time.Duration
}

func (f *predictFlags) register(fs *flag.FlagSet) {
	f.fs = fs
	fs.StringVar(&f.file, "input", "", "JSON file holding a BatchPredictInput (the flags below, when given, override its fields)")
	fs.StringVar(&f.checkpoint, "checkpoint", "", "URI of a committed checkpoint (checkpoint)")
	fs.StringVar(&f.dataset, "dataset", "", `the table to predict: a file, glob or directory, local or "s3://..." (dataset.uri)`)
	fs.StringVar(&f.dataset, "input-uri", "", "same as -dataset")
	fs.StringVar(&f.datasetFormat, "dataset-format", "", "csv or parquet (dataset.format; default: from the files)")
	fs.StringVar(&f.features, "features", "", "comma-separated feature columns of a model that takes a row as one tensor (dataset.features)")
	fs.StringVar(&f.label, "label", "", "a column that is not a feature (dataset.label)")
	fs.StringVar(&f.output, "output", "", `output directory: "/dir" or "s3://bucket/prefix" (output)`)
	fs.StringVar(&f.format, "format", "", "output format: parquet or csv (format; default parquet)")
	fs.IntVar(&f.concurrency, "concurrency", 0, "shards predicted at once (concurrency; default 4)")
	fs.StringVar(&f.passThrough, "pass-through", "", "comma-separated input columns copied to the output, first (pass_through)")
	fs.StringVar(&f.outputs, "outputs", "", "comma-separated model outputs to write (outputs; default all)")
	fs.BoolVar(&f.gpu, "gpu", false, "run the shards on the GPU task queue (use_gpu)")
	fs.StringVar(&f.queue, "predict-queue", "", "task queue of the shards (task_queue; default tempotrain-cpu, or tempotrain-gpu with -gpu)")
	fs.Int64Var(&f.shardRows, "shard-rows", 0, "most rows of a Parquet shard, one output file (shard_rows; default 100000)")
	fs.IntVar(&f.batchSize, "batch-size", 0, "rows per Predict call (batch_size; default 1024)")
	fs.DurationVar(&f.heartbeat, "heartbeat-timeout", 0, "a shard silent this long is retried elsewhere (heartbeat_timeout; default 60s)")
	fs.IntVar(&f.maxAttempts, "max-attempts", 0, "attempts of each shard (max_attempts; default 3)")
	fs.BoolVar(&f.overwrite, "overwrite", false, "replace an output that holds a committed BatchPredict (overwrite)")
}

func splitList(s string) []string {
	if strings.TrimSpace(s) == "" {
		return nil
	}
	var out []string
	for _, p := range strings.Split(s, ",") {
		out = append(out, strings.TrimSpace(p))
	}
	return out
}

// build returns the input of the -input file (if any) with the flags given
// on the command line applied.
func (f *predictFlags) build() (api.BatchPredictInput, error) {
	var in api.BatchPredictInput
	if f.fs.NArg() > 0 {
		return in, fmt.Errorf("unexpected argument %q (boolean flags take their value with '=': -gpu=false)", f.fs.Arg(0))
	}
	if f.file != "" {
		b, err := os.ReadFile(f.file)
		if err != nil {
			return in, err
		}
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&in); err != nil {
			return in, fmt.Errorf("-input %s: %w", f.file, err)
		}
	}
	set := map[string]func(){
		"checkpoint":        func() { in.Checkpoint = f.checkpoint },
		"dataset":           func() { in.Dataset.URI = f.dataset },
		"input-uri":         func() { in.Dataset.URI = f.dataset },
		"dataset-format":    func() { in.Dataset.Format = f.datasetFormat },
		"features":          func() { in.Dataset.Features = splitList(f.features) },
		"label":             func() { in.Dataset.Label = f.label },
		"output":            func() { in.Output = f.output },
		"format":            func() { in.Format = f.format },
		"concurrency":       func() { in.Concurrency = f.concurrency },
		"pass-through":      func() { in.PassThrough = splitList(f.passThrough) },
		"outputs":           func() { in.Outputs = splitList(f.outputs) },
		"gpu":               func() { in.UseGPU = f.gpu },
		"predict-queue":     func() { in.TaskQueue = f.queue },
		"shard-rows":        func() { in.ShardRows = f.shardRows },
		"batch-size":        func() { in.BatchSize = f.batchSize },
		"heartbeat-timeout": func() { in.HeartbeatTimeout = api.Duration(f.heartbeat) },
		"max-attempts":      func() { in.MaxAttempts = f.maxAttempts },
		"overwrite":         func() { in.Overwrite = f.overwrite },
	}
	f.fs.Visit(func(fl *flag.Flag) {
		if apply, ok := set[fl.Name]; ok {
			apply()
		}
	})
	return in, nil
}

func runPredict(args []string) error {
	fs := flag.NewFlagSet("predict", flag.ExitOnError)
	var (
		c       conn
		pf      predictFlags
		queue   = fs.String("task-queue", train.DefaultTaskQueue, "task queue of the BatchPredict workflow")
		wfID    = fs.String("workflow-id", "", "workflow ID (default predict-<time>)")
		detach  = fs.Bool("detach", false, "start the workflow and return without waiting")
		printIn = fs.Bool("print-input", false, "print the BatchPredictInput JSON (for temporal workflow start --input) and exit")
	)
	c.flags(fs)
	pf.register(fs)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: starter predict -checkpoint URI -dataset URI -output DIR [flags]\n\n"+
			"Starts a BatchPredict: every row of a CSV or Parquet table through a checkpoint's model, one output file\n"+
			"per shard under -output and a _SUCCESS manifest; prints progress and a summary.\n\n")
		fs.PrintDefaults()
	}
	_ = fs.Parse(args)
	in, err := pf.build()
	if err != nil {
		return err
	}
	if *printIn {
		printJSON(in)
		return nil
	}
	// The workflow validates too; failing here saves a round trip.
	if err := in.WithDefaults().Validate(); err != nil {
		return err
	}
	cl, err := c.dial()
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	id := *wfID
	if id == "" {
		id = "predict-" + time.Now().UTC().Format("20060102-150405.000")
	}
	run, err := cl.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: *queue}, api.BatchPredictWorkflowType, in)
	if err != nil {
		return fmt.Errorf("start BatchPredict: %w", err)
	}
	fmt.Printf("started BatchPredict: workflow %s (run ID %s)\n", run.GetID(), run.GetRunID())
	if *detach {
		return nil
	}
	res, err := watchPredict(ctx, cl, run)
	if res != nil {
		printJSON(res)
		if res.Error == "" {
			fmt.Printf("predicted %d rows in %d shards (%d retried) in %.1fs: %s\n", res.RowsOut, res.Shards, res.Retried, res.Seconds, res.Manifest)
		}
	}
	return err
}

// watchPredict prints a BatchPredict's progress until it ends and returns
// its result (on failure, the result so far, from the error's details).
func watchPredict(ctx context.Context, cl client.Client, run client.WorkflowRun) (*api.BatchPredictResult, error) {
	start := time.Now()
	done := make(chan struct{})
	var res api.BatchPredictResult
	var err error
	go func() {
		defer close(done)
		err = run.Get(ctx, &res)
	}()
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	last := ""
	for {
		select {
		case <-done:
			if err != nil {
				var app *temporal.ApplicationError
				if !errors.As(err, &app) {
					return nil, err
				}
				msg := fmt.Errorf("BatchPredict %s failed (%s): %s", run.GetID(), app.Type(), app.Message())
				var failed api.BatchPredictResult
				if app.HasDetails() && app.Details(&failed) == nil {
					return &failed, msg
				}
				return nil, msg
			}
			return &res, nil
		case <-t.C:
		}
		line := predictProgress(ctx, cl, run.GetID())
		if line != "" && line != last {
			fmt.Printf("[%6.1fs] %s\n", time.Since(start).Seconds(), line)
			last = line
		}
	}
}

// predictProgress is one line of progress: the status Query's shards and
// committed rows, and the rows the running shards' heartbeats report.
func predictProgress(ctx context.Context, cl client.Client, id string) string {
	v, err := cl.QueryWorkflow(ctx, id, "", api.QueryBatchPredictStatus)
	if err != nil {
		return ""
	}
	var st api.BatchPredictStatus
	if v.Get(&st) != nil {
		return ""
	}
	if st.Phase == "plan" {
		return "planning: loading the model, reading the dataset's schema"
	}
	var inFlight int64
	if d, err := cl.DescribeWorkflowExecution(ctx, id, ""); err == nil {
		for _, pa := range d.GetPendingActivities() {
			if pa.GetActivityType().GetName() != api.ActivityPredictShard || pa.GetHeartbeatDetails() == nil {
				continue
			}
			var p api.PredictProgress
			if decodeFirst(pa.GetHeartbeatDetails().GetPayloads()[0].GetData(), &p) == nil {
				inFlight += p.Rows
			}
		}
	}
	total := "?"
	if st.RowsIn >= 0 {
		total = fmt.Sprint(st.RowsIn)
	}
	line := fmt.Sprintf("%s: %d/%d shards done, %d running; rows %d committed + %d in flight of %s",
		st.Phase, st.Done, st.Shards, st.Running, st.RowsDone, inFlight, total)
	if st.Retried > 0 {
		line += fmt.Sprintf("; %d shard(s) retried", st.Retried)
	}
	return line
}
