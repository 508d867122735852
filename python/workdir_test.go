package python

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tempotrain/tempotrain/storage"
	"github.com/tempotrain/tempotrain/storage/miniotest"
)

// writeTree makes files (name -> content; a name ending in "/" is a
// directory) under dir.
func writeTree(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, body := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if strings.HasSuffix(name, "/") {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// readTree returns every regular file under dir (slash names -> content),
// and fails on anything but files and directories.
func readTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	got := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		switch {
		case d.IsDir():
		case d.Type().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			got[filepath.ToSlash(rel)] = string(b)
		default:
			t.Errorf("%s: unexpected %v", rel, d.Type())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// project is a small Python project with what Pack must leave out.
func project(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{
		"train.py":                        "print('train')\n",
		"pkg/__init__.py":                 "",
		"pkg/model.py":                    "W = 1\n",
		"pkg/__pycache__/model.cpython.c": "cache",
		"pkg/model.pyc":                   "bytecode",
		".git/HEAD":                       "ref: refs/heads/main\n",
		".venv/bin/python":                "venv",
		".tempotrain/temporal.db":         "db",
		"data/empty/":                     "",
	})
	if err := os.Chmod(filepath.Join(dir, "train.py"), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

var projectFiles = map[string]string{
	"train.py":        "print('train')\n",
	"pkg/__init__.py": "",
	"pkg/model.py":    "W = 1\n",
}

func TestPackFetchLocal(t *testing.T) {
	dir := project(t)
	archive, sum, err := Pack(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256(archive)
	if sum != hex.EncodeToString(h[:]) {
		t.Fatalf("sum %s is not the archive's sha256", sum)
	}
	store := t.TempDir()
	ctx := context.Background()
	uri, err := Upload(ctx, store, "run1", archive, sum)
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(store, "run1", "working_dir", "sha256-"+sum+".tar.gz")
	if uri != want {
		t.Fatalf("uri %s, want %s", uri, want)
	}
	// A second upload keeps the object: same name, same size.
	st1, _ := os.Stat(uri)
	old := time.Unix(1e9, 0)
	if err := os.Chtimes(uri, old, old); err != nil {
		t.Fatal(err)
	}
	if uri2, err := Upload(ctx, store, "run1", archive, sum); err != nil || uri2 != uri {
		t.Fatalf("second upload: %s, %v", uri2, err)
	}
	if st2, _ := os.Stat(uri); !st2.ModTime().Equal(old) || st2.Size() != st1.Size() {
		t.Fatalf("second upload rewrote the object (mtime %v)", st2.ModTime())
	}

	cache := t.TempDir()
	got, err := Fetch(ctx, uri, sum, cache, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got != filepath.Join(cache, "sha256-"+sum) {
		t.Fatalf("fetched into %s", got)
	}
	if files := readTree(t, got); !equalMaps(files, projectFiles) {
		t.Fatalf("fetched files %v, want %v", files, projectFiles)
	}
	if st, err := os.Stat(filepath.Join(got, "data", "empty")); err != nil || !st.IsDir() {
		t.Fatalf("empty directory not kept: %v", err)
	}
	if st, _ := os.Stat(filepath.Join(got, "train.py")); st.Mode().Perm() != 0o755 {
		t.Fatalf("train.py mode %v, want 0755", st.Mode().Perm())
	}
	// The cache answers without the archive; with no sum, the archive's
	// own digest finds the same entry.
	if err := os.Remove(uri); err != nil {
		t.Fatal(err)
	}
	if again, err := Fetch(ctx, uri, sum, cache, 0); err != nil || again != got {
		t.Fatalf("cached fetch: %s, %v", again, err)
	}
	if _, err := Upload(ctx, store, "run1", archive, sum); err != nil {
		t.Fatal(err)
	}
	if again, err := Fetch(ctx, "file://"+uri, "", cache, 0); err != nil || again != got {
		t.Fatalf("fetch without sum: %s, %v", again, err)
	}
	if ents, _ := os.ReadDir(cache); len(ents) != 1 {
		t.Fatalf("cache holds %d entries, want 1", len(ents))
	}
}

func TestUploadRefusesWrongSum(t *testing.T) {
	_, err := Upload(context.Background(), t.TempDir(), "r", []byte("x"), strings.Repeat("0", 64))
	if err == nil || !strings.Contains(err.Error(), "sha256") {
		t.Fatalf("err = %v", err)
	}
}

func TestPackFetchMinIO(t *testing.T) {
	srv := miniotest.Start(t) // skips without a minio binary, as storage's tests do
	bucket := srv.CreateBucket(t, "")
	srv.SetEnv(t)
	ctx := context.Background()
	archive, sum, err := Pack(project(t), 0)
	if err != nil {
		t.Fatal(err)
	}
	path := "s3://" + bucket + "/runs"
	uri, err := Upload(ctx, path, "run1", archive, sum)
	if err != nil {
		t.Fatal(err)
	}
	if want := path + "/run1/working_dir/sha256-" + sum + ".tar.gz"; uri != want {
		t.Fatalf("uri %s, want %s", uri, want)
	}
	if _, err := Upload(ctx, path, "run1", archive, sum); err != nil {
		t.Fatal(err)
	}
	b, err := storage.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := b.List(ctx, "run1/")
	if err != nil || len(objs) != 1 || objs[0].Size != int64(len(archive)) {
		t.Fatalf("objects %v, %v", objs, err)
	}
	dir, err := Fetch(ctx, uri, sum, t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if files := readTree(t, dir); !equalMaps(files, projectFiles) {
		t.Fatalf("fetched files %v", files)
	}
	// Read with a cap: an archive over maxBytes is refused.
	if _, err := Fetch(ctx, uri, sum, t.TempDir(), int64(len(archive)-1)); err == nil || !strings.Contains(err.Error(), "larger than the limit") {
		t.Fatalf("capped fetch: %v", err)
	}
	if _, err := Fetch(ctx, "s3://"+bucket+"/runs/nope.tar.gz", "", t.TempDir(), 0); err == nil || !strings.Contains(err.Error(), "nope.tar.gz") {
		t.Fatalf("missing object: %v", err)
	}
}

func TestFetchTampered(t *testing.T) {
	archive, sum, err := Pack(project(t), 0)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "app.tar.gz")
	bad := append([]byte(nil), archive...)
	bad[len(bad)/2] ^= 1
	if err := os.WriteFile(p, bad, 0o644); err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256(bad)
	cache := t.TempDir()
	_, err = Fetch(context.Background(), p, sum, cache, 0)
	want := "working_dir " + p + ": sha256 is " + hex.EncodeToString(h[:]) + ", want " + sum
	if err == nil || err.Error() != want {
		t.Fatalf("err = %v\nwant %s", err, want)
	}
	if ents, _ := os.ReadDir(cache); len(ents) != 0 {
		t.Fatalf("a refused archive left %d cache entries", len(ents))
	}
	if _, err := Fetch(context.Background(), p, "ABC", cache, 0); err == nil || !strings.Contains(err.Error(), `"ABC"`) {
		t.Fatalf("bad sum: %v", err)
	}
}

func TestFetchPlainDir(t *testing.T) {
	dir := t.TempDir()
	if got, err := Fetch(context.Background(), dir, "", "", 0); err != nil || got != dir {
		t.Fatalf("Fetch(%s) = %s, %v", dir, got, err)
	}
	file := filepath.Join(dir, "f")
	writeTree(t, dir, map[string]string{"f": "x"})
	for _, uri := range []string{file, filepath.Join(dir, "missing"), "relative/dir"} {
		if _, err := Fetch(context.Background(), uri, "", "", 0); err == nil || !strings.Contains(err.Error(), uri) {
			t.Errorf("Fetch(%s): %v, want an error naming it", uri, err)
		}
	}
}

// tarEntry is one entry of a crafted archive.
type tarEntry struct {
	h    tar.Header
	body string
}

func craft(t testing.TB, gz bool, entries ...tarEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := e.h
		if h.Typeflag == tar.TypeReg && h.Size == 0 {
			h.Size = int64(len(e.body))
		}
		if h.Mode == 0 && h.Typeflag != tar.TypeXGlobalHeader {
			h.Mode = 0o644
		}
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if e.body != "" {
			if _, err := tw.Write([]byte(e.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	// A huge declared size has no body: flush what is there, unclosed.
	_ = tw.Flush()
	if !gz {
		return buf.Bytes()
	}
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	_, _ = zw.Write(buf.Bytes())
	_ = zw.Close()
	return z.Bytes()
}

func reg(name, body string) tarEntry {
	return tarEntry{h: tar.Header{Name: name, Typeflag: tar.TypeReg}, body: body}
}

func TestFetchRefusesCraftedEntries(t *testing.T) {
	cases := []struct {
		name    string
		entries []tarEntry
		want    string
	}{
		{"dotdot", []tarEntry{reg("ok.py", "1"), reg("../x", "evil")}, `entry "../x": a '..'`},
		{"inner dotdot", []tarEntry{reg("a/../../x", "evil")}, `entry "a/../../x": a '..'`},
		{"absolute", []tarEntry{reg("/abs", "evil")}, `entry "/abs": an absolute name`},
		{"symlink", []tarEntry{{h: tar.Header{Name: "link", Typeflag: tar.TypeSymlink, Linkname: "/etc/passwd"}}}, `entry "link": is a symbolic link`},
		{"hardlink", []tarEntry{reg("a", "1"), {h: tar.Header{Name: "hard", Typeflag: tar.TypeLink, Linkname: "a"}}}, `entry "hard": is a hard link`},
		{"fifo", []tarEntry{{h: tar.Header{Name: "p", Typeflag: tar.TypeFifo}}}, `entry "p": is a named pipe`},
		{"huge", []tarEntry{{h: tar.Header{Name: "big.bin", Typeflag: tar.TypeReg, Size: 8 << 30}}}, `entry "big.bin": declares 8589934592 bytes`},
		{"duplicate", []tarEntry{reg("a", "1"), reg("a", "2")}, `entry "a": appears twice`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			parent := t.TempDir()
			p := filepath.Join(parent, "store", "app.tar.gz")
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, craft(t, true, c.entries...), 0o644); err != nil {
				t.Fatal(err)
			}
			cache := filepath.Join(parent, "cache")
			_, err := Fetch(context.Background(), p, "", cache, 0)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want %q", err, c.want)
			}
			if ents, _ := os.ReadDir(cache); len(ents) != 0 {
				t.Errorf("a refused archive left %v in the cache", ents)
			}
			for _, name := range []string{"x", "abs", "link"} {
				if _, err := os.Lstat(filepath.Join(parent, name)); err == nil {
					t.Errorf("%s written outside the cache", name)
				}
			}
		})
	}
}

func TestExtractLimits(t *testing.T) {
	dst := t.TempDir()
	err := wdExtract(bytes.NewReader(craft(t, false, reg("a", "1"), reg("b", "2"), reg("c", "3"))), dst, wdLimits{entries: 2, bytes: 100})
	if err == nil || !strings.Contains(err.Error(), `entry "c": more than 2 entries`) {
		t.Fatalf("entries: %v", err)
	}
	dst = t.TempDir()
	err = wdExtract(bytes.NewReader(craft(t, false, reg("a", "1234"), reg("b", "5678"))), dst, wdLimits{entries: 10, bytes: 6})
	if err == nil || !strings.Contains(err.Error(), `entry "b": declares 4 bytes, over the 2 bytes left`) {
		t.Fatalf("bytes: %v", err)
	}
	// Empty entries cost headers only: the stream's own bound ends them.
	var many []tarEntry
	for i := range 40 {
		many = append(many, tarEntry{h: tar.Header{Name: fmt.Sprintf("d%d/", i), Typeflag: tar.TypeDir, Mode: 0o755,
			PAXRecords: map[string]string{"comment": strings.Repeat("x", 60_000)}}})
	}
	err = wdExtract(bytes.NewReader(craft(t, false, many...)), t.TempDir(), wdLimits{entries: 100, bytes: 0})
	if err == nil || !strings.Contains(err.Error(), "unpacks to more than") {
		t.Fatalf("stream bound: %v", err)
	}
	// tar -C dir -czf app.tar.gz . names entries "./..."; git archive adds a
	// global header. Both are fine.
	dst = t.TempDir()
	err = wdExtract(bytes.NewReader(craft(t, false,
		tarEntry{h: tar.Header{Typeflag: tar.TypeXGlobalHeader, Name: "pax_global_header", PAXRecords: map[string]string{"comment": "abc"}}},
		tarEntry{h: tar.Header{Name: "./", Typeflag: tar.TypeDir, Mode: 0o755}},
		tarEntry{h: tar.Header{Name: "./ro/", Typeflag: tar.TypeDir, Mode: 0o555}},
		reg("./ro/train.py", "x"))), dst, wdDefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	if got := readTree(t, dst); !equalMaps(got, map[string]string{"ro/train.py": "x"}) {
		t.Fatalf("extracted %v", got)
	}
}

func TestFetchConcurrent(t *testing.T) {
	archive, sum, err := Pack(project(t), 0)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "app.tar.gz")
	if err := os.WriteFile(p, archive, 0o644); err != nil {
		t.Fatal(err)
	}
	cache := t.TempDir()
	// What a crash mid-extraction leaves: never used, since only a rename
	// makes an entry.
	writeTree(t, cache, map[string]string{wdTmpPrefix + "sha256-" + sum + "-123/train.py": "torn"})
	const n = 4
	dirs := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dirs[i], errs[i] = Fetch(context.Background(), p, sum, cache, 0)
		}()
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil || dirs[i] != filepath.Join(cache, "sha256-"+sum) {
			t.Fatalf("fetch %d: %s, %v", i, dirs[i], errs[i])
		}
	}
	if files := readTree(t, dirs[0]); !equalMaps(files, projectFiles) {
		t.Fatalf("files %v", files)
	}
	ents, _ := os.ReadDir(cache)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if len(names) != 2 { // the entry and the crash's leftover, too young to sweep
		t.Fatalf("cache holds %v", names)
	}
}

// TestInstallLosesRename installs one digest twice, as two ranks that
// both missed the cache do: the second rename fails and uses the first's.
func TestInstallLosesRename(t *testing.T) {
	archive, sum, err := Pack(project(t), 0)
	if err != nil {
		t.Fatal(err)
	}
	cache := t.TempDir()
	first, err := wdInstall(archive, sum, cache, "a")
	if err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(first, "winner")
	writeTree(t, first, map[string]string{"winner": "1"})
	second, err := wdInstall(archive, sum, cache, "a")
	if err != nil || second != first {
		t.Fatalf("second install: %s, %v", second, err)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("the second install replaced the first's entry: %v", err)
	}
	if ents, _ := os.ReadDir(cache); len(ents) != 1 {
		t.Fatalf("cache holds %d entries: the loser's temp dir stayed", len(ents))
	}
	// An empty archive's entry is an empty directory, which a plain rename
	// would replace under a rank using it.
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	_ = tar.NewWriter(zw).Close()
	_ = zw.Close()
	h := sha256.Sum256(z.Bytes())
	esum := hex.EncodeToString(h[:])
	e1, err := wdInstall(z.Bytes(), esum, cache, "e")
	if err != nil {
		t.Fatal(err)
	}
	st1, _ := os.Stat(e1)
	e2, err := wdInstall(z.Bytes(), esum, cache, "e")
	if err != nil || e2 != e1 {
		t.Fatalf("second empty install: %s, %v", e2, err)
	}
	if st2, _ := os.Stat(e2); !os.SameFile(st1, st2) {
		t.Fatal("the second install replaced the empty entry")
	}
}

func TestPackDeterministic(t *testing.T) {
	a, b := project(t), project(t)
	// Different mtimes and creation order: same bytes.
	old := time.Unix(1e9, 0)
	if err := os.Chtimes(filepath.Join(b, "train.py"), old, old); err != nil {
		t.Fatal(err)
	}
	_, s1, err := Pack(a, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, s2, err := Pack(b, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, s3, err := Pack(a, 0)
	if err != nil {
		t.Fatal(err)
	}
	if s1 != s2 || s1 != s3 {
		t.Fatalf("sums differ: %s %s %s", s1, s2, s3)
	}
	writeTree(t, a, map[string]string{"pkg/model.py": "W = 2\n"})
	if _, s4, _ := Pack(a, 0); s4 == s1 {
		t.Fatal("a changed file kept the sum")
	}
}

func TestPackLinks(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{"lib/util.py": "u\n"})
	if err := os.Symlink("lib/util.py", filepath.Join(dir, "util.py")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("lib", filepath.Join(dir, "lib2")); err != nil {
		t.Fatal(err)
	}
	archive, _, err := Pack(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	zr, err := gzip.NewReader(bytes.NewReader(archive))
	if err != nil {
		t.Fatal(err)
	}
	if err := wdExtract(zr, out, wdDefaultLimits); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"lib/util.py": "u\n", "util.py": "u\n", "lib2/util.py": "u\n"}
	if got := readTree(t, out); !equalMaps(got, want) {
		t.Fatalf("links packed as %v, want %v", got, want)
	}

	outside := filepath.Join(t.TempDir(), "secret")
	writeTree(t, filepath.Dir(outside), map[string]string{"secret": "s"})
	if err := os.Symlink(outside, filepath.Join(dir, "leak")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Pack(dir, 0); err == nil || !strings.Contains(err.Error(), "symbolic link leak points outside") {
		t.Fatalf("outside link: %v", err)
	}
	os.Remove(filepath.Join(dir, "leak"))
	if err := os.Symlink("..", filepath.Join(dir, "lib", "up")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Pack(dir, 0); err == nil || !strings.Contains(err.Error(), "symbolic link lib/up makes a cycle") {
		t.Fatalf("cycle: %v", err)
	}
}

func TestPackCap(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{
		"train.py":        "x",
		"data/big.bin":    strings.Repeat("a", 3000),
		"data/medium.bin": strings.Repeat("b", 2000),
		".git/objects/x":  strings.Repeat("c", 100000), // left out: not counted
	})
	_, _, err := Pack(dir, 4096)
	want := "working_dir " + dir + " holds 5001 bytes of files, over the limit of 4096 bytes; the biggest: data/big.bin (3000 bytes), data/medium.bin (2000 bytes), train.py (1 bytes)"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("err = %v\nwant %s", err, want)
	}
	if _, _, err := Pack(dir, 8192); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Pack(filepath.Join(dir, "train.py"), 0); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Fatalf("file: %v", err)
	}
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// FuzzExtract feeds arbitrary bytes, as a tar stream and as a gzip one, to
// the extractor: it must not panic, and must create nothing outside its
// target directory nor any link.
func FuzzExtract(f *testing.F) {
	f.Add(craft(f, false, reg("a.py", "1"), tarEntry{h: tar.Header{Name: "d/", Typeflag: tar.TypeDir, Mode: 0o755}}, reg("d/b.py", "2")))
	f.Add(craft(f, false, reg("../x", "1")))
	f.Add(craft(f, false, reg("/abs", "1")))
	f.Add(craft(f, false, tarEntry{h: tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "../../x"}}))
	f.Add(craft(f, false, reg("a", "1"), tarEntry{h: tar.Header{Name: "h", Typeflag: tar.TypeLink, Linkname: "a"}}))
	f.Add(craft(f, false, tarEntry{h: tar.Header{Name: "big", Typeflag: tar.TypeReg, Size: 1 << 40}}))
	f.Add(craft(f, true, reg("./a/./b/../c.py", "1")))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, gz := range []bool{false, true} {
			parent := t.TempDir()
			dst := filepath.Join(parent, "dst")
			if err := os.Mkdir(dst, 0o700); err != nil {
				t.Fatal(err)
			}
			lim := wdLimits{entries: 64, bytes: 1 << 16}
			if gz {
				zr, err := gzip.NewReader(bytes.NewReader(data))
				if err != nil {
					continue
				}
				_ = wdExtract(zr, dst, lim)
			} else {
				_ = wdExtract(bytes.NewReader(data), dst, lim)
			}
			ents, err := os.ReadDir(parent)
			if err != nil {
				t.Fatal(err)
			}
			if len(ents) != 1 || ents[0].Name() != "dst" {
				t.Fatalf("extraction wrote beside its target: %v", ents)
			}
			var files int
			var size int64
			err = filepath.WalkDir(dst, func(p string, d fs.DirEntry, err error) error {
				if err != nil {
					return err
				}
				if !d.IsDir() && !d.Type().IsRegular() {
					t.Fatalf("extraction made %s, a %v", p, d.Type())
				}
				if d.Type().IsRegular() {
					files++
					info, err := d.Info()
					if err != nil {
						return err
					}
					size += info.Size()
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if files > lim.entries || size > lim.bytes {
				t.Fatalf("extracted %d files, %d bytes: over the limits %+v", files, size, lim)
			}
		}
	})
}
