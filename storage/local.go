package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
)

// tmpPrefix starts the names of files being written; List skips them, so a
// write cut by a crash never shows.
const tmpPrefix = ".tempotrain-tmp-"

// Local is a Backend over a directory of the local file system (or a shared
// mount such as NFS).
type Local struct {
	root string
}

var _ Backend = (*Local)(nil)

// NewLocal returns a backend rooted at the absolute directory root. The
// directory is created by the first Put.
func NewLocal(root string) (*Local, error) {
	if !filepath.IsAbs(root) {
		return nil, fmt.Errorf("%w: storage path %q is not an absolute directory", ErrMisconfigured, root)
	}
	return &Local{root: filepath.Clean(root)}, nil
}

// Root is the directory this backend stores under.
func (l *Local) Root() string { return l.root }

// URI returns the file path of key.
func (l *Local) URI(key string) string {
	if key == "" {
		return l.root
	}
	return filepath.Join(l.root, filepath.FromSlash(key))
}

func (l *Local) path(key string) (string, error) {
	if err := validKey(key); err != nil {
		return "", fmt.Errorf("local storage %s: %w", l.root, err)
	}
	return filepath.Join(l.root, filepath.FromSlash(key)), nil
}

// Put writes a temp file beside the target, fsyncs it, renames it over the
// target and fsyncs the directory, so that after a crash the key holds either
// the old object or the new one, never a part.
func (l *Local) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	p, err := l.path(key)
	if err != nil {
		return err
	}
	dir := filepath.Dir(p)
	var f *os.File
	// A concurrent Delete may prune the directory between MkdirAll and
	// CreateTemp; a few rounds outlast it.
	for attempt := 0; ; attempt++ {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return classifyLocal(fmt.Errorf("put %s: %w", p, err))
		}
		f, err = os.CreateTemp(dir, tmpPrefix+filepath.Base(p)+"-*")
		if err == nil {
			break
		}
		if !errors.Is(err, fs.ErrNotExist) || attempt == 3 {
			return classifyLocal(fmt.Errorf("put %s: %w", p, err))
		}
	}
	tmp := f.Name()
	fail := func(err error) error {
		f.Close()
		os.Remove(tmp)
		return classifyLocal(fmt.Errorf("put %s: %w", p, err))
	}
	if _, err := io.Copy(f, ctxReader{ctx, newExactReader(r, size)}); err != nil {
		return fail(err)
	}
	if err := f.Chmod(0o644); err != nil {
		return fail(err)
	}
	if err := f.Sync(); err != nil {
		return fail(err)
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return classifyLocal(fmt.Errorf("put %s: %w", p, err))
	}
	if err := os.Rename(tmp, p); err != nil {
		os.Remove(tmp)
		return classifyLocal(fmt.Errorf("put %s: %w", p, err))
	}
	return syncDir(dir)
}

// Get opens the file of key.
func (l *Local) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	p, err := l.path(key)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return nil, fmt.Errorf("get %s: %w", p, ErrNotFound)
	}
	if err != nil {
		return nil, classifyLocal(fmt.Errorf("get %s: %w", p, err))
	}
	if st, err := f.Stat(); err == nil && st.IsDir() {
		f.Close()
		return nil, fmt.Errorf("get %s: is a directory: %w", p, ErrNotFound)
	}
	return &ctxFile{ctx: ctx, File: f}, nil
}

// ctxFile is a file whose reads stop when the Get's context ends, like an
// S3 body does.
type ctxFile struct {
	ctx context.Context
	*os.File
}

func (c *ctxFile) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.File.Read(p)
}

// List walks only the directories that can hold keys with prefix.
func (l *Local) List(ctx context.Context, prefix string) ([]ObjectInfo, error) {
	if strings.HasPrefix(prefix, "/") {
		return nil, fmt.Errorf("local storage %s: list prefix %q starts with '/'", l.root, prefix)
	}
	dirKey := prefix[:strings.LastIndex(prefix, "/")+1]
	start := filepath.Join(l.root, filepath.FromSlash(dirKey))
	var out []ObjectInfo
	err := filepath.WalkDir(start, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed while we walked
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, err := filepath.Rel(l.root, p)
		if err != nil {
			return err
		}
		key := filepath.ToSlash(rel)
		if d.IsDir() {
			if p == start {
				return nil
			}
			dk := key + "/"
			if !strings.HasPrefix(dk, prefix) && !strings.HasPrefix(prefix, dk) {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() || strings.HasPrefix(d.Name(), tmpPrefix) || !strings.HasPrefix(key, prefix) {
			return nil
		}
		info, err := d.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		out = append(out, ObjectInfo{Key: key, Size: info.Size()})
		return nil
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, classifyLocal(fmt.Errorf("list %s prefix %q: %w", l.root, prefix, err))
	}
	sortObjects(out)
	return out, nil
}

// Delete removes the file of key, makes the removal durable, and prunes the
// directories it leaves empty (a deleted checkpoint leaves no directory).
func (l *Local) Delete(ctx context.Context, key string) error {
	p, err := l.path(key)
	if err != nil {
		return err
	}
	if err := os.Remove(p); err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
			return nil
		}
		return classifyLocal(fmt.Errorf("delete %s: %w", p, err))
	}
	dir := filepath.Dir(p)
	// A concurrent Delete may have pruned dir already; its removal is then
	// as durable as the parent's, which is all a missing entry needs.
	if err := syncDir(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	for d := dir; d != l.root && strings.HasPrefix(d, l.root+string(filepath.Separator)); d = filepath.Dir(d) {
		if os.Remove(d) != nil {
			break // not empty, or gone: either way done
		}
	}
	return nil
}

// appendAt truncates the file of key to off and writes data there, then
// fsyncs. It lets AppendMetrics append in place instead of rewriting the
// whole file; a crash mid-write leaves a torn last line that the next call
// cuts off (off is always the end of the last whole line).
func (l *Local) appendAt(ctx context.Context, key string, off int64, data []byte) error {
	p, err := l.path(key)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return classifyLocal(fmt.Errorf("append %s: %w", p, err))
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		return classifyLocal(fmt.Errorf("append %s: %w", p, err))
	}
	if err := f.Truncate(off); err != nil {
		f.Close()
		return fmt.Errorf("append %s: %w", p, err)
	}
	if _, err := f.WriteAt(data, off); err != nil {
		f.Close()
		return fmt.Errorf("append %s: %w", p, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("append %s: %w", p, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("append %s: %w", p, err)
	}
	return syncDir(filepath.Dir(p)) // a new file's directory entry
}

func sortObjects(objs []ObjectInfo) {
	sort.Slice(objs, func(i, j int) bool { return objs[i].Key < objs[j].Key })
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}

// classifyLocal marks errors that no retry fixes (a read-only file system,
// no permission, a file where a directory must be) as ErrMisconfigured.
func classifyLocal(err error) error {
	switch {
	case errors.Is(err, fs.ErrPermission), errors.Is(err, syscall.EROFS):
		return fmt.Errorf("%w: not writable: %w", ErrMisconfigured, err)
	case errors.Is(err, syscall.ENOTDIR):
		return fmt.Errorf("%w: a path element is not a directory: %w", ErrMisconfigured, err)
	}
	return err
}
