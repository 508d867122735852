package api

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

func validPredictInput() BatchPredictInput {
	return BatchPredictInput{Dataset: DatasetSpec{URI: "s3://bucket/images/*.parquet"}, Checkpoint: "s3://bucket/runs/r/checkpoint_000003",
		Output: "s3://bucket/predictions/r"}.WithDefaults()
}

// TestBatchPredictInputJSON: the input is plain JSON, as the Temporal CLI
// sends it, with every default filled in by WithDefaults.
func TestBatchPredictInputJSON(t *testing.T) {
	t.Parallel()
	var in BatchPredictInput
	raw := `{"dataset":{"uri":"/data/t.csv","label":"y"},"checkpoint":"/runs/r/checkpoint_000001","output":"/out/r","pass_through":["id"],"heartbeat_timeout":"5s","max_attempts":2,"use_gpu":true}`
	if err := json.Unmarshal([]byte(raw), &in); err != nil {
		t.Fatal(err)
	}
	d := in.WithDefaults()
	if err := d.Validate(); err != nil {
		t.Fatal(err)
	}
	if d.Format != "parquet" || d.Concurrency != 4 || d.ShardRows != 100_000 || d.BatchSize != 1024 || d.StartTimeout.D() != 10*time.Minute ||
		d.HeartbeatTimeout.D() != 5*time.Second || d.MaxAttempts != 2 || d.Dataset.Format != "csv" || d.PredictQueue() != DefaultGPUQueue {
		t.Errorf("defaults %+v", d)
	}
	if in.Format != "" || in.Concurrency != 0 {
		t.Error("WithDefaults changed its receiver")
	}
	d.PassThrough[0] = "changed"
	if in.PassThrough[0] != "id" {
		t.Error("WithDefaults shares PassThrough with its receiver")
	}
	if q := (BatchPredictInput{TaskQueue: "mine", UseGPU: true}).PredictQueue(); q != "mine" {
		t.Errorf("task_queue: %q", q)
	}
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	var back BatchPredictInput
	if err := json.Unmarshal(b, &back); err != nil || back.HeartbeatTimeout != d.HeartbeatTimeout || back.Dataset.URI != d.Dataset.URI {
		t.Errorf("round trip %s: %+v %v", b, back, err)
	}
}

// TestBatchPredictValidate: each bad field is named, with its value.
func TestBatchPredictValidate(t *testing.T) {
	t.Parallel()
	if err := validPredictInput().Validate(); err != nil {
		t.Fatalf("valid input: %v", err)
	}
	for _, tt := range []struct {
		mutate func(*BatchPredictInput)
		want   string
	}{
		{func(in *BatchPredictInput) { in.Dataset.URI = "" }, "dataset.uri"},
		{func(in *BatchPredictInput) { in.Dataset.URI = "fashion-mnist:test"; in.Dataset.Format = "idx" }, `dataset.format = "idx": BatchPredict reads tables`},
		{func(in *BatchPredictInput) { in.Dataset.Format = "images" }, "dataset.format"},
		{func(in *BatchPredictInput) { in.Checkpoint = "" }, "checkpoint = \"\": is required"},
		{func(in *BatchPredictInput) { in.Checkpoint = "runs/r/checkpoint_000001" }, "checkpoint = "},
		{func(in *BatchPredictInput) { in.Output = " " }, "output"},
		{func(in *BatchPredictInput) { in.Output = "gs://bucket/x" }, `output = "gs://bucket/x"`},
		{func(in *BatchPredictInput) { in.Output = "s3://bucket/images/preds" }, `must not be inside the dataset's directory "s3://bucket/images"`},
		{func(in *BatchPredictInput) { in.Output = "s3://bucket/images" }, "must not be inside"},
		{func(in *BatchPredictInput) { in.Format = "json" }, `format = "json": must be one of "parquet", "csv"`},
		{func(in *BatchPredictInput) { in.Concurrency = -1 }, "concurrency = -1"},
		{func(in *BatchPredictInput) { in.Concurrency = MaxPredictConcurrency + 1 }, "concurrency"},
		{func(in *BatchPredictInput) { in.ShardRows = -5 }, "shard_rows = -5"},
		{func(in *BatchPredictInput) { in.BatchSize = -1 }, "batch_size"},
		{func(in *BatchPredictInput) { in.HeartbeatTimeout = Duration(time.Second) }, "heartbeat_timeout = 1s: must be at least 3s"},
		{func(in *BatchPredictInput) { in.MaxAttempts = 1000 }, "max_attempts = 1000"},
		{func(in *BatchPredictInput) { in.StartTimeout = -1 }, "start_timeout"},
		{func(in *BatchPredictInput) { in.MaxAttempts = -2 }, "max_attempts = -2"},
		{func(in *BatchPredictInput) { in.PassThrough = []string{"id", "id"} }, `pass_through = [id id]: names "id" twice`},
		{func(in *BatchPredictInput) { in.Outputs = []string{""} }, "outputs"},
	} {
		in := validPredictInput()
		tt.mutate(&in)
		err := in.Validate()
		var ie *InvalidBatchPredictInputError
		if !errors.As(err, &ie) || !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), "invalid BatchPredict input: ") {
			t.Errorf("error %v, want an InvalidBatchPredictInputError saying %q", err, tt.want)
		}
	}
	// An output beside the dataset, or a local one under another
	// directory, is fine.
	for _, out := range []string{"s3://bucket/images-out", "s3://other/images/x", "/data/out"} {
		in := validPredictInput()
		in.Output = out
		if err := in.Validate(); err != nil {
			t.Errorf("output %s: %v", out, err)
		}
	}
	in := validPredictInput()
	in.Dataset.URI, in.Output = "file:///data/in/", "/data/in/preds"
	if err := in.Validate(); err == nil {
		t.Error("a local output inside a file:// dataset directory passed")
	}
}

func TestPredictShardRowsAndPartName(t *testing.T) {
	t.Parallel()
	if r := (PredictShardSpec{Lo: 10, Hi: 40}).Rows(); r != 30 {
		t.Errorf("rows %d", r)
	}
	if r := (PredictShardSpec{Hi: -1}).Rows(); r != -1 {
		t.Errorf("rows of a CSV shard %d", r)
	}
	if n := PartName(7, "csv"); n != "part-00007.csv" {
		t.Errorf("part name %q", n)
	}
}
