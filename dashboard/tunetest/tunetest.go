// Package tunetest is a small real search for tests (the dashboard's): a
// train function of a tiny made-up model, registered as Func, and a Tune
// of 5 trials over it that stops some trials early.
package tunetest

import (
	"context"
	"encoding/json"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/tempotrain/tempotrain/train"
)

// Func is the registered name of the train function: each of
// config.epochs epochs, after config.sleep_ms, it reports
// valid_loss = (lr-0.35)² + 0.5/epoch and epoch; lr 0.35 is best.
const Func = "dashboard-tune-tiny"

// Trials and Epochs: the search's size.
const (
	Trials = 5
	Epochs = 6
)

func tinyFn(ctx context.Context, tc *train.Context) error {
	var cfg struct {
		LR      float64 `json:"lr"`
		Epochs  int     `json:"epochs"`
		SleepMS int     `json:"sleep_ms"`
	}
	if err := tc.Config(&cfg); err != nil {
		return err
	}
	for e := 1; e <= cfg.Epochs; e++ {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(cfg.SleepMS) * time.Millisecond):
		}
		f := float64(e)
		if err := tc.Report(train.Metrics{"valid_loss": (cfg.LR-0.35)*(cfg.LR-0.35) + 0.5/f, "epoch": f}, nil); err != nil {
			return err
		}
	}
	return nil
}

func init() { train.MustRegister(Func, tinyFn) }

// Tuner is a search named name of Trials trials of Func over lr (a grid,
// the best first), 2 at a time, ASHA on valid_loss by epoch up to Epochs,
// reduction factor 2: later, worse trials are stopped at a rung. Its
// trials store under store; the Tune and the Fits run on taskQueue, the
// ranks on rankQueue.
func Tuner(cl client.Client, name, store, taskQueue, rankQueue string) (*train.Tuner, error) {
	seed := int64(1)
	return train.NewTuner(cl, train.FitInput{
		TrainFunc: Func, Config: json.RawMessage(`{"epochs": 6, "sleep_ms": 150}`),
		Scaling: train.ScalingConfig{NumWorkers: 1, TaskQueue: rankQueue},
		Run:     train.RunConfig{Name: name, StoragePath: store},
	}, map[string]any{"config.lr": train.GridSearch(0.35, 0.05, 0.8, 0.2, 0.6)},
		train.TuneConfig{Metric: "valid_loss", Mode: "min", NumSamples: 1, MaxConcurrentTrials: 2, Seed: &seed,
			Scheduler: &train.SchedulerConfig{Type: "asha", TimeAttr: "epoch", MaxT: Epochs, GracePeriod: 1, ReductionFactor: 2}},
		train.WithTuneTaskQueue(taskQueue))
}
