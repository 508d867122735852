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
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// tmpPrefix starts the names of files being written; List skips them, so a
// write cut by a crash never shows.
const tmpPrefix = ".tempotrain-tmp-"

// Local is a Backend over a directory of the local file system (or a shared
// mount such as NFS).
type Local struct {
	root string
	// Bytes appendMetrics read and wrote, for tests.
	metricsRead, metricsWritten atomic.Int64
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
//
// Files are created with mode 0666 and directories with 0777, less the
// process's umask, as every Unix tool does. The directories below the root
// are opened one at a time without following symbolic links: a symlink there
// (a run directory pointing elsewhere) is refused with ErrMisconfigured, so
// that whoever can create entries in the storage directory cannot redirect
// writes into a directory of their choosing.
func (l *Local) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	p, err := l.path(key)
	if err != nil {
		return err
	}
	elems, base := splitKey(key)
	var (
		d   *dirChain
		f   *os.File
		tmp string
	)
	// A concurrent Delete may prune the directory between its creation and
	// the temp file's; a few rounds outlast it.
	for attempt := 0; ; attempt++ {
		d, err = l.openDirs(elems, true)
		if err != nil {
			return classifyLocal(fmt.Errorf("put %s: %w", p, err))
		}
		tmp = tmpPrefix + base + "-" + randomHex(8)
		fd, err := unix.Openat(d.fd(), tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o666)
		if err == nil {
			f = os.NewFile(uintptr(fd), filepath.Join(d.path(), tmp))
			break
		}
		d.close()
		retry := errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EEXIST)
		if !retry || attempt == 3 {
			return classifyLocal(fmt.Errorf("put %s: create temp file: %w", p, &fs.PathError{Op: "open", Path: filepath.Join(filepath.Dir(p), tmp), Err: err}))
		}
	}
	defer d.close()
	fail := func(err error) error {
		f.Close()
		unix.Unlinkat(d.fd(), tmp, 0)
		return classifyLocal(fmt.Errorf("put %s: %w", p, err))
	}
	if _, err := io.Copy(f, ctxReader{ctx, newExactReader(r, size)}); err != nil {
		return fail(err)
	}
	if err := f.Sync(); err != nil {
		return fail(err)
	}
	if err := f.Close(); err != nil {
		unix.Unlinkat(d.fd(), tmp, 0)
		return classifyLocal(fmt.Errorf("put %s: %w", p, err))
	}
	if err := unix.Renameat(d.fd(), tmp, d.fd(), base); err != nil {
		unix.Unlinkat(d.fd(), tmp, 0)
		return classifyLocal(fmt.Errorf("put %s: %w", p, &fs.PathError{Op: "rename", Path: p, Err: err}))
	}
	if err := unix.Fsync(d.fd()); err != nil {
		return fmt.Errorf("put %s: sync directory %s: %w", p, d.path(), err)
	}
	return nil
}

// Get opens the file of key. Like Put it follows no symbolic link below the
// root: a link among the key's directories or as the file itself, and
// anything but a regular file (a FIFO, a device), is ErrCorrupt naming it,
// so that whoever can create entries in the storage directory cannot make a
// restore read a worker's own files or /dev/zero; a restore skips such a
// checkpoint for the one before.
func (l *Local) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	p, err := l.path(key)
	if err != nil {
		return nil, err
	}
	elems, base := splitKey(key)
	d, err := l.openDirs(elems, false)
	if err != nil {
		return nil, getError(p, err)
	}
	defer d.close()
	// O_NONBLOCK: opening a FIFO for reading would wait for a writer.
	fd, err := unix.Openat(d.fd(), base, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, getError(p, d.refuseLink(base, p, err))
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("get %s: %w", p, err)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
	case unix.S_IFDIR:
		unix.Close(fd)
		return nil, fmt.Errorf("get %s: is a directory: %w", p, ErrNotFound)
	default:
		unix.Close(fd)
		return nil, fmt.Errorf("get %s: not a regular file (mode %#o): %w", p, st.Mode&unix.S_IFMT, ErrCorrupt)
	}
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("get %s: %w", p, err)
	}
	return &ctxFile{ctx: ctx, File: os.NewFile(uintptr(fd), p)}, nil
}

// getError classifies an error of opening p for Get: a missing file or
// directory is ErrNotFound, a symbolic link ErrCorrupt.
func getError(p string, err error) error {
	var le *linkError
	switch {
	case errors.As(err, &le):
		return fmt.Errorf("get %s: %w: %w", p, ErrCorrupt, le)
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
		return fmt.Errorf("get %s: %w", p, ErrNotFound)
	}
	return classifyLocal(fmt.Errorf("get %s: %w", p, err))
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
// directories it leaves empty (a deleted checkpoint leaves no directory). Like
// Put it refuses a symbolic link among the directories below the root.
func (l *Local) Delete(ctx context.Context, key string) error {
	p, err := l.path(key)
	if err != nil {
		return err
	}
	elems, base := splitKey(key)
	d, err := l.openDirs(elems, false)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		// Nothing there, or a file where a directory would be: nothing to delete.
		return nil
	}
	if err != nil {
		return classifyLocal(fmt.Errorf("delete %s: %w", p, err))
	}
	defer d.close()
	if err := unix.Unlinkat(d.fd(), base, 0); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		// os.Remove's fallback: the key may name an empty directory.
		if derr := unix.Unlinkat(d.fd(), base, unix.AT_REMOVEDIR); derr != nil {
			if errors.Is(derr, unix.ENOENT) {
				return nil
			}
			return classifyLocal(fmt.Errorf("delete %s: %w", p, &fs.PathError{Op: "unlink", Path: p, Err: err}))
		}
	}
	// A concurrent Delete may have pruned this directory already; syncing
	// the open descriptor of a removed directory still succeeds.
	if err := unix.Fsync(d.fd()); err != nil {
		return fmt.Errorf("delete %s: sync directory %s: %w", p, d.path(), err)
	}
	for i := len(elems); i > 0; i-- {
		if unix.Unlinkat(d.fds[i-1], elems[i-1], unix.AT_REMOVEDIR) != nil {
			break // not empty, or gone: either way done
		}
	}
	return nil
}

