package python

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
)

// pkg is the pure-Python tempotrain package, as the repository has it.
//
//go:embed all:tempotrain
var pkg embed.FS

var (
	pkgOnce   sync.Map // cache dir -> *pkgResult
	pkgDigest = sync.OnceValue(func() string { return digestFS(pkg) })
)

type pkgResult struct {
	once sync.Once
	dir  string
	err  error
}

// packageDir writes the embedded package once under cacheDir, by its
// digest, and returns the directory to put on PYTHONPATH (the one holding
// tempotrain/).
func packageDir(cacheDir string) (string, error) {
	v, _ := pkgOnce.LoadOrStore(cacheDir, &pkgResult{})
	r := v.(*pkgResult)
	r.once.Do(func() { r.dir, r.err = writePackage(cacheDir) })
	return r.dir, r.err
}

func writePackage(cacheDir string) (string, error) {
	dir := filepath.Join(cacheDir, "pkg", "sha256-"+pkgDigest()[:16])
	if _, err := os.Stat(filepath.Join(dir, "tempotrain", "__init__.py")); err == nil {
		return dir, nil
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), ".tmp-pkg-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	err = fs.WalkDir(pkg, "tempotrain", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if skipped(p) {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		dst := filepath.Join(tmp, filepath.FromSlash(p))
		if d.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		b, err := pkg.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, b, 0o644)
	})
	if err != nil {
		return "", err
	}
	// The rename is the commit: a crash leaves only a .tmp-pkg- directory.
	if err := os.Rename(tmp, dir); err != nil {
		if _, serr := os.Stat(filepath.Join(dir, "tempotrain", "__init__.py")); serr == nil {
			return dir, nil // another rank of this worker won
		}
		return "", fmt.Errorf("write %s: %w", dir, err)
	}
	return dir, nil
}

func skipped(p string) bool {
	base := filepath.Base(p)
	return base == "__pycache__" || strings.HasSuffix(base, ".pyc")
}

// digestFS is the sha256 of the package's file names and contents.
func digestFS(f embed.FS) string {
	var names []string
	_ = fs.WalkDir(f, "tempotrain", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && !skipped(p) {
			names = append(names, p)
		}
		return nil
	})
	slices.Sort(names)
	h := sha256.New()
	for _, n := range names {
		b, _ := f.ReadFile(n)
		fmt.Fprintf(h, "%s\x00%d\x00", n, len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))
}
