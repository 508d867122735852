// Package data feeds datasets to data-parallel ranks: Ray Data's
// read_csv / read_parquet / read_images, Train's dataset shards and
// preprocessors, in Go. The readers of the files (CSV, Parquet, image
// folders, IDX; local and S3 listing) are package data/format, beneath
// this one, which knows nothing of ranks: a format.Source lists units and
// reads rows of a unit. This package shares the units among the ranks and
// keeps what the ranks agree on: shards, positions, windows, labels, the
// preprocessors' fit and the pipeline.
//
// # What a rank calls
//
//	shard, err := data.Open(ctx, spec, data.ShardOptions{Rank: r, WorldSize: w, Seed: seed, BatchSize: 256}, comm)
//	pipe, err := shard.Fit(ctx, preprocessors)      // fitted over all ranks
//	valid, err := data.Open(ctx, validSpec, data.ShardOptions{Name: "valid", ...}, comm)
//	valid.SetPipeline(pipe)                         // same features, same class numbers
//	x, y := make([]float32, 256*shard.Width()), make([]float32, 256)
//	for epoch := start; epoch < epochs; epoch++ {
//		shard.SetEpoch(epoch)                       // or RestoreState, to resume mid-epoch
//		for {
//			n, err := shard.Next(ctx, x, y)         // io.EOF at the end of the epoch
//			...                                     // train on x[:n*Width], y[:n]
//		}
//	}
//	shard.SaveState(dir); pipe.Save(dir)            // into a checkpoint directory
//
// and at prediction time, with no dataset and no collective:
//
//	pipe, err := data.LoadPipeline(dir)
//	b := format.NewBatch(pipe.Inputs, n)            // b.SetNumber, b.SetString per row
//	err = pipe.Apply(b, x)                          // pipe.Label.Classes name the class numbers
//
// # Datasets
//
// An api.DatasetSpec (plain JSON in the Fit input) names the data: an
// absolute path, a glob (in the last element), a directory, "file://...",
// "s3://bucket/key", "s3://bucket/prefix/*.parquet", "s3://bucket/prefix/",
// or "fashion-mnist:train" / "fashion-mnist:test" (Debian's
// dataset-fashion-mnist). S3 goes through storage's S3 backend: the same
// client, configuration (the AWS chain, TEMPOTRAIN_S3_PATH_STYLE) and
// retries as checkpoints. Directories and prefixes are listed recursively;
// names starting with "." or "_" (_SUCCESS, .crc) are skipped; files are
// read in sorted order.
//
// Formats (package data/format reads them): CSV (header or not, any one-byte delimiter and quote, quoted
// fields with delimiters, newlines and doubled quotes, CRLF, a UTF-8 BOM,
// blank lines skipped, null markers), Parquet (flat columns of any
// physical type but INT96; optional columns; dictionary pages; INT32/INT64
// decimals), image folders (one subfolder per class, PNG and JPEG, resized
// bilinearly to the spec's size, Channels×Height×Width bytes) and
// Fashion-MNIST's IDX files. The format comes from the spec, else the
// URI's extension, else the files'.
//
// A table's columns are numeric (float32; NaN is missing) or categorical
// (strings, held as codes into a dictionary; a preprocessor encodes them).
// Parquet says which; in a CSV a column is numeric when every value of its
// first 1000 rows that is not a null marker parses as a number, unless the
// spec lists it as categorical. The label column's classes (classification)
// are its distinct values, sorted (numbers numerically), numbered 0, 1, ...;
// they are found over all ranks at Open. Batches hold class numbers
// (classification) or the values (regression).
//
// # Shards
//
// Every rank opens the same spec with its rank and the same seed. Per
// epoch, under remainder "exact", every row is in exactly one rank's shard;
// "pad" (the default) repeats rows from the start of the epoch's order so
// that every rank has ceil(N/W) rows, as many steps, as PyTorch's
// DistributedSampler with drop_last=False; "drop" leaves out the last
// N mod W rows of the order (drop_last=True). The order depends on (seed,
// epoch) only (SetEpoch), through a PCG generator written out in this
// package, so it does not change with Go releases.
//
// Data that fits half the memory budget (spec.MemoryBudgetMiB, default
// 1 GiB per rank and dataset) is held in memory and shuffled as
// DistributedSampler shuffles: one permutation of all rows per epoch, rank
// r taking rows r, r+W, ... of it. It is held row-major (a row's values
// side by side, in a cache line or a few), since that order reads rows all
// over the table.
// Larger data streams (mode "auto" decides; "memory" and "stream" force
// it). A stream is cut into units: runs of Parquet pages (below), runs of
// CSV records of about budget/32 bytes found by a scan at Open (newlines
// outside quotes, no tokenising; the ranks split the files), chunks of 64
// images. Per epoch the units are put in an order drawn from (seed, epoch),
// their rows concatenated, and rank r takes its contiguous range of that
// sequence (wrapping to the start for padding), so it reads about N/W rows
// plus at most two partial units. Its range is cut into shuffle windows of
// at most spec.ShuffleWindowRows rows (default: what a fifth of the budget
// holds; Ray's local shuffle buffer), at unit boundaries: a unit that does
// not fit in what a window has left starts the next window, and only a
// unit larger than a window is cut. A window's rows are read (row-major
// too, into the memory of the window before), shuffled with (seed, epoch,
// rank, window) and yielded, while the next window is read in the
// background. Memory stays bounded whatever the file size: two windows,
// the CSV units at their ends, read buffers, the pages being decoded and
// parse outputs, about 3/4 of the budget at most (TestStreamStaysInBudget
// measures it), plus what the garbage collector leaves around (GOGC), plus
// the dictionaries of categorical columns (one string per distinct value).
//
// Parquet units follow the pages, since a page is decoded whole (its
// values decompressed and decoded) whatever rows of it are wanted: a row
// group is cut where every column read starts a page (the column chunks'
// offset indexes say where; a row group without them is one run), and
// consecutive runs are grouped into units of about window/8 rows, a run
// larger than that being a unit alone, never sliced. A read of rows
// [lo, hi) of a unit seeks to the page holding lo with the offset index and
// decodes only the pages holding [lo, hi). So a rank decodes every page
// once per epoch (a page where two ranks' ranges meet, once on each), but
// a page of a unit larger than a window once per window that takes rows of
// it (TestParquetDecodesPagesOnce counts them). The price: a window mixes
// about window/unit places of the files, fewer than 8 when pages hold more
// than window/8 rows (parquet-go's default pages of 256 KiB hold 64Ki
// FLOATs; at 32 MiB per rank and 31 columns a window of 50k rows then
// takes one or two pages' rows): raise the budget or shuffle_window_rows to
// mix more.
//
// Next fills caller-owned buffers: features row-major (BatchSize×Width
// float32s) and labels; in the steady state it allocates nothing. A Shard
// is used by one goroutine; Close stops its background reads.
//
// # Resuming mid-epoch
//
// Position is (epoch, batches consumed) plus the settings the order
// depends on (world size, batch size, seed, shuffle, remainder, mode,
// window and unit counts, the stream's layout (how it is cut, and a digest
// of its units' rows), row count, a digest of the files' names and
// sizes). There is no generator state to save: every order is recomputed
// from (seed, epoch), and Seek reads only the window the position falls
// in. SaveState writes it into a checkpoint directory (data_<name>.json),
// RestoreState seeks to it: the batches that follow are, byte for byte,
// those an uninterrupted shard yields (TestResumeIsExact). Under pad and
// drop all ranks are at the same position, so rank 0's file resumes all.
// A position taken under other settings, or in a stream that an older
// version cut otherwise, is ErrPositionMismatch, naming what differs;
// except the world size and batch size, which an elastic run changes.
//
// # Resuming at another world size or batch size
//
// An epoch is laid out in steps (split): step k takes the k-th block of
// global-batch rows of the epoch's order (BatchSize × WorldSize, or
// SetGlobalBatchSize's rows, the remainder spread over the first ranks),
// rank r the block's rows r, r+W, ...; with per-rank batches that is the
// strided shard above, row for row (TestSplitIsTheStridedShard). So after
// k steps the rows taken over all ranks are a prefix of the order,
// whatever the world size, and Position.Consumed says how long. Seek to a
// position of another world size or batch size shares the rest of the
// order, from there, among the shard's ranks and batches: every row of the
// epoch is taken once over both (TestShardResumesAtAnyWorldSize), only the
// epoch's last step padding or cutting as a fresh one would. A stream
// cannot take a prefix of anything (its ranks take contiguous ranges,
// shuffled by windows): there what the ranks of the position left (each
// one's current window's rows not yet taken, in the order it took them,
// then its later windows; then rows no rank was given) is shared among the
// new ranks as a fresh epoch shares its units, a partly taken window's
// rest a window of its own, read whole and taken in part. Position.Splits
// records the splits that came before, which every rank replays (no data
// read) to find its rows; rows a stream padded with before the checkpoint
// may come again. Positions saved before Consumed existed resume from the
// rows their batches took under their settings. The Loader does the same
// for the built-ins' Fashion-MNIST files (Loader.Resume, Loader.Consumed).
//
// # Preprocessors
//
// Shard.Fit fits Ray's preprocessors (api.PreprocessorSpec: standard_scaler,
// min_max_scaler, one_hot_encoder, ordinal_encoder, simple_imputer,
// concatenator, chain) in order, each on the output of those before it
// (Ray's Chain), over all ranks: each rank reads its contiguous share of
// the rows, every row in one share, and the ranks combine counts, means and
// deviations (Chan's parallel update), minima and maxima and category counts
// with one all-gather per pass (steps that do not read what an earlier one
// rewrote share a pass). Every rank gets the same pipeline, equal to what
// one process fits over the whole dataset: exactly for counts, minima,
// maxima, categories and most frequent values, to 1e-12 relative for means
// and deviations (TestDistributedFitEqualsSingle, over loopback collective
// groups); the values match scikit-learn's (TestFitValues). Semantics follow
// scikit-learn and Ray: population standard deviation; a constant column
// scales by 1; missing values are ignored by the fit and stay NaN unless
// imputed; categories are sorted (max_categories keeps the most frequent,
// ties to the smaller); an unseen category encodes as all zeros (one-hot)
// or -1 (ordinal), a missing one as NaN (ordinal) or zeros (one-hot); the
// imputer's most_frequent picks the smallest of ties. A concatenator, last,
// picks and orders the columns of the feature matrix (default: every
// feature column in order, one-hot columns expanded as "col=value"); a
// categorical column left unencoded is an error.
//
// A Pipeline is plain JSON (Save, LoadPipeline, ReadPipeline): the inputs
// it reads by name, the label's classes, the fitted steps, the feature
// names. Apply needs no dataset and no collective, and is safe for
// concurrent use.
//
// # Errors
//
// Errors that a restart cannot fix wrap ErrInvalid (errors.Is), for the
// runtime to make them non-retryable: a spec that cannot work, a missing
// file or empty glob, a missing column (named, with the columns there are),
// a value that does not parse (*ParseError: file, CSV line or Parquet row
// group and row, column, value), files whose schemas differ (both named),
// an empty dataset, a classification label with one class (on the "train"
// dataset), preprocessors that do not fit their columns. Errors that may
// pass on a restart (a storage outage, a cancelled context) do not wrap it.
// When Open or Fit fail on one rank inside a collective step, every rank
// fails at once, with that rank's error.
//
// # The loader of the built-ins
//
// The built-ins read Fashion-MNIST with format.LoadFashionMNIST (a
// format.Dataset: images as bytes, labels); here:
//
//   - PrepareData (Ray's prepare_data_loader, PyTorch's DistributedSampler)
//     gives each rank a disjoint shard of the dataset, reshuffled every epoch
//     from (seed, epoch) alone, padded so that every rank takes the same number
//     of steps; Resume continues an epoch after the items a checkpoint's
//     steps consumed, at any world size or batch (per rank, or
//     LoaderConfig.GlobalBatch). A Loader fills caller-owned buffers: no
//     allocation per batch.
//
// Nothing here keeps a reference to a buffer passed to it.
package data
