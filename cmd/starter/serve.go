package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/tempotrain/tempotrain/compute"
	"github.com/tempotrain/tempotrain/predict"
)

// runServe serves a checkpoint over the Open Inference Protocol's REST API
// until SIGINT or SIGTERM, then drains in-flight requests.
func runServe(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	var (
		checkpoint = fs.String("checkpoint", "", "URI of a committed checkpoint to serve (required)")
		addr       = fs.String("addr", "127.0.0.1:8000", "host:port to listen on")
		name       = fs.String("name", "", "model name in the URLs (default: the model's, e.g. mnist-mlp)")
		maxBatch   = fs.Int("max-batch", 0, "rows a batched Predict takes at most (default 64)")
		maxWait    = fs.Duration("max-wait", 0, "how long a batch waits for more requests (default 2ms)")
		noBatch    = fs.Bool("no-batching", false, "run every request alone")
		drain      = fs.Duration("drain-timeout", 30*time.Second, "how long a shutdown waits for in-flight requests")
		blas       = fs.Int("blas-threads", 1, "OpenBLAS threads of each prediction (the server already runs one batch per core at once)")
	)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *checkpoint == "" {
		return errors.New("serve: -checkpoint is required (a committed checkpoint's URI, as a Result's checkpoint.uri)")
	}
	if *blas < 1 {
		return fmt.Errorf("serve: -blas-threads %d: want at least 1", *blas)
	}
	compute.SetThreads(*blas)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	p, err := predict.Load(ctx, *checkpoint)
	if err != nil {
		return err
	}
	srv := predict.NewServer(p, predict.ServerOptions{Name: *name, NoBatching: *noBatch,
		Batch: predict.BatcherOptions{MaxBatch: *maxBatch, MaxWait: *maxWait}})
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		_ = srv.Shutdown(context.Background())
		return fmt.Errorf("serve: listen on %s: %w", *addr, err)
	}
	md := p.Metadata()
	model := srv.Status().Name
	slog.Info("serving", "model", model, "checkpoint", md.Checkpoint, "url", "http://"+ln.Addr().String()+"/v2/models/"+model)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		if !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	case <-ctx.Done():
	}
	slog.Info("shutting down: draining in-flight requests", "timeout", *drain)
	sctx, cancel := context.WithTimeout(context.Background(), *drain)
	defer cancel()
	return srv.Shutdown(sctx)
}
