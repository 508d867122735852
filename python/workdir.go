package python

// The working directory of a Python run (api.PythonSpec.WorkingDir), as Ray
// ships a runtime_env working_dir: the starter packs a local directory into
// a deterministic tar.gz (Pack), puts it once into the run's storage under
// its digest (Upload), and every rank fetches, verifies and unpacks it into a
// cache keyed by that digest (Fetch).
//
//	{storage}/{run}/working_dir/sha256-{hex}.tar.gz   the packed directory
//	{cache}/sha256-{hex}/                             its files on a worker
//
// A cache entry is committed by one rename of a fully extracted temporary
// directory beside it, so an entry that exists is complete; ranks that
// extract the same digest at once each build their own temporary directory
// and the ones that lose the rename use the winner's.

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
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
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/storage"
)

// Bounds of a working directory.
const (
	// DefaultMaxWorkingDir bounds a packed working directory (the archive's
	// bytes, and the files' bytes before packing): 100 MiB, Ray's limit on
	// a working_dir it uploads.
	DefaultMaxWorkingDir = 100 << 20
	// MaxWorkingDirEntries bounds the files and directories of an archive a
	// worker extracts.
	MaxWorkingDirEntries = 100_000
	// MaxWorkingDirExtracted bounds the bytes of the files a worker extracts
	// from one archive: 1 GiB.
	MaxWorkingDirExtracted = 1 << 30
)

// WorkingDirPrefix is the directory of a run's packed working directories
// in its storage ({storage}/{run}/working_dir/).
const WorkingDirPrefix = "working_dir"

// wdSkipDirs and wdSkipFile name what Pack leaves out: version control,
// bytecode caches and virtual environments, which are local to a machine,
// and `starter dev`'s home (its server's database and runs), which
// `starter dev -working-dir .` would otherwise pack.
var wdSkipDirs = map[string]bool{".git": true, "__pycache__": true, ".venv": true, ".tempotrain": true}

func wdSkipFile(name string) bool { return name == ".git" || strings.HasSuffix(name, ".pyc") }

// wdEntry is one file or directory of a packed directory.
type wdEntry struct {
	name string // slash-separated, relative to the root; directories end in "/"
	src  string // the file to read (a link's target for a followed link)
	mode fs.FileMode
	size int64
}

