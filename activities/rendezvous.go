package activities

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/tempotrain/tempotrain/api"
)

// rendezvous registers this rank's address with the workflow, then polls
// until every rank of the attempt has registered, within StartTimeout.
//
// In an elastic run the rank registers its slot and the workflow forms the
// group: the rendezvous then sets r.in.Rank and r.in.WorldSize to the rank
// and world size the attempt trains with. A slot left out of the group is a
// standby: it polls, slowly, until the attempt ends (stale), with no time
// limit of its own (the workflow bounds the attempt's wait).
func (r *rank) rendezvous(ctx context.Context, addr string) (peers []api.Peer, err error) {
	if !r.in.Elastic {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.in.StartTimeout.D())
		defer cancel()
	}
	polls := 0
	ctx, end := r.tr.Rendezvous(ctx)
	defer func() { end(polls, err) }()
	req := api.RegisterRequest{Attempt: r.in.Attempt, Rank: r.in.Rank, Addr: addr, Node: r.a.o.Node}
	updateID := fmt.Sprintf("register-a%d-r%d", r.in.Attempt, r.in.Rank)
	var rv api.Rendezvous
	if err := r.update(ctx, api.UpdateRegister, updateID, req, &rv); err != nil {
		return nil, fmt.Errorf("register for the rendezvous: %w", err)
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
			if v, err = r.wf.QueryWorkflow(ctx, r.wfID, r.runID, api.QueryRendezvous, r.in.Attempt); err == nil {
				err = v.Get(&rv)
			}
		}
		switch {
		case err != nil && !transient(err):
			return nil, r.waitError(ctx, "rendezvous query", err)
		case err != nil:
		case rv.State == api.RendezvousReady && r.in.Elastic:
			if rank := slices.Index(rv.Slots, r.in.Rank); rank >= 0 && len(rv.Peers) == len(rv.Slots) {
				r.log.Info("joined the group", "slot", r.in.Rank, "rank", rank, "world_size", len(rv.Slots))
				r.in.Rank, r.in.WorldSize = rank, len(rv.Slots)
				return rv.Peers, nil
			}
			r.standby()
		case rv.State == api.RendezvousStandby:
			r.standby()
		case rv.State == api.RendezvousReady:
			if len(rv.Peers) != r.in.WorldSize {
				return nil, fmt.Errorf("rendezvous returned %d peers for world size %d", len(rv.Peers), r.in.WorldSize)
			}
			return rv.Peers, nil
		case rv.State == api.RendezvousStale:
			return nil, temporal.NewNonRetryableApplicationError(
				fmt.Sprintf("attempt %d is no longer running (current %d)", r.in.Attempt, rv.Attempt), api.ErrStaleAttempt.String(), nil)
		}
		registered := rv.Registered
		rv = api.Rendezvous{}
		select {
		case <-ctx.Done():
			return nil, r.waitError(ctx, fmt.Sprintf("rendezvous: %d of %d ranks registered", registered, r.in.WorldSize), ctx.Err())
		case <-r.stopping:
			// The worker is stopping before this rank joined a group (a
			// standby, or a group still forming): leave now rather than
			// join and be preempted, or grow a group by a leaving worker.
			return nil, temporal.NewApplicationError("this worker is stopping: the rank leaves the rendezvous", api.ErrWorkerStopping.String())
		case <-time.After(wait):
		}
		limit := 50 * time.Millisecond
		if time.Since(started) > 10*time.Second || r.standing {
			limit = time.Second
		}
		wait = min(wait*2, limit)
	}
}

// standby notes that the group formed without this slot: it waits for the
// attempt to end.
func (r *rank) standby() {
	if !r.standing {
		r.standing = true
		r.log.Info("standby: the group formed without this slot; waiting for the next attempt", "slot", r.in.Rank)
	}
}

func (r *rank) waitError(ctx context.Context, what string, err error) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("%s: not complete within start_timeout %s", what, r.in.StartTimeout)
	}
	return fmt.Errorf("%s: %w", what, err)
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
