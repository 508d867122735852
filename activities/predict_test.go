package activities

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/data/format"
	"github.com/tempotrain/tempotrain/predict"
	"github.com/tempotrain/tempotrain/storage"
)

// testTableFormat is the format of the fake table model's checkpoints: a
// file "bias" holding a number. The model takes "x" FP32 and "city" BYTES;
// it gives "score" = 2x + bias, "probs" [-1, 2] = (x, bias) and "label" =
// the city upper-cased.
const testTableFormat = "activities-test-table"

var (
	tableLoads atomic.Int32
	// onPredict, when set, is called before every Predict of the fake.
	onPredict atomic.Pointer[func(ctx context.Context) error]
)

func init() {
	predict.MustRegister(testTableFormat, func(_ context.Context, dir string, _ map[string]string) (predict.Predictor, error) {
		b, err := os.ReadFile(filepath.Join(dir, "bias"))
		if err != nil {
			return nil, err
		}
		bias, err := strconv.ParseFloat(strings.TrimSpace(string(b)), 32)
		if err != nil {
			return nil, err
		}
		tableLoads.Add(1)
		return &tableModel{bias: float32(bias)}, nil
	})
}

type tableModel struct {
	bias   float32
	closed atomic.Bool
}

func (m *tableModel) Metadata() predict.Metadata {
	return predict.Metadata{Name: "table", Format: testTableFormat,
		Inputs: []predict.TensorSpec{{Name: "x", Datatype: predict.FP32, Shape: []int{-1}}, {Name: "city", Datatype: predict.BYTES, Shape: []int{-1}}},
		Outputs: []predict.TensorSpec{
			{Name: "score", Datatype: predict.FP32, Shape: []int{-1}},
			{Name: "probs", Datatype: predict.FP32, Shape: []int{-1, 2}},
			{Name: "label", Datatype: predict.BYTES, Shape: []int{-1}},
		}}
}

func (m *tableModel) Predict(ctx context.Context, b predict.Batch) ([]predict.Tensor, error) {
	if f := onPredict.Load(); f != nil {
		if err := (*f)(ctx); err != nil {
			return nil, err
		}
	}
	if err := predict.Check(m.Metadata().Inputs, b); err != nil {
		return nil, err
	}
	x, _ := b.Input("x")
	city, _ := b.Input("city")
	n := x.Rows()
	score := predict.Tensor{Name: "score", Datatype: predict.FP32, Shape: []int{n}, FP32: make([]float32, n)}
	probs := predict.Tensor{Name: "probs", Datatype: predict.FP32, Shape: []int{n, 2}, FP32: make([]float32, 2*n)}
	label := predict.Tensor{Name: "label", Datatype: predict.BYTES, Shape: []int{n}, Bytes: make([]string, n)}
	for i, v := range x.FP32 {
		score.FP32[i] = 2*v + m.bias
		probs.FP32[2*i], probs.FP32[2*i+1] = v, m.bias
		label.Bytes[i] = strings.ToUpper(city.Bytes[i])
	}
	return []predict.Tensor{score, probs, label}, nil
}

func (m *tableModel) Close() error { m.closed.Store(true); return nil }

// commitModel commits a fake model's checkpoint under dir and returns its
// URI; meta's format is testTableFormat unless format says otherwise.
func commitModel(t *testing.T, dir string, seq int, bias float64, format string) string {
	t.Helper()
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "bias"), []byte(fmt.Sprint(bias)), 0o644); err != nil {
		t.Fatal(err)
	}
	b, err := storage.Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	run := storage.NewRun(b, "model")
	if _, err := run.CommitCheckpoint(context.Background(), seq, src, storage.Manifest{Seq: seq, Attempt: 1, Meta: map[string]string{predict.MetaFormat: format}}); err != nil {
		t.Fatal(err)
	}
	return run.CheckpointURI(seq)
}

