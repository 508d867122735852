package api

import (
	"fmt"
	"path"
	"slices"
	"strings"
	"time"
)

// Names of the BatchPredict workflow and its activities.
const (
	// BatchPredictWorkflowType is the registered name of the BatchPredict
	// workflow.
	BatchPredictWorkflowType = "BatchPredict"
	// ActivityPlanBatchPredict checks a BatchPredict's input (checkpoint,
	// dataset, output) and cuts the dataset into shards; it runs on the
	// predict task queue, where it loads the predictor the shards use.
	ActivityPlanBatchPredict = "PlanBatchPredict"
	// ActivityPredictShard predicts one shard and commits its output file.
	ActivityPredictShard = "PredictShard"
	// ActivityCommitBatchPredict writes the output's manifest, last.
	ActivityCommitBatchPredict = "CommitBatchPredict"
	// QueryBatchPredictStatus returns a BatchPredictStatus.
	QueryBatchPredictStatus = "status"
)

// ErrBatchPredictFailed is the kind of the error a BatchPredict ends with
// when a shard failed for good (its attempts spent, or an error no retry
// fixes); the details carry the BatchPredictResult so far.
const ErrBatchPredictFailed ErrorKind = "BatchPredictFailed"

// Defaults and bounds of BatchPredictInput.
const (
	DefaultPredictFormat      = "parquet"
	DefaultPredictConcurrency = 4
	// MaxPredictConcurrency bounds Concurrency.
	MaxPredictConcurrency = 1024
	DefaultShardRows      = 100_000
	DefaultPredictBatch   = 1024
	// MaxPredictBatch bounds BatchSize.
	MaxPredictBatch         = 1 << 20
	DefaultShardMaxAttempts = 3
	// MaxShardAttempts bounds MaxAttempts.
	MaxShardAttempts = 100
	// MinPredictHeartbeatTimeout bounds HeartbeatTimeout from below: a few
	// of the shards' one-second heartbeats.
	MinPredictHeartbeatTimeout = 3 * time.Second
	DefaultPredictStartLimit   = 10 * time.Minute
	// PredictManifestName is the manifest a BatchPredict writes into its
	// output last: a BatchPredictManifest as JSON. Readers of the output
	// (package data among them) skip names starting with "_".
	PredictManifestName = "_SUCCESS"
	// PredictManifestVersion is the version of the manifest's format.
	PredictManifestVersion = 1
)

// PredictFormats are the output formats of a BatchPredict.
var PredictFormats = []string{"parquet", "csv"}

