package activities

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/tempotrain/tempotrain/api"
)

// fakeWorkflow plays the Fit workflow's side of the rank protocol: the
// register Update and rendezvous Query of one attempt, and the report
// Update, which it records. Values cross it as JSON, as they cross Temporal.
type fakeWorkflow struct {
	mu        sync.Mutex
	attempt   int
	worldSize int
	peers     map[int]api.Peer
	// stale answers every rendezvous as stale (the attempt ended).
	stale bool
	// hold, when not nil, keeps the rendezvous waiting until it is closed.
	hold chan struct{}
	// refuse answers that many Updates with ResourceExhausted first, as a
	// server with too many in-flight Updates does.
	refuse int
	// reports received, in order; onReport, when set, sees each first.
	reports  []api.ReportRequest
	onReport func(api.ReportRequest)
	// reportUpdates are the IDs of the report and reports Updates
	// received, each once: a second Update with an ID already seen is
	// answered with the first's result, as Temporal dedups Updates.
	reportUpdates []string
	done          map[string]any
	// holdReports, when not nil, keeps every report Update waiting until
	// it is closed (or the caller's context ends); heldReports counts those
	// that came to it.
	holdReports chan struct{}
	heldReports int
	// loseAnswers records that many report Updates and then answers
	// each with Unavailable, as a connection lost after the server took
	// the Update: the rank's retry must not record the reports again.
	loseAnswers int
	// failAt answers the Update that holds the failAt-th report (counting
	// from 1) with a non-retryable error instead of recording it.
	failAt int
	// restoreds received (the restored Update).
	restoreds []api.RestoredRequest
	refused   int
	// batches holds the size of each register-batch Update received;
	// refuseRank refuses a rank's registration in a batch with its message.
	batches    []int
	refuseRank map[int]string
	queries    int
	// noBatch answers register-batch as a Fit worker without it does;
	// singles counts the register Updates.
	noBatch bool
	singles int
	// queryErrs answer the next rendezvous Queries, one each.
	queryErrs []error
}

func newFakeWorkflow(attempt, worldSize int) *fakeWorkflow {
	return &fakeWorkflow{attempt: attempt, worldSize: worldSize, peers: map[int]api.Peer{}}
}

func (f *fakeWorkflow) rendezvousLocked(attempt int) api.Rendezvous {
	rv := api.Rendezvous{Attempt: f.attempt, Registered: len(f.peers), WorldSize: f.worldSize}
	switch {
	case f.stale || attempt != f.attempt:
		rv.State = api.RendezvousStale
	case len(f.peers) < f.worldSize || f.held():
		rv.State = api.RendezvousWaiting
	default:
		rv.State = api.RendezvousReady
		for r := 0; r < f.worldSize; r++ {
			rv.Peers = append(rv.Peers, f.peers[r])
		}
	}
	return rv
}

func (f *fakeWorkflow) held() bool {
	if f.hold == nil {
		return false
	}
	select {
	case <-f.hold:
		return false
	default:
		return true
	}
}

