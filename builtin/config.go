package builtin

import (
	"fmt"

	"github.com/tempotrain/tempotrain/compute"
	"github.com/tempotrain/tempotrain/data/format"
	"github.com/tempotrain/tempotrain/train"
)

// Config is the JSON config of the built-in training functions. Every field
// is optional; the comment gives its default.
type Config struct {
	// Epochs to train. Default 5.
	Epochs int `json:"epochs,omitempty"`
	// BatchSize is the rows of a step: per rank, or over all ranks, as
	// BatchSemantics says. Default 128.
	BatchSize int `json:"batch_size,omitempty"`
	// BatchSemantics says what BatchSize counts when the world size may
	// change (an elastic run resumed on fewer or more ranks):
	//
	//   - "per_rank" (default): each rank takes BatchSize rows a step, so the
	//     global batch is BatchSize × world size and changes with the world
	//     (4 ranks of 128 rows: 512 a step; resumed on 3: 384). The learning
	//     rate stays LR (LRScaling "linear" scales it with the world).
	//   - "global": a step takes BatchSize rows over all ranks, rank r
	//     BatchSize/world of them, one more when r < BatchSize%world (128
	//     rows on 3 ranks: 43, 43, 42; each rank's gradient weighted by its
	//     share, so the step's gradient is the mean over its 128 rows). The
	//     global batch, and with it the learning rate LR and the steps per
	//     epoch, do not change with the world. BatchSize must be at least
	//     the world size.
	BatchSemantics string `json:"batch_semantics,omitempty"`
	// LR is the base learning rate. Default 0.05 (sgd), 0.001 (adam, adamw).
	LR float64 `json:"lr,omitempty"`
	// LRScaling, under BatchSemantics "per_rank": "none" (default: LR
	// whatever the world size) or "linear": LR × world size, the linear
	// scaling rule with LR the rate of one rank's batch, so that the rate
	// follows the global batch when the world changes (an attempt on 3
	// ranks of a run started on 4 trains at 3/4 of the rate). Under
	// "global" the global batch is fixed and "linear" is refused.
	LRScaling string `json:"lr_scaling,omitempty"`
	// Optimizer: "sgd" (default), "adam", "adamw".
	Optimizer string `json:"optimizer,omitempty"`
	// Momentum of sgd. Default 0.9; 0 turns it off.
	Momentum *float64 `json:"momentum,omitempty"`
	// Nesterov momentum for sgd. Default false.
	Nesterov bool `json:"nesterov,omitempty"`
	// WeightDecay: L2 for sgd and adam, decoupled for adamw. Default 0
	// (adamw: 0.01).
	WeightDecay float64 `json:"weight_decay,omitempty"`
	// Schedule of the learning rate: "constant" (default), "step" (×LRGamma
	// every LRStepEpochs epochs), "cosine" (to MinLR at the last step, after
	// WarmupEpochs of linear warm-up).
	Schedule     string  `json:"lr_schedule,omitempty"`
	LRStepEpochs int     `json:"lr_step_epochs,omitempty"` // default 1
	LRGamma      float64 `json:"lr_gamma,omitempty"`       // default 0.1
	MinLR        float64 `json:"min_lr,omitempty"`         // default 0
	WarmupEpochs float64 `json:"warmup_epochs,omitempty"`  // default 0
	// Seed fixes initialisation, shuffling and dropout: the same seed on
	// the same world size gives the same run, bit for bit (and under
	// BatchSemantics "global" the same rows in the same steps on any world
	// size). Default 0.
	Seed uint64 `json:"seed,omitempty"`
	// DataDir holds Fashion-MNIST's IDX files. Default
	// /usr/share/datasets/fashion-mnist.
	DataDir string `json:"data_dir,omitempty"`
	// TrainLimit and TestLimit use only the first items of each split
	// (quick tests). Default 0: all.
	TrainLimit int `json:"train_limit,omitempty"`
	TestLimit  int `json:"test_limit,omitempty"`
	// Threads is the number of BLAS threads of each rank. Default: the
	// CPUs the rank holds (scaling.resources_per_worker's CPU,
	// train.Context.CPUs), else 1: ranks sharing a machine should not
	// compete for its cores.
	Threads int `json:"threads,omitempty"`
	// BucketKiB is the size of the gradient buckets whose all-reduce
	// overlaps backward (collective.Reducer). Default DefaultBucketKiB;
	// negative: one flat all-reduce after backward. By default buckets are
	// used only when at least MinEarlyShare of the gradients is final before
	// backward's last layer (CNN, ResNet-18 but not the MLP, whose first
	// layer holds 75% of its parameters); see Buckets.
	BucketKiB int `json:"bucket_kib,omitempty"`
	// Buckets forces ("on") or forbids ("off") bucketed all-reduce; default
	// "auto" as above. Measured on the 2-core machine with the MLP: buckets
	// cost about 15% more CPU per sample (copies into and out of the bucket
	// buffers) and gained no wall time, as nothing overlaps.
	Buckets string `json:"buckets,omitempty"`
	// CheckpointEverySteps, on a run with datasets, also checkpoints every
	// that many training steps within an epoch (each a report with metrics
	// epoch, fractional, and steps), so that a restart resumes mid-epoch,
	// at any world size (see the package doc).
	// Default 0: a checkpoint at the end of each epoch only. Fashion-MNIST's
	// files (no datasets) checkpoint per epoch only.
	CheckpointEverySteps int `json:"checkpoint_every_steps,omitempty"`
}

