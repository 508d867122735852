package api

// ErrorKind is the type of a Temporal application error that the workflow and
// the ranks raise (temporal.ApplicationError.Type()): callers branch on it,
// never on a message.
type ErrorKind string

// Error kinds.
const (
	// ErrInvalidInput: a bad FitInput; the workflow fails at once.
	ErrInvalidInput ErrorKind = "InvalidInput"
	// ErrTrainingFailed: the run failed; details carry the Result.
	ErrTrainingFailed ErrorKind = "TrainingFailed"
	// ErrStorage: the storage path is unusable (unknown scheme, missing
	// bucket, bad credentials).
	ErrStorage ErrorKind = "StorageError"
	// ErrStaleAttempt: a rank of an attempt that is no longer current.
	ErrStaleAttempt ErrorKind = "StaleAttempt"
	// ErrUnknownFunc: no training function of that name on the worker.
	ErrUnknownFunc ErrorKind = "UnknownTrainFunc"
	// ErrUserNonRetryable: the training function returned an error
	// wrapped with train.NonRetryable.
	ErrUserNonRetryable ErrorKind = "TrainFuncNonRetryable"
	// ErrUser: the training function returned an error.
	ErrUser ErrorKind = "TrainFuncError"
	// ErrPeerLost: a rank failed because a peer's connection broke: a
	// consequence of another rank's failure, not a cause.
	ErrPeerLost ErrorKind = "PeerLost"
	// ErrPreempted: the rank checkpointed and stopped because a worker of
	// its group is stopping: not a failure.
	ErrPreempted ErrorKind = "Preempted"
	// ErrWorkerStopping: a stopping worker refused a new rank; the attempt
	// is restarted elsewhere at once, not counted as a failure.
	ErrWorkerStopping ErrorKind = "WorkerStopping"
	// ErrNoCheckpoint: the run has checkpoints and none verifies; the run
	// stops rather than train from scratch (FailureConfig.AllowFreshStart).
	ErrNoCheckpoint ErrorKind = "NoUsableCheckpoint"
)

// String returns the kind as Temporal carries it.
func (k ErrorKind) String() string { return string(k) }
