package train_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"

	"go.temporal.io/sdk/client"

	"github.com/tempotrain/tempotrain/collective"
	"github.com/tempotrain/tempotrain/train"
)

// A training function runs on every rank: here each rank's number is
// averaged over the ring and reported. The worker binary registers it by
// name before it starts (app.StartWorker, app.StartLocal). app's
// ExampleStartLocal runs this function end to end.
func ExampleMustRegister() {
	train.MustRegister("example-mean", func(ctx context.Context, tc *train.Context) error {
		v := []float32{float32(tc.WorldRank() + 1)} // rank 0 has 1, rank 1 has 2, ...
		if err := tc.Comm().AllReduceFloat32(ctx, v, collective.Mean); err != nil {
			return err
		}
		return tc.Report(train.Metrics{"mean": float64(v[0])}, nil)
	})
}

// NewTrainer starts a Fit on any Temporal server whose workers registered
// the function, and Fit waits for its Result.
func ExampleNewTrainer() {
	c, err := client.Dial(client.Options{HostPort: "localhost:7233"}) // `starter dev -no-run`, or a cluster
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	res, err := train.NewTrainer(c, "mnist-mlp", map[string]any{"epochs": 3, "batch_size": 128, "lr": 0.05},
		train.ScalingConfig{NumWorkers: 2},
		train.RunConfig{Name: "exp-1", StoragePath: "/tmp/runs",
			Failure:    train.FailureConfig{MaxFailures: 2},
			Checkpoint: train.CheckpointConfig{NumToKeep: 2, ScoreAttribute: "test_accuracy"}},
	).Fit(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.Metrics["test_accuracy"], res.BestCheckpoints[0].URI)
}

// A Fit input is plain JSON: the Temporal CLI, the Web UI and a Schedule
// start the same run with it.
func ExampleTrainer_Input() {
	in := train.NewTrainer(nil, "mnist-mlp", map[string]any{"epochs": 2},
		train.ScalingConfig{NumWorkers: 2},
		train.RunConfig{Name: "demo", StoragePath: "/tmp/runs", Failure: train.FailureConfig{MaxFailures: 1}},
	).Input()
	b, err := json.Marshal(in)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(string(b))
	// Output: {"train_func":"mnist-mlp","config":{"epochs":2},"scaling":{"num_workers":2},"run":{"name":"demo","storage_path":"/tmp/runs","failure":{"max_failures":1},"checkpoint":{}}}
}
