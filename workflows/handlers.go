package workflows

import (
	"errors"
	"fmt"
	"slices"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/tempotrain/tempotrain/api"
)

// The Fit's Update and Query handlers: the ranks' rendezvous (register,
// the "rendezvous" Query), their restored checkpoint and reports, and the
// run's status.

// recentReports is how many reports the status Query returns.
const recentReports = 32

// registerHandlers sets the Fit's Query and Update handlers.
func (f *fit) registerHandlers(ctx workflow.Context) error {
	if err := f.registerRendezvousHandlers(ctx); err != nil {
		return err
	}
	if err := workflow.SetQueryHandler(ctx, api.QueryStatus, func() (api.Status, error) {
		s := api.Status{Name: f.in.Run.Name, Attempt: f.attempt, Failures: f.failures,
			Reports: f.st.Reports, Latest: f.st.Latest, Recent: f.recent, Done: f.done}
		if n := len(f.st.History); n > 0 {
			s.WorldSize = f.st.History[n-1].WorldSize
		}
		if n := len(f.st.Checkpoints); n > 0 {
			c := f.st.Checkpoints[n-1]
			s.Checkpoint = &c
		}
		if f.el != nil && f.running {
			s.Standbys = len(f.el.standby)
		}
		s.History = slices.Clone(f.st.History)
		return s, nil
	}); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, api.UpdateRestored, func(ctx workflow.Context, req api.RestoredRequest) error {
		f.updatesThisRun++
		return f.restored(ctx, req)
	},
		workflow.UpdateHandlerOptions{Validator: f.validateRestored}); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, api.UpdateReport, counted(f, f.report),
		workflow.UpdateHandlerOptions{Validator: f.validateReport}); err != nil {
		return err
	}
	return workflow.SetUpdateHandlerWithOptions(ctx, api.UpdateReports, counted(f, f.reports),
		workflow.UpdateHandlerOptions{Validator: f.validateReports})
}

// registerRendezvousHandlers sets the handlers of the ranks' rendezvous:
// the rendezvous Query and the register and register-batch Updates, which
// a Fit and a rank group (RankGroup) both take.
func (f *fit) registerRendezvousHandlers(ctx workflow.Context) error {
	if err := workflow.SetQueryHandler(ctx, api.QueryRendezvous, f.rendezvous); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, api.UpdateRegister, counted(f, f.register),
		workflow.UpdateHandlerOptions{Validator: f.validateRegister}); err != nil {
		return err
	}
	return workflow.SetUpdateHandlerWithOptions(ctx, api.UpdateRegisterBatch, counted(f, f.registerBatch),
		workflow.UpdateHandlerOptions{Validator: f.validateRegisterBatch})
}

// counted is an Update handler that counts itself in f.updatesThisRun.
func counted[Req, Resp any](f *fit, h func(workflow.Context, Req) (Resp, error)) func(workflow.Context, Req) (Resp, error) {
	return func(ctx workflow.Context, req Req) (Resp, error) {
		f.updatesThisRun++
		return h(ctx, req)
	}
}

func (f *fit) stale(attempt int) error {
	if f.running && attempt == f.attempt {
		return nil
	}
	return temporal.NewNonRetryableApplicationError(
		fmt.Sprintf("attempt %d is not running (current attempt %d, running %v)", attempt, f.attempt, f.running),
		api.ErrStaleAttempt.String(), nil)
}

func (f *fit) validateRegister(_ workflow.Context, req api.RegisterRequest) error {
	if err := f.stale(req.Attempt); err != nil {
		return err
	}
	if req.Rank < 0 || req.Rank >= len(f.peers) {
		return fmt.Errorf("register: rank %d out of range [0, %d)", req.Rank, len(f.peers))
	}
	if g := f.group; g != nil && (req.Rank < g.in.Lo || req.Rank >= g.in.Hi) {
		return fmt.Errorf("register: rank %d is not in rank group %d (ranks %d-%d)", req.Rank, g.in.Group, g.in.Lo, g.in.Hi-1)
	}
	if req.Addr == "" {
		return fmt.Errorf("register: rank %d: empty address", req.Rank)
	}
	if f.el != nil && f.el.closed && f.el.rankOf[req.Rank] < 0 {
		// An elastic slot registering after the group formed: a standby.
		return nil
	}
	if p := f.peers[req.Rank]; p != nil && p.Addr != req.Addr {
		return fmt.Errorf("register: rank %d of attempt %d already registered at %s (now %s)", req.Rank, req.Attempt, p.Addr, req.Addr)
	}
	return nil
}

