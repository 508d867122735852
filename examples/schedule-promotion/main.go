// Command schedule-promotion makes a Temporal Schedule of Fits on an
// in-process dev server, as `starter schedule create` does, and triggers it
// twice: each run warm-starts from the best checkpoint of the schedule's
// last successful run (resume_from "previous-best"), and a run whose best
// checkpoint beats the promoted one by score_attribute is promoted:
// {storage}/{schedule}/promoted.json points at it, and predict.Load,
// BatchPredict and `starter serve` take that file as a checkpoint.
//
//	go run ./examples/schedule-promotion [-storage DIR]
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/app"
	"github.com/tempotrain/tempotrain/collective"
	"github.com/tempotrain/tempotrain/examples/internal/local"
	"github.com/tempotrain/tempotrain/train"
)

// refine moves an estimate halfway to the ranks' mean target each epoch,
// for config.epochs more epochs than its checkpoint holds: a run that
// warm-starts from the last one's best goes on where it stopped.
func refine(ctx context.Context, tc *train.Context) error {
	cfg := struct {
		Epochs int `json:"epochs"`
	}{Epochs: 2}
	if err := tc.Config(&cfg); err != nil {
		return err
	}
	estimate := []float32{0}
	if ck := tc.Checkpoint(); ck != nil { // a warm start, or a restart
		b, err := ck.ReadFile("estimate.json")
		if err == nil {
			err = json.Unmarshal(b, &estimate)
		}
		if err != nil {
			return fmt.Errorf("checkpoint %s: estimate.json: %w", ck.URI, err)
		}
	}
	for epoch := range cfg.Epochs {
		tc.SetProgress(epoch, 0)
		target := []float32{float32(10 * (tc.WorldRank() + 1))} // the ranks' mean: 15 on two ranks
		if err := tc.Comm().AllReduceFloat32(ctx, target, collective.Mean); err != nil {
			return err
		}
		estimate[0] += (target[0] - estimate[0]) / 2
		loss := float64(target[0]-estimate[0]) * float64(target[0]-estimate[0])
		dir, err := tc.NewCheckpointDir()
		if err != nil {
			return err
		}
		b, _ := json.Marshal(estimate)
		if err := os.WriteFile(filepath.Join(dir, "estimate.json"), b, 0o644); err != nil {
			return err
		}
		if err := tc.Report(train.Metrics{"loss": loss, "estimate": float64(estimate[0])}, train.NewCheckpoint(dir)); err != nil {
			return err
		}
	}
	return nil
}

func init() { train.MustRegister("refine", refine) }

func main() {
	storage := local.StorageFlag()
	flag.Parse()
	if _, err := run(context.Background(), os.Stdout, *storage); err != nil {
		log.Fatal(err)
	}
}

// run creates the schedule "nightly", triggers two runs and returns
// promoted.json after each.
func run(ctx context.Context, out io.Writer, storage string) ([]api.Pointer, error) {
	l, storage, err := local.Start("schedule", app.WorkerOptions{Workflows: true, RankSlots: 2}, storage)
	if err != nil {
		return nil, err
	}
	defer l.Stop()

	in := train.NewTrainer(l.Client, "refine", map[string]any{"epochs": 2}, train.ScalingConfig{NumWorkers: 2},
		train.RunConfig{StoragePath: storage, ResumeFrom: api.ResumePreviousBest,
			Checkpoint: train.CheckpointConfig{ScoreAttribute: "loss", ScoreOrder: "min"}}).Input()
	in.Run.Name = "" // each scheduled run is named by its workflow ID: fit-nightly-<time>
	h, err := l.Client.ScheduleClient().Create(ctx, client.ScheduleOptions{
		ID:   "nightly",
		Spec: client.ScheduleSpec{CronExpressions: []string{"0 3 * * *"}},
		Action: &client.ScheduleWorkflowAction{ID: "fit-nightly", Workflow: train.WorkflowType,
			TaskQueue: train.DefaultTaskQueue, Args: []any{in}},
	})
	if err != nil {
		return nil, err
	}
	defer func() { _ = h.Delete(context.Background()) }()
	fmt.Fprintln(out, `schedule "nightly": a Fit of refine at 03:00 every day; triggering two runs now`)

	var promoted []api.Pointer
	for n := 1; n <= 2; n++ {
		// Scheduled workflow IDs carry their start time to the second.
		time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second)))
		if err := h.Trigger(ctx, client.ScheduleTriggerOptions{}); err != nil {
			return nil, err
		}
		wid, err := nthRun(ctx, l.Client, h, n)
		if err != nil {
			return nil, err
		}
		var res api.Result
		if err := l.Client.GetWorkflow(ctx, wid, "").Get(ctx, &res); err != nil {
			return nil, err
		}
		b, err := os.ReadFile(filepath.Join(storage, "nightly", api.PromotedFile))
		if err != nil {
			return nil, err
		}
		p, err := api.ParsePointer(b)
		if err != nil {
			return nil, err
		}
		promoted = append(promoted, p)
		fmt.Fprintf(out, "run %d (%s): estimate %.3f, loss %.4f, promoted %v\n  promoted.json -> %s (loss %.4f)\n",
			n, res.Name, res.Metrics["estimate"], res.Metrics["loss"], res.Promoted, p.Checkpoint, *p.Score)
	}
	return promoted, nil
}

// nthRun waits for the schedule's nth action and returns its workflow ID.
func nthRun(ctx context.Context, c client.Client, h client.ScheduleHandle, n int) (string, error) {
	for {
		d, err := h.Describe(ctx)
		if err != nil {
			return "", err
		}
		if len(d.Info.RecentActions) >= n {
			return d.Info.RecentActions[n-1].StartWorkflowResult.WorkflowID, nil
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("schedule %s: run %d not started: %w", h.GetID(), n, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}
