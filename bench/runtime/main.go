// Command runtime measures tempotrain's control-plane latencies on the
// embedded server (in-process Temporal dev server, one worker, local storage):
//
//   - start: from Trainer.Start to every rank's first training step;
//   - recovery: from a rank's injected failure to every rank of the next
//     attempt training again (cancel, wait, restart, rendezvous, connect,
//     restore the checkpoint).
//
// It prints the median, minimum and maximum of -n runs of each.
//
//	go run ./bench/runtime -ranks 4 -n 7
//
// With -reports N it measures instead what a report costs rank 0: one
// single-rank run of N reports back to back without checkpoints, one with
// a small checkpoint every -every reports, and that with async_upload; it
// prints each Report's median and 99th percentile and each run's time.
//
//	go run ./bench/runtime -reports 1000 -every 10
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/tempotrain/tempotrain/app"
	"github.com/tempotrain/tempotrain/collective"
	"github.com/tempotrain/tempotrain/train"
)

// stamps records the times ranks reach points of interest.
type stamps struct {
	mu     sync.Mutex
	first  map[int][]time.Time // attempt -> each rank's first step
	failed time.Time
}

var st = &stamps{first: map[int][]time.Time{}}

func (s *stamps) step(attempt int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.first[attempt] = append(s.first[attempt], time.Now())
}

func (s *stamps) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.first = map[int][]time.Time{}
	s.failed = time.Time{}
}

// benchFn trains a few "epochs" of one all-reduce each; rank 1 fails in
// epoch 2 of attempt 1 when failEpoch is set. Rank 0 checkpoints each epoch.
func benchFn(ctx context.Context, tc *train.Context) error {
	var cfg struct{ Epochs, FailEpoch int }
	if err := tc.Config(&cfg); err != nil {
		return err
	}
	start := resumeAt(tc, "epoch")
	buf := make([]float32, 1024)
	for epoch := start; epoch <= cfg.Epochs; epoch++ {
		tc.SetProgress(epoch, 0)
		if err := tc.Comm().AllReduceFloat32(ctx, buf, collective.Mean); err != nil {
			return err
		}
		if epoch == start {
			st.step(tc.Attempt())
		}
		if epoch == cfg.FailEpoch && tc.Attempt() == 1 && tc.WorldRank() == 1 {
			st.mu.Lock()
			st.failed = time.Now()
			st.mu.Unlock()
			return fmt.Errorf("injected failure")
		}
		var ck *train.Checkpoint
		if tc.WorldRank() == 0 {
			var err error
			if ck, err = smallCheckpoint(tc); err != nil {
				return err
			}
		}
		if err := tc.Report(train.Metrics{"epoch": float64(epoch)}, ck); err != nil {
			return err
		}
	}
	return nil
}

// resumeAt is where a function counting with metric goes on: 1, or one
// past the checkpoint it restored.
func resumeAt(tc *train.Context, metric string) int {
	if ck := tc.Checkpoint(); ck != nil {
		return int(ck.Metrics[metric]) + 1
	}
	return 1
}

// smallCheckpoint is a checkpoint of one 7-byte file.
func smallCheckpoint(tc *train.Context) (*train.Checkpoint, error) {
	dir, err := tc.NewCheckpointDir()
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "w"), []byte("weights"), 0o644); err != nil {
		return nil, err
	}
	return train.NewCheckpoint(dir), nil
}

func main() {
	ranks := flag.Int("ranks", 4, "ranks per run")
	n := flag.Int("n", 7, "runs of each measurement")
	reports := flag.Int("reports", 0, "measure instead what each of this many reports costs rank 0")
	every := flag.Int("every", 10, "with -reports: a checkpoint every this many reports")
	flag.Parse()
	train.MustRegister("bench-runtime", benchFn)
	train.MustRegister("bench-reports", reportsFn)
	local, err := app.StartLocal(app.LocalOptions{
		Worker: &app.WorkerOptions{Workflows: true, RankSlots: *ranks},
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer local.Stop()
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})))
	dir, _ := os.MkdirTemp("", "bench-runtime")
	defer os.RemoveAll(dir)
	ctx := context.Background()

	if *reports > 0 {
		// A short run first warms up the server's task queues.
		if err := benchReports(ctx, local, dir, 20, 0, false, false); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		for _, m := range []struct {
			every int
			async bool
		}{{0, false}, {*every, false}, {*every, true}} {
			if err := benchReports(ctx, local, dir, *reports, m.every, m.async, true); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
		}
		return
	}

	var startLat, recovery []time.Duration
	for i := 0; i < *n+1; i++ {
		st.reset()
		t0 := time.Now()
		tr := train.NewTrainer(local.Client, "bench-runtime", map[string]int{"epochs": 2},
			train.ScalingConfig{NumWorkers: *ranks}, train.RunConfig{Name: fmt.Sprintf("start-%d", i), StoragePath: dir})
		if _, err := tr.Fit(ctx); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		if i > 0 { // the first run warms up the server's task queues
			startLat = append(startLat, slices.MaxFunc(st.first[1], time.Time.Compare).Sub(t0))
		}

		st.reset()
		tr = train.NewTrainer(local.Client, "bench-runtime", map[string]int{"epochs": 3, "failepoch": 2},
			train.ScalingConfig{NumWorkers: *ranks}, train.RunConfig{Name: fmt.Sprintf("fail-%d", i), StoragePath: dir,
				Failure: train.FailureConfig{MaxFailures: 1}})
		res, err := tr.Fit(ctx)
		if err != nil || res.Attempts != 2 {
			fmt.Fprintln(os.Stderr, "recovery run:", err, res)
			os.Exit(1)
		}
		if i > 0 {
			recovery = append(recovery, slices.MaxFunc(st.first[2], time.Time.Compare).Sub(st.failed))
		}
	}
	if os.Getenv("BENCH_RAW") != "" {
		fmt.Println("start:", startLat)
		fmt.Println("recovery:", recovery)
	}
	fmt.Printf("embedded server, %d ranks, %d runs each\n", *ranks, *n)
	fmt.Printf("%-44s %s\n", "Fit start -> every rank's first step:", summary(startLat))
	fmt.Printf("%-44s %s\n", "injected rank failure -> all ranks training:", summary(recovery))
}

func summary(d []time.Duration) string {
	slices.Sort(d)
	return fmt.Sprintf("median %6.0f ms  (min %.0f, max %.0f)", ms(d[len(d)/2]), ms(d[0]), ms(d[len(d)-1]))
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
