package api

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestValidateResources(t *testing.T) {
	t.Parallel()
	tests := []struct {
		res    map[string]float64
		useGPU bool
		want   string // "" valid
	}{
		{map[string]float64{"CPU": 4}, false, ""},
		{map[string]float64{"CPU": 0.5}, false, ""},
		{map[string]float64{"CPU": 4, "GPU": 2}, true, ""},
		{map[string]float64{"GPU": 0}, false, ""},
		{map[string]float64{"GPU": 1}, false, "scaling.resources_per_worker.GPU = 1: needs scaling.use_gpu true"},
		{map[string]float64{"GPU": 1.5}, true, "scaling.resources_per_worker.GPU = 1.5: must be a whole number"},
		{map[string]float64{"CPU": -1}, false, "scaling.resources_per_worker.CPU = -1: must be at least 0"},
		{map[string]float64{"GPU": -2}, true, "scaling.resources_per_worker.GPU = -2: must be at least 0"},
		{map[string]float64{"CPU": 1e9}, false, "scaling.resources_per_worker.CPU = 1e+09: must be at most 4096"},
		{map[string]float64{"GPU": 128}, true, "scaling.resources_per_worker.GPU = 128: must be at most 64"},
		{map[string]float64{"memory": 1 << 30}, false, `scaling.resources_per_worker.memory = 1.073741824e+09: is not a resource tempotrain knows: only "CPU" and "GPU"; Ray's custom resources are not supported`},
		{map[string]float64{"cpu": 2}, false, `scaling.resources_per_worker.cpu = 2: is not a resource tempotrain knows (did you mean "CPU"?)`},
		// The same key every time, however the map iterates.
		{map[string]float64{"a": 1, "b": 1, "c": 1, "d": 1, "CPU": -1}, false, "scaling.resources_per_worker.CPU = -1"},
	}
	for _, tt := range tests {
		for range 5 {
			in := validInput()
			in.Scaling.ResourcesPerWorker, in.Scaling.UseGPU = tt.res, tt.useGPU
			err := in.Validate()
			if tt.want == "" {
				if err != nil {
					t.Errorf("%v use_gpu %v: %v", tt.res, tt.useGPU, err)
				}
				continue
			}
			var iie *InvalidInputError
			if !errors.As(err, &iie) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("%v use_gpu %v: Validate() = %v, want an InvalidInputError containing %q", tt.res, tt.useGPU, err, tt.want)
			}
		}
	}
}

func TestResourcesQueue(t *testing.T) {
	t.Parallel()
	tests := []struct {
		s     ScalingConfig
		res   Resources
		queue string
		text  string
	}{
		{ScalingConfig{}, Resources{}, DefaultCPUQueue, "{}"},
		{ScalingConfig{UseGPU: true}, Resources{}, DefaultGPUQueue, "{}"},
		{ScalingConfig{ResourcesPerWorker: map[string]float64{"CPU": 4}}, Resources{CPU: 4}, "tempotrain-cpu@cpu4", "{CPU: 4}"},
		{ScalingConfig{ResourcesPerWorker: map[string]float64{"CPU": 3}}, Resources{CPU: 3}, "tempotrain-cpu@cpu4", "{CPU: 3}"},
		{ScalingConfig{ResourcesPerWorker: map[string]float64{"CPU": 0.5}}, Resources{CPU: 0.5}, "tempotrain-cpu@cpu1", "{CPU: 0.5}"},
		{ScalingConfig{ResourcesPerWorker: map[string]float64{"CPU": 5, "GPU": 2}, UseGPU: true}, Resources{CPU: 5, GPU: 2}, "tempotrain-gpu@cpu8-gpu2", "{CPU: 5, GPU: 2}"},
		{ScalingConfig{ResourcesPerWorker: map[string]float64{"GPU": 3}, UseGPU: true}, Resources{GPU: 3}, "tempotrain-gpu@gpu4", "{GPU: 3}"},
		// use_gpu asks for 1 GPU when the resources name none (Ray).
		{ScalingConfig{ResourcesPerWorker: map[string]float64{"CPU": 2}, UseGPU: true}, Resources{CPU: 2, GPU: 1}, "tempotrain-gpu@cpu2-gpu1", "{CPU: 2, GPU: 1}"},
		{ScalingConfig{ResourcesPerWorker: map[string]float64{"CPU": 2, "GPU": 0}, UseGPU: true}, Resources{CPU: 2, GPU: 1}, "tempotrain-gpu@cpu2-gpu1", "{CPU: 2, GPU: 1}"},
		{ScalingConfig{ResourcesPerWorker: map[string]float64{"CPU": 16}, TaskQueue: "big"}, Resources{CPU: 16}, "big@cpu16", "{CPU: 16}"},
		// All zero: the plain queue, as without resources.
		{ScalingConfig{ResourcesPerWorker: map[string]float64{"CPU": 0}}, Resources{}, DefaultCPUQueue, "{}"},
	}
	for _, tt := range tests {
		if got := tt.s.Resources(); got != tt.res {
			t.Errorf("%+v: Resources() = %+v, want %+v", tt.s, got, tt.res)
		}
		if got := tt.s.RankQueue(); got != tt.queue {
			t.Errorf("%+v: RankQueue() = %q, want %q", tt.s, got, tt.queue)
		}
		if got := tt.s.Resources().String(); got != tt.text {
			t.Errorf("%+v: String() = %q, want %q", tt.s, got, tt.text)
		}
	}
}

func TestResourcesJSON(t *testing.T) {
	t.Parallel()
	var in FitInput
	if err := json.Unmarshal([]byte(`{"scaling":{"num_workers":2,"use_gpu":true,"resources_per_worker":{"CPU":4,"GPU":1}}}`), &in); err != nil {
		t.Fatal(err)
	}
	if got := in.Scaling.Resources(); got != (Resources{CPU: 4, GPU: 1}) {
		t.Errorf("resources %+v", got)
	}
	// WithDefaults copies the map: the caller's input stays as it was.
	d := in.WithDefaults()
	d.Scaling.ResourcesPerWorker["CPU"] = 8
	if in.Scaling.ResourcesPerWorker["CPU"] != 4 {
		t.Error("WithDefaults shares ResourcesPerWorker with its receiver")
	}
	// A rank input without resources marshals as before.
	b, _ := json.Marshal(RunRankInput{})
	if strings.Contains(string(b), "resources") {
		t.Errorf("RunRankInput{} = %s", b)
	}
}