// inputRows is the input table: row i has id 10^12+i, x i/8 (missing at
// every 13th row), city "c{i%4}", and a column the model does not read.
func inputRow(i int) (id int64, x float64, city string) {
	x = float64(i) / 8
	if i%13 == 5 {
		x = math.NaN()
	}
	return int64(1e12) + int64(i), x, fmt.Sprintf("c%d", i%4)
}

// writeInput writes rows [lo, hi) as Parquet in row groups of rg rows.
func writeInput(t *testing.T, path string, lo, hi int, rg int64) {
	t.Helper()
	var buf bytes.Buffer
	w, err := format.NewTableWriter(&buf, "parquet", []format.WriteColumn{
		{Name: "id", Type: format.Int64}, {Name: "x", Type: format.Float64, Nullable: true}, {Name: "city", Type: format.String}, {Name: "other", Type: format.Float32},
	}, format.WriterOptions{RowGroupRows: rg})
	if err != nil {
		t.Fatal(err)
	}
	r := &format.Rows{N: hi - lo, Cols: make([]format.Values, 4)}
	r.Cols[1].Null = make([]bool, r.N)
	for i := lo; i < hi; i++ {
		id, x, city := inputRow(i)
		r.Cols[0].I64 = append(r.Cols[0].I64, id)
		r.Cols[1].F64 = append(r.Cols[1].F64, x)
		r.Cols[1].Null[i-lo] = math.IsNaN(x)
		r.Cols[2].Str = append(r.Cols[2].Str, city)
		r.Cols[3].F32 = append(r.Cols[3].F32, 1)
	}
	if err := w.Write(r); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// predictEnv runs the BatchPredict activities of a in the SDK's activity
// test environment; ctx, when cancelled, cancels the activity.
func predictEnv(a *Activities, ctx context.Context) *testsuite.TestActivityEnvironment {
	var s testsuite.WorkflowTestSuite
	s.SetLogger(log.NewStructuredLogger(quiet))
	env := s.NewTestActivityEnvironment()
	if ctx != nil {
		env.SetWorkerOptions(worker.Options{BackgroundActivityContext: ctx})
	}
	env.RegisterActivityWithOptions(a.PlanBatchPredict, activity.RegisterOptions{Name: api.ActivityPlanBatchPredict})
	env.RegisterActivityWithOptions(a.PredictShard, activity.RegisterOptions{Name: api.ActivityPredictShard})
	env.RegisterActivityWithOptions(a.CommitBatchPredict, activity.RegisterOptions{Name: api.ActivityCommitBatchPredict})
	return env
}

type predictFixture struct {
	a      *Activities
	in     api.BatchPredictInput
	inDir  string
	outDir string
	beats  []api.PredictProgress
	mu     sync.Mutex
}

func newPredictFixture(t *testing.T) *predictFixture {
	f := &predictFixture{a: newTestActivities(t, nil), inDir: t.TempDir(), outDir: filepath.Join(t.TempDir(), "out")}
	t.Cleanup(func() { f.a.Close() })
	writeInput(t, filepath.Join(f.inDir, "a.parquet"), 0, 100, 40)
	writeInput(t, filepath.Join(f.inDir, "b.parquet"), 100, 130, 40)
	f.in = api.BatchPredictInput{Dataset: api.DatasetSpec{URI: f.inDir + "/"}, Checkpoint: commitModel(t, t.TempDir(), 1, 0.5, testTableFormat),
		Output: f.outDir, PassThrough: []string{"id"}, ShardRows: 30, BatchSize: 7}
	f.a.recordHeartbeat = func(ctx context.Context, details ...any) {
		activity.RecordHeartbeat(ctx, details...)
		var p api.PredictProgress
		if err := roundTrip(details[0], &p); err == nil {
			f.mu.Lock()
			f.beats = append(f.beats, p)
			f.mu.Unlock()
		}
	}
	return f
}

func (f *predictFixture) plan(t *testing.T, env *testsuite.TestActivityEnvironment) api.PredictPlan {
	t.Helper()
	v, err := env.ExecuteActivity(api.ActivityPlanBatchPredict, api.PredictPlanInput{Input: f.in})
	if err != nil {
		t.Fatal(err)
	}
	var plan api.PredictPlan
	if err := v.Get(&plan); err != nil {
		t.Fatal(err)
	}
	return plan
}

func (f *predictFixture) shard(env *testsuite.TestActivityEnvironment, plan api.PredictPlan, i int) (api.PredictShardOutput, error) {
	sh := plan.Shards[i]
	v, err := env.ExecuteActivity(api.ActivityPredictShard, api.PredictShardInput{Input: f.in, DatasetFormat: plan.DatasetFormat,
		File: plan.Files[sh.File], Shard: sh, Columns: plan.Columns})
	if err != nil {
		return api.PredictShardOutput{}, err
	}
	var out api.PredictShardOutput
	return out, v.Get(&out)
}

// outputRows reads an output file back: id, score, probs_0, probs_1, label.
func outputRows(t *testing.T, path string) (ids []int64, score, p0, p1 []float32, labels []string) {
	t.Helper()
	tbl, err := format.OpenTable(context.Background(), api.DatasetSpec{URI: path})
	if err != nil {
		t.Fatal(err)
	}
	cols := []format.ColumnInfo{{Name: "id", Kind: format.Categorical}, {Name: "score", Kind: format.Numeric}, {Name: "probs_0", Kind: format.Numeric}, {Name: "probs_1", Kind: format.Numeric}, {Name: "label", Kind: format.Categorical}}
	_, err = tbl.Read(context.Background(), 0, 0, -1, cols, 1000, func(b *format.Batch) error {
		for i := range b.N {
			id, err := strconv.ParseInt(b.Dicts[0].String(b.Cat[0][i]), 10, 64)
			if err != nil {
				return err
			}
			ids = append(ids, id)
			score = append(score, b.Num[1][i])
			p0 = append(p0, b.Num[2][i])
			p1 = append(p1, b.Num[3][i])
			labels = append(labels, b.Dicts[4].String(b.Cat[4][i]))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return
}

func same(a, b float32) bool { return a == b || math.IsNaN(float64(a)) && math.IsNaN(float64(b)) }

// TestPredictShardsEqualDirectPredict: the plan cuts the input into shards
// of at most shard_rows rows along row groups; each shard's committed file
// holds its rows, the id passed through, and exactly what a direct Predict
// of those rows gives; the manifest, written last, lists every file and
// deletes a stale part of an earlier run. The predictor is loaded once.
func TestPredictShardsEqualDirectPredict(t *testing.T) {
	f := newPredictFixture(t)
	env := predictEnv(f.a, nil)
	loads := tableLoads.Load()
	plan := f.plan(t, env)
	var ranges []string
	for _, sh := range plan.Shards {
		ranges = append(ranges, fmt.Sprintf("%d:[%d,%d)", sh.File, sh.Lo, sh.Hi))
	}
	// a.parquet: row groups 40, 40, 20; b.parquet: 30 rows in one.
	if want := []string{"0:[0,30)", "0:[30,40)", "0:[40,70)", "0:[70,100)", "1:[0,30)"}; !slices.Equal(ranges, want) {
		t.Errorf("shards %v, want %v", ranges, want)
	}
	var cols []string
	for _, c := range plan.Columns {
		cols = append(cols, c.Name+":"+c.Type)
	}
	if !slices.Equal(cols, []string{"id:int64", "score:float32", "probs_0:float32", "probs_1:float32", "label:string"}) || plan.RowsIn != 130 || plan.Model != "table" || plan.DatasetFormat != "parquet" {
		t.Errorf("plan columns %v, rows %d, model %q, format %q", cols, plan.RowsIn, plan.Model, plan.DatasetFormat)
	}
	// An earlier unfinished run left a part this run does not have, and a
	// file that is not a part.
	if err := os.MkdirAll(f.outDir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"part-00009.parquet", "notes.txt"} {
		if err := os.WriteFile(filepath.Join(f.outDir, n), []byte("old"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Batches slow enough for heartbeats (every 5ms here) to see rows.
	slow := func(context.Context) error { time.Sleep(3 * time.Millisecond); return nil }
	onPredict.Store(&slow)
	defer onPredict.Store(nil)
	var rows, bytes []int64
	for i := range plan.Shards {
		out, err := f.shard(env, plan, i)
		if err != nil {
			t.Fatal(err)
		}
		sh := plan.Shards[i]
		if out.Rows != sh.Rows() || out.Attempt != 1 || out.File != filepath.Join(f.outDir, api.PartName(i, "parquet")) {
			t.Errorf("shard %d: %+v", i, out)
		}
		rows, bytes = append(rows, out.Rows), append(bytes, out.Bytes)
		ids, score, p0, p1, labels := outputRows(t, out.File)
		if int64(len(ids)) != sh.Rows() {
			t.Fatalf("shard %d: file holds %d rows, the shard %d", i, len(ids), sh.Rows())
		}
		base := int(sh.Lo) + 100*sh.File
		for k := range ids {
			id, x, city := inputRow(base + k)
			want := 2*float32(x) + 0.5
			if ids[k] != id || !same(score[k], want) || !same(p0[k], float32(x)) || p1[k] != 0.5 || labels[k] != strings.ToUpper(city) {
				t.Fatalf("shard %d row %d: (%d, %v, %v, %v, %q), want (%d, %v, %v, 0.5, %q)", i, k, ids[k], score[k], p0[k], p1[k], labels[k], id, want, float32(x), strings.ToUpper(city))
			}
		}
	}
	if got := tableLoads.Load() - loads; got != 1 {
		t.Errorf("the predictor was loaded %d times for a plan and %d shards, want once", got, len(plan.Shards))
	}
	f.mu.Lock()
	sawRows := slices.ContainsFunc(f.beats, func(p api.PredictProgress) bool { return p.Rows > 0 && p.Total > 0 })
	f.mu.Unlock()
	if !sawRows {
		t.Error("no heartbeat carried rows done")
	}

	created := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	if _, err := env.ExecuteActivity(api.ActivityCommitBatchPredict, api.CommitPredictInput{Input: f.in, Plan: plan, Rows: rows, Bytes: bytes, Created: created}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(f.outDir, api.PredictManifestName))
	if err != nil {
		t.Fatal(err)
	}
	var man api.BatchPredictManifest
	if err := json.Unmarshal(b, &man); err != nil {
		t.Fatal(err)
	}
	if man.RowsIn != 130 || man.RowsOut != 130 || len(man.Shards) != 5 || man.Shards[4].File != "part-00004.parquet" ||
		man.Shards[4].Input != filepath.Join(f.inDir, "b.parquet") || man.Checkpoint != f.in.Checkpoint || !man.Created.Equal(created) || len(man.Columns) != 5 {
		t.Errorf("manifest %s", b)
	}
	names, _ := filepath.Glob(filepath.Join(f.outDir, "*"))
	for i := range names {
		names[i] = filepath.Base(names[i])
	}
	want := []string{"_SUCCESS", "notes.txt", "part-00000.parquet", "part-00001.parquet", "part-00002.parquet", "part-00003.parquet", "part-00004.parquet"}
	if !slices.Equal(names, want) {
		t.Errorf("output holds %v, want %v", names, want)
	}
	// The output reads back whole as a dataset.
	tbl, err := format.OpenTable(context.Background(), api.DatasetSpec{URI: f.outDir + "/", Format: "parquet"})
	if err != nil {
		t.Fatal(err)
	}
	if tbl.Rows() != 130 {
		t.Errorf("the output reads as %d rows", tbl.Rows())
	}
}

// TestPredictShardCancelledLeavesNoFile: a shard cancelled mid-way (after
// its first batch) returns the cancellation and leaves no file under the
// output, and nothing in its scratch directory.
func TestPredictShardCancelledLeavesNoFile(t *testing.T) {
	f := newPredictFixture(t)
	plan := f.plan(t, predictEnv(f.a, nil))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var calls atomic.Int32
	hook := func(pctx context.Context) error {
		if calls.Add(1) == 2 {
			cancel()
			<-pctx.Done()
			return pctx.Err()
		}
		return nil
	}
	onPredict.Store(&hook)
	defer onPredict.Store(nil)
	_, err := f.shard(predictEnv(f.a, ctx), plan, 0)
	var canceled *temporal.CanceledError
	if err == nil || !(errors.As(err, &canceled) || strings.Contains(err.Error(), "canceled")) {
		t.Fatalf("cancelled shard: error %v", err)
	}
	if calls.Load() != 2 {
		t.Errorf("%d Predict calls, want the shard stopped at the second", calls.Load())
	}
	left, _ := filepath.Glob(filepath.Join(f.outDir, "*"))
	hidden, _ := filepath.Glob(filepath.Join(f.outDir, ".*"))
	if len(left)+len(hidden) != 0 {
		t.Errorf("a cancelled shard left %v %v in the output", left, hidden)
	}
	scratch, _ := os.ReadDir(f.a.o.ScratchDir)
	if len(scratch) != 0 {
		t.Errorf("a cancelled shard left %d files in its scratch dir", len(scratch))
	}
}

// TestPredictShardRetryReplacesItsFile: a shard run again (a retry after
// its worker died) replaces its file: one file, the same bytes.
func TestPredictShardRetryReplacesItsFile(t *testing.T) {
	f := newPredictFixture(t)
	f.in.Format = "csv"
	env := predictEnv(f.a, nil)
	plan := f.plan(t, env)
	var first []byte
	for k := range 2 {
		out, err := f.shard(env, plan, 2)
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(out.File)
		if err != nil {
			t.Fatal(err)
		}
		if k == 0 {
			first = b
		} else if !bytes.Equal(b, first) {
			t.Error("the retried shard wrote other bytes")
		}
	}
	names, _ := filepath.Glob(filepath.Join(f.outDir, "*"))
	hidden, _ := filepath.Glob(filepath.Join(f.outDir, ".*"))
	if len(names) != 1 || filepath.Base(names[0]) != "part-00002.csv" || len(hidden) != 0 {
		t.Errorf("output holds %v %v, want part-00002.csv alone", names, hidden)
	}
	if !strings.HasPrefix(string(first), "id,score,probs_0,probs_1,label\n1000000000040,") {
		t.Errorf("CSV output starts %q", first[:min(len(first), 60)])
	}
}

// TestPlanBatchPredictBadInput: a checkpoint that does not exist, is not
// committed or has an unknown format, a dataset without a column the model
// takes, and an output already committed fail non-retryably with an
// InvalidInput error saying so.
func TestPlanBatchPredictBadInput(t *testing.T) {
	f := newPredictFixture(t)
	uncommitted := filepath.Join(t.TempDir(), "model", "checkpoint_000004")
	if err := os.MkdirAll(uncommitted, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(uncommitted, "bias"), []byte("1"), 0o644); err != nil {
		t.Fatal(err)
	}
	noCity := t.TempDir()
	var buf bytes.Buffer
	w, _ := format.NewTableWriter(&buf, "csv", []format.WriteColumn{{Name: "id", Type: format.Int64}, {Name: "x", Type: format.Float32}}, format.WriterOptions{})
	_ = w.Write(&format.Rows{N: 1, Cols: []format.Values{{I64: []int64{1}}, {F32: []float32{2}}}})
	_ = w.Close()
	if err := os.WriteFile(filepath.Join(noCity, "t.csv"), buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	committed := t.TempDir()
	if err := os.WriteFile(filepath.Join(committed, api.PredictManifestName), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name  string
		edit  func(*api.BatchPredictInput)
		wants []string
	}{
		{"no such checkpoint", func(in *api.BatchPredictInput) { in.Checkpoint = filepath.Join(t.TempDir(), "r", "checkpoint_000001") }, []string{"checkpoint =", "not a committed checkpoint"}},
		{"uncommitted checkpoint", func(in *api.BatchPredictInput) { in.Checkpoint = uncommitted }, []string{"checkpoint_000004", "not a committed checkpoint"}},
		{"unknown format", func(in *api.BatchPredictInput) { in.Checkpoint = commitModel(t, t.TempDir(), 2, 1, "onnx-someday") }, []string{"unknown checkpoint format", `"onnx-someday"`}},
		{"missing column", func(in *api.BatchPredictInput) { in.Dataset = api.DatasetSpec{URI: noCity + "/"} }, []string{`column "city"`, "lacks", `["id" "x"]`}},
		{"missing pass-through", func(in *api.BatchPredictInput) { in.PassThrough = []string{"key"} }, []string{`pass_through column "key"`}},
		{"committed output", func(in *api.BatchPredictInput) { in.Output = committed }, []string{"already holds a committed BatchPredict", "overwrite"}},
		{"no dataset", func(in *api.BatchPredictInput) { in.Dataset.URI = filepath.Join(t.TempDir(), "*.parquet") }, []string{"dataset:", "no file matches"}},
	} {
		in := f.in
		tt.edit(&in)
		_, err := predictEnv(f.a, nil).ExecuteActivity(api.ActivityPlanBatchPredict, api.PredictPlanInput{Input: in})
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
	}
	// Overwrite replaces a committed output: its manifest goes at once.
	in := f.in
	in.Output, in.Overwrite = committed, true
	if _, err := predictEnv(f.a, nil).ExecuteActivity(api.ActivityPlanBatchPredict, api.PredictPlanInput{Input: in}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(committed, api.PredictManifestName)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("overwrite left the old manifest: %v", err)
	}
}

// TestPredictorCache: concurrent users of a checkpoint share one load; a
// load that fails is tried again; past maxPredictors the least recently
// used predictor nobody holds is closed; Close closes the rest.
func TestPredictorCache(t *testing.T) {
	a := newTestActivities(t, nil)
	var loads atomic.Int32
	fail := atomic.Bool{}
	made := map[string]*tableModel{}
	var mu sync.Mutex
	c := a.predictors()
	c.load = func(_ context.Context, uri string) (predict.Predictor, error) {
		loads.Add(1)
		time.Sleep(20 * time.Millisecond)
		if fail.Load() {
			return nil, errors.New("flaky")
		}
		mu.Lock()
		defer mu.Unlock()
		m := &tableModel{}
		made[uri] = m
		return m, nil
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, release, err := c.get(context.Background(), "a")
			if err != nil {
				t.Error(err)
				return
			}
			release()
		}()
	}
	wg.Wait()
	if loads.Load() != 1 {
		t.Errorf("8 concurrent users loaded %d times", loads.Load())
	}
	fail.Store(true)
	if _, _, err := c.get(context.Background(), "b"); err == nil {
		t.Fatal("a failed load succeeded")
	}
	fail.Store(false)
	_, rb, err := c.get(context.Background(), "b")
	if err != nil {
		t.Fatalf("a load that failed is not retried: %v", err)
	}
	_, rc, err := c.get(context.Background(), "c") // a is now the least recently used
	if err != nil {
		t.Fatal(err)
	}
	rb()
	rc()
	mu.Lock()
	if !made["a"].closed.Load() || made["b"].closed.Load() || made["c"].closed.Load() {
		t.Errorf("closed a %v b %v c %v, want a alone", made["a"].closed.Load(), made["b"].closed.Load(), made["c"].closed.Load())
	}
	mu.Unlock()
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if !made["b"].closed.Load() || !made["c"].closed.Load() {
		t.Error("Close left predictors open")
	}
}