// register records a rank's address and answers with the rendezvous as it
// stands, so the rank that completes the group needs no Query.
func (f *fit) register(ctx workflow.Context, req api.RegisterRequest) (api.Rendezvous, error) {
	// The validator ran before; state may have moved on while the Update
	// waited for its workflow task.
	if err := f.validateRegister(ctx, req); err != nil {
		return api.Rendezvous{}, err
	}
	if f.el != nil {
		return f.registerElastic(ctx, req)
	}
	if f.peers[req.Rank] == nil {
		f.registered++
	}
	f.peers[req.Rank] = &api.Peer{Addr: req.Addr, Node: req.Node}
	if f.group != nil {
		f.group.registered(ctx, f)
	}
	return f.rendezvous(req.Attempt)
}

// validateRegisterBatch admits a batch of registrations (the ranks of one
// worker process) of one running attempt of which at least one would be
// recorded; the others are refused one by one in the result, so one bad
// registration fails its rank alone. A batch of a stale attempt is
// rejected whole, as the single register Update is.
func (f *fit) validateRegisterBatch(ctx workflow.Context, reqs []api.RegisterRequest) error {
	if len(reqs) == 0 {
		return errors.New("register-batch: no registrations")
	}
	for _, req := range reqs[1:] {
		if req.Attempt != reqs[0].Attempt {
			return fmt.Errorf("register-batch: rank %d registers for attempt %d, rank %d for attempt %d",
				reqs[0].Rank, reqs[0].Attempt, req.Rank, req.Attempt)
		}
	}
	if err := f.stale(reqs[0].Attempt); err != nil {
		return err
	}
	var errs []error
	for _, req := range reqs {
		err := f.validateRegister(ctx, req)
		if err == nil {
			return nil
		}
		errs = append(errs, err)
	}
	return fmt.Errorf("register-batch: every registration refused: %w", errors.Join(errs...))
}

// registerBatch records a batch's registrations in order, as many register
// Updates would, and answers with the rendezvous as it then stands and the
// registrations refused (each with its error).
func (f *fit) registerBatch(ctx workflow.Context, reqs []api.RegisterRequest) (api.RegisterBatchResponse, error) {
	if err := f.validateRegisterBatch(ctx, reqs); err != nil {
		return api.RegisterBatchResponse{}, err
	}
	var res api.RegisterBatchResponse
	for _, req := range reqs {
		if _, err := f.register(ctx, req); err != nil {
			res.Refused = append(res.Refused, api.RegisterError{Rank: req.Rank, Error: err.Error()})
		}
	}
	res.Rendezvous, _ = f.rendezvous(reqs[0].Attempt)
	return res, nil
}

func (f *fit) rendezvous(attempt int) (api.Rendezvous, error) {
	if f.el != nil && attempt == f.attempt && f.running && !f.ending {
		return f.rendezvousElastic(), nil
	}
	rv := api.Rendezvous{Attempt: f.attempt, Registered: f.registered, WorldSize: len(f.peers)}
	switch {
	case attempt != f.attempt || !f.running || f.ending:
		rv.State = api.RendezvousStale
	case f.registered < len(f.peers):
		rv.State = api.RendezvousWaiting
	default:
		rv.State = api.RendezvousReady
		rv.Peers = make([]api.Peer, len(f.peers))
		for i, p := range f.peers {
			rv.Peers[i] = *p
		}
	}
	return rv, nil
}

func (f *fit) validateRestored(_ workflow.Context, req api.RestoredRequest) error {
	if err := f.stale(req.Attempt); err != nil {
		return err
	}
	if req.Seq < 0 {
		return fmt.Errorf("restored: seq %d", req.Seq)
	}
	return nil
}

// restored records in the attempt's history which checkpoint its group
// restored, and those it skipped.
func (f *fit) restored(ctx workflow.Context, req api.RestoredRequest) error {
	if err := f.validateRestored(ctx, req); err != nil {
		return err
	}
	last := &f.st.History[len(f.st.History)-1]
	last.RestoredFrom = req.Seq
	last.StartedFresh = req.Seq == 0 && req.URI == "" && (last.ResumedFrom > 0 || last.WarmStart != "")
	last.Skipped = api.Abbreviate(req.Skipped)
	last.KernelPathChanged = api.Abbreviate([]string{req.KernelPathChanged})[0]
	// No later attempt is offered these or downloads them again.
	f.st.MarkUnusable(req.Unusable...)
	f.dirty = true
	return nil
}

func (f *fit) validateReport(_ workflow.Context, req api.ReportRequest) error {
	if err := f.stale(req.Attempt); err != nil {
		return err
	}
	if req.Rank != 0 {
		return fmt.Errorf("report: only rank 0 reports, got rank %d", req.Rank)
	}
	if c := req.Checkpoint; c != nil && c.Seq < 1 {
		return fmt.Errorf("report: checkpoint with seq %d", c.Seq)
	}
	return nil
}

