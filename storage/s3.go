package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/feature/s3/manager"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/middleware"
)

// Defaults of S3Config.
const (
	DefaultS3PartSize    = 16 << 20
	DefaultS3Concurrency = 4
	DefaultS3MaxAttempts = 10
	// DefaultS3MaxBackoff caps one retry's wait. With 10 attempts and
	// exponential jitter the retries span about half a minute: a restarting
	// MinIO or a throttling burst, not a dead endpoint.
	DefaultS3MaxBackoff = 5 * time.Second
)

// Environment variables read by S3ConfigFromEnv, besides the AWS SDK's own.
const (
	// EnvS3PathStyle ("true"/"false") forces path-style addressing.
	EnvS3PathStyle = "TEMPOTRAIN_S3_PATH_STYLE"
)

// S3Config configures an S3 backend. The zero value uses the standard AWS
// chain for everything and the defaults below.
type S3Config struct {
	// Endpoint overrides the S3 endpoint ("http://127.0.0.1:9000" for a
	// MinIO). Default: the AWS chain (AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL,
	// endpoint_url in the shared config), else AWS itself.
	Endpoint string
	// Region. Default: the AWS chain (AWS_REGION, the profile), else us-east-1.
	Region string
	// AccessKeyID and SecretAccessKey (and SessionToken) set static
	// credentials. Default: the AWS chain (env, shared files, SSO, instance
	// role...).
	AccessKeyID, SecretAccessKey, SessionToken string
	// PathStyle addresses buckets as http://host/bucket/key instead of
	// http://bucket.host/key. Default (nil): true when a custom endpoint is
	// set (MinIO serves path-style unless it is given a domain), else false.
	PathStyle *bool
	// PartSize of multipart uploads; objects up to it go in one PutObject.
	// Default DefaultS3PartSize (16 MiB); at least 5 MiB.
	PartSize int64
	// Concurrency is how many parts of one upload are in flight. Default
	// DefaultS3Concurrency.
	Concurrency int
	// MaxAttempts per request, the first included, with exponential backoff
	// and jitter between them, on 5xx, throttling and connection errors.
	// Default DefaultS3MaxAttempts; AWS_MAX_ATTEMPTS overrides it.
	MaxAttempts int
	// MaxBackoff caps the wait before one retry (the SDK's exponential
	// jitter: up to 1s, 2s, 4s... before attempts 2, 3, 4...), and the wait
	// before each resume of a broken download stream. Default
	// DefaultS3MaxBackoff.
	MaxBackoff time.Duration
	// SignPayload includes each request body's sha256 in its SigV4
	// signature. Default false: bodies are sent as UNSIGNED-PAYLOAD, which is
	// what the SDK itself does over HTTPS; over plain HTTP (a MinIO on a
	// private network) signing would hash every byte a second time, on top of
	// the manifest's sha256, and halve upload throughput on a small CPU.
	// Integrity does not depend on it: S3 checks each request's CRC32
	// checksum, and restores check every file's sha256.
	SignPayload bool
}

// S3ConfigFromEnv returns the config Open uses for s3:// paths: everything
// from the AWS chain, plus TEMPOTRAIN_S3_PATH_STYLE.
func S3ConfigFromEnv() (S3Config, error) {
	var c S3Config
	if v := os.Getenv(EnvS3PathStyle); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return c, fmt.Errorf("%w: %s=%q: want true or false", ErrMisconfigured, EnvS3PathStyle, v)
		}
		c.PathStyle = &b
	}
	return c, nil
}

// sharedHTTPClient serves every S3 backend of the process: the runtime opens
// a backend per activity, and one transport keeps their connections pooled
// instead of leaving a pool of idle ones behind each.
var sharedHTTPClient = awshttp.NewBuildableClient()

// S3 is a Backend over a bucket and key prefix of S3 or an S3-compatible
// server.
type S3 struct {
	client   *s3.Client
	uploader *manager.Uploader
	bucket   string
	prefix   string // no slashes at either end; "" for the bucket root
	endpoint string // for messages
	// maxBackoff caps the waits between resumes of a broken Get stream, as
	// S3Config.MaxBackoff caps the SDK's retries.
	maxBackoff time.Duration
}

