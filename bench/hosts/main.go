// Command hosts brings up a many-host tempotrain on one machine, for people
// to try faults by hand: N worker hosts as network namespaces on a bridge
// (each with its own address, ranks linked over TCP with shared memory
// off), each running cmd/worker; in the root namespace the Temporal
// server with the Web UI (ui-server, as docker-compose.yml's temporal-ui)
// and the controller. The server is the production one on PostgreSQL
// (internal/pgtemporal: temporal-server and temporal-sql-tool, which
// .ci/setup test builds, and Debian's postgresql), or with -server dev the
// dev server on SQLite. It prints how to start a run and how to break a
// host, and tears everything down on Ctrl-C (namespaces, processes, the
// bridge, the database). Needs root, iproute2 and nftables.
//
//	sudo go run ./bench/hosts -hosts 4
//
// The tests in app/e2e_hosts_test.go make the same hosts (internal/netns).
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"

	uiserver "github.com/temporalio/ui-server/v2/server"
	uiconfig "github.com/temporalio/ui-server/v2/server/config"
	uiserveroptions "github.com/temporalio/ui-server/v2/server/server_options"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"

	"github.com/tempotrain/tempotrain/app"
	"github.com/tempotrain/tempotrain/internal/netns"
	"github.com/tempotrain/tempotrain/internal/pgtemporal"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "hosts:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		n      = flag.Int("hosts", 4, "worker hosts")
		slots  = flag.Int("rank-slots", 1, "rank slots of each host's worker")
		subnet = flag.String("subnet", "10.79.9", "the bridge's /24 (three octets); the root namespace is .1, hosts .2, .3, ...")
		uiPort = flag.Int("ui-port", 8233, "Web UI port (0: none)")
		home   = flag.String("home", ".tempotrain-hosts", "directory for the server's state, the runs and the worker binary")
		server = flag.String("server", "production", "production (temporal-server on PostgreSQL) or dev (the dev server on SQLite)")
	)
	flag.Parse()
	if err := netns.Available(); err != nil {
		return err
	}
	abs, err := filepath.Abs(*home)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return err
	}
	worker := filepath.Join(abs, "worker")
	fmt.Println("building cmd/worker ...")
	if out, err := exec.Command("go", "build", "-o", worker, "./cmd/worker").CombinedOutput(); err != nil {
		return fmt.Errorf("go build ./cmd/worker: %w\n%s", err, out)
	}

	nw, err := netns.New("tthost", *subnet)
	if err != nil {
		return err
	}
	defer nw.Close()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	var address, uiURL string
	switch *server {
	case "dev":
		local, err := app.StartLocal(app.LocalOptions{
			Server: app.DevServerOptions{Port: 7233, UIPort: *uiPort, DatabaseFile: filepath.Join(abs, "temporal.db")},
			// The controller only: the hosts run the ranks.
			Worker: &app.WorkerOptions{Workflows: true},
			Logger: logger,
		})
		if err != nil {
			return err
		}
		defer local.Stop()
		address, uiURL = local.Server.Address, local.Server.UIURL
	case "production":
		fmt.Println("starting PostgreSQL and temporal-server ...")
		pg, err := pgtemporal.Start(context.Background(), pgtemporal.Options{Dir: filepath.Join(abs, "temporal"), SearchAttributes: app.TemporalSearchAttributes(),
			DynamicConfig: pgtemporal.RankQueueConfig})
		if err != nil {
			return err
		}
		defer pg.Close()
		address = pg.Address
		if *uiPort != 0 {
			ui := uiserver.NewServer(uiserveroptions.WithConfigProvider(&uiconfig.Config{
				Host: "127.0.0.1", Port: *uiPort, TemporalGRPCAddress: address, EnableUI: true,
				CORS: uiconfig.CORS{CookieInsecure: true}, HideLogs: true,
			}))
			go func() {
				if err := ui.Start(); err != nil {
					logger.Error("the Web UI stopped", "error", err)
				}
			}()
			defer ui.Stop()
			uiURL = fmt.Sprintf("http://127.0.0.1:%d", *uiPort)
		}
		c, err := client.Dial(client.Options{HostPort: address, Logger: log.NewStructuredLogger(logger)})
		if err != nil {
			return err
		}
		defer c.Close()
		w, err := app.StartWorker(c, app.WorkerOptions{Workflows: true})
		if err != nil {
			return err
		}
		defer w.Stop()
	default:
		return fmt.Errorf("-server %q: production or dev", *server)
	}
	relay, err := netns.NewRelay(nw.BridgeAddr(), address)
	if err != nil {
		return err
	}
	defer relay.Close()

	var procs []*exec.Cmd
	defer func() {
		for _, p := range procs {
			_ = p.Process.Signal(syscall.SIGTERM)
		}
		for _, p := range procs {
			_ = p.Wait()
		}
	}()
	for i := range *n {
		h, err := nw.AddHost()
		if err != nil {
			return err
		}
		cmd := h.Command(worker, "-workflows=false", "-rank-slots", strconv.Itoa(*slots), "-advertise-host", h.Addr, "-node", h.Name,
			"-scratch", filepath.Join(abs, "scratch", h.Name))
		cmd.Env = append(os.Environ(), "TEMPORAL_ADDRESS="+relay.Addr(), "TEMPOTRAIN_COLLECTIVE_SHM=0")
		log, err := os.Create(filepath.Join(abs, h.Name+".log"))
		if err != nil {
			return err
		}
		defer log.Close()
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Start(); err != nil {
			return err
		}
		procs = append(procs, cmd)
		fmt.Printf("host %d: namespace %s, address %s, worker pid %d (log %s)\n", i, h.Name, h.Addr, cmd.Process.Pid, log.Name())
	}
	fmt.Printf(`
Temporal at %s (the hosts reach it at %s); Web UI %s
Start a run on the hosts:
  go run ./cmd/starter fit -address %s -func mnist-mlp -workers %d -storage %s -config '{"epochs":5}' -max-failures 2
Break a host (silent drops, no FIN or RST), and heal it:
  ip netns exec %s nft add rule inet tt fault_in drop; ip netns exec %s nft add rule inet tt fault_out drop
  ip netns exec %s nft flush chain inet tt fault_in; ip netns exec %s nft flush chain inet tt fault_out
Kill a worker: kill -9 <pid above>. Ctrl-C tears everything down.
`, address, relay.Addr(), uiURL, address, *n**slots, filepath.Join(abs, "runs"),
		nw.Hosts()[0].Name, nw.Hosts()[0].Name, nw.Hosts()[0].Name, nw.Hosts()[0].Name)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	fmt.Println("tearing down ...")
	return nil
}
