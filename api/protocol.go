package api

import "time"

// Names of the workflow, its activities, Updates and Queries: the contract
// between the Fit workflow (package workflows) and the worker side (package
// activities), which import this package and not each other.
const (
	// ActivityRunRank runs one rank of one attempt (on the rank task queue).
	ActivityRunRank = "RunRank"
	// ActivityLoadRun checks the storage path and loads run.json.
	ActivityLoadRun = "LoadRun"
	// ActivityRecordRun appends reports to metrics.jsonl, saves run.json and
	// then deletes retired checkpoints.
	ActivityRecordRun = "RecordRun"
	// ActivityPromote records a scheduled run's best checkpoint and
	// promotes it when better.
	ActivityPromote = "Promote"

	// UpdateRegister: a rank registers its address for the rendezvous.
	UpdateRegister = "register"
	// UpdateRegisterBatch: the ranks of one worker process register
	// together, several RegisterRequests of one attempt in one Update
	// (RegisterBatchResponse).
	UpdateRegisterBatch = "register-batch"
	// UpdateReport: rank 0 reports metrics and a committed checkpoint.
	UpdateReport = "report"
	// UpdateReports: rank 0 reports several (ReportsRequest) in one
	// Update, in order: those its training function made while the one
	// before was on its way.
	UpdateReports = "reports"
	// QueryRendezvous: a rank polls for the peers of its attempt.
	QueryRendezvous = "rendezvous"
	// QueryStatus returns a Status: attempt, latest metrics, recent reports.
	QueryStatus = "status"
	// UpdateRestored: rank 0 says which checkpoint the group restored.
	UpdateRestored = "restored"

	// GroupWorkflowType is the registered name of a rank group: a child
	// workflow of a Fit of many ranks that starts and watches a share of
	// each attempt's ranks, so that their starts, registrations and
	// heartbeats spread over several workflow executions (package
	// workflows, groups.go).
	GroupWorkflowType = "FitRankGroup"
)

// BookkeepingHeartbeatTimeout is the heartbeat timeout of LoadRun and
// RecordRun, which heartbeat every BookkeepingHeartbeatTimeout/5.
const BookkeepingHeartbeatTimeout = 15 * time.Second

// RunRankInput is the input of one RunRank activity.
type RunRankInput struct {
	RunName     string `json:"run_name"`
	StoragePath string `json:"storage_path"`
	TrainFunc   string `json:"train_func"`
	Config      []byte `json:"config,omitempty"`
	Attempt     int    `json:"attempt"`
	Rank        int    `json:"rank"`
	WorldSize   int    `json:"world_size"`
	// Elastic: Rank is the rank's slot and WorldSize the most ranks; the
	// rendezvous gives the rank and world size the attempt trains with
	// (Rendezvous.Slots), and a slot left out of the group waits as a
	// standby until the attempt ends.
	Elastic bool `json:"elastic,omitempty"`
	// Local, when over 1: the activity runs ranks Rank..Rank+Local-1 of the
	// world, together in its worker process (ScalingConfig.RanksPerProcess).
	Local int `json:"local,omitempty"`
	// Activities is how many RunRank activities the attempt runs (its
	// ranks, or its bundles of ranks): what a rank's heartbeat interval is
	// stretched by (RankHeartbeatInterval). Zero: WorldSize.
	Activities int  `json:"activities,omitempty"`
	UseGPU     bool `json:"use_gpu,omitempty"`
	// Resources are what the rank holds on its worker
	// (ScalingConfig.Resources): its GPUs and CPUs. Zero: one GPU when
	// UseGPU, CPUs not counted. Nil (absent) for a run without
	// ScalingConfig.ResourcesPerWorker, so its input is as it always was.
	Resources *Resources `json:"resources,omitempty"`
	Token     string     `json:"token"`
	// Checkpoints to resume from, newest first: the rank restores the first
	// that verifies. Empty on a fresh run. One with Seq 0 is a warm start
	// from another run's checkpoint, found by its URI.
	Checkpoints []Checkpoint `json:"checkpoints,omitempty"`
	// Unusable are the seqs of checkpoints an earlier attempt found corrupt
	// or missing (RunState.Unusable): the rank does not download them again
	// when it looks past Checkpoints for an older one.
	Unusable []int `json:"unusable,omitempty"`
	// AllowFreshStart is FailureConfig.AllowFreshStart.
	AllowFreshStart bool `json:"allow_fresh_start,omitempty"`
	// NextSeq is the sequence number rank 0 gives its first checkpoint.
	NextSeq int `json:"next_seq"`
	// AsyncUpload: rank 0 uploads checkpoints in the background.
	AsyncUpload       bool     `json:"async_upload,omitempty"`
	CollectiveTimeout Duration `json:"collective_timeout"`
	StartTimeout      Duration `json:"start_timeout"`
	// Datasets and Preprocessors of the run (FitInput's), which the rank's
	// function opens with train.Context.Dataset.
	Datasets      map[string]DatasetSpec `json:"datasets,omitempty"`
	Preprocessors []PreprocessorSpec     `json:"preprocessors,omitempty"`
	// Python is FitInput.Python: the Python function the rank runs.
	Python *PythonSpec `json:"python,omitempty"`
	// WaitMetric, when set, names the metric whose reports the workflow
	// answers only once it has decided on them (a Tune trial's scheduler
	// metric): rank 0's Report of such a report waits for the answer.
	// Every other Report returns once queued, and rank 0 sends it in the
	// background.
	WaitMetric string `json:"wait_metric,omitempty"`
	// WaitJudging, with WaitMetric, narrows the reports that wait to those
	// the Tune's ASHA scheduler judges (Judging), from the rungs the run's
	// reports reached before this attempt (JudgedRungs). Never with
	// training_iteration as the time attribute (the rank does not know a
	// report's index in the run).
	WaitJudging *Judging  `json:"wait_judging,omitempty"`
	JudgedRungs []float64 `json:"judged_rungs,omitempty"`
	// Controller, when set, is the Fit's execution while a rank group
	// (GroupWorkflowType) started the rank: the rank registers with, and
	// polls the rendezvous of, the workflow that started it (its group),
	// and sends restored and its reports to the Fit. Nil: the workflow
	// that started the rank is the Fit.
	Controller *ExecutionRef `json:"controller,omitempty"`
}