var _ Backend = (*S3)(nil)

func openS3(ctx context.Context, storagePath string) (Backend, error) {
	bucket, prefix, err := parseS3Path(storagePath)
	if err != nil {
		return nil, err
	}
	cfg, err := S3ConfigFromEnv()
	if err != nil {
		return nil, fmt.Errorf("storage path %q: %w", storagePath, err)
	}
	return NewS3(ctx, bucket, prefix, cfg)
}

// parseS3Path splits "s3://bucket/prefix" into bucket and prefix (no slashes
// at either end).
func parseS3Path(p string) (bucket, prefix string, err error) {
	rest := strings.TrimPrefix(p, "s3://")
	bucket, prefix, _ = strings.Cut(rest, "/")
	if bucket == "" {
		return "", "", fmt.Errorf("%w: storage path %q names no bucket (want s3://bucket/prefix)", ErrMisconfigured, p)
	}
	// S3's rules, with the upper case and underscores of legacy buckets; a
	// character outside them would not survive the request's URL.
	for _, c := range bucket {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '-' || c == '_') {
			return "", "", fmt.Errorf("%w: storage path %q: bucket name %q has %q (want letters, digits, '.', '-', '_')", ErrMisconfigured, p, bucket, c)
		}
	}
	prefix = strings.Trim(prefix, "/")
	if prefix != "" {
		if err := validKey(prefix); err != nil {
			return "", "", fmt.Errorf("%w: storage path %q: prefix: %w", ErrMisconfigured, p, err)
		}
	}
	return bucket, prefix, nil
}

// NewS3 returns a backend over s3://bucket/prefix. It loads the AWS config
// but sends no request; Check does.
func NewS3(ctx context.Context, bucket, prefix string, c S3Config) (*S3, error) {
	uri := "s3://" + bucket
	if prefix != "" {
		uri += "/" + prefix
	}
	if c.PartSize == 0 {
		c.PartSize = DefaultS3PartSize
	}
	if c.PartSize < manager.MinUploadPartSize {
		return nil, fmt.Errorf("%w: %s: part size %d is below S3's minimum %d", ErrMisconfigured, uri, c.PartSize, manager.MinUploadPartSize)
	}
	if c.Concurrency <= 0 {
		c.Concurrency = DefaultS3Concurrency
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = DefaultS3MaxAttempts
	}
	if c.MaxBackoff <= 0 {
		c.MaxBackoff = DefaultS3MaxBackoff
	}
	opts := []func(*config.LoadOptions) error{
		config.WithHTTPClient(sharedHTTPClient),
		config.WithRetryer(func() aws.Retryer {
			return retry.NewStandard(func(o *retry.StandardOptions) {
				o.MaxAttempts = c.MaxAttempts
				o.MaxBackoff = c.MaxBackoff
				// The default client-side retry quota refuses retries after
				// a burst of failures; during an outage that turns every
				// in-flight part into a failure at once. Backoff alone paces
				// us.
				o.RateLimiter = ratelimit.None
			})
		}),
	}
	if c.Region != "" {
		opts = append(opts, config.WithRegion(c.Region))
	}
	if c.AccessKeyID != "" || c.SecretAccessKey != "" {
		opts = append(opts, config.WithCredentialsProvider(
			credentials.NewStaticCredentialsProvider(c.AccessKeyID, c.SecretAccessKey, c.SessionToken)))
	}
	awsCfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: load AWS config: %w", ErrMisconfigured, uri, err)
	}
	if awsCfg.Region == "" {
		awsCfg.Region = "us-east-1"
	}
	custom := c.Endpoint != "" || awsCfg.BaseEndpoint != nil || os.Getenv("AWS_ENDPOINT_URL_S3") != ""
	pathStyle := custom
	if c.PathStyle != nil {
		pathStyle = *c.PathStyle
	}
	client := s3.NewFromConfig(awsCfg, func(o *s3.Options) {
		if c.Endpoint != "" {
			o.BaseEndpoint = aws.String(c.Endpoint)
		}
		o.UsePathStyle = pathStyle
		// Multipart objects have no whole-object checksum to validate; the
		// SDK would log that on every such GET. Restores check sha256.
		o.DisableLogOutputChecksumValidationSkipped = true
		if !c.SignPayload {
			o.APIOptions = append(o.APIOptions, unsignedPayload)
		}
	})
	endpoint := c.Endpoint
	if endpoint == "" {
		endpoint = os.Getenv("AWS_ENDPOINT_URL_S3")
	}
	if endpoint == "" && awsCfg.BaseEndpoint != nil {
		endpoint = *awsCfg.BaseEndpoint
	}
	if endpoint == "" {
		endpoint = "AWS " + awsCfg.Region
	}
	return &S3{
		client: client,
		uploader: manager.NewUploader(client, func(u *manager.Uploader) {
			u.PartSize = c.PartSize
			u.Concurrency = c.Concurrency
		}),
		bucket:     bucket,
		prefix:     prefix,
		endpoint:   endpoint,
		maxBackoff: c.MaxBackoff,
	}, nil
}

