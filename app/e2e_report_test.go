package app_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/train"
)

// reportCosts are how long each Report of e2e-reports took on rank 0.
var reportCosts struct {
	mu sync.Mutex
	d  []time.Duration
}

func init() {
	// e2e-reports makes Reports reports back to back, a small checkpoint
	// with every Every-th, and times each.
	train.MustRegister("e2e-reports", func(ctx context.Context, tc *train.Context) error {
		var cfg struct{ Reports, Every int }
		if err := tc.Config(&cfg); err != nil {
			return err
		}
		for i := 1; i <= cfg.Reports; i++ {
			var ck *train.Checkpoint
			if i%cfg.Every == 0 {
				dir, err := tc.NewCheckpointDir()
				if err != nil {
					return err
				}
				if err := os.WriteFile(filepath.Join(dir, "w"), []byte{byte(i)}, 0o644); err != nil {
					return err
				}
				ck = train.NewCheckpoint(dir)
			}
			t0 := time.Now()
			if err := tc.Report(train.Metrics{"step": float64(i)}, ck); err != nil {
				return err
			}
			if ck == nil && tc.WorldRank() == 0 {
				reportCosts.mu.Lock()
				reportCosts.d = append(reportCosts.d, time.Since(t0))
				reportCosts.mu.Unlock()
			}
		}
		return nil
	})
}

// Rank 0's reports go to the workflow in the background: a report costs
// the training loop its queueing, not an Update's round trip (about 12 ms
// on the embedded server), and those made while an Update is on its way go
// together in the next. Every report is recorded once, in order, with its
// checkpoint.
func TestE2EReportsDoNotWaitForTheWorkflow(t *testing.T) {
	const reports, every = 200, 10
	res, err := fit(t, "e2e-reports", map[string]int{"reports": reports, "every": every}, 2,
		train.RunConfig{Name: "reports", StoragePath: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if res.Reports != reports || res.Checkpoint == nil || res.Checkpoint.Seq != reports/every {
		t.Fatalf("result %+v, want %d reports and checkpoint %d", res, reports, reports/every)
	}
	lines := readMetrics(t, res)
	for i, l := range lines {
		if l.Index != i || l.Metrics["step"] != float64(i+1) || (l.Checkpoint != 0) != ((i+1)%every == 0) {
			t.Fatalf("metrics.jsonl line %d: %+v, want step %d once, in order, a checkpoint every %d", i, l, i+1, every)
		}
	}
	if len(lines) != reports {
		t.Fatalf("metrics.jsonl has %d lines, want %d", len(lines), reports)
	}

	// The workflow took the reports in fewer Updates than reports: several
	// in one reports Update.
	updates := map[string]int{}
	it := cl.GetWorkflowHistory(context.Background(), train.WorkflowID("reports"), "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		if a := ev.GetWorkflowExecutionUpdateAcceptedEventAttributes(); a != nil {
			updates[a.GetAcceptedRequest().GetInput().GetName()]++
		}
	}
	if updates[api.UpdateReports] == 0 || updates[api.UpdateReport]+updates[api.UpdateReports] >= reports {
		t.Errorf("report Updates by name %v for %d reports, want some sent together", updates, reports)
	}
	recordHistory(t, train.WorkflowID("reports"), "", "fit_reports_together")

	reportCosts.mu.Lock()
	d := slices.Clone(reportCosts.d)
	reportCosts.mu.Unlock()
	slices.Sort(d)
	t.Logf("rank 0's Report without a checkpoint: median %v, max %v (%d); Updates %v", d[len(d)/2], d[len(d)-1], len(d), updates)
	if med := d[len(d)/2]; med > 5*time.Millisecond {
		t.Errorf("rank 0's Report took %v (median), want well under an Update's round trip", med)
	}
}