// HeartbeatingActivities is how many activities of the attempt heartbeat:
// Activities, or WorldSize.
func (in RunRankInput) HeartbeatingActivities() int {
	if in.Activities > 0 {
		return in.Activities
	}
	return in.WorldSize
}

// BundleFailure is the first detail of the error of a RunRank that ran
// several ranks (RunRankInput.Local): which of them failed first. The
// failed rank's own detail (an api.Stall, its Progress), if any, follows.
type BundleFailure struct {
	Rank  int `json:"failed_rank"`
	Local int `json:"local"`
}

// ExecutionRef names a workflow execution.
type ExecutionRef struct {
	ID    string `json:"id"`
	RunID string `json:"run_id,omitempty"`
}

// RankOutput is what a rank returns when its function finished.
type RankOutput struct {
	Rank    int `json:"rank"`
	Reports int `json:"reports"`
}

// Phase is where a rank is in its life, carried in its heartbeat.
type Phase string

// Phases of a rank.
const (
	PhaseRendezvous Phase = "rendezvous"
	PhaseConnect    Phase = "connect"
	PhaseRestore    Phase = "restore"
	PhaseTrain      Phase = "train"
)

// Progress is a rank's heartbeat detail; the Web UI shows it on the pending
// activity.
type Progress struct {
	// Attempt and Rank say whose heartbeat it is: Rank is the rank in the
	// group (an elastic slot's rank once the group formed, -1 before and
	// for a standby); Slot is the rank input the workflow gave.
	Attempt int   `json:"attempt"`
	Rank    int   `json:"rank"`
	Slot    int   `json:"slot"`
	Phase   Phase `json:"phase"`
	Epoch   int   `json:"epoch"`
	Step    int   `json:"step"`
	Reports int   `json:"reports"`
	// Checkpoint is the seq of the last checkpoint this rank committed, or
	// restored from.
	Checkpoint int `json:"checkpoint,omitempty"`
	// Samples is how many training samples the rank has processed in this
	// attempt (train.Context.AddSamples); SamplesPerSec the rate over the
	// last heartbeat interval. Both 0 for a function that does not count.
	Samples       int64   `json:"samples,omitempty"`
	SamplesPerSec float64 `json:"samples_per_s,omitempty"`
}