// unsignedPayload marks every request's body UNSIGNED-PAYLOAD before the
// checksum and signing middleware run, so neither hashes the body with
// sha256 (see S3Config.SignPayload).
func unsignedPayload(stack *middleware.Stack) error {
	return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("TempotrainUnsignedPayload",
		func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			return next.HandleInitialize(v4.SetPayloadHash(ctx, "UNSIGNED-PAYLOAD"), in)
		}), middleware.After)
}

// Client is the underlying S3 client, for what the Backend does not cover.
func (s *S3) Client() *s3.Client { return s.client }

// Bucket is the bucket the backend stores in.
func (s *S3) Bucket() string { return s.bucket }

func (s *S3) full(key string) string {
	if s.prefix == "" {
		return key
	}
	return s.prefix + "/" + key
}

// URI returns "s3://bucket/prefix/key".
func (s *S3) URI(key string) string {
	k := s.full(key)
	if key == "" {
		k = s.prefix
	}
	if k == "" {
		return "s3://" + s.bucket
	}
	return "s3://" + s.bucket + "/" + k
}

// Put uploads in one PutObject up to PartSize, else in concurrent parts of a
// multipart upload that is completed only when every part is in, and aborted
// on any error: either way the object appears whole or not at all. A
// seekable reader (a file) is read in place, part by part, and each request
// can be retried; another reader is buffered one part at a time.
func (s *S3) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	if err := validKey(key); err != nil {
		return fmt.Errorf("%s: %w", s.URI(""), err)
	}
	// The uploader reads a seekable reader with ReadAt from offset 0, so only
	// one positioned at 0 is passed as is; it can then be read part by part
	// in parallel and rewound for retries.
	body := newExactReader(r, size)
	if sk, ok := r.(interface {
		io.Seeker
		io.ReaderAt
	}); ok && size >= 0 {
		if cur, err := sk.Seek(0, io.SeekCurrent); err == nil && cur == 0 {
			n, err := seekerLen(sk)
			if err != nil {
				return fmt.Errorf("put %s: %w", s.URI(key), err)
			}
			if n != size {
				return fmt.Errorf("put %s: reader holds %d bytes, %d announced", s.URI(key), n, size)
			}
			body = r
		}
	}
	_, err := s.uploader.Upload(ctx, &s3.PutObjectInput{
		Bucket: aws.String(s.bucket),
		Key:    aws.String(s.full(key)),
		Body:   body,
	})
	var mf manager.MultiUploadFailure
	if errors.As(err, &mf) && ctx.Err() != nil {
		// The uploader aborts a failed multipart upload with the caller's
		// context; a cancelled one cannot, and would leave its parts behind.
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		s.client.AbortMultipartUpload(actx, &s3.AbortMultipartUploadInput{
			Bucket: aws.String(s.bucket), Key: aws.String(s.full(key)), UploadId: aws.String(mf.UploadID()),
		})
	}
	return s.wrapErr("put", key, err)
}

