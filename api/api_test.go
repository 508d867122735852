package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func TestMetricsJSONKeepsNaNAndInf(t *testing.T) {
	t.Parallel()
	in := Metrics{"loss": math.NaN(), "up": math.Inf(1), "down": math.Inf(-1), "acc": 0.875}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var out Metrics
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	if !math.IsNaN(out["loss"]) || !math.IsInf(out["up"], 1) || !math.IsInf(out["down"], -1) || out["acc"] != 0.875 {
		t.Errorf("round trip of %s = %v", b, out)
	}
	if err := json.Unmarshal([]byte(`{"loss":"high"}`), &out); err == nil || !strings.Contains(err.Error(), `"loss"`) {
		t.Errorf("bad metric: err = %v, want one naming the metric", err)
	}
}

func TestDurationJSON(t *testing.T) {
	t.Parallel()
	var c FailureConfig
	if err := json.Unmarshal([]byte(`{"heartbeat_timeout":"90s","collective_timeout":30}`), &c); err != nil {
		t.Fatal(err)
	}
	if c.HeartbeatTimeout.D() != 90*time.Second || c.CollectiveTimeout.D() != 30*time.Second {
		t.Errorf("decoded %+v", c)
	}
	b, _ := json.Marshal(c)
	if !strings.Contains(string(b), `"heartbeat_timeout":"1m30s"`) {
		t.Errorf("encoded %s", b)
	}
	if err := json.Unmarshal([]byte(`{"heartbeat_timeout":"soon"}`), &c); err == nil || !strings.Contains(err.Error(), "soon") {
		t.Errorf("bad duration: err = %v", err)
	}
}

func validInput() FitInput {
	return FitInput{TrainFunc: "f", Scaling: ScalingConfig{NumWorkers: 2}, Run: RunConfig{StoragePath: "/tmp/runs"}}.WithDefaults()
}

