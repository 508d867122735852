package storage

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/tempotrain/tempotrain/storage/miniotest"
)

// faultProxy is a reverse proxy in front of a real MinIO whose answer to each
// request a faultFunc decides: it may pass the request on (forward), answer
// itself (an S3 XML error), forward through a wrapped writer (a body cut
// mid-stream), or act on the server behind the client's back. It logs every
// request it saw, so tests can count attempts.
type faultProxy struct {
	URL string
	srv *miniotest.Server
	fwd http.Handler

	mu    sync.Mutex
	fault faultFunc
	log   []seenReq
}

// faultFunc answers one request; forward passes it on to MinIO.
type faultFunc func(w http.ResponseWriter, r *http.Request, forward http.Handler)

// seenReq is what the proxy logs of one request.
type seenReq struct {
	Method  string
	Path    string // path-style: /bucket/key
	Query   url.Values
	Range   string
	IfMatch string
}

// newFaultProxy starts a proxy to srv that answers with fault (nil: forward
// everything), closed when the test ends.
func newFaultProxy(t *testing.T, srv *miniotest.Server, fault faultFunc) *faultProxy {
	t.Helper()
	target, err := url.Parse(srv.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	p := &faultProxy{srv: srv, fwd: httputil.NewSingleHostReverseProxy(target), fault: fault}
	hs := httptest.NewServer(p)
	t.Cleanup(hs.Close)
	p.URL = hs.URL
	return p
}

func (p *faultProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	p.log = append(p.log, seenReq{
		Method: r.Method, Path: r.URL.Path, Query: r.URL.Query(),
		Range: r.Header.Get("Range"), IfMatch: r.Header.Get("If-Match"),
	})
	f := p.fault
	p.mu.Unlock()
	if f == nil {
		p.fwd.ServeHTTP(w, r)
		return
	}
	f(w, r, p.fwd)
}

// set replaces the fault (nil: heal).
func (p *faultProxy) set(f faultFunc) {
	p.mu.Lock()
	p.fault = f
	p.mu.Unlock()
}

// seen returns the logged requests that match (all when match is nil) and
// clears nothing.
func (p *faultProxy) seen(match func(seenReq) bool) []seenReq {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []seenReq
	for _, q := range p.log {
		if match == nil || match(q) {
			out = append(out, q)
		}
	}
	return out
}

// forget clears the log.
func (p *faultProxy) forget() {
	p.mu.Lock()
	p.log = nil
	p.mu.Unlock()
}

// s3 returns a backend over s3://bucket/pre/fix that talks to MinIO through
// the proxy.
func (p *faultProxy) s3(t *testing.T, bucket string, c S3Config) *S3 {
	t.Helper()
	c.Endpoint = p.URL
	if c.Region == "" {
		c.Region = miniotest.Region
	}
	c.AccessKeyID = miniotest.AccessKey
	c.SecretAccessKey = miniotest.SecretKey
	b, err := NewS3(context.Background(), bucket, "pre/fix", c)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// objectPath is the path-style request path of key under b's prefix.
func objectPath(b *S3, key string) string { return "/" + b.Bucket() + "/" + b.full(key) }

// s3Error answers like S3 does when it refuses a request: a status and an
// XML error document.
func s3Error(w http.ResponseWriter, r *http.Request, status int, code, message string) {
	io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(status)
	fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?>`+"\n"+
		`<Error><Code>%s</Code><Message>%s</Message><Resource>%s</Resource><RequestId>faultproxy</RequestId></Error>`,
		code, xmlText(message), xmlText(r.URL.Path))
}

func xmlText(s string) string {
	var b strings.Builder
	xml.EscapeText(&b, []byte(s))
	return b.String()
}

// cutAfter passes on the first n bytes of a response body, makes sure the
// client has them, runs onCut (if any), and then breaks the connection, as a
// reset or a dying server would: the client sees a body shorter than its
// Content-Length.
type cutAfter struct {
	http.ResponseWriter
	n     int64
	onCut func()
}

func (c *cutAfter) Write(p []byte) (int, error) {
	if int64(len(p)) <= c.n {
		c.n -= int64(len(p))
		return c.ResponseWriter.Write(p)
	}
	c.ResponseWriter.Write(p[:c.n])
	http.NewResponseController(c.ResponseWriter).Flush()
	if c.onCut != nil {
		c.onCut()
	}
	panic(http.ErrAbortHandler) // the server closes the connection, silently
}

func (c *cutAfter) Unwrap() http.ResponseWriter { return c.ResponseWriter }

// noETag drops the ETag of a response, as a server or cache that does not
// give one would.
type noETag struct{ http.ResponseWriter }

func (n noETag) WriteHeader(code int) {
	n.Header().Del("ETag")
	n.ResponseWriter.WriteHeader(code)
}

func (n noETag) Unwrap() http.ResponseWriter { return n.ResponseWriter }

func isGet(path string) func(seenReq) bool {
	return func(q seenReq) bool { return q.Method == http.MethodGet && q.Path == path }
}

func etagOf(t *testing.T, srv *miniotest.Server, b *S3, key string) string {
	t.Helper()
	head, err := srv.Client().HeadObject(context.Background(), &s3.HeadObjectInput{
		Bucket: aws.String(b.Bucket()), Key: aws.String(b.full(key)),
	})
	if err != nil {
		t.Fatal(err)
	}
	return aws.ToString(head.ETag)
}

// noRestoreLeft fails unless a failed restore into dst left nothing: neither
// dst nor a staging directory beside it.
func noRestoreLeft(t *testing.T, dst string) {
	t.Helper()
	if _, err := os.Stat(dst); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a failed restore left %s behind: %v", dst, err)
	}
	if entries, _ := os.ReadDir(filepath.Dir(dst)); len(entries) != 0 {
		t.Fatalf("a failed restore left staging files: %v", entries)
	}
}

// TestS3ResumeGivesUpWithoutProgress: a server that breaks every resumed
// stream before its first byte makes the restore fail after maxResumes
// ranged GETs, all pinned to the object's ETag, with an error that names the
// object and where it broke, long before the caller's deadline.
func TestS3ResumeGivesUpWithoutProgress(t *testing.T) {
	t.Parallel()
	srv := sharedMinio(t)
	direct := newS3(t, srv, S3Config{})
	files := ckptFiles(21)
	commit(t, NewRun(direct, "run"), 1, files, Manifest{})
	const name = "run/checkpoint_000001/model.bin"
	path := objectPath(direct, name)
	etag := etagOf(t, srv, direct, name)
	const first = 64 << 10
	px := newFaultProxy(t, srv, func(w http.ResponseWriter, r *http.Request, forward http.Handler) {
		switch {
		case r.Method != http.MethodGet || r.URL.Path != path:
			forward.ServeHTTP(w, r)
		case r.Header.Get("Range") == "":
			forward.ServeHTTP(&cutAfter{ResponseWriter: w, n: first}, r)
		default:
			forward.ServeHTTP(&cutAfter{ResponseWriter: w, n: 0}, r)
		}
	})
	b := px.s3(t, direct.Bucket(), S3Config{MaxBackoff: 20 * time.Millisecond})

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dst := filepath.Join(t.TempDir(), "d")
	start := time.Now()
	_, err := NewRun(b, "run").RestoreCheckpoint(ctx, 1, dst)
	elapsed := time.Since(start)
	contains(t, err, b.URI(name), fmt.Sprintf("stream broke at byte %d of %d", first, len(files["model.bin"])),
		fmt.Sprintf("%d resumes failed", maxResumes))
	wantErrIs(t, err, io.ErrUnexpectedEOF)
	if errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the restore ran into the test's deadline instead of giving up: %v", err)
	}
	// MaxBackoff 20ms: 8 waits of at most 20ms, not the default 21 s.
	if elapsed > 10*time.Second {
		t.Fatalf("gave up after %v; the resume backoff ignores MaxBackoff", elapsed)
	}
	if n := len(px.seen(func(q seenReq) bool { return isGet(path)(q) && q.Range == "" })); n != 1 {
		t.Fatalf("%d plain GETs of %s, want 1", n, name)
	}
	ranged := px.seen(func(q seenReq) bool { return isGet(path)(q) && q.Range != "" })
	if len(ranged) != maxResumes {
		t.Fatalf("%d ranged GETs, want maxResumes = %d: %+v", len(ranged), maxResumes, ranged)
	}
	for _, q := range ranged {
		if q.Range != fmt.Sprintf("bytes=%d-", first) || q.IfMatch != etag {
			t.Fatalf("resume asked Range %q If-Match %q, want bytes=%d- and %s", q.Range, q.IfMatch, first, etag)
		}
	}
	noRestoreLeft(t, dst)
}

// TestS3ResumeKeepsGoingWhileItProgresses: the bound is on reopenings
// without progress. A server that cuts every stream after 16 KiB still
// delivers the file, in more resumes than maxResumes, each from where the
// last one broke.
func TestS3ResumeKeepsGoingWhileItProgresses(t *testing.T) {
	t.Parallel()
	srv := sharedMinio(t)
	direct := newS3(t, srv, S3Config{})
	files := ckptFiles(22)
	commit(t, NewRun(direct, "run"), 1, files, Manifest{})
	const name = "run/checkpoint_000001/model.bin"
	path := objectPath(direct, name)
	etag := etagOf(t, srv, direct, name)
	const chunk = 16 << 10
	px := newFaultProxy(t, srv, func(w http.ResponseWriter, r *http.Request, forward http.Handler) {
		if r.Method == http.MethodGet && r.URL.Path == path {
			w = &cutAfter{ResponseWriter: w, n: chunk}
		}
		forward.ServeHTTP(w, r)
	})
	b := px.s3(t, direct.Bucket(), S3Config{MaxBackoff: time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dst := filepath.Join(t.TempDir(), "d")
	if _, err := NewRun(b, "run").RestoreCheckpoint(ctx, 1, dst); err != nil {
		t.Fatal(err)
	}
	sameTree(t, readTree(t, dst), files)
	size := len(files["model.bin"])
	ranged := px.seen(func(q seenReq) bool { return isGet(path)(q) && q.Range != "" })
	want := (size+chunk-1)/chunk - 1
	if len(ranged) != want || want <= maxResumes {
		t.Fatalf("%d ranged GETs, want %d (more than maxResumes = %d)", len(ranged), want, maxResumes)
	}
	for i, q := range ranged {
		if q.Range != fmt.Sprintf("bytes=%d-", (i+1)*chunk) || q.IfMatch != etag {
			t.Fatalf("resume %d asked Range %q If-Match %q, want bytes=%d- and %s", i, q.Range, q.IfMatch, (i+1)*chunk, etag)
		}
	}
}

// TestS3ResumeOfReplacedObjectFails: the object is overwritten in MinIO
// after the restore has read its first 64 KiB. The resumed ranged GET is
// pinned to the first ETag (If-Match), MinIO answers 412, and the restore
// fails with an error that names the object and the offset, leaving nothing
// behind. Without an ETag to pin, the resume reads the new version, and the
// file's CRC32C from the manifest refuses the mixture (ErrCorrupt).
func TestS3ResumeOfReplacedObjectFails(t *testing.T) {
	t.Parallel()
	srv := sharedMinio(t)
	const name = "run/checkpoint_000001/model.bin"
	const first = 64 << 10
	for _, pinned := range []bool{true, false} {
		t.Run(fmt.Sprintf("etag=%v", pinned), func(t *testing.T) {
			t.Parallel()
			direct := newS3(t, srv, S3Config{})
			files := ckptFiles(23)
			commit(t, NewRun(direct, "run"), 1, files, Manifest{})
			path := objectPath(direct, name)
			etag := etagOf(t, srv, direct, name)
			replacement := randBytes(24, len(files["model.bin"])) // same size, other bytes
			var replaced atomic.Bool
			px := newFaultProxy(t, srv, func(w http.ResponseWriter, r *http.Request, forward http.Handler) {
				if r.Method != http.MethodGet || r.URL.Path != path || r.Header.Get("Range") != "" || replaced.Load() {
					forward.ServeHTTP(w, r)
					return
				}
				if !pinned {
					w = noETag{w}
				}
				forward.ServeHTTP(&cutAfter{ResponseWriter: w, n: first, onCut: func() {
					// A writer replaces the object while the client holds
					// its first 64 KiB, before the client resumes.
					if _, err := srv.Client().PutObject(context.Background(), &s3.PutObjectInput{
						Bucket: aws.String(direct.Bucket()), Key: aws.String(direct.full(name)),
						Body: bytes.NewReader(replacement),
					}); err != nil {
						t.Error(err)
					}
					replaced.Store(true)
				}}, r)
			})
			b := px.s3(t, direct.Bucket(), S3Config{MaxBackoff: 20 * time.Millisecond})
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			dst := filepath.Join(t.TempDir(), "d")
			_, err := NewRun(b, "run").RestoreCheckpoint(ctx, 1, dst)
			if !replaced.Load() {
				t.Fatalf("the object was not replaced mid-read; the test proves nothing (%v)", err)
			}
			if newETag := etagOf(t, srv, direct, name); newETag == etag {
				t.Fatalf("the replacement kept ETag %s; the test proves nothing", etag)
			}
			ranged := px.seen(func(q seenReq) bool { return isGet(path)(q) && q.Range != "" })
			if pinned {
				contains(t, err, fmt.Sprintf("resume at byte %d of %s", first, b.URI(name)), "PreconditionFailed")
				if errors.Is(err, ErrCorrupt) || errors.Is(err, ErrNotFound) || errors.Is(err, ErrMisconfigured) {
					t.Fatalf("a changed object is none of the sentinels: %v", err)
				}
				// One resume: a 412 is not retried.
				if len(ranged) != 1 || ranged[0].Range != fmt.Sprintf("bytes=%d-", first) || ranged[0].IfMatch != etag {
					t.Fatalf("resumes %+v, want one of bytes=%d- If-Match %s", ranged, first, etag)
				}
			} else {
				wantErrIs(t, err, ErrCorrupt)
				contains(t, err, "model.bin", "crc32c")
				if len(ranged) != 1 || ranged[0].IfMatch != "" {
					t.Fatalf("resumes %+v, want one, unpinned", ranged)
				}
			}
			noRestoreLeft(t, dst)
		})
	}
}

// TestS3DeleteObjectsPartialFailure: a DeleteObjects answered 200 with some
// keys under <Error> fails DeleteCheckpoint with an error naming a failed
// key; the checkpoint is gone (its manifest went first), its refused file is
// still there, and a retry once the proxy heals deletes everything.
func TestS3DeleteObjectsPartialFailure(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := sharedMinio(t)
	direct := newS3(t, srv, S3Config{})
	commit(t, NewRun(direct, "run"), 1, ckptFiles(25), Manifest{})
	commit(t, NewRun(direct, "run"), 2, ckptFiles(26), Manifest{})
	refused := direct.full("run/checkpoint_000001/model.bin")
	var batches atomic.Int64
	px := newFaultProxy(t, srv, func(w http.ResponseWriter, r *http.Request, forward http.Handler) {
		if r.Method != http.MethodPost || !r.URL.Query().Has("delete") {
			forward.ServeHTTP(w, r)
			return
		}
		batches.Add(1)
		var req struct {
			Objects []struct{ Key string } `xml:"Object"`
		}
		body, _ := io.ReadAll(r.Body)
		if err := xml.Unmarshal(body, &req); err != nil {
			t.Errorf("DeleteObjects body %q: %v", body, err)
		}
		// Delete the others, as S3 would, and refuse one.
		var out strings.Builder
		out.WriteString(`<?xml version="1.0" encoding="UTF-8"?><DeleteResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">`)
		for _, o := range req.Objects {
			if o.Key == refused {
				fmt.Fprintf(&out, `<Error><Key>%s</Key><Code>AccessDenied</Code><Message>Access Denied.</Message></Error>`, xmlText(o.Key))
				continue
			}
			if _, err := srv.Client().DeleteObject(r.Context(), &s3.DeleteObjectInput{Bucket: aws.String(direct.Bucket()), Key: aws.String(o.Key)}); err != nil {
				t.Error(err)
			}
		}
		out.WriteString(`</DeleteResult>`)
		w.Header().Set("Content-Type", "application/xml")
		io.WriteString(w, out.String())
	})
	r := NewRun(px.s3(t, direct.Bucket(), S3Config{}), "run")
	err := r.DeleteCheckpoint(ctx, 1)
	contains(t, err, "delete checkpoint "+r.CheckpointURI(1), "s3://"+direct.Bucket()+"/"+refused, "AccessDenied", "1 of 4 keys failed")
	if n := batches.Load(); n != 1 {
		t.Fatalf("%d DeleteObjects requests, want 1", n)
	}
	// The manifest went first: the checkpoint no longer exists, only the
	// refused file is left of it.
	_, err = r.ReadManifest(ctx, 1)
	wantErrIs(t, err, ErrNotFound)
	ms, err := r.ListCheckpoints(ctx)
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "checkpoints", seqsOf(ms), []int{2})
	eq(t, "left in MinIO", minioKeys(t, srv, direct.Bucket(), direct.full("run/checkpoint_000001/")), []string{refused})

	px.set(nil)
	if err := r.DeleteCheckpoint(ctx, 1); err != nil {
		t.Fatalf("retry after the store healed: %v", err)
	}
	eq(t, "left in MinIO", minioKeys(t, srv, direct.Bucket(), direct.full("run/checkpoint_000001/")), []string{})
	if got := minioKeys(t, srv, direct.Bucket(), direct.full("run/checkpoint_000002/")); len(got) != 5 {
		t.Fatalf("checkpoint 2 holds %v, want its 4 files and manifest", got)
	}
}

