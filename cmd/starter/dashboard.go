package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/tempotrain/tempotrain/dashboard"
)

// runDashboard serves the dashboard (package dashboard) of the runs of a
// Temporal server until Ctrl-C.
func runDashboard(args []string) error {
	fs := flag.NewFlagSet("dashboard", flag.ExitOnError)
	var c conn
	c.flags(fs)
	addr := fs.String("addr", "localhost:8266", "address the dashboard listens on")
	webUI := fs.String("web-ui", "http://localhost:8233", `the Temporal Web UI's base URL, for the links to it ("" for none)`)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: starter dashboard [-addr host:port] [-address temporal:7233] [-web-ui URL]\n\nServes a web page of the runs: their curves, ranks, attempts, checkpoints and logs (docs/dashboard.md).\n\n")
		fs.PrintDefaults()
	}
	_ = fs.Parse(args)
	if fs.NArg() > 0 {
		return fmt.Errorf("dashboard: unexpected argument %q", fs.Arg(0))
	}
	o, err := c.connection().ClientOptions(telemetry)
	if err != nil {
		return err
	}
	cl, err := client.Dial(o)
	if err != nil {
		return fmt.Errorf("dashboard: dial Temporal at %s (namespace %s): %w", o.HostPort, o.Namespace, err)
	}
	defer cl.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	url, shutdown, err := serveDashboard(cl, o.Namespace, o.DataConverter, *webUI, *addr)
	if err != nil {
		return err
	}
	fmt.Printf("dashboard: %s (runs of %s, namespace %s)\n", url, o.HostPort, o.Namespace)
	<-ctx.Done()
	return shutdown()
}

// serveDashboard starts the dashboard of cl's runs on addr and returns
// its URL and how to stop it.
func serveDashboard(cl client.Client, namespace string, dc converter.DataConverter, webUI, addr string) (string, func() error, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("dashboard: listen on %s: %w", addr, err)
	}
	srv := &http.Server{
		Handler:           dashboard.New(dashboard.Options{Client: cl, Namespace: namespace, DataConverter: dc, WebUI: webUI}).Handler(),
		ReadHeaderTimeout: 10 * time.Second,
	}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			fmt.Fprintln(os.Stderr, "dashboard:", err)
		}
	}()
	shutdown := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return srv.Shutdown(ctx)
	}
	return "http://" + ln.Addr().String(), shutdown, nil
}