// BatchPredictInput is the input of the BatchPredict workflow (Ray's
// BatchPredictor.predict over a dataset, made durable). It is plain JSON:
//
//	temporal workflow start --type BatchPredict --task-queue tempotrain --workflow-id predict-demo \
//	  --input '{"dataset":{"uri":"s3://bucket/images/*.parquet"},"checkpoint":"s3://bucket/runs/demo/checkpoint_000003","output":"s3://bucket/predictions/demo","pass_through":["id"]}'
//
// The dataset is cut into shards (a CSV file, or a range of a Parquet
// file's row groups of at most ShardRows rows); each shard is predicted by
// one PredictShard activity and written to {output}/part-{shard:05d}.{format}
// with one atomic write, so that a shard retried after a worker died still
// leaves exactly one file; {output}/_SUCCESS, written last, lists them.
type BatchPredictInput struct {
	// Dataset is the table to predict, as a Fit names one (api.DatasetSpec):
	// CSV or Parquet, local or S3. Features names the columns of a model
	// that takes all of a row's numbers as one tensor (the image classifiers'
	// "pixels"); default every column but Label and PassThrough. A model that
	// takes one input per column (a table model) reads the columns of its
	// inputs' names. Label, if set, is not a feature (pass it through to
	// keep it). Required.
	Dataset DatasetSpec `json:"dataset"`
	// Checkpoint is the URI of a committed checkpoint (a Fit Result's
	// checkpoint.uri). Required.
	Checkpoint string `json:"checkpoint"`
	// Output is the directory the predictions go to: "/abs/dir",
	// "file:///abs/dir" or "s3://bucket/prefix". Required; it must not be
	// inside the dataset's directory.
	Output string `json:"output"`
	// Format of the output files: "parquet" (the default) or "csv".
	Format string `json:"format,omitempty"`
	// Concurrency is the number of shards predicted at once. Default 4.
	Concurrency int `json:"concurrency,omitempty"`
	// PassThrough columns of the input are copied into the output, first,
	// in this order (an id column). Default none.
	PassThrough []string `json:"pass_through,omitempty"`
	// Outputs are the model outputs written, in the model's order. Default
	// all. An output of shape [-1] is one column named after it; one of
	// shape [-1, k] is k columns "{output}_0" ... "{output}_{k-1}".
	Outputs []string `json:"outputs,omitempty"`
	// UseGPU sends the shards to the GPU task queue. Default false.
	UseGPU bool `json:"use_gpu,omitempty"`
	// TaskQueue of the shards (and of the planning activity, which loads
	// the predictor). Default: DefaultCPUQueue, or DefaultGPUQueue when
	// UseGPU, as a Fit's ranks.
	TaskQueue string `json:"task_queue,omitempty"`
	// ShardRows bounds the rows of a Parquet shard (one output file); a CSV
	// file is one shard whatever its size. Default 100000.
	ShardRows int64 `json:"shard_rows,omitempty"`
	// BatchSize is the number of rows per call of the predictor. Default
	// 1024.
	BatchSize int `json:"batch_size,omitempty"`
	// HeartbeatTimeout: a shard whose worker is silent this long is retried
	// elsewhere. Shards heartbeat every second. Default 60s, at least 3s.
	HeartbeatTimeout Duration `json:"heartbeat_timeout,omitempty"`
	// StartTimeout bounds the wait for a worker on TaskQueue to take the
	// planning activity: with no worker there, the run fails after it.
	// Default 10m.
	StartTimeout Duration `json:"start_timeout,omitempty"`
	// MaxAttempts of each shard, the first included. Default 3, at most
	// 100.
	MaxAttempts int `json:"max_attempts,omitempty"`
	// Overwrite replaces an output that already holds a committed
	// BatchPredict (a _SUCCESS manifest). Default false: such an output fails
	// the run. Part files of an output without a manifest (an earlier run
	// that did not finish) are always replaced.
	Overwrite bool `json:"overwrite,omitempty"`
}

// PredictQueue returns the task queue of the shards.
func (in BatchPredictInput) PredictQueue() string {
	return ScalingConfig{UseGPU: in.UseGPU, TaskQueue: in.TaskQueue}.RankQueue()
}

// WithDefaults returns a copy with every unset optional field at its
// default; slices are copied.
func (in BatchPredictInput) WithDefaults() BatchPredictInput {
	in.Dataset = in.Dataset.WithDefaults()
	in.PassThrough = slices.Clone(in.PassThrough)
	in.Outputs = slices.Clone(in.Outputs)
	if in.Format == "" {
		in.Format = DefaultPredictFormat
	}
	if in.Concurrency == 0 {
		in.Concurrency = DefaultPredictConcurrency
	}
	if in.ShardRows == 0 {
		in.ShardRows = DefaultShardRows
	}
	if in.BatchSize == 0 {
		in.BatchSize = DefaultPredictBatch
	}
	if in.HeartbeatTimeout == 0 {
		in.HeartbeatTimeout = Duration(DefaultHeartbeatTimeout)
	}
	if in.StartTimeout == 0 {
		in.StartTimeout = Duration(DefaultPredictStartLimit)
	}
	if in.MaxAttempts == 0 {
		in.MaxAttempts = DefaultShardMaxAttempts
	}
	return in
}

// InvalidBatchPredictInputError says which field of a BatchPredictInput is
// wrong and why.
type InvalidBatchPredictInputError struct {
	Field  string
	Value  any
	Reason string
}

