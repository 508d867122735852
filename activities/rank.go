package activities

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/tempotrain/tempotrain/collective"
	"github.com/tempotrain/tempotrain/storage"
	"github.com/tempotrain/tempotrain/tracing"
	"github.com/tempotrain/tempotrain/train"
	"github.com/tempotrain/tempotrain/workflows"
)

// Phases of a rank, carried in its heartbeat.
const (
	PhaseRendezvous = "rendezvous"
	PhaseConnect    = "connect"
	PhaseRestore    = "restore"
	PhaseTrain      = "train"
)

// Progress is a rank's heartbeat detail; the Web UI shows it on the pending
// activity.
type Progress struct {
	Phase   string `json:"phase"`
	Epoch   int    `json:"epoch"`
	Step    int    `json:"step"`
	Reports int    `json:"reports"`
	// Checkpoint is the seq of the last checkpoint this rank committed, or
	// restored from.
	Checkpoint int `json:"checkpoint,omitempty"`
}

// rank is the state of one RunRank execution.
type rank struct {
	a       *Activities
	in      workflows.RunRankInput
	wf      client.Client
	wfID    string
	runID   string
	log     *slog.Logger
	scratch string
	store   *storage.Run
	tc      *train.Context
	tr      *tracing.Rank // nil when tracing is off

	phase   atomic.Value // string
	reports atomic.Int64
	ckpt    atomic.Int64
	// reportMu serialises Report: a training function that reports from two
	// goroutines still gets checkpoints in order. It guards what follows.
	reportMu sync.Mutex
	nextSeq  int
	async    *storage.AsyncCommitter // rank 0 with AsyncUpload
	queue    []queued
	upload   tracing.PendingCheckpoint // the background upload in flight
}

// RunRank runs one rank of one attempt of a Fit. See the package doc.
func (a *Activities) RunRank(ctx context.Context, in workflows.RunRankInput) (workflows.RankOutput, error) {
	info := activity.GetInfo(ctx)
	r := &rank{
		a: a, in: in, wf: a.o.Client,
		wfID: info.WorkflowExecution.ID, runID: info.WorkflowExecution.RunID,
		log:     a.o.Logger.With("run", in.RunName, "attempt", in.Attempt, "rank", in.Rank),
		nextSeq: in.NextSeq,
	}
	r.phase.Store(PhaseRendezvous)
	out := workflows.RankOutput{Rank: in.Rank}
	r.tr = a.o.Telemetry.StartRank(ctx, tracing.RankInfo{Run: in.RunName, Attempt: in.Attempt, Rank: in.Rank, WorldSize: in.WorldSize})

	fn, err := train.Lookup(in.TrainFunc)
	if err != nil {
		return out, temporal.NewNonRetryableApplicationError(err.Error(), workflows.ErrTypeUnknownFunc, nil)
	}
	if r.wf == nil {
		return out, temporal.NewNonRetryableApplicationError("worker misconfigured: activities.Options.Client is nil", workflows.ErrTypeUser, nil)
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
	wg.Add(2)
	go func() {
		defer wg.Done()
		r.heartbeat(ctx, actx)
	}()
	go func() {
		defer wg.Done()
		r.watch(actx, ctx, cancel)
	}()

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
	if in.AsyncUpload && in.Rank == 0 {
		r.async = storage.NewAsyncCommitter(ctx, r.store, r.scratch)
		defer r.async.Close()
	}

	device := -1
	if in.UseGPU {
		if device, err = a.takeDevice(ctx); err != nil {
			return out, err
		}
		defer func() { a.devices <- device }()
	}

	ln, err := collective.Listen(net.JoinHostPort(a.o.ListenHost, "0"))
	if err != nil {
		return out, fmt.Errorf("rank %d: listen on %s: %w", in.Rank, a.o.ListenHost, err)
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	addr := net.JoinHostPort(a.o.AdvertiseHost, port)

	peers, err := r.rendezvous(ctx, addr)
	if err != nil {
		return out, r.finalError(ctx, err)
	}
	r.phase.Store(PhaseConnect)
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
		return out, r.finalError(ctx, fmt.Errorf("rank %d: connect group: %w", in.Rank, err))
	}
	defer comm.Close()

	r.phase.Store(PhaseRestore)
	rctx, endRestore := r.tr.Phase(ctx, tracing.SpanRestore)
	ckpt, err := r.restore(rctx, comm)
	endRestore(err)
	if err != nil {
		return out, r.finalError(ctx, err)
	}

	localRank, localSize, nodeRank := workflows.Topology(peers)
	r.tc = train.NewContext(ctx, train.ContextInfo{
		RunName: in.RunName, Attempt: in.Attempt,
		WorldRank: in.Rank, WorldSize: in.WorldSize,
		LocalRank: localRank[in.Rank], LocalWorldSize: localSize[in.Rank], NodeRank: nodeRank[in.Rank],
		Config: in.Config, Checkpoint: ckpt, ScratchDir: r.scratch, Device: device,
		Observer: r.observer(),
	}, comm, r, a.o.Logger)
	r.phase.Store(PhaseTrain)
	r.log.Info("rank started", "world_size", in.WorldSize, "resumed_from", ckpt.String())

	err = callSafely(ctx, fn, r.tc)
	r.tr.End(err)
	if err == nil {
		err = r.drain(ctx)
	}
	out.Reports = int(r.reports.Load())
	if err != nil {
		return out, r.finalError(ctx, err)
	}
	return out, nil
}

// observer is the training loop's observer: the rank's tracing, when on. (A
// nil *tracing.Rank in the interface would not be a nil Observer.)
func (r *rank) observer() train.Observer {
	if r.tr == nil {
		return nil
	}
	return r.tr
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
		return ctx.Err()
	}
	var app *temporal.ApplicationError
	if errors.As(err, &app) {
		return err
	}
	// The workflow names the rank; a message that starts with it again reads
	// "rank 2: rank 2: ...".
	msg := strings.TrimPrefix(err.Error(), fmt.Sprintf("rank %d: ", r.in.Rank))
	switch {
	case train.IsNonRetryable(err):
		return temporal.NewNonRetryableApplicationError(msg, workflows.ErrTypeUserNonRetryable, err)
	case errors.Is(err, collective.ErrPeerGone):
		return temporal.NewApplicationError(msg, workflows.ErrTypePeerLost, err)
	}
	return temporal.NewApplicationError(msg, workflows.ErrTypeUser, err)
}

