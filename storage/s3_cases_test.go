package storage

import (
	"context"
	"os"
	"sync"
	"testing"

	"github.com/tempotrain/tempotrain/storage/miniotest"
)

// One MinIO serves every conformance test of the package, each test in a
// bucket of its own; tests that restart a server start their own.
var shared struct {
	once sync.Once
	srv  *miniotest.Server
	err  error
	dir  string
}

func sharedMinio(t *testing.T) *miniotest.Server {
	t.Helper()
	if _, err := miniotest.Binary(); err != nil {
		miniotest.Missing(t, err)
	}
	shared.once.Do(func() {
		shared.dir, shared.err = os.MkdirTemp("", "tempotrain-minio-")
		if shared.err == nil {
			shared.srv, shared.err = miniotest.Launch(shared.dir)
		}
	})
	if shared.err != nil {
		t.Fatalf("start minio: %v", shared.err)
	}
	return shared.srv
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared.srv != nil {
		shared.srv.Close()
	}
	if shared.dir != "" {
		os.RemoveAll(shared.dir)
	}
	os.Exit(code)
}

// newS3 returns a backend in a new bucket of srv, under a prefix so that
// prefix handling is always exercised.
func newS3(t *testing.T, srv *miniotest.Server, c S3Config) *S3 {
	t.Helper()
	bucket := srv.CreateBucket(t, "")
	c.Endpoint = srv.Endpoint
	c.Region = miniotest.Region
	c.AccessKeyID = miniotest.AccessKey
	c.SecretAccessKey = miniotest.SecretKey
	b, err := NewS3(context.Background(), bucket, "pre/fix", c)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func s3Backends(t *testing.T) []backendCase {
	return []backendCase{{"minio", func(t *testing.T) Backend {
		return newS3(t, sharedMinio(t), S3Config{})
	}}}
}
