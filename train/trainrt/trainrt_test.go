package trainrt_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/tempotrain/tempotrain/train"
	"github.com/tempotrain/tempotrain/train/trainrt"
)

type reports struct {
	metrics []train.Metrics
	ckpts   []*train.Checkpoint
}

func (r *reports) Report(_ context.Context, m train.Metrics, ck *train.Checkpoint) error {
	r.metrics, r.ckpts = append(r.metrics, m), append(r.ckpts, ck)
	return nil
}

// observer records what a Context tells its Observer.
type observer struct {
	progress [][2]int
	reports  []bool
	ended    []error
}

func (o *observer) Progress(epoch, step int) { o.progress = append(o.progress, [2]int{epoch, step}) }
func (o *observer) Report(ctx context.Context, _ map[string]float64, ck bool) (context.Context, func(error)) {
	o.reports = append(o.reports, ck)
	return ctx, func(err error) { o.ended = append(o.ended, err) }
}
func (o *observer) Tracer() trace.Tracer { return noop.NewTracerProvider().Tracer("test") }

// TestNewContext builds a Context as the runtime does and reads every
// field back through the methods a training function calls.
func TestNewContext(t *testing.T) {
	ck := train.NewCheckpoint(t.TempDir())
	stop := make(chan struct{})
	var rep reports
	var obs observer
	tc := trainrt.NewContext(context.Background(), trainrt.ContextInfo{
		RunName: "r1", Attempt: 3, WorldRank: 2, WorldSize: 4, LocalRank: 1, LocalWorldSize: 2, NodeRank: 1,
		Config: json.RawMessage(`{"lr":0.5}`), Checkpoint: ck, ScratchDir: t.TempDir(), Device: 7, Observer: &obs,
		Datasets:      map[string]train.DatasetSpec{"valid": {URI: "/v.csv"}, "train": {URI: "/t.csv"}},
		Preprocessors: []train.PreprocessorSpec{{Type: "standard_scaler"}},
		Preempted:     stop,
	}, nil, &rep, nil)
	got := []int{tc.WorldRank(), tc.WorldSize(), tc.LocalRank(), tc.LocalWorldSize(), tc.NodeRank(), tc.Attempt(), tc.Device()}
	if want := []int{2, 4, 1, 2, 1, 3, 7}; !slices.Equal(got, want) {
		t.Errorf("rank, world, local rank, local world, node, attempt, device = %v, want %v", got, want)
	}
	var cfg struct{ LR float64 }
	if err := tc.Config(&cfg); err != nil || cfg.LR != 0.5 || tc.RunName() != "r1" || tc.Checkpoint() != ck {
		t.Errorf("config %+v (%v), run %q, checkpoint %v", cfg, err, tc.RunName(), tc.Checkpoint())
	}
	if n := tc.DatasetNames(); !slices.Equal(n, []string{"train", "valid"}) || len(tc.Preprocessors()) != 1 {
		t.Errorf("datasets %v, preprocessors %v", n, tc.Preprocessors())
	}
	if stopped, err := tc.ShouldStop(context.Background()); stopped || err != nil {
		t.Errorf("ShouldStop before preemption = %v, %v", stopped, err)
	}
	close(stop)
	if stopped, err := tc.ShouldStop(context.Background()); !stopped || err != nil {
		t.Errorf("ShouldStop after preemption = %v, %v", stopped, err)
	}

	if e, s := tc.Progress(); e != -1 || s != -1 || trainrt.Samples(tc) != 0 {
		t.Errorf("fresh progress %d/%d, samples %d", e, s, trainrt.Samples(tc))
	}
	tc.SetProgress(1, 5)
	tc.AddSamples(32)
	tc.AddSamples(10)
	if e, s := tc.Progress(); e != 1 || s != 5 || trainrt.Samples(tc) != 42 {
		t.Errorf("progress %d/%d, samples %d; want 1/5, 42", e, s, trainrt.Samples(tc))
	}
	if err := tc.Report(train.Metrics{"loss": 1}, ck); err != nil {
		t.Fatal(err)
	}
	if len(rep.metrics) != 1 || rep.metrics[0]["loss"] != 1 || rep.ckpts[0] != ck {
		t.Errorf("reporter got %v %v", rep.metrics, rep.ckpts)
	}
	if !slices.Equal(obs.progress, [][2]int{{1, 5}}) || !slices.Equal(obs.reports, []bool{true}) || len(obs.ended) != 1 || obs.ended[0] != nil {
		t.Errorf("observer saw progress %v, reports %v ending %v", obs.progress, obs.reports, obs.ended)
	}
}

// TestNewContextWithoutReporter: a Context with no Reporter or Observer
// (a test of a function's setup) reports nothing and fails nothing.
func TestNewContextWithoutReporter(t *testing.T) {
	tc := trainrt.NewContext(context.Background(), trainrt.ContextInfo{WorldSize: 1}, nil, nil, nil)
	if err := tc.Report(train.Metrics{"loss": 1}, nil); err != nil {
		t.Error(err)
	}
	if tc.Tracer() == nil || tc.Logger() == nil {
		t.Error("nil tracer or logger")
	}
}

func TestLookup(t *testing.T) {
	fn := func(context.Context, *train.Context) error { return errors.New("ran") }
	train.MustRegister("rt-one", fn)
	got, err := trainrt.Lookup("rt-one")
	if err != nil {
		t.Fatal(err)
	}
	if err := got(context.Background(), nil); err == nil || err.Error() != "ran" {
		t.Errorf("looked-up function returned %v", err)
	}
	if !slices.Contains(trainrt.Names(), "rt-one") {
		t.Errorf("Names() = %v lacks rt-one", trainrt.Names())
	}
	if _, err := trainrt.Lookup("rt-missing"); !errors.Is(err, trainrt.ErrUnknownFunc) || !strings.Contains(err.Error(), "rt-one") {
		t.Errorf("Lookup(missing) = %v, want ErrUnknownFunc listing what is registered", err)
	}
}

// TestContextDevicesAndCPUs: Devices defaults to Device alone, is a copy,
// and CPUs passes through.
func TestContextDevicesAndCPUs(t *testing.T) {
	for _, tt := range []struct {
		info trainrt.ContextInfo
		want []int
		cpus int
	}{
		{trainrt.ContextInfo{WorldSize: 1, Device: -1}, nil, 0},
		{trainrt.ContextInfo{WorldSize: 1, Device: 2}, []int{2}, 0},
		{trainrt.ContextInfo{WorldSize: 1, Device: 1, Devices: []int{1, 3}, CPUs: 8}, []int{1, 3}, 8},
	} {
		tc := trainrt.NewContext(context.Background(), tt.info, nil, nil, nil)
		got := tc.Devices()
		if !slices.Equal(got, tt.want) || tc.CPUs() != tt.cpus || tc.Device() != tt.info.Device {
			t.Errorf("%+v: Devices() %v, CPUs() %d, Device() %d; want %v, %d, %d", tt.info, got, tc.CPUs(), tc.Device(), tt.want, tt.cpus, tt.info.Device)
		}
		if len(got) > 0 {
			got[0] = 99
			if tc.Devices()[0] == 99 {
				t.Error("Devices() shares its slice")
			}
		}
	}
}
