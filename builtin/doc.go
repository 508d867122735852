// Package builtin holds the training functions every tempotrain worker
// offers, registered by Register:
//
//   - mnist-mlp: MLP 784-512-256-10 on Fashion-MNIST
//   - mnist-cnn: two conv/ReLU/maxpool stages, fc 3136→128→10
//   - mnist-resnet18: ResNet-18 with a 1-channel stem (Ray Train's example)
//
// Each reads a Config from the run's JSON config, trains data-parallel over
// the rank's collective group (compute.PrepareModel, data.PrepareData),
// reports after every epoch, with a checkpoint,
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
package builtin