func (e *InvalidBatchPredictInputError) Error() string {
	return fmt.Sprintf("invalid BatchPredict input: %s = %s: %s", e.Field, fmtValue(e.Value), e.Reason)
}

// Validate checks an input after WithDefaults. The first problem found is
// returned as an *InvalidBatchPredictInputError naming the field and its
// value. It reads nothing: whether the checkpoint exists, the dataset's
// columns fit the model and the output is writable is the planning
// activity's to find out.
func (in BatchPredictInput) Validate() error {
	bad := func(field string, v any, reason string) error {
		return &InvalidBatchPredictInputError{Field: field, Value: v, Reason: reason}
	}
	ds := in.Dataset
	if ds.Format != "" && ds.Format != "csv" && ds.Format != "parquet" || strings.HasPrefix(ds.URI, FashionMNISTScheme) {
		return bad("dataset.format", ds.Format, `BatchPredict reads tables: "csv" or "parquet"`)
	}
	if err := ds.Validate("dataset"); err != nil {
		if ie, ok := err.(*InvalidInputError); ok {
			return bad(ie.Field, ie.Value, ie.Reason)
		}
		return bad("dataset", ds.URI, err.Error())
	}
	switch {
	case strings.TrimSpace(in.Checkpoint) == "":
		return bad("checkpoint", in.Checkpoint, `is required: the URI of a committed checkpoint ("/runs/demo/checkpoint_000003" or "s3://bucket/runs/demo/checkpoint_000003")`)
	case !validStoragePath(in.Checkpoint):
		return bad("checkpoint", in.Checkpoint, `must be a checkpoint URI: "/runs/demo/checkpoint_000003", "file:///..." or "s3://bucket/runs/demo/checkpoint_000003"`)
	case strings.TrimSpace(in.Output) == "":
		return bad("output", in.Output, `is required: a directory ("/data/predictions") or "s3://bucket/prefix"`)
	case !validStoragePath(in.Output) || hasGlobChars(in.Output):
		return bad("output", in.Output, `must be an absolute directory, "file:///dir" or "s3://bucket/prefix", without glob characters`)
	case inside(in.Output, datasetDir(ds.URI)):
		return bad("output", in.Output, fmt.Sprintf("must not be inside the dataset's directory %q: its files would be read as input", datasetDir(ds.URI)))
	case !slices.Contains(PredictFormats, in.Format):
		return bad("format", in.Format, "must be one of "+quoteList(PredictFormats))
	case in.Concurrency < 1 || in.Concurrency > MaxPredictConcurrency:
		return bad("concurrency", in.Concurrency, fmt.Sprintf("must be in [1, %d]", MaxPredictConcurrency))
	case in.ShardRows < 1:
		return bad("shard_rows", in.ShardRows, "must be at least 1")
	case in.BatchSize < 1 || in.BatchSize > MaxPredictBatch:
		return bad("batch_size", in.BatchSize, fmt.Sprintf("must be in [1, %d]", MaxPredictBatch))
	case in.HeartbeatTimeout.D() < MinPredictHeartbeatTimeout:
		return bad("heartbeat_timeout", in.HeartbeatTimeout, fmt.Sprintf("must be at least %s (shards heartbeat every second)", MinPredictHeartbeatTimeout))
	case in.StartTimeout < 0:
		return bad("start_timeout", in.StartTimeout, "must be positive")
	case in.MaxAttempts < 1 || in.MaxAttempts > MaxShardAttempts:
		return bad("max_attempts", in.MaxAttempts, fmt.Sprintf("must be in [1, %d]", MaxShardAttempts))
	}
	if err := validNames(in.PassThrough); err != "" {
		return bad("pass_through", in.PassThrough, err)
	}
	if err := validNames(in.Outputs); err != "" {
		return bad("outputs", in.Outputs, err)
	}
	return nil
}

