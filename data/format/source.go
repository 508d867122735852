package format

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"

	"github.com/tempotrain/tempotrain/storage"
)

// fileRef is one file of a dataset, local or in S3.
type fileRef struct {
	uri  string // for messages and fingerprints
	size int64
	path string // local file
	// S3 object
	bucket *s3Bucket
	key    string
	// rel is the path below the URI's directory (images: "class/x.png").
	rel string
}

// s3Bucket reaches one bucket through storage's S3 backend: the same
// client, credentials, endpoint and retries as checkpoints.
type s3Bucket struct {
	b *storage.S3
}

var extensions = map[string][]string{
	"csv":     {".csv", ".tsv", ".txt"},
	"parquet": {".parquet", ".pq"},
	"images":  {".png", ".jpg", ".jpeg"},
}

func hasGlob(s string) bool { return strings.ContainsAny(s, "*?[") }

// hidden says whether a path element is one that readers skip (_SUCCESS,
// .crc files, .DS_Store), as Spark and pyarrow do.
func hidden(rel string) bool {
	for _, el := range strings.Split(rel, "/") {
		if strings.HasPrefix(el, ".") || strings.HasPrefix(el, "_") {
			return true
		}
	}
	return false
}

func keepExt(name, format string) bool {
	exts, ok := extensions[format]
	if !ok {
		return true
	}
	low := strings.ToLower(name)
	for _, e := range exts {
		if strings.HasSuffix(low, e) {
			return true
		}
	}
	return false
}

