package workflows

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/testsuite"

	"github.com/tempotrain/tempotrain/api"
)

// TestRegisterBatch: the register-batch Update records the registrations of
// one worker process as the register Update records one: a stale attempt,
// mixed attempts or a batch none of whose registrations would be recorded
// is rejected whole; otherwise each bad registration is refused alone, in
// the result, and the others count.
func TestRegisterBatch(t *testing.T) {
	h := newHarness(t, nil, func(api.RunRankInput) error { return nil })
	const n = 8
	req := func(attempt, rank int, addr string) api.RegisterRequest {
		return api.RegisterRequest{Attempt: attempt, Rank: rank, Addr: addr, Node: "n0"}
	}
	addr := func(rank int) string { return fmt.Sprintf("10.0.0.%d:7000", rank) }
	// batch sends reqs; want is the rejection's text ("" for accepted), and
	// check sees the result of an accepted batch.
	batch := func(id string, reqs []api.RegisterRequest, want string, check func(api.RegisterBatchResponse)) {
		h.env.UpdateWorkflow(api.UpdateRegisterBatch, id, expectUpdate(t, "batch "+id, want, func(v any) {
			if check != nil {
				check(v.(api.RegisterBatchResponse))
			}
		}), reqs)
	}
	h.env.RegisterDelayedCallback(func() {
		batch("stale", []api.RegisterRequest{req(0, 1, addr(1))}, "attempt 0 is not running", nil)
		batch("mixed", []api.RegisterRequest{req(1, 1, addr(1)), req(2, 2, addr(2))}, "rank 2 for attempt 2", nil)
		batch("empty", nil, "no registrations", nil)
		batch("all-bad", []api.RegisterRequest{req(1, n, addr(n)), req(1, 1, "")},
			"rank 8 out of range [0, 8)", nil)
		// Ranks 0-3, rank 3 twice at two addresses, rank 9 out of range
		// and rank 5 without an address: ranks 0-3 count.
		batch("p0", []api.RegisterRequest{req(1, 0, addr(0)), req(1, 1, addr(1)), req(1, 9, addr(9)), req(1, 2, addr(2)),
			req(1, 3, addr(3)), req(1, 3, "10.9.9.9:1"), req(1, 5, "")}, "", func(res api.RegisterBatchResponse) {
			if rv := res.Rendezvous; rv.State != api.RendezvousWaiting || rv.Registered != 4 || rv.WorldSize != n {
				t.Errorf("after the first batch: %+v, want 4 of %d registered", rv, n)
			}
			got := fmt.Sprint(res.Refused)
			for _, want := range []string{"{9 register: rank 9 out of range", "{3 register: rank 3 of attempt 1 already registered at 10.0.0.3:7000 (now 10.9.9.9:1)", "{5 register: rank 5: empty address"} {
				if !strings.Contains(got, want) {
					t.Errorf("refused %s, want %q in it", got, want)
				}
			}
			if len(res.Refused) != 3 {
				t.Errorf("%d refused, want 3", len(res.Refused))
			}
		})
	}, time.Second)
	h.env.RegisterDelayedCallback(func() {
		// The other process's ranks, and ranks 0 and 1 again (a batch
		// retried as another: idempotent), complete the group.
		batch("p1", []api.RegisterRequest{req(1, 0, addr(0)), req(1, 1, addr(1)), req(1, 4, addr(4)), req(1, 5, addr(5)),
			req(1, 6, addr(6)), req(1, 7, addr(7))}, "", func(res api.RegisterBatchResponse) {
			rv := res.Rendezvous
			if rv.State != api.RendezvousReady || len(rv.Peers) != n || rv.Peers[6].Addr != addr(6) || len(res.Refused) != 0 {
				t.Errorf("after the second batch: %+v, want the group ready", res)
			}
		})
		// The single register Update still counts with the batches.
		h.env.UpdateWorkflow(api.UpdateRegister, "single", &testsuite.TestUpdateCallback{
			OnReject: func(err error) { t.Errorf("single register rejected: %v", err) },
			OnAccept: func() {},
			OnComplete: func(v any, err error) {
				if rv, _ := v.(api.Rendezvous); err != nil || rv.State != api.RendezvousReady {
					t.Errorf("single register after the batches: %+v, %v", v, err)
				}
			},
		}, req(1, 7, addr(7)))
	}, 2*time.Second)
	h.env.ExecuteWorkflow(api.WorkflowType, input(n, 0))
	if err := h.env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
}

// TestRegisterBatchElastic: in an elastic attempt a batch's slots are
// candidates until the group forms (here at the last call, with the two
// slots of the first batch) and standbys after: the second batch's
// registrations are recorded, not refused, and its answer is the group
// without them.
func TestRegisterBatchElastic(t *testing.T) {
	// The group's slots end (and the run succeeds) at a minute, before
	// the standbys' activities, which the end of the run cancels: a
	// standby that ended first would fail the attempt.
	h := newHarness(t, nil, func(api.RunRankInput) error { return nil },
		early{attempt: 1, rank: 0, after: time.Minute}, early{attempt: 1, rank: 1, after: time.Minute})
	in := input(0, 0)
	in.Scaling = api.ScalingConfig{MinWorkers: 2, MaxWorkers: 4, LastCall: api.Duration(5 * time.Second)}
	batch := func(id string, slots []int, check func(api.RegisterBatchResponse)) {
		var reqs []api.RegisterRequest
		for _, s := range slots {
			reqs = append(reqs, api.RegisterRequest{Attempt: 1, Rank: s, Addr: fmt.Sprintf("10.0.0.%d:7000", s), Node: "n"})
		}
		h.env.UpdateWorkflow(api.UpdateRegisterBatch, id, &testsuite.TestUpdateCallback{
			OnReject: func(err error) { t.Errorf("batch %s rejected: %v", id, err) },
			OnAccept: func() {},
			OnComplete: func(v any, err error) {
				if err != nil {
					t.Errorf("batch %s: %v", id, err)
					return
				}
				check(v.(api.RegisterBatchResponse))
			},
		}, reqs)
	}
	checked := 0
	h.env.RegisterDelayedCallback(func() {
		batch("p0", []int{0, 1}, func(res api.RegisterBatchResponse) {
			checked++
			if rv := res.Rendezvous; rv.State != api.RendezvousWaiting || rv.Registered != 2 || len(res.Refused) != 0 {
				t.Errorf("first batch: %+v, want 2 registered, waiting for the last call", res)
			}
		})
	}, time.Second)
	h.env.RegisterDelayedCallback(func() {
		batch("p1", []int{2, 3}, func(res api.RegisterBatchResponse) {
			checked++
			rv := res.Rendezvous
			if rv.State != api.RendezvousReady || fmt.Sprint(rv.Slots) != "[0 1]" || len(rv.Peers) != 2 || len(res.Refused) != 0 {
				t.Errorf("second batch after the group formed: %+v, want the group of slots [0 1], nothing refused", res)
			}
		})
	}, 20*time.Second)
	h.env.RegisterDelayedCallback(func() {
		v, err := h.env.QueryWorkflow(api.QueryStatus)
		if err != nil {
			t.Fatal(err)
		}
		var st api.Status
		_ = v.Get(&st)
		if st.Standbys != 2 || st.WorldSize != 2 {
			t.Errorf("status: %d standbys, world size %d; want 2 standbys (the second batch's slots), world size 2", st.Standbys, st.WorldSize)
		}
	}, 30*time.Second)
	h.env.ExecuteWorkflow(api.WorkflowType, in)
	if err := h.env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	if checked != 2 {
		t.Errorf("%d batches answered, want 2", checked)
	}
}
