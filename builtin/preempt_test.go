package builtin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/tempotrain/tempotrain/compute/computetest"
	"github.com/tempotrain/tempotrain/train"
	"github.com/tempotrain/tempotrain/train/trainrt"
)

// preemptedAttempt runs one attempt of mnist-mlp on 2 ranks over TCP whose
// rank 1 is told, once it has done atStep steps of epoch 1, that its worker
// is stopping. It returns rank 0's recorder, the step rank 1 was at when
// told, and the ranks' errors.
func preemptedAttempt(t *testing.T, cfg Config, ck *train.Checkpoint, atStep int) (*recorder, int, error) {
	t.Helper()
	raw, _ := json.Marshal(cfg)
	comms := computetest.ConnectTCP(t, 2)
	stop := make(chan struct{})
	var toldAt int
	recs := []*recorder{{dir: t.TempDir()}, {dir: t.TempDir()}}
	tcs := make([]*train.Context, 2)
	for r := range 2 {
		info := trainrt.ContextInfo{RunName: t.Name(), Attempt: 1, WorldRank: r, WorldSize: 2, LocalRank: r, LocalWorldSize: 2,
			Config: raw, Checkpoint: ck, ScratchDir: t.TempDir(), Device: -1}
		if r == 1 && atStep > 0 {
			info.Preempted = stop
		}
		tcs[r] = trainrt.NewContext(context.Background(), info, comms[r], recs[r], nil)
	}
	if atStep > 0 {
		go func() {
			for {
				if e, s := tcs[1].Progress(); e == 1 && s >= atStep {
					toldAt = s
					close(stop)
					return
				}
				time.Sleep(50 * time.Microsecond)
			}
		}()
	}
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if errs[r] = Func("mlp")(context.Background(), tcs[r]); errs[r] != nil && !errors.Is(errs[r], train.ErrPreempted) {
				comms[r].Abort()
			}
		}()
	}
	wg.Wait()
	return recs[0], toldAt, errors.Join(errs...)
}

// TestPreemptionCheckpointsAtTheNextStep: a worker told to stop mid-epoch
// makes both ranks checkpoint at the next step boundary (the step rank 1
// was at, or the one after) and return ErrPreempted; the run resumed from
// that checkpoint ends with the parameters of a run never preempted.
func TestPreemptionCheckpointsAtTheNextStep(t *testing.T) {
	needData(t)
	cfg := Config{Epochs: 2, BatchSize: 64, LR: 0.05, Seed: 3, TrainLimit: 2048, TestLimit: 256}
	full, _, err := preemptedAttempt(t, cfg, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	cut, toldAt, err := preemptedAttempt(t, cfg, nil, 5)
	if !errors.Is(err, train.ErrPreempted) {
		t.Fatalf("preempted attempt: %v, want ErrPreempted from both ranks", err)
	}
	if len(cut.ckpts) != 2 || cut.metrics[1]["preempted"] != 1 {
		t.Fatalf("preempted attempt: %d checkpoints, last metrics %v; want epoch 1's and the preemption's", len(cut.ckpts), cut.metrics)
	}
	step := int(cut.metrics[1]["step"])
	if step < toldAt || step > toldAt+1 || cut.metrics[1]["epoch"] != 1 {
		t.Errorf("checkpointed at epoch %v step %d; rank 1 was told at step %d: at most one step may be lost", cut.metrics[1]["epoch"], step, toldAt)
	}
	resumed, _, err := preemptedAttempt(t, cfg, cut.last(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(resumed.ckpts) != 1 {
		t.Fatalf("resumed attempt: %d checkpoints, want the end of epoch 2", len(resumed.ckpts))
	}
	if !bytes.Equal(stateBytes(t, resumed.last()), stateBytes(t, full.last())) {
		t.Error("the resumed run's final state differs from the run never preempted")
	}
	if got, want := resumed.metrics[0]["train_accuracy"], full.metrics[1]["train_accuracy"]; got != want {
		t.Errorf("epoch 2 train_accuracy %v, uninterrupted %v: the preempted steps' sums were lost", got, want)
	}
}