func hasGlobChars(s string) bool { return strings.ContainsAny(s, "*?[") }

// datasetDir is the directory a dataset URI lists: the URI itself (a
// directory or prefix, or a file), or a glob's directory.
func datasetDir(uri string) string {
	u := uri
	if i := strings.LastIndex(u, "/"); i >= 0 && hasGlobChars(u[i+1:]) {
		u = u[:i]
	}
	return normDir(u)
}

// normDir writes a local path, file:// URI or S3 URI one way: cleaned,
// without a trailing slash or the file:// scheme.
func normDir(u string) string {
	if rest, ok := strings.CutPrefix(u, "s3://"); ok {
		return "s3://" + strings.TrimSuffix(path.Clean("/" + rest)[1:], "/")
	}
	return path.Clean(strings.TrimPrefix(u, "file://"))
}

// inside says whether the directory out is dir or below it.
func inside(out, dir string) bool {
	o := normDir(out)
	return o == dir || strings.HasPrefix(o, strings.TrimSuffix(dir, "/")+"/")
}

// BatchPredictResult is what a BatchPredict returns.
type BatchPredictResult struct {
	// Output is the output directory's URI; Manifest the URI of its
	// _SUCCESS manifest (empty when the run failed).
	Output   string `json:"output"`
	Manifest string `json:"manifest,omitempty"`
	// Format of the output files.
	Format string `json:"format"`
	// Columns of the output files, in order.
	Columns []OutputColumn `json:"columns,omitempty"`
	// Shards the input was cut into (one output file each); Done of them
	// committed.
	Shards int `json:"shards"`
	Done   int `json:"done"`
	// RowsIn counts the input rows of the committed shards, RowsOut the
	// rows of their output files: always equal.
	RowsIn  int64 `json:"rows_in"`
	RowsOut int64 `json:"rows_out"`
	// Files are the names of the output files in Output, by shard.
	Files []string `json:"files,omitempty"`
	// Attempts per shard (1: done at the first try; 0: not done).
	Attempts []int `json:"attempts,omitempty"`
	// Retried counts the shards that took more than one attempt.
	Retried int `json:"retried"`
	// Seconds from the start of the workflow to its end.
	Seconds float64 `json:"seconds"`
	// Error says why the run failed; empty on success.
	Error string `json:"error,omitempty"`
}

// OutputColumn is one column of a BatchPredict's output files.
type OutputColumn struct {
	Name string `json:"name"`
	// Type is "float32", "float64", "int64" or "string".
	Type string `json:"type"`
	// Nullable columns may hold missing values (pass-through columns).
	Nullable bool `json:"nullable,omitempty"`
	// Source is "pass_through", or the model output it comes from.
	Source string `json:"source"`
}

// PredictShardSpec is one shard: rows [Lo, Hi) of an input file (Hi -1:
// to the file's end, for CSV files, whose rows are known once read).
type PredictShardSpec struct {
	Index int `json:"index"`
	// File indexes PredictPlan.Files.
	File int   `json:"file"`
	Lo   int64 `json:"lo"`
	Hi   int64 `json:"hi"`
}

// Rows is the shard's row count, -1 when unknown.
func (s PredictShardSpec) Rows() int64 {
	if s.Hi < 0 {
		return -1
	}
	return s.Hi - s.Lo
}

// PredictPlanInput is the input of PlanBatchPredict.
type PredictPlanInput struct {
	Input BatchPredictInput `json:"input"`
}

// PredictPlan is what PlanBatchPredict found: the shards and the output's
// columns.
type PredictPlan struct {
	// Model is the predictor's name, Format the dataset's ("csv",
	// "parquet").
	Model         string `json:"model"`
	DatasetFormat string `json:"dataset_format"`
	// Files are the input files' URIs, in order.
	Files  []string           `json:"files"`
	Shards []PredictShardSpec `json:"shards"`
	// Columns of every output file.
	Columns []OutputColumn `json:"columns"`
	// RowsIn is the input's row count, -1 when unknown before reading
	// (CSV).
	RowsIn int64 `json:"rows_in"`
	// Checkpoint is the input's checkpoint resolved: a schedule's pointer
	// file (promoted.json) becomes the checkpoint it named when planned,
	// so that every shard predicts with the same model.
	Checkpoint string `json:"checkpoint,omitempty"`
}

