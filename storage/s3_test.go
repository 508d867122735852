package storage

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/tempotrain/tempotrain/storage/miniotest"
)

func TestS3Multipart200MB(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("200 MB round trip")
	}
	ctx := context.Background()
	srv := sharedMinio(t)
	b := newS3(t, srv, S3Config{})
	r := NewRun(b, "big")
	const size = 200_000_000
	data := randBytes(200, size)
	want := sha(data)
	dir := writeTree(t, map[string][]byte{"weights.bin": data, "small.json": []byte(`{}`)})
	data = nil

	m, err := r.CommitCheckpoint(ctx, 1, dir, Manifest{})
	if err != nil {
		t.Fatal(err)
	}
	if e, _ := m.File("weights.bin"); e.SHA256 != want || e.Size != size {
		t.Fatalf("manifest entry %+v", e)
	}
	// It went up in 16 MiB parts: a multipart ETag ends in -<parts>.
	head, err := srv.Client().HeadObject(ctx, &s3.HeadObjectInput{
		Bucket: aws.String(b.Bucket()), Key: aws.String("pre/fix/big/checkpoint_000001/weights.bin"),
	})
	if err != nil {
		t.Fatal(err)
	}
	if etag := aws.ToString(head.ETag); !strings.HasSuffix(strings.Trim(etag, `"`), "-12") {
		t.Fatalf("ETag %s: want a 12-part multipart upload", etag)
	}
	dst := filepath.Join(t.TempDir(), "restored")
	if _, err := r.RestoreCheckpoint(ctx, 1, dst); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(dst, "weights.bin"))
	if err != nil || len(got) != size || sha(got) != want {
		t.Fatalf("restored %d bytes, sha %s; want %d, %s (%v)", len(got), sha(got), size, want, err)
	}
}

func TestS3CutUploadIsInvisible(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := sharedMinio(t)
	b := newS3(t, srv, S3Config{PartSize: 5 << 20})
	uploads := func() int {
		out, err := b.Client().ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: aws.String(b.Bucket())})
		if err != nil {
			t.Fatal(err)
		}
		return len(out.Uploads)
	}

	t.Run("cancelled mid-multipart", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		half := &cancelAfter{r: bytes.NewReader(randBytes(9, 24<<20)), after: 12 << 20, cancel: cancel}
		if err := b.Put(cctx, "cut/big", half, 24<<20); err == nil {
			t.Fatal("cut upload succeeded")
		}
		_, err := b.Get(ctx, "cut/big")
		wantErrIs(t, err, ErrNotFound)
		if n := uploads(); n != 0 {
			t.Fatalf("%d multipart uploads left behind; the uploader aborts its own", n)
		}
	})

	t.Run("process died mid-multipart", func(t *testing.T) {
		// A writer killed mid-upload leaves an open multipart upload with
		// parts in: no object, no checkpoint, and the next commit of that
		// seq (or its deletion) aborts it.
		r := NewRun(b, "run")
		key := aws.String("pre/fix/run/checkpoint_000005/w.bin")
		mpu, err := b.Client().CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String(b.Bucket()), Key: key})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.Client().UploadPart(ctx, &s3.UploadPartInput{
			Bucket: aws.String(b.Bucket()), Key: key, UploadId: mpu.UploadId,
			PartNumber: aws.Int32(1), Body: bytes.NewReader(randBytes(5, 5<<20)),
		}); err != nil {
			t.Fatal(err)
		}
		put(t, b, "run/checkpoint_000005/other.bin", []byte("a finished file of the dead commit"))
		if got := listKeys(t, b, "run/checkpoint_000005/"); len(got) != 1 {
			t.Fatalf("listed %v", got)
		}
		ms, err := r.ListCheckpoints(ctx)
		if err != nil || len(ms) != 0 {
			t.Fatalf("listed checkpoints %v (%v)", seqsOf(ms), err)
		}
		if uploads() != 1 {
			t.Fatal("the dead upload is not there to clean")
		}
		commit(t, r, 5, ckptFiles(5), Manifest{Attempt: 2})
		if n := uploads(); n != 0 {
			t.Fatalf("re-commit left %d multipart uploads", n)
		}
		eq(t, "files", listKeys(t, b, "run/checkpoint_000005/"), []string{
			"run/checkpoint_000005/manifest.json", "run/checkpoint_000005/meta.json", "run/checkpoint_000005/model.bin",
			"run/checkpoint_000005/optim/deep/x/empty", "run/checkpoint_000005/optim/state.bin",
		})
	})
}

