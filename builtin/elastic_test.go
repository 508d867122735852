package builtin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/compute"
	"github.com/tempotrain/tempotrain/compute/computetest"
	"github.com/tempotrain/tempotrain/data"
	"github.com/tempotrain/tempotrain/train"
	"github.com/tempotrain/tempotrain/train/trainrt"
)

// elastic is one attempt of an elastic run: world ranks over the real TCP
// collective, resuming from ck when not nil; when stopStep > 0 the last
// rank's worker is told to stop (a preemption) once it has done stopStep
// steps of epoch stopEpoch, so the group checkpoints mid-epoch and ends.
type elastic struct {
	model     string
	world     int
	cfg       any
	datasets  map[string]api.DatasetSpec
	ck        *train.Checkpoint
	o         Options
	stopEpoch int
	stopStep  int
}

func (a elastic) attempt(t *testing.T) (*recorder, error) {
	t.Helper()
	raw, err := json.Marshal(a.cfg)
	if err != nil {
		t.Fatal(err)
	}
	comms := computetest.ConnectTCP(t, a.world)
	stop := make(chan struct{})
	recs := make([]*recorder, a.world)
	tcs := make([]*train.Context, a.world)
	last := a.world - 1
	for r := range a.world {
		recs[r] = &recorder{dir: t.TempDir()}
		info := trainrt.ContextInfo{RunName: t.Name(), Attempt: 1, WorldRank: r, WorldSize: a.world, LocalRank: r, LocalWorldSize: a.world,
			Config: raw, Checkpoint: a.ck, ScratchDir: t.TempDir(), Device: -1, Datasets: a.datasets}
		if r == last && a.stopStep > 0 {
			info.Preempted = stop
		}
		tcs[r] = trainrt.NewContext(context.Background(), info, comms[r], recs[r], nil)
	}
	done := make(chan struct{})
	defer close(done)
	if a.stopStep > 0 {
		go func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				if e, s := tcs[last].Progress(); e > a.stopEpoch || e == a.stopEpoch && s >= a.stopStep {
					close(stop)
					return
				}
				time.Sleep(50 * time.Microsecond)
			}
		}()
	}
	errs := make([]error, a.world)
	var wg sync.WaitGroup
	for r := range a.world {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if errs[r] = FuncWith(a.model, a.o)(context.Background(), tcs[r]); errs[r] != nil && !errors.Is(errs[r], train.ErrPreempted) {
				comms[r].Abort()
			}
		}()
	}
	wg.Wait()
	return recs[0], errors.Join(errs...)
}

// preempted runs an attempt that must end preempted, with a mid-epoch
// checkpoint last, and returns that checkpoint.
func (a elastic) preempted(t *testing.T) (*recorder, *train.Checkpoint) {
	t.Helper()
	rec, err := a.attempt(t)
	if !errors.Is(err, train.ErrPreempted) {
		t.Fatalf("%d ranks: %v, want ErrPreempted", a.world, err)
	}
	ck := rec.last()
	if ck == nil || ck.Metrics["preempted"] != 1 {
		t.Fatalf("%d ranks: the last checkpoint is not the preemption's: %v", a.world, ck)
	}
	return rec, ck
}

// rowsOf is the training rows an epoch's report counts over all ranks
// (its segments' too, carried across attempts).
func rowsOf(m train.Metrics) float64 { return m["samples_per_s"] * m["epoch_time_s"] }

// checkRows: every row of every epoch once, up to padding (at most pad
// rows more).
func checkRows(t *testing.T, what string, reports []train.Metrics, n, pad int) {
	t.Helper()
	for _, m := range reports {
		if got := rowsOf(m); got < float64(n)-0.01 || got > float64(n+pad)+0.01 {
			t.Errorf("%s: epoch %v counted %.2f training rows, want %d to %d", what, m["epoch"], got, n, n+pad)
		}
	}
}

