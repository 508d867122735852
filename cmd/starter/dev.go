package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"syscall"
	"time"

	"github.com/tempotrain/tempotrain/activities"
	"github.com/tempotrain/tempotrain/app"
	"github.com/tempotrain/tempotrain/train"
	"github.com/tempotrain/tempotrain/train/trainrt"
)

// demoConfig is the dev command's default run: data-parallel training on
// Fashion-MNIST.
const demoConfig = `{"epochs":3,"batch_size":128,"lr":0.05,"seed":1}`

func runDev(args []string) error {
	fs := flag.NewFlagSet("dev", flag.ExitOnError)
	var (
		port    = fs.Int("port", 7233, "Temporal frontend port")
		uiPort  = fs.Int("ui-port", 8233, "Web UI port (0: no UI)")
		home    = fs.String("home", ".tempotrain", "directory for the server's SQLite file and the runs")
		slots   = fs.Int("rank-slots", 0, "rank slots of the in-process worker (default: -workers)")
		serve   = fs.Bool("serve", false, "keep the server, UI and worker up after the run, until Ctrl-C")
		noRun   = fs.Bool("no-run", false, "start no run: serve only (implies -serve)")
		dash    = fs.String("dashboard-addr", "localhost:8266", `address of the dashboard ("" for none)`)
		metrics = metricsFlag(fs)
		tuneIn  = fs.String("tune", "", "run the search of this Tune input file (docs/tune.md) instead of a Fit")
		inFlags inputFlags
		py      pythonFlags
	)
	inFlags.register(fs, "")
	py.register(fs)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: starter dev [flags]\n\nStarts a Temporal dev server with its Web UI, a worker and a demo Fit in this process.\n\n")
		fs.PrintDefaults()
	}
	_ = fs.Parse(args)

	abs, err := filepath.Abs(*home)
	if err != nil {
		return err
	}
	in, err := inFlags.build()
	if err != nil {
		return err
	}
	if err := py.apply(&in); err != nil { // a Python run's train_func is "python"
		return err
	}
	if in.TrainFunc == "" {
		in.TrainFunc = "mnist-mlp"
	}
	if len(in.Config) == 0 && in.TrainFunc == "mnist-mlp" {
		in.Config = json.RawMessage(demoConfig)
	}
	if in.Scaling.NumWorkers == 0 && !in.Scaling.Elastic() {
		in.Scaling.NumWorkers = 2
	}
	if in.Run.StoragePath == "" {
		in.Run.StoragePath = filepath.Join(abs, "runs")
	}
	tin, err := devTuneInput(*tuneIn, in.Run.StoragePath)
	if err != nil {
		return err
	}
	if *slots == 0 {
		*slots = in.Scaling.Slots()
		if tin != nil {
			*slots = tuneSlots(*tin)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if !*noRun {
		// A local -working-dir is packed into the run's storage before the
		// server starts: a bad one costs no server start.
		if err := py.upload(ctx, &in, os.Stdout); err != nil {
			return err
		}
	}
	// After the flags' checks, so that a bad flag fails before anything
	// starts or registers. The Python runner is among them: -python runs
	// on this process's worker.
	registerBuiltins()
	stopMetrics, err := startMetrics(*metrics)
	if err != nil {
		return err
	}
	defer stopMetrics()

	t0 := time.Now()
	local, err := app.StartLocal(app.LocalOptions{
		Server:    app.DevServerOptions{Port: *port, UIPort: *uiPort, DatabaseFile: filepath.Join(abs, "temporal.db")},
		Worker:    &app.WorkerOptions{Workflows: true, RankSlots: *slots, Activities: activities.Options{CPUs: runtime.NumCPU()}},
		Telemetry: telemetry,
	})
	if err != nil {
		return err
	}
	defer local.Stop()
	fmt.Printf("Temporal dev server at %s (started in %.1fs), SQLite %s\n", local.Server.Address, time.Since(t0).Seconds(), filepath.Join(abs, "temporal.db"))
	if local.Server.UIURL != "" {
		fmt.Printf("Web UI: %s/namespaces/default/workflows\n", local.Server.UIURL)
	}
	var trainOpts []train.TrainerOption
	if *dash != "" {
		url, shutdown, err := serveDashboard(local.Client, "default", nil, local.Server.UIURL, *dash)
		if err != nil {
			return fmt.Errorf("dev: -dashboard-addr: %w", err)
		}
		defer func() { _ = shutdown() }()
		fmt.Printf("dashboard: %s\n", url)
		trainOpts = append(trainOpts, train.WithDashboard(url))
	}
	fmt.Printf("training functions: %v\n", trainrt.Names())

	if !*noRun && tin != nil {
		if err := devTune(ctx, local.Client, local.Server.UIURL, *tin); err != nil {
			return err
		}
	}
	if !*noRun && tin == nil {
		tr := train.NewTrainerFromInput(local.Client, in, trainOpts...)
		run, err := tr.Start(ctx)
		if err != nil {
			return err
		}
		fmt.Printf("started run %q: workflow %s, %d ranks, storage %s\n", run.Name, run.WorkflowID, in.Scaling.Slots(), in.Run.StoragePath)
		if local.Server.UIURL != "" {
			fmt.Printf("follow it at %s/namespaces/default/workflows/%s\n", local.Server.UIURL, run.WorkflowID)
		}
		res, err := waitAndWatch(ctx, local.Client, run, in)
		if res != nil {
			printResult(os.Stdout, res, false)
		}
		if err != nil {
			return err
		}
	}
	if *serve || *noRun {
		fmt.Println("serving; Ctrl-C to stop")
		<-ctx.Done()
	}
	return nil
}
