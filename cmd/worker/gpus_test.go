package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"

	"github.com/tempotrain/tempotrain/activities"
	"github.com/tempotrain/tempotrain/app"
	"github.com/tempotrain/tempotrain/train"
)

func TestParseGPUs(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []int
		err  string
	}{
		{in: "", want: nil},
		{in: " ", want: nil},
		{in: "0,x", err: `"x" is not a GPU ordinal`},
		{in: "-1", err: `"-1" is not a GPU ordinal`},
		{in: "1,1", err: "GPU 1 listed twice"},
		// Without -tags cuda a list is refused; with it, this machine's GPUs
		// decide (the test suite runs without the tag).
		{in: "0,1", err: "built without CUDA"},
	} {
		got, err := parseGPUs(c.in)
		switch {
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("parseGPUs(%q) = %v, %v; want an error with %q", c.in, got, err, c.err)
		case c.err == "" && (err != nil || fmt.Sprint(got) != fmt.Sprint(c.want)):
			t.Errorf("parseGPUs(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
}

// A GPU Fit with no GPU worker polling "tempotrain-gpu" fails after the
// schedule-to-start timeout, with an error that names the queue, instead of
// waiting forever; a CPU worker on its own queue does not take the ranks.
func TestGPUFitWithoutGPUWorkerFails(t *testing.T) {
	srv, err := app.StartDevServer(app.DevServerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	c, err := client.Dial(client.Options{HostPort: srv.Address, Logger: log.NewStructuredLogger(logger)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	w, err := app.StartWorker(c, app.WorkerOptions{Workflows: true, TaskQueue: "tq-gpu-test", RankSlots: 2,
		RankQueue: train.DefaultCPUQueue, Activities: activities.Options{ScratchDir: t.TempDir(), Logger: logger}})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	res, err := train.NewTrainer(c, "mnist-cnn", nil, train.ScalingConfig{NumWorkers: 1, UseGPU: true},
		train.RunConfig{Name: "gpu-nobody", StoragePath: t.TempDir(), Failure: train.FailureConfig{StartTimeout: train.Duration(3 * time.Second)}},
		train.WithTaskQueue("tq-gpu-test")).Fit(ctx)
	want := `no worker took it from task queue "tempotrain-gpu" within 3s: is a worker with free rank slots polling that queue?`
	if err == nil || res == nil || !strings.Contains(res.Error, want) {
		t.Fatalf("Fit: res %+v, err %v; want a failed run with %q", res, err, want)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("the run failed after %v, want about the 3s start timeout", d)
	}
}
