package activities

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/collective"
	"github.com/tempotrain/tempotrain/train"
)

// bundleConfig drives act-bundle: Steps all-reduces of the rank's number,
// rank 0 reporting the sum after each; rank FailRank (when Fail) fails at
// step 1 instead.
type bundleConfig struct {
	Steps    int  `json:"steps"`
	Fail     bool `json:"fail"`
	FailRank int  `json:"fail_rank"`
	// Preempt: at step 1 every rank stops for a preemption, rank 0 after
	// reporting 300 ms later (as if its checkpoint took that long).
	Preempt bool `json:"preempt"`
}

func init() {
	train.MustRegister("act-bundle", func(ctx context.Context, tc *train.Context) error {
		var cfg bundleConfig
		if err := tc.Config(&cfg); err != nil {
			return err
		}
		for step := range cfg.Steps {
			tc.SetProgress(0, step)
			if cfg.Fail && step == 1 && tc.WorldRank() == cfg.FailRank {
				return errors.New("loss is NaN")
			}
			if cfg.Preempt && step == 1 {
				if tc.WorldRank() == 0 {
					select { // a checkpoint's upload, which a cancellation stops
					case <-time.After(300 * time.Millisecond):
					case <-ctx.Done():
						return ctx.Err()
					}
					if err := tc.Report(train.Metrics{"preempted_at": 1}, nil); err != nil {
						return err
					}
				}
				return fmt.Errorf("step 1: %w", train.ErrPreempted)
			}
			buf := []float64{float64(tc.WorldRank() + 1)}
			if err := tc.Comm().AllReduceFloat64(ctx, buf, collective.Sum); err != nil {
				return err
			}
			if tc.WorldRank() == 0 {
				if err := tc.Report(train.Metrics{"sum": buf[0], "local": float64(tc.LocalWorldSize())}, nil); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// runBundleActivity runs a bundle's RunRank in the SDK's activity test
// environment, handing the details of every heartbeat to beat.
func runBundleActivity(t *testing.T, a *Activities, in api.RunRankInput, beat func(first api.Progress, all []api.Progress)) (api.RankOutput, error) {
	t.Helper()
	env := rankEnv(a)
	a.recordHeartbeat = func(ctx context.Context, details ...any) {
		activity.RecordHeartbeat(ctx, details...)
		if in.Local <= 1 && len(details) == 1 {
			var p api.Progress
			if err := roundTrip(details[0], &p); err != nil {
				t.Errorf("heartbeat detail %#v: %v", details[0], err)
			}
			beat(p, []api.Progress{p})
			return
		}
		if len(details) != 2 {
			t.Errorf("a bundle's heartbeat has %d details, want 2 (its first rank's progress, then every rank's)", len(details))
			return
		}
		var first api.Progress
		var all []api.Progress
		if err := roundTrip(details[0], &first); err != nil {
			t.Errorf("heartbeat detail 0 %#v: %v", details[0], err)
		}
		if err := roundTrip(details[1], &all); err != nil {
			t.Errorf("heartbeat detail 1 %#v: %v", details[1], err)
		}
		beat(first, all)
	}
	return execRank(t, env, in)
}

// runBundles runs a world of world ranks as bundles of k, each bundle in
// its own Activities (a worker process each), and returns each bundle's
// output and error, and the ranks its heartbeats named.
func runBundles(t *testing.T, wf *fakeWorkflow, world, k int, config string) ([]api.RankOutput, []error, [][]int) {
	t.Helper()
	dir := t.TempDir()
	n := (world + k - 1) / k
	outs, errs, beats := make([]api.RankOutput, n), make([]error, n), make([][]int, n)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for b := range n {
		in := rankInput("act-bundle", dir, "bundle", b*k, world, config)
		in.Local, in.Activities = min(k, world-b*k), n
		wg.Add(1)
		go func() {
			defer wg.Done()
			a := newTestActivities(t, wf)
			a.o.Node = fmt.Sprintf("node%d", b)
			outs[b], errs[b] = runBundleActivity(t, a, in, func(first api.Progress, all []api.Progress) {
				mu.Lock()
				defer mu.Unlock()
				if len(all) == 0 || first != all[0] {
					t.Errorf("bundle %d: first detail %+v is not the first rank's of %+v", b, first, all)
				}
				var slots []int
				for _, p := range all {
					slots = append(slots, p.Slot)
				}
				if beats[b] == nil {
					beats[b] = slots
				} else if !slices.Equal(beats[b], slots) {
					t.Errorf("bundle %d: heartbeat ranks %v, then %v", b, beats[b], slots)
				}
			})
		}()
	}
	wg.Wait()
	return outs, errs, beats
}

// A world of 5 ranks in bundles of 2 (2, 2, 1 ranks: the last is a single
// rank's activity): every rank trains, over real links, with the ranks of
// its bundle in one process (a node of its own here); one heartbeat per
// bundle names each of its ranks.
func TestBundleRunsItsRanks(t *testing.T) {
	t.Parallel()
	wf := newFakeWorkflow(1, 5)
	outs, errs, beats := runBundles(t, wf, 5, 2, `{"steps":3}`)
	for b, err := range errs {
		if err != nil {
			t.Fatalf("bundle %d: %v", b, err)
		}
	}
	if outs[0].Rank != 0 || outs[0].Reports != 3 || outs[1].Rank != 2 || outs[1].Reports != 0 {
		t.Errorf("outputs %+v: want bundle 0 (ranks 0-1) with rank 0's 3 reports, bundle 1 from rank 2 with none", outs)
	}
	if !slices.Equal(beats[0], []int{0, 1}) || !slices.Equal(beats[1], []int{2, 3}) || !slices.Equal(beats[2], []int{4}) {
		t.Errorf("heartbeats named ranks %v, want [0 1], [2 3] and [4]", beats)
	}
	reps := wf.received()
	if len(reps) != 3 {
		t.Fatalf("%d reports, want 3", len(reps))
	}
	for _, r := range reps {
		if r.Metrics["sum"] != 15 {
			t.Errorf("report %v: the all-reduce of 1..5 is 15", r.Metrics)
		}
		if r.Metrics["local"] != 2 {
			t.Errorf("report %v: rank 0 shares its node with rank 1 (local world size 2)", r.Metrics)
		}
	}
}

// A rank that fails fails its bundle with its own error, named in the
// error's first detail; the bundle's other rank, and the other bundle's
// ranks, end too (peer lost, or cancelled by their bundle).
func TestBundleFailureNamesTheRank(t *testing.T) {
	t.Parallel()
	wf := newFakeWorkflow(1, 4)
	_, errs, _ := runBundles(t, wf, 4, 2, `{"steps":5,"fail":true,"fail_rank":3}`)
	var app *temporal.ApplicationError
	if !errors.As(errs[1], &app) {
		t.Fatalf("bundle 1 (ranks 2-3): error %v, want rank 3's application error", errs[1])
	}
	var bf api.BundleFailure
	if app.Message() != "loss is NaN" || api.ErrorKind(app.Type()) != api.ErrUser || app.NonRetryable() {
		t.Errorf("bundle 1: %q of type %s (non-retryable %v), want rank 3's retryable user error", app.Message(), app.Type(), app.NonRetryable())
	}
	if err := app.Details(&bf); err != nil || bf != (api.BundleFailure{Rank: 3, Local: 2}) {
		t.Errorf("bundle 1's first detail %+v (%v), want rank 3 of a bundle of 2", bf, err)
	}
	if errs[0] == nil {
		t.Fatal("bundle 0 (ranks 0-1) succeeded without rank 3")
	}
	if !errors.As(errs[0], &app) || api.ErrorKind(app.Type()) != api.ErrPeerLost {
		t.Errorf("bundle 0: %v, want a lost peer", errs[0])
	} else if err := app.Details(&bf); err != nil || (bf.Rank != 0 && bf.Rank != 1) || bf.Local != 2 {
		t.Errorf("bundle 0's first detail %+v (%v), want rank 0 or 1 of a bundle of 2", bf, err)
	}
}

// bundleError keeps what the workflow reads of a rank's error: message,
// type, retryability and its detail after the rank's name; a cancellation
// goes as it is.
func TestBundleErrorKeepsTheRanksError(t *testing.T) {
	stall := api.Stall{Peer: 2, Op: "allreduce", Seq: 9}
	err := bundleError(5, 4, temporal.NewNonRetryableApplicationError("stuck", api.ErrUser.String(), nil, stall))
	var app *temporal.ApplicationError
	if !errors.As(err, &app) || app.Message() != "stuck" || app.Type() != api.ErrUser.String() || !app.NonRetryable() {
		t.Fatalf("bundleError: %v", err)
	}
	var bf api.BundleFailure
	var st api.Stall
	if err := app.Details(&bf, &st); err != nil || bf != (api.BundleFailure{Rank: 5, Local: 4}) || st != stall {
		t.Errorf("details %+v %+v (%v)", bf, st, err)
	}
	plain := bundleError(1, 2, fmt.Errorf("scratch dir: %w", errors.New("disk full")))
	if !errors.As(plain, &app) || app.Message() != "scratch dir: disk full" || app.NonRetryable() {
		t.Errorf("plain error: %v", plain)
	}
	canceled := temporal.NewCanceledError(api.Progress{Rank: 3})
	if got := bundleError(3, 2, canceled); got != error(canceled) {
		t.Errorf("a cancellation became %v", got)
	}
}

// A bundle whose ranks together ask for more than its worker has fails at
// once, saying so, instead of leaving some of its ranks waiting for
// resources that never come.
func TestBundleThatDoesNotFitFails(t *testing.T) {
	t.Parallel()
	a := New(Options{ScratchDir: t.TempDir(), HeartbeatInterval: 5 * time.Millisecond, Logger: quiet, CPUs: 8, Devices: []int{0, 1, 2}})
	a.wf = newFakeWorkflow(1, 4)
	in := rankInput("act-bundle", t.TempDir(), "fit", 0, 4, `{"steps":1}`)
	in.Local, in.Activities, in.UseGPU = 4, 1, true
	_, err := runBundleActivity(t, a, in, func(api.Progress, []api.Progress) {})
	var app *temporal.ApplicationError
	if !errors.As(err, &app) || !app.NonRetryable() || !strings.Contains(app.Message(), "took a bundle of 4 ranks that ask for {GPU: 1} each") {
		t.Fatalf("error %v, want a non-retryable one naming the bundle's 4 ranks of a GPU each", err)
	}
}

// A rank that stops for a preemption cancels none of its bundle: rank 0,
// still finishing its report at the agreed step, gets it out, and the
// bundle ends preempted.
func TestBundlePreemptionLetsRankZeroFinish(t *testing.T) {
	t.Parallel()
	wf := newFakeWorkflow(1, 2)
	_, errs, _ := runBundles(t, wf, 2, 2, `{"steps":3,"preempt":true}`)
	var app *temporal.ApplicationError
	if !errors.As(errs[0], &app) || api.ErrorKind(app.Type()) != api.ErrPreempted {
		t.Fatalf("bundle error %v, want a preemption", errs[0])
	}
	var last api.ReportRequest
	if reps := wf.received(); len(reps) > 0 {
		last = reps[len(reps)-1]
	}
	if last.Metrics["preempted_at"] != 1 {
		t.Errorf("rank 0's report at the preemption never arrived (last %v): its bundle cancelled it", last.Metrics)
	}
}