func seekerLen(s io.Seeker) (int64, error) {
	cur, err := s.Seek(0, io.SeekCurrent)
	if err != nil {
		return 0, err
	}
	end, err := s.Seek(0, io.SeekEnd)
	if err != nil {
		return 0, err
	}
	if _, err := s.Seek(cur, io.SeekStart); err != nil {
		return 0, err
	}
	return end - cur, nil
}

// Get streams the object. A stream cut mid-way (a reset connection, a
// restarting server) is resumed from where it broke with a ranged GET of
// the same object version (If-Match on its ETag), with backoff, so one
// broken connection does not fail a large restore.
func (s *S3) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if err := validKey(key); err != nil {
		return nil, fmt.Errorf("%s: %w", s.URI(""), err)
	}
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{
		Bucket: aws.String(s.bucket),
		Key:    aws.String(s.full(key)),
	})
	if err != nil {
		return nil, s.wrapErr("get", key, err)
	}
	return &s3Reader{
		ctx:  ctx,
		s:    s,
		key:  key,
		etag: aws.ToString(out.ETag),
		size: aws.ToInt64(out.ContentLength),
		body: out.Body,
	}, nil
}

// getFrom streams the object from byte off on (a ranged GET); an offset at
// or past its end reads nothing. A log follower reads what is new this way.
func (s *S3) getFrom(ctx context.Context, key string, off int64) (io.ReadCloser, error) {
	if off <= 0 {
		return s.Get(ctx, key)
	}
	if err := validKey(key); err != nil {
		return nil, fmt.Errorf("%s: %w", s.URI(""), err)
	}
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{
		Bucket: aws.String(s.bucket),
		Key:    aws.String(s.full(key)),
		Range:  aws.String(fmt.Sprintf("bytes=%d-", off)),
	})
	var ae smithy.APIError
	if errors.As(err, &ae) && ae.ErrorCode() == "InvalidRange" {
		return io.NopCloser(strings.NewReader("")), nil
	}
	if err != nil {
		return nil, s.wrapErr("get", key, err)
	}
	return out.Body, nil
}

// maxResumes bounds how often a Get stream is reopened without progress.
const maxResumes = 8

type s3Reader struct {
	ctx     context.Context
	s       *S3
	key     string
	etag    string
	size    int64
	off     int64
	body    io.ReadCloser
	pending error // a body error seen along with data, handled next Read
	fails   int   // reopenings since the last progress
	resumes int   // reopenings in all
}

func (r *s3Reader) Read(p []byte) (int, error) {
	for {
		if r.body == nil {
			if r.off >= r.size {
				return 0, io.EOF
			}
			if err := r.reopen(); err != nil {
				return 0, err
			}
		}
		var n int
		err := r.pending
		r.pending = nil
		if err == nil {
			n, err = r.body.Read(p)
			r.off += int64(n)
		}
		if err == io.EOF && r.off < r.size {
			err = io.ErrUnexpectedEOF
		}
		if err == nil || err == io.EOF {
			if n > 0 {
				r.fails = 0
			}
			return n, err
		}
		if n > 0 {
			r.fails = 0
			r.pending = err
			return n, nil
		}
		if r.ctx.Err() != nil {
			return 0, fmt.Errorf("get %s: %w", r.s.URI(r.key), r.ctx.Err())
		}
		r.body.Close()
		r.body = nil
		r.fails++
		if r.fails > maxResumes {
			return 0, fmt.Errorf("get %s: stream broke at byte %d of %d, %d resumes failed: %w", r.s.URI(r.key), r.off, r.size, maxResumes, err)
		}
		if err := sleepCtx(r.ctx, backoff(r.fails, r.s.maxBackoff)); err != nil {
			return 0, fmt.Errorf("get %s: %w", r.s.URI(r.key), err)
		}
	}
}