// Pack returns a deterministic tar.gz of the directory dir and its sha256
// (hex). Entries are sorted by name and carry only their permission bits:
// mtimes are zero and owners 0, so two packs of the same files give the same
// bytes. Only regular files and directories are packed; .git, __pycache__,
// .venv, .tempotrain and *.pyc are left out. A symbolic link is followed when it points
// inside dir (its target's contents are packed under the link's name) and is
// an error naming it otherwise. maxBytes bounds both the files' bytes and the
// archive's (<= 0: DefaultMaxWorkingDir); a directory over it is an error
// naming it, its size and its biggest files.
func Pack(dir string, maxBytes int64) (archive []byte, sum string, err error) {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxWorkingDir
	}
	st, err := os.Stat(dir)
	if err != nil {
		return nil, "", fmt.Errorf("working_dir %s: %w", dir, err)
	}
	if !st.IsDir() {
		return nil, "", fmt.Errorf("working_dir %s: not a directory", dir)
	}
	root, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return nil, "", fmt.Errorf("working_dir %s: %w", dir, err)
	}
	root, err = filepath.Abs(root)
	if err != nil {
		return nil, "", fmt.Errorf("working_dir %s: %w", dir, err)
	}
	var entries []wdEntry
	if err := wdWalk(dir, root, root, "", []string{root}, &entries); err != nil {
		return nil, "", err
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].name < entries[j].name })
	var total int64
	for _, e := range entries {
		total += e.size
	}
	if total > maxBytes {
		return nil, "", wdTooBig(dir, total, maxBytes, entries)
	}

	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, e := range entries {
		if err := wdWriteEntry(tw, e); err != nil {
			return nil, "", fmt.Errorf("working_dir %s: pack %s: %w", dir, e.name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, "", fmt.Errorf("working_dir %s: %w", dir, err)
	}
	if err := zw.Close(); err != nil {
		return nil, "", fmt.Errorf("working_dir %s: %w", dir, err)
	}
	if int64(buf.Len()) > maxBytes {
		return nil, "", fmt.Errorf("working_dir %s: its archive is %d bytes, over the limit of %d bytes", dir, buf.Len(), maxBytes)
	}
	h := sha256.Sum256(buf.Bytes())
	return buf.Bytes(), hex.EncodeToString(h[:]), nil
}

// wdWalk lists the entries of the real directory real (packed as prefix)
// into out. root is the packed directory's real path (links must stay in
// it); stack holds the real directories being walked, to refuse a link that
// loops back into one of them.
func wdWalk(dir, root, real, prefix string, stack []string, out *[]wdEntry) error {
	des, err := os.ReadDir(real)
	if err != nil {
		return fmt.Errorf("working_dir %s: %w", dir, err)
	}
	for _, de := range des {
		name := de.Name()
		rel := prefix + name
		p := filepath.Join(real, name)
		info, err := os.Lstat(p)
		if err != nil {
			return fmt.Errorf("working_dir %s: %s: %w", dir, rel, err)
		}
		if info.Mode()&fs.ModeSymlink != 0 {
			target, err := filepath.EvalSymlinks(p)
			if err != nil {
				return fmt.Errorf("working_dir %s: symbolic link %s: %w", dir, rel, err)
			}
			if !wdInside(root, target) {
				return fmt.Errorf("working_dir %s: symbolic link %s points outside the directory (to %s): copy the file in, or pack the directory that holds both", dir, rel, target)
			}
			if info, err = os.Stat(target); err != nil {
				return fmt.Errorf("working_dir %s: symbolic link %s: %w", dir, rel, err)
			}
			p = target
		}
		switch {
		case info.IsDir():
			if wdSkipDirs[name] {
				continue
			}
			for _, s := range stack {
				if s == p {
					return fmt.Errorf("working_dir %s: symbolic link %s makes a cycle (it points to %s, which holds it)", dir, rel, p)
				}
			}
			*out = append(*out, wdEntry{name: rel + "/", mode: info.Mode().Perm()})
			if err := wdWalk(dir, root, p, rel+"/", append(stack, p), out); err != nil {
				return err
			}
		case info.Mode().IsRegular():
			if wdSkipFile(name) {
				continue
			}
			*out = append(*out, wdEntry{name: rel, src: p, mode: info.Mode().Perm(), size: info.Size()})
		default:
			return fmt.Errorf("working_dir %s: %s is a %s: only regular files, directories and links to them inside the directory are packed", dir, rel, wdTypeName(info.Mode()))
		}
	}
	return nil
}

// wdInside reports whether the real path p is root or below it.
func wdInside(root, p string) bool {
	rel, err := filepath.Rel(root, p)
	return err == nil && (rel == "." || filepath.IsLocal(rel))
}

func wdTypeName(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "named pipe"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeDevice != 0:
		return "device"
	}
	return "special file (" + m.Type().String() + ")"
}

func wdWriteEntry(tw *tar.Writer, e wdEntry) error {
	h := &tar.Header{Name: e.name, Mode: int64(e.mode), ModTime: time.Unix(0, 0), Format: tar.FormatPAX}
	if strings.HasSuffix(e.name, "/") {
		h.Typeflag = tar.TypeDir
		return tw.WriteHeader(h)
	}
	h.Typeflag, h.Size = tar.TypeReg, e.size
	f, err := os.Open(e.src)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	// A file that grew or shrank since it was listed fails here (the tar
	// writer refuses a short or long body) instead of packing a torn copy.
	n, err := io.Copy(tw, f)
	if err == nil && n != e.size {
		err = fmt.Errorf("changed size while packed: listed %d bytes, read %d", e.size, n)
	}
	return err
}

func wdTooBig(dir string, total, maxBytes int64, entries []wdEntry) error {
	files := make([]wdEntry, 0, len(entries))
	for _, e := range entries {
		if e.size > 0 {
			files = append(files, e)
		}
	}
	sort.SliceStable(files, func(i, j int) bool { return files[i].size > files[j].size })
	if len(files) > 5 {
		files = files[:5]
	}
	var big []string
	for _, f := range files {
		big = append(big, fmt.Sprintf("%s (%d bytes)", f.name, f.size))
	}
	return fmt.Errorf("working_dir %s holds %d bytes of files, over the limit of %d bytes; the biggest: %s (.git, __pycache__, .venv, .tempotrain and *.pyc are left out already; move data to a dataset or storage)", dir, total, maxBytes, strings.Join(big, ", "))
}

