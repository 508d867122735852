package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"

	"go.temporal.io/sdk/client"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/train"
)

// runTune is `starter tune -input tune.json` (start a search and wait for
// its result) and `starter tune results -name T` (print a search's trials).
func runTune(args []string) error {
	if len(args) > 0 && args[0] == "results" {
		return runTuneResults(args[1:])
	}
	if len(args) > 0 && args[0] == "plot" {
		return runTunePlot(args[1:])
	}
	fs := flag.NewFlagSet("tune", flag.ExitOnError)
	var c conn
	c.flags(fs)
	var (
		file    = fs.String("input", "", "the Tune input: a JSON file of {trainer, param_space, tune_config} (required)")
		name    = fs.String("name", "", "name of the search (default: the input's trainer.run.name)")
		queue   = fs.String("task-queue", train.DefaultTaskQueue, "task queue of the Tune workflow and its trials' Fits")
		detach  = fs.Bool("detach", false, "start the search and return without waiting")
		printIn = fs.Bool("print-input", false, "print the Tune input JSON (for temporal workflow start --type Tune --input) and exit")
		asJSON  = fs.Bool("json", false, "print the result as JSON (default: a table)")
		asCSV   = fs.Bool("csv", false, "print the trials as CSV")
	)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "usage: starter tune -input tune.json [flags]\n       starter tune results -name T [-json|-csv]\n       starter tune plot -name T [-metric M] [-o trials.png]\n\n")
		fs.PrintDefaults()
	}
	_ = fs.Parse(args)
	if *file == "" {
		return fmt.Errorf("tune: -input is required (a JSON file of {trainer, param_space, tune_config}; docs/tune.md)")
	}
	in, err := readTuneInput(*file)
	if err != nil {
		return err
	}
	if *name != "" {
		in.Trainer.Run.Name = *name
	}
	if *printIn {
		printJSON(in)
		return nil
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cl, err := c.dial()
	if err != nil {
		return err
	}
	defer cl.Close()
	tu := train.NewTunerFromInput(cl, in, train.WithTuneTaskQueue(*queue))
	s, err := tu.Start(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "started search %q: workflow %s (trials are its child Fit workflows %s-trial_NNNN)\n", s.Name, s.WorkflowID, s.WorkflowID)
	if *detach {
		return nil
	}
	res, err := s.Wait(ctx)
	if res != nil {
		printTuneResult(os.Stdout, res, *asJSON, *asCSV)
	}
	return err
}