func TestValidate(t *testing.T) {
	t.Parallel()
	if err := validInput().Validate(); err != nil {
		t.Fatalf("valid input: %v", err)
	}
	tests := []struct {
		mutate func(*FitInput)
		want   string
	}{
		{func(in *FitInput) { in.Scaling.NumWorkers = 0 }, "scaling.num_workers = 0: must be at least 1"},
		{func(in *FitInput) { in.Scaling.NumWorkers = 1 << 20 }, "scaling.num_workers = 1048576"},
		{func(in *FitInput) { in.Run.StoragePath = " " }, `run.storage_path = " "`},
		{func(in *FitInput) { in.Run.StoragePath = "s3://" }, `run.storage_path = "s3://"`},
		{func(in *FitInput) { in.Run.StoragePath = "ftp://x" }, `run.storage_path = "ftp://x"`},
		{func(in *FitInput) { in.Run.Name = ".." }, `run.name = ".."`},
		{func(in *FitInput) { in.Run.Failure.MaxFailures = -5 }, "run.failure.max_failures = -5"},
		{func(in *FitInput) { in.Run.Failure.CollectiveTimeout = -1 }, "run.failure.collective_timeout"},
		{func(in *FitInput) { in.Run.Checkpoint.NumToKeep = -2 }, "run.checkpoint.num_to_keep = -2"},
		{func(in *FitInput) { in.Run.Checkpoint.ScoreOrder = "asc" }, `run.checkpoint.score_order = "asc": must be "max" or "min"`},
		{func(in *FitInput) { in.Config = json.RawMessage(`{"a":`) }, "config = "},
		{func(in *FitInput) { in.TrainFunc = "" }, `train_func = ""`},
		{func(in *FitInput) { in.TrainFunc = strings.Repeat("f", 4096) }, "train_func = \"ffff"},
		{func(in *FitInput) { in.TrainFunc = strings.Repeat("f", 4096) }, "is 4096 bytes: at most 200 (it is the TempotrainFunc search attribute)"},
		{func(in *FitInput) { in.TrainFunc = "mnist\nmlp" }, `train_func = "mnist\nmlp": holds a control character`},
		{func(in *FitInput) { in.TrainFunc = "mnist\xffmlp" }, "train_func = \"mnist\\xffmlp\": holds a control character or invalid UTF-8"},
		{func(in *FitInput) { in.Run.ResumeFrom = "runs/a/checkpoint_000001" }, `run.resume_from = "runs/a/checkpoint_000001"`},
		{func(in *FitInput) { in.Run.Name = strings.Repeat("a", 201) }, "run.name = \"aaaa"},
		{func(in *FitInput) { in.Run.Name = "bad\x1b[2Jname" }, "holds a control character"},
		{func(in *FitInput) { in.Run.Name = "bad\xffname" }, "invalid UTF-8"},
		{func(in *FitInput) { in.Run.Failure.CollectiveTimeout = 1 }, "run.failure.collective_timeout = 1ns: must be at least 1s"},
		{func(in *FitInput) { in.Run.Failure.StartTimeout = 1 }, "run.failure.start_timeout = 1ns: must be at least 1s"},
		{func(in *FitInput) { in.Run.Failure.HeartbeatTimeout = 1 }, "run.failure.heartbeat_timeout = 1ns: must be at least 1s"},
		{func(in *FitInput) {
			in.Config = json.RawMessage(`{"blob":"` + strings.Repeat("x", MaxConfigBytes) + `"}`)
		}, "config = \"262155 bytes\": at most 262144 bytes"},
		// Elastic scaling.
		{func(in *FitInput) { in.Scaling = ScalingConfig{MinWorkers: 4, MaxWorkers: 2} }, "scaling.min_workers = 4: must be at most scaling.max_workers (2)"},
		{func(in *FitInput) { in.Scaling = ScalingConfig{MinWorkers: -1, MaxWorkers: 2} }, "scaling.min_workers = -1: must be at least 1"},
		{func(in *FitInput) { in.Scaling = ScalingConfig{MaxWorkers: 2} }, "scaling.min_workers = 0: must be given with scaling.max_workers (2)"},
		{func(in *FitInput) { in.Scaling = ScalingConfig{MinWorkers: 2} }, "scaling.max_workers = 0: must be given with scaling.min_workers (2)"},
		{func(in *FitInput) { in.Scaling = ScalingConfig{MinWorkers: 2, MaxWorkers: 1 << 20} }, "scaling.max_workers = 1048576: must be at most 4096"},
		{func(in *FitInput) { in.Scaling = ScalingConfig{NumWorkers: 3, MinWorkers: 2, MaxWorkers: 4} },
			"scaling.num_workers = 3: conflicts with scaling.min_workers 2 and scaling.max_workers 4"},
		{func(in *FitInput) {
			in.Scaling = ScalingConfig{MinWorkers: 1, MaxWorkers: 2, LastCall: Duration(-time.Second)}
		}, "scaling.last_call = -1s: must be positive"},
		{func(in *FitInput) { in.Scaling.LastCall = Duration(time.Second) }, "scaling.last_call = 1s: applies to elastic runs only"},
		// Ranks per process.
		{func(in *FitInput) { in.Scaling = ScalingConfig{NumWorkers: 4, RanksPerProcess: -2} }, "scaling.ranks_per_process = -2: must be at least 1"},
		{func(in *FitInput) { in.Scaling = ScalingConfig{NumWorkers: 4, RanksPerProcess: 8} }, "scaling.ranks_per_process = 8: must be at most scaling.num_workers (4)"},
		{func(in *FitInput) { in.Scaling = ScalingConfig{MinWorkers: 2, MaxWorkers: 4, RanksPerProcess: 2} },
			"scaling.ranks_per_process = 2: applies to fixed-size runs only"},
	}
	for _, tt := range tests {
		in := validInput()
		tt.mutate(&in)
		err := in.Validate()
		var iie *InvalidInputError
		if !errors.As(err, &iie) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Validate() = %v, want an InvalidInputError containing %q", err, tt.want)
		}
	}
	for _, sc := range []ScalingConfig{{MinWorkers: 1, MaxWorkers: 1}, {MinWorkers: 2, MaxWorkers: 4}, {NumWorkers: 4, MinWorkers: 2, MaxWorkers: 4}} {
		in := validInput()
		in.Scaling = sc
		in = in.WithDefaults()
		if err := in.Validate(); err != nil {
			t.Errorf("scaling %+v: %v", sc, err)
		}
		if in.Scaling.LastCall.D() != DefaultLastCall || in.Scaling.Slots() != sc.MaxWorkers || in.Scaling.Min() != sc.MinWorkers {
			t.Errorf("scaling %+v: last call %v, slots %d, min %d", sc, in.Scaling.LastCall, in.Scaling.Slots(), in.Scaling.Min())
		}
	}
	for _, ok := range []string{"/data", "file:///data", "s3://bucket", "s3://bucket/prefix/x"} {
		in := validInput()
		in.Run.StoragePath = ok
		if err := in.Validate(); err != nil {
			t.Errorf("storage path %q: %v", ok, err)
		}
	}
}

