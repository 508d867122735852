package api

import "time"

// RunStatus is the state of a run in run.json.
type RunStatus string

// Run states.
const (
	StatusRunning   RunStatus = "running"
	StatusSucceeded RunStatus = "succeeded"
	StatusFailed    RunStatus = "failed"
	StatusCancelled RunStatus = "cancelled"
)

// RunStateVersion is the format version of run.json.
const RunStateVersion = 1

// RunState is run.json: what a later Fit of the same name needs to resume.
type RunState struct {
	Version   int       `json:"version"`
	Name      string    `json:"name"`
	TrainFunc string    `json:"train_func"`
	Status    RunStatus `json:"status"`
	Error     string    `json:"error,omitempty"`
	// Attempts started over the run's life, across Fits.
	Attempts int `json:"attempts"`
	// Failures over the run's life, across Fits.
	Failures int `json:"failures"`
	// Reports recorded in metrics.jsonl.
	Reports int `json:"reports"`
	// NextSeq is the sequence number of the next checkpoint.
	NextSeq int `json:"next_seq"`
	// Checkpoints kept, by seq ascending.
	Checkpoints []Checkpoint    `json:"checkpoints,omitempty"`
	Latest      Metrics         `json:"latest_metrics,omitempty"`
	History     []AttemptRecord `json:"history,omitempty"`
	Updated     time.Time       `json:"updated"`
}

// AttemptRecord is the history of one attempt, kept in run.json.
type AttemptRecord struct {
	Attempt int       `json:"attempt"`
	Start   time.Time `json:"start"`
	End     time.Time `json:"end,omitzero"`
	// ResumedFrom is the newest checkpoint the attempt was given to resume
	// from; RestoredFrom the one its group restored (older when newer ones
	// did not verify; see Skipped), known once the group restored.
	ResumedFrom  int      `json:"resumed_from,omitempty"`
	RestoredFrom int      `json:"restored_from,omitempty"`
	Skipped      []string `json:"skipped,omitempty"`
	// StartedFresh: no checkpoint verified and FailureConfig.AllowFreshStart
	// let the attempt train from the start.
	StartedFresh bool `json:"started_fresh,omitempty"`
	// WarmStart is the URI of another run's checkpoint the attempt started
	// from (RunConfig.ResumeFrom).
	WarmStart string `json:"warm_start,omitempty"`
	Error     string `json:"error,omitempty"`
	// Preempted: the attempt ended because a worker was stopping, after
	// its ranks checkpointed; not counted as a failure.
	Preempted bool `json:"preempted,omitempty"`
	// WorldSize is how many ranks the attempt trained with (0: its group
	// never formed).
	WorldSize int `json:"world_size,omitempty"`
	// Grown: an elastic run ended the attempt at a checkpoint to restart
	// with more ranks (workers came back); not a failure.
	Grown bool `json:"grown,omitempty"`
}

// ReportRecord is one line of metrics.jsonl.
type ReportRecord struct {
	Index      int       `json:"index"`
	Attempt    int       `json:"attempt"`
	Time       time.Time `json:"time"`
	Metrics    Metrics   `json:"metrics,omitempty"`
	Checkpoint int       `json:"checkpoint,omitempty"`
}
