package activities

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/storage"
)

// Rank 0 sends its reports to the workflow from a goroutine of its own, so
// that a report costs the training loop its queueing, not an Update's
// round trip: one Update a report when they come apart, the reports queued
// meanwhile in one reports Update when they come faster. What the sender
// keeps of the synchronous Update it replaces:
//
//   - exactly once: an Update's ID names its reports (report-a{attempt}-{n},
//     report-a{attempt}-{first}-{last} for several) and a retry sends the
//     same reports under the same ID; a report is never in two Updates;
//   - in order, and a checkpoint's report only once the checkpoint is
//     committed: the sender takes reports from the head of the queue up to
//     the first whose upload is still running;
//   - a failure is the training function's: the first Update that fails
//     stops the sender, and the next Report returns its error, or drain
//     when the function has returned;
//   - a report the workflow must decide on (RunRankInput.WaitMetric) goes
//     alone, and its Report returns only with the workflow's answer;
//   - a rank cancelled still sends what it had queued and committed, for
//     reportCancelGrace: a synchronous Update would have been sent before
//     its Report returned.

const (
	// maxBatch and maxBatchBytes bound one reports Update: Temporal refuses
	// a payload over 2 MB.
	maxBatch      = 256
	maxBatchBytes = 512 << 10
	// reportCancelGrace is how long a cancelled rank goes on sending the
	// reports queued before its cancellation: within the workflow's cancel
	// grace (3 s), which fnCancelGrace (1 s) has begun.
	reportCancelGrace = time.Second
)

// reportSender is rank 0's queue of reports for the workflow and the state
// of the goroutine that sends them. Its own lock guards it (the sender
// does not take reportMu, which a Report holds while it commits).
type reportSender struct {
	mu    sync.Mutex
	queue []queued // not yet sent, in order
	// err is the first failure to send; nothing is sent after it.
	err error
	// closed: the training function has returned; a Report after it (from
	// a goroutine left behind) fails.
	closed  bool
	running bool
	// moved is closed, and replaced, whenever reports leave the queue or
	// err is set; wake tells the goroutine that the head may be sendable.
	moved chan struct{}
	wake  chan struct{}
	stop  context.CancelFunc // ends the goroutine
	done  chan struct{}      // closed when it ended
}

// failed returns the error of the report that failed to reach the
// workflow, if one did.
func (s *reportSender) failed() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// committed marks the queued report of a checkpoint whose upload finished.
func (s *reportSender) committed(man *storage.Manifest) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.queue {
		if c := s.queue[i].req.Checkpoint; c != nil && c.Seq == man.Seq {
			c.Bytes, c.Time = man.Bytes, man.Time
			s.queue[i].committed = true
		}
	}
	s.kick()
}

// close refuses reports from now on.
func (s *reportSender) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
}

func (s *reportSender) kick() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// next is what the goroutine sends next: the committed reports at the head
// of the queue, within the batch bounds, a report that waits alone.
func (s *reportSender) next() []queued {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return nil
	}
	var out []queued
	size := 0
	for _, q := range s.queue {
		if !q.committed || (q.wait && len(out) > 0) {
			break
		}
		b := reportBytes(q.req)
		if len(out) > 0 && (len(out) == maxBatch || size+b > maxBatchBytes) {
			break
		}
		out = append(out, q)
		size += b
		if q.wait {
			break
		}
	}
	return out
}

// sent takes the first n reports off the queue, or records the failure
// that stops the sender.
func (s *reportSender) sent(n int, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.err = err
	} else {
		s.queue = s.queue[n:]
	}
	close(s.moved)
	s.moved = make(chan struct{})
}

