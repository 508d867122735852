package activities

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/collective"
	"github.com/tempotrain/tempotrain/storage"
	"github.com/tempotrain/tempotrain/train"
)

// The training functions of these tests take their behaviour from the
// run's config.
type testConfig struct {
	// Gate names a channel (gates) the function waits on after
	// SetProgress(3, 7), and again after its first report.
	Gate string `json:"gate"`
	// Reports is how many reports to make; every other one (the even ones)
	// carries a checkpoint.
	Reports int `json:"reports"`
	// Fail: "error", "nonretryable", "panic" or "peer".
	Fail string `json:"fail"`
}

var (
	gatesMu sync.Mutex
	gates   = map[string]chan struct{}{}
	// restored records what each test's ranks found in tc.Checkpoint(),
	// by run name and rank.
	restoredMu sync.Mutex
	restored   = map[string]*api.Checkpoint{}
)

func gate(name string) chan struct{} {
	gatesMu.Lock()
	defer gatesMu.Unlock()
	if gates[name] == nil {
		gates[name] = make(chan struct{})
	}
	return gates[name]
}

func waitGate(ctx context.Context, name string) error {
	select {
	case <-gate(name):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(20 * time.Second):
		return fmt.Errorf("gate %s never opened", name)
	}
}

func init() {
	train.MustRegister("act-progress", func(ctx context.Context, tc *train.Context) error {
		var cfg testConfig
		if err := tc.Config(&cfg); err != nil {
			return err
		}
		tc.SetProgress(3, 7)
		if err := waitGate(ctx, cfg.Gate+"/progress"); err != nil {
			return err
		}
		dir, err := tc.NewCheckpointDir()
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, "state"), []byte("3"), 0o644); err != nil {
			return err
		}
		if err := tc.Report(train.Metrics{"epoch": 3}, train.NewCheckpoint(dir)); err != nil {
			return err
		}
		return waitGate(ctx, cfg.Gate+"/reported")
	})
	train.MustRegister("act-report", func(ctx context.Context, tc *train.Context) error {
		var cfg testConfig
		if err := tc.Config(&cfg); err != nil {
			return err
		}
		for i := 0; i < cfg.Reports; i++ {
			tc.SetProgress(i, 0)
			var ck *train.Checkpoint
			if i%2 == 0 {
				dir, err := tc.NewCheckpointDir()
				if err != nil {
					return err
				}
				if err := os.WriteFile(filepath.Join(dir, "state"), []byte(strconv.Itoa(i)), 0o644); err != nil {
					return err
				}
				ck = train.NewCheckpoint(dir)
				ck.Meta = map[string]string{"report": strconv.Itoa(i)}
			}
			if err := tc.Report(train.Metrics{"report": float64(i)}, ck); err != nil {
				return err
			}
		}
		return nil
	})
	train.MustRegister("act-restore", func(ctx context.Context, tc *train.Context) error {
		var cfg testConfig
		if err := tc.Config(&cfg); err != nil {
			return err
		}
		// Stay until a heartbeat of the training phase has been seen.
		if err := waitGate(ctx, fmt.Sprintf("%s/%d", cfg.Gate, tc.WorldRank())); err != nil {
			return err
		}
		restoredMu.Lock()
		defer restoredMu.Unlock()
		key := fmt.Sprintf("%s/%d", tc.RunName(), tc.WorldRank())
		ck := tc.Checkpoint()
		if ck == nil {
			restored[key] = nil
			return nil
		}
		state, err := ck.ReadFile("state")
		if err != nil {
			return err
		}
		c := *ck
		c.Meta = map[string]string{"state": string(state)}
		restored[key] = &c
		return nil
	})
	train.MustRegister("act-fail", func(ctx context.Context, tc *train.Context) error {
		var cfg testConfig
		if err := tc.Config(&cfg); err != nil {
			return err
		}
		switch cfg.Fail {
		case "nonretryable":
			return train.NonRetryable(errors.New("bad lr 7"))
		case "panic":
			panic("boom")
		case "peer":
			return fmt.Errorf("epoch 2: %w", collective.ErrPeerGone)
		}
		return errors.New("loss is NaN")
	})
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func newTestActivities(t *testing.T, wf *fakeWorkflow) *Activities {
	t.Helper()
	a := New(Options{ScratchDir: t.TempDir(), HeartbeatInterval: 5 * time.Millisecond, Logger: quiet})
	a.wf = wf
	return a
}

