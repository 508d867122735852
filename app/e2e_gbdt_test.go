package app_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/tempotrain/tempotrain/builtin"
	"github.com/tempotrain/tempotrain/storage"
	"github.com/tempotrain/tempotrain/storage/miniotest"
	"github.com/tempotrain/tempotrain/train"
)

// gbdtFailAt, when positive, makes rank 1 of attempt 1 of e2e-gbdt fail
// once it has done that many rounds.
var gbdtFailAt atomic.Int64

func init() {
	// builtin.GBDTFunc, with a failure a test can inject.
	train.MustRegister("e2e-gbdt", func(ctx context.Context, tc *train.Context) error {
		at := int(gbdtFailAt.Load())
		if at == 0 || tc.Attempt() != 1 || tc.WorldRank() != 1 {
			return builtin.GBDTFunc(ctx, tc)
		}
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- builtin.GBDTFunc(cctx, tc) }()
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case err := <-done:
				return err
			case <-tick.C:
				if round, _ := tc.Progress(); round >= at {
					cancel()
					<-done
					return errors.New("injected failure at round " + fmt.Sprint(round))
				}
			}
		}
	})
}

// gbdtCSV is a table with a learnable binary label, some missing cells and
// a categorical column.
func gbdtCSV(n, seed int) []byte {
	var b bytes.Buffer
	b.WriteString("f0,f1,f2,shape,label\n")
	shapes := []string{"circle", "square", "star"}
	for i := range n {
		v := func(k int) float64 { return float64((i*(7919+k*104729)+seed*31+k*17)%2001)/1000 - 1 }
		f0, f1, f2 := v(0), v(1), v(2)
		shape := shapes[(i*5+seed)%3]
		y := 0
		if f0-f1/2+map[string]float64{"circle": 0.5, "square": 0, "star": -0.5}[shape] > 0 {
			y = 1
		}
		if i%9 == 4 {
			y = 1 - y
		}
		f2s := fmt.Sprintf("%.4f", f2)
		if i%7 == 3 {
			f2s = ""
		}
		fmt.Fprintf(&b, "%.4f,%.4f,%s,%s,%d\n", f0, f1, f2s, shape, y)
	}
	return b.Bytes()
}

// TestE2EGBDT trains the built-in gbdt on 2 ranks through a real Fit from
// CSV files in MinIO: it learns, a rank failure mid-run resumes from the
// last checkpoint and ends with the model an uninterrupted run makes, byte
// for byte, and a bad parameter ends the run at once.
func TestE2EGBDT(t *testing.T) {
	srv := miniotest.Start(t)
	bucket := srv.CreateBucket(t, "")
	srv.SetEnv(t)
	ctx := context.Background()
	for name, body := range map[string][]byte{"tables/train-0.csv": gbdtCSV(2000, 1), "tables/train-1.csv": gbdtCSV(1500, 3), "tables/valid.csv": gbdtCSV(700, 2)} {
		if _, err := srv.Client().PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(name), Body: bytes.NewReader(body)}); err != nil {
			t.Fatal(err)
		}
	}
	tq, rq := startWorker(t, 2)
	datasets := map[string]train.DatasetSpec{
		"train": {URI: "s3://" + bucket + "/tables/train-*.csv", Label: "label"},
		"valid": {URI: "s3://" + bucket + "/tables/valid.csv", Label: "label"},
	}
	pre := []train.PreprocessorSpec{{Type: "one_hot_encoder", Columns: []string{"shape"}}}
	cfg := map[string]any{"objective": "binary:logistic", "num_boost_round": 20, "max_depth": 4, "subsample": 0.8,
		"eval_metric": []string{"logloss", "auc"}, "checkpoint_every": 5}
	run := func(name string, cfg map[string]any, maxFailures int) (*train.Result, error) {
		ctx, cancel := context.WithTimeout(ctx, fitTimeout)
		defer cancel()
		return train.NewTrainer(cl, "e2e-gbdt", cfg, train.ScalingConfig{NumWorkers: 2, TaskQueue: rq},
			train.RunConfig{Name: name, StoragePath: "s3://" + bucket + "/runs", Failure: train.FailureConfig{MaxFailures: maxFailures}},
			train.WithTaskQueue(tq), train.WithDatasets(datasets), train.WithPreprocessors(pre...)).Fit(ctx)
	}
	clean, err := run("gbdt-clean", cfg, 0)
	if err != nil {
		t.Fatal(err)
	}
	if clean.Reports != 20 || clean.Checkpoint == nil || clean.Checkpoint.Seq != 4 || clean.Metrics["valid_auc"] < 0.8 {
		t.Fatalf("result %+v: want 20 reports, checkpoints every 5 rounds, valid_auc above 0.8 (the label has 11%% noise)", clean)
	}
	t.Logf("valid_auc %.4f valid_logloss %.4f", clean.Metrics["valid_auc"], clean.Metrics["valid_logloss"])

	// A rank failure at round 13: attempt 2 resumes from round 10.
	b, err := storage.Open(ctx, "s3://"+bucket+"/runs")
	if err != nil {
		t.Fatal(err)
	}
	modelOf := func(res *train.Result) []byte {
		t.Helper()
		sc, err := storage.NewRun(b, res.Name).OpenCheckpoint(ctx, res.Checkpoint.Seq)
		if err != nil {
			t.Fatal(err)
		}
		m, err := sc.ReadFile(ctx, builtin.GBDTModelFile)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	gbdtFailAt.Store(13)
	defer gbdtFailAt.Store(0)
	res, err := run("gbdt-resumed", cfg, 1)
	if err != nil {
		t.Fatal(err)
	}
	if res.Attempts != 2 || !bytes.Equal(modelOf(res), modelOf(clean)) {
		t.Errorf("attempts %d: the resumed run's model differs from the uninterrupted run's (or did not restart)", res.Attempts)
	}

	// A typo in a parameter ends the run at once, naming it.
	bad := map[string]any{"objective": "binary:logistic", "max_dpeth": 4}
	res, err = run("gbdt-typo", bad, 3)
	if err == nil || res == nil || res.Attempts != 1 || !strings.Contains(res.Error, `unknown parameter "max_dpeth"`) {
		t.Errorf("res %+v err %v, want one attempt failing on the unknown parameter", res, err)
	}
}
