package activities

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/api/serviceerror"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/train/trainrt"
)

// rate turns a rank's sample count into samples/s over the last heartbeat
// interval.
type rate struct {
	at      time.Time
	samples int64
	perSec  float64
}

func (r *rank) progress(rt *rate) api.Progress {
	p := api.Progress{Attempt: r.in.Attempt, Rank: -1, Slot: r.in.Rank, Phase: r.phase.Load().(api.Phase), Epoch: -1, Step: -1,
		Reports: int(r.reports.Load()), Checkpoint: int(r.ckpt.Load())}
	if !r.in.Elastic {
		p.Rank = r.in.Rank
	}
	if tc := r.tc.Load(); tc != nil {
		p.Rank = tc.WorldRank()
		p.Epoch, p.Step = tc.Progress()
		p.Samples = trainrt.Samples(tc)
		r.tr.Samples(p.Samples) // Prometheus's tempotrain_samples_total
		now := time.Now()
		if rt != nil {
			if dt := now.Sub(rt.at).Seconds(); !rt.at.IsZero() && dt > 0 && p.Samples >= rt.samples {
				rt.perSec = float64(p.Samples-rt.samples) / dt
			}
			rt.at, rt.samples = now, p.Samples
			p.SamplesPerSec = rt.perSec
		}
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
	var rt rate
	for {
		if ctx.Err() == nil {
			r.a.recordHeartbeat(hb, r.progress(&rt))
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
// the group is intact, and learns from its process's rendezvous poller, once
// the server answers, whether its attempt is still current.
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
	// The process's rendezvous poller asks for every rank of the attempt
	// (a standby's pace: once a second), not a Query per rank: under load
	// most ranks lose their heartbeats' replies at once.
	w := r.a.rdv.watch(r.wf, r.a.o.Logger, rendezvousKey{wfID: r.wfID, runID: r.runID, attempt: r.in.Attempt})
	w.stand()
	defer w.leave()
	for {
		var res pollResult
		select {
		case <-ctx.Done():
			return
		case res = <-w.next():
		}
		if res.err == nil && res.rv.State == api.RendezvousStale {
			cancel(fmt.Errorf("attempt %d ended while the server was unreachable", r.in.Attempt))
			return
		}
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