// minioKeys lists keys under prefix straight from MinIO.
func minioKeys(t *testing.T, srv *miniotest.Server, bucket, prefix string) []string {
	t.Helper()
	out, err := srv.Client().ListObjectsV2(context.Background(), &s3.ListObjectsV2Input{Bucket: aws.String(bucket), Prefix: aws.String(prefix)})
	if err != nil {
		t.Fatal(err)
	}
	keys := []string{}
	for _, o := range out.Contents {
		keys = append(keys, aws.ToString(o.Key))
	}
	return keys
}

// quick bounds how long a refused request may take: no retries (the
// default budget of 10 attempts with up to 5 s waits would take tens of
// seconds), just a round trip to a loopback MinIO.
const quick = 3 * time.Second

// TestS3MisconfigurationFailsFast: what no retry can fix (access denied,
// a missing bucket, an invalid bucket name) fails at once with
// ErrMisconfigured and a message naming the bucket and what to fix, after one
// request, with the default retry budget.
func TestS3MisconfigurationFailsFast(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := sharedMinio(t)
	bucket := srv.CreateBucket(t, "")
	deny := func(method string, list bool) faultFunc {
		return func(w http.ResponseWriter, r *http.Request, forward http.Handler) {
			if r.Method == method && r.URL.Query().Has("list-type") == list {
				s3Error(w, r, http.StatusForbidden, "AccessDenied", "Access Denied.")
				return
			}
			forward.ServeHTTP(w, r)
		}
	}
	for _, tc := range []struct {
		name   string
		bucket string
		fault  faultFunc
		op     func(b *S3) error
		parts  []string
		reqs   int // requests the proxy sees
	}{
		{"put denied", bucket, deny(http.MethodPut, false), func(b *S3) error { return CheckBackend(ctx, b) },
			[]string{"write marker", `access denied to bucket "` + bucket + `"`, "AccessDenied"}, 1},
		// PUT, GET, and the DELETE of the marker that the GET could not
		// read back.
		{"get denied", bucket, deny(http.MethodGet, false), func(b *S3) error { return CheckBackend(ctx, b) },
			[]string{"read marker back", `access denied to bucket "` + bucket + `"`}, 3},
		{"list denied", bucket, deny(http.MethodGet, true), func(b *S3) error {
			_, err := NewRun(b, "run").ListCheckpoints(ctx)
			return err
		}, []string{"list checkpoints", "list s3://" + bucket + "/pre/fix/run/checkpoint_*", `access denied to bucket "` + bucket + `"`}, 1},
		{"no such bucket", "no-such-bucket-here", nil, func(b *S3) error { return CheckBackend(ctx, b) },
			[]string{`bucket "no-such-bucket-here" does not exist`}, 1},
		{"bad bucket name", "Bad_Bucket", nil, func(b *S3) error { return CheckBackend(ctx, b) },
			[]string{`invalid bucket name "Bad_Bucket"`}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			px := newFaultProxy(t, srv, tc.fault)
			b := px.s3(t, tc.bucket, S3Config{}) // the default retry budget
			start := time.Now()
			err := tc.op(b)
			elapsed := time.Since(start)
			wantErrIs(t, err, ErrMisconfigured)
			contains(t, err, append(tc.parts, "s3://"+tc.bucket+"/pre/fix", px.URL)...)
			if elapsed > quick {
				t.Errorf("failed after %v: retried what no retry fixes", elapsed)
			}
			if got := px.seen(nil); len(got) != tc.reqs {
				t.Errorf("the proxy saw %d requests, want %d: %+v", len(got), tc.reqs, got)
			}
			if tc.bucket == bucket {
				eq(t, "markers left", minioKeys(t, srv, bucket, "pre/fix/"+checkPrefix), []string{})
			}
		})
	}
}

