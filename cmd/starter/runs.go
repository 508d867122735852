package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/train"
)

// runRuns lists Fit runs through Temporal's visibility, with the search
// attributes every Fit upserts: `starter runs -func mnist-mlp -status
// running`, or any visibility query with -query.
func runRuns(args []string) error {
	fs := flag.NewFlagSet("runs", flag.ExitOnError)
	var c conn
	c.flags(fs)
	fn := fs.String("func", "", "only runs of this training function (TempotrainFunc)")
	status := fs.String("status", "", "only runs in this state: running, succeeded, failed, cancelled (TempotrainStatus)")
	query := fs.String("query", "", "a visibility query of your own, ANDed with the above")
	limit := fs.Int("limit", 50, "at most this many runs, newest first")
	_ = fs.Parse(args)
	q, err := runsQuery(*fn, *status, *query)
	if err != nil {
		return err
	}
	cl, err := c.dial()
	if err != nil {
		return err
	}
	defer cl.Close()
	return listRuns(context.Background(), cl, q, *limit, os.Stdout)
}

// runsQuery builds the visibility query of runRuns.
func runsQuery(fn, status, extra string) (string, error) {
	parts := []string{fmt.Sprintf("WorkflowType = '%s'", train.WorkflowType)}
	if fn != "" {
		parts = append(parts, fmt.Sprintf("%s = '%s'", api.SAFunc, quoteless(fn)))
	}
	if status != "" {
		switch api.RunStatus(status) {
		case api.StatusRunning, api.StatusSucceeded, api.StatusFailed, api.StatusCancelled:
		default:
			return "", fmt.Errorf("runs: -status %q: want running, succeeded, failed or cancelled", status)
		}
		parts = append(parts, fmt.Sprintf("%s = '%s'", api.SAStatus, status))
	}
	if extra != "" {
		parts = append(parts, "("+extra+")")
	}
	return strings.Join(parts, " AND "), nil
}

func quoteless(s string) string { return strings.ReplaceAll(s, "'", "") }

func listRuns(ctx context.Context, cl client.Client, query string, limit int, out io.Writer) error {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RUN\tFUNCTION\tSTATUS\tATTEMPT\tRANKS\tBEST\tSTARTED\tWORKFLOW ID")
	var token []byte
	n := 0
	for n < limit {
		resp, err := cl.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: query, NextPageToken: token, PageSize: int32(min(limit, 100))})
		if err != nil {
			return fmt.Errorf("list runs (%s): %w", query, err)
		}
		for _, e := range resp.GetExecutions() {
			if n == limit {
				break
			}
			sa := e.GetSearchAttributes().GetIndexedFields()
			str := func(name string) string {
				var s string
				if p := sa[name]; p != nil {
					_ = converter.GetDefaultDataConverter().FromPayload(p, &s)
				}
				return s
			}
			num := func(name string) string {
				var v float64
				if p := sa[name]; p != nil && converter.GetDefaultDataConverter().FromPayload(p, &v) == nil {
					return fmt.Sprint(v)
				}
				return "-"
			}
			status := str(api.SAStatus)
			if status == "" {
				status = strings.ToLower(strings.TrimPrefix(e.GetStatus().String(), "WORKFLOW_EXECUTION_STATUS_"))
			}
			name := str(api.SARun)
			if name == "" {
				name = e.GetExecution().GetWorkflowId()
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", name, str(api.SAFunc), status, num(api.SAAttempt), num(api.SAWorldSize),
				num(api.SABestScore), e.GetStartTime().AsTime().Local().Format(time.DateTime), e.GetExecution().GetWorkflowId())
			n++
		}
		if token = resp.GetNextPageToken(); len(token) == 0 {
			break
		}
	}
	return tw.Flush()
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
