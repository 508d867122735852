package activities

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/tempotrain/tempotrain/api"
)

// rendezvous registers this rank's address with the workflow, then waits
// until every rank of the attempt has registered, within StartTimeout.
//
// The ranks of one worker process share the traffic (rendezvousHub): their
// registrations go as one register-batch Update per short window, and one
// poller per (workflow run, attempt) asks the rendezvous Query for all of
// them, so the workflow sees a few requests per process, not per rank.
//
// In an elastic run the rank registers its slot and the workflow forms the
// group: the rendezvous then sets r.in.Rank and r.in.WorldSize to the rank
// and world size the attempt trains with. A slot left out of the group is a
// standby: it waits, polled slowly, until the attempt ends (stale), with no
// time limit of its own (the workflow bounds the attempt's wait).
func (r *rank) rendezvous(ctx context.Context, addr string) (peers []api.Peer, err error) {
	if !r.in.Elastic {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.in.StartTimeout.D())
		defer cancel()
	}
	polls := 0
	ctx, end := r.tr.Rendezvous(ctx)
	defer func() { end(polls, err) }()
	key := rendezvousKey{wfID: r.wfID, runID: r.runID, attempt: r.in.Attempt}
	poll := r.pollKey()
	req := api.RegisterRequest{Attempt: r.in.Attempt, Rank: r.in.Rank, Addr: addr, Node: r.a.o.Node}
	rv, err := r.a.rdv.register(ctx, r.wf, r.a.o.Logger, key, req)
	if err != nil {
		return nil, r.waitError(ctx, "register for the rendezvous", err)
	}
	var w *rendezvousWaiter
	defer func() {
		if w != nil {
			w.leave()
		}
	}()
	for {
		switch {
		case rv.State == api.RendezvousReady && r.in.Elastic:
			if rank := slices.Index(rv.Slots, r.in.Rank); rank >= 0 && len(rv.Peers) == len(rv.Slots) {
				r.log.Info("joined the group", "slot", r.in.Rank, "rank", rank, "world_size", len(rv.Slots))
				r.in.Rank, r.in.WorldSize = rank, len(rv.Slots)
				return rv.Peers, nil
			}
			r.standby(w)
		case rv.State == api.RendezvousStandby:
			r.standby(w)
		case rv.State == api.RendezvousReady:
			if len(rv.Peers) != r.in.WorldSize {
				return nil, fmt.Errorf("rendezvous returned %d peers for world size %d", len(rv.Peers), r.in.WorldSize)
			}
			return rv.Peers, nil
		case rv.State == api.RendezvousStale:
			return nil, temporal.NewNonRetryableApplicationError(
				fmt.Sprintf("attempt %d is no longer running (current %d)", r.in.Attempt, rv.Attempt), api.ErrStaleAttempt.String(), nil)
		}
		if w == nil {
			w = r.a.rdv.watch(r.wf, r.a.o.Logger, poll)
			if r.standing {
				w.stand()
			}
		}
		registered := rv.Registered
		var res pollResult
		select {
		case <-ctx.Done():
			return nil, r.waitError(ctx, fmt.Sprintf("rendezvous: %d of %d ranks registered", registered, r.in.WorldSize), ctx.Err())
		case <-r.stopping:
			// The worker is stopping before this rank joined a group (a
			// standby, or a group still forming): leave now rather than
			// join and be preempted, or grow a group by a leaving worker.
			return nil, temporal.NewApplicationError("this worker is stopping: the rank leaves the rendezvous", api.ErrWorkerStopping.String())
		case res = <-w.next():
		}
		polls++
		if res.err != nil {
			return nil, r.waitError(ctx, "rendezvous query", res.err)
		}
		rv = res.rv
	}
}

// standby notes that the group formed without this slot: it waits for the
// attempt to end, and its poller (w, when it has one) may poll slowly.
func (r *rank) standby(w *rendezvousWaiter) {
	if !r.standing {
		r.standing = true
		r.log.Info("standby: the group formed without this slot; waiting for the next attempt", "slot", r.in.Rank)
	}
	if w != nil {
		w.stand()
	}
}

