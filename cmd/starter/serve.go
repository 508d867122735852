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
	"strings"
	"syscall"
	"time"

	"github.com/tempotrain/tempotrain/compute"
	"github.com/tempotrain/tempotrain/predict"
	"github.com/tempotrain/tempotrain/tracing"
)

// serveTokenEnv names the environment variable that holds serve's bearer
// token (or -token-file: a token on the command line would show in ps).
const serveTokenEnv = "TEMPOTRAIN_SERVE_TOKEN"

// minTokenLen is the shortest token serve takes.
const minTokenLen = 16

// runServe serves a checkpoint over the Open Inference Protocol's REST API
// until SIGINT or SIGTERM, then drains in-flight requests.
func runServe(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	var prefixes []string
	fs.Func("load-prefix", "with -model-control: a URI prefix (a directory, s3://bucket/dir) under which the load endpoint may load checkpoints; repeatable", func(v string) error {
		if strings.TrimSpace(v) == "" {
			return errors.New("an empty prefix")
		}
		prefixes = append(prefixes, v)
		return nil
	})
	var (
		checkpoint = fs.String("checkpoint", "", "URI of a committed checkpoint to serve (required)")
		addr       = fs.String("addr", "127.0.0.1:8000", "host:port to listen on")
		name       = fs.String("name", "", "model name in the URLs (default: the model's, e.g. mnist-mlp)")
		maxBatch   = fs.Int("max-batch", 0, "rows a batched Predict takes at most (default 64)")
		maxWait    = fs.Duration("max-wait", 0, "how long a batch waits for more requests (default 2ms)")
		noBatch    = fs.Bool("no-batching", false, "run every request alone")
		drain      = fs.Duration("drain-timeout", 30*time.Second, "how long a shutdown waits for in-flight requests")
		blas       = fs.Int("blas-threads", 1, "OpenBLAS threads of each prediction (the server already runs one batch per core at once)")
		tokenFile  = fs.String("token-file", "", "file holding the bearer token every request but the health probes must carry (or env "+serveTokenEnv+"); required unless -addr is loopback or -insecure")
		insecure   = fs.Bool("insecure", false, "serve beyond loopback without a token (anyone who reaches the port can predict)")
		control    = fs.Bool("model-control", false, "turn on the repository load and unload endpoints (loads only under -load-prefix)")
		maxBody    = fs.Int64("max-request-bytes", predict.DefaultMaxRequestBytes, "largest request body (413 beyond)")
		maxFlight  = fs.Int64("max-bytes-in-flight", 0, "request body bytes held at once across requests, 503 beyond (default 4 × -max-request-bytes)")
		maxConns   = fs.Int("max-connections", predict.DefaultMaxConnections, "connections open at once; more wait to be accepted")
		readTO     = fs.Duration("read-timeout", predict.DefaultReadTimeout, "longest a request's headers and body may take to arrive")
		writeTO    = fs.Duration("write-timeout", predict.DefaultWriteTimeout, "longest from a request's headers to the end of its response")
		idleTO     = fs.Duration("idle-timeout", predict.DefaultIdleTimeout, "how long a kept-alive connection may wait for its next request")
		metrics    = metricsFlag(fs)
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
	if len(prefixes) > 0 && !*control {
		return errors.New("serve: -load-prefix needs -model-control (the load endpoint is off without it)")
	}
	token, err := serveToken(*tokenFile)
	if err != nil {
		return err
	}
	if token == "" && !*insecure && !loopbackAddr(*addr) {
		return fmt.Errorf("serve: -addr %s is reachable beyond this machine: give a bearer token (-token-file, or env %s), or -insecure to serve it to anyone", *addr, serveTokenEnv)
	}
	compute.SetThreads(*blas)
	stopMetrics, err := startMetrics(*metrics)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	defer stopMetrics()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	p, err := predict.Load(ctx, *checkpoint)
	if err != nil {
		return err
	}
	opts := predict.ServerOptions{Name: *name, NoBatching: *noBatch,
		Batch: predict.BatcherOptions{MaxBatch: *maxBatch, MaxWait: *maxWait}, Token: token,
		ModelControl: *control, LoadPrefixes: prefixes, MaxRequestBytes: *maxBody, MaxBytesInFlight: *maxFlight,
		MaxConnections: *maxConns, ReadTimeout: *readTO, WriteTimeout: *writeTO, IdleTimeout: *idleTO}
	if telemetry.Enabled() { // -metrics-addr, or OTEL_* metrics
		opts.MeterProvider = telemetry.MeterProvider()
	}
	srv := predict.NewServer(p, opts)
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		_ = srv.Shutdown(context.Background())
		return fmt.Errorf("serve: listen on %s: %w", *addr, err)
	}
	md := p.Metadata()
	model := srv.Status().Name
	slog.Info("serving", "model", model, "checkpoint", md.Checkpoint, "url", "http://"+ln.Addr().String()+"/v2/models/"+model,
		"token", token != "", "model_control", *control, "load_prefixes", prefixes)
	if *control && len(prefixes) == 0 {
		slog.Warn("-model-control without -load-prefix: the load endpoint can only reload the current checkpoint")
	}
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

// metricsFlag registers -metrics-addr on fs.
func metricsFlag(fs *flag.FlagSet) *string {
	return fs.String("metrics-addr", "", "host:port to serve Prometheus metrics on, at "+tracing.MetricsPath+` (":9464"; default none: no endpoint)`)
}

// startMetrics serves Prometheus metrics at addr when it is set: it sets
// this process's telemetry up again, with the OTEL_* exporters main set up
// from the environment and the /metrics endpoint, for the command to run
// on. stop flushes it, closes the endpoint and puts main's back.
func startMetrics(addr string) (stop func(), err error) {
	if addr == "" {
		return func() {}, nil
	}
	tel, shutdown, err := tracing.Setup(context.Background(), tracing.Config{ServiceName: "tempotrain-starter", MetricsAddr: addr})
	if err != nil {
		return nil, err
	}
	prev := telemetry
	telemetry = tel
	slog.Info("Prometheus metrics", "url", "http://"+tel.MetricsAddr()+tracing.MetricsPath)
	return func() {
		telemetry = prev
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := shutdown(ctx); err != nil {
			slog.Warn("flushing telemetry", "error", err)
		}
	}, nil
}

// serveToken is the token of -token-file, else of the environment ("" if
// neither gives one).
func serveToken(file string) (string, error) {
	token, from := os.Getenv(serveTokenEnv), serveTokenEnv
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("serve: -token-file: %w", err)
		}
		token, from = string(b), "-token-file "+file
		if strings.TrimSpace(token) == "" {
			return "", fmt.Errorf("serve: %s is empty", from)
		}
	}
	token = strings.TrimSpace(token)
	if token != "" && len(token) < minTokenLen {
		return "", fmt.Errorf("serve: the token of %s has %d characters: want at least %d (head -c 24 /dev/urandom | base64)", from, len(token), minTokenLen)
	}
	return token, nil
}

// loopbackAddr says whether the listen address addr reaches only this
// machine: localhost or a loopback IP. An empty host is every interface.
func loopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	host, _, _ = strings.Cut(host, "%") // a zone
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
