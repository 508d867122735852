package api

import (
	"fmt"
	"slices"
	"time"
	"unicode/utf8"
)

// RunStatus is the state of a run in run.json.
type RunStatus string

// Run states.
const (
	StatusRunning   RunStatus = "running"
	StatusSucceeded RunStatus = "succeeded"
	StatusFailed    RunStatus = "failed"
	StatusCancelled RunStatus = "cancelled"
	// StatusStopped: stopped on request (a Tune's scheduler or stop
	// condition, or a stop signal) with the checkpoints it recorded; not a
	// failure.
	StatusStopped RunStatus = "stopped"
)

// RunStateVersion is the format version of run.json.
const RunStateVersion = 1

// MaxUnusable bounds RunState.Unusable.
const MaxUnusable = 1000

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
	Checkpoints []Checkpoint `json:"checkpoints,omitempty"`
	// Unusable are the seqs of checkpoints a restore found corrupt or
	// missing, ascending: no later attempt is offered them or downloads
	// them again. At most MaxUnusable, the newest kept.
	Unusable []int           `json:"unusable,omitempty"`
	Latest   Metrics         `json:"latest_metrics,omitempty"`
	History  []AttemptRecord `json:"history,omitempty"`
	Updated  time.Time       `json:"updated"`
	// Abandoned are the seqs given to a rank 0 that did not end within the
	// cancel grace (its worker died or froze): it may have committed that
	// checkpoint without reporting it, and no later attempt writes that
	// seq. Deleted at the run's end unless kept.
	Abandoned []int `json:"abandoned_seqs,omitempty"`
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
	// KernelPathChanged: the checkpoint restored was written on other CPU
	// kernels (another processor kind) than the ranks named run, so this
	// attempt's results are not bit-identical to an uninterrupted run's
	// (RestoredRequest.KernelPathChanged).
	KernelPathChanged string `json:"kernel_path_changed,omitempty"`
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

// MarkUnusable adds seqs to Unusable (ascending, once each), keeping the
// newest MaxUnusable.
func (s *RunState) MarkUnusable(seqs ...int) {
	for _, q := range seqs {
		i, found := slices.BinarySearch(s.Unusable, q)
		if q > 0 && !found {
			s.Unusable = slices.Insert(s.Unusable, i, q)
		}
	}
	if n := len(s.Unusable); n > MaxUnusable {
		s.Unusable = slices.Delete(s.Unusable, 0, n-MaxUnusable)
	}
}

// IsUnusable reports whether checkpoint seq is in Unusable.
func (s *RunState) IsUnusable(seq int) bool {
	_, found := slices.BinarySearch(s.Unusable, seq)
	return found
}

// Bounds of a list of reasons in a message or a record (Abbreviate): with
// many damaged checkpoints a restore's error, its Update and run.json's
// AttemptRecord.Skipped stay readable and small.
const (
	MaxReasons   = 8
	MaxReasonLen = 300
)

// Abbreviate bounds a list of reasons for a message or a record: the first
// MaxReasons, each cut to MaxReasonLen bytes (on a rune boundary), then
// "... and N more".
func Abbreviate(items []string) []string {
	const max, maxLen = MaxReasons, MaxReasonLen
	var out []string
	for i, s := range items {
		if i == max {
			out = append(out, fmt.Sprintf("... and %d more", len(items)-i))
			break
		}
		if len(s) > maxLen {
			cut := maxLen
			for cut > 0 && !utf8.RuneStart(s[cut]) {
				cut--
			}
			s = s[:cut] + "..."
		}
		out = append(out, s)
	}
	return out
}