// TestS3WrongRegion: a MinIO that serves region eu-west-1, a client that
// signs for us-east-1. MinIO refuses the signature (400
// AuthorizationHeaderMalformed, naming the region it expects); Check fails
// after that one request with ErrMisconfigured, naming the bucket, both
// regions and AWS_REGION, through NewS3 and through Open's environment
// alike; so does a bucket name S3 refuses (Bad_Bucket: 400
// InvalidBucketName). Not parallel: the server's region and Open's
// configuration come from the environment.
func TestS3WrongRegion(t *testing.T) {
	const region = "eu-west-1"
	t.Setenv("MINIO_SITE_REGION", region) // read by the MinIO that Start launches
	srv := miniotest.Start(t)
	ctx := context.Background()
	bucket := "tt-region"
	if _, err := s3.New(s3.Options{
		BaseEndpoint: aws.String(srv.Endpoint), Region: region, UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(miniotest.AccessKey, miniotest.SecretKey, ""),
	}).CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(bucket)}); err != nil {
		t.Fatal(err)
	}
	px := newFaultProxy(t, srv, nil)
	if err := CheckBackend(ctx, px.s3(t, bucket, S3Config{Region: region})); err != nil {
		t.Fatalf("the right region: %v", err)
	}

	px.forget()
	start := time.Now()
	err := CheckBackend(ctx, px.s3(t, bucket, S3Config{Region: "us-east-1"}))
	wantErrIs(t, err, ErrMisconfigured)
	contains(t, err, "s3://"+bucket+"/pre/fix", `bucket "`+bucket+`" is in another region than the one configured, "us-east-1"`, "AWS_REGION", "expecting '"+region+"'")
	if d := time.Since(start); d > quick {
		t.Errorf("failed after %v: retried what no retry fixes", d)
	}
	if got := px.seen(nil); len(got) != 1 {
		t.Errorf("the proxy saw %d requests, want 1: %+v", len(got), got)
	}

	// The same through Open, configured by the environment.
	srv.SetEnv(t) // AWS_REGION=us-east-1
	t.Setenv("AWS_ENDPOINT_URL_S3", px.URL)
	px.forget()
	err = Check(ctx, "s3://"+bucket+"/runs")
	wantErrIs(t, err, ErrMisconfigured)
	contains(t, err, "s3://"+bucket+"/runs", `the one configured, "us-east-1" (set AWS_REGION)`, "expecting '"+region+"'")
	if got := px.seen(nil); len(got) != 1 {
		t.Errorf("the proxy saw %d requests, want 1: %+v", len(got), got)
	}
	t.Setenv("AWS_REGION", region)
	if err := Check(ctx, "s3://"+bucket+"/runs"); err != nil {
		t.Fatalf("AWS_REGION=%s: %v", region, err)
	}
	px.forget()
	err = Check(ctx, "s3://Bad_Bucket/runs")
	wantErrIs(t, err, ErrMisconfigured)
	contains(t, err, `invalid bucket name "Bad_Bucket"`, "s3://Bad_Bucket/runs")
	if got := px.seen(nil); len(got) != 1 {
		t.Errorf("the proxy saw %d requests, want 1: %+v", len(got), got)
	}
}
