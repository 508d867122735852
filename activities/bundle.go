package activities

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"

	"go.temporal.io/sdk/temporal"

	"github.com/tempotrain/tempotrain/api"
)

// runBundle runs ranks in.Rank .. in.Rank+in.Local-1 of a fixed-size
// attempt together, as one activity (api.ScalingConfig.RanksPerProcess):
// each is the rank RunRank would run (its own rendezvous registration,
// links, restore, reports, rank log), as goroutines of this process, under
// one heartbeat that carries every rank's progress. What the Temporal
// server spends per activity (its start, its heartbeats, its end) is then
// paid once per bundle instead of once per rank.
//
// The bundle's ranks fail together, as an attempt's ranks do: the first to
// fail cancels the others (their peers would fail them a moment later
// anyway), and the bundle returns once they all ended, with the failure
// that tells most of the cause (weight), its rank named in an
// api.BundleFailure detail. A preemption cancels nothing (the others stop
// at the same checkpoint on their own).
func (a *Activities) runBundle(actx context.Context, in api.RunRankInput) (api.RankOutput, error) {
	n := in.Local
	out := api.RankOutput{Rank: in.Rank}
	if in.Elastic || in.Rank < 0 || in.Rank+n > in.WorldSize {
		return out, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("ranks %d..%d of a world of %d (elastic %v): a bundle is a run of ranks of a fixed-size world", in.Rank, in.Rank+n-1, in.WorldSize, in.Elastic),
			api.ErrUser.String(), nil)
	}
	if err := a.bundleFits(in, n); err != nil {
		return out, err
	}
	ranks := make([]*rank, n)
	for i := range ranks {
		rin := in
		rin.Rank, rin.Local = in.Rank+i, 0
		ranks[i] = a.newRank(actx, rin)
	}

	hctx, stopBeat := context.WithCancel(context.WithoutCancel(actx))
	var beat sync.WaitGroup
	beat.Add(1)
	go func() {
		defer beat.Done()
		heartbeat(hctx, actx, api.RankHeartbeatInterval(a.o.HeartbeatInterval, in.HeartbeatingActivities()), ranks)
	}()
	defer func() {
		stopBeat()
		beat.Wait()
	}()

	ctx, cancel := context.WithCancelCause(actx)
	defer cancel(nil)
	type end struct {
		i   int
		out api.RankOutput
		err error
	}
	ends := make(chan end, n)
	for i, r := range ranks {
		go func() {
			o, err := r.run(ctx, false)
			ends <- end{i, o, err}
		}()
	}
	first, firstErr := -1, error(nil)
	for range n {
		e := <-ends
		out.Reports += e.out.Reports
		if e.err == nil {
			continue
		}
		if first < 0 || weight(e.err) > weight(firstErr) {
			first, firstErr = e.i, e.err
		}
		if !preempted(e.err) {
			cancel(temporal.NewCanceledError())
		}
	}
	if first < 0 {
		return out, nil
	}
	return out, bundleError(ranks[first].in.Rank, n, firstErr)
}

// weight orders the errors of a bundle's ranks by what they tell of the
// cause: a rank's own failure first, then a preemption, then a lost peer
// or a stale attempt (what the others see when one rank fails), then a
// cancellation. The rank that failed first may end last (it closes its
// links, and its peers fail at once, before its own ending is done), so
// the bundle takes the heaviest error, the first of its weight.
func weight(err error) int {
	var app *temporal.ApplicationError
	switch {
	case temporal.IsCanceledError(err):
		return 0
	case errors.As(err, &app) && (api.ErrorKind(app.Type()) == api.ErrPeerLost || api.ErrorKind(app.Type()) == api.ErrStaleAttempt):
		return 1
	case preempted(err):
		return 2
	}
	return 3
}

// preempted says whether a rank ended for a preemption: it checkpointed at
// the step its group agreed on and stopped, and the bundle's other ranks
// are stopping at the same step (rank 0 maybe still committing that
// checkpoint), so it cancels none of them.
func preempted(err error) bool {
	var app *temporal.ApplicationError
	return errors.As(err, &app) && api.ErrorKind(app.Type()) == api.ErrPreempted
}

// bundleError is the error of a bundle of local ranks whose rank failed
// first with err: a cancellation as it is (its Progress names the rank),
// anything else as an application error of the same message, type and
// retryability, whose details are an api.BundleFailure naming the rank,
// then the rank's own detail (a Stall, a Progress) if it had one.
func bundleError(rank, local int, err error) error {
	var canceled *temporal.CanceledError
	if errors.As(err, &canceled) {
		return err
	}
	details := []any{api.BundleFailure{Rank: rank, Local: local}}
	var app *temporal.ApplicationError
	if !errors.As(err, &app) {
		return temporal.NewApplicationErrorWithOptions(err.Error(), errTypeName(err),
			temporal.ApplicationErrorOptions{Cause: err, Details: details})
	}
	var d any
	if app.HasDetails() && app.Details(&d) == nil && d != nil {
		details = append(details, d)
	}
	return temporal.NewApplicationErrorWithOptions(app.Message(), app.Type(),
		temporal.ApplicationErrorOptions{NonRetryable: app.NonRetryable(), Cause: errors.Unwrap(app), Details: details})
}

// errTypeName names err's type as the SDK names that of a plain error an
// activity returns.
func errTypeName(err error) string {
	t := reflect.TypeOf(err)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t.Name()
}
