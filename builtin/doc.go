// Package builtin holds the training functions every tempotrain worker
// offers, registered by Register:
//
//   - mnist-mlp: MLP 784-512-256-10 on Fashion-MNIST
//   - mnist-cnn: two conv/ReLU/maxpool stages, fc 3136→128→10
//   - mnist-resnet18: ResNet-18 with a 1-channel stem (Ray Train's example)
//   - tabular-mlp: an MLP over a table's rows, classification or regression
//     (TabularConfig)
//
// Each reads a Config from the run's JSON config, trains data-parallel over
// the rank's collective group (compute.PrepareModel), reports after every
// epoch, with a checkpoint,
//
//   - epoch: epochs finished
//   - train_loss, train_accuracy: over the epoch's batches, all ranks
//   - test_accuracy: on the whole test split, evaluated in shards by all ranks
//   - samples_per_s: training samples of all ranks per second of the
//     epoch's training loop (evaluation and checkpointing excluded)
//   - epoch_time_s: that loop's wall time; cpu_s: the CPU time its rank
//     processes spent in it, summed over ranks (ranks sharing a process
//     each count the whole process)
//
// and resumes from the run's latest checkpoint
// exactly: the checkpoint holds the parameters, buffers, optimizer state, the
// number of finished epochs and the dropout generator's state, and the data
// order of an epoch depends only on (seed, epoch). The same seed on the same
// world size gives the same parameters, bit for bit, interrupted or not.
//
// A checkpoint is one file, CheckpointFile, in compute's versioned state
// format (compute.State).
//
// # Training on the run's datasets
//
// Without datasets, the mnist functions read Fashion-MNIST's IDX files
// (data.PrepareData), exactly as before datasets existed. With datasets in
// the Fit input, they and tabular-mlp (which needs them) read the "train"
// dataset through tc.Dataset instead:
//
//   - the network follows the data: compute.NewModelFor sizes the mnist
//     models' input to the rows' shape (an image folder's C×H×W, or a
//     table's width for the MLP) and their output to the label's classes;
//     tabular-mlp is compute.NewMLP(width, hidden, classes or 1);
//   - preprocessors are fitted on "train" over all ranks (shard.Fit) on a
//     fresh run; tabular-mlp without any fits DefaultPreprocessors (mean
//     imputer and standard scaler on the numeric columns, one-hot encoder
//     on the categorical ones); a resumed run restores the checkpoint's
//     pipeline and never refits;
//   - the loss is cross-entropy over the classes, or, for a regression
//     (the datasets' task, or TabularConfig.Task), the mean squared error
//     of the standardised target (compute.MSE; TabularConfig.
//     StandardizeTarget), predictions in the label's units;
//   - every other dataset ("valid", "test", ...) is evaluated after each
//     epoch over every row once across ranks (under remainder "exact", or
//     "pad" in memory; see evalCount): {dataset}_loss and
//     {dataset}_accuracy, or {dataset}_rmse, {dataset}_mae, {dataset}_r2;
//     train_rmse replaces train_accuracy for a regression;
//   - a checkpoint holds the state file (with ModelInfo: what the network
//     is, its task, classes and target scaling), the pipeline
//     (data.PipelineFile) and the train shard's position (data.StateFile),
//     Meta {"format": StateFormat, "model": ...}; predict.Load reads it;
//   - Config.CheckpointEverySteps adds checkpoints within an epoch. A run
//     resumed from any checkpoint ends with the state, bit for bit, of the
//     run never interrupted, and with the same metrics: the epoch's sums up
//     to a mid-epoch checkpoint are summed over ranks into rank 0's state
//     there, in the uninterrupted run too.
//
// Errors that no restart fixes (a bad config field, named; a dataset that
// is data.ErrInvalid, such as a label with one class; a resume whose data
// no longer matches the checkpoint) are non-retryable.
package builtin