func TestS3Check(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := sharedMinio(t)
	good := newS3(t, srv, S3Config{})
	if err := CheckBackend(ctx, good); err != nil {
		t.Fatal(err)
	}
	if got := listKeys(t, good, ""); len(got) != 0 {
		t.Fatalf("Check left %v", got)
	}
	for _, tc := range []struct {
		name  string
		cfg   S3Config
		parts []string
		misc  bool // ErrMisconfigured
	}{
		{"missing bucket", S3Config{Endpoint: srv.Endpoint, AccessKeyID: miniotest.AccessKey, SecretAccessKey: miniotest.SecretKey}, []string{`bucket "no-such-bucket" does not exist`}, true},
		{"wrong secret", S3Config{Endpoint: srv.Endpoint, AccessKeyID: miniotest.AccessKey, SecretAccessKey: "wrong-secret"}, []string{"credentials rejected"}, true},
		{"unknown key", S3Config{Endpoint: srv.Endpoint, AccessKeyID: "nobody", SecretAccessKey: "wrong-secret"}, []string{"credentials rejected"}, true},
		{"unreachable", S3Config{Endpoint: "http://127.0.0.1:1", AccessKeyID: "a", SecretAccessKey: "b", MaxAttempts: 1}, []string{"http://127.0.0.1:1", "connection refused"}, false},
	} {
		bucket := good.Bucket()
		if tc.name == "missing bucket" {
			bucket = "no-such-bucket"
		}
		b, err := NewS3(ctx, bucket, "p", tc.cfg)
		if err != nil {
			t.Fatal(err)
		}
		err = CheckBackend(ctx, b)
		contains(t, err, append(tc.parts, "s3://"+bucket+"/p")...)
		if tc.misc != errors.Is(err, ErrMisconfigured) {
			t.Errorf("%s: ErrMisconfigured %v, want %v: %v", tc.name, !tc.misc, tc.misc, err)
		}
	}
}

// TestS3OpenFromEnvironment checks that the standard AWS variables alone
// point Open at a MinIO (not parallel: it sets the process environment).
func TestS3OpenFromEnvironment(t *testing.T) {
	srv := sharedMinio(t)
	bucket := srv.CreateBucket(t, "")
	srv.SetEnv(t)
	t.Setenv(EnvS3PathStyle, "") // the default for a custom endpoint is path-style
	ctx := context.Background()
	path := "s3://" + bucket + "/runs/"
	if err := Check(ctx, path); err != nil {
		t.Fatal(err)
	}
	b, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if got := b.URI("x/run.json"); got != "s3://"+bucket+"/runs/x/run.json" {
		t.Fatalf("URI %s", got)
	}
	r := NewRun(b, "x")
	if err := r.SaveState(ctx, testState{Attempts: 3}); err != nil {
		t.Fatal(err)
	}
	obj, err := srv.Client().GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String("runs/x/run.json")})
	if err != nil {
		t.Fatalf("run.json is not where the path says: %v", err)
	}
	obj.Body.Close()

	// A checkpoint URI alone is enough to load it, as a predictor would.
	files := ckptFiles(8)
	commit(t, r, 1, files, Manifest{})
	c, err := OpenCheckpoint(ctx, "s3://"+bucket+"/runs/x/checkpoint_000001")
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "d")
	if err := c.Download(ctx, dst); err != nil {
		t.Fatal(err)
	}
	sameTree(t, readTree(t, dst), files)

	t.Setenv(EnvS3PathStyle, "maybe")
	_, err = Open(ctx, path)
	wantErrIs(t, err, ErrMisconfigured)
	contains(t, err, EnvS3PathStyle)
}

func TestS3NoCredentials(t *testing.T) {
	srv := sharedMinio(t)
	for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	t.Setenv("AWS_ENDPOINT_URL_S3", srv.Endpoint)
	err := Check(context.Background(), "s3://bucket/p")
	wantErrIs(t, err, ErrMisconfigured)
	contains(t, err, "no usable AWS credentials", "s3://bucket/p")
}