// WorkingDirKey is the key of a packed directory in its run's storage:
// "{run}/working_dir/sha256-{sum}.tar.gz".
func WorkingDirKey(runName, sum string) string {
	k := WorkingDirPrefix + "/sha256-" + sum + ".tar.gz"
	if runName != "" {
		k = runName + "/" + k
	}
	return k
}

// Upload puts a packed directory (Pack's archive and sum) into the storage
// of run runName, at {storagePath}/{run}/working_dir/sha256-{sum}.tar.gz,
// and returns its URI (what PythonSpec.WorkingDir takes). An object of that
// name and size already there is kept: the name is the content's digest, so
// resubmitting a run uploads nothing.
func Upload(ctx context.Context, storagePath, runName string, archive []byte, sum string) (uri string, err error) {
	h := sha256.Sum256(archive)
	if got := hex.EncodeToString(h[:]); got != sum {
		return "", fmt.Errorf("working_dir upload: the archive's sha256 is %s, not the %q given", got, sum)
	}
	b, err := storage.Open(ctx, storagePath)
	if err != nil {
		return "", err
	}
	key := WorkingDirKey(runName, sum)
	objs, err := b.List(ctx, key)
	if err != nil {
		return "", fmt.Errorf("working_dir upload to %s: %w", b.URI(key), err)
	}
	for _, o := range objs {
		if o.Key == key && o.Size == int64(len(archive)) {
			return b.URI(key), nil
		}
	}
	if err := b.Put(ctx, key, bytes.NewReader(archive), int64(len(archive))); err != nil {
		return "", fmt.Errorf("working_dir upload to %s: %w", b.URI(key), err)
	}
	return b.URI(key), nil
}

// Fetch returns a local directory holding the working directory uri names.
//
// A packed directory (.tar.gz or .tgz: an absolute path, file:// or s3://
// URI) is read (at most maxBytes; <= 0: DefaultMaxWorkingDir), checked
// against sum (hex sha256; "" checks nothing) and extracted into
// {cacheDir}/sha256-{digest}, which later calls with that digest return
// without reading uri. Extraction takes only regular files and directories
// with relative names inside the directory, at most MaxWorkingDirEntries of
// them and MaxWorkingDirExtracted bytes; anything else is an error naming
// the entry.
//
// Any other uri must be an absolute directory present here; it is returned
// as it is.
func Fetch(ctx context.Context, uri, sum, cacheDir string, maxBytes int64) (dir string, err error) {
	u := strings.TrimSpace(uri)
	if !api.IsPackedWorkingDir(u) {
		d := strings.TrimPrefix(u, "file://")
		if !filepath.IsAbs(d) {
			return "", fmt.Errorf("working_dir %s: want an absolute directory or a packed directory (.tar.gz)", uri)
		}
		st, err := os.Stat(d)
		if err != nil {
			return "", fmt.Errorf("working_dir %s: %w", uri, err)
		}
		if !st.IsDir() {
			return "", fmt.Errorf("working_dir %s: not a directory (a packed one ends in .tar.gz)", uri)
		}
		return d, nil
	}
	if maxBytes <= 0 {
		maxBytes = DefaultMaxWorkingDir
	}
	if sum != "" {
		if len(sum) != 64 || strings.Trim(sum, "0123456789abcdef") != "" {
			return "", fmt.Errorf("working_dir %s: sha256 %q is not 64 lowercase hex digits", uri, sum)
		}
		if d, ok := wdCached(cacheDir, sum); ok {
			return d, nil
		}
	}
	archive, err := wdRead(ctx, u, maxBytes)
	if err != nil {
		return "", err
	}
	h := sha256.Sum256(archive)
	got := hex.EncodeToString(h[:])
	if sum != "" && got != sum {
		return "", fmt.Errorf("working_dir %s: sha256 is %s, want %s", uri, got, sum)
	}
	if d, ok := wdCached(cacheDir, got); ok {
		return d, nil
	}
	return wdInstall(archive, got, cacheDir, uri)
}