// listFiles resolves a dataset URI to its files, sorted by URI. A directory
// or prefix is listed recursively, keeping files of the format's extensions
// (all files when the format is not known yet); a glob matches the last
// element. Nothing found is ErrInvalid.
func listFiles(ctx context.Context, uri, format string) ([]*fileRef, error) {
	if strings.HasPrefix(uri, "s3://") {
		return listS3(ctx, uri, format)
	}
	p := strings.TrimPrefix(uri, "file://")
	if !filepath.IsAbs(p) {
		return nil, invalidf("%s: want an absolute path, file:///... or s3://bucket/...", uri)
	}
	var files []*fileRef
	if hasGlob(filepath.Base(p)) {
		matches, err := filepath.Glob(p)
		if err != nil {
			return nil, invalidf("%s: %v", uri, err)
		}
		for _, m := range matches {
			st, err := os.Stat(m)
			if err != nil || !st.Mode().IsRegular() || hidden(filepath.Base(m)) {
				continue
			}
			files = append(files, &fileRef{uri: m, path: m, size: st.Size(), rel: filepath.Base(m)})
		}
		if len(files) == 0 {
			return nil, invalidf("%s: no file matches", uri)
		}
		return files, nil
	}
	st, err := os.Stat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, invalidf("%s: no such file or directory", uri)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", uri, err)
	}
	if st.Mode().IsRegular() {
		return []*fileRef{{uri: p, path: p, size: st.Size(), rel: filepath.Base(p)}}, nil
	}
	if !st.IsDir() {
		return nil, invalidf("%s: not a regular file or directory", uri)
	}
	err = filepath.WalkDir(p, func(f string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(p, f)
		rel = filepath.ToSlash(rel)
		if rel == "." {
			return nil
		}
		if hidden(d.Name()) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() || !keepExt(d.Name(), format) {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if !info.Mode().IsRegular() {
			return nil
		}
		files = append(files, &fileRef{uri: f, path: f, size: info.Size(), rel: rel})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", uri, err)
	}
	if len(files) == 0 {
		return nil, invalidf("%s: no %sfiles in the directory", uri, formatWord(format))
	}
	sort.Slice(files, func(i, j int) bool { return files[i].uri < files[j].uri })
	return files, nil
}

func formatWord(format string) string {
	if format == "" {
		return ""
	}
	return format + " "
}

// openBucket opens storage's S3 backend for a bucket: the AWS
// configuration as it is now (the environment, the shared files).
func openBucket(ctx context.Context, bucket string) (*s3Bucket, error) {
	be, err := storage.Open(ctx, "s3://"+bucket)
	if err != nil {
		return nil, s3Err(err)
	}
	s, ok := be.(*storage.S3)
	if !ok {
		return nil, fmt.Errorf("s3://%s: storage gave a %T, not an S3 backend", bucket, be)
	}
	return &s3Bucket{b: s}, nil
}

// s3Err marks a storage error that no retry fixes as ErrInvalid too.
func s3Err(err error) error {
	if errors.Is(err, storage.ErrMisconfigured) {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return err
}

func listS3(ctx context.Context, uri, format string) ([]*fileRef, error) {
	bucket, key, _ := strings.Cut(strings.TrimPrefix(uri, "s3://"), "/")
	if bucket == "" {
		return nil, invalidf("%s: names no bucket", uri)
	}
	b, err := openBucket(ctx, bucket)
	if err != nil {
		return nil, err
	}
	var files []*fileRef
	add := func(o storage.ObjectInfo, rel string) {
		files = append(files, &fileRef{uri: "s3://" + bucket + "/" + o.Key, size: o.Size, bucket: b, key: o.Key, rel: rel})
	}
	base := path.Base(key)
	switch {
	case hasGlob(base) && key != "":
		prefix := key[:strings.IndexAny(key, "*?[")]
		objs, err := b.b.List(ctx, prefix)
		if err != nil {
			return nil, s3Err(fmt.Errorf("list %s: %w", uri, err))
		}
		for _, o := range objs {
			if ok, _ := path.Match(key, o.Key); ok && !hidden(path.Base(o.Key)) {
				add(o, path.Base(o.Key))
			}
		}
		if len(files) == 0 {
			return nil, invalidf("%s: no object matches", uri)
		}
		return files, nil
	case key != "" && !strings.HasSuffix(key, "/"):
		objs, err := b.b.List(ctx, key)
		if err != nil {
			return nil, s3Err(fmt.Errorf("list %s: %w", uri, err))
		}
		for _, o := range objs {
			if o.Key == key {
				add(o, path.Base(key))
				return files, nil
			}
		}
		key += "/" // a prefix named without its slash
	}
	objs, err := b.b.List(ctx, key)
	if err != nil {
		return nil, s3Err(fmt.Errorf("list %s: %w", uri, err))
	}
	for _, o := range objs {
		rel := strings.TrimPrefix(o.Key, key)
		if rel == "" || hidden(rel) || strings.HasSuffix(rel, "/") || !keepExt(rel, format) {
			continue
		}
		add(o, rel)
	}
	if len(files) == 0 {
		return nil, invalidf("%s: no such object, and no %sobjects under that prefix", uri, formatWord(format))
	}
	return files, nil
}

// open streams the whole file.
func (f *fileRef) open(ctx context.Context) (io.ReadCloser, error) {
	if f.bucket == nil {
		r, err := os.Open(f.path)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, invalidf("%s: the file is gone: %v", f.uri, err)
		}
		return r, err
	}
	rc, err := f.bucket.b.Get(ctx, f.key)
	if errors.Is(err, storage.ErrNotFound) {
		return nil, invalidf("%s: the object is gone: %v", f.uri, err)
	}
	return rc, s3Err(err)
}

// readRange reads bytes [off, off+len(dst)) into dst.
func (f *fileRef) readRange(ctx context.Context, off int64, dst []byte) error {
	if f.bucket == nil {
		r, err := os.Open(f.path)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return invalidf("%s: the file is gone: %v", f.uri, err)
			}
			return err
		}
		defer r.Close()
		if _, err := r.ReadAt(dst, off); err != nil {
			return fmt.Errorf("%s: read %d bytes at %d: %w", f.uri, len(dst), off, err)
		}
		return nil
	}
	return f.bucket.getRange(ctx, f.key, f.uri, off, dst)
}