func (f *fakeWorkflow) UpdateWorkflow(ctx context.Context, o client.UpdateWorkflowOptions) (client.WorkflowUpdateHandle, error) {
	f.mu.Lock()
	hold := f.holdReports
	if hold != nil && (o.UpdateName == api.UpdateReport || o.UpdateName == api.UpdateReports) {
		f.heldReports++
	}
	f.mu.Unlock()
	if hold != nil && (o.UpdateName == api.UpdateReport || o.UpdateName == api.UpdateReports) {
		select {
		case <-hold:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.refused < f.refuse {
		f.refused++
		return nil, serviceerror.NewResourceExhausted(0, "too many outstanding updates")
	}
	switch o.UpdateName {
	case api.UpdateReport, api.UpdateReports:
		if v, ok := f.done[o.UpdateID]; ok {
			return fakeHandle{id: o.UpdateID, v: v}, nil
		}
		var reqs []api.ReportRequest
		if o.UpdateName == api.UpdateReport {
			var req api.ReportRequest
			if err := roundTrip(o.Args[0], &req); err != nil {
				return nil, err
			}
			reqs = []api.ReportRequest{req}
		} else {
			var req api.ReportsRequest
			if err := roundTrip(o.Args[0], &req); err != nil {
				return nil, err
			}
			reqs = req.Reports
		}
		if f.failAt > len(f.reports) && f.failAt <= len(f.reports)+len(reqs) {
			return nil, serviceerror.NewInvalidArgument(fmt.Sprintf("fake workflow: refusing report %d", f.failAt))
		}
		var resp api.ReportsResponse
		for _, req := range reqs {
			if f.onReport != nil {
				f.onReport(req)
			}
			f.reports = append(f.reports, req)
			resp.Reports = append(resp.Reports, api.ReportResponse{Index: len(f.reports) - 1})
		}
		var v any = resp
		if o.UpdateName == api.UpdateReport {
			v = resp.Reports[0]
		}
		if f.done == nil {
			f.done = map[string]any{}
		}
		f.done[o.UpdateID] = v
		f.reportUpdates = append(f.reportUpdates, o.UpdateID)
		if f.loseAnswers > 0 {
			f.loseAnswers--
			return nil, serviceerror.NewUnavailable("fake workflow: the answer was lost")
		}
		return fakeHandle{id: o.UpdateID, v: v}, nil
	case api.UpdateRegister:
		var req api.RegisterRequest
		if err := roundTrip(o.Args[0], &req); err != nil {
			return nil, err
		}
		f.singles++
		f.peers[req.Rank] = api.Peer{Addr: req.Addr, Node: req.Node}
		return fakeHandle{id: o.UpdateID, v: f.rendezvousLocked(req.Attempt)}, nil
	case api.UpdateRegisterBatch:
		if f.noBatch {
			return fakeHandle{id: o.UpdateID, err: fmt.Errorf("unknown update %s. KnownUpdates=[%s %s]", o.UpdateName, api.UpdateRegister, api.UpdateReport)}, nil
		}
		var reqs []api.RegisterRequest
		if err := roundTrip(o.Args[0], &reqs); err != nil {
			return nil, err
		}
		f.batches = append(f.batches, len(reqs))
		var res api.RegisterBatchResponse
		for _, req := range reqs {
			if msg := f.refuseRank[req.Rank]; msg != "" {
				res.Refused = append(res.Refused, api.RegisterError{Rank: req.Rank, Error: msg})
				continue
			}
			f.peers[req.Rank] = api.Peer{Addr: req.Addr, Node: req.Node}
		}
		res.Rendezvous = f.rendezvousLocked(reqs[0].Attempt)
		return fakeHandle{id: o.UpdateID, v: res}, nil
	case api.UpdateRestored:
		var req api.RestoredRequest
		if err := roundTrip(o.Args[0], &req); err != nil {
			return nil, err
		}
		f.restoreds = append(f.restoreds, req)
		return fakeHandle{id: o.UpdateID}, nil
	}
	return nil, fmt.Errorf("fake workflow: unknown update %q", o.UpdateName)
}

func (f *fakeWorkflow) QueryWorkflow(_ context.Context, _, _, queryType string, args ...any) (converter.EncodedValue, error) {
	if queryType != api.QueryRendezvous {
		return nil, fmt.Errorf("fake workflow: unknown query %q", queryType)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.queries++
	if len(f.queryErrs) > 0 {
		err := f.queryErrs[0]
		f.queryErrs = f.queryErrs[1:]
		return nil, err
	}
	return fakeValue{v: f.rendezvousLocked(args[0].(int))}, nil
}

func (f *fakeWorkflow) received() []api.ReportRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]api.ReportRequest(nil), f.reports...)
}

type fakeHandle struct {
	id  string
	v   any
	err error // the Update's rejection or failure
}

func (h fakeHandle) WorkflowID() string { return "fake" }
func (h fakeHandle) RunID() string      { return "fake-run" }
func (h fakeHandle) UpdateID() string   { return h.id }

// Get decodes the Update's result into out, as the SDK's does; a nil out
// ignores it.
func (h fakeHandle) Get(_ context.Context, out any) error {
	if h.err != nil {
		return h.err
	}
	if out == nil {
		return nil
	}
	return roundTrip(h.v, out)
}

type fakeValue struct{ v any }

func (v fakeValue) HasValue() bool    { return true }
func (v fakeValue) Get(out any) error { return roundTrip(v.v, out) }

func roundTrip(in, out any) error {
	b, err := json.Marshal(in)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, out)
}