// readTuneInput reads a Tune input file; a field it does not know is an
// error (a typo would otherwise be dropped silently).
func readTuneInput(path string) (api.TuneInput, error) {
	var in api.TuneInput
	b, err := os.ReadFile(path)
	if err != nil {
		return in, err
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(&in); err != nil {
		return in, fmt.Errorf("%s: %w", path, err)
	}
	return in, nil
}

func runTuneResults(args []string) error {
	fs := flag.NewFlagSet("tune results", flag.ExitOnError)
	var c conn
	c.flags(fs)
	searchID := searchFlags(fs)
	var (
		asJSON = fs.Bool("json", false, "print the result as JSON")
		asCSV  = fs.Bool("csv", false, "print the trials as CSV")
	)
	_ = fs.Parse(args)
	id, err := searchID()
	if err != nil {
		return fmt.Errorf("tune results: %w", err)
	}
	cl, err := c.dial()
	if err != nil {
		return err
	}
	defer cl.Close()
	res, err := train.GetTuneResult(context.Background(), cl, id)
	if err != nil {
		return err
	}
	printTuneResult(os.Stdout, res, *asJSON, *asCSV)
	return nil
}

// searchFlags registers -name and -workflow-id, and returns what gives the
// search's workflow ID once the flags are parsed.
func searchFlags(fs *flag.FlagSet) func() (string, error) {
	name := fs.String("name", "", "name of the search (its workflow is tune-NAME)")
	wid := fs.String("workflow-id", "", "workflow ID of the search (one started otherwise than by starter tune)")
	return func() (string, error) {
		switch {
		case *wid != "":
			return *wid, nil
		case *name != "":
			return train.TuneWorkflowID(*name), nil
		}
		return "", fmt.Errorf("give -name or -workflow-id")
	}
}

// printTuneResult prints a search's trials, best first: a table, JSON or
// CSV.
func printTuneResult(w io.Writer, r *api.TuneResult, asJSON, asCSV bool) {
	switch {
	case asJSON:
		b, _ := json.MarshalIndent(r, "", "  ")
		fmt.Fprintln(w, string(b))
		return
	case asCSV:
		cw := csv.NewWriter(w)
		_ = cw.Write([]string{"trial", "status", r.Metric, "best_epoch", "epochs", "iterations", "params", "checkpoint", "stop_reason", "error"})
		for _, t := range r.Trials {
			metric := ""
			if t.Metric != nil {
				metric = strconv.FormatFloat(*t.Metric, 'g', -1, 64)
			}
			_ = cw.Write([]string{t.Name, t.Status, metric, strconv.FormatFloat(t.BestEpoch, 'g', -1, 64),
				strconv.FormatFloat(t.Epochs, 'g', -1, 64), strconv.Itoa(t.Iterations), t.ParamString(), t.Checkpoint, t.StopReason, t.Error})
		}
		cw.Flush()
		return
	}
	state := "running"
	if r.Done {
		state = "done"
	}
	fmt.Fprintf(w, "search %s (%s): %s %s, seed %d, %d trials\n", r.Name, state, r.Mode, r.Metric, r.Seed, len(r.Trials))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "TRIAL\tSTATUS\t%s\tAT EPOCH\tEPOCHS\tPARAMS\tNOTE\n", strings.ToUpper(r.Metric))
	for _, t := range r.Trials {
		metric := "-"
		if t.Metric != nil {
			metric = strconv.FormatFloat(*t.Metric, 'g', 6, 64)
		}
		note := t.Error
		if t.Status == api.TrialStopped {
			note = t.StopReason
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%g\t%g\t%s\t%s\n", t.Name, t.Status, metric, t.BestEpoch, t.Epochs, t.ParamString(), note)
	}
	tw.Flush()
	if r.Best != nil {
		fmt.Fprintf(w, "best: %s, %s %g at epoch %g: %s\n", r.Best.Name, r.Metric, *r.Best.Metric, r.Best.BestEpoch, r.Best.Checkpoint)
	}
	if r.BestFile != "" {
		fmt.Fprintf(w, "best.json: %s (starter predict/serve -checkpoint, run.resume_from take it)\n", r.BestFile)
	}
	if r.Error != "" {
		fmt.Fprintf(w, "error: %s\n", r.Error)
	}
}

// devTuneInput reads dev's -tune file (nil without one); a trainer without
// run.storage_path stores under dev's home.
func devTuneInput(path, storage string) (*api.TuneInput, error) {
	if path == "" {
		return nil, nil
	}
	in, err := readTuneInput(path)
	if err != nil {
		return nil, err
	}
	if in.Trainer.Run.StoragePath == "" {
		in.Trainer.Run.StoragePath = storage
	}
	return &in, nil
}

// tuneSlots is how many rank slots run a search's trials at once: its
// concurrent trials times each one's ranks (4 trials when unbounded).
func tuneSlots(in api.TuneInput) int {
	n := in.TuneConfig.MaxConcurrentTrials
	if n == 0 {
		n = 4
	}
	return n * max(in.Trainer.Scaling.Slots(), 1)
}

// devTune runs dev's search and prints its result.
func devTune(ctx context.Context, cl client.Client, uiURL string, in api.TuneInput) error {
	s, err := train.NewTunerFromInput(cl, in).Start(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("started search %q: workflow %s, storage %s\n", s.Name, s.WorkflowID, api.JoinStorage(in.Trainer.Run.StoragePath, s.Name))
	if uiURL != "" {
		fmt.Printf("follow it and its trials at %s/namespaces/default/workflows/%s\n", uiURL, s.WorkflowID)
	}
	res, err := s.Wait(ctx)
	if res != nil {
		printTuneResult(os.Stdout, res, false, false)
	}
	return err
}