// getRange fetches a byte range with a ranged GET; a body that breaks is
// fetched again (the SDK retries requests, not bodies).
func (b *s3Bucket) getRange(ctx context.Context, key, uri string, off int64, dst []byte) error {
	if len(dst) == 0 {
		return nil
	}
	var last error
	for attempt := 0; attempt < 4; attempt++ {
		out, err := b.b.Client().GetObject(ctx, &s3.GetObjectInput{
			Bucket: aws.String(b.b.Bucket()),
			Key:    aws.String(key),
			Range:  aws.String(fmt.Sprintf("bytes=%d-%d", off, off+int64(len(dst))-1)),
		})
		if err != nil {
			var ae smithy.APIError
			if errors.As(err, &ae) && (ae.ErrorCode() == "NoSuchKey" || ae.ErrorCode() == "NotFound") {
				return invalidf("%s: the object is gone", uri)
			}
			return fmt.Errorf("%s: get bytes %d-%d: %w", uri, off, off+int64(len(dst))-1, err)
		}
		_, err = io.ReadFull(out.Body, dst)
		out.Body.Close()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		last = err
	}
	return fmt.Errorf("%s: get bytes %d-%d: body broke 4 times: %w", uri, off, off+int64(len(dst))-1, last)
}

// readerAt gives random access to the file: the file itself, or ranged
// GETs through a small cache of blocks (Parquet reads footers, then column
// chunks, each sequentially).
func (f *fileRef) readerAt(ctx context.Context, blockSize int64, blocks int) (io.ReaderAt, func() error, error) {
	if f.bucket == nil {
		r, err := os.Open(f.path)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil, nil, invalidf("%s: the file is gone: %v", f.uri, err)
			}
			return nil, nil, err
		}
		return r, r.Close, nil
	}
	c := &cachedReaderAt{ctx: ctx, f: f, blockSize: blockSize, max: max(blocks, 2), blocks: map[int64]*cacheBlock{}}
	return c, func() error { return nil }, nil
}

// cachedReaderAt serves ReadAt from blocks fetched with ranged GETs, at
// most max blocks kept (least recently used out). Concurrent readers of one
// block wait for a single fetch.
type cachedReaderAt struct {
	ctx       context.Context
	f         *fileRef
	blockSize int64
	max       int

	mu     sync.Mutex
	blocks map[int64]*cacheBlock
	clock  int64
}

type cacheBlock struct {
	done chan struct{}
	data []byte
	err  error
	used int64
}

func (c *cachedReaderAt) block(i int64) ([]byte, error) {
	c.mu.Lock()
	c.clock++
	if b, ok := c.blocks[i]; ok {
		b.used = c.clock
		c.mu.Unlock()
		<-b.done
		return b.data, b.err
	}
	if len(c.blocks) >= c.max {
		var oldest int64 = -1
		var at int64
		for k, b := range c.blocks {
			select {
			case <-b.done:
			default:
				continue // in flight
			}
			if oldest < 0 || b.used < at {
				oldest, at = k, b.used
			}
		}
		if oldest >= 0 {
			delete(c.blocks, oldest)
		}
	}
	b := &cacheBlock{done: make(chan struct{}), used: c.clock}
	c.blocks[i] = b
	c.mu.Unlock()
	off := i * c.blockSize
	n := min(c.blockSize, c.f.size-off)
	b.data = make([]byte, n)
	b.err = c.f.bucket.getRange(c.ctx, c.f.key, c.f.uri, off, b.data)
	close(b.done)
	if b.err != nil {
		c.mu.Lock()
		delete(c.blocks, i)
		c.mu.Unlock()
	}
	return b.data, b.err
}

func (c *cachedReaderAt) ReadAt(p []byte, off int64) (int, error) {
	if off >= c.f.size {
		return 0, io.EOF
	}
	n := 0
	for n < len(p) && off < c.f.size {
		i := off / c.blockSize
		data, err := c.block(i)
		if err != nil {
			return n, err
		}
		k := copy(p[n:], data[off-i*c.blockSize:])
		n += k
		off += int64(k)
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// digestFiles hashes files' names and sizes.
func digestFiles(files []*fileRef) string {
	h := sha256.New()
	for _, f := range files {
		fmt.Fprintf(h, "%s\x00%d\x00", f.uri, f.size)
	}
	return hex.EncodeToString(h.Sum(nil)[:12])
}
