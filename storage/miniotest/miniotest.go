// Package miniotest runs a real MinIO server for tests and benchmarks: on a
// free loopback port, with a fresh data directory, stopped when the test
// ends. Any package's tests can use it to point storage at S3:
//
//	srv := miniotest.Start(t)             // skips, or fails under CI, without a minio binary
//	bucket := srv.CreateBucket(t, "")     // a new empty bucket
//	srv.SetEnv(t)                         // AWS_* env for storage.Open("s3://...")
//	path := "s3://" + bucket + "/runs"
//
// or, without touching the environment (so tests can run in parallel):
//
//	storage.NewS3(ctx, bucket, "runs", storage.S3Config{Endpoint: srv.Endpoint,
//		Region: miniotest.Region, AccessKeyID: miniotest.AccessKey,
//		SecretAccessKey: miniotest.SecretKey})
//
// The minio binary is found through $MINIO_BIN, then PATH, then $GOBIN,
// $GOPATH/bin and ~/go/bin. Install it with:
//
//	GOTOOLCHAIN=local GOFLAGS=-mod=mod go install github.com/minio/minio@v0.0.0-20260212201848-7aac2a2c5b7c
//
// run from outside any module (e.g. from /tmp). Without it, Start skips the
// test, or fails it when TEMPOTRAIN_REQUIRE_MINIO=1 (CI sets it, so a CI
// machine without MinIO cannot pass by skipping).
//
// The package does not import tempotrain's storage, so storage's own
// in-package tests can use it.
package miniotest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// InstallHint says how to get the binary.
const InstallHint = "install MinIO: (cd /tmp && GOTOOLCHAIN=local GOFLAGS=-mod=mod go install github.com/minio/minio@v0.0.0-20260212201848-7aac2a2c5b7c), or set MINIO_BIN"

// EnvRequire makes a missing binary fail tests instead of skipping them.
const EnvRequire = "TEMPOTRAIN_REQUIRE_MINIO"

// Credentials and region of every server this package starts.
const (
	AccessKey = "tempotrain"
	SecretKey = "tempotrain-secret"
	Region    = "us-east-1"
)

// startTimeout bounds how long a server may take to answer its health check.
const startTimeout = 60 * time.Second

// Server is a running (or stopped) MinIO.
type Server struct {
	// Endpoint is the S3 endpoint, "http://127.0.0.1:PORT".
	Endpoint string
	// Dir holds the data; it survives Stop, so Restart keeps every object.
	Dir string

	bin, addr, certs string
	log              *lockedBuffer

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd exits
}

// Binary returns the path of the minio binary, or an error with InstallHint.
func Binary() (string, error) {
	if p := os.Getenv("MINIO_BIN"); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("MINIO_BIN=%s: %w; %s", p, err, InstallHint)
		}
		return p, nil
	}
	if p, err := exec.LookPath("minio"); err == nil {
		return p, nil
	}
	var dirs []string
	if d := os.Getenv("GOBIN"); d != "" {
		dirs = append(dirs, d)
	}
	if d := os.Getenv("GOPATH"); d != "" {
		for _, p := range filepath.SplitList(d) {
			dirs = append(dirs, filepath.Join(p, "bin"))
		}
	}
	if h, err := os.UserHomeDir(); err == nil {
		dirs = append(dirs, filepath.Join(h, "go", "bin"))
	}
	for _, d := range dirs {
		p := filepath.Join(d, "minio")
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p, nil
		}
	}
	return "", fmt.Errorf("no minio binary in $MINIO_BIN, PATH or %v: %s", dirs, InstallHint)
}

// Launch starts a server with its data in dir (created if needed). It is
// Start without a testing.TB, for benchmark programs; call Close when done.
func Launch(dir string) (*Server, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	certs := filepath.Join(dir, ".certs")
	data := filepath.Join(dir, "data")
	for _, d := range []string{certs, data} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	// A port taken between our probe and MinIO's bind makes the start fail;
	// a second port then works.
	var last error
	for range 3 {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		s := &Server{
			Endpoint: "http://" + port,
			Dir:      data,
			bin:      bin,
			addr:     port,
			certs:    certs,
			log:      &lockedBuffer{},
		}
		if last = s.start(); last == nil {
			return s, nil
		}
	}
	return nil, last
}

// Start launches a server for the test and stops it when the test ends.
// Without a minio binary it skips the test, or fails it when
// TEMPOTRAIN_REQUIRE_MINIO=1.
func Start(tb testing.TB) *Server {
	tb.Helper()
	if _, err := Binary(); err != nil {
		Missing(tb, err)
	}
	s, err := Launch(tb.TempDir())
	if err != nil {
		tb.Fatalf("start minio: %v", err)
	}
	tb.Cleanup(s.Close)
	return s
}

// Missing skips tb, or fails it under TEMPOTRAIN_REQUIRE_MINIO=1, for a
// missing binary (err from Binary).
func Missing(tb testing.TB, err error) {
	tb.Helper()
	if os.Getenv(EnvRequire) == "1" {
		tb.Fatalf("MinIO required (%s=1) but not usable: %v", EnvRequire, err)
	}
	tb.Skipf("MinIO not installed, skipping: %v", err)
}

