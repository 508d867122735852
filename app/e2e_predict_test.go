package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/app"
	"github.com/tempotrain/tempotrain/builtin"
	"github.com/tempotrain/tempotrain/compute"
	"github.com/tempotrain/tempotrain/data/format"
	"github.com/tempotrain/tempotrain/predict"
	"github.com/tempotrain/tempotrain/storage"
	"github.com/tempotrain/tempotrain/storage/miniotest"
	"github.com/tempotrain/tempotrain/train"
	"github.com/tempotrain/tempotrain/train/trainrt"
)

// slowStateFormat is the built-in image classifiers' checkpoint format,
// slowed down: every Predict waits slowPredict first, so that a test can
// kill a worker in the middle of a shard. Registered in every process of
// the test binary, the worker processes included.
const (
	slowStateFormat = "e2e-slow-state"
	slowPredict     = 150 * time.Millisecond
)

// sumFormat is a table model's checkpoint format: inputs "a" and "b"
// (FP32 columns), output "sum" = a + b.
const sumFormat = "e2e-sum"

type sumModel struct{}

func (sumModel) Metadata() predict.Metadata {
	return predict.Metadata{Name: "sum", Format: sumFormat,
		Inputs:  []predict.TensorSpec{{Name: "a", Datatype: predict.FP32, Shape: []int{-1}}, {Name: "b", Datatype: predict.FP32, Shape: []int{-1}}},
		Outputs: []predict.TensorSpec{{Name: "sum", Datatype: predict.FP32, Shape: []int{-1}}}}
}

func (m sumModel) Predict(_ context.Context, b predict.Batch) ([]predict.Tensor, error) {
	if err := predict.Check(m.Metadata().Inputs, b); err != nil {
		return nil, err
	}
	x, _ := b.Input("a")
	y, _ := b.Input("b")
	out := predict.Tensor{Name: "sum", Datatype: predict.FP32, Shape: []int{x.Rows()}, FP32: make([]float32, x.Rows())}
	for i := range out.FP32 {
		out.FP32[i] = x.FP32[i] + y.FP32[i]
	}
	return []predict.Tensor{out}, nil
}

func (sumModel) Close() error { return nil }

func init() {
	predict.MustRegister(sumFormat, func(context.Context, string, map[string]string) (predict.Predictor, error) { return sumModel{}, nil })
	predict.MustRegister(slowStateFormat, func(ctx context.Context, dir string, meta map[string]string) (predict.Predictor, error) {
		m := maps.Clone(meta)
		m[predict.MetaFormat] = predict.StateFormat
		p, err := predict.LoadDir(ctx, dir, m)
		if err != nil {
			return nil, err
		}
		return slowPredictor{p}, nil
	})
}

type slowPredictor struct{ predict.Predictor }

