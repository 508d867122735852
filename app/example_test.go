package app_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"os"
	"path/filepath"

	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"

	"github.com/tempotrain/tempotrain/app"
	"github.com/tempotrain/tempotrain/collective"
	"github.com/tempotrain/tempotrain/train"
)

// StartLocal is the whole of tempotrain in one process: a Temporal dev
// server, a client of it, and a worker with the workflow side and rank
// slots, as `starter dev` and the examples run it. Local.Client starts
// runs like a client of any cluster: here a function that averages each
// rank's number over the ring, on two ranks.
func ExampleStartLocal() {
	train.MustRegister("example-mean", func(ctx context.Context, tc *train.Context) error {
		v := []float32{float32(tc.WorldRank() + 1)} // rank 0 has 1, rank 1 has 2
		if err := tc.Comm().AllReduceFloat32(ctx, v, collective.Mean); err != nil {
			return err
		}
		return tc.Report(train.Metrics{"mean": float64(v[0])}, nil)
	})
	local, err := app.StartLocal(app.LocalOptions{
		Worker: &app.WorkerOptions{Workflows: true, RankSlots: 2},
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})),
	})
	if err != nil {
		log.Fatal(err)
	}
	defer local.Stop()
	dir, err := os.MkdirTemp("", "example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	res, err := train.NewTrainer(local.Client, "example-mean", nil,
		train.ScalingConfig{NumWorkers: 2},
		train.RunConfig{Name: "example", StoragePath: dir},
	).Fit(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s: mean %.1f, %d report, %d attempt\n", res.Name, res.Metrics["mean"], res.Reports, res.Attempts)
	fmt.Println("Web UI:", local.Server.UIURL != "") // DevServerOptions.UIPort turns it on
	// Output:
	// example: mean 1.5, 1 report, 1 attempt
	// Web UI: false
}

// StartDevServer runs a real Temporal server in-process; with a
// DatabaseFile its workflows outlive the process, and a server started
// again on the same file replays them.
func ExampleStartDevServer() {
	dir, err := os.MkdirTemp("", "example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	srv, err := app.StartDevServer(app.DevServerOptions{DatabaseFile: filepath.Join(dir, "temporal.db")})
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Stop()
	c, err := client.Dial(client.Options{HostPort: srv.Address,
		Logger: sdklog.NewStructuredLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})))})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	_, err = c.CheckHealth(context.Background(), &client.CheckHealthRequest{})
	fmt.Println("healthy:", err == nil)
	// Output: healthy: true
}