func rankInput(fn, storagePath, runName string, rank, world int, config string) api.RunRankInput {
	return api.RunRankInput{
		RunName: runName, StoragePath: storagePath, TrainFunc: fn, Config: []byte(config),
		Attempt: 1, Rank: rank, WorldSize: world, Token: "token", NextSeq: 1,
		CollectiveTimeout: api.Duration(30 * time.Second), StartTimeout: api.Duration(30 * time.Second),
	}
}

// runRank runs RunRank in the SDK's activity test environment, handing
// every heartbeat's progress to beat (when not nil).
func runRank(t *testing.T, a *Activities, in api.RunRankInput, beat func(api.Progress)) (api.RankOutput, error) {
	t.Helper()
	env := rankEnv(a)
	// The environment delivers the first heartbeat and then one per 30 s
	// (its throttle); the details of every heartbeat are seen as the rank
	// records them, and must decode as the Web UI and the starter decode
	// them.
	var sdkBeats atomic.Int64
	env.SetOnActivityHeartbeatListener(func(_ *activity.Info, d converter.EncodedValues) {
		var p api.Progress
		if err := d.Get(&p); err != nil {
			t.Errorf("heartbeat details: %v", err)
		}
		sdkBeats.Add(1)
	})
	a.recordHeartbeat = func(ctx context.Context, details ...any) {
		activity.RecordHeartbeat(ctx, details...)
		if len(details) != 1 {
			t.Errorf("heartbeat with %d details, want 1", len(details))
			return
		}
		var p api.Progress
		if err := roundTrip(details[0], &p); err != nil {
			t.Errorf("heartbeat details %#v: %v", details[0], err)
			return
		}
		if beat != nil {
			beat(p)
		}
	}
	defer func() {
		if beat != nil && sdkBeats.Load() == 0 {
			t.Error("no heartbeat reached the SDK")
		}
	}()
	return execRank(t, env, in)
}

// rankEnv is the SDK's activity test environment with a's RunRank.
func rankEnv(a *Activities) *testsuite.TestActivityEnvironment {
	var s testsuite.WorkflowTestSuite
	s.SetLogger(log.NewStructuredLogger(quiet))
	env := s.NewTestActivityEnvironment()
	env.RegisterActivityWithOptions(a.RunRank, activity.RegisterOptions{Name: api.ActivityRunRank})
	return env
}

// execRank runs RunRank with in in env.
func execRank(t *testing.T, env *testsuite.TestActivityEnvironment, in api.RunRankInput) (api.RankOutput, error) {
	t.Helper()
	var out api.RankOutput
	v, err := env.ExecuteActivity(api.ActivityRunRank, in)
	if err != nil {
		return out, err
	}
	if err := v.Get(&out); err != nil {
		t.Fatal(err)
	}
	return out, nil
}

// runGroup runs world ranks of one attempt at once, each in its own test
// environment and with its own Activities (a worker process each), over
// real loopback connections.
func runGroup(t *testing.T, wf *fakeWorkflow, world int, in func(rank int) api.RunRankInput) ([]api.RankOutput, []error) {
	t.Helper()
	outs := make([]api.RankOutput, world)
	errs := make([]error, world)
	var wg sync.WaitGroup
	for r := 0; r < world; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			outs[r], errs[r] = runRank(t, newTestActivities(t, wf), in(r), nil)
		}()
	}
	wg.Wait()
	return outs, errs
}

