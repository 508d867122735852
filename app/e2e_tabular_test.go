package app_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/parquet-go/parquet-go"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/builtin"
	"github.com/tempotrain/tempotrain/storage"
	"github.com/tempotrain/tempotrain/storage/miniotest"
	"github.com/tempotrain/tempotrain/train"
)

// e2e-tabular-fail is tabular-mlp with a failure injected on rank 1 of
// attempt 1, after step failStep of epoch failEpoch (0-based): past a
// mid-epoch checkpoint when the config checkpoints every few steps.
const (
	tabularFailFn = "e2e-tabular-fail"
	failEpoch     = 1
	failStep      = 13
)

var errInjected = errors.New("injected tabular failure")

func init() {
	builtin.Register()
	train.MustRegister(tabularFailFn, builtin.FuncWith(builtin.TabularMLP, builtin.Options{
		AfterStep: func(tc *train.Context, epoch, step int) error {
			if tc.Attempt() == 1 && tc.WorldRank() == 1 && epoch == failEpoch && step == failStep {
				return fmt.Errorf("%w at epoch %d step %d", errInjected, epoch, step)
			}
			return nil
		},
	}))
}

// tabularRows writes n rows of a table with a clear signal, as CSV and as
// Parquet, with the same values: float32 f0..f5, a categorical grp, the
// label y ("no"/"yes"). Column names sort in the CSV's order, the order
// in which Parquet's schema lists them, so both files give the same
// features in the same order.
func tabularRows(t *testing.T, n int, seed uint64, csvPath, pqPath string) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 42))
	cols := []string{"f0", "f1", "f2", "f3", "f4", "f5", "grp", "y"}
	g := parquet.Group{}
	for _, c := range cols[:6] {
		g[c] = parquet.Leaf(parquet.FloatType)
	}
	g["grp"] = parquet.Encoded(parquet.String(), &parquet.RLEDictionary)
	g["y"] = parquet.String()
	schema := parquet.NewSchema("t", g)
	leaf := map[string]int{}
	for i, p := range schema.Columns() {
		leaf[p[0]] = i
	}
	var csv strings.Builder
	csv.WriteString(strings.Join(cols, ",") + "\n")
	rows := make([]parquet.Row, 0, n)
	weights := []float64{1.2, -0.8, 0.5, 0, 0.9, -0.4}
	groups := map[string]float64{"a": -1, "b": 0, "c": 1}
	for range n {
		row := make(parquet.Row, len(cols))
		var line []byte
		score := 0.0
		for j, w := range weights {
			v := float32(rng.NormFloat64()*float64(j+1) + float64(j))
			score += w * (float64(v) - float64(j)) / float64(j+1)
			line = strconv.AppendFloat(line, float64(v), 'g', -1, 32)
			line = append(line, ',')
			row[leaf[cols[j]]] = parquet.FloatValue(v).Level(0, 0, leaf[cols[j]])
		}
		grp := []string{"a", "b", "c"}[rng.IntN(3)]
		score += groups[grp] + 0.3*rng.NormFloat64()
		y := "no"
		if score > 0 {
			y = "yes"
		}
		line = append(line, grp+","+y+"\n"...)
		csv.Write(line)
		row[leaf["grp"]] = parquet.ByteArrayValue([]byte(grp)).Level(0, 0, leaf["grp"])
		row[leaf["y"]] = parquet.ByteArrayValue([]byte(y)).Level(0, 0, leaf["y"])
		rows = append(rows, row)
	}
	if err := os.WriteFile(csvPath, []byte(csv.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(pqPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := parquet.NewGenericWriter[any](f, schema, parquet.MaxRowsPerRowGroup(500))
	if _, err := w.WriteRows(rows); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// putFile uploads a local file to bucket/key with the server's plain S3
// client.
func putFile(t *testing.T, srv *miniotest.Server, bucket, key, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Client().PutObject(context.Background(), &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: bytes.NewReader(b)}); err != nil {
		t.Fatal(err)
	}
}

// fitData is fit with the run's datasets and preprocessors.
func fitData(t *testing.T, fn string, cfg any, n int, run train.RunConfig, ds map[string]api.DatasetSpec, pre ...api.PreprocessorSpec) (*train.Result, error) {
	t.Helper()
	tq, rq := startWorkerOn(t, cl, true, n)
	ctx, cancel := context.WithTimeout(context.Background(), fitTimeout)
	defer cancel()
	return train.NewTrainer(cl, fn, cfg, train.ScalingConfig{NumWorkers: n, TaskQueue: rq}, run,
		train.WithTaskQueue(tq), train.WithDatasets(ds), train.WithPreprocessors(pre...)).Fit(ctx)
}

// checkpointFile reads one file of a committed checkpoint.
func checkpointFile(t *testing.T, uri, name string) []byte {
	t.Helper()
	ctx := context.Background()
	sc, err := storage.OpenCheckpoint(ctx, uri)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "ck")
	if err := sc.Download(ctx, dir); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Issue 14 items 3, 5 and 7 through the real thing: tabular-mlp on 2
// ranks of a worker on the dev server, its data in a real MinIO bucket.
//   - From CSV and from Parquet, holding the same values, training reaches
//     a sensible accuracy and ends in the same state, bit for bit.
//   - A run whose rank fails mid-epoch, past a mid-epoch checkpoint,
//     resumes from that checkpoint and ends with the model bytes of the
//     run that did not fail.
//   - A dataset no restart can fix (a label with one class) ends the run
//     at its first attempt.
func TestE2ETabular(t *testing.T) {
	srv := miniotest.Start(t)
	bucket := srv.CreateBucket(t, "")
	srv.SetEnv(t)
	dir := t.TempDir()
	for _, part := range []struct {
		name string
		rows int
		seed uint64
	}{{"train", 3000, 1}, {"valid", 701, 2}} {
		c, p := filepath.Join(dir, part.name+".csv"), filepath.Join(dir, part.name+".parquet")
		tabularRows(t, part.rows, part.seed, c, p)
		putFile(t, srv, bucket, "data/"+part.name+".csv", c)
		putFile(t, srv, bucket, "data/"+part.name+".parquet", p)
	}
	datasets := func(ext string) map[string]api.DatasetSpec {
		return map[string]api.DatasetSpec{
			"train": {URI: "s3://" + bucket + "/data/train." + ext, Label: "y"},
			"valid": {URI: "s3://" + bucket + "/data/valid." + ext, Label: "y", Remainder: "exact"},
		}
	}
	pre := []api.PreprocessorSpec{
		{Type: api.StandardScaler, Columns: []string{"f0", "f1", "f2", "f3", "f4", "f5"}},
		{Type: api.OneHotEncoder, Columns: []string{"grp"}},
	}
	// 3000 rows on 2 ranks, batches of 64: 24 steps an epoch; a
	// checkpoint every 10 steps and at the end of each epoch.
	cfg := map[string]any{"epochs": 4, "seed": 3, "checkpoint_every_steps": 10}
	runs := "s3://" + bucket + "/runs"

	fromCSV, err := fitData(t, builtin.TabularMLP, cfg, 2, train.RunConfig{Name: "tab-csv", StoragePath: runs}, datasets("csv"), pre...)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("CSV: %v", fromCSV.Metrics)
	if acc := fromCSV.Metrics["valid_accuracy"]; acc < 0.9 {
		t.Errorf("valid accuracy %.4f from CSV, want ≥ 0.9", acc)
	}
	st := verifyRun(t, fromCSV, runs, 4)
	if st.Reports != 4*3 {
		t.Errorf("%d reports, want 12 (2 mid-epoch and 1 end-of-epoch checkpoint per epoch)", st.Reports)
	}
	want := checkpointFile(t, fromCSV.Checkpoint.URI, builtin.CheckpointFile)

	t.Run("parquet", func(t *testing.T) {
		fromPQ, err := fitData(t, builtin.TabularMLP, cfg, 2, train.RunConfig{Name: "tab-parquet", StoragePath: runs}, datasets("parquet"), pre...)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("Parquet: %v", fromPQ.Metrics)
		if acc := fromPQ.Metrics["valid_accuracy"]; acc < 0.9 || acc != fromCSV.Metrics["valid_accuracy"] {
			t.Errorf("valid accuracy %.4f from Parquet, %.4f from CSV: want the same, ≥ 0.9", acc, fromCSV.Metrics["valid_accuracy"])
		}
		if !bytes.Equal(checkpointFile(t, fromPQ.Checkpoint.URI, builtin.CheckpointFile), want) {
			t.Error("the same values from Parquet and from CSV trained to different states")
		}
	})

	t.Run("failure mid-epoch resumes exactly", func(t *testing.T) {
		res, err := fitData(t, tabularFailFn, cfg, 2, train.RunConfig{Name: "tab-fail", StoragePath: runs,
			Failure: train.FailureConfig{MaxFailures: 1}}, datasets("csv"), pre...)
		if err != nil {
			t.Fatal(err)
		}
		if res.Attempts != 2 || res.Failures != 1 {
			t.Fatalf("attempts %d failures %d, want 2 and 1", res.Attempts, res.Failures)
		}
		st := verifyRun(t, res, runs, 4)
		if len(st.History) != 2 || !strings.Contains(st.History[0].Error, errInjected.Error()) {
			t.Fatalf("history %+v", st.History)
		}
		// Epoch 2's checkpoint after step 10: seq 3 (epoch 1) + 1.
		if from := st.History[1].ResumedFrom; from != 4 {
			t.Errorf("attempt 2 resumed from checkpoint %d, want 4 (epoch 2, step 10)", from)
		}
		got := checkpointFile(t, res.Checkpoint.URI, builtin.CheckpointFile)
		if !bytes.Equal(got, want) {
			t.Error("the run resumed mid-epoch ends with other bytes than the run that did not fail")
		}
		for _, k := range []string{"train_loss", "train_accuracy", "valid_accuracy", "valid_loss"} {
			if res.Metrics[k] != fromCSV.Metrics[k] {
				t.Errorf("%s: %v after the failure, %v without", k, res.Metrics[k], fromCSV.Metrics[k])
			}
		}
	})

	t.Run("one class is not retried", func(t *testing.T) {
		one := filepath.Join(dir, "one.csv")
		os.WriteFile(one, []byte("a,b,y\n1,2,x\n3,4,x\n5,6,x\n7,8,x\n"), 0o644)
		putFile(t, srv, bucket, "data/one.csv", one)
		res, err := fitData(t, builtin.TabularMLP, nil, 2, train.RunConfig{Name: "tab-one", StoragePath: t.TempDir(),
			Failure: train.FailureConfig{MaxFailures: 3}}, map[string]api.DatasetSpec{"train": {URI: "s3://" + bucket + "/data/one.csv", Label: "y"}})
		if err == nil || res == nil || res.Attempts != 1 || !strings.Contains(res.Error, "has one class") {
			t.Fatalf("err %v, result %+v: want a failed run of one attempt saying the label has one class", err, res)
		}
	})
}