// DefaultBucketKiB is the default gradient bucket size.
const DefaultBucketKiB = 256

// MinEarlyShare is the share of gradients final before the last layer's
// backward below which "auto" uses one flat all-reduce.
const MinEarlyShare = 0.5

// rankThreads gives Threads its default from the rank's CPUs
// (train.Context.CPUs), when the run asks for some and the config names
// none; setDefaults gives the rest 1.
func (c *Config) rankThreads(tc *train.Context) {
	if c.Threads == 0 {
		c.Threads = tc.CPUs()
	}
}

func (c *Config) setDefaults() {
	if c.Epochs == 0 {
		c.Epochs = 5
	}
	if c.BatchSize == 0 {
		c.BatchSize = 128
	}
	if c.Optimizer == "" {
		c.Optimizer = "sgd"
	}
	if c.LR == 0 {
		c.LR = 0.05
		if c.Optimizer != "sgd" {
			c.LR = 0.001
		}
	}
	if c.Momentum == nil && c.Optimizer == "sgd" {
		m := 0.9
		c.Momentum = &m
	}
	if c.Schedule == "" {
		c.Schedule = "constant"
	}
	if c.LRStepEpochs == 0 {
		c.LRStepEpochs = 1
	}
	if c.LRGamma == 0 {
		c.LRGamma = 0.1
	}
	if c.DataDir == "" {
		c.DataDir = format.DefaultFashionMNISTDir
	}
	if c.Threads == 0 {
		c.Threads = 1
	}
	if c.BucketKiB == 0 {
		c.BucketKiB = DefaultBucketKiB
	}
	if c.Buckets == "" {
		c.Buckets = "auto"
	}
	if c.BatchSemantics == "" {
		c.BatchSemantics = PerRank
	}
	if c.LRScaling == "" {
		c.LRScaling = "none"
	}
}

// Values of Config.BatchSemantics.
const (
	PerRank     = "per_rank"
	GlobalBatch = "global"
)

// batches checks the batch size against the world size and returns the
// rows of a step over all ranks and the most a rank takes.
func (c *Config) batches(world int) (global, maxRank int, err error) {
	if c.BatchSemantics == GlobalBatch {
		if c.BatchSize < world {
			return 0, 0, fmt.Errorf("batch_size %d with batch_semantics %q is the batch over all ranks: %d ranks leave some without rows; make batch_size at least the world size (or a multiple of it, for equal batches)",
				c.BatchSize, GlobalBatch, world)
		}
		return c.BatchSize, (c.BatchSize + world - 1) / world, nil
	}
	return c.BatchSize * world, c.BatchSize, nil
}