// wdCached returns the cache entry of digest sum when it exists.
func wdCached(cacheDir, sum string) (string, bool) {
	d := filepath.Join(cacheDir, "sha256-"+sum)
	st, err := os.Stat(d)
	return d, err == nil && st.IsDir()
}

// wdRead reads the object uri names, failing past maxBytes without
// reading more than maxBytes+1 bytes of it.
func wdRead(ctx context.Context, uri string, maxBytes int64) ([]byte, error) {
	if !strings.Contains(uri, "://") && !filepath.IsAbs(uri) {
		return nil, fmt.Errorf("working_dir %s: want an absolute path, file:///path or s3://bucket/key", uri)
	}
	data, err := storage.ReadURIMax(ctx, uri, maxBytes)
	if err != nil {
		return nil, fmt.Errorf("working_dir %s: %w", uri, err)
	}
	return data, nil
}

// wdTmpPrefix names the temporary directories extractions build in the cache;
// a crash leaves one behind, which no lookup uses and a later install
// removes once it is a day old.
const wdTmpPrefix = ".tmp-"

// wdInstall extracts archive into a temporary directory beside the cache
// entry of sum and renames it into place.
func wdInstall(archive []byte, sum, cacheDir, uri string) (string, error) {
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return "", fmt.Errorf("working_dir cache %s: %w", cacheDir, err)
	}
	wdSweep(cacheDir)
	final := filepath.Join(cacheDir, "sha256-"+sum)
	tmp, err := os.MkdirTemp(cacheDir, wdTmpPrefix+"sha256-"+sum+"-")
	if err != nil {
		return "", fmt.Errorf("working_dir cache %s: %w", cacheDir, err)
	}
	defer os.RemoveAll(tmp) // a no-op once renamed
	zr, err := gzip.NewReader(bytes.NewReader(archive))
	if err != nil {
		return "", fmt.Errorf("working_dir %s: not a gzip archive: %w", uri, err)
	}
	if err := wdExtract(zr, tmp, wdDefaultLimits); err != nil {
		return "", fmt.Errorf("working_dir %s: %w", uri, err)
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", err
	}
	if err := wdRename(tmp, final); err != nil {
		if _, ok := wdCached(cacheDir, sum); ok {
			return final, nil // another rank won the rename: its copy is the same bytes
		}
		return "", fmt.Errorf("working_dir cache %s: %w", final, err)
	}
	return final, nil
}

// wdRename renames a directory into place unless something is there
// already (a plain rename would replace an empty directory).
func wdRename(from, to string) error {
	err := unix.Renameat2(unix.AT_FDCWD, from, unix.AT_FDCWD, to, unix.RENAME_NOREPLACE)
	if errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOSYS) {
		// A file system without RENAME_NOREPLACE: a rename onto a non-empty
		// directory fails all the same.
		return os.Rename(from, to)
	}
	if err != nil {
		return &os.LinkError{Op: "rename", Old: from, New: to, Err: err}
	}
	return nil
}

// wdSweep removes temporary directories a crashed extraction left, once they
// are a day old (younger ones may be another rank's extraction in flight).
func wdSweep(cacheDir string) {
	des, err := os.ReadDir(cacheDir)
	if err != nil {
		return
	}
	for _, de := range des {
		if !strings.HasPrefix(de.Name(), wdTmpPrefix) {
			continue
		}
		if info, err := de.Info(); err == nil && time.Since(info.ModTime()) > 24*time.Hour {
			_ = os.RemoveAll(filepath.Join(cacheDir, de.Name()))
		}
	}
}

// wdLimits bound an extraction.
type wdLimits struct {
	entries int   // files and directories
	bytes   int64 // the files' bytes
}

var wdDefaultLimits = wdLimits{entries: MaxWorkingDirEntries, bytes: MaxWorkingDirExtracted}

