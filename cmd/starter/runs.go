package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/tempotrain/tempotrain/dashboard"
)

// runRuns lists Fit runs through Temporal's visibility, with the search
// attributes every Fit upserts: `starter runs -func mnist-mlp -status
// running`, or any visibility query with -query.
func runRuns(args []string) error {
	fs := flag.NewFlagSet("runs", flag.ExitOnError)
	var c conn
	c.flags(fs)
	fn := fs.String("func", "", "only runs of this training function (TempotrainFunc)")
	status := fs.String("status", "", "only runs in this state: running, succeeded, failed, cancelled, stopped (TempotrainStatus)")
	query := fs.String("query", "", "a visibility query of your own, ANDed with the above")
	limit := fs.Int("limit", 50, "at most this many runs, newest first")
	_ = fs.Parse(args)
	q, err := dashboard.RunsQuery(*fn, *status, *query)
	if err != nil {
		return fmt.Errorf("runs: -%w", err)
	}
	cl, err := c.dial()
	if err != nil {
		return err
	}
	defer cl.Close()
	return listRuns(context.Background(), cl, q, *limit, os.Stdout)
}

func listRuns(ctx context.Context, cl client.Client, query string, limit int, out io.Writer) error {
	runs, err := dashboard.ListRuns(ctx, cl, query, limit)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RUN\tFUNCTION\tSTATUS\tATTEMPT\tRANKS\tBEST\tSTARTED\tWORKFLOW ID")
	for _, r := range runs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Name, r.Func, r.Status, orDash(r.Attempt), orDash(r.WorldSize),
			orDash(r.BestScore), r.Start.Local().Format(time.DateTime), r.WorkflowID)
	}
	return tw.Flush()
}

// orDash prints a search attribute a run has not set as "-".
func orDash[T int | float64](v *T) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprint(*v)
}

// runCancel cancels a run: its ranks are cancelled, run.json records it.
func runCancel(args []string) error {
	cl, id, _, err := runTarget("cancel", args)
	if err != nil {
		return err
	}
	defer cl.Close()
	if err := cl.CancelWorkflow(context.Background(), id, ""); err != nil {
		return fmt.Errorf("cancel %s: %w", id, err)
	}
	fmt.Printf("cancellation requested: %s\n", id)
	return nil
}
