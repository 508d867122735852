package workflows

import (
	"time"

	"github.com/tempotrain/tempotrain/train"
)

// Names of activities, Updates and Queries shared by the workflow and the
// activities that implement them.
const (
	// ActivityRunRank runs one rank of one attempt (on the rank task queue).
	ActivityRunRank = "RunRank"
	// ActivityLoadRun checks the storage path and loads run.json.
	ActivityLoadRun = "LoadRun"
	// ActivityRecordRun appends reports to metrics.jsonl, saves run.json and
	// then deletes retired checkpoints.
	ActivityRecordRun = "RecordRun"

	// UpdateRegister: a rank registers its address for the rendezvous.
	UpdateRegister = "register"
	// UpdateReport: rank 0 reports metrics and a committed checkpoint.
	UpdateReport = "report"
	// QueryRendezvous: a rank polls for the peers of its attempt.
	QueryRendezvous = "rendezvous"
	// QueryStatus returns a Status: attempt, latest metrics, recent reports.
	QueryStatus = "status"
)

// Error types of the application errors this package and the ranks raise.
const (
	// ErrTypeInvalidInput: a bad FitInput; the workflow fails at once.
	ErrTypeInvalidInput = "InvalidInput"
	// ErrTypeTrainingFailed: the run failed; details carry the train.Result.
	ErrTypeTrainingFailed = "TrainingFailed"
	// ErrTypeStorage: the storage path is unusable (unknown scheme, missing
	// bucket, bad credentials).
	ErrTypeStorage = "StorageError"
	// ErrTypeStaleAttempt: a rank of an attempt that is no longer current.
	ErrTypeStaleAttempt = "StaleAttempt"
	// ErrTypeUnknownFunc: no training function of that name on the worker.
	ErrTypeUnknownFunc = "UnknownTrainFunc"
	// ErrTypeUserNonRetryable: the training function returned an error
	// wrapped with train.NonRetryable.
	ErrTypeUserNonRetryable = "TrainFuncNonRetryable"
	// ErrTypeUser: the training function returned an error.
	ErrTypeUser = "TrainFuncError"
	// ErrTypePeerLost: a rank failed because a peer's connection broke: a
	// consequence of another rank's failure, not a cause.
	ErrTypePeerLost = "PeerLost"
)

// RunRankInput is the input of one RunRank activity.
type RunRankInput struct {
	RunName     string `json:"run_name"`
	StoragePath string `json:"storage_path"`
	TrainFunc   string `json:"train_func"`
	Config      []byte `json:"config,omitempty"`
	Attempt     int    `json:"attempt"`
	Rank        int    `json:"rank"`
	WorldSize   int    `json:"world_size"`
	UseGPU      bool   `json:"use_gpu,omitempty"`
	Token       string `json:"token"`
	// Checkpoints to resume from, newest first: the rank restores the first
	// that verifies. Empty on a fresh run. One with Seq 0 is a warm start
	// from another run's checkpoint, found by its URI.
	Checkpoints []train.Checkpoint `json:"checkpoints,omitempty"`
	// NextSeq is the sequence number rank 0 gives its first checkpoint.
	NextSeq int `json:"next_seq"`
	// AsyncUpload: rank 0 uploads checkpoints in the background.
	AsyncUpload       bool           `json:"async_upload,omitempty"`
	CollectiveTimeout train.Duration `json:"collective_timeout"`
	StartTimeout      train.Duration `json:"start_timeout"`
}

// RankOutput is what a rank returns when its function finished.
type RankOutput struct {
	Rank    int `json:"rank"`
	Reports int `json:"reports"`
}

// RegisterRequest is the argument of the register Update.
type RegisterRequest struct {
	Attempt int    `json:"attempt"`
	Rank    int    `json:"rank"`
	Addr    string `json:"addr"`
	// Node identifies the machine (a worker's node name); ranks with the same
	// Node share LocalRank numbering.
	Node string `json:"node"`
}

// Peer is one registered rank.
type Peer struct {
	Addr string `json:"addr"`
	Node string `json:"node"`
}

// Rendezvous states.
const (
	RendezvousWaiting = "waiting"
	RendezvousReady   = "ready"
	RendezvousStale   = "stale"
)

