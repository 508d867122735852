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
// world size gives the same parameters, bit for bit, interrupted or not; a
// checkpoint resumes at another world size too (see Resuming at another
// world size).
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
//   - a checkpoint holds the state file (with api.ModelInfo: what the
//     network is, its task, classes and target scaling), the pipeline
//     (data.PipelineFile) and the train shard's position (data.StateFile),
//     Meta {"format": StateFormat, "model": ...}; predict.Load reads it;
//   - Config.CheckpointEverySteps adds checkpoints within an epoch. A run
//     resumed from any checkpoint ends with the state, bit for bit, of the
//     run never interrupted, and with the same metrics: the epoch's sums up
//     to a mid-epoch checkpoint are summed over ranks into rank 0's state
//     there, in the uninterrupted run too.
//
// # Resuming at another world size
//
// An elastic run (or any run resumed after a worker was lost or added)
// may resume a checkpoint on more or fewer ranks than wrote it. A
// checkpoint taken at an epoch's end resumes at any world size as it
// always did. One taken mid-epoch (checkpoint_every_steps, or a
// preemption) holds where the epoch's data order was: the order of an
// epoch is a permutation drawn from (seed, epoch), step k takes its k-th
// block of global-batch rows and rank r of W the block's rows r, r+W, ...
// (data.Loader, data.Shard), so the rows the steps consumed over all ranks
// are exactly a prefix of the permutation, whatever the world size. The
// checkpoint saves that prefix's length (state Ints rows_done, world_size
// and global_batch for Fashion-MNIST's files; data.Position.Consumed in
// data_train.json for datasets), and a resume at W' ranks shares the rest
// of the permutation among them, every row of the epoch still taken once
// over all ranks; only the epoch's last step pads (remainder pad: fewer
// than W' rows repeated) or cuts (drop) as a fresh epoch would. A streamed
// dataset (mode stream), whose ranks take contiguous ranges shuffled
// within windows, resumes by sharing what each old rank left of its range
// (the rest of its current window, then its later windows) among the new
// ranks (data.Position.Splits records the earlier splits of the epoch);
// there the padding rows a stream's last rank took before the checkpoint
// may repeat rows too. A checkpoint written before these keys existed was
// taken at the world size and batch size that resume it, or is assumed to
// be: rows_done is then steps_done × the global batch, and a position
// without Consumed is converted from its batches under the settings it was
// saved with. Other differences (seed, shuffle, remainder, mode, the
// files, a stream's window) still end the run, naming them.
//
// What a step is across a world-size change is Config.BatchSemantics:
//
//   - "per_rank" (default): batch_size rows on each rank, so the global
//     batch is batch_size × W and the steps per epoch change with the
//     world (batch_size 64 on 4 ranks: 256 rows a step; on 3: 192, and a
//     third more steps an epoch). The learning rate stays lr, unless
//     lr_scaling is "linear": lr × W, which keeps lr / global batch
//     constant.
//   - "global": batch_size rows a step over all ranks, batch_size/W a rank
//     (the remainder spread over the first ranks, each rank's gradient
//     weighted by its share of the step's rows so that the all-reduced
//     gradient is the mean over the step's rows). The global batch, the
//     learning rate and the steps per epoch do not change with the world:
//     a run resumed on another world size takes the same steps over the
//     same rows as one that was not, and for a model without dropout or
//     batch normalisation (whose masks and statistics follow the per-rank
//     batches) the same gradients up to floating-point rounding.
//
// The learning-rate schedule counts steps of the current world's epochs
// (epoch × steps per epoch + step), so it follows the fraction of the run
// done: a resumed epoch starts at the step of the new size that the rows
// consumed make (rows_done / global batch, rounded down; the step of the
// checkpoint itself when the global batch is unchanged, so a resume at the
// same size is bit-identical), and a step past the epoch's last (padding
// can add one) keeps the last step's rate. Step decays fall at epochs'
// ends, and cosine and warm-up follow fractional epochs, to within a step.
// The metrics of a resumed epoch stay sums over its rows: the sums carried
// in the checkpoint (loss, correct, rows, CPU seconds over all ranks) add
// to the new ranks'; the carried wall seconds are rescaled to the new world
// (summed over W ranks, they are multiplied by W'/W), so epoch_time_s and
// samples_per_s count the epoch's wall time. A mid-epoch report's "epoch"
// and "steps" count the current world's steps.
//
// Errors that no restart fixes (a bad config field, named; a dataset that
// is data.ErrInvalid, such as a label with one class; a resume whose data
// no longer matches the checkpoint) are non-retryable.
package builtin
