package builtin

import (
	"fmt"
)

// TabularConfig is the JSON config of tabular-mlp: Config's fields
// (epochs, batch_size, batch_semantics, optimizer, lr, lr_scaling,
// momentum, nesterov, weight_decay, lr_schedule and its parameters, seed,
// threads, bucket_kib, buckets, checkpoint_every_steps), with these defaults of its own: epochs 10,
// batch_size 64; and the fields below. Config's data_dir, train_limit and
// test_limit are for Fashion-MNIST's files and must be unset.
type TabularConfig struct {
	Config
	// Hidden sizes of the hidden layers, each a Linear layer with a ReLU.
	// Default [64, 32]; [] is a linear model (logistic or linear
	// regression).
	Hidden []int `json:"hidden"`
	// Task is "classification" (cross-entropy over the label's classes) or
	// "regression" (mean squared error). Default: the datasets' task
	// (datasets.train.task, itself "classification" by default).
	// "regression" over datasets that read the label as classes uses the
	// classes' values: it works for a numeric label with few distinct
	// values that the other datasets share; "task": "regression" on the
	// datasets is the way for any other target.
	Task string `json:"task,omitempty"`
	// StandardizeTarget trains a regression on (y - mean) / std, mean and
	// std those of the train labels (found over all ranks at the start,
	// kept in the checkpoint), and predicts in the label's units. Default
	// true.
	StandardizeTarget *bool `json:"standardize_target,omitempty"`
}

// Defaults of tabular-mlp.
const (
	TabularEpochs    = 10
	TabularBatchSize = 64
)

// DefaultHidden are tabular-mlp's hidden layer sizes.
var DefaultHidden = []int{64, 32}

func (c *TabularConfig) setDefaults() error {
	if err := c.Config.datasetFields(); err != nil {
		return err
	}
	if c.Epochs == 0 {
		c.Epochs = TabularEpochs
	}
	if c.BatchSize == 0 {
		c.BatchSize = TabularBatchSize
	}
	if c.Hidden == nil {
		c.Hidden = append([]int(nil), DefaultHidden...)
	}
	if c.StandardizeTarget == nil {
		t := true
		c.StandardizeTarget = &t
	}
	c.Config.setDefaults()
	if err := c.Config.validate(); err != nil {
		return err
	}
	for i, h := range c.Hidden {
		if h < 1 {
			return fmt.Errorf("hidden %v: layer %d has %d units, want at least 1", c.Hidden, i+1, h)
		}
	}
	if c.Task != "" && c.Task != "classification" && c.Task != "regression" {
		return fmt.Errorf(`task %q: want "classification" or "regression" (or unset: the datasets' task)`, c.Task)
	}
	return nil
}
