package api

// Result is what a Fit returns (Ray's Result).
type Result struct {
	// Name of the run.
	Name string `json:"name"`
	// Metrics last reported by rank 0.
	Metrics Metrics `json:"metrics,omitempty"`
	// Checkpoint is the latest committed checkpoint, nil if none.
	Checkpoint *Checkpoint `json:"checkpoint,omitempty"`
	// BestCheckpoints are the kept checkpoints, best first by
	// CheckpointConfig.ScoreAttribute (newest first without one).
	BestCheckpoints []Checkpoint `json:"best_checkpoints,omitempty"`
	// Path is the run's directory in storage.
	Path string `json:"path"`
	// Attempts started, counting the first; a resumed run counts on.
	Attempts int `json:"attempts"`
	// Failures counts failed attempts of this Fit.
	Failures int `json:"failures"`
	// Reports counts the reports recorded.
	Reports int `json:"reports"`
	// Error says why the run failed; empty on success.
	Error string `json:"error,omitempty"`
	// StopReason, set when the run was stopped on request (a Tune's
	// scheduler or stop condition, a stop signal; run.json's status
	// "stopped"), says why. Not a failure: Error stays empty.
	StopReason string `json:"stop_reason,omitempty"`
	// WorldSizes lists the world size each attempt of the run trained
	// with, in order (0 for an attempt that ended before its group formed).
	// A fixed-size run lists num_workers for each; an elastic run shows its
	// shrinking and growing. run.json's history says why each attempt
	// ended.
	WorldSizes []int `json:"world_sizes,omitempty"`
	// Promoted: a scheduled run's best checkpoint beat the schedule's
	// promoted one and is promoted now.
	Promoted bool `json:"promoted,omitempty"`
}