func (r *s3Reader) reopen() error {
	in := &s3.GetObjectInput{
		Bucket: aws.String(r.s.bucket),
		Key:    aws.String(r.s.full(r.key)),
		Range:  aws.String(fmt.Sprintf("bytes=%d-", r.off)),
	}
	if r.etag != "" {
		in.IfMatch = aws.String(r.etag)
	}
	out, err := r.s.client.GetObject(r.ctx, in)
	if err != nil {
		return r.s.wrapErr(fmt.Sprintf("resume at byte %d of", r.off), r.key, err)
	}
	r.body = out.Body
	r.resumes++
	return nil
}

func (r *s3Reader) Close() error {
	if r.body == nil {
		return nil
	}
	err := r.body.Close()
	r.body = nil
	return err
}

// backoff is exponential from 100 ms, capped at limit (S3Config.MaxBackoff,
// or DefaultS3MaxBackoff when unset).
func backoff(attempt int, limit time.Duration) time.Duration {
	if limit <= 0 {
		limit = DefaultS3MaxBackoff
	}
	d := 100 * time.Millisecond << min(attempt, 10)
	return min(d, limit)
}

// List pages through ListObjectsV2.
func (s *S3) List(ctx context.Context, prefix string) ([]ObjectInfo, error) {
	return s.listAfter(ctx, prefix, "")
}

// listAfter is List of the keys after startAfter (ListObjectsV2's
// StartAfter; "" for all), for the metrics segments (see afterLister).
func (s *S3) listAfter(ctx context.Context, prefix, startAfter string) ([]ObjectInfo, error) {
	full := s.full(prefix)
	if s.prefix != "" && prefix == "" {
		full = s.prefix + "/"
	}
	in := &s3.ListObjectsV2Input{
		Bucket: aws.String(s.bucket),
		Prefix: aws.String(full),
	}
	if startAfter != "" {
		in.StartAfter = aws.String(s.full(startAfter))
	}
	p := s3.NewListObjectsV2Paginator(s.client, in)
	var out []ObjectInfo
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, s.wrapErr("list", prefix+"*", err)
		}
		for _, o := range page.Contents {
			k := aws.ToString(o.Key)
			if s.prefix != "" {
				k = strings.TrimPrefix(k, s.prefix+"/")
			}
			out = append(out, ObjectInfo{Key: k, Size: aws.ToInt64(o.Size)})
		}
	}
	// S3 sorts by UTF-8 bytes already; MinIO too. Sorting again costs
	// nothing and keeps the contract independent of the server.
	sortObjects(out)
	return out, nil
}

// Delete removes one object; S3 deletes of missing keys succeed.
func (s *S3) Delete(ctx context.Context, key string) error {
	if err := validKey(key); err != nil {
		return fmt.Errorf("%s: %w", s.URI(""), err)
	}
	_, err := s.client.DeleteObject(ctx, &s3.DeleteObjectInput{
		Bucket: aws.String(s.bucket),
		Key:    aws.String(s.full(key)),
	})
	return s.wrapErr("delete", key, err)
}

// deleteKeys removes up to 1000 keys per DeleteObjects request.
func (s *S3) deleteKeys(ctx context.Context, keys []string) error {
	for len(keys) > 0 {
		n := min(len(keys), 1000)
		ids := make([]types.ObjectIdentifier, n)
		for i, k := range keys[:n] {
			ids[i] = types.ObjectIdentifier{Key: aws.String(s.full(k))}
		}
		out, err := s.client.DeleteObjects(ctx, &s3.DeleteObjectsInput{
			Bucket: aws.String(s.bucket),
			Delete: &types.Delete{Objects: ids, Quiet: aws.Bool(true)},
		})
		if err != nil {
			return s.wrapErr("delete", keys[0]+"...", err)
		}
		if len(out.Errors) > 0 {
			e := out.Errors[0]
			return fmt.Errorf("delete s3://%s/%s: %s: %s (%d of %d keys failed)", s.bucket, aws.ToString(e.Key), aws.ToString(e.Code), aws.ToString(e.Message), len(out.Errors), n)
		}
		keys = keys[n:]
	}
	return nil
}