func (r *rank) progress() Progress {
	p := Progress{Phase: r.phase.Load().(string), Epoch: -1, Step: -1,
		Reports: int(r.reports.Load()), Checkpoint: int(r.ckpt.Load())}
	if r.tc != nil {
		p.Epoch, p.Step = r.tc.Progress()
	}
	return p
}

// heartbeat records progress until ctx ends. The SDK sends at most one
// heartbeat per throttle interval; each reply can carry a cancellation. The
// calls use the activity's values but not its cancellation, so heartbeats go
// on after an outage of the server cancelled actx.
func (r *rank) heartbeat(ctx, actx context.Context) {
	hb := context.WithoutCancel(actx)
	t := time.NewTicker(r.a.o.HeartbeatInterval)
	defer t.Stop()
	for {
		if ctx.Err() == nil {
			activity.RecordHeartbeat(hb, r.progress())
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// watch cancels the rank when the activity is cancelled. The SDK also
// cancels an activity whose heartbeat could not reach the server (restarted,
// unreachable) for a throttle interval; then the rank keeps training, since
// the group is intact, and asks the workflow every second, once the server
// answers, whether its attempt is still current.
func (r *rank) watch(actx, ctx context.Context, cancel context.CancelCauseFunc) {
	select {
	case <-ctx.Done():
		return
	case <-actx.Done():
	}
	cause := context.Cause(actx)
	if !transient(cause) {
		cancel(cause)
		return
	}
	r.log.Warn("lost contact with the Temporal server; training goes on while the attempt is current", "error", cause)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		v, err := r.wf.QueryWorkflow(ctx, r.wfID, r.runID, workflows.QueryRendezvous, r.in.Attempt)
		var rv workflows.Rendezvous
		if err != nil || v.Get(&rv) != nil {
			continue // the server is still away
		}
		if rv.State == workflows.RendezvousStale {
			cancel(fmt.Errorf("attempt %d ended while the server was unreachable", r.in.Attempt))
			return
		}
	}
}

func (a *Activities) takeDevice(ctx context.Context) (int, error) {
	if len(a.o.Devices) == 0 {
		return -1, temporal.NewNonRetryableApplicationError(
			"this worker has no GPUs (start cmd/worker with -gpus) but took a GPU rank", workflows.ErrTypeUser, nil)
	}
	select {
	case d := <-a.devices:
		return d, nil
	case <-ctx.Done():
		return -1, ctx.Err()
	}
}

// rendezvous registers this rank's address with the workflow, then polls
// until every rank of the attempt has registered, within StartTimeout.
func (r *rank) rendezvous(ctx context.Context, addr string) (peers []workflows.Peer, err error) {
	ctx, cancel := context.WithTimeout(ctx, r.in.StartTimeout.D())
	defer cancel()
	polls := 0
	ctx, end := r.tr.Rendezvous(ctx)
	defer func() { end(polls, err) }()
	req := workflows.RegisterRequest{Attempt: r.in.Attempt, Rank: r.in.Rank, Addr: addr, Node: r.a.o.Node}
	updateID := fmt.Sprintf("register-a%d-r%d", r.in.Attempt, r.in.Rank)
	var rv workflows.Rendezvous
	if err := r.update(ctx, workflows.UpdateRegister, updateID, req, &rv); err != nil {
		return nil, fmt.Errorf("rank %d: register for the rendezvous: %w", r.in.Rank, err)
	}
	// Poll fast while the rendezvous is young (every rank of an attempt
	// usually starts within a second) and slowly once it has waited long (a
	// worker yet to come up), to spare the server.
	started := time.Now()
	wait := 10 * time.Millisecond
	for {
		var err error
		if rv.State == "" {
			polls++
			var v converter.EncodedValue
			if v, err = r.wf.QueryWorkflow(ctx, r.wfID, r.runID, workflows.QueryRendezvous, r.in.Attempt); err == nil {
				err = v.Get(&rv)
			}
		}
		switch {
		case err != nil && !transient(err):
			return nil, r.waitError(ctx, "rendezvous query", err)
		case err != nil:
		case rv.State == workflows.RendezvousReady:
			if len(rv.Peers) != r.in.WorldSize {
				return nil, fmt.Errorf("rank %d: rendezvous returned %d peers for world size %d", r.in.Rank, len(rv.Peers), r.in.WorldSize)
			}
			return rv.Peers, nil
		case rv.State == workflows.RendezvousStale:
			return nil, temporal.NewNonRetryableApplicationError(
				fmt.Sprintf("attempt %d is no longer running (current %d)", r.in.Attempt, rv.Attempt), workflows.ErrTypeStaleAttempt, nil)
		}
		registered := rv.Registered
		rv = workflows.Rendezvous{}
		select {
		case <-ctx.Done():
			return nil, r.waitError(ctx, fmt.Sprintf("rendezvous: %d of %d ranks registered", registered, r.in.WorldSize), ctx.Err())
		case <-time.After(wait):
		}
		limit := 50 * time.Millisecond
		if time.Since(started) > 10*time.Second {
			limit = time.Second
		}
		wait = min(wait*2, limit)
	}
}

func (r *rank) waitError(ctx context.Context, what string, err error) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("rank %d: %s: not complete within start_timeout %s", r.in.Rank, what, r.in.StartTimeout)
	}
	return fmt.Errorf("rank %d: %s: %w", r.in.Rank, what, err)
}

