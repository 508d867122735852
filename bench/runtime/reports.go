package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/tempotrain/tempotrain/app"
	"github.com/tempotrain/tempotrain/train"
)

// reportCosts holds how long each tc.Report of the running reports
// benchmark took on rank 0, plain and with a checkpoint apart.
var reportCosts struct {
	mu          sync.Mutex
	plain, ckpt []time.Duration
}

// reportsFn makes Reports reports back to back on one rank, a small
// checkpoint with every Every-th (none when 0), and times each Report.
func reportsFn(ctx context.Context, tc *train.Context) error {
	var cfg struct{ Reports, Every int }
	if err := tc.Config(&cfg); err != nil {
		return err
	}
	// A run whose history grows long continues as new at a checkpoint:
	// the next attempt goes on from it.
	for i := resumeAt(tc, "step"); i <= cfg.Reports; i++ {
		var ck *train.Checkpoint
		if cfg.Every > 0 && i%cfg.Every == 0 {
			var err error
			if ck, err = smallCheckpoint(tc); err != nil {
				return err
			}
		}
		t0 := time.Now()
		if err := tc.Report(train.Metrics{"step": float64(i), "loss": 1 / float64(i)}, ck); err != nil {
			return err
		}
		d := time.Since(t0)
		reportCosts.mu.Lock()
		if ck != nil {
			reportCosts.ckpt = append(reportCosts.ckpt, d)
		} else {
			reportCosts.plain = append(reportCosts.plain, d)
		}
		reportCosts.mu.Unlock()
	}
	return nil
}

// benchReports runs one single-rank Fit of n reports (a checkpoint every
// every-th) per mode, and prints each Report's cost to the rank and the
// run's time (when print).
func benchReports(ctx context.Context, local *app.Local, dir string, n, every int, async, print bool) error {
	reportCosts.mu.Lock()
	reportCosts.plain, reportCosts.ckpt = nil, nil
	reportCosts.mu.Unlock()
	name := fmt.Sprintf("reports-%d-%d-%v-%d", n, every, async, time.Now().UnixNano())
	t0 := time.Now()
	tr := train.NewTrainer(local.Client, "bench-reports", map[string]int{"reports": n, "every": every},
		train.ScalingConfig{NumWorkers: 1}, train.RunConfig{Name: name, StoragePath: dir,
			Checkpoint: train.CheckpointConfig{AsyncUpload: async}})
	res, err := tr.Fit(ctx)
	if err != nil {
		return err
	}
	total := time.Since(t0)
	// Reports made after the checkpoint an attempt stopped at for a
	// continue-as-new are made again by the next: counted twice.
	if res.Reports < n {
		return fmt.Errorf("run %s recorded %d reports, want %d", name, res.Reports, n)
	}
	if !print {
		return nil
	}
	reportCosts.mu.Lock()
	defer reportCosts.mu.Unlock()
	mode := "no checkpoints"
	if every > 0 {
		mode = fmt.Sprintf("a checkpoint every %d", every)
		if async {
			mode += ", async_upload"
		}
	}
	all := append(slices.Clone(reportCosts.plain), reportCosts.ckpt...)
	fmt.Printf("%d reports, %s: run %.2f s (%d attempts, %d reports recorded); Report %s",
		n, mode, total.Seconds(), res.Attempts, res.Reports, quantiles(all))
	if len(reportCosts.ckpt) > 0 {
		fmt.Printf("; plain %s; with checkpoint %s", quantiles(reportCosts.plain), quantiles(reportCosts.ckpt))
	}
	fmt.Println()
	return nil
}

// quantiles gives the median and 99th percentile of d, in ms.
func quantiles(d []time.Duration) string {
	slices.Sort(d)
	q := func(p float64) float64 { return ms(d[min(len(d)-1, int(p*float64(len(d))))]) }
	return fmt.Sprintf("median %.3f ms, p99 %.3f ms", q(0.5), q(0.99))
}
