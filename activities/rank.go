package activities

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/collective"
	"github.com/tempotrain/tempotrain/storage"
	"github.com/tempotrain/tempotrain/tracing"
	"github.com/tempotrain/tempotrain/train"
	"github.com/tempotrain/tempotrain/train/trainrt"
)

// workflowClient is what a rank asks of Temporal: the rendezvous Query and
// the register and report Updates of its Fit. client.Client has it; the
// package's tests give a fake that plays the workflow.
type workflowClient interface {
	UpdateWorkflow(ctx context.Context, options client.UpdateWorkflowOptions) (client.WorkflowUpdateHandle, error)
	QueryWorkflow(ctx context.Context, workflowID, runID, queryType string, args ...any) (converter.EncodedValue, error)
}

// rank is the state of one RunRank execution.
type rank struct {
	a     *Activities
	in    api.RunRankInput
	wf    workflowClient
	wfID  string
	runID string
	// ctrlID and ctrlRun name the Fit of the rank group that started the
	// rank (RunRankInput.Controller), which takes restored and the reports;
	// empty when the Fit started it (controller()).
	ctrlID, ctrlRun string
	// taskToken is the activity's, for its own heartbeat calls once the
	// SDK's lost one (hbLost; heartbeat).
	taskToken []byte
	hbLost    atomic.Bool
	// log is the rank's logger: the worker's (workerLog, tagged with the
	// run, attempt and rank) and the rank log (ranklog.go).
	log       *slog.Logger
	workerLog *slog.Logger
	logSink   *rankLogSink
	fnFile    slog.Handler // the rank log's handler, for fnLogger
	scratch   string
	store     *storage.Run
	// tc is set once the rank trains; the heartbeat reads it meanwhile.
	tc atomic.Pointer[train.Context]
	tr *tracing.Rank // nil when tracing is off

	// standing: an elastic slot the group formed without.
	standing bool
	// offline: when the workflow last answered the poller (watch).
	offline contact
	// stopping is closed when this rank's worker is stopping.
	stopping <-chan struct{}
	phase    atomic.Value // api.Phase
	reports  atomic.Int64
	ckpt     atomic.Int64
	// reportMu serialises Report: a training function that reports from two
	// goroutines still gets checkpoints in order. It guards what follows.
	reportMu sync.Mutex
	nextSeq  int
	async    *storage.AsyncCommitter   // rank 0 with AsyncUpload
	send     reportSender              // rank 0's queue of reports (send.go)
	upload   tracing.PendingCheckpoint // the background upload in flight
	// judged: the rungs rank 0's reports reached (RunRankInput.WaitJudging),
	// once judgedSet.
	judged    []float64
	judgedSet bool
}

// RunRank runs one rank of one attempt of a Fit, or, when in.Local is over
// 1, that many ranks together (runBundle). See the package doc.
func (a *Activities) RunRank(ctx context.Context, in api.RunRankInput) (out api.RankOutput, err error) {
	if in.Local > 1 {
		return a.runBundle(ctx, in)
	}
	return a.newRank(ctx, in).run(ctx, true)
}

// newRank is the state of rank in.Rank of the activity of ctx.
func (a *Activities) newRank(ctx context.Context, in api.RunRankInput) *rank {
	info := activity.GetInfo(ctx)
	r := &rank{
		a: a, in: in, wf: a.wf,
		wfID: info.WorkflowExecution.ID, runID: info.WorkflowExecution.RunID,
		nextSeq: in.NextSeq,
	}
	r.taskToken = info.TaskToken
	if c := in.Controller; c != nil {
		r.ctrlID, r.ctrlRun = c.ID, c.RunID
	}
	r.phase.Store(api.PhaseRendezvous)
	return r
}