func TestRankHeartbeatCarriesPhaseProgressAndCheckpoint(t *testing.T) {
	t.Parallel()
	wf := newFakeWorkflow(1, 1)
	wf.hold = make(chan struct{})
	a := newTestActivities(t, wf)
	name := t.Name()
	var (
		mu     sync.Mutex
		phases []api.Phase
		opened = map[string]bool{}
	)
	open := func(g string) {
		if !opened[g] {
			opened[g] = true
			if g == "rendezvous" {
				close(wf.hold) // the group completes once that was seen
			} else {
				close(gate(name + "/" + g))
			}
		}
	}
	beat := func(p api.Progress) {
		mu.Lock()
		defer mu.Unlock()
		if len(phases) == 0 || phases[len(phases)-1] != p.Phase {
			phases = append(phases, p.Phase)
		}
		if p.Phase == api.PhaseRendezvous && p.Epoch == -1 && p.Step == -1 {
			open("rendezvous")
		}
		if p.Phase == api.PhaseTrain && p.Epoch == 3 && p.Step == 7 && p.Reports == 0 {
			open("progress")
		}
		if p.Reports == 1 && p.Checkpoint == 1 && p.Epoch == 3 {
			open("reported")
		}
	}
	out, err := runRank(t, a, rankInput("act-progress", t.TempDir(), "hb", 0, 1, fmt.Sprintf(`{"gate":%q}`, name)), beat)
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !opened["progress"] || !opened["reported"] {
		t.Fatalf("heartbeats never carried the progress (opened %v)", opened)
	}
	if phases[0] != api.PhaseRendezvous || phases[len(phases)-1] != api.PhaseTrain {
		t.Errorf("phases seen in heartbeats %v, want rendezvous first and train last", phases)
	}
	if out.Reports != 1 || out.Rank != 0 {
		t.Errorf("output %+v", out)
	}
}

// checkCommitted is the report queue's promise: the workflow hears of a
// checkpoint only once it is committed in storage.
func checkCommitted(t *testing.T, req api.ReportRequest) {
	if req.Checkpoint == nil {
		return
	}
	sc, err := storage.OpenCheckpoint(context.Background(), req.Checkpoint.URI)
	if err != nil {
		t.Errorf("report of checkpoint %d reached the workflow before its commit: %v", req.Checkpoint.Seq, err)
		return
	}
	if sc.Manifest.Seq != req.Checkpoint.Seq || sc.Manifest.Bytes != req.Checkpoint.Bytes || req.Checkpoint.Bytes == 0 {
		t.Errorf("report says %+v, manifest says seq %d bytes %d", req.Checkpoint, sc.Manifest.Seq, sc.Manifest.Bytes)
	}
}

func TestRankReportsInOrderAfterTheirCommits(t *testing.T) {
	t.Parallel()
	for _, async := range []bool{false, true} {
		t.Run(fmt.Sprintf("async=%v", async), func(t *testing.T) {
			t.Parallel()
			wf := newFakeWorkflow(1, 1)
			wf.refuse = 2 // the first Updates are refused for a moment, and retried
			wf.onReport = func(req api.ReportRequest) { checkCommitted(t, req) }
			a := newTestActivities(t, wf)
			dir := t.TempDir()
			in := rankInput("act-report", dir, "rq", 0, 1, `{"reports":5}`)
			in.NextSeq = 7 // a resumed run numbers on
			in.AsyncUpload = async
			out, err := runRank(t, a, in, nil)
			if err != nil {
				t.Fatal(err)
			}
			got := wf.received()
			if out.Reports != 5 || len(got) != 5 {
				t.Fatalf("rank made %d reports, workflow received %d; want 5", out.Reports, len(got))
			}
			wantSeq := 7
			for i, req := range got {
				if req.Metrics["report"] != float64(i) || req.Attempt != 1 || req.Rank != 0 {
					t.Errorf("report %d: %+v, out of order or mislabelled", i, req)
				}
				if (i%2 == 0) != (req.Checkpoint != nil) {
					t.Errorf("report %d: checkpoint %v", i, req.Checkpoint)
					continue
				}
				if c := req.Checkpoint; c != nil {
					if c.Seq != wantSeq || c.Meta["report"] != strconv.Itoa(i) || c.Time.IsZero() || c.Dir != "" {
						t.Errorf("report %d: checkpoint %+v, want seq %d with its meta and commit time", i, c, wantSeq)
					}
					wantSeq++
				}
			}
			// The checkpoints are in storage with the bytes written.
			for seq := 7; seq < wantSeq; seq++ {
				b, err := os.ReadFile(filepath.Join(dir, "rq", storage.CheckpointDir(seq), "state"))
				if err != nil || string(b) != strconv.Itoa(2*(seq-7)) {
					t.Errorf("checkpoint %d state %q, %v", seq, b, err)
				}
			}
			// The rank's scratch directory is gone.
			if left, _ := os.ReadDir(a.o.ScratchDir); len(left) != 0 {
				t.Errorf("scratch dir holds %d entries after the rank ended", len(left))
			}
		})
	}
}

