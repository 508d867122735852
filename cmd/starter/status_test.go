package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/train"
)

func TestPrintStatus(t *testing.T) {
	now := time.Date(2026, 11, 24, 1, 0, 0, 0, time.UTC)
	st := &train.Status{Name: "nightly", Attempt: 2, WorldSize: 2, Failures: 1, Reports: 5, Standbys: 1,
		Latest:     api.Metrics{"epoch": 5, "loss": 0.25},
		Checkpoint: &api.Checkpoint{Seq: 5, URI: "/runs/nightly/checkpoint_000005"},
		History: []api.AttemptRecord{
			{Attempt: 1, WorldSize: 3, Start: now.Add(-time.Minute), End: now.Add(-30 * time.Second), Error: "attempt 1: rank 1 failed: no heartbeat for 5s\nmore"},
			{Attempt: 2, WorldSize: 2, Start: now.Add(-30 * time.Second), ResumedFrom: 3},
		},
		Ranks: []train.RankStatus{
			{Progress: api.Progress{Attempt: 2, Rank: 0, Phase: api.PhaseTrain, Epoch: 6, Step: 7, Samples: 6400, SamplesPerSec: 1200.4, Checkpoint: 5},
				Worker: "11@a@", LastHeartbeat: now.Add(-800 * time.Millisecond), State: "Started"},
			{Progress: api.Progress{Attempt: 2, Rank: 1, Phase: api.PhaseTrain, Epoch: 6, Step: 7, Samples: 6400, SamplesPerSec: 1199.6},
				Worker: "12@b@", LastHeartbeat: now.Add(-time.Second), State: "Started"},
			{Progress: api.Progress{Attempt: 2, Rank: -1, Phase: api.PhaseRendezvous, Epoch: -1, Step: -1}, Worker: "13@c@", State: "Started"},
		}}
	var b bytes.Buffer
	printStatus(&b, st, now)
	out := b.String()
	t.Logf("\n%s", out)
	for _, want := range []string{
		"run         nightly (running)",
		"attempt 2 · 1 restarts · 2 ranks · 1 standby · 2400 samples/s · ckpt 5, epoch 5",
		"checkpoint  5",
		"2        0        train       6      7     6400     1200",
		"800ms ago",
		"standby",
		"attempt 1: rank 1 failed: no heartbeat for 5s",
		"running",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q", want)
		}
	}
	if strings.Contains(out, "more") {
		t.Error("an attempt's error is printed past its first line")
	}
}

func TestTotalEpochsAndDone(t *testing.T) {
	for cfg, want := range map[string]int{
		`{"epochs":7}`: 7, `{"num_epochs":3}`: 3, `{"params":{"num_boost_round":50}}`: 50, `{"lr":0.1}`: 0, `not json`: 0,
	} {
		if got := totalEpochs(json.RawMessage(cfg)); got != want {
			t.Errorf("totalEpochs(%s) = %d, want %d", cfg, got, want)
		}
	}
	st := &train.Status{Attempt: 2, Ranks: []train.RankStatus{{Progress: api.Progress{Attempt: 2, Epoch: 4}}, {Progress: api.Progress{Attempt: 1, Epoch: 9}}}}
	if got := epochsDone(st); got != 3 {
		t.Errorf("epochsDone from the current attempt's ranks = %d, want 3", got)
	}
	st.Latest = api.Metrics{"round": 12}
	if got := epochsDone(st); got != 12 {
		t.Errorf("epochsDone from the latest report's round = %d, want 12", got)
	}
}