func (r *rank) waitError(ctx context.Context, what string, err error) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("%s: not complete within start_timeout %s", what, r.in.StartTimeout)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// update sends an Update to the Fit and waits for its result, retrying
// what the server may refuse for a moment (too many in-flight Updates,
// unavailable). A rejection by the workflow is returned as is.
func (r *rank) update(ctx context.Context, name, id string, arg, result any) error {
	wfID, runID := r.controller()
	return sendUpdate(ctx, r.wf, r.log, wfID, runID, name, id, arg, result)
}

func sendUpdate(ctx context.Context, wf workflowClient, log *slog.Logger, wfID, runID, name, id string, arg, result any) error {
	wait := 50 * time.Millisecond
	for {
		h, err := wf.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
			UpdateID: id, WorkflowID: wfID, RunID: runID, UpdateName: name,
			Args: []any{arg}, WaitForStage: client.WorkflowUpdateStageCompleted,
		})
		if err == nil {
			err = h.Get(ctx, result)
		}
		if err == nil || !transient(err) || ctx.Err() != nil {
			return err
		}
		log.Debug("update refused for now, retrying", "update", name, "error", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		wait = min(wait*2, time.Second)
	}
}

// pollKey is the key of the poller that waits for, and then watches, this
// rank's attempt: the Fit's rendezvous Query. The ranks of a rank group
// register with their group and poll the Fit, which is Ready once every
// group's ranks registered: one poller per worker process and attempt
// whatever the groups, and none on the groups, whose executions take the
// ranks' starts, registrations and heartbeats.
func (r *rank) pollKey() rendezvousKey {
	id, run := r.controller()
	return rendezvousKey{wfID: id, runID: run, attempt: r.in.Attempt}
}

// controller is the Fit's workflow ID and run: ctrlID's, or the workflow's
// that started the rank when unset.
func (r *rank) controller() (id, run string) {
	if r.ctrlID == "" {
		return r.wfID, r.runID
	}
	return r.ctrlID, r.ctrlRun
}

// rendezvousKey names one attempt of one workflow run: the ranks of a
// worker process with the same key share a batcher and a poller.
type rendezvousKey struct {
	wfID, runID string
	attempt     int
}

// batchWindow is how long a batcher waits after a registration arrives for
// more of this process's ranks before it sends them as one Update. While
// an Update is in flight, arrivals wait for it and go in the next.
const batchWindow = 25 * time.Millisecond

// rendezvousHub is a worker process's (an Activities') share of the
// rendezvous traffic: one batcher of registrations and one poller of the
// rendezvous Query per key, each living while it has ranks to serve. Its
// zero value is ready.
type rendezvousHub struct {
	mu      sync.Mutex
	batches map[rendezvousKey]*batcher
	pollers map[rendezvousKey]*poller
	// window is batchWindow unless a test sets it.
	window time.Duration
}

// registration is one rank's request waiting in (or sent by) a batcher.
type registration struct {
	req  api.RegisterRequest
	done chan struct{} // closed once rv or err is set
	rv   api.Rendezvous
	err  error
	left bool // the rank stopped waiting (its ctx ended)
	// values is the rank's context without its cancellation: the batch's
	// Update goes with its first registration's, so that its span (and
	// the controller's) is in the run's trace, under that rank's
	// rendezvous.
	values context.Context
}

// batcher sends the registrations of one key, those that arrived within
// the window (or while the previous Update was in flight) in one Update.
type batcher struct {
	pending []*registration
	// inflight are the registrations of the Update in flight; cancel ends
	// it once every one of them left.
	inflight []*registration
	cancel   context.CancelFunc
}