// update sends an Update to the workflow and waits for its result, retrying
// what the server may refuse for a moment (too many in-flight Updates,
// unavailable). A rejection by the workflow is returned as is.
func (r *rank) update(ctx context.Context, name, id string, arg, result any) error {
	wait := 50 * time.Millisecond
	for {
		h, err := r.wf.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
			UpdateID: id, WorkflowID: r.wfID, RunID: r.runID, UpdateName: name,
			Args: []any{arg}, WaitForStage: client.WorkflowUpdateStageCompleted,
		})
		if err == nil {
			err = h.Get(ctx, result)
		}
		if err == nil || !transient(err) || ctx.Err() != nil {
			return err
		}
		r.log.Debug("update refused for now, retrying", "update", name, "error", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		wait = min(wait*2, time.Second)
	}
}

// transient says whether a Temporal client error may go away on retry.
func transient(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var (
		exhausted   *serviceerror.ResourceExhausted
		unavailable *serviceerror.Unavailable
		deadline    *serviceerror.DeadlineExceeded
		aborted     *serviceerror.Aborted
	)
	return errors.As(err, &exhausted) || errors.As(err, &unavailable) || errors.As(err, &deadline) || errors.As(err, &aborted)
}

// restore brings the newest checkpoint that verifies into the scratch dir.
// A checkpoint with a missing manifest or a bad sum is skipped for the one
// before it; every rank must end on the same one.
func (r *rank) restore(ctx context.Context, comm *collective.Comm) (*train.Checkpoint, error) {
	var chosen *train.Checkpoint
	for _, c := range r.in.Checkpoints {
		dst := filepath.Join(r.scratch, fmt.Sprintf("checkpoint_%06d", c.Seq))
		p := r.tr.BeginCheckpoint(ctx, tracing.CheckpointRestore, c.Seq)
		man, err := r.restoreOne(ctx, c, dst)
		var links []trace.Link
		if l, ok := tracing.LinkTo(man.Meta[tracing.MetaTraceParent], "committed_by"); ok {
			links = append(links, l)
		}
		p.Done(man.Bytes, time.Now(), err, links...)
		if errors.Is(err, storage.ErrCorrupt) || errors.Is(err, storage.ErrNotFound) {
			r.log.Warn("checkpoint unusable, trying the one before", "seq", c.Seq, "error", err)
			_ = os.RemoveAll(dst)
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("rank %d: restore checkpoint %d: %w", r.in.Rank, c.Seq, err)
		}
		ck := c
		ck.Dir, ck.Bytes, ck.Meta = dst, man.Bytes, userMeta(man.Meta)
		if c.Seq == 0 { // a warm start: the manifest tells the rest
			ck.Seq, ck.Attempt, ck.Metrics, ck.Time = man.Seq, man.Attempt, man.Metrics, man.Time
		}
		chosen = &ck
		break
	}
	if len(r.in.Checkpoints) > 0 && chosen == nil {
		r.log.Warn("no checkpoint verifies; starting from scratch", "candidates", len(r.in.Checkpoints))
	}
	seq := 0
	if chosen != nil {
		seq = chosen.Seq
		r.ckpt.Store(int64(seq))
	}
	if comm.Size() > 1 {
		all, err := comm.AllGather(ctx, []byte(strconv.Itoa(seq)))
		if err != nil {
			return nil, fmt.Errorf("rank %d: agree on the checkpoint: %w", r.in.Rank, err)
		}
		for i, b := range all {
			if string(b) != strconv.Itoa(seq) {
				return nil, fmt.Errorf("rank %d restored checkpoint %d but rank %d restored %s", r.in.Rank, seq, i, b)
			}
		}
	}
	return chosen, nil
}

