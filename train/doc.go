// Package train is tempotrain's public API: Ray Train's concepts, shaped for Go.
//
//   - A training function is a Go function registered by name in the worker
//     binary with Register. Every rank runs it.
//   - A rank (Ray's worker) is one RunRank activity execution; the function
//     sees it through *Context: WorldRank, WorldSize, Config, Report,
//     Checkpoint, Dataset, Comm, ShouldStop, SetProgress.
//   - ScalingConfig says how many ranks and where they run; RunConfig names the
//     run, where it stores checkpoints, and how failures and retention behave.
//   - Trainer starts the Fit workflow on a Temporal server and waits for its
//     Result. The same workflow starts from the Temporal CLI, the Web UI or a
//     Schedule, because its input (FitInput) is plain JSON.
//
// A training function:
//
//	train.MustRegister("my-train", func(ctx context.Context, tc *train.Context) error {
//		var cfg struct{ Epochs int }
//		if err := tc.Config(&cfg); err != nil {
//			return err
//		}
//		for epoch := 0; epoch < cfg.Epochs; epoch++ {
//			tc.SetProgress(epoch, 0)
//			grads := step()
//			if err := tc.Comm().AllReduceFloat32(ctx, grads, collective.Mean); err != nil {
//				return err
//			}
//			if err := tc.Report(train.Metrics{"loss": loss}, nil); err != nil {
//				return err
//			}
//		}
//		return nil
//	})
//
// and a run of it on four ranks:
//
//	res, err := train.NewTrainer(temporalClient, "my-train", map[string]any{"epochs": 10},
//		train.ScalingConfig{NumWorkers: 4}, train.RunConfig{StoragePath: "s3://bucket/runs"}).Fit(ctx)
//
// The run's data types (FitInput, the configs, Result, Checkpoint, Metrics)
// are package api's, shared with the workflow and the worker side; train
// re-exports them under the names above. The package holds no I/O of its own
// besides the Temporal client calls of Trainer. The runtime that drives a
// Context (package activities) reaches it through package train/trainrt,
// which also builds a Context for a test of a training function
// (trainrt.NewContext) without a cluster.
package train
