package app_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tempotrain/tempotrain/app"
	"github.com/tempotrain/tempotrain/train"
)

func init() {
	// e2e-resources reports what its rank was given.
	train.MustRegister("e2e-resources", func(ctx context.Context, tc *train.Context) error {
		return tc.Report(train.Metrics{"cpus": float64(tc.CPUs()), "gpus": float64(len(tc.Devices())), "device": float64(tc.Device())}, nil)
	})
}

// TestE2EResourcesPerWorker: a worker with 2 CPUs runs the ranks of runs
// that ask for 2 CPUs (one rank) or 1 CPU each (two ranks at once), each
// rank seeing its CPUs; a run that asks for 64 fails after its start
// timeout, naming the resources and the queue no worker polled.
func TestE2EResourcesPerWorker(t *testing.T) {
	tq, rq := startWorkerOn(t, cl, true, 2, func(o *app.WorkerOptions) { o.Activities.CPUs = 2 })
	fitRes := func(name string, n int, cpu float64) (*train.Result, error) {
		ctx, cancel := context.WithTimeout(context.Background(), fitTimeout)
		defer cancel()
		return train.NewTrainer(cl, "e2e-resources", nil,
			train.ScalingConfig{NumWorkers: n, TaskQueue: rq, ResourcesPerWorker: map[string]float64{"CPU": cpu}},
			train.RunConfig{Name: name, StoragePath: t.TempDir(), Failure: train.FailureConfig{StartTimeout: train.Duration(3 * time.Second)}},
			train.WithTaskQueue(tq)).Fit(ctx)
	}
	for _, tt := range []struct {
		n   int
		cpu float64
	}{{1, 2}, {2, 1}} {
		res, err := fitRes("fits", tt.n, tt.cpu)
		if err != nil {
			t.Fatalf("%d ranks of {CPU: %g} on a worker with 2 CPUs: %v", tt.n, tt.cpu, err)
		}
		if res.Metrics["cpus"] != tt.cpu || res.Metrics["gpus"] != 0 || res.Metrics["device"] != -1 {
			t.Errorf("%d ranks of {CPU: %g}: the function saw %v, want cpus %g, no GPU", tt.n, tt.cpu, res.Metrics, tt.cpu)
		}
	}

	start := time.Now()
	res, err := fitRes("too-big", 1, 64)
	if err == nil || res == nil {
		t.Fatalf("a run of {CPU: 64} on a worker with 2: err %v res %+v, want a failed run", err, res)
	}
	want := `no worker with resources {CPU: 64} took it from task queue "` + rq + `@cpu64" within 3s`
	if !strings.Contains(res.Error, want) {
		t.Errorf("Result.Error %q, want it to contain %q", res.Error, want)
	}
	if d := time.Since(start); d < 3*time.Second || d > time.Minute {
		t.Errorf("the run failed after %v, want about its 3s start timeout", d)
	}
}