func TestOnlyRankZeroReports(t *testing.T) {
	t.Parallel()
	wf := newFakeWorkflow(1, 2)
	dir := t.TempDir()
	outs, errs := runGroup(t, wf, 2, func(r int) api.RunRankInput {
		return rankInput("act-report", dir, "two", r, 2, `{"reports":3}`)
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	got := wf.received()
	if len(got) != 3 || outs[0].Reports != 3 || outs[1].Reports != 3 {
		t.Fatalf("workflow received %d reports (rank outputs %+v), want rank 0's 3", len(got), outs)
	}
	for _, req := range got {
		if req.Rank != 0 {
			t.Errorf("report from rank %d", req.Rank)
		}
	}
}

// commitCheckpoints commits checkpoints 1..n of a run whose "state" file
// holds its seq.
func commitCheckpoints(t *testing.T, dir, runName string, n int) {
	t.Helper()
	b, err := storage.Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	run := storage.NewRun(b, runName)
	for seq := 1; seq <= n; seq++ {
		src := t.TempDir()
		if err := os.WriteFile(filepath.Join(src, "state"), []byte(strconv.Itoa(seq)), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := run.CommitCheckpoint(context.Background(), seq, src, storage.Manifest{Seq: seq, Attempt: 1}); err != nil {
			t.Fatal(err)
		}
	}
}

func candidates(dir, runName string, seqs ...int) []api.Checkpoint {
	var out []api.Checkpoint
	for _, s := range seqs {
		out = append(out, api.Checkpoint{Seq: s, URI: filepath.Join(dir, runName, storage.CheckpointDir(s))})
	}
	return out
}

// A rank skips checkpoints that do not verify: the candidates the workflow
// gave (3, 2, 1 of 5 here), then older ones storage lists; when none
// verifies the run fails non-retryably unless allow_fresh_start. Rank 0
// tells the workflow what it restored and skipped.
func TestRankRestoreSkipsUnusableCheckpoints(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name    string
		damage  func(t *testing.T, ckptDir func(seq int) string)
		fresh   bool // allow_fresh_start
		want    int  // seq restored, 0 for none
		wantRaw string
		skipped int
		wantErr string
		// unusable: run.json's known-bad seqs given to the ranks;
		// wantUnusable: the seqs the restored Update says did not verify.
		unusable, wantUnusable []int
	}{
		{name: "newest verifies", damage: func(*testing.T, func(int) string) {}, want: 5, wantRaw: "5"},
		{name: "bit flip in the newest", damage: func(t *testing.T, d func(int) string) { flipByte(t, filepath.Join(d(5), "state")) },
			want: 4, wantRaw: "4", skipped: 1, wantUnusable: []int{5}},
		{name: "bit flip, then no manifest", damage: func(t *testing.T, d func(int) string) {
			flipByte(t, filepath.Join(d(5), "state"))
			if err := os.Remove(filepath.Join(d(4), storage.ManifestFile)); err != nil {
				t.Fatal(err)
			}
		}, want: 3, wantRaw: "3", skipped: 2, wantUnusable: []int{5, 4}},
		{name: "older than the candidates", damage: func(t *testing.T, d func(int) string) {
			for seq := 3; seq <= 5; seq++ {
				flipByte(t, filepath.Join(d(seq), "state"))
			}
		}, want: 2, wantRaw: "2", skipped: 3, wantUnusable: []int{5, 4, 3}},
		// 2 verifies, but an earlier attempt found it bad (run.json): it
		// is not downloaded again, and 1 is restored.
		{name: "older known unusable", damage: func(t *testing.T, d func(int) string) {
			for seq := 3; seq <= 5; seq++ {
				flipByte(t, filepath.Join(d(seq), "state"))
			}
		}, unusable: []int{2}, want: 1, wantRaw: "1", skipped: 3, wantUnusable: []int{5, 4, 3}},
		// 5 verifies, but an earlier attempt found it bad: skipped, named,
		// not downloaded, and not reported again.
		{name: "candidate known unusable", damage: func(*testing.T, func(int) string) {},
			unusable: []int{5}, want: 4, wantRaw: "4", skipped: 1},
		{name: "none usable", damage: func(t *testing.T, d func(int) string) {
			for seq := 1; seq <= 5; seq++ {
				flipByte(t, filepath.Join(d(seq), "state"))
			}
		}, wantErr: "no checkpoint of run none-usable verifies"},
		{name: "none usable, fresh start allowed", damage: func(t *testing.T, d func(int) string) {
			for seq := 1; seq <= 5; seq++ {
				flipByte(t, filepath.Join(d(seq), "state"))
			}
		}, fresh: true, skipped: 5, wantUnusable: []int{5, 4, 3, 2, 1}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			// Subtests run at once: each its own run name in restored.
			runName := strings.ReplaceAll(strings.ReplaceAll(tt.name, " ", "-"), ",", "")
			commitCheckpoints(t, dir, runName, 5)
			tt.damage(t, func(seq int) string { return filepath.Join(dir, runName, storage.CheckpointDir(seq)) })
			wf := newFakeWorkflow(2, 2)
			var mu sync.Mutex
			beats := map[int]int{} // highest Checkpoint in each rank's heartbeats
			errs := make([]error, 2)
			var wg sync.WaitGroup
			for r := 0; r < 2; r++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					g := t.Name()
					in := rankInput("act-restore", dir, runName, r, 2, fmt.Sprintf(`{"gate":%q}`, g))
					in.Attempt = 2
					in.Checkpoints = candidates(dir, runName, 5, 4, 3)
					in.AllowFreshStart = tt.fresh
					in.Unusable = tt.unusable
					var once sync.Once
					// One Activities per rank, as one worker process each.
					_, errs[r] = runRank(t, newTestActivities(t, wf), in, func(p api.Progress) {
						mu.Lock()
						defer mu.Unlock()
						beats[r] = max(beats[r], p.Checkpoint)
						if p.Phase == api.PhaseTrain {
							once.Do(func() { close(gate(fmt.Sprintf("%s/%d", g, r))) })
						}
					})
				}()
			}
			wg.Wait()
			if tt.wantErr != "" {
				for r, err := range errs {
					var app *temporal.ApplicationError
					if !errors.As(err, &app) || !app.NonRetryable() || app.Type() != api.ErrNoCheckpoint.String() || !strings.Contains(err.Error(), tt.wantErr) {
						t.Errorf("rank %d: %v, want a non-retryable %s error saying %q", r, err, api.ErrNoCheckpoint, tt.wantErr)
					}
				}
				return
			}
			for _, err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}
			restoredMu.Lock()
			defer restoredMu.Unlock()
			for r := 0; r < 2; r++ {
				got := restored[fmt.Sprintf("%s/%d", runName, r)]
				switch {
				case tt.want == 0 && got != nil:
					t.Errorf("rank %d restored %+v, want a fresh start", r, got)
				case tt.want != 0 && (got == nil || got.Seq != tt.want || got.Meta["state"] != tt.wantRaw || got.Dir == ""):
					t.Errorf("rank %d restored %+v, want checkpoint %d holding %q", r, got, tt.want, tt.wantRaw)
				}
				if beats[r] != tt.want {
					t.Errorf("rank %d heartbeats said checkpoint %d, want %d", r, beats[r], tt.want)
				}
			}
			wf.mu.Lock()
			defer wf.mu.Unlock()
			if len(wf.restoreds) != 1 || wf.restoreds[0].Seq != tt.want || len(wf.restoreds[0].Skipped) != tt.skipped ||
				!slices.Equal(wf.restoreds[0].Unusable, tt.wantUnusable) {
				t.Errorf("the workflow was told %+v, want one restored Update: checkpoint %d, %d skipped, unusable %v", wf.restoreds, tt.want, tt.skipped, tt.wantUnusable)
			}
		})
	}
}