// TestElasticResumeMNIST: mnist-mlp on 4 ranks, preempted mid-epoch 1,
// resumed from there on 3 ranks (the rest of the epoch shared among them),
// preempted mid-epoch 2, resumed on 4 ranks to the end, ends within half a
// point of test accuracy of the run never interrupted, every epoch having
// seen every training row once (up to padding). Per-rank batches (the
// global batch 256, then 192, then 256 again), and a global batch of 256
// (64 a rank on 4, 86/85/85 on 3).
func TestElasticResumeMNIST(t *testing.T) {
	needData(t)
	const n = 30001
	for _, sem := range []string{PerRank, GlobalBatch} {
		t.Run(sem, func(t *testing.T) {
			cfg := Config{Epochs: 3, BatchSize: 64, LR: 0.05, Seed: 5, TrainLimit: n, TestLimit: 10000, Schedule: "cosine", BatchSemantics: sem}
			if sem == GlobalBatch {
				cfg.BatchSize = 256
			}
			run := elastic{model: "mlp", world: 4, cfg: cfg}
			full, err := run.attempt(t)
			if err != nil {
				t.Fatal(err)
			}
			fullReports := epochReports(full)
			checkRows(t, "uninterrupted", fullReports, n, 3)

			// 118 steps an epoch on 4 ranks (157 on 3 under per_rank).
			a := run
			a.stopEpoch, a.stopStep = 0, 40
			recA, ckA := a.preempted(t)
			b := run
			b.world, b.ck, b.stopEpoch, b.stopStep = 3, ckA, 1, 70
			recB, ckB := b.preempted(t)
			c := run
			c.ck = ckB
			recC, err := c.attempt(t)
			if err != nil {
				t.Fatal(err)
			}
			reports := append(append(epochReports(recA), epochReports(recB)...), epochReports(recC)...)
			if len(reports) != 3 {
				t.Fatalf("%d epoch reports over the attempts, want 3", len(reports))
			}
			checkRows(t, "4 → 3 → 4 ranks", reports, n, 3)
			want, got := fullReports[2]["test_accuracy"], reports[2]["test_accuracy"]
			t.Logf("%s: test accuracy uninterrupted on 4 ranks %.4f, 4 → 3 → 4 ranks %.4f (preempted at epoch 1 step %v, epoch 2 step %v)",
				sem, want, got, ckA.Metrics["step"], ckB.Metrics["step"])
			if math.Abs(got-want) > 0.005 {
				t.Errorf("test accuracy %.4f, uninterrupted %.4f: more than half a point apart", got, want)
			}
			if got < 0.8 {
				t.Errorf("test accuracy %.4f: did not train", got)
			}
		})
	}
}

// TestElasticResumeTabular: tabular-mlp (checkpoints every 5 steps) on 4
// ranks fails in epoch 2, resumes from its last mid-epoch checkpoint on 3
// ranks, fails again in epoch 2, resumes from there on 4 to the end: every
// epoch saw every row once (up to padding), and the model is as good as the
// uninterrupted run's; per rank and global batches, the train data in
// memory and streamed.
func TestElasticResumeTabular(t *testing.T) {
	t.Parallel()
	const n = 2001
	for _, v := range []struct {
		sem    string
		stream bool
	}{{PerRank, false}, {GlobalBatch, false}, {PerRank, true}} {
		name := v.sem
		ds := tables(t, "classification", n, 1000)
		// Padding: fewer than 4 rows in the last step; streamed, also rows
		// the last rank of each attempt padded with before its rows ran out.
		pad := 3
		if v.stream {
			name += "/stream"
			train := ds["train"]
			train.Mode, train.ShuffleWindowRows, train.MemoryBudgetMiB = "stream", 150, 1
			ds["train"] = train
			pad = 3 + 2 + 3
		}
		sem := v.sem
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cfg := TabularConfig{Config: Config{Epochs: 4, BatchSize: 16, Seed: 3, Optimizer: "adam", LR: 0.01, Schedule: "cosine",
				CheckpointEverySteps: 5, BatchSemantics: sem}}
			if sem == GlobalBatch {
				cfg.BatchSize = 64
			}
			failAt := func(e, s int) Options {
				return Options{AfterStep: func(tc *train.Context, epoch, step int) error {
					if tc.WorldRank() == 1 && epoch == e && step == s {
						return errInterrupted
					}
					return nil
				}}
			}
			run := elastic{model: TabularMLP, world: 4, cfg: cfg, datasets: ds}
			full, err := run.attempt(t)
			if err != nil {
				t.Fatal(err)
			}
			checkRows(t, "uninterrupted", epochReports(full), n, 3)

			a := run
			a.o = failAt(1, 12)
			recA, err := a.attempt(t)
			if !errors.Is(err, errInterrupted) {
				t.Fatalf("4 ranks: %v, want the injected failure", err)
			}
			b := run
			b.world, b.ck, b.o = 3, recA.last(), failAt(1, 22)
			if _, ok := b.ck.Metrics["train_loss"]; ok {
				t.Fatalf("the checkpoint to resume on 3 ranks is an epoch's end: %v", b.ck.Metrics)
			}
			recB, err := b.attempt(t)
			if !errors.Is(err, errInterrupted) {
				t.Fatalf("3 ranks: %v, want the injected failure", err)
			}
			c := run
			c.ck = recB.last()
			if _, ok := c.ck.Metrics["train_loss"]; ok {
				t.Fatalf("the checkpoint to resume on 4 ranks is an epoch's end: %v", c.ck.Metrics)
			}
			recC, err := c.attempt(t)
			if err != nil {
				t.Fatal(err)
			}
			// Reports of epochs the next attempt redid from a mid-epoch
			// checkpoint before them do not count: each attempt's epoch ends
			// after the checkpoint it resumed from.
			reports := append(append(epochReports(recA), epochReports(recB)...), epochReports(recC)...)
			if len(reports) != 4 {
				t.Fatalf("%d epoch reports over the attempts, want 4", len(reports))
			}
			checkRows(t, "4 → 3 → 4 ranks", reports, n, pad)
			for _, ck := range []*train.Checkpoint{b.ck, c.ck, recC.ckpts[0]} {
				p, err := data.ReadPosition(ck.Dir, "train")
				if err != nil {
					t.Fatal(err)
				}
				if mode := map[bool]string{false: "memory", true: "stream"}[v.stream]; p.Settings.Mode != mode {
					t.Fatalf("the train data was read in %s mode, want %s", p.Settings.Mode, mode)
				}
				// Epoch 2 on 4 ranks, then 3, then 4 again.
				if want := map[*train.Checkpoint]int{b.ck: 0, c.ck: 1, recC.ckpts[0]: 2}[ck]; v.stream && len(p.Splits) != want || p.Epoch != 1 {
					t.Errorf("checkpoint at epoch %d with splits %+v, want epoch 1 after %d", p.Epoch, p.Splits, want)
				}
			}
			want, got := epochReports(full)[3]["valid_accuracy"], reports[3]["valid_accuracy"]
			t.Logf("%s: valid accuracy uninterrupted %.4f, 4 → 3 → 4 ranks %.4f", name, want, got)
			if math.Abs(got-want) > 0.02 || got < 0.85 {
				t.Errorf("valid accuracy %.4f, uninterrupted %.4f", got, want)
			}
		})
	}
}