// queued is a report waiting for the workflow: sent once its checkpoint (if
// any) is committed, and always in order.
type queued struct {
	n         int64
	req       workflows.ReportRequest
	committed bool
}

// restoreOne brings checkpoint c into dst: one of this run's by its seq, a
// warm start (Seq 0) from another run by its URI.
func (r *rank) restoreOne(ctx context.Context, c train.Checkpoint, dst string) (storage.Manifest, error) {
	if c.Seq > 0 {
		return r.store.RestoreCheckpoint(ctx, c.Seq, dst)
	}
	sc, err := storage.OpenCheckpoint(ctx, c.URI)
	if err != nil {
		return storage.Manifest{}, err
	}
	if err := sc.Download(ctx, dst); err != nil {
		return sc.Manifest, err
	}
	return sc.Manifest, nil
}

// Report implements train.Reporter. On rank 0 it commits the checkpoint
// (files, then the manifest) and reports to the workflow; with AsyncUpload
// it returns after a local snapshot and reports once the upload is
// committed. On other ranks it counts the report.
func (r *rank) Report(ctx context.Context, m train.Metrics, ck *train.Checkpoint) error {
	r.reportMu.Lock()
	defer r.reportMu.Unlock()
	n := r.reports.Add(1)
	if r.in.Rank != 0 {
		return nil
	}
	q := queued{n: n, req: workflows.ReportRequest{Attempt: r.in.Attempt, Rank: r.in.Rank, Metrics: m}, committed: true}
	if ck != nil {
		if ck.Dir == "" {
			return fmt.Errorf("report %d: the checkpoint has no directory (use train.NewCheckpoint(dir))", n)
		}
		seq := r.nextSeq
		man := storage.Manifest{Seq: seq, Attempt: r.in.Attempt, Metrics: m, Meta: r.manifestMeta(ctx, ck.Meta)}
		q.req.Checkpoint = &train.Checkpoint{URI: r.store.CheckpointURI(seq), Seq: seq, Attempt: r.in.Attempt, Metrics: m, Meta: ck.Meta}
		ownDir := strings.HasPrefix(ck.Dir, r.scratch+string(filepath.Separator))
		if r.async != nil {
			// A directory from NewCheckpointDir is never written again, so
			// hard links are a safe snapshot; any other gets copied.
			mode := storage.SnapshotCopy
			if ownDir {
				mode = storage.SnapshotLink
			}
			write := r.tr.BeginCheckpoint(ctx, tracing.CheckpointWrite, seq)
			prev, err := r.async.Submit(ctx, seq, ck.Dir, man, mode)
			if err != nil {
				r.upload.Done(0, time.Now(), err)
				r.upload = tracing.PendingCheckpoint{}
				write.Done(0, time.Now(), err)
				return fmt.Errorf("report %d: background upload of the previous checkpoint failed: %w", n, err)
			}
			write.Done(r.dirBytes(ck.Dir), time.Now(), nil)
			q.committed = false
			r.committed(prev)
			r.upload = r.tr.BeginCheckpoint(ctx, tracing.CheckpointUpload, seq)
		} else {
			upload := r.tr.BeginCheckpoint(ctx, tracing.CheckpointUpload, seq)
			done, err := r.store.CommitCheckpoint(ctx, seq, ck.Dir, man)
			upload.Done(done.Bytes, time.Now(), err)
			if err != nil {
				return fmt.Errorf("report %d: commit checkpoint %d: %w", n, seq, err)
			}
			q.req.Checkpoint.Bytes, q.req.Checkpoint.Time = done.Bytes, done.Time
			r.ckpt.Store(int64(seq))
		}
		r.nextSeq++
		if ownDir {
			_ = os.RemoveAll(ck.Dir)
		}
	}
	r.queue = append(r.queue, q)
	return r.flush(ctx)
}

