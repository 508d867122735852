// Command go-function trains a training function of its own, written in Go,
// on two ranks of an in-process Temporal dev server: a line y = 3x + 1
// fitted by gradient descent, gradients averaged over the ranks' ring,
// a checkpoint each epoch.
//
//	go run ./examples/go-function [-epochs 60] [-ranks 2] [-storage DIR]
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

	"github.com/tempotrain/tempotrain/app"
	"github.com/tempotrain/tempotrain/collective"
	"github.com/tempotrain/tempotrain/examples/internal/local"
	"github.com/tempotrain/tempotrain/train"
)

// config is what every rank gets from the Fit input's "config".
type config struct {
	Epochs int     `json:"epochs"`
	LR     float32 `json:"lr"`
}

// params is the model and what a checkpoint holds.
type params struct {
	Epoch int     `json:"epoch"`
	W     float32 `json:"w"`
	B     float32 `json:"b"`
}

// fitLine is the training function: every rank runs it.
func fitLine(ctx context.Context, tc *train.Context) error {
	cfg := config{Epochs: 60, LR: 0.7}
	if err := tc.Config(&cfg); err != nil {
		return err
	}
	p := params{Epoch: -1}
	if ck := tc.Checkpoint(); ck != nil { // a restart or a resumed run: go on from there
		b, err := ck.ReadFile("params.json")
		if err != nil {
			return err
		}
		if err := json.Unmarshal(b, &p); err != nil {
			return fmt.Errorf("checkpoint %s: params.json: %w", ck.URI, err)
		}
	}
	// This rank's shard of 256 points on the line: every world-th one.
	var xs, ys []float32
	for i := tc.WorldRank(); i < 256; i += tc.WorldSize() {
		x := float32(i) / 256
		xs, ys = append(xs, x), append(ys, 3*x+1)
	}
	for epoch := p.Epoch + 1; epoch < cfg.Epochs; epoch++ {
		tc.SetProgress(epoch, 0) // heartbeats carry it
		var loss float32
		grad := make([]float32, 3) // dW, dB, loss: averaged over the ranks
		for i, x := range xs {
			e := p.W*x + p.B - ys[i]
			grad[0] += 2 * e * x / float32(len(xs))
			grad[1] += 2 * e / float32(len(xs))
			grad[2] += e * e / float32(len(xs))
		}
		if err := tc.Comm().AllReduceFloat32(ctx, grad, collective.Mean); err != nil {
			return err
		}
		p.W -= cfg.LR * grad[0]
		p.B -= cfg.LR * grad[1]
		loss = grad[2]
		p.Epoch = epoch
		tc.AddSamples(len(xs))

		m := train.Metrics{"epoch": float64(epoch), "loss": float64(loss), "w": float64(p.W), "b": float64(p.B)}
		var ck *train.Checkpoint // a checkpoint every 10th epoch and the last; metrics every epoch
		if (epoch+1)%10 == 0 || epoch == cfg.Epochs-1 {
			dir, err := tc.NewCheckpointDir()
			if err != nil {
				return err
			}
			b, _ := json.Marshal(p)
			if err := os.WriteFile(filepath.Join(dir, "params.json"), b, 0o644); err != nil {
				return err
			}
			ck = train.NewCheckpoint(dir)
		}
		if err := tc.Report(m, ck); err != nil { // rank 0's checkpoint is committed
			return err
		}
	}
	return nil
}

func init() { train.MustRegister("fit-line", fitLine) }

func main() {
	epochs := flag.Int("epochs", 60, "epochs")
	ranks := flag.Int("ranks", 2, "ranks (world size)")
	storage := local.StorageFlag()
	flag.Parse()
	if _, err := run(context.Background(), os.Stdout, *epochs, *ranks, *storage); err != nil {
		log.Fatal(err)
	}
}

// run starts a dev server and a worker in this process, trains fit-line
// and prints its Result.
func run(ctx context.Context, out io.Writer, epochs, ranks int, storage string) (*train.Result, error) {
	l, storage, err := local.Start("go-function", app.WorkerOptions{Workflows: true, RankSlots: ranks}, storage)
	if err != nil {
		return nil, err
	}
	defer l.Stop()

	res, err := train.NewTrainer(l.Client, "fit-line", config{Epochs: epochs, LR: 0.7},
		train.ScalingConfig{NumWorkers: ranks},
		train.RunConfig{Name: "fit-line", StoragePath: storage,
			Failure:    train.FailureConfig{MaxFailures: 1},
			Checkpoint: train.CheckpointConfig{NumToKeep: 2, ScoreAttribute: "loss", ScoreOrder: "min"}},
	).Fit(ctx)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "run %s: %d reports, %d attempts\n", res.Name, res.Reports, res.Attempts)
	fmt.Fprintf(out, "w = %.3f, b = %.3f, loss = %.2g (the line is w = 3, b = 1)\n", res.Metrics["w"], res.Metrics["b"], res.Metrics["loss"])
	fmt.Fprintf(out, "latest checkpoint: %s\n", res.Checkpoint.URI)
	return res, nil
}
