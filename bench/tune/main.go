// Command tune measures what ASHA early stopping saves a hyperparameter
// search, in one run on the embedded server: the same 27-trial random search
// (same seed, so the same trials) over tabular-mlp (learning rate, hidden
// sizes, batch size) on a generated table (bench/internal/benchdata's
// Binary), with ASHA and without a scheduler. For each: epochs trained,
// wall time, best validation accuracy. Goal: ASHA spends at most 40% of the
// epochs and finds a best within 0.5 points of the full search.
//
// Also the Tune's own overhead: from a trial's end (its last rank's end,
// which frees its rank slot) to the first step of the trial started in its
// place (the next trial's first report time less its epoch time), median
// and max.
//
//	go run ./bench/tune -trials 27 -epochs 27 -concurrent 2
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/app"
	"github.com/tempotrain/tempotrain/bench/internal/benchdata"
	"github.com/tempotrain/tempotrain/bench/internal/hostinfo"
	"github.com/tempotrain/tempotrain/builtin"
	"github.com/tempotrain/tempotrain/storage"
	"github.com/tempotrain/tempotrain/train"
)

func main() {
	var (
		trials     = flag.Int("trials", 27, "trials of each search")
		epochs     = flag.Int("epochs", 27, "epochs of a trial (ASHA's max_t)")
		concurrent = flag.Int("concurrent", 2, "max_concurrent_trials (and rank slots)")
		rows       = flag.Int("rows", 4000, "rows of the train table (a quarter as many validate)")
		seed       = flag.Int64("seed", 1, "the search's seed")
	)
	quiet := hostinfo.Flags(nil)
	flag.Parse()
	host := hostinfo.Start(os.Stdout, quiet)
	if err := run(*trials, *epochs, *concurrent, *rows, *seed); err != nil {
		fmt.Fprintln(os.Stderr, "bench/tune:", err)
		os.Exit(1)
	}
	host.End()
}

type outcome struct {
	name      string
	wall      time.Duration
	epochs    float64
	best      float64
	bestTrial string
	stopped   int
	gaps      []float64 // seconds from a trial's end to its successor's first step
	// parts are each gap's parts: the previous trial's end to the
	// successor's Fit start (negative: it started before, as the Tune
	// stopped the previous one), to its first rank's schedule, to that
	// rank's start on a worker (a free rank slot), to its first step;
	// worst is the largest gap's.
	parts [][4]float64
	worst [4]float64
	// rankLate is the most a trial's last rank ended after the Tune
	// recorded the trial's end (0: never after).
	rankLate float64
	// early counts the trials whose Fit started before the end of the
	// trial they followed.
	early int
}

func run(trials, epochs, concurrent, rows int, seed int64) error {
	builtin.Register()
	dir, err := os.MkdirTemp("", "bench-tune-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if err := writeTable(filepath.Join(dir, "train.csv"), rows, 1); err != nil {
		return err
	}
	if err := writeTable(filepath.Join(dir, "valid.csv"), rows/4, 2); err != nil {
		return err
	}
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	local, err := app.StartLocal(app.LocalOptions{Worker: &app.WorkerOptions{Workflows: true, RankSlots: concurrent}, Logger: quiet})
	if err != nil {
		return err
	}
	defer local.Stop()
	var outs []outcome
	for _, sched := range []*api.SchedulerConfig{
		{Type: "asha", TimeAttr: "epoch", MaxT: float64(epochs), GracePeriod: 1, ReductionFactor: 3},
		nil,
	} {
		name := "fifo"
		if sched != nil {
			name = "asha"
		}
		o, err := search(local, dir, name, trials, epochs, concurrent, seed, sched)
		if err != nil {
			return err
		}
		outs = append(outs, o)
	}
	asha, fifo := outs[0], outs[1]
	fmt.Printf("\n%d-trial random search over tabular-mlp (lr, hidden, batch size), %d epochs each, %d at once, seed %d, %d train rows\n\n",
		trials, epochs, concurrent, seed, rows)
	fmt.Println("| search | epochs trained | wall | best valid_accuracy | best trial | stopped early |")
	fmt.Println("|---|---|---|---|---|---|")
	for _, o := range outs {
		fmt.Printf("| %s | %g | %.1fs | %.4f | %s | %d |\n", o.name, o.epochs, o.wall.Seconds(), o.best, o.bestTrial, o.stopped)
	}
	fmt.Printf("\nASHA/FIFO: %.0f%% of the epochs (goal ≤ 40%%), %.0f%% of the wall time; best %+.2f points (goal within 0.5)\n",
		100*asha.epochs/fifo.epochs, 100*asha.wall.Seconds()/fifo.wall.Seconds(), 100*(asha.best-fifo.best))
	for _, o := range outs {
		slices.Sort(o.gaps)
		if len(o.gaps) > 0 {
			fmt.Printf("%s: a trial's end to its successor's first step: median %.2fs, max %.2fs over %d (goal ≤ 1s)\n",
				o.name, o.gaps[len(o.gaps)/2], o.gaps[len(o.gaps)-1], len(o.gaps))
			fmt.Printf("  the max: %.2fs to the successor's Fit start, %.2fs to its rank's schedule, %.2fs to its start on a worker, %.2fs to its first step\n",
				o.worst[0], o.worst[1], o.worst[2], o.worst[3])
			var med [4]float64
			for k := range med {
				col := make([]float64, len(o.parts))
				for j, p := range o.parts {
					col[j] = p[k]
				}
				slices.Sort(col)
				med[k] = col[len(col)/2]
			}
			fmt.Printf("  medians of the parts: %.2fs, %.2fs, %.2fs, %.2fs; a trial's ranks ended at most %.2fs after the Tune recorded its end; %d Fits started before their predecessor's ranks ended\n",
				med[0], med[1], med[2], med[3], o.rankLate, o.early)
		}
	}
	return nil
}