// wdExtract writes the tar stream r's regular files and directories under
// dst, an empty directory. It creates nothing but directories and regular
// files, so no name can lead out of dst through a link; names that are
// absolute or hold ".." are refused. Directories are made owner-writable
// while files go in and get their modes (always owner-rwx) at the end.
func wdExtract(r io.Reader, dst string, lim wdLimits) error {
	// The decompressed stream is bounded too: headers and padding beside
	// the files' bytes, so that a stream of empty entries ends.
	limit := lim.bytes + int64(lim.entries)*4096 + 1<<20
	tr := tar.NewReader(&wdCapReader{r: r, left: limit, limit: limit})
	var (
		total   int64
		n       int
		dirMode = map[string]fs.FileMode{}
	)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("read archive after %d entries: %w", n, err)
		}
		if h.Typeflag == tar.TypeXGlobalHeader {
			continue // git archive's commit id: no file
		}
		n++
		if n > lim.entries {
			return fmt.Errorf("entry %q: more than %d entries", h.Name, lim.entries)
		}
		name, err := wdEntryName(h.Name)
		if err != nil {
			return err
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if name == "." {
				continue
			}
			p := filepath.Join(dst, filepath.FromSlash(name))
			if err := os.MkdirAll(p, 0o700); err != nil {
				return fmt.Errorf("entry %q: %w", h.Name, err)
			}
			dirMode[p] = fs.FileMode(h.Mode).Perm() | 0o700
		case tar.TypeReg:
			if name == "." {
				return fmt.Errorf("entry %q: a file with no name", h.Name)
			}
			if h.Size < 0 || h.Size > lim.bytes-total {
				return fmt.Errorf("entry %q: declares %d bytes, over the %d bytes left of the %d-byte limit on a working_dir's files", h.Name, h.Size, lim.bytes-total, lim.bytes)
			}
			total += h.Size
			p := filepath.Join(dst, filepath.FromSlash(name))
			if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
				return fmt.Errorf("entry %q: %w", h.Name, err)
			}
			f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
			if err != nil {
				if errors.Is(err, fs.ErrExist) {
					return fmt.Errorf("entry %q: appears twice in the archive", h.Name)
				}
				return fmt.Errorf("entry %q: %w", h.Name, err)
			}
			_, err = io.CopyN(f, tr, h.Size)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return fmt.Errorf("entry %q: %w", h.Name, err)
			}
			if err := os.Chmod(p, fs.FileMode(h.Mode).Perm()|0o600); err != nil {
				return fmt.Errorf("entry %q: %w", h.Name, err)
			}
		default:
			return fmt.Errorf("entry %q: is a %s: a working_dir holds only regular files and directories", h.Name, wdTarType(h.Typeflag))
		}
	}
	for p, m := range dirMode {
		if err := os.Chmod(p, m); err != nil {
			return err
		}
	}
	return nil
}

// wdCapReader fails a stream that goes on past limit bytes.
type wdCapReader struct {
	r           io.Reader
	left, limit int64
}

func (c *wdCapReader) Read(p []byte) (int, error) {
	if c.left <= 0 {
		return 0, fmt.Errorf("the archive unpacks to more than %d bytes of headers and files", c.limit)
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	return n, err
}

// wdEntryName cleans an archive entry's name ("./a/b/" -> "a/b"), refusing
// one that is absolute or leads out with "..".
func wdEntryName(name string) (string, error) {
	switch {
	case name == "":
		return "", errors.New(`entry "": no name`)
	case strings.HasPrefix(name, "/"):
		return "", fmt.Errorf("entry %q: an absolute name", name)
	case strings.IndexByte(name, 0) >= 0:
		return "", fmt.Errorf("entry %q: a NUL in its name", name)
	}
	for _, el := range strings.Split(name, "/") {
		if el == ".." {
			return "", fmt.Errorf("entry %q: a '..' in its name", name)
		}
	}
	c := path.Clean(name)
	if c != "." && !filepath.IsLocal(filepath.FromSlash(c)) {
		return "", fmt.Errorf("entry %q: a name outside the directory", name)
	}
	return c, nil
}

func wdTarType(t byte) string {
	switch t {
	case tar.TypeSymlink:
		return "symbolic link"
	case tar.TypeLink:
		return "hard link"
	case tar.TypeChar, tar.TypeBlock:
		return "device"
	case tar.TypeFifo:
		return "named pipe"
	case tar.TypeGNUSparse:
		return "sparse file"
	}
	return fmt.Sprintf("entry of type %q", t)
}