// TestBatchSemanticsConfig: batch_semantics and lr_scaling are checked,
// and say what a step is on a world size.
func TestBatchSemanticsConfig(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		cfg     Config
		world   int
		global  int
		rank    int
		lr      float64
		wantErr string
	}{
		{cfg: Config{BatchSize: 64}, world: 4, global: 256, rank: 64, lr: 0.05},
		{cfg: Config{BatchSize: 64}, world: 3, global: 192, rank: 64, lr: 0.05},
		{cfg: Config{BatchSize: 64, LRScaling: "linear"}, world: 3, global: 192, rank: 64, lr: 0.15},
		{cfg: Config{BatchSize: 128, BatchSemantics: "global"}, world: 3, global: 128, rank: 43, lr: 0.05},
		{cfg: Config{BatchSize: 128, BatchSemantics: "global"}, world: 4, global: 128, rank: 32, lr: 0.05},
		{cfg: Config{BatchSize: 2, BatchSemantics: "global"}, world: 3, wantErr: "batch_size 2 with batch_semantics \"global\""},
		{cfg: Config{BatchSemantics: "total"}, world: 1, wantErr: `batch_semantics "total": want "per_rank"`},
		{cfg: Config{LRScaling: "sqrt"}, world: 1, wantErr: `lr_scaling "sqrt"`},
		{cfg: Config{BatchSemantics: "global", LRScaling: "linear"}, world: 1, wantErr: "nothing to scale"},
	} {
		cfg := c.cfg
		cfg.setDefaults()
		err := cfg.validate()
		var global, rank int
		if err == nil {
			global, rank, err = cfg.batches(c.world)
		}
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("%+v on %d ranks: %v, want an error with %q", c.cfg, c.world, err, c.wantErr)
			}
			continue
		}
		if err != nil || global != c.global || rank != c.rank || math.Abs(cfg.lr(c.world)-c.lr) > 1e-12 {
			t.Errorf("%+v on %d ranks: global %d, rank %d, lr %v, %v; want %d, %d, %v", c.cfg, c.world, global, rank, cfg.lr(c.world), err, c.global, c.rank, c.lr)
		}
	}
}

// TestOldMidEpochCheckpointResumes: a mid-epoch checkpoint of Fashion-MNIST's
// files written before checkpoints held rows_done, world_size and
// global_batch resumes as it did (at the world size and batch that wrote
// it: the rows done are its steps' global batches), bit for bit.
func TestOldMidEpochCheckpointResumes(t *testing.T) {
	needData(t)
	cfg := Config{Epochs: 2, BatchSize: 64, LR: 0.05, Seed: 3, TrainLimit: 2048, TestLimit: 256}
	full, _, err := preemptedAttempt(t, cfg, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	cut, _, err := preemptedAttempt(t, cfg, nil, 5)
	if !errors.Is(err, train.ErrPreempted) {
		t.Fatalf("preempted attempt: %v", err)
	}
	ck := cut.last()
	st, err := compute.LoadFile(ck.Path(CheckpointFile))
	if err != nil {
		t.Fatal(err)
	}
	step := st.Ints["steps_done"]
	if st.Ints[rowsDoneInt] != step*128 || st.Ints[worldSizeInt] != 2 || st.Ints[globalBatchInt] != 128 {
		t.Fatalf("checkpoint at step %d: rows_done %d, world_size %d, global_batch %d; want %d, 2, 128",
			step, st.Ints[rowsDoneInt], st.Ints[worldSizeInt], st.Ints[globalBatchInt], step*128)
	}
	for _, k := range []string{rowsDoneInt, worldSizeInt, globalBatchInt} {
		delete(st.Ints, k)
	}
	if err := st.SaveFile(ck.Path(CheckpointFile)); err != nil {
		t.Fatal(err)
	}
	resumed, _, err := preemptedAttempt(t, cfg, ck, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(stateBytes(t, resumed.last()), stateBytes(t, full.last())) {
		t.Error("resumed from the old checkpoint, the final state differs from the run never preempted")
	}
}