func (f *fit) report(ctx workflow.Context, req api.ReportRequest) (api.ReportResponse, error) {
	if err := f.validateReport(ctx, req); err != nil {
		return api.ReportResponse{}, err
	}
	if f.firstReportLen == 0 {
		f.firstReportLen = workflow.GetInfo(ctx).GetCurrentHistoryLength()
	}
	rec := api.ReportRecord{Index: f.st.Reports, Attempt: req.Attempt, Time: workflow.Now(ctx), Metrics: req.Metrics}
	f.st.Reports++
	f.st.Latest = req.Metrics
	if c := req.Checkpoint; c != nil {
		ck := *c
		ck.Dir = ""
		rec.Checkpoint = ck.Seq
		if ck.Seq >= f.st.NextSeq {
			f.st.NextSeq = ck.Seq + 1
		}
		// A seq already in the index is an orphan rewritten by a later
		// attempt: the new commit replaces it.
		kept := f.st.Checkpoints[:0:0]
		for _, old := range f.st.Checkpoints {
			if old.Seq != ck.Seq {
				kept = append(kept, old)
			}
		}
		keep, drop := Retain(append(kept, ck), f.in.Run.Checkpoint)
		f.st.Checkpoints = keep
		for _, d := range drop {
			f.toDelete = append(f.toDelete, d.Seq)
		}
	}
	f.pending = append(f.pending, rec)
	f.reportsThisRun++
	f.tellTune(ctx, rec, req.Checkpoint)
	if attr := f.in.Run.Checkpoint.ScoreAttribute; attr != "" && req.Checkpoint != nil && len(f.st.Checkpoints) > 0 {
		if v, ok := BestFirst(f.st.Checkpoints, f.in.Run.Checkpoint)[0].Metrics[attr]; ok && (v != f.best || !f.bestSet) {
			f.best, f.bestSet = v, true
			f.upsert(ctx, temporal.NewSearchAttributeKeyFloat64(api.SABestScore).ValueSet(v))
		}
	}
	f.details(ctx, req.Metrics)
	f.recent = append(f.recent, rec)
	if len(f.recent) > recentReports {
		f.recent = append([]api.ReportRecord(nil), f.recent[len(f.recent)-recentReports:]...)
	}
	f.dirty = true
	if req.Checkpoint != nil && f.running && f.cancel != nil && f.stopAtCheckpoint(ctx) {
		// Stop this attempt at the checkpoint it just committed, continue as
		// new, and resume from it there.
		f.preempted = true
		f.cancel()
	} else if req.Checkpoint != nil && f.running && f.cancel != nil && f.el != nil && f.el.closed && f.el.settledStandbys(workflow.Now(ctx)) > 0 && !f.growing {
		// Workers came back (standby slots are running): stop at this
		// checkpoint and restart with them.
		workflow.GetLogger(ctx).Info("growing the group at a checkpoint", "world_size", len(f.el.slots),
			"standby", len(f.el.standby), "checkpoint", req.Checkpoint.Seq)
		f.growing = true
		f.el.comeBack = f.el.settledStandbys(workflow.Now(ctx))
		f.cancel()
	}
	f.awaitTune(ctx, req.Attempt, rec.Index, req.Metrics)
	return api.ReportResponse{Index: rec.Index}, nil
}

func (f *fit) validateReports(ctx workflow.Context, req api.ReportsRequest) error {
	if len(req.Reports) == 0 {
		return fmt.Errorf("reports: none")
	}
	for i, r := range req.Reports {
		if r.Attempt != req.Attempt {
			return fmt.Errorf("reports: report %d of attempt %d in a request of attempt %d", i, r.Attempt, req.Attempt)
		}
		if err := f.validateReport(ctx, r); err != nil {
			return err
		}
	}
	return nil
}

// reports records several reports of rank 0, in order, each as the report
// Update would: the rank sends those its function made while the one
// before was on its way in one Update.
func (f *fit) reports(ctx workflow.Context, req api.ReportsRequest) (api.ReportsResponse, error) {
	if err := f.validateReports(ctx, req); err != nil {
		return api.ReportsResponse{}, err
	}
	out := api.ReportsResponse{Reports: make([]api.ReportResponse, 0, len(req.Reports))}
	for _, r := range req.Reports {
		resp, err := f.report(ctx, r)
		if err != nil {
			return out, err
		}
		out.Reports = append(out.Reports, resp)
	}
	return out, nil
}