// lr is the base learning rate on world ranks.
func (c *Config) lr(world int) float64 {
	if c.LRScaling == "linear" {
		return c.LR * float64(world)
	}
	return c.LR
}

func (c *Config) validate() error {
	switch {
	case c.Epochs < 0:
		return fmt.Errorf("epochs %d < 0", c.Epochs)
	case c.BatchSize < 1:
		return fmt.Errorf("batch_size %d < 1", c.BatchSize)
	case c.LR <= 0:
		return fmt.Errorf("lr %g ≤ 0", c.LR)
	case c.TrainLimit < 0 || c.TestLimit < 0:
		return fmt.Errorf("train_limit %d / test_limit %d < 0", c.TrainLimit, c.TestLimit)
	case c.Threads < 1:
		return fmt.Errorf("threads %d < 1", c.Threads)
	case c.Schedule != "constant" && c.Schedule != "step" && c.Schedule != "cosine":
		return fmt.Errorf("lr_schedule %q: want constant, step or cosine", c.Schedule)
	case c.Buckets != "auto" && c.Buckets != "on" && c.Buckets != "off":
		return fmt.Errorf("buckets %q: want auto, on or off", c.Buckets)
	case c.CheckpointEverySteps < 0:
		return fmt.Errorf("checkpoint_every_steps %d < 0", c.CheckpointEverySteps)
	case c.BatchSemantics != PerRank && c.BatchSemantics != GlobalBatch:
		return fmt.Errorf("batch_semantics %q: want %q (batch_size rows on each rank) or %q (batch_size rows over all ranks)", c.BatchSemantics, PerRank, GlobalBatch)
	case c.LRScaling != "none" && c.LRScaling != "linear":
		return fmt.Errorf("lr_scaling %q: want none or linear", c.LRScaling)
	case c.LRScaling == "linear" && c.BatchSemantics == GlobalBatch:
		return fmt.Errorf(`lr_scaling "linear" with batch_semantics %q: the global batch is batch_size whatever the world size, so there is nothing to scale; use lr_scaling "none" (or batch_semantics %q)`, GlobalBatch, PerRank)
	}
	return c.optimizer().Validate()
}

// datasetFields checks, before defaults, that a run on datasets sets none
// of the fields that read Fashion-MNIST's files.
func (c *Config) datasetFields() error {
	switch {
	case c.DataDir != "":
		return fmt.Errorf("data_dir %q: the run has datasets, which say where the data is; data_dir is for Fashion-MNIST's files (a run without datasets)", c.DataDir)
	case c.TrainLimit != 0 || c.TestLimit != 0:
		return fmt.Errorf("train_limit %d / test_limit %d: the run has datasets; these limit Fashion-MNIST's files only (a run without datasets)", c.TrainLimit, c.TestLimit)
	}
	return nil
}

func (c *Config) optimizer() compute.OptimizerConfig {
	o := compute.OptimizerConfig{Name: c.Optimizer, Nesterov: c.Nesterov, WeightDecay: c.WeightDecay}
	if c.Momentum != nil {
		o.Momentum = *c.Momentum
	}
	return o
}

// schedule is the learning rate by step, for stepsPerEpoch steps an epoch
// on world ranks. Its steps count epoch·stepsPerEpoch + the step of the
// epoch; an epoch resumed at another world size or batch size (whose steps
// per epoch differ) starts at the step of the new size that as many rows
// make, so the schedule follows the fraction of the epochs done (see the
// package doc).
func (c *Config) schedule(stepsPerEpoch, world int) compute.Schedule {
	base := c.lr(world)
	switch c.Schedule {
	case "step":
		return compute.StepLR{Base: base, Gamma: c.LRGamma, Every: c.LRStepEpochs * stepsPerEpoch}
	case "cosine":
		return compute.CosineLR{Base: base, Min: c.MinLR, Total: c.Epochs * stepsPerEpoch,
			Warmup: int(c.WarmupEpochs * float64(stepsPerEpoch))}
	}
	return compute.ConstantLR(base)
}
