package train

import (
	"errors"
	"testing"

	"github.com/tempotrain/tempotrain/api"
)

// TestTunerParamSpace: the Go samplers write the JSON the Tune input reads,
// and validate as it does.
func TestTunerParamSpace(t *testing.T) {
	seed := int64(3)
	tu, err := NewTuner(nil, FitInput{TrainFunc: "tabular-mlp", Scaling: ScalingConfig{NumWorkers: 1}, Run: RunConfig{StoragePath: "/tmp/r"}},
		map[string]any{"config.lr": LogUniform(1e-4, 1e-1), "config.hidden": Choice([]int{32}, []int{64, 32}),
			"config.batch_size": GridSearch(32, 64), "config.seed": RandInt(0, 5), "config.dropout": QUniform(0, 0.5, 0.1),
			"config.momentum": Uniform(0.8, 0.9), "config.epochs": 4},
		TuneConfig{Metric: "valid_accuracy", Mode: "max", NumSamples: 3, Seed: &seed})
	if err != nil {
		t.Fatal(err)
	}
	in := tu.Input()
	want := map[string]string{"config.lr": `{"loguniform":[0.0001,0.1]}`, "config.hidden": `{"choice":[[32],[64,32]]}`,
		"config.batch_size": `{"grid_search":[32,64]}`, "config.seed": `{"randint":[0,5]}`, "config.dropout": `{"quniform":[0,0.5,0.1]}`,
		"config.momentum": `{"uniform":[0.8,0.9]}`, "config.epochs": `4`}
	for k, w := range want {
		if got := string(in.ParamSpace[k]); got != w {
			t.Errorf("%s: %s, want %s", k, got, w)
		}
	}
	trials, err := in.WithDefaults().Validate(seed)
	if err != nil {
		t.Fatal(err)
	}
	if len(trials) != 6 || in.Trainer.Run.Name == "" {
		t.Errorf("%d trials (want 6), name %q", len(trials), in.Trainer.Run.Name)
	}
	bad, _ := NewTuner(nil, in.Trainer, map[string]any{"scaling.num_workers": Choice(0, 1)}, TuneConfig{Metric: "m", Mode: "max"})
	_, err = bad.Start(t.Context())
	var ie *api.InvalidTuneError
	if !errors.As(err, &ie) || ie.Field != "trainer.scaling.num_workers" {
		t.Errorf("a bad trial: %v", err)
	}
}