func (s slowPredictor) Predict(ctx context.Context, b predict.Batch) ([]predict.Tensor, error) {
	select {
	case <-time.After(slowPredict):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return s.Predictor.Predict(ctx, b)
}

// committer commits a run's checkpoint twice: as it is (seq 1) and in the
// slow format (seq 2).
type committer struct {
	run *storage.Run
	err error
}

func (c *committer) Report(ctx context.Context, _ train.Metrics, ck *train.Checkpoint) error {
	if ck == nil || c.err != nil {
		return c.err
	}
	for seq, format := range map[int]string{1: ck.Meta[predict.MetaFormat], 2: slowStateFormat} {
		meta := maps.Clone(ck.Meta)
		meta[predict.MetaFormat] = format
		if _, err := c.run.CommitCheckpoint(ctx, seq, ck.Dir, storage.Manifest{Seq: seq, Attempt: 1, Meta: meta}); err != nil {
			c.err = err
		}
	}
	return c.err
}

// TestE2EBatchPredictWorkerKilled: BatchPredict on the dev server over
// Parquet in MinIO (3000 Fashion-MNIST test images as 784 pixel columns and
// an id, two files, five row groups), its shards on a worker process that
// is SIGKILLed in the middle of a shard (its heartbeats say some rows are
// done, not all), a second worker process taking over: the run succeeds,
// the output holds exactly one file per shard and the manifest, every
// input row once with its id, and the classes and probabilities a direct
// Predict of the same images gives.
func TestE2EBatchPredictWorkerKilled(t *testing.T) {
	if _, err := os.Stat(filepath.Join(format.DefaultFashionMNISTDir, "t10k-images-idx3-ubyte.gz")); err != nil {
		if os.Getenv("TEMPOTRAIN_REQUIRE_FASHION_MNIST") == "1" {
			t.Fatalf("needs Fashion-MNIST: %v", err)
		}
		t.Skipf("needs Fashion-MNIST (apt-get install dataset-fashion-mnist): %v", err)
	}
	mio := miniotest.Start(t)
	bucket := mio.CreateBucket(t, "")
	mio.SetEnv(t) // for this process and the worker processes it starts
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// A model: mnist-mlp, one epoch on 1024 images, committed to MinIO.
	runs, err := storage.Open(ctx, "s3://"+bucket+"/runs")
	if err != nil {
		t.Fatal(err)
	}
	com := &committer{run: storage.NewRun(runs, "mlp")}
	tc := trainrt.NewContext(ctx, trainrt.ContextInfo{RunName: "mlp", Attempt: 1, WorldSize: 1, LocalWorldSize: 1,
		Config: []byte(`{"epochs":1,"train_limit":1024,"test_limit":64,"batch_size":64,"seed":5}`), ScratchDir: t.TempDir(), Device: -1}, nil, com, nil)
	// Training sets OpenBLAS's threads; the direct Predict below runs with
	// the default, as the worker processes do (a GEMM's float results
	// depend on its threads and on its batch's size).
	threads := compute.Threads()
	err = builtin.Run(ctx, tc, nil, "mlp", builtin.Options{})
	compute.SetThreads(threads)
	if err != nil {
		t.Fatal(err)
	}
	if com.err != nil {
		t.Fatal(com.err)
	}
	realURI, slowURI := com.run.CheckpointURI(1), com.run.CheckpointURI(2)

	// The input: ids 7000.., 784 float pixel columns; a.parquet 1800 rows,
	// b.parquet 1200, row groups of 600.
	const rows, rowGroup = 3000, 600
	ds, err := format.LoadFashionMNIST(format.DefaultFashionMNISTDir, "t10k")
	if err != nil {
		t.Fatal(err)
	}
	ds = ds.Subset(rows)
	cols := []format.WriteColumn{{Name: "id", Type: format.Int64}}
	for k := range 784 {
		cols = append(cols, format.WriteColumn{Name: fmt.Sprintf("px%03d", k), Type: format.Float32})
	}
	in, err := storage.Open(ctx, "s3://"+bucket+"/images")
	if err != nil {
		t.Fatal(err)
	}
	for _, part := range []struct {
		name   string
		lo, hi int
	}{{"a.parquet", 0, 1800}, {"b.parquet", 1800, rows}} {
		var buf bytes.Buffer
		w, err := format.NewTableWriter(&buf, "parquet", cols, format.WriterOptions{RowGroupRows: rowGroup})
		if err != nil {
			t.Fatal(err)
		}
		r := &format.Rows{N: part.hi - part.lo, Cols: make([]format.Values, len(cols))}
		for i := part.lo; i < part.hi; i++ {
			r.Cols[0].I64 = append(r.Cols[0].I64, int64(7000+i))
			for k := range 784 {
				r.Cols[1+k].F32 = append(r.Cols[1+k].F32, float32(ds.Images[i*784+k]))
			}
		}
		if err := w.Write(r); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if err := in.Put(ctx, part.name, bytes.NewReader(buf.Bytes()), int64(buf.Len())); err != nil {
			t.Fatal(err)
		}
	}

	// The workflow in this process; shards on worker process A.
	tq, rq := startWorkerOn(t, cl, true, 0)
	a := startChild(t, "predict-a", srv.Address, false, 2)
	input := api.BatchPredictInput{
		Dataset:    api.DatasetSpec{URI: "s3://" + bucket + "/images/"},
		Checkpoint: slowURI, Output: "s3://" + bucket + "/predictions", TaskQueue: rq,
		Concurrency: 2, PassThrough: []string{"id"}, ShardRows: rowGroup, BatchSize: 50,
		HeartbeatTimeout: api.Duration(3 * time.Second), MaxAttempts: 3,
	}
	start := time.Now()
	run, err := cl.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "predict-" + bucket, TaskQueue: tq}, api.BatchPredictWorkflowType, input)
	if err != nil {
		t.Fatal(err)
	}

	// Kill A once a shard's heartbeat says it is part-way.
	killed := waitMidShard(t, ctx, run.GetID())
	a.Kill()
	t.Logf("killed worker A at %.1fs: shard %d had %d of %d rows done", time.Since(start).Seconds(), killed.Shard, killed.Rows, killed.Total)
	startChild(t, "predict-b", srv.Address, false, 2)

	var res api.BatchPredictResult
	if err := run.Get(ctx, &res); err != nil {
		dumpWorkflow(t, cl, run.GetID())
		t.Fatal(err)
	}
	t.Logf("BatchPredict: %d shards, %d rows in %.1fs, attempts %v", res.Shards, res.RowsOut, res.Seconds, res.Attempts)
	if res.Shards != 5 || res.Done != 5 || res.RowsIn != rows || res.RowsOut != rows || len(res.Files) != 5 || res.Manifest != input.Output+"/_SUCCESS" {
		t.Errorf("result %+v", res)
	}
	if res.Attempts[killed.Shard] < 2 || res.Retried < 1 {
		t.Errorf("attempts %v: shard %d, cut mid-way, must have run again", res.Attempts, killed.Shard)
	}

	// Exactly one file per shard, and the manifest; nothing else.
	out, err := storage.Open(ctx, input.Output)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := out.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, o := range objs {
		names = append(names, o.Key)
	}
	if want := []string{"_SUCCESS", "part-00000.parquet", "part-00001.parquet", "part-00002.parquet", "part-00003.parquet", "part-00004.parquet"}; !slices.Equal(names, want) {
		t.Fatalf("output holds %v, want %v", names, want)
	}
	rc, err := out.Get(ctx, api.PredictManifestName)
	if err != nil {
		t.Fatal(err)
	}
	var man api.BatchPredictManifest
	err = json.NewDecoder(rc).Decode(&man)
	rc.Close()
	if err != nil || man.RowsOut != rows || len(man.Shards) != 5 || man.Checkpoint != slowURI {
		t.Errorf("manifest %+v (%v)", man, err)
	}

	// Every row once, with its id; the values of a direct Predict.
	p, err := predict.Load(ctx, realURI)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	// In the batches the shards predicted (50 rows, from a multiple of 50).
	probs, classes := make([]float32, 0, rows*10), make([]int64, 0, rows)
	for lo := 0; lo < rows; lo += input.BatchSize {
		n := min(input.BatchSize, rows-lo)
		px := make([]float32, n*784)
		for i, v := range ds.Images[lo*784 : (lo+n)*784] {
			px[i] = float32(v)
		}
		y, err := p.Predict(ctx, predict.Batch{Inputs: []predict.Tensor{{Name: "pixels", Datatype: predict.FP32, Shape: []int{n, 1, 28, 28}, FP32: px}}})
		if err != nil {
			t.Fatal(err)
		}
		probs, classes = append(probs, y[0].FP32...), append(classes, y[1].INT64...)
	}
	tbl, err := format.OpenTable(ctx, api.DatasetSpec{URI: input.Output + "/"})
	if err != nil {
		t.Fatal(err)
	}
	if tbl.Rows() != rows {
		t.Errorf("the output has %d rows, the input %d", tbl.Rows(), rows)
	}
	readCols := []format.ColumnInfo{{Name: "id", Kind: format.Categorical}, {Name: "class", Kind: format.Categorical}}
	for k := range 10 {
		readCols = append(readCols, format.ColumnInfo{Name: fmt.Sprintf("probabilities_%d", k), Kind: format.Numeric})
	}
	seen := make([]bool, rows)
	for f, tf := range tbl.Files() {
		if tf.Rows != man.Shards[f].Rows {
			t.Errorf("%s: %d rows, the manifest says %d", tf.URI, tf.Rows, man.Shards[f].Rows)
		}
		_, err := tbl.Read(ctx, f, 0, -1, readCols, 1000, func(b *format.Batch) error {
			for r := range b.N {
				id, err := strconv.Atoi(b.Dicts[0].String(b.Cat[0][r]))
				if err != nil {
					return err
				}
				i := id - 7000
				if i < 0 || i >= rows || seen[i] {
					return fmt.Errorf("id %d out of range or seen twice", id)
				}
				seen[i] = true
				class, _ := strconv.ParseInt(b.Dicts[1].String(b.Cat[1][r]), 10, 64)
				if class != classes[i] {
					return fmt.Errorf("id %d: class %d, a direct Predict says %d", id, class, classes[i])
				}
				for k := range 10 {
					if got, want := b.Num[2+k][r], probs[i*10+k]; math.Float32bits(got) != math.Float32bits(want) {
						return fmt.Errorf("id %d: probability %d = %v, a direct Predict says %v", id, k, got, want)
					}
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if i := slices.Index(seen, false); i >= 0 {
		t.Errorf("id %d is missing from the output", 7000+i)
	}
}

// waitMidShard waits for a PredictShard of the workflow whose heartbeat
// says it has done some of its rows, not all, and returns that progress.
func waitMidShard(t *testing.T, ctx context.Context, workflowID string) api.PredictProgress {
	t.Helper()
	for ctx.Err() == nil {
		d, err := cl.DescribeWorkflowExecution(ctx, workflowID, "")
		if err == nil {
			for _, pa := range d.GetPendingActivities() {
				if pa.GetActivityType().GetName() != api.ActivityPredictShard || pa.GetHeartbeatDetails() == nil {
					continue
				}
				var p api.PredictProgress
				if json.Unmarshal(pa.GetHeartbeatDetails().GetPayloads()[0].GetData(), &p) == nil && p.Rows > 0 && p.Rows < p.Total {
					return p
				}
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	dumpWorkflow(t, cl, workflowID)
	t.Fatal("no shard heartbeated part of its rows")
	return api.PredictProgress{}
}

// TestE2EBatchPredictOwnQueueAndBadInput: a worker with predict slots on a
// queue of their own runs a BatchPredict over CSV; an input whose table
// lacks a column the model takes, and a checkpoint of an unknown format,
// fail the run at once with a non-retryable InvalidInput naming them.
func TestE2EBatchPredictOwnQueueAndBadInput(t *testing.T) {
	if _, err := app.StartWorker(cl, app.WorkerOptions{RankSlots: 1, PredictSlots: 1}); err == nil || !strings.Contains(err.Error(), "PredictQueue") {
		t.Errorf("predict slots on the rank queue: %v", err)
	}
	pq := "pq-" + t.Name()
	tq, _ := startWorkerOn(t, cl, true, 0, func(o *app.WorkerOptions) { o.PredictSlots, o.PredictQueue = 2, pq })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	commit := func(format string) string {
		src := t.TempDir()
		if err := os.WriteFile(filepath.Join(src, "weights"), []byte("none"), 0o644); err != nil {
			t.Fatal(err)
		}
		b, err := storage.Open(ctx, filepath.Join(dir, "runs"))
		if err != nil {
			t.Fatal(err)
		}
		run := storage.NewRun(b, format)
		if _, err := run.CommitCheckpoint(ctx, 1, src, storage.Manifest{Seq: 1, Attempt: 1, Meta: map[string]string{predict.MetaFormat: format}}); err != nil {
			t.Fatal(err)
		}
		return run.CheckpointURI(1)
	}
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("in/t.csv", "id,a,b\nx1,1,2\nx2,0.5,0.25\nx3,-1,1\n")
	bad := write("bad/t.csv", "id,a,c\nx1,1,2\n")
	start := func(in api.BatchPredictInput) (api.BatchPredictResult, error) {
		in.TaskQueue = pq
		run, err := cl.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: tq}, api.BatchPredictWorkflowType, in)
		if err != nil {
			t.Fatal(err)
		}
		var res api.BatchPredictResult
		return res, run.Get(ctx, &res)
	}
	res, err := start(api.BatchPredictInput{Dataset: api.DatasetSpec{URI: good}, Checkpoint: commit(sumFormat), Output: filepath.Join(dir, "out"), Format: "csv", PassThrough: []string{"id"}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(dir, "out", "part-00000.csv"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "id,sum\nx1,3\nx2,0.75\nx3,0\n"; string(got) != want || res.RowsOut != 3 || res.Shards != 1 {
		t.Errorf("output %q (result %+v), want %q", got, res, want)
	}

	for _, tt := range []struct {
		name  string
		in    api.BatchPredictInput
		wants []string
	}{
		{"missing column", api.BatchPredictInput{Dataset: api.DatasetSpec{URI: bad}, Checkpoint: commit(sumFormat), Output: filepath.Join(dir, "out2")}, []string{`column "b"`, "lacks", `["id" "a" "c"]`}},
		{"unknown format", api.BatchPredictInput{Dataset: api.DatasetSpec{URI: good}, Checkpoint: commit("e2e-unknown"), Output: filepath.Join(dir, "out3")}, []string{"unknown checkpoint format", `"e2e-unknown"`}},
		{"not committed", api.BatchPredictInput{Dataset: api.DatasetSpec{URI: good}, Checkpoint: filepath.Join(dir, "runs", "none", "checkpoint_000001"), Output: filepath.Join(dir, "out4")}, []string{"not a committed checkpoint"}},
	} {
		began := time.Now()
		_, err := start(tt.in)
		var app *temporal.ApplicationError
		if !errors.As(err, &app) || app.Type() != api.ErrInvalidInput.String() || !app.NonRetryable() {
			t.Errorf("%s: error %v, want a non-retryable InvalidInput", tt.name, err)
			continue
		}
		for _, s := range tt.wants {
			if !strings.Contains(app.Message(), s) {
				t.Errorf("%s: error %q does not say %q", tt.name, app.Message(), s)
			}
		}
		// Retried, it would back off for minutes (10 attempts); a loaded
		// CI machine has shown one 20 s stall (two workflow task
		// timeouts), so the bound is generous.
		if d := time.Since(began); d > 45*time.Second {
			t.Errorf("%s: failed after %s: a bad input must not be retried", tt.name, d)
		}
	}
}
