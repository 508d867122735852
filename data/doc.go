// Package data reads datasets and feeds them to data-parallel ranks.
//
//   - ReadIDX reads an IDX file (the format of MNIST and Fashion-MNIST),
//     gzip-compressed or not, and says which file and which field is at fault
//     when it is malformed: bad magic, truncated data, or image and label
//     counts that disagree (LoadFashionMNIST).
//   - A Dataset keeps images as bytes; Normalize maps a byte to a float32
//     through a 256-entry table when a batch is filled, so a dataset costs
//     one byte a pixel and normalisation costs nothing extra.
//   - PrepareData (Ray's prepare_data_loader, PyTorch's DistributedSampler)
//     gives each rank a disjoint shard of the dataset, reshuffled every epoch
//     from (seed, epoch) alone, padded so that every rank takes the same number
//     of steps. A Loader fills caller-owned buffers: no allocation per batch.
//
// Nothing here keeps a reference to a buffer passed to it.
package data
