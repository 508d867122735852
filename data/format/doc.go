// Package format reads datasets' files: CSV, Parquet, image folders and
// Fashion-MNIST's IDX files, local or on S3 (listing, globs, ranged
// reads). It knows nothing of ranks, shuffles, positions or preprocessors:
// package data, above it, shares a Source's units among the ranks and
// fits the preprocessors.
//
//	src, err := format.Open(ctx, spec, format.Options{Workers: 4})
//	rows, err := src.Units(ctx, format.UnitTarget{Rows: 1 << 16, Bytes: 8 << 20})
//	blocks, from, err := src.ReadUnit(ctx, u, lo, hi, nil) // rows [lo, hi) of unit u
//	err = src.LoadAll(ctx, nil, emit)                      // every row, in file order
//
// A Source keeps the spec's columns (Slots: features in order, then the
// label) and reads them into Blocks: columns of float32s (NaN is missing)
// or of codes into the block's own dictionaries, which the caller merges
// into the dataset's Dicts (Block.MergeDicts). A unit is a run of rows a
// stream reads as one: runs of Parquet pages, runs of CSV records, 64
// images. A Scanner (CSV) finds its units a file at a time (ScanFile), so
// that several processes can share the scan and every one set the units
// of all (SetUnits).
//
// For a batch prediction, which reads files in order with no ranks,
// OpenTable lists a table's files and schemas and Table.Read reads rows
// [lo, hi) of one file as raw column Batches; NewTableWriter writes
// predictions as CSV or Parquet.
//
// Errors that a restart cannot fix wrap ErrInvalid (a missing file or
// column, a value that does not parse: *ParseError, files whose schemas
// differ, a malformed IDX file: ErrFormat).
//
// # The CSV reader
//
// It parses bytes directly: no encoding/csv, no string per numeric field
// (numbers parse from the bytes: Clinger's fast path for up to 19 digits,
// strconv for the rest, same results), a map lookup without allocation per
// categorical field. A file is cut into 1 MiB chunks of whole records
// (newlines outside quotes, found with bytes.IndexByte and bytes.Count)
// parsed in parallel, each into columns with its own dictionaries, merged
// in order; a quote inside an unquoted field is refused so that the cut is
// exact. FuzzCSV checks that no input crashes it, that records do not
// depend on the cut and agree with encoding/csv.
//
// bench/data (go run ./bench/data): 1M rows, 28 float32 columns, 2
// categorical, a binary label; CSV 273 MiB, Parquet 110 MiB; read into
// memory with data.Open; medians of 5 rounds, the order rotating; on the
// project's 2-core VM, shared with other jobs (so the second core was only
// partly ours: CPU time is 1.2-1.3x wall, not 2x):
//
//	reader                  wall     CPU     rows/s   rows/CPU-s
//	ours CSV, local        824ms    983ms    1.21M     1.02M
//	pandas 1.5 read_csv   3395ms   3316ms    0.29M     0.30M
//	ours Parquet, local    138ms    184ms    7.26M     5.43M
//	ours CSV, MinIO       1253ms   1282ms    0.80M     0.78M    (MinIO's CPU counted)
//	ours Parquet, MinIO    278ms    293ms    3.60M     3.41M
//
// CSV: 4.1x pandas' rows/s and 3.4x its rows per CPU-second; Parquet 6.0x
// our CSV's rows/s. From S3, a Parquet row group's column chunks come in
// one ranged GET (up to an eighth of the budget), a CSV as one stream.
//
// # Parquet: parquet-go, not arrow-go
//
// Both were measured on the same files (bench/data/parquetlibs, a module
// of its own: 1M rows of 28 DOUBLE, 2 string and 1 INT64 columns, Snappy,
// one file written by each library), reading every column into float32
// columns and dictionary codes as this package does, on one core, medians
// of 5:
//
//	file written by   read by                  wall     CPU
//	parquet-go        parquet-go v0.32.0       305ms    303ms
//	parquet-go        arrow-go/v18 v18.8.0     457ms    454ms
//	arrow-go          parquet-go               493ms    489ms
//	arrow-go          arrow-go                 949ms    895ms
//
// parquet-go is 1.5-1.9x faster here, exposes decoded pages (page.Data()),
// so values convert without an intermediate copy, and adds five small
// modules to go.mod, where arrow-go would raise grpc, protobuf, x/exp and
// modernc.org/sqlite under the Temporal server this module embeds.
//
// # Fashion-MNIST
//
//   - ReadIDX reads an IDX file (the format of MNIST and Fashion-MNIST),
//     gzip-compressed or not, and says which file and which field is at fault
//     when it is malformed: bad magic, truncated data, or image and label
//     counts that disagree (LoadFashionMNIST). ErrFormat is an ErrInvalid.
//   - A Dataset keeps images as bytes; Normalize maps a byte to a float32
//     through a 256-entry table when a batch is filled, so a dataset costs
//     one byte a pixel and normalisation costs nothing extra.
//
// Nothing here keeps a reference to a buffer passed to it.
package format
