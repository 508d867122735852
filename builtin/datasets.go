package builtin

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/collective"
	"github.com/tempotrain/tempotrain/compute"
	"github.com/tempotrain/tempotrain/data"
	"github.com/tempotrain/tempotrain/train"
)

// dsRunner trains a network on the run's datasets: the "train" dataset's
// shard through its fitted (or restored) pipeline, every other dataset
// evaluated after each epoch, checkpoints with the model, the pipeline and
// the train shard's position, resumable mid-epoch.
type dsRunner struct {
	ctx         context.Context
	tc          *train.Context
	cfg         Config
	o           Options
	info        api.ModelInfo
	rank, world int
	// standardize: a regression target is standardised from the train
	// data on a fresh run.
	standardize bool
	// defaultPre: without preprocessors in the Fit input, fit an imputer,
	// a scaler and an encoder over every column (tabular-mlp).
	defaultPre bool

	be      compute.Backend
	m       *compute.Model
	opt     *compute.Optimizer
	ddp     *compute.DDP
	ce      *compute.CrossEntropy
	mse     *compute.MSE
	sched   compute.Schedule
	gradMem *collective.SharedBuffer

	train *data.Shard
	evals []*evalSet
	pipe  *data.Pipeline
	// classValue maps a class number to its value, when the config's task
	// is regression and the datasets read the label as classes.
	classValue []float32

	x, y   compute.Tensor
	hx, hy []float32
	lab    []float32 // the batch's labels as the shard gives them
	// rankBatch is the most rows a rank takes in a step; global a step's
	// rows over all ranks (Config.batches).
	rankBatch, global int
	weight            gradWeight

	// A run resumed from a mid-epoch checkpoint (resumeMid) goes on with
	// step startStep of epoch startEpoch: the step of this world's steps
	// that the rows consumed make (data.Position.Batches after the seek).
	startEpoch, startStep int
	resumeMid             bool
	// carry holds, on rank 0, the sums of the epoch's metrics over all
	// ranks up to the last mid-epoch checkpoint (zero elsewhere); its
	// seconds are summed over as many ranks as this world has (rescaled
	// when a checkpoint of another world size resumes).
	carry [nTrainSums]float64
	// stepsPerEpoch is the train shard's steps (LR schedule).
	stepsPerEpoch int
}

// evalSet is an evaluation dataset and how many of this rank's rows count
// (-1: all).
type evalSet struct {
	name  string
	s     *data.Shard
	count int64
	warn  string
}

// The training sums of an epoch, per rank, then summed over ranks.
const (
	sumLoss    = iota // the loss, summed over rows
	sumHits           // correct rows (classification), squared error in label units (regression)
	sumRows           // rows
	sumSeconds        // wall seconds of the loop
	sumCPU            // CPU seconds of the loop
	nTrainSums
)

// runDatasets is Run for a function that reads the run's datasets.
func runDatasets(ctx context.Context, tc *train.Context, comm compute.Communicator, fn, model string, o Options) error {
	r := &dsRunner{ctx: ctx, tc: tc, o: o, rank: tc.WorldRank(), world: tc.WorldSize()}
	r.info = api.ModelInfo{Function: fn, Model: model}
	if model == TabularMLP {
		tcfg := TabularConfig{}
		if err := tc.Config(&tcfg); err != nil {
			return err
		}
		tcfg.rankThreads(tc)
		if err := tcfg.setDefaults(); err != nil {
			return train.NonRetryable(fmt.Errorf("config: %w", err))
		}
		r.cfg, r.info.Hidden, r.info.Task = tcfg.Config, tcfg.Hidden, tcfg.Task
		r.standardize, r.defaultPre = *tcfg.StandardizeTarget, true
	} else {
		cfg := Config{}
		if err := tc.Config(&cfg); err != nil {
			return err
		}
		if err := cfg.datasetFields(); err != nil {
			return train.NonRetryable(fmt.Errorf("config: %w", err))
		}
		cfg.rankThreads(tc)
		cfg.setDefaults()
		if err := cfg.validate(); err != nil {
			return train.NonRetryable(fmt.Errorf("config: %w", err))
		}
		r.cfg, r.standardize = cfg, true
	}
	if comm != nil && (comm.Rank() != r.rank || comm.Size() != r.world) {
		return fmt.Errorf("rank %d of %d: collective group says rank %d of %d", r.rank, r.world, comm.Rank(), comm.Size())
	}
	err := r.setup(comm)
	if r.gradMem != nil {
		defer r.gradMem.Free()
	}
	if c, ok := r.be.(io.Closer); ok {
		defer c.Close()
	}
	defer r.close()
	if err != nil {
		return fmt.Errorf("%s: %w", fn, err)
	}
	if err := r.loop(); err != nil {
		return fmt.Errorf("%s: %w", fn, err)
	}
	return nil
}

func (r *dsRunner) close() {
	if r.train != nil {
		r.train.Close()
	}
	for _, e := range r.evals {
		e.s.Close()
	}
}

// invalid makes a dataset error that no restart fixes non-retryable.
func invalid(err error) error {
	if errors.Is(err, data.ErrInvalid) && !train.IsNonRetryable(err) {
		return train.NonRetryable(err)
	}
	return err
}
