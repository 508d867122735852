// Command starter is tempotrain's command line.
//
//	starter dev      an in-process Temporal dev server (Web UI on :8233), a worker, and a demo run
//	starter fit      start a Fit on any Temporal server, from flags or a JSON input file
//	starter result   print a run's Result
//	starter status   print a running run's progress
//	starter logs     print (or follow) what a run's ranks logged, from its storage
//	starter dashboard  a web page of the runs: live curves, ranks, attempts, checkpoints, logs
//	starter schedule create a Temporal Schedule that starts a Fit periodically
//
// The OTEL_* environment variables turn tracing and metrics on (see package
// tracing): a run's trace starts at the starter's StartWorkflow span.
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/tempotrain/tempotrain/tracing"
)

// telemetry is this process's tracing, set up by main from the environment;
// off unless OTEL_* variables ask for it.
var telemetry = tracing.Noop()

const usage = `usage: starter <command> [flags]

commands:
  dev       run everything in this process: Temporal dev server + Web UI, a worker, a demo Fit
  fit       start a Fit on a Temporal server and wait for its Result
  result    print the Result of a run
  status    print the progress of a run
  logs      print what a run's ranks logged, from its storage (-rank, -attempt, -f to follow)
  metrics   print a run's reports from its storage, as a table or -csv
  plot      draw a run's loss and accuracy curves from its storage into a PNG (restarts marked)
  dashboard serve a web page of the runs: live curves, ranks, attempts, checkpoints, logs (-addr)
  runs      list runs (-func, -status, -query over the Tempotrain* search attributes)
  cancel    cancel a run (-name or -workflow-id)
  schedule  create a Temporal Schedule that starts a Fit on a cron spec
  tune      run a hyperparameter search (trials are Fits, ASHA stops poor ones); tune results -name T
  predict   start a BatchPredict over a dataset and wait for its result
  serve     serve a checkpoint over the Open Inference Protocol (KServe v2 REST)
  codec-server  serve the payload encryption codec for the Web UI and the temporal CLI

run "starter <command> -h" for the flags of a command.
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	cmds := map[string]func([]string) error{
		"dev": runDev, "fit": runFit, "result": runResult, "status": runStatus, "schedule": runSchedule,
		"predict": runPredict, "serve": runServe, "codec-server": runCodecServer,
		"runs": runRuns, "cancel": runCancel, "metrics": runMetrics, "plot": runPlot, "logs": runLogs,
		"dashboard": runDashboard, "tune": runTune,
	}
	cmd, ok := cmds[os.Args[1]]
	if !ok {
		if os.Args[1] == "-h" || os.Args[1] == "--help" || os.Args[1] == "help" {
			fmt.Print(usage)
			return
		}
		fmt.Fprintf(os.Stderr, "starter: unknown command %q\n\n%s", os.Args[1], usage)
		os.Exit(2)
	}
	tel, shutdown, err := tracing.Setup(context.Background(), tracing.Config{ServiceName: "tempotrain-starter"})
	if err != nil {
		fmt.Fprintln(os.Stderr, "starter:", err)
		os.Exit(1)
	}
	telemetry = tel
	err = cmd(os.Args[2:])
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	if ferr := shutdown(ctx); ferr != nil {
		fmt.Fprintln(os.Stderr, "starter: flushing telemetry:", ferr)
	}
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "starter:", err)
		os.Exit(1)
	}
}
