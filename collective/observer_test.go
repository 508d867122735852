package collective

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

type ctxKey struct{}

// recorder collects one rank's OpInfos and the ctx value each came with.
type recorder struct {
	mu    sync.Mutex
	infos []OpInfo
	tags  []any
}

func (r *recorder) observe(ctx context.Context, info OpInfo) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.infos = append(r.infos, info)
	r.tags = append(r.tags, ctx.Value(ctxKey{}))
}

// The Observer sees every operation once, after it returned, with the
// caller's ctx, the operation's name, this rank's payload bytes, its timing
// and its error.
func TestObserverSeesEveryOperation(t *testing.T) {
	t.Parallel()
	const n = 3
	recs := make([]*recorder, n)
	lns, peers := listeners(t, n)
	comms := make([]*Comm, n)
	noErrors(t, "Connect", each(n, func(r int) error {
		recs[r] = &recorder{}
		var err error
		comms[r], err = Connect(context.Background(), lns[r], peers, Options{Rank: r, Size: n, Token: "obs", Observer: recs[r].observe})
		return err
	}))
	t.Cleanup(func() {
		for _, c := range comms {
			_ = c.Close()
		}
	})
	before := time.Now()
	noErrors(t, "operations", each(n, func(r int) error {
		ctx := context.WithValue(context.Background(), ctxKey{}, r)
		if err := comms[r].AllReduceFloat32(ctx, make([]float32, 1000), Sum); err != nil {
			return err
		}
		if err := comms[r].AllReduceFloat64(ctx, make([]float64, 10), Mean); err != nil {
			return err
		}
		if err := comms[r].Broadcast(ctx, make([]byte, 77), 1); err != nil {
			return err
		}
		if _, err := comms[r].AllGather(ctx, make([]byte, r+5)); err != nil {
			return err
		}
		return comms[r].Barrier(ctx)
	}))
	after := time.Now()
	for r, rec := range recs {
		want := []struct {
			op    string
			bytes int64
		}{{"allreduce", 4000}, {"allreduce", 80}, {"broadcast", 77}, {"allgather", int64(r + 5)}, {"barrier", 0}}
		if len(rec.infos) != len(want) {
			t.Fatalf("rank %d: %d observations, want %d: %+v", r, len(rec.infos), len(want), rec.infos)
		}
		prevEnd := before
		for i, w := range want {
			got := rec.infos[i]
			if got.Op != w.op || got.Bytes != w.bytes || got.Err != nil {
				t.Errorf("rank %d op %d: %+v, want %s of %d bytes without error", r, i, got, w.op, w.bytes)
			}
			if rec.tags[i] != r {
				t.Errorf("rank %d op %d: observed with ctx value %v, not the caller's ctx", r, i, rec.tags[i])
			}
			end := got.Start.Add(got.Duration)
			if got.Start.Before(prevEnd) || got.Duration <= 0 || end.After(after) {
				t.Errorf("rank %d op %d: start %v duration %v outside the call (previous end %v, calls done %v)", r, i, got.Start, got.Duration, prevEnd, after)
			}
			prevEnd = end
		}
	}

	// A failing operation is observed with its error: rank 1's context is
	// cancelled, the others learn from the cut connections.
	errs := each(n, func(r int) error {
		ctx, cancel := context.WithCancel(context.WithValue(context.Background(), ctxKey{}, r))
		defer cancel()
		if r == 1 {
			cancel()
		}
		return comms[r].AllReduceFloat32(ctx, make([]float32, 100), Sum)
	})
	for r, rec := range recs {
		if errs[r] == nil {
			t.Fatalf("rank %d: AllReduce succeeded with rank 1 cancelled", r)
		}
		last := rec.infos[len(rec.infos)-1]
		if len(rec.infos) != 6 || last.Op != "allreduce" || last.Bytes != 400 || !errors.Is(last.Err, errs[r]) || last.Err.Error() != errs[r].Error() {
			t.Errorf("rank %d: last of %d observations %+v, want allreduce of 400 bytes with error %v", r, len(rec.infos), last, errs[r])
		}
	}
	if !errors.Is(recs[1].infos[5].Err, context.Canceled) {
		t.Errorf("rank 1 observed %v, want context.Canceled", recs[1].infos[5].Err)
	}

	// A call the rank cannot make is observed too.
	_ = comms[0].Broadcast(context.Background(), make([]byte, 3), 9)
	if last := recs[0].infos[len(recs[0].infos)-1]; last.Op != "broadcast" || last.Bytes != 3 || last.Err == nil {
		t.Errorf("bad root: observed %+v, want a broadcast error", last)
	}
}

// A group of one observes its (local) operations as well.
func TestObserverGroupOfOne(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	comms := newGroup(t, 1, Options{Observer: rec.observe})
	ctx := context.WithValue(context.Background(), ctxKey{}, "solo")
	if err := comms[0].AllReduceFloat32(ctx, make([]float32, 8), Mean); err != nil {
		t.Fatal(err)
	}
	_ = comms[0].Close()
	err := comms[0].Barrier(ctx)
	if len(rec.infos) != 2 || rec.infos[0].Op != "allreduce" || rec.infos[0].Bytes != 32 || rec.infos[0].Err != nil ||
		rec.infos[1].Op != "barrier" || !errors.Is(rec.infos[1].Err, ErrClosed) || err == nil || rec.tags[1] != "solo" {
		t.Fatalf("observed %+v (tags %v), want an allreduce of 32 bytes and a barrier failing with ErrClosed", rec.infos, rec.tags)
	}
}