// run runs the rank in the activity of ctx, heartbeating for it when beat
// (a bundle's ranks have one heartbeat, the bundle's).
func (r *rank) run(ctx context.Context, beat bool) (out api.RankOutput, err error) {
	a, in := r.a, r.in
	r.startLog(in)
	// Registered first, so it runs last: the rank log holds everything the
	// rank logged, and ends with how the rank ended.
	defer func(actx context.Context) { r.closeLog(actx, err) }(ctx)
	out = api.RankOutput{Rank: in.Rank}
	r.tr = a.o.Telemetry.StartRank(ctx, tracing.RankInfo{Run: in.RunName, Attempt: in.Attempt, Rank: in.Rank, WorldSize: in.WorldSize})

	r.stopping = activity.GetWorkerStopChannel(ctx)
	select {
	case <-r.stopping:
		// A worker that is stopping (SIGTERM) takes no new rank: it would
		// be preempted at once. Not a failure; the slot goes elsewhere.
		return out, temporal.NewApplicationError("this worker is stopping: it takes no new rank", api.ErrWorkerStopping.String())
	default:
	}
	fn, err := trainrt.Lookup(in.TrainFunc)
	if err != nil {
		return out, temporal.NewNonRetryableApplicationError(err.Error(), api.ErrUnknownFunc.String(), nil)
	}
	if r.wf == nil {
		return out, temporal.NewNonRetryableApplicationError("worker misconfigured: activities.Options.Client is nil", api.ErrUser.String(), nil)
	}

	// Everything the rank starts stops with ctx. It is detached from the
	// activity's context, which the SDK also cancels when a heartbeat cannot
	// reach the server for a second: watch tells that apart from a real
	// cancellation. Deferred calls run last-in first-out: cancel, then wait
	// for the goroutines.
	actx := ctx
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(actx))
	defer cancel(nil)
	joined := make(chan struct{}) // closed once the rank is in its group
	if beat {
		every := api.RankHeartbeatInterval(a.o.HeartbeatInterval, in.HeartbeatingActivities())
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.heartbeat(ctx, actx, every)
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		r.watch(actx, ctx, cancel, joined)
	}()
	// A rank that ends makes sure the server is there to take its result
	// (its process's poller Queries at once), waiting for it while it is
	// away (heartbeats and watch go on meanwhile), within its heartbeat
	// timeout: the SDK gives the completion 10 s, and a result it could not
	// deliver is lost, the rank timed out as if its worker died. Runs
	// before cancel (LIFO).
	defer func() { r.offline.wait(time.Now(), activity.GetInfo(actx).HeartbeatTimeout, r.log) }()

	if err := os.MkdirAll(a.o.ScratchDir, 0o755); err != nil {
		return out, fmt.Errorf("scratch dir: %w", err)
	}
	r.scratch, err = os.MkdirTemp(a.o.ScratchDir, fmt.Sprintf("%s-a%d-r%d-", sanitize(in.RunName), in.Attempt, in.Rank))
	if err != nil {
		return out, fmt.Errorf("scratch dir: %w", err)
	}
	defer os.RemoveAll(r.scratch)

	if r.store, err = a.run(ctx, in.StoragePath, in.RunName); err != nil {
		return out, err
	}
	if !in.Elastic {
		r.openLog()
	}
	devices, release, err := a.takeResources(ctx, in)
	if err != nil {
		return out, err
	}
	defer release()
	device := -1
	if len(devices) > 0 {
		device = devices[0]
	}
	cpus := 0
	if in.Resources != nil {
		cpus = in.Resources.Threads()
	}

	ln, err := collective.Listen(net.JoinHostPort(a.o.ListenHost, "0"))
	if err != nil {
		return out, fmt.Errorf("listen on %s: %w", a.o.ListenHost, err)
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	addr := net.JoinHostPort(a.o.AdvertiseHost, port)

	peers, err := r.rendezvous(ctx, addr)
	if err != nil {
		return out, r.finalError(ctx, err)
	}
	close(joined)
	// An elastic slot is now a rank of the group.
	in = r.in
	out.Rank = in.Rank
	if in.Elastic {
		r.openLog()
	}
	if in.AsyncUpload && in.Rank == 0 {
		r.async = storage.NewAsyncCommitter(ctx, r.store, r.scratch)
		defer r.async.Close()
	}
	r.phase.Store(api.PhaseConnect)
	addrs := make([]string, len(peers))
	for i, p := range peers {
		addrs[i] = p.Addr
	}
	copts := collective.Options{Rank: in.Rank, Size: in.WorldSize, Token: in.Token, Timeout: in.CollectiveTimeout.D()}
	if r.tr != nil {
		copts.Observer = func(ctx context.Context, op collective.OpInfo) {
			if op.Direct {
				r.tr.Collective(ctx, op.Op, op.Bytes, op.Start, op.Duration, op.Err, tracing.AttrDirect.Bool(true))
				return
			}
			r.tr.Collective(ctx, op.Op, op.Bytes, op.Start, op.Duration, op.Err)
		}
	}
	cctx, endConnect := r.tr.Phase(ctx, tracing.SpanConnect)
	comm, err := collective.Connect(cctx, ln, addrs, copts)
	endConnect(err)
	if err != nil {
		return out, r.finalError(ctx, fmt.Errorf("connect group: %w", err))
	}
	defer comm.Close()

	r.phase.Store(api.PhaseRestore)
	rctx, endRestore := r.tr.Phase(ctx, tracing.SpanRestore)
	ckpt, err := r.restore(rctx, comm)
	endRestore(err)
	if err != nil {
		return out, r.finalError(ctx, err)
	}

	localRank, localSize, nodeRank := topology(peers)
	tc := trainrt.NewContext(ctx, trainrt.ContextInfo{
		RunName: in.RunName, Attempt: in.Attempt,
		WorldRank: in.Rank, WorldSize: in.WorldSize,
		LocalRank: localRank[in.Rank], LocalWorldSize: localSize[in.Rank], NodeRank: nodeRank[in.Rank],
		Config: in.Config, Checkpoint: ckpt, ScratchDir: r.scratch, Device: device, Devices: devices, CPUs: cpus,
		Observer: r.observer(), Datasets: in.Datasets, Preprocessors: in.Preprocessors,
		Preempted: activity.GetWorkerStopChannel(actx), Host: a.o.AdvertiseHost, Python: in.Python,
	}, comm, r, r.fnLogger())
	r.tc.Store(tc)
	r.phase.Store(api.PhaseTrain)
	r.log.Info("rank started", "world_size", in.WorldSize, "resumed_from", ckpt.String())

	err = r.call(ctx, fn, tc)
	r.tr.End(err)
	err = r.drain(ctx, err)
	out.Reports = int(r.reports.Load())
	if err != nil {
		return out, r.finalError(ctx, err)
	}
	return out, nil
}