func TestS3RetriesThrottlingAndHonoursCancel(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := sharedMinio(t)
	// Every second request (every one, once always is set) is answered 503
	// SlowDown, as S3 does under load.
	var n, refused atomic.Int64
	var always atomic.Bool
	px := newFaultProxy(t, srv, func(w http.ResponseWriter, r *http.Request, forward http.Handler) {
		if always.Load() || n.Add(1)%2 == 1 {
			refused.Add(1)
			s3Error(w, r, http.StatusServiceUnavailable, "SlowDown", "Please reduce your request rate.")
			return
		}
		forward.ServeHTTP(w, r)
	})
	bucket := srv.CreateBucket(t, "")
	b, err := NewS3(ctx, bucket, "p", S3Config{Endpoint: px.URL, Region: miniotest.Region, AccessKeyID: miniotest.AccessKey, SecretAccessKey: miniotest.SecretKey, PartSize: 5 << 20, MaxBackoff: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	r := NewRun(b, "r")
	files := ckptFiles(11)
	files["big.bin"] = randBytes(12, 12<<20) // three parts
	commit(t, r, 1, files, Manifest{})
	dst := filepath.Join(t.TempDir(), "d")
	if _, err := r.RestoreCheckpoint(ctx, 1, dst); err != nil {
		t.Fatal(err)
	}
	sameTree(t, readTree(t, dst), files)
	if refused.Load() < 10 {
		t.Fatalf("only %d requests were refused; the test did not exercise retries", refused.Load())
	}

	// A server that never recovers: the caller's deadline ends the retries.
	always.Store(true)
	b, err = NewS3(ctx, bucket, "p", S3Config{Endpoint: px.URL, Region: miniotest.Region, AccessKeyID: miniotest.AccessKey, SecretAccessKey: miniotest.SecretKey, MaxAttempts: 1000, MaxBackoff: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = b.Put(cctx, "k", strings.NewReader("x"), 1)
	if err == nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want the context's deadline", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("cancelled Put returned after %v", d)
	}
}

// gate blocks reads of uploaded file data once `after` bytes have been read,
// until release is closed: it holds an upload mid-flight while the test
// kills the server under it.
type gate struct {
	after   int64
	n       atomic.Int64
	once    sync.Once
	reached chan struct{}
	release chan struct{}
}

type gatedFile struct {
	*os.File
	g *gate
}

func (f gatedFile) ReadAt(p []byte, off int64) (int, error) {
	if f.g.n.Add(int64(len(p))) >= f.g.after {
		f.g.once.Do(func() { close(f.g.reached) })
		<-f.g.release
	}
	return f.File.ReadAt(p, off)
}

type gatedS3 struct {
	*S3
	g *gate
}

func (s gatedS3) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	if f, ok := r.(*os.File); ok {
		r = gatedFile{f, s.g}
	}
	return s.S3.Put(ctx, key, r, size)
}

func TestS3SurvivesRestartMidCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := miniotest.Start(t) // its own: it gets killed
	b := newS3(t, srv, S3Config{PartSize: 5 << 20})
	r := NewRun(b, "run")
	before := map[int]map[string][]byte{1: ckptFiles(1), 2: ckptFiles(2)}
	for seq, files := range before {
		commit(t, r, seq, files, Manifest{})
	}
	files := ckptFiles(3)
	files["big.bin"] = randBytes(33, 30<<20)
	dir := writeTree(t, files)

	g := &gate{after: 12 << 20, reached: make(chan struct{}), release: make(chan struct{})}
	errc := make(chan error, 1)
	go func() {
		_, err := NewRun(gatedS3{b, g}, "run").CommitCheckpoint(ctx, 3, dir, Manifest{})
		errc <- err
	}()
	select {
	case <-g.reached:
	case err := <-errc:
		t.Fatalf("commit ended before it was cut: %v", err)
	}
	srv.Stop(t)      // parts in flight lose their connections
	close(g.release) // they fail, and retry against a dead port
	// Bookkeeping issued while the server is down retries too.
	bookc := make(chan error, 1)
	go func() {
		if err := r.SaveState(ctx, testState{Attempts: 2}); err != nil {
			bookc <- err
			return
		}
		bookc <- r.AppendMetrics(ctx, 0, metricsLines(0, 3))
	}()
	srv.StartAgain(t) // until the server is back
	if err := <-errc; err != nil {
		t.Fatalf("commit across a restart: %v\nminio:\n%s", err, srv.Logs())
	}
	if err := <-bookc; err != nil {
		t.Fatalf("state and metrics across a restart: %v", err)
	}
	var st testState
	if found, err := r.LoadState(ctx, &st); !found || err != nil || st.Attempts != 2 {
		t.Fatalf("state after restart: %+v %v %v", st, found, err)
	}
	if lines, err := r.ReadMetrics(ctx); err != nil || len(lines) != 3 {
		t.Fatalf("metrics after restart: %d lines, %v", len(lines), err)
	}
	ms, err := r.ListCheckpoints(ctx)
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "checkpoints", seqsOf(ms), []int{1, 2, 3})
	before[3] = files
	for seq, want := range before {
		dst := filepath.Join(t.TempDir(), "d")
		if _, err := r.RestoreCheckpoint(ctx, seq, dst); err != nil {
			t.Fatal(err)
		}
		sameTree(t, readTree(t, dst), want)
	}
}

func TestS3DownloadResumesAcrossRestart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := miniotest.Start(t)
	b := newS3(t, srv, S3Config{})
	data := randBytes(44, 48<<20)
	put(t, b, "obj", data)
	rc, err := b.Get(ctx, "obj")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	h := sha256.New()
	if _, err := io.CopyN(h, rc, 4<<20); err != nil {
		t.Fatal(err)
	}
	srv.Restart(t)
	n, err := io.Copy(h, rc)
	if err != nil {
		t.Fatalf("read across a restart: %v", err)
	}
	if n != int64(len(data))-4<<20 || hex.EncodeToString(h.Sum(nil)) != sha(data) {
		t.Fatalf("read %d more bytes, sha differs: %v", n, hex.EncodeToString(h.Sum(nil)) != sha(data))
	}
	if sr := rc.(*s3Reader); sr.resumes == 0 || sr.etag == "" {
		t.Fatalf("%d resumes (ETag %q): the restart did not cut the stream, the test proves nothing", sr.resumes, sr.etag)
	}
}
