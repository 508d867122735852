// Command worker runs a tempotrain worker: the workflow side (the Fit
// controller and its storage bookkeeping) and/or rank slots that run training
// ranks. Start one per machine; ranks on different machines reach each other
// at the address each worker advertises. The OTEL_* environment variables
// turn tracing and metrics on (see package tracing), e.g.
// OTEL_EXPORTER_OTLP_ENDPOINT=http://jaeger:4318.
//
//	TEMPORAL_ADDRESS=temporal:7233 worker -rank-slots 4 -advertise-host 10.0.0.5
//	worker -ranks=false                 # controller only
//	worker -workflows=false -gpus 0,1   # GPU ranks only (a -tags cuda build)
//	worker -cpus 16 -gpus 0,1,2,3       # what runs with resources_per_worker may take
//	worker -metrics-addr :9464          # Prometheus scrapes http://this-host:9464/metrics
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"

	"github.com/tempotrain/tempotrain/activities"
	"github.com/tempotrain/tempotrain/app"
	"github.com/tempotrain/tempotrain/python"
	"github.com/tempotrain/tempotrain/tracing"
	"github.com/tempotrain/tempotrain/train"
	"github.com/tempotrain/tempotrain/train/trainrt"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}

// run runs the worker that args describe until ctx ends (main's: SIGINT or
// SIGTERM), then stops it as a SIGTERM asks.
func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("worker", flag.ExitOnError)
	var (
		address   = fs.String("address", "", "Temporal frontend host:port (default: the client configuration, TEMPORAL_ADDRESS, or localhost:7233)")
		namespace = fs.String("namespace", "", "Temporal namespace (default: the client configuration, TEMPORAL_NAMESPACE, or default)")
		profile   = fs.String("profile", "", "profile of the Temporal CLI's configuration file (TLS, API key, address; env TEMPORAL_PROFILE)")
		codecKeys = fs.String("codec-keys", "", "key file of the payload encryption codec (env "+app.CodecKeysEnv+"; see README)")
		taskQueue = fs.String("task-queue", train.DefaultTaskQueue, "task queue of the workflow side")
		rankQueue = fs.String("rank-queue", "", "task queue of the rank slots (default "+train.DefaultCPUQueue+", or "+train.DefaultGPUQueue+" with -gpus)")
		wf        = fs.Bool("workflows", true, "run the workflow side (Fit controller, storage bookkeeping)")
		ranks     = fs.Bool("ranks", true, "run rank slots")
		slots     = fs.Int("rank-slots", 4, "ranks this worker runs at once (with -gpus: one per GPU); a run with scaling.ranks_per_process k takes one slot per k ranks")
		predSlots = fs.Int("predict-slots", 0, "BatchPredict shards this worker predicts at once on -predict-queue (default 0: the rank slots predict, on the rank queue)")
		predQueue = fs.String("predict-queue", "", "task queue of the predict slots (default: the rank queue)")
		advertise = fs.String("advertise-host", "", "host or IP other ranks dial to reach this worker's ranks (default: this machine's outbound IP, else 127.0.0.1)")
		listen    = fs.String("listen-host", "", "interface rank listeners bind (default: the advertised host)")
		node      = fs.String("node", "", "node name for local ranks (default: the host name)")
		scratch   = fs.String("scratch", "", "directory for ranks' scratch files (default $TMPDIR/tempotrain)")
		gpus      = fs.String("gpus", "", "comma-separated GPU ordinals, one rank each, or as many as a run's resources_per_worker GPU asks (needs a -tags cuda build)")
		cpus      = fs.Int("cpus", runtime.NumCPU(), "CPUs this worker gives ranks whose run asks for some (scaling.resources_per_worker CPU); it polls the shape queues it can hold")
		logLevel  = fs.String("log-level", "info", "debug, info, warn or error")
		allowPy   = fs.Bool("allow-python", false, "run Python training functions (Fit inputs with \"python\"): whoever can start a workflow can then run code on this worker")
		stopAfter = fs.Duration("stop-timeout", app.DefaultStopTimeout, "on SIGTERM, how long running ranks get to checkpoint at their next step and end before they are cancelled")
		metrics   = fs.String("metrics-addr", "", "host:port to serve Prometheus metrics on, at /metrics (\":9464\"; default none): ranks' step time, samples/s, collectives, checkpoints, restarts, rendezvous, and the Temporal SDK's")
	)
	_ = fs.Parse(args)

	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return fmt.Errorf("-log-level %q: %w", *logLevel, err)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	if err := registerBuiltins(); err != nil {
		return err
	}
	if *allowPy {
		if err := python.Register(python.Options{}); err != nil {
			return err
		}
	}

	devices, err := parseGPUs(*gpus)
	if err != nil {
		return err
	}
	if len(devices) > 0 && *slots > len(devices) {
		*slots = len(devices)
	}
	if !*ranks {
		*slots = 0
	}
	if *cpus < 1 {
		return fmt.Errorf("-cpus %d: must be at least 1", *cpus)
	}
	host := *advertise
	if host == "" {
		host = app.OutboundIP()
	}
	tel, shutdown, err := tracing.Setup(context.Background(), tracing.Config{ServiceName: "tempotrain-worker", MetricsAddr: *metrics})
	if err != nil {
		return err
	}
	defer func() {
		// Flush the spans and metrics still buffered; a collector that is
		// away must not hold the exit up for long.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := shutdown(ctx); err != nil {
			logger.Warn("flushing telemetry", "error", err)
		}
	}()
	conn := app.Connection{Profile: *profile, Address: *address, Namespace: *namespace, CodecKeys: *codecKeys, Logger: log.NewStructuredLogger(logger)}
	copts, err := conn.ClientOptions(tel)
	if err != nil {
		return err
	}
	c, err := client.Dial(copts)
	if err != nil {
		return fmt.Errorf("dial Temporal at %s: %w", copts.HostPort, err)
	}
	defer c.Close()
	w, err := app.StartWorker(c, app.WorkerOptions{Namespace: copts.Namespace,
		Workflows: *wf, TaskQueue: *taskQueue, RankSlots: *slots, RankQueue: *rankQueue,
		PredictSlots: *predSlots, PredictQueue: *predQueue, StopTimeout: *stopAfter,
		Activities: activities.Options{AdvertiseHost: host, ListenHost: *listen, Node: *node, ScratchDir: *scratch, Devices: devices, CPUs: *cpus, Logger: logger, Telemetry: tel},
	})
	if err != nil {
		return err
	}
	logger.Info("worker started", "address", copts.HostPort, "namespace", copts.Namespace, "workflows", *wf,
		"rank_slots", *slots, "cpus", *cpus, "gpus", len(devices), "advertise_host", host, "train_funcs", trainrt.Names(), "tracing", tel.Enabled(), "metrics_addr", tel.MetricsAddr())
	<-ctx.Done()
	logger.Info("stopping: running ranks checkpoint at their next step", "stop_timeout", *stopAfter)
	w.Stop()
	return nil
}
