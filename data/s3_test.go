package data

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/storage/miniotest"
)

// TestS3 reads CSV and Parquet from a real MinIO bucket (through storage's
// S3 configuration, from the environment), in memory and streaming, and
// gets exactly what the same files give locally; two ranks stream a CSV
// prefix together (the scan split by file over the ranks); a missing object
// and a missing bucket are ErrInvalid. With TEMPOTRAIN_REQUIRE_MINIO=1 a
// machine without MinIO fails this test instead of skipping it.
func TestS3(t *testing.T) {
	srv := miniotest.Start(t)
	srv.SetEnv(t)
	bucket := srv.CreateBucket(t, "")
	ctx := context.Background()
	dir := t.TempDir()
	tbl := newTestTable(503)
	csvDir, pqDir := filepath.Join(dir, "csv"), filepath.Join(dir, "pq")
	mkdir(csvDir)
	mkdir(pqDir)
	csvGlob := tbl.writeFiles(t, csvDir, "csv", 3, 0)
	pqGlob := tbl.writeFiles(t, pqDir, "parquet", 2, 64)
	client := srv.Client()
	for _, d := range []string{csvDir, pqDir} {
		files, _ := os.ReadDir(d)
		for _, f := range files {
			body, _ := os.ReadFile(filepath.Join(d, f.Name()))
			key := "tables/" + filepath.Base(d) + "/" + f.Name()
			if _, err := client.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: bytes.NewReader(body)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// A marker file that readers skip, as Spark writes.
	client.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String("tables/pq/_SUCCESS"), Body: bytes.NewReader(nil)})

	no := false
	read := func(uri, mode string) [][]byte {
		t.Helper()
		spec := api.DatasetSpec{URI: uri, Label: "y", Mode: mode, Shuffle: &no, Remainder: "exact"}
		if mode == "stream" {
			spec.MemoryBudgetMiB, spec.ShuffleWindowRows = 1, 100
		}
		s := mustOpen(t, spec, ShardOptions{BatchSize: 32}, nil)
		if _, err := s.Fit(ctx, []api.PreprocessorSpec{{Type: "one_hot_encoder", Columns: []string{"city"}}}); err != nil {
			t.Fatal(err)
		}
		_, batches := epochRows(t, s)
		return batches
	}
	for _, c := range []struct{ local, remote string }{
		{csvGlob, "s3://" + bucket + "/tables/csv/*.csv"},
		{pqGlob, "s3://" + bucket + "/tables/pq/"},
		{pqGlob, "s3://" + bucket + "/tables/pq"},
	} {
		want := read(c.local, "memory")
		for _, mode := range []string{"memory", "stream"} {
			if got := read(c.remote, mode); !slices.EqualFunc(got, want, bytes.Equal) {
				t.Errorf("%s (%s): %d batches differ from the local files' %d", c.remote, mode, len(got), len(want))
			}
		}
	}

	// Two ranks streaming one prefix of three CSV files.
	comms := newComms(t, 2)
	ids := make([][]int, 2)
	errs := eachRank(2, func(r int) error {
		s, err := Open(ctx, api.DatasetSpec{URI: "s3://" + bucket + "/tables/csv/", Label: "y", Features: []string{"id"}, Mode: "stream",
			MemoryBudgetMiB: 1, ShuffleWindowRows: 60, Remainder: "exact"}, ShardOptions{Seed: 5, BatchSize: 7}, comms[r])
		if err != nil {
			return err
		}
		defer s.Close()
		ids[r], _ = epochRows(t, s)
		return nil
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	all := append(ids[0], ids[1]...)
	sort.Ints(all)
	for i, id := range all {
		if id != i {
			t.Fatalf("two ranks over S3 yield rows %v..., want each of 0..%d once", all[:min(len(all), 20)], tbl.n-1)
		}
	}
	if len(all) != tbl.n {
		t.Fatalf("two ranks over S3 yield %d rows, want %d", len(all), tbl.n)
	}

	_, err := Open(ctx, api.DatasetSpec{URI: "s3://" + bucket + "/tables/nope.csv", Label: "y"}, ShardOptions{}, nil)
	wantErr(t, err, true, "s3://"+bucket+"/tables/nope.csv", "no such object")
	_, err = Open(ctx, api.DatasetSpec{URI: "s3://no-such-bucket-tt/x.csv", Label: "y"}, ShardOptions{}, nil)
	wantErr(t, err, true, "no-such-bucket-tt", "does not exist")
}