func search(local *app.Local, dir, name string, trials, epochs, concurrent int, seed int64, sched *api.SchedulerConfig) (outcome, error) {
	runs := filepath.Join(dir, "runs")
	tu, err := train.NewTuner(local.Client, train.FitInput{
		TrainFunc: builtin.TabularMLP, Config: json.RawMessage(fmt.Sprintf(`{"epochs": %d, "seed": 3}`, epochs)),
		Scaling: train.ScalingConfig{NumWorkers: 1},
		Run:     train.RunConfig{Name: name, StoragePath: runs},
		Datasets: map[string]api.DatasetSpec{
			"train": {URI: filepath.Join(dir, "train.csv"), Label: "y"},
			"valid": {URI: filepath.Join(dir, "valid.csv"), Label: "y"},
		},
	}, map[string]any{
		"config.lr":         train.LogUniform(1e-4, 0.3),
		"config.hidden":     train.Choice([]int{16}, []int{64, 32}, []int{128, 64}),
		"config.batch_size": train.Choice(32, 64, 256),
	}, train.TuneConfig{Metric: "valid_accuracy", Mode: "max", NumSamples: trials, MaxConcurrentTrials: concurrent, Seed: &seed, Scheduler: sched})
	if err != nil {
		return outcome{}, err
	}
	start := time.Now()
	res, err := tu.Fit(context.Background())
	if err != nil {
		return outcome{}, err
	}
	o := outcome{name: name, wall: time.Since(start), best: *res.Best.Metric, bestTrial: res.Best.Name}
	type span struct {
		end, first time.Time
		wf         string
		ft         fitTimes
	}
	var spans []span
	for _, tr := range res.Trials {
		o.epochs += tr.Epochs
		if tr.Status == api.TrialStopped {
			o.stopped++
		}
		first, err := firstStep(filepath.Join(runs, name), tr.Name)
		if err != nil {
			// A trial that failed (a loaded machine's heartbeat timeout)
			// has no first step to measure.
			fmt.Fprintf(os.Stderr, "%s: %s %s %s: left out of the gaps: %v\n", name, tr.Name, tr.Status, tr.Error, err)
			continue
		}
		ft, err := fitHistory(local.Client, tr.WorkflowID)
		if err != nil {
			return o, err
		}
		spans = append(spans, span{tr.End, first, tr.WorkflowID, ft})
		// A trial's ranks end before the Tune records its end: their
		// rank slots are free for the next trial by then.
		if late := ft.rankEnd.Sub(tr.End).Seconds(); late > o.rankLate {
			o.rankLate = late
		}
	}
	fmt.Fprintf(os.Stderr, "%s: %d trials, %g epochs, %.1fs, best %s %.4f\n", name, len(res.Trials), o.epochs, o.wall.Seconds(), o.bestTrial, o.best)
	// Each trial that started after another's end: the gap from the
	// latest end before its first step. A trial ends for this when its
	// last rank ends, freeing its rank slot: the Tune starts the next
	// trial of one it stopped as it sends the stop, so that one's Fit may
	// record its end after its successor's first step.
	for _, s := range spans {
		var prev time.Time
		for _, p := range spans {
			if end := p.ft.rankEnd; end.Before(s.first) && end.After(prev) {
				prev = end
			}
		}
		if !prev.IsZero() && s.first.Sub(prev) < time.Minute {
			g := s.first.Sub(prev).Seconds()
			ft := s.ft
			p := [4]float64{ft.started.Sub(prev).Seconds(), ft.rank.Sub(ft.started).Seconds(), ft.ranStart.Sub(ft.rank).Seconds(), s.first.Sub(ft.ranStart).Seconds()}
			if p[0] < 0 {
				o.early++
			}
			if len(o.gaps) == 0 || g > slices.Max(o.gaps) {
				o.worst = p
			}
			o.gaps = append(o.gaps, g)
			o.parts = append(o.parts, p)
		}
	}
	return o, nil
}