// TestRankRestoreAgreement: ranks that restored different checkpoints (here
// given different candidates, as ranks could see storage differently) must
// not train on: each fails, naming both checkpoints, before the function runs.
func TestRankRestoreAgreement(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const runName = "disagree"
	commitCheckpoints(t, dir, runName, 5)
	wf := newFakeWorkflow(2, 2)
	errs := make([]error, 2)
	var trained [2]atomic.Bool
	var wg sync.WaitGroup
	for r := 0; r < 2; r++ {
		wg.Go(func() {
			in := rankInput("act-restore", dir, runName, r, 2, fmt.Sprintf(`{"gate":%q}`, t.Name()))
			in.Attempt = 2
			in.Checkpoints = candidates(dir, runName, 5-r) // rank 0: 5, rank 1: 4
			_, errs[r] = runRank(t, newTestActivities(t, wf), in, func(p api.Progress) {
				if p.Phase == api.PhaseTrain {
					trained[r].Store(true)
				}
			})
		})
	}
	wg.Wait()
	for r, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "restored checkpoint") {
			t.Errorf("rank %d: %v, want an error saying the ranks restored different checkpoints", r, err)
		}
		if trained[r].Load() {
			t.Errorf("rank %d reached the training phase on a checkpoint its group did not share", r)
		}
	}
	if err := errs[0]; err != nil && !strings.Contains(err.Error(), "restored checkpoint 5 but rank 1 restored 4") {
		t.Errorf("rank 0: %v, want it to name both checkpoints", err)
	}
}