// Rendezvous is the answer of the rendezvous Query.
type Rendezvous struct {
	State      string `json:"state"`
	Attempt    int    `json:"attempt"`
	Registered int    `json:"registered"`
	WorldSize  int    `json:"world_size"`
	// Peers is set when State is ready: Peers[i] is rank i.
	Peers []Peer `json:"peers,omitempty"`
}

// ReportRequest is the argument of the report Update.
type ReportRequest struct {
	Attempt int           `json:"attempt"`
	Rank    int           `json:"rank"`
	Metrics train.Metrics `json:"metrics,omitempty"`
	// Checkpoint is set when the report committed one.
	Checkpoint *train.Checkpoint `json:"checkpoint,omitempty"`
}

// ReportResponse answers a report.
type ReportResponse struct {
	// Index of the report in metrics.jsonl.
	Index int `json:"index"`
}

// ReportRecord is one line of metrics.jsonl.
type ReportRecord struct {
	Index      int           `json:"index"`
	Attempt    int           `json:"attempt"`
	Time       time.Time     `json:"time"`
	Metrics    train.Metrics `json:"metrics,omitempty"`
	Checkpoint int           `json:"checkpoint,omitempty"`
}

// AttemptRecord is the history of one attempt, kept in run.json.
type AttemptRecord struct {
	Attempt     int       `json:"attempt"`
	Start       time.Time `json:"start"`
	End         time.Time `json:"end,omitzero"`
	ResumedFrom int       `json:"resumed_from,omitempty"`
	// WarmStart is the URI of another run's checkpoint the attempt started
	// from (RunConfig.ResumeFrom).
	WarmStart string `json:"warm_start,omitempty"`
	Error     string `json:"error,omitempty"`
}

// Run states in run.json.
const (
	StatusRunning   = "running"
	StatusSucceeded = "succeeded"
	StatusFailed    = "failed"
	StatusCancelled = "cancelled"
)

// RunStateVersion is the format version of run.json.
const RunStateVersion = 1

// RunState is run.json: what a later Fit of the same name needs to resume.
type RunState struct {
	Version   int    `json:"version"`
	Name      string `json:"name"`
	TrainFunc string `json:"train_func"`
	Status    string `json:"status"`
	Error     string `json:"error,omitempty"`
	// Attempts started over the run's life, across Fits.
	Attempts int `json:"attempts"`
	// Failures over the run's life, across Fits.
	Failures int `json:"failures"`
	// Reports recorded in metrics.jsonl.
	Reports int `json:"reports"`
	// NextSeq is the sequence number of the next checkpoint.
	NextSeq int `json:"next_seq"`
	// Checkpoints kept, by seq ascending.
	Checkpoints []train.Checkpoint `json:"checkpoints,omitempty"`
	Latest      train.Metrics      `json:"latest_metrics,omitempty"`
	History     []AttemptRecord    `json:"history,omitempty"`
	Updated     time.Time          `json:"updated"`
}

// LoadRunInput is the input of LoadRun.
type LoadRunInput struct {
	StoragePath string `json:"storage_path"`
	RunName     string `json:"run_name"`
	// ResumeFrom, when set, must name a committed checkpoint.
	ResumeFrom string `json:"resume_from,omitempty"`
}

// LoadRunOutput is what LoadRun found.
type LoadRunOutput struct {
	// Path is the run directory's URI.
	Path string `json:"path"`
	// State is nil when the run does not exist yet.
	State *RunState `json:"state,omitempty"`
}

// RecordRunInput is the input of RecordRun.
type RecordRunInput struct {
	StoragePath string         `json:"storage_path"`
	RunName     string         `json:"run_name"`
	Reports     []ReportRecord `json:"reports,omitempty"`
	State       RunState       `json:"state"`
	// Delete lists checkpoints retired by retention; deleted after run.json
	// is saved.
	Delete []int `json:"delete,omitempty"`
}

// Status is the answer of the status Query.
type Status struct {
	Name     string         `json:"name"`
	Attempt  int            `json:"attempt"`
	Failures int            `json:"failures"`
	Reports  int            `json:"reports"`
	Latest   train.Metrics  `json:"latest_metrics,omitempty"`
	Recent   []ReportRecord `json:"recent,omitempty"`
	// Checkpoint is the latest committed, nil if none.
	Checkpoint *train.Checkpoint `json:"checkpoint,omitempty"`
	Done       bool              `json:"done"`
}