func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func (s *Server) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return errors.New("minio already running")
	}
	console, err := freePort()
	if err != nil {
		return err
	}
	cmd := exec.Command(s.bin, "server", s.Dir, "--address", s.addr, "--console-address", console,
		"--certs-dir", s.certs, "--quiet")
	cmd.Env = append(os.Environ(),
		"MINIO_ROOT_USER="+AccessKey,
		"MINIO_ROOT_PASSWORD="+SecretKey,
		"MINIO_BROWSER=off",
		"MINIO_UPDATE=off",
		"MINIO_CI_CD=1",
	)
	cmd.Stdout = s.log
	cmd.Stderr = s.log
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", s.bin, err)
	}
	done := make(chan struct{})
	go func() {
		cmd.Wait()
		close(done)
	}()
	if err := waitHealthy(s.Endpoint, done); err != nil {
		cmd.Process.Kill()
		<-done
		return fmt.Errorf("minio on %s: %w; its output:\n%s", s.addr, err, s.log.tail(4000))
	}
	s.cmd, s.done = cmd, done
	return nil
}

// waitHealthy polls MinIO's liveness endpoint until it answers 200, the
// process exits, or startTimeout passes.
func waitHealthy(endpoint string, exited <-chan struct{}) error {
	client := &http.Client{Timeout: time.Second}
	deadline := time.After(startTimeout)
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	for {
		resp, err := client.Get(endpoint + "/minio/health/live")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-exited:
			return errors.New("exited during start")
		case <-deadline:
			return fmt.Errorf("not healthy after %v (last: %v)", startTimeout, err)
		case <-tick.C:
		}
	}
}

// Stop kills the server at once, as a crash would; in-flight requests break.
// The data directory stays.
func (s *Server) Stop(tb testing.TB) {
	tb.Helper()
	if err := s.stop(); err != nil {
		tb.Fatal(err)
	}
}

func (s *Server) stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return nil
	}
	if err := s.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("kill minio: %w", err)
	}
	<-s.done
	s.cmd, s.done = nil, nil
	return nil
}

// StartAgain restarts a stopped server on the same address and data.
func (s *Server) StartAgain(tb testing.TB) {
	tb.Helper()
	if err := s.start(); err != nil {
		tb.Fatalf("restart minio: %v", err)
	}
}

// Restart is Stop then StartAgain.
func (s *Server) Restart(tb testing.TB) {
	tb.Helper()
	s.Stop(tb)
	s.StartAgain(tb)
}

// Close stops the server.
func (s *Server) Close() { s.stop() }

// Logs returns the tail of the server's output.
func (s *Server) Logs() string { return s.log.tail(8000) }

// Env returns the environment that points the AWS chain, and so
// storage.Open("s3://..."), at this server; for child processes.
func (s *Server) Env() []string {
	return []string{
		"AWS_ENDPOINT_URL_S3=" + s.Endpoint,
		"AWS_ACCESS_KEY_ID=" + AccessKey,
		"AWS_SECRET_ACCESS_KEY=" + SecretKey,
		"AWS_REGION=" + Region,
		"AWS_EC2_METADATA_DISABLED=true",
		"TEMPOTRAIN_S3_PATH_STYLE=true",
	}
}

// SetEnv sets Env in this process for the test (t.Setenv: not in parallel
// tests).
func (s *Server) SetEnv(t *testing.T) {
	t.Helper()
	for _, kv := range s.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
}

// Client returns a plain S3 client for this server, with the SDK's defaults
// apart from endpoint, credentials and path-style.
func (s *Server) Client() *s3.Client {
	return s3.New(s3.Options{
		BaseEndpoint: aws.String(s.Endpoint),
		Region:       Region,
		Credentials:  credentials.NewStaticCredentialsProvider(AccessKey, SecretKey, ""),
		UsePathStyle: true,
		// Quiet: GETs of multipart objects would each log a warning.
		DisableLogOutputChecksumValidationSkipped: true,
	})
}

var bucketSeq atomic.Int64

// CreateBucket makes a new empty bucket and returns its name; name "" picks
// a unique one.
func (s *Server) CreateBucket(tb testing.TB, name string) string {
	tb.Helper()
	name, err := s.MakeBucket(context.Background(), name)
	if err != nil {
		tb.Fatal(err)
	}
	return name
}

// MakeBucket is CreateBucket without a testing.TB.
func (s *Server) MakeBucket(ctx context.Context, name string) (string, error) {
	if name == "" {
		name = fmt.Sprintf("tt-%d-%d", os.Getpid(), bucketSeq.Add(1))
	}
	if _, err := s.Client().CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(name)}); err != nil {
		return "", fmt.Errorf("create bucket %s on %s: %w", name, s.Endpoint, err)
	}
	return name, nil
}

// lockedBuffer collects the server's output; MinIO writes from several
// goroutines through two pipes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.b.Len() > 1<<20 {
		l.b.Next(l.b.Len() / 2)
	}
	return l.b.Write(p)
}

func (l *lockedBuffer) tail(n int) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.b.Bytes()
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
