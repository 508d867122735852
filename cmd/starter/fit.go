package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"go.temporal.io/sdk/client"

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
	res, err := waitAndWatch(ctx, cl, run, input)
	if res != nil {
		printResult(os.Stdout, res, *asJSON)
	}
	return err
}

// runTarget parses the flags of a command that names one run, and dials.
func runTarget(cmd string, args []string, extra ...func(*flag.FlagSet)) (client.Client, string, string, error) {
	fs := flag.NewFlagSet(cmd, flag.ExitOnError)
	var c conn
	c.flags(fs)
	for _, e := range extra {
		e(fs)
	}
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
	var asJSON bool
	cl, id, _, err := runTarget("status", args, func(fs *flag.FlagSet) {
		fs.BoolVar(&asJSON, "json", false, "print the status as JSON (default: tables)")
	})
	if err != nil {
		return err
	}
	defer cl.Close()
	st, err := train.StatusOf(context.Background(), cl, id)
	if st == nil {
		return err
	}
	if asJSON {
		printJSON(st)
	} else {
		printStatus(os.Stdout, st, time.Now())
	}
	return err
}

// printStatus writes a run's status as tables: the run, its ranks (from
// their heartbeats) and its attempts.
func printStatus(w io.Writer, st *train.Status, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	state := "running"
	if st.Done {
		state = "finished"
	}
	fmt.Fprintf(tw, "run\t%s (%s)\n", st.Name, state)
	fmt.Fprintf(tw, "now\t%s, epoch %d\n", summary(st), epochsDone(st))
	fmt.Fprintf(tw, "reports\t%d\t%s\n", st.Reports, fmtMetrics(st.Latest))
	if st.Checkpoint != nil {
		fmt.Fprintf(tw, "checkpoint\t%d\t%s\n", st.Checkpoint.Seq, st.Checkpoint.URI)
	}
	_ = tw.Flush()
	if len(st.Ranks) > 0 {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ATTEMPT\tRANK\tPHASE\tEPOCH\tSTEP\tSAMPLES\tSAMPLES/S\tCKPT\tHEARTBEAT\tSTATE\tWORKER")
		for _, r := range st.Ranks {
			rank := fmt.Sprint(r.Rank)
			if r.Rank < 0 {
				rank = "standby"
			}
			hb := "-"
			if !r.LastHeartbeat.IsZero() {
				hb = now.Sub(r.LastHeartbeat).Round(100*time.Millisecond).String() + " ago"
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\t%d\t%.0f\t%d\t%s\t%s\t%s\n", r.Attempt, rank, r.Phase, r.Epoch, r.Step, r.Samples, r.SamplesPerSec, r.Checkpoint, hb, r.State, r.Worker)
		}
		_ = tw.Flush()
	}
	if len(st.History) > 0 {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ATTEMPT\tWORLD\tSTART\tTOOK\tRESUMED FROM\tENDED")
		for _, h := range st.History {
			took, ended := "running", ""
			if !h.End.IsZero() {
				took = h.End.Sub(h.Start).Round(100 * time.Millisecond).String()
				ended = "ok"
				if h.Error != "" {
					ended = clipLine(h.Error, 100)
				}
			}
			fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%d\t%s\n", h.Attempt, h.WorldSize, h.Start.Local().Format("15:04:05"), took, h.ResumedFrom, ended)
		}
		_ = tw.Flush()
	}
}

// clipLine keeps the first line of s, at most n bytes.
func clipLine(s string, n int) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > n {
		s = s[:n] + "..."
	}
	return s
}