// waitFor waits until done says the queue is where its caller wants it,
// or a report failed, or ctx ended.
func (s *reportSender) waitFor(ctx context.Context, done func() bool) error {
	for {
		s.mu.Lock()
		if s.err != nil {
			s.mu.Unlock()
			return s.err
		}
		if done() {
			s.mu.Unlock()
			return nil
		}
		moved := s.moved
		s.mu.Unlock()
		select {
		case <-moved:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// idle: no committed report is left to send (under mu).
func (s *reportSender) idle() bool { return len(s.queue) == 0 || !s.queue[0].committed }

// reportBytes is about how many bytes a report takes in an Update, for
// the batch bound.
func reportBytes(req api.ReportRequest) int {
	n := 64
	for k := range req.Metrics {
		n += len(k) + 28
	}
	if c := req.Checkpoint; c != nil {
		n += 256 + len(c.URI)
		for k, v := range c.Meta {
			n += len(k) + len(v) + 8
		}
		for k := range c.Metrics {
			n += len(k) + 28
		}
	}
	return n
}

// enqueue queues a report for the sender, starting it with the first.
// A Report returns at once unless a report the workflow must decide on is
// among those ready to send: then it waits until that one is answered.
func (r *rank) enqueue(ctx context.Context, q queued) error {
	s := &r.send
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return fmt.Errorf("report %d: made after the training function returned", q.n)
	}
	if s.err != nil {
		s.mu.Unlock()
		return s.err
	}
	if !s.running {
		s.running = true
		s.moved, s.wake, s.done = make(chan struct{}), make(chan struct{}, 1), make(chan struct{})
		var sctx context.Context
		sctx, s.stop = context.WithCancel(context.Background())
		go r.sender(sctx)
	}
	s.queue = append(s.queue, q)
	until := int64(-1)
	for _, e := range s.queue {
		if !e.committed {
			break
		}
		if e.wait {
			until = e.n
		}
	}
	s.kick()
	s.mu.Unlock()
	if until < 0 {
		return nil
	}
	err := s.waitFor(ctx, func() bool { return len(s.queue) == 0 || s.queue[0].n > until })
	if err != nil && ctx.Err() != nil && s.failed() == nil {
		return fmt.Errorf("report %d to the workflow: %w", until, err)
	}
	return err
}

// sender sends the queue's reports until it is stopped or one fails.
func (r *rank) sender(sctx context.Context) {
	s := &r.send
	defer close(s.done)
	for {
		batch := s.next()
		if len(batch) == 0 {
			select {
			case <-s.wake:
				continue
			case <-sctx.Done():
				return
			}
		}
		err := r.sendReports(sctx, batch)
		s.sent(len(batch), err)
		if err != nil {
			return
		}
	}
}

// sendReports sends reports in one Update: the report Update for one, the
// reports Update for more. The Update carries the first report's context
// values (its span); a report that waits ends with its Report's context,
// as its synchronous Update did; every other only when the sender stops.
func (r *rank) sendReports(sctx context.Context, b []queued) error {
	parent := b[0].ctx
	if parent == nil {
		parent = context.Background()
	}
	if !b[0].wait {
		parent = context.WithoutCancel(parent)
	}
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	defer context.AfterFunc(sctx, cancel)()
	if len(b) == 1 {
		var resp api.ReportResponse
		id := fmt.Sprintf("report-a%d-%d", r.in.Attempt, b[0].n)
		if err := r.update(ctx, api.UpdateReport, id, b[0].req, &resp); err != nil {
			return fmt.Errorf("report %d to the workflow: %w", b[0].n, err)
		}
		return nil
	}
	first, last := b[0].n, b[len(b)-1].n
	req := api.ReportsRequest{Attempt: r.in.Attempt, Reports: make([]api.ReportRequest, len(b))}
	for i, q := range b {
		req.Reports[i] = q.req
	}
	var resp api.ReportsResponse
	id := fmt.Sprintf("report-a%d-%d-%d", r.in.Attempt, first, last)
	if err := r.update(ctx, api.UpdateReports, id, req, &resp); err != nil {
		return fmt.Errorf("reports %d to %d to the workflow: %w", first, last, err)
	}
	if len(resp.Reports) != len(b) {
		return fmt.Errorf("reports %d to %d to the workflow: it answered %d of %d", first, last, len(resp.Reports), len(b))
	}
	return nil
}

// stopSender waits for the sender to send every committed report queued,
// for reportCancelGrace when ctx (the rank's) has ended, and stops it. It
// returns what failed, or why reports were left unsent.
func (r *rank) stopSender(ctx context.Context) error {
	s := &r.send
	s.mu.Lock()
	running := s.running
	s.mu.Unlock()
	if !running {
		return nil
	}
	err := s.waitFor(ctx, s.idle)
	if err != nil && ctx.Err() != nil && s.failed() == nil {
		// Cancelled: what was queued before still goes, for a while.
		gctx, cancel := context.WithTimeout(context.Background(), reportCancelGrace)
		err = s.waitFor(gctx, s.idle)
		cancel()
		if err != nil && s.failed() == nil {
			s.mu.Lock()
			left := len(s.queue)
			s.mu.Unlock()
			err = fmt.Errorf("%d reports left unsent %v after the rank's cancellation: %w", left, reportCancelGrace, ctx.Err())
		}
	}
	s.stop()
	<-s.done
	return err
}