// register sends req with the other registrations of its key that arrive
// within the window, and returns the rendezvous the workflow answered, or
// the error of req (a refusal of the whole batch, or of req alone).
func (h *rendezvousHub) register(ctx context.Context, wf workflowClient, log *slog.Logger, key rendezvousKey, req api.RegisterRequest) (api.Rendezvous, error) {
	reg := &registration{req: req, done: make(chan struct{}), values: context.WithoutCancel(ctx)}
	h.mu.Lock()
	if h.batches == nil {
		h.batches = map[rendezvousKey]*batcher{}
	}
	b := h.batches[key]
	if b == nil {
		b = &batcher{}
		h.batches[key] = b
		go h.send(wf, log, key, b)
	}
	b.pending = append(b.pending, reg)
	h.mu.Unlock()
	select {
	case <-reg.done:
		return reg.rv, reg.err
	case <-ctx.Done():
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	select {
	case <-reg.done: // answered meanwhile
		return reg.rv, reg.err
	default:
	}
	reg.left = true
	b.pending = slices.DeleteFunc(b.pending, func(p *registration) bool { return p == reg })
	if b.cancel != nil && !slices.ContainsFunc(b.inflight, func(p *registration) bool { return !p.left }) {
		b.cancel() // nobody waits for the Update in flight
	}
	return api.Rendezvous{}, ctx.Err()
}

// send is the batcher's goroutine: after the window, it sends what is
// pending, and again while registrations arrived during an Update; it ends
// (and leaves the hub) once nothing is pending.
func (h *rendezvousHub) send(wf workflowClient, log *slog.Logger, key rendezvousKey, b *batcher) {
	window := h.window
	if window == 0 {
		window = batchWindow
	}
	time.Sleep(window)
	for {
		h.mu.Lock()
		batch := b.pending
		b.pending = nil
		if len(batch) == 0 {
			delete(h.batches, key)
			h.mu.Unlock()
			return
		}
		ctx, cancel := context.WithCancel(batch[0].values)
		b.inflight, b.cancel = batch, cancel
		h.mu.Unlock()

		reqs := make([]api.RegisterRequest, len(batch))
		for i, reg := range batch {
			reqs[i] = reg.req
		}
		rvs, errs := registerBatch(ctx, wf, log, key, reqs)
		cancel()
		h.mu.Lock()
		b.inflight, b.cancel = nil, nil
		for i, reg := range batch {
			reg.rv, reg.err = rvs[i], errs[i]
			close(reg.done)
		}
		for i := range batch {
			if errs[i] == nil && rvs[i].State != api.RendezvousStandby {
				h.publishLocked(key, rvs[i])
				break
			}
		}
		h.mu.Unlock()
	}
}

// registerBatch sends reqs as one register-batch Update and returns each
// registration's rendezvous or error.
func registerBatch(ctx context.Context, wf workflowClient, log *slog.Logger, key rendezvousKey, reqs []api.RegisterRequest) ([]api.Rendezvous, []error) {
	rvs := make([]api.Rendezvous, len(reqs))
	errs := make([]error, len(reqs))
	var res api.RegisterBatchResponse
	err := sendUpdate(ctx, wf, log, key.wfID, key.runID, api.UpdateRegisterBatch, batchUpdateID(key.attempt, reqs), reqs, &res)
	if err != nil && strings.Contains(err.Error(), "unknown update "+api.UpdateRegisterBatch) {
		// A Fit worker older than register-batch: a register Update per
		// rank, at once, as such a worker's ranks send.
		var wg sync.WaitGroup
		for i, req := range reqs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				id := fmt.Sprintf("register-a%d-r%d", req.Attempt, req.Rank)
				errs[i] = sendUpdate(ctx, wf, log, key.wfID, key.runID, api.UpdateRegister, id, req, &rvs[i])
			}()
		}
		wg.Wait()
		return rvs, errs
	}
	refused := map[int]string{}
	for _, e := range res.Refused {
		refused[e.Rank] = e.Error
	}
	for i, req := range reqs {
		switch msg, ok := refused[req.Rank]; {
		case err != nil:
			errs[i] = err
		case ok:
			errs[i] = errors.New(msg)
		default:
			rvs[i] = res.Rendezvous
		}
	}
	return rvs, errs
}

// batchUpdateID names a batch by its attempt and content, so that a batch
// retried (its Update aborted or refused for a moment) is the same Update,
// recorded once, and another batch is another.
func batchUpdateID(attempt int, reqs []api.RegisterRequest) string {
	f := fnv.New64a()
	for _, req := range reqs {
		fmt.Fprintf(f, "%d %s %s\n", req.Rank, req.Addr, req.Node)
	}
	return fmt.Sprintf("register-a%d-r%d-n%d-%016x", attempt, reqs[0].Rank, len(reqs), f.Sum64())
}

// pollResult is one answer of the rendezvous Query, or its error (one a
// retry cannot help).
type pollResult struct {
	rv  api.Rendezvous
	err error
	at  time.Time // when the Query was sent (zero: a batch's answer)
}

