package api

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestSummaryAndDetails(t *testing.T) {
	in := FitInput{TrainFunc: "mnist-mlp", Config: json.RawMessage(`{"epochs":3}`),
		Scaling: ScalingConfig{MinWorkers: 2, MaxWorkers: 4, UseGPU: true},
		Run: RunConfig{Name: "nightly", StoragePath: "s3://b/runs", Schedule: "retrain",
			Failure: FailureConfig{MaxFailures: 2, HeartbeatTimeout: Duration(30 * time.Second)}},
		Datasets: map[string]DatasetSpec{"valid": {URI: "/d/v.csv"}, "train": {URI: "/d/t.csv"}}}
	if got, want := in.Summary(), "mnist-mlp · 2-4 ranks (GPU) · datasets train, valid · schedule retrain · run nightly"; got != want {
		t.Errorf("Summary = %q, want %q", got, want)
	}
	in.Scaling = ScalingConfig{NumWorkers: 3}
	in.Datasets, in.Run.Schedule, in.Run.Name = nil, "", ""
	if got, want := in.Summary(), "mnist-mlp · 3 ranks"; got != want {
		t.Errorf("Summary = %q, want %q", got, want)
	}
	in.Run.Name = "nightly"
	in.Datasets = map[string]DatasetSpec{"train": {URI: "/d/t.csv"}}
	d := in.Details()
	for _, want := range []string{"**Run** `nightly`", "storage: `s3://b/runs`", "ranks: 3 ranks", "max 2, heartbeat timeout 30s",
		"dataset train: `/d/t.csv`", "\"epochs\": 3"} {
		if !strings.Contains(d, want) {
			t.Errorf("Details lacks %q:\n%s", want, d)
		}
	}
}