// RankStatus is one rank's progress as its last heartbeat told it, with
// the worker that runs it: the client fills Status.Ranks from the pending
// RunRank activities (DescribeWorkflowExecution), since a Query cannot
// see heartbeats.
type RankStatus struct {
	Progress
	// Worker is the identity of the worker process running the rank.
	Worker string `json:"worker"`
	// LastHeartbeat is when the server last heard from the rank.
	LastHeartbeat time.Time `json:"last_heartbeat,omitzero"`
	// State is the activity's: SCHEDULED (no worker took it yet), STARTED
	// or CANCEL_REQUESTED.
	State string `json:"state"`
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

// RegisterBatchResponse is the result of the register-batch Update: the
// rendezvous as the batch left it, and the registrations the workflow
// refused, each with its error (the others were recorded).
type RegisterBatchResponse struct {
	Rendezvous Rendezvous      `json:"rendezvous"`
	Refused    []RegisterError `json:"refused,omitempty"`
}

// RegisterError is one refused registration of a register-batch Update.
type RegisterError struct {
	Rank  int    `json:"rank"`
	Error string `json:"error"`
}

// Peer is one registered rank.
type Peer struct {
	Addr string `json:"addr"`
	Node string `json:"node"`
}

// RendezvousState says whether an attempt's group is complete.
type RendezvousState string

// Rendezvous states.
const (
	RendezvousWaiting RendezvousState = "waiting"
	RendezvousReady   RendezvousState = "ready"
	RendezvousStale   RendezvousState = "stale"
	// RendezvousStandby (elastic runs): the group formed without this
	// slot; it waits, holding its worker's slot, so that the run knows the
	// capacity is back and grows at its next checkpoint.
	RendezvousStandby RendezvousState = "standby"
)

// Rendezvous is the answer of the rendezvous Query.
type Rendezvous struct {
	State      RendezvousState `json:"state"`
	Attempt    int             `json:"attempt"`
	Registered int             `json:"registered"`
	WorldSize  int             `json:"world_size"`
	// Peers is set when State is ready: Peers[i] is rank i.
	Peers []Peer `json:"peers,omitempty"`
	// Slots (elastic runs, State ready): Slots[i] is the slot of rank i,
	// the RunRankInput.Rank of the activity that is rank i.
	Slots []int `json:"slots,omitempty"`
}

// ReportRequest is the argument of the report Update.
type ReportRequest struct {
	Attempt int     `json:"attempt"`
	Rank    int     `json:"rank"`
	Metrics Metrics `json:"metrics,omitempty"`
	// Checkpoint is set when the report committed one.
	Checkpoint *Checkpoint `json:"checkpoint,omitempty"`
}

// ReportsRequest is the argument of the reports Update: reports of one
// attempt, in the order they were made.
type ReportsRequest struct {
	Attempt int             `json:"attempt"`
	Reports []ReportRequest `json:"reports"`
}

// Stall is the detail of a rank's error when a collective operation reached
// its deadline waiting for a neighbour (collective.StallError): Peer is the
// rank it waited for. The workflow follows Peer from rank to rank to the
// rank the group waited for and names it first, with its last progress.
type Stall struct {
	Peer int `json:"peer"`
	// Op is the operation ("AllReduceFloat32", "Barrier", ...), Seq its
	// number on the rank's Comm, counting from 1.
	Op      string   `json:"op"`
	Seq     int      `json:"seq"`
	Timeout Duration `json:"timeout"`
	// LinkDown: the rank saw its own link drop packets.
	LinkDown bool `json:"link_down,omitempty"`
}

// RestoredRequest is the argument of the restored Update: the checkpoint
// the group of an attempt restored.
type RestoredRequest struct {
	Attempt int `json:"attempt"`
	// Seq of the checkpoint restored; 0 when the group started fresh.
	Seq int `json:"seq"`
	// URI of a warm start's checkpoint (another run's), when that is what
	// was restored.
	URI string `json:"uri,omitempty"`
	// Skipped lists the checkpoints tried first that did not verify, newest
	// first, with why.
	Skipped []string `json:"skipped,omitempty"`
	// Unusable are the seqs among Skipped that did not verify (corrupt or
	// missing), for RunState.Unusable.
	Unusable []int `json:"unusable,omitempty"`
	// KernelPathChanged says, when the checkpoint restored was written on
	// other CPU kernels than some rank of the group restores on (another
	// processor kind), which: the resumed run is then not bit-identical to
	// an uninterrupted one. Empty when every rank runs the writer's path.
	KernelPathChanged string `json:"kernel_path_changed,omitempty"`
}

// ReportResponse answers a report.
type ReportResponse struct {
	// Index of the report in metrics.jsonl.
	Index int `json:"index"`
}

// ReportsResponse answers a reports Update: each report's, in order.
type ReportsResponse struct {
	Reports []ReportResponse `json:"reports"`
}

// LoadRunInput is the input of LoadRun.
type LoadRunInput struct {
	StoragePath string `json:"storage_path"`
	RunName     string `json:"run_name"`
	// ResumeFrom, when set, must name a committed checkpoint.
	ResumeFrom string `json:"resume_from,omitempty"`
	// Datasets are checked (files listed, schemas read) before any rank
	// starts.
	Datasets map[string]DatasetSpec `json:"datasets,omitempty"`
	// Schedule of the run, which resolves ResumeFrom "previous-best".
	Schedule string `json:"schedule,omitempty"`
}

// LoadRunOutput is what LoadRun found.
type LoadRunOutput struct {
	// Path is the run directory's URI.
	Path string `json:"path"`
	// State is nil when the run does not exist yet.
	State *RunState `json:"state,omitempty"`
	// ResumeFrom is ResumeFrom resolved: "previous-best" becomes the URI of
	// the schedule's last successful run's best checkpoint ("" when the
	// schedule has none yet).
	ResumeFrom string `json:"resume_from,omitempty"`
}

// PromoteOutput is what Promote did.
type PromoteOutput struct {
	// Promoted: the run's best checkpoint is the promoted one now.
	Promoted bool `json:"promoted,omitempty"`
	// Previous is the promoted pointer it was compared with, if any.
	Previous *Pointer `json:"previous,omitempty"`
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

// PromoteRequest is the input of Promote: a scheduled run that succeeded
// records its best checkpoint for the schedule's next run (last.json) and
// promotes it if it beats the promoted one (promoted.json).
type PromoteRequest struct {
	StoragePath string     `json:"storage_path"`
	Schedule    string     `json:"schedule"`
	Run         string     `json:"run"`
	Best        Checkpoint `json:"best"`
	// ScoreAttribute and ScoreOrder compare it with the promoted one; with
	// no attribute the newest is promoted.
	ScoreAttribute string `json:"score_attribute,omitempty"`
	ScoreOrder     string `json:"score_order,omitempty"`
}

// Pointer is {storage}/{schedule}/promoted.json and last.json: a checkpoint
// of a scheduled run. predict.Load and BatchPredict follow it.
type Pointer struct {
	Schedule   string    `json:"schedule"`
	Run        string    `json:"run"`
	Checkpoint string    `json:"checkpoint"` // its URI
	Seq        int       `json:"seq"`
	Attribute  string    `json:"score_attribute,omitempty"`
	Score      *float64  `json:"score,omitempty"`
	Time       time.Time `json:"time"`
}

// Pointer files of a schedule, under {storage}/{schedule}/.
const (
	// PromotedFile points at the best checkpoint the schedule's runs made.
	PromotedFile = "promoted.json"
	// LastFile points at the best checkpoint of the last successful run.
	LastFile = "last.json"
)

// CollectiveTimeoutText starts the message of a collective operation that
// made no progress before its deadline (package collective); the workflow
// reads it to tell a rank that waited from the rank it waited for.
const CollectiveTimeoutText = "no progress before the operation's deadline"

// LinkDownText is in that message when the rank saw its own link down.
const LinkDownText = "the network between them drops packets"

// Status is the answer of the status Query.
type Status struct {
	Name    string `json:"name"`
	Attempt int    `json:"attempt"`
	// WorldSize is the current attempt's (0 while an elastic group forms).
	WorldSize int            `json:"world_size"`
	Failures  int            `json:"failures"`
	Reports   int            `json:"reports"`
	Latest    Metrics        `json:"latest_metrics,omitempty"`
	Recent    []ReportRecord `json:"recent,omitempty"`
	// Checkpoint is the latest committed, nil if none.
	Checkpoint *Checkpoint `json:"checkpoint,omitempty"`
	Done       bool        `json:"done"`
	// Standbys is how many workers of an elastic run wait to join the
	// group at its next checkpoint.
	Standbys int `json:"standbys,omitempty"`
	// History is every attempt so far (the current one last, without End).
	History []AttemptRecord `json:"history,omitempty"`
	// Ranks is filled by the client (train.Run.Status, starter status),
	// not by the Query: every running rank's last heartbeat, by rank.
	Ranks []RankStatus `json:"ranks,omitempty"`
}