// fitTimes are the times of a trial's Fit that its history records.
type fitTimes struct {
	// started: the workflow's start; rank: its first rank's schedule;
	// ranStart: a worker started that rank; rankEnd: the last rank's
	// activity ended (completed, failed, cancelled, timed out).
	started, rank, ranStart, rankEnd time.Time
}

// fitHistory reads a trial's Fit history.
func fitHistory(cl client.Client, wf string) (fitTimes, error) {
	var ft fitTimes
	it := cl.GetWorkflowHistory(context.Background(), wf, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	var rankID int64
	ranks := map[int64]bool{}
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			return ft, err
		}
		at := e.GetEventTime().AsTime()
		switch e.GetEventType() {
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
			ft.started = at
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
			if e.GetActivityTaskScheduledEventAttributes().GetActivityType().GetName() == api.ActivityRunRank {
				ranks[e.GetEventId()] = true
				if ft.rank.IsZero() {
					ft.rank, rankID = at, e.GetEventId()
				}
			}
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_STARTED:
			if rankID != 0 && e.GetActivityTaskStartedEventAttributes().GetScheduledEventId() == rankID {
				ft.ranStart = at
			}
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_COMPLETED, enumspb.EVENT_TYPE_ACTIVITY_TASK_FAILED,
			enumspb.EVENT_TYPE_ACTIVITY_TASK_CANCELED, enumspb.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT:
			var sched int64
			switch {
			case e.GetActivityTaskCompletedEventAttributes() != nil:
				sched = e.GetActivityTaskCompletedEventAttributes().GetScheduledEventId()
			case e.GetActivityTaskFailedEventAttributes() != nil:
				sched = e.GetActivityTaskFailedEventAttributes().GetScheduledEventId()
			case e.GetActivityTaskCanceledEventAttributes() != nil:
				sched = e.GetActivityTaskCanceledEventAttributes().GetScheduledEventId()
			case e.GetActivityTaskTimedOutEventAttributes() != nil:
				sched = e.GetActivityTaskTimedOutEventAttributes().GetScheduledEventId()
			}
			if ranks[sched] && at.After(ft.rankEnd) {
				ft.rankEnd = at
			}
		}
	}
	return ft, nil
}

// firstStep is when a trial's first epoch began: its first end-of-epoch
// report's time less that epoch's time.
func firstStep(storagePath, trial string) (time.Time, error) {
	ctx := context.Background()
	b, err := storage.Open(ctx, storagePath)
	if err != nil {
		return time.Time{}, err
	}
	recs, err := storage.NewRun(b, trial).ReadMetrics(ctx)
	if err != nil || len(recs) == 0 {
		return time.Time{}, fmt.Errorf("%s: metrics: %v (%d reports)", trial, err, len(recs))
	}
	var r api.ReportRecord
	if err := json.Unmarshal(recs[0], &r); err != nil {
		return time.Time{}, fmt.Errorf("%s: metrics.jsonl: %w", trial, err)
	}
	return r.Time.Add(-time.Duration(r.Metrics["epoch_time_s"] * float64(time.Second))), nil
}

// writeTable writes benchdata.Binary's rows as a CSV with label y.
func writeTable(path string, rows int, seed uint64) error {
	x, y := benchdata.Binary(rows, seed)
	var sb strings.Builder
	for c := range benchdata.BinaryCols {
		fmt.Fprintf(&sb, "f%02d,", c)
	}
	sb.WriteString("y\n")
	for i := range rows {
		for c := range benchdata.BinaryCols {
			v := float64(x[i*benchdata.BinaryCols+c])
			if math.IsNaN(v) {
				v = 0
			}
			sb.WriteString(strconv.FormatFloat(v, 'g', 6, 32))
			sb.WriteByte(',')
		}
		sb.WriteString(strconv.Itoa(int(y[i])) + "\n")
	}
	return os.WriteFile(path, []byte(sb.String()), 0o644)
}
