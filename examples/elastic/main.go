// Command elastic runs an elastic Fit (min 1, max 2 ranks) on two workers
// of an in-process Temporal dev server, then stops one worker as a spot
// reclaim or a Kubernetes drain would (its ranks are told, the group
// checkpoints at its next step, the attempt ends as preempted), and starts
// another: the run shrinks to one rank without a failure and grows back to
// two at a checkpoint after the new worker stood by. The training function
// is the built-in tabular-mlp on examples/data, with one hook: the
// one-rank attempt holds at a step until worker C stands by, and then
// trains 3.5 s longer, so that the run grows before it ends however fast
// the machine trains this small table.
//
//	go run ./examples/elastic [-data examples/data] [-epochs 30] [-storage DIR]
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tempotrain/tempotrain/app"
	"github.com/tempotrain/tempotrain/builtin"
	"github.com/tempotrain/tempotrain/examples/internal/local"
	"github.com/tempotrain/tempotrain/train"
)

// standby is closed once worker C stands by for the run.
var standby = make(chan struct{})

// holdForStandby is tabular-mlp's AfterStep hook: the first step of an
// attempt on one rank waits for a standby (at most a minute), then 3.5 s,
// past the 3 s a standby waits before the run grows at a checkpoint.
func holdForStandby(tc *train.Context, epoch, step int) error {
	if tc.Attempt() == 1 && tc.WorldSize() == 2 && epoch >= 2 {
		return holdForStop(tc)
	}
	if tc.WorldSize() != 1 || tc.Attempt() != 2 || step != 1 || holding.Swap(true) {
		return nil
	}
	select {
	case <-standby:
		time.Sleep(3500 * time.Millisecond)
	case <-time.After(time.Minute):
	}
	return nil
}

var holding atomic.Bool

// stopSeen is closed once the rank on the stopping worker sees its stop.
var (
	stopSeen     = make(chan struct{})
	stopSeenOnce sync.Once
)

// holdForStop holds both ranks of attempt 1, from its third epoch on, until
// the rank on worker B sees that worker stop (at most a minute): on a fast
// machine the 30 epochs would otherwise end before the stop reached them,
// and the run would finish without the preemption the example shows.
func holdForStop(tc *train.Context) error {
	select {
	case <-tc.Preempted():
		stopSeenOnce.Do(func() { close(stopSeen) })
	case <-stopSeen:
	case <-time.After(time.Minute):
	}
	return nil
}

func init() {
	train.MustRegister("elastic-churn", builtin.FuncWith(builtin.TabularMLP, builtin.Options{AfterStep: holdForStandby}))
}

func main() {
	dataDir := flag.String("data", "examples/data", "directory of churn_train.csv")
	epochs := flag.Int("epochs", 30, "epochs")
	storage := local.StorageFlag()
	flag.Parse()
	if _, err := run(context.Background(), os.Stdout, *dataDir, *epochs, *storage); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, out io.Writer, dataDir string, epochs int, storage string) (*train.Result, error) {
	abs, err := filepath.Abs(dataDir)
	if err != nil {
		return nil, err
	}
	builtin.Register()
	// Worker A: the workflow side and one rank slot.
	l, storage, err := local.Start("elastic", app.WorkerOptions{Workflows: true, RankSlots: 1}, storage)
	if err != nil {
		return nil, err
	}
	defer l.Stop()
	// Worker B: one rank slot, as another machine would run `cmd/worker -rank-slots 1`.
	b, err := app.StartWorker(l.Client, app.WorkerOptions{RankSlots: 1})
	if err != nil {
		return nil, err
	}

	cfg := map[string]any{"epochs": epochs, "batch_size": 16, "hidden": []int{16}, "optimizer": "adam", "lr": 0.01, "seed": 1}
	run, err := train.NewTrainer(l.Client, "elastic-churn", cfg,
		train.ScalingConfig{MinWorkers: 1, MaxWorkers: 2, LastCall: train.Duration(2 * time.Second)},
		train.RunConfig{Name: "elastic-churn", StoragePath: storage},
		train.WithDatasets(map[string]train.DatasetSpec{"train": {URI: filepath.Join(abs, "churn_train.csv"), Label: "churned"}}),
	).Start(ctx)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "started %s: elastic, 1 to 2 ranks\n", run.Name)

	// Once it trains on two ranks and has reported, stop worker B.
	if _, err := waitFor(ctx, run, func(s *train.Status) bool { return s.WorldSize == 2 && s.Reports >= 2 }); err != nil {
		return nil, err
	}
	fmt.Fprintln(out, "2 ranks training; stopping worker B (as SIGTERM does to cmd/worker)")
	b.Stop()
	st, err := waitFor(ctx, run, func(s *train.Status) bool { return s.Attempt >= 2 && s.WorldSize == 1 })
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "attempt %d goes on with 1 rank, %d failures\n", st.Attempt, st.Failures)

	// Worker C comes: it stands by, and the run grows at a checkpoint.
	c, err := app.StartWorker(l.Client, app.WorkerOptions{RankSlots: 1})
	if err != nil {
		return nil, err
	}
	defer c.Stop()
	if _, err := waitFor(ctx, run, func(s *train.Status) bool { return s.Standbys >= 1 }); err != nil {
		return nil, err
	}
	close(standby)
	fmt.Fprintln(out, "worker C stands by; the run grows back at a checkpoint 3 s or more later")

	res, err := run.Wait(ctx)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "done: world sizes %v, %d attempts, %d failures, train_accuracy %.3f\n",
		res.WorldSizes, res.Attempts, res.Failures, res.Metrics["train_accuracy"])
	return res, nil
}

// waitFor polls the run's status Query until ok says yes.
func waitFor(ctx context.Context, run *train.Run, ok func(*train.Status) bool) (*train.Status, error) {
	for {
		st, err := run.Status(ctx)
		if err == nil && ok(st) {
			return st, nil
		}
		if err == nil && st.Done {
			return nil, fmt.Errorf("run %s ended before the example saw what it waited for (attempt %d, world size %d)", run.Name, st.Attempt, st.WorldSize)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