// committed marks the queued report of a checkpoint whose upload finished.
func (r *rank) committed(man *storage.Manifest) {
	if man == nil {
		return
	}
	r.upload.Done(man.Bytes, man.Time, nil)
	r.upload = tracing.PendingCheckpoint{}
	for i := range r.queue {
		if c := r.queue[i].req.Checkpoint; c != nil && c.Seq == man.Seq {
			c.Bytes, c.Time = man.Bytes, man.Time
			r.queue[i].committed = true
		}
	}
	r.ckpt.Store(int64(man.Seq))
}

// flush sends the reports at the head of the queue whose checkpoints are
// committed.
func (r *rank) flush(ctx context.Context) error {
	for len(r.queue) > 0 && r.queue[0].committed {
		q := r.queue[0]
		var resp workflows.ReportResponse
		id := fmt.Sprintf("report-a%d-%d", r.in.Attempt, q.n)
		if err := r.update(ctx, workflows.UpdateReport, id, q.req, &resp); err != nil {
			return fmt.Errorf("report %d to the workflow: %w", q.n, err)
		}
		r.queue = r.queue[1:]
	}
	return nil
}

// drain waits for the last background upload and sends what is queued,
// once the training function has returned.
func (r *rank) drain(ctx context.Context) error {
	r.reportMu.Lock()
	defer r.reportMu.Unlock()
	if r.async != nil {
		last, err := r.async.Wait(ctx)
		if err != nil {
			r.upload.Done(0, time.Now(), err)
			r.upload = tracing.PendingCheckpoint{}
			return fmt.Errorf("background upload of the last checkpoint failed: %w", err)
		}
		r.committed(last)
	}
	return r.flush(ctx)
}

// manifestMeta is the Meta a checkpoint's manifest keeps: the user's, and
// with tracing on the traceparent of the report that commits it, so that the
// restore of another attempt (or a resumed run) links to it.
func (r *rank) manifestMeta(ctx context.Context, meta map[string]string) map[string]string {
	tp := r.tr.TraceParent(ctx)
	if tp == "" {
		return meta
	}
	out := make(map[string]string, len(meta)+1)
	for k, v := range meta {
		out[k] = v
	}
	out[tracing.MetaTraceParent] = tp
	return out
}

// userMeta is a restored manifest's Meta as the user wrote it.
func userMeta(meta map[string]string) map[string]string {
	if _, ok := meta[tracing.MetaTraceParent]; !ok {
		return meta
	}
	out := make(map[string]string, len(meta))
	for k, v := range meta {
		if k != tracing.MetaTraceParent {
			out[k] = v
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// dirBytes sums the sizes of the files under dir, for the checkpoint write
// span; only with tracing on.
func (r *rank) dirBytes(dir string) int64 {
	if r.tr == nil {
		return 0
	}
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}

func sanitize(s string) string {
	return strings.Map(func(c rune) rune {
		if c == '/' || c == '\\' || c == os.PathSeparator {
			return '_'
		}
		return c
	}, s)
}
