package train

import "github.com/tempotrain/tempotrain/api"

// The run's data types live in package api, shared with the workflow and the
// worker side; these are the names a user of train writes.
type (
	// FitInput is the input of the Fit workflow (plain JSON).
	FitInput = api.FitInput
	// PythonSpec names a Python training function (FitInput.Python).
	PythonSpec = api.PythonSpec
	// ScalingConfig says how many ranks a run has and where (Ray's ScalingConfig).
	ScalingConfig = api.ScalingConfig
	// RunConfig names a run and says where it stores its state (Ray's RunConfig).
	RunConfig = api.RunConfig
	// FailureConfig says how a run reacts to failures (Ray's FailureConfig).
	FailureConfig = api.FailureConfig
	// CheckpointConfig says which checkpoints are kept (Ray's CheckpointConfig).
	CheckpointConfig = api.CheckpointConfig
	// Duration is a time.Duration that reads and writes JSON as "90s".
	Duration = api.Duration
	// Metrics are the numbers a rank reports.
	Metrics = api.Metrics
	// Checkpoint is a directory of files plus metadata (Ray's Checkpoint).
	Checkpoint = api.Checkpoint
	// Result is what a Fit returns (Ray's Result).
	Result = api.Result
	// InvalidInputError says which field of a FitInput is wrong and why.
	InvalidInputError = api.InvalidInputError
	// DatasetSpec describes one dataset of a run (FitInput.Datasets).
	DatasetSpec = api.DatasetSpec
	// PreprocessorSpec declares one preprocessor (FitInput.Preprocessors).
	PreprocessorSpec = api.PreprocessorSpec
	// Status is where a running Fit is (Run.Status).
	Status = api.Status
	// RankStatus is one rank's last heartbeat (Status.Ranks).
	RankStatus = api.RankStatus
)

// The task queues (the Fit workflow's, and the rank slots' of CPU and GPU
// workers) and the workflow's name, for starting a Fit or a worker by hand.
const (
	DefaultTaskQueue = api.DefaultTaskQueue
	DefaultCPUQueue  = api.DefaultCPUQueue
	DefaultGPUQueue  = api.DefaultGPUQueue
	WorkflowType     = api.WorkflowType
)