// abortUploads aborts the multipart uploads left under prefix by a process
// that died mid-upload: they are invisible but hold storage until aborted.
// It is best effort: a store that does not list uploads, or a policy that
// does not allow it (s3:ListBucketMultipartUploads), must not fail a commit
// or a delete; a bucket lifecycle rule (AbortIncompleteMultipartUpload) is
// the backstop. Only a cancelled context is reported.
func (s *S3) abortUploads(ctx context.Context, prefix string) error {
	full := s.full(prefix)
	uploads, err := s.listUploads(ctx, full)
	if err == nil && len(uploads) == 0 {
		// MinIO lists uploads only for an exact key or for the whole
		// bucket; filter the whole bucket's here.
		uploads, err = s.listUploads(ctx, "")
	}
	if err != nil {
		return ctx.Err()
	}
	for _, u := range uploads {
		if !strings.HasPrefix(aws.ToString(u.Key), full) {
			continue
		}
		s.client.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{
			Bucket: aws.String(s.bucket), Key: u.Key, UploadId: u.UploadId,
		})
	}
	return ctx.Err()
}

// maxUploadPages bounds the listing of in-progress uploads (1000 a page).
const maxUploadPages = 10

func (s *S3) listUploads(ctx context.Context, prefix string) ([]types.MultipartUpload, error) {
	in := &s3.ListMultipartUploadsInput{Bucket: aws.String(s.bucket), Prefix: aws.String(prefix)}
	var all []types.MultipartUpload
	for range maxUploadPages {
		out, err := s.client.ListMultipartUploads(ctx, in)
		if err != nil {
			return nil, err
		}
		all = append(all, out.Uploads...)
		if !aws.ToBool(out.IsTruncated) {
			break
		}
		in.KeyMarker, in.UploadIdMarker = out.NextKeyMarker, out.NextUploadIdMarker
	}
	return all, nil
}

// wrapErr names the object and endpoint, maps a missing key to ErrNotFound,
// and turns the errors no retry can fix into ErrMisconfigured with a message
// that says what to change.
func (s *S3) wrapErr(op, key string, err error) error {
	if err == nil {
		return nil
	}
	where := fmt.Sprintf("%s %s (endpoint %s)", op, s.URI(key), s.endpoint)
	var ae smithy.APIError
	if errors.As(err, &ae) {
		switch ae.ErrorCode() {
		case "NoSuchKey", "NotFound":
			return fmt.Errorf("%s: %w", where, ErrNotFound)
		case "NoSuchBucket":
			return fmt.Errorf("%w: %s: bucket %q does not exist: %w", ErrMisconfigured, where, s.bucket, err)
		case "InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken", "ExpiredToken", "TokenRefreshRequired":
			return fmt.Errorf("%w: %s: credentials rejected (check AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY or AWS_PROFILE): %w", ErrMisconfigured, where, err)
		case "AccessDenied", "AllAccessDisabled", "AccountProblem":
			return fmt.Errorf("%w: %s: access denied to bucket %q: %w", ErrMisconfigured, where, s.bucket, err)
		case "PermanentRedirect", "AuthorizationHeaderMalformed", "IllegalLocationConstraintException":
			// The configured region is named too: MinIO's message names only
			// the one it expects.
			return fmt.Errorf("%w: %s: bucket %q is in another region than the one configured, %q (set AWS_REGION): %w", ErrMisconfigured, where, s.bucket, s.client.Options().Region, err)
		case "InvalidBucketName":
			return fmt.Errorf("%w: %s: invalid bucket name %q: %w", ErrMisconfigured, where, s.bucket, err)
		}
	}
	// The SDK reports a credential chain that found nothing as an identity
	// error before any request is sent; it has no type of its own.
	if strings.Contains(err.Error(), "get identity:") {
		return fmt.Errorf("%w: %s: no usable AWS credentials (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE): %w", ErrMisconfigured, where, err)
	}
	return fmt.Errorf("%s: %w", where, err)
}
