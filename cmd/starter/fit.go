package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"go.temporal.io/sdk/client"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/train"
)

func runFit(args []string) error {
	fs := flag.NewFlagSet("fit", flag.ExitOnError)
	var (
		c       conn
		in      inputFlags
		queue   = fs.String("task-queue", train.DefaultTaskQueue, "task queue of the Fit workflow")
		detach  = fs.Bool("detach", false, "start the run and return without waiting")
		asJSONL = fs.Bool("print-input", false, "print the FitInput JSON (for temporal workflow start --input) and exit")
		asJSON  = fs.Bool("json", false, "print the Result as JSON (default: a short table)")
	)
	c.flags(fs)
	in.register(fs, "")
	_ = fs.Parse(args)
	input, err := in.build()
	if err != nil {
		return err
	}
	if *asJSONL {
		printJSON(input)
		return nil
	}
	cl, err := c.dial()
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	tr := train.NewTrainerFromInput(cl, input, train.WithTaskQueue(*queue))
	run, err := tr.Start(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("started run %q: workflow %s (run ID %s)\n", run.Name, run.WorkflowID, run.RunID)
	if *detach {
		return nil
	}
	res, err := waitAndWatch(ctx, cl, run)
	if res != nil {
		printResult(os.Stdout, res, *asJSON)
	}
	return err
}

// runTarget parses the flags of a command that names one run, and dials.
func runTarget(cmd string, args []string) (client.Client, string, string, error) {
	fs := flag.NewFlagSet(cmd, flag.ExitOnError)
	var c conn
	c.flags(fs)
	name := fs.String("name", "", "run name (its workflow is fit-<name>)")
	wfID := fs.String("workflow-id", "", "workflow ID of a Fit started another way (CLI, UI, Schedule)")
	_ = fs.Parse(args)
	if *name == "" && *wfID == "" {
		return nil, "", "", fmt.Errorf("%s: give -name or -workflow-id", cmd)
	}
	cl, err := c.dial()
	if err != nil {
		return nil, "", "", err
	}
	id := *wfID
	if id == "" {
		id = train.WorkflowID(*name)
	}
	return cl, id, *name, nil
}

func runResult(args []string) error {
	cl, id, name, err := runTarget("result", args)
	if err != nil {
		return err
	}
	defer cl.Close()
	res, err := train.GetResultByWorkflowID(context.Background(), cl, id, name)
	if res != nil {
		printJSON(res)
	}
	return err
}

func runStatus(args []string) error {
	cl, id, _, err := runTarget("status", args)
	if err != nil {
		return err
	}
	defer cl.Close()
	v, err := cl.QueryWorkflow(context.Background(), id, "", api.QueryStatus)
	if err != nil {
		return fmt.Errorf("status of %s: %w", id, err)
	}
	var st api.Status
	if err := v.Get(&st); err != nil {
		return err
	}
	printJSON(st)
	return nil
}