// PredictShardInput is the input of one PredictShard.
type PredictShardInput struct {
	Input BatchPredictInput `json:"input"`
	// DatasetFormat and File say what to read; Shard which rows.
	DatasetFormat string           `json:"dataset_format"`
	File          string           `json:"file"`
	Shard         PredictShardSpec `json:"shard"`
	// Columns the output must have (the plan's).
	Columns []OutputColumn `json:"columns"`
}

// PartName is the name of shard i's output file in the output directory.
func PartName(i int, format string) string { return fmt.Sprintf("part-%05d.%s", i, format) }

// PredictShardOutput is what a PredictShard committed.
type PredictShardOutput struct {
	Index int `json:"index"`
	// File is the output file's URI.
	File string `json:"file"`
	// Rows read from the input, all written to File.
	Rows  int64 `json:"rows"`
	Bytes int64 `json:"bytes"`
	// Attempt that committed it (1 for the first).
	Attempt int `json:"attempt"`
}

// PredictProgress is a PredictShard's heartbeat detail.
type PredictProgress struct {
	Shard int `json:"shard"`
	// Rows of the shard predicted so far; Total its rows (-1: unknown).
	Rows  int64 `json:"rows"`
	Total int64 `json:"total"`
	// Phase: "load" (the predictor), "predict", "commit".
	Phase string `json:"phase"`
}

// BatchPredictManifest is {output}/_SUCCESS: written last, it says the
// output is complete and what it holds.
type BatchPredictManifest struct {
	Version    int            `json:"version"`
	Checkpoint string         `json:"checkpoint"`
	Model      string         `json:"model"`
	Dataset    string         `json:"dataset"`
	Format     string         `json:"format"`
	Columns    []OutputColumn `json:"columns"`
	RowsIn     int64          `json:"rows_in"`
	RowsOut    int64          `json:"rows_out"`
	Shards     []ManifestPart `json:"shards"`
	Created    time.Time      `json:"created"`
}

// ManifestPart is one output file in a BatchPredictManifest.
type ManifestPart struct {
	Index int `json:"index"`
	// File is the file's name in the output directory.
	File string `json:"file"`
	// Input is the URI of the input file, with the rows [Lo, Hi) read.
	Input string `json:"input"`
	Lo    int64  `json:"lo"`
	Hi    int64  `json:"hi"`
	Rows  int64  `json:"rows"`
	Bytes int64  `json:"bytes"`
}

// CommitPredictInput is the input of CommitBatchPredict: what the
// manifest says, in a compact form (the activity writes it out).
type CommitPredictInput struct {
	Input BatchPredictInput `json:"input"`
	Plan  PredictPlan       `json:"plan"`
	// Rows and Bytes of each shard's output file.
	Rows    []int64   `json:"rows"`
	Bytes   []int64   `json:"bytes"`
	Created time.Time `json:"created"`
}

// BatchPredictStatus is the answer of a BatchPredict's status Query. Rows
// of running shards are in their activities' heartbeats
// (PredictProgress).
type BatchPredictStatus struct {
	// Phase: "plan", "predict", "commit", "done" or "failed".
	Phase   string `json:"phase"`
	Shards  int    `json:"shards"`
	Done    int    `json:"done"`
	Running int    `json:"running"`
	// RowsDone counts the rows of committed shards; RowsIn the input's
	// (-1 while unknown).
	RowsDone int64 `json:"rows_done"`
	RowsIn   int64 `json:"rows_in"`
	// Retried counts the shards committed by a later attempt.
	Retried int    `json:"retried"`
	Error   string `json:"error,omitempty"`
}