// observer is the training loop's observer: the rank's tracing, when on. (A
// nil *tracing.Rank in the interface would not be a nil Observer.)
func (r *rank) observer() trainrt.Observer {
	if r.tr == nil {
		return nil
	}
	return r.tr
}

// fnCancelGrace is how long a cancelled rank waits for its training
// function to return before it answers the cancellation without it. A
// function deaf to its context (stuck in its own code) would otherwise hold
// the rank until the workflow gave up on it (its cancel grace, 3 s), and
// the workflow would not learn where it was; answered, the cancellation
// carries the rank's last progress, so that the rank its group waited for
// is named with it.
const fnCancelGrace = time.Second

// call runs the training function until it returns, or until fnCancelGrace
// after the rank's cancellation: then its goroutine is left behind (Go
// cannot stop it) and the rank returns the context's error.
func (r *rank) call(ctx context.Context, fn train.Func, tc *train.Context) error {
	done := make(chan error, 1)
	go func() { done <- callSafely(ctx, fn, tc) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	t := time.NewTimer(fnCancelGrace)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		r.log.Warn("the training function did not return within its grace after the rank's cancellation: the rank ends without it, its goroutine left behind", "grace", fnCancelGrace)
		return ctx.Err()
	}
}

// callSafely runs the training function, turning a panic into an error with
// its stack, so that one rank's bug fails its attempt instead of its worker.
func callSafely(ctx context.Context, fn train.Func, tc *train.Context) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v\n%s", p, debug.Stack())
		}
	}()
	return fn(ctx, tc)
}

// finalError turns what ended the rank into the activity's error. After a
// cancellation the cancellation is what counts (the function's error is
// then a consequence); a NonRetryable error ends the run.
func (r *rank) finalError(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		// Only the activity's own context ends ours before RunRank returns.
		r.log.Info("rank cancelled", "error", err)
		if temporal.IsCanceledError(context.Cause(ctx)) {
			// The workflow cancelled it: its last progress goes back with
			// the cancellation, so that a rank the others waited for can
			// be named with where it was.
			return temporal.NewCanceledError(r.progress(nil))
		}
		var stale *temporal.ApplicationError
		if cause := context.Cause(ctx); errors.As(cause, &stale) && stale.Type() == api.ErrStaleAttempt.String() {
			// The process's poller saw the attempt end (watch): the
			// workflow counts it as the cancellation it asked for, and
			// reads where the rank was, as with a cancellation.
			return temporal.NewApplicationError(stale.Message(), stale.Type(), r.progress(nil))
		}
		return ctx.Err()
	}
	var app *temporal.ApplicationError
	if errors.As(err, &app) {
		return err
	}
	// The workflow names the rank (Result.Error reads "rank 2 failed: ..."),
	// so the rank's own errors do not.
	msg := err.Error()
	switch {
	case train.IsNonRetryable(err):
		return temporal.NewNonRetryableApplicationError(msg, api.ErrUserNonRetryable.String(), err)
	case errors.Is(err, train.ErrPreempted):
		return temporal.NewApplicationError(msg, api.ErrPreempted.String(), err)
	case errors.Is(err, collective.ErrPeerGone):
		return temporal.NewApplicationError(msg, api.ErrPeerLost.String(), err)
	}
	var stall *collective.StallError
	if errors.As(err, &stall) {
		return temporal.NewApplicationError(msg, api.ErrUser.String(), api.Stall{
			Peer: stall.Peer, Op: stall.Op, Seq: stall.Seq, Timeout: api.Duration(stall.Timeout), LinkDown: stall.LinkDown})
	}
	return temporal.NewApplicationError(msg, api.ErrUser.String(), err)
}

// rankKey names RunRankInput.Rank in logs: an elastic run's is a slot until
// the group forms.
func rankKey(in api.RunRankInput) string {
	if in.Elastic {
		return "slot"
	}
	return "rank"
}

func sanitize(s string) string {
	return strings.Map(func(c rune) rune {
		if c == '/' || c == '\\' || c == os.PathSeparator {
			return '_'
		}
		return c
	}, s)
}
