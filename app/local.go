package app

import (
	"fmt"
	"log/slog"
	"os"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"

	"github.com/tempotrain/tempotrain/tracing"
)

// LocalOptions configure StartLocal.
type LocalOptions struct {
	// Server configures the in-process Temporal server.
	Server DevServerOptions
	// Worker configures the in-process worker. Default: the workflow side
	// and 4 rank slots.
	Worker *WorkerOptions
	// Logger for the Temporal client. Default: warnings and errors to stderr.
	Logger *slog.Logger
	// Telemetry traces the client, the worker and its ranks (and gets the
	// SDK's metrics); Worker.Activities.Telemetry defaults to it. Default:
	// off.
	Telemetry *tracing.Telemetry
}

// Local is an in-process Temporal server, a client of it and a worker: the
// whole of tempotrain in one process.
type Local struct {
	Server *Server
	Client client.Client
	Worker *Worker
}

// StartLocal starts a dev server, dials it and starts a worker on it.
func StartLocal(o LocalOptions) (*Local, error) {
	srv, err := StartDevServer(o.Server)
	if err != nil {
		return nil, err
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	copts, err := ClientOptions(client.Options{HostPort: srv.Address, Namespace: namespaceOr(o.Server.Namespace), Logger: log.NewStructuredLogger(o.Logger)}, o.Telemetry)
	if err != nil {
		srv.Stop()
		return nil, err
	}
	c, err := client.Dial(copts)
	if err != nil {
		srv.Stop()
		return nil, fmt.Errorf("app: dial %s: %w", srv.Address, err)
	}
	wo := WorkerOptions{Workflows: true, RankSlots: 4}
	if o.Worker != nil {
		wo = *o.Worker
	}
	if wo.Activities.Telemetry == nil {
		wo.Activities.Telemetry = o.Telemetry
	}
	if wo.Namespace == "" {
		wo.Namespace = namespaceOr(o.Server.Namespace)
	}
	w, err := StartWorker(c, wo)
	if err != nil {
		c.Close()
		srv.Stop()
		return nil, err
	}
	return &Local{Server: srv, Client: c, Worker: w}, nil
}

// Stop stops the worker, the client and the server, in that order.
func (l *Local) Stop() {
	l.Worker.Stop()
	l.Client.Close()
	l.Server.Stop()
}

func namespaceOr(ns string) string {
	if ns == "" {
		return "default"
	}
	return ns
}