// splitKey splits a valid key into its directory elements and its base name.
func splitKey(key string) (dirs []string, base string) {
	parts := strings.Split(key, "/")
	return parts[:len(parts)-1], parts[len(parts)-1]
}

// dirChain is a directory below a Local root held open together with every
// directory between it and the root: fds[0] is the root, fds[i] the directory
// elems[i-1] inside fds[i-1].
type dirChain struct {
	root  string
	elems []string
	fds   []int
}

// fd is the innermost directory.
func (c *dirChain) fd() int { return c.fds[len(c.fds)-1] }

// path names the innermost directory.
func (c *dirChain) path() string {
	return filepath.Join(append([]string{c.root}, c.elems[:len(c.fds)-1]...)...)
}

func (c *dirChain) close() {
	for _, fd := range c.fds {
		unix.Close(fd)
	}
	c.fds = nil
}

// openDirs opens the root and then each of elems inside the one before,
// creating what is missing when create is set (mode 0777 less the umask),
// and never following a symbolic link: one among elems is refused with
// ErrMisconfigured, naming it. The root itself is the configured storage path
// and may be a link. A missing directory with create unset is
// fs.ErrNotExist.
func (l *Local) openDirs(elems []string, create bool) (*dirChain, error) {
	c := &dirChain{root: l.root, elems: elems}
	const dirFlags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC
	fd, err := unix.Open(l.root, dirFlags, 0)
	if errors.Is(err, unix.ENOENT) && create {
		if err := os.MkdirAll(l.root, 0o777); err != nil {
			return nil, err
		}
		fd, err = unix.Open(l.root, dirFlags, 0)
	}
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: l.root, Err: err}
	}
	c.fds = append(c.fds, fd)
	for _, el := range elems {
		p := filepath.Join(c.path(), el)
		fd, err := unix.Openat(c.fd(), el, dirFlags|unix.O_NOFOLLOW, 0)
		if errors.Is(err, unix.ENOENT) && create {
			if err := unix.Mkdirat(c.fd(), el, 0o777); err != nil && !errors.Is(err, unix.EEXIST) {
				c.close()
				return nil, &fs.PathError{Op: "mkdir", Path: p, Err: err}
			}
			fd, err = unix.Openat(c.fd(), el, dirFlags|unix.O_NOFOLLOW, 0)
		}
		if err != nil {
			err = c.refuseLink(el, p, err)
			c.close()
			return nil, err
		}
		c.fds = append(c.fds, fd)
	}
	return c, nil
}

// refuseLink turns the error of opening name in the innermost directory
// without following links into ErrMisconfigured naming the link, when name
// is one.
func (c *dirChain) refuseLink(name, p string, err error) error {
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
		var st unix.Stat_t
		if unix.Fstatat(c.fd(), name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
			target, _ := os.Readlink(p)
			return fmt.Errorf("%w: %w", ErrMisconfigured, &linkError{path: p, target: target, root: c.root})
		}
	}
	return &fs.PathError{Op: "open", Path: p, Err: err}
}

// linkError is a symbolic link found below a Local root.
type linkError struct{ path, target, root string }

func (e *linkError) Error() string {
	return fmt.Sprintf("%s is a symbolic link (to %q): local storage does not follow links below its root %s", e.path, e.target, e.root)
}

func sortObjects(objs []ObjectInfo) {
	sort.Slice(objs, func(i, j int) bool { return objs[i].Key < objs[j].Key })
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

// openAppend opens the file of key for appending, creating it (mode 0666)
// and its directories (0777), less the umask. Like Put it follows no
// symbolic link below the root, and refuses anything but a regular file.
func (l *Local) openAppend(key string) (*os.File, error) {
	p, err := l.path(key)
	if err != nil {
		return nil, err
	}
	elems, base := splitKey(key)
	d, err := l.openDirs(elems, true)
	if err != nil {
		return nil, classifyLocal(fmt.Errorf("append to %s: %w", p, err))
	}
	defer d.close()
	fd, err := unix.Openat(d.fd(), base, unix.O_WRONLY|unix.O_APPEND|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0o666)
	if err != nil {
		return nil, classifyLocal(fmt.Errorf("append to %s: %w", p, d.refuseLink(base, p, err)))
	}
	// O_NONBLOCK only kept the open of a FIFO from waiting for a reader.
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("append to %s: %w", p, err)
	}
	f := os.NewFile(uintptr(fd), p)
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		f.Close()
		if err == nil {
			err = &fs.PathError{Op: "open", Path: p, Err: errors.New("not a regular file")}
		}
		return nil, fmt.Errorf("append to %s: %w", p, err)
	}
	return f, nil
}