// poller asks the rendezvous Query of one key for the waiting ranks of its
// process: every 10 ms doubling to 50 ms while the rendezvous is young
// (every rank of an attempt usually starts within a second), every second
// once it has waited long (a worker yet to come up) or when every waiter is
// a standby. It runs while any rank waits.
type poller struct {
	waiters  map[*rendezvousWaiter]bool
	standing int // waiters that are standbys
	stop     context.CancelFunc
	now      chan struct{} // a waiter asks for a Query now (kick)
}

// rendezvousWaiter is one rank waiting on its key's poller.
type rendezvousWaiter struct {
	h        *rendezvousHub
	key      rendezvousKey
	p        *poller
	ch       chan pollResult // the latest result not yet taken
	standing bool
}

// watch adds a waiter to key's poller, starting one if none runs.
func (h *rendezvousHub) watch(wf workflowClient, log *slog.Logger, key rendezvousKey) *rendezvousWaiter {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.pollers == nil {
		h.pollers = map[rendezvousKey]*poller{}
	}
	p := h.pollers[key]
	if p == nil {
		ctx, cancel := context.WithCancel(context.Background())
		p = &poller{waiters: map[*rendezvousWaiter]bool{}, stop: cancel, now: make(chan struct{}, 1)}
		h.pollers[key] = p
		go h.poll(ctx, wf, log, key, p)
	}
	w := &rendezvousWaiter{h: h, key: key, p: p, ch: make(chan pollResult, 1)}
	p.waiters[w] = true
	return w
}

// next delivers the poller's next result after the last one taken.
func (w *rendezvousWaiter) next() <-chan pollResult { return w.ch }

// kick asks the poller to send its next Query now.
func (w *rendezvousWaiter) kick() {
	select {
	case w.p.now <- struct{}{}:
	default:
	}
}

// stand marks the waiter a standby: it needs no fast polling.
func (w *rendezvousWaiter) stand() {
	w.h.mu.Lock()
	defer w.h.mu.Unlock()
	if !w.standing {
		w.standing = true
		w.p.standing++
	}
}

// leave removes the waiter; the last to leave stops the poller.
func (w *rendezvousWaiter) leave() {
	w.h.mu.Lock()
	defer w.h.mu.Unlock()
	p := w.p
	if !p.waiters[w] {
		return
	}
	delete(p.waiters, w)
	if w.standing {
		p.standing--
	}
	if len(p.waiters) == 0 {
		p.stop()
		if w.h.pollers[w.key] == p {
			delete(w.h.pollers, w.key)
		}
	}
}

// publishLocked gives rv to every rank waiting on key (a batch's answer is
// news for them too).
func (h *rendezvousHub) publishLocked(key rendezvousKey, rv api.Rendezvous) {
	if p := h.pollers[key]; p != nil {
		p.publishLocked(pollResult{rv: rv})
	}
}

func (p *poller) publishLocked(res pollResult) {
	for w := range p.waiters {
		select {
		case <-w.ch: // a result not taken yet is replaced by the newer
		default:
		}
		w.ch <- res
	}
}

func (h *rendezvousHub) poll(ctx context.Context, wf workflowClient, log *slog.Logger, key rendezvousKey, p *poller) {
	started := time.Now()
	wait := 10 * time.Millisecond
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		case <-p.now:
		}
		if ctx.Err() != nil {
			return
		}
		sent := time.Now()
		var rv api.Rendezvous
		v, err := wf.QueryWorkflow(ctx, key.wfID, key.runID, api.QueryRendezvous, key.attempt)
		if err == nil {
			err = v.Get(&rv)
		}
		if ctx.Err() != nil {
			return
		}
		h.mu.Lock()
		if err == nil || !transient(err) {
			p.publishLocked(pollResult{rv: rv, err: err, at: sent})
		} else {
			log.Debug("rendezvous query failed for now, retrying", "workflow", key.wfID, "attempt", key.attempt, "error", err)
		}
		slow := p.standing == len(p.waiters)
		h.mu.Unlock()
		limit := 50 * time.Millisecond
		if time.Since(started) > 10*time.Second || slow {
			limit = time.Second
		}
		wait = min(wait*2, limit)
	}
}