func flipByte(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x01
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestRankErrorKinds(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name         string
		in           func(dir string) api.RunRankInput
		stale        bool
		kind         api.ErrorKind
		nonRetryable bool
		message      string // exact, or a prefix for a panic
	}{
		{"error", func(d string) api.RunRankInput { return rankInput("act-fail", d, "f", 0, 1, `{"fail":"error"}`) },
			false, api.ErrUser, false, "loss is NaN"},
		{"nonretryable", func(d string) api.RunRankInput {
			return rankInput("act-fail", d, "f", 0, 1, `{"fail":"nonretryable"}`)
		}, false, api.ErrUserNonRetryable, true, "bad lr 7"},
		{"panic", func(d string) api.RunRankInput { return rankInput("act-fail", d, "f", 0, 1, `{"fail":"panic"}`) },
			false, api.ErrUser, false, "panic: boom\n"},
		{"peer lost", func(d string) api.RunRankInput { return rankInput("act-fail", d, "f", 0, 1, `{"fail":"peer"}`) },
			false, api.ErrPeerLost, false, "epoch 2: " + collective.ErrPeerGone.Error()},
		{"unknown function", func(d string) api.RunRankInput { return rankInput("act-nope", d, "f", 0, 1, "") },
			false, api.ErrUnknownFunc, true, ""},
		{"stale attempt", func(d string) api.RunRankInput { return rankInput("act-report", d, "f", 0, 1, "") },
			true, api.ErrStaleAttempt, true, "attempt 1 is no longer running (current 1)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			wf := newFakeWorkflow(1, 1)
			wf.stale = tt.stale
			a := newTestActivities(t, wf)
			_, err := runRank(t, a, tt.in(t.TempDir()), nil)
			var app *temporal.ApplicationError
			if !errors.As(err, &app) {
				t.Fatalf("error %v, want an application error", err)
			}
			if api.ErrorKind(app.Type()) != tt.kind || app.NonRetryable() != tt.nonRetryable {
				t.Errorf("kind %s non-retryable %v, want %s %v (%v)", app.Type(), app.NonRetryable(), tt.kind, tt.nonRetryable, err)
			}
			msg := app.Message()
			switch {
			case tt.kind == api.ErrUnknownFunc:
				if want := `unknown training function "act-nope"`; len(msg) < len(want) || msg[:len(want)] != want {
					t.Errorf("message %q", msg)
				}
			case tt.name == "panic":
				if len(msg) < len(tt.message) || msg[:len(tt.message)] != tt.message {
					t.Errorf("message %q, want it to start %q (with the stack after)", msg, tt.message)
				}
			case msg != tt.message:
				t.Errorf("message %q, want %q (the workflow names the rank, the rank does not)", msg, tt.message)
			}
		})
	}
}