func TestWithDefaults(t *testing.T) {
	t.Parallel()
	in := FitInput{}.WithDefaults()
	f := in.Run.Failure
	if f.HeartbeatTimeout.D() != DefaultHeartbeatTimeout || f.CollectiveTimeout.D() != DefaultCollectiveTimeout ||
		f.StartTimeout.D() != DefaultStartTimeout || in.Run.Checkpoint.ScoreOrder != "max" || in.Run.Failure.MaxFailures != 0 {
		t.Errorf("defaults %+v", in.Run)
	}
	if q := (ScalingConfig{UseGPU: true}).RankQueue(); q != DefaultGPUQueue {
		t.Errorf("GPU queue %q", q)
	}
	if q := (ScalingConfig{TaskQueue: "mine", UseGPU: true}).RankQueue(); q != "mine" {
		t.Errorf("explicit queue %q", q)
	}
}

func TestRunStateUnusable(t *testing.T) {
	t.Parallel()
	var s RunState
	s.MarkUnusable(5, 3, 5, 0, -1, 4)
	if !slices.Equal(s.Unusable, []int{3, 4, 5}) {
		t.Fatalf("Unusable = %v, want [3 4 5] (sorted, once each, seqs > 0)", s.Unusable)
	}
	if !s.IsUnusable(4) || s.IsUnusable(6) || s.IsUnusable(0) {
		t.Errorf("IsUnusable wrong on %v", s.Unusable)
	}
	for q := 10; q < 10+2*MaxUnusable; q++ {
		s.MarkUnusable(q)
	}
	if len(s.Unusable) != MaxUnusable || s.Unusable[0] != 10+MaxUnusable || s.Unusable[MaxUnusable-1] != 9+2*MaxUnusable {
		t.Errorf("bounded Unusable: %d entries, %d..%d; want the newest %d", len(s.Unusable), s.Unusable[0], s.Unusable[len(s.Unusable)-1], MaxUnusable)
	}
}

func TestAbbreviate(t *testing.T) {
	t.Parallel()
	var items []string
	for i := range 20 {
		items = append(items, fmt.Sprintf("checkpoint %d: %s", i, strings.Repeat("é", 400)))
	}
	got := Abbreviate(items) // MaxReasons 8, MaxReasonLen 300
	if len(got) != 9 || got[8] != "... and 12 more" {
		t.Fatalf("Abbreviate gave %d items, last %q", len(got), got[len(got)-1])
	}
	for _, s := range got[:8] {
		if len(s) > 303 || !utf8.ValidString(s) || !strings.HasSuffix(s, "...") {
			t.Errorf("item of %d bytes (valid UTF-8 %v): %.40q", len(s), utf8.ValidString(s), s)
		}
	}
	if short := Abbreviate([]string{"a", "b"}); !slices.Equal(short, []string{"a", "b"}) {
		t.Errorf("short list changed: %q", short)
	}
}
