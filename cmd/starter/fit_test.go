package main

import (
	"context"
	"encoding/json"
	"flag"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/python"
	"github.com/tempotrain/tempotrain/train"
)

// buildPython is buildInput with fit's and dev's Python flags: it parses
// args, builds the input and applies the Python flags.
func buildPython(t *testing.T, file string, args ...string) (train.FitInput, *pythonFlags, error) {
	t.Helper()
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var f inputFlags
	var py pythonFlags
	f.register(fs, "")
	py.register(fs)
	if file != "" {
		path := filepath.Join(t.TempDir(), "input.json")
		if err := os.WriteFile(path, []byte(file), 0o644); err != nil {
			t.Fatal(err)
		}
		args = append([]string{"-input", path}, args...)
	}
	if err := fs.Parse(args); err != nil {
		t.Fatalf("parse %q: %v", args, err)
	}
	in, err := f.build()
	if err != nil {
		return in, &py, err
	}
	return in, &py, py.apply(&in)
}

func TestPythonFlags(t *testing.T) {
	in, py, err := buildPython(t, "", "-python", "train.py", "-arg", "--epochs", "-arg", "3",
		"-interpreter", "/usr/bin/python3", "-env", "OMP_NUM_THREADS=2", "-env", "OPTS=a=b",
		"-working-dir", "s3://bucket/code/app.tar.gz", "-storage", "/runs", "-workers", "2")
	if err != nil {
		t.Fatal(err)
	}
	want := &api.PythonSpec{
		Entrypoint:  "train.py",
		Args:        []string{"--epochs", "3"},
		Interpreter: "/usr/bin/python3",
		Env:         map[string]string{"OMP_NUM_THREADS": "2", "OPTS": "a=b"},
		WorkingDir:  "s3://bucket/code/app.tar.gz",
	}
	if !reflect.DeepEqual(in.Python, want) {
		t.Fatalf("python %+v, want %+v", in.Python, want)
	}
	if in.TrainFunc != api.PythonFunc {
		t.Fatalf("train_func %q, want %q without -func", in.TrainFunc, api.PythonFunc)
	}
	if py.packDir != "" {
		t.Fatalf("a URI is packed: %s", py.packDir)
	}
	if err := in.WithDefaults().Validate(); err != nil {
		t.Fatal(err)
	}
	// Without Python flags, nothing changes.
	in, _, err = buildPython(t, "", "-func", "mnist-mlp")
	if err != nil || in.Python != nil || in.TrainFunc != "mnist-mlp" {
		t.Fatalf("no python flags: %+v, %v", in.Python, err)
	}
}

// A flag wins over the -input file's field; a flag not given leaves it; env
// merges by name.
func TestPythonFlagsOverFile(t *testing.T) {
	file := `{"python": {"entrypoint": "train.py", "args": ["--x"], "interpreter": "python3.11",
	  "env": {"A": "file", "C": "c"}, "working_dir": "/srv/app.tar.gz",
	  "working_dir_sha256": "` + strings.Repeat("a", 64) + `"},
	  "run": {"storage_path": "/runs"}}`
	in, _, err := buildPython(t, file, "-env", "A=flag", "-interpreter", "/venv/bin/python")
	if err != nil {
		t.Fatal(err)
	}
	want := &api.PythonSpec{
		Entrypoint: "train.py", Args: []string{"--x"}, Interpreter: "/venv/bin/python",
		Env:        map[string]string{"A": "flag", "C": "c"},
		WorkingDir: "/srv/app.tar.gz", WorkingDirSHA256: strings.Repeat("a", 64),
	}
	if !reflect.DeepEqual(in.Python, want) {
		t.Fatalf("python %+v, want %+v", in.Python, want)
	}
	// Another -working-dir drops the file's digest, which was of the
	// file's archive; a relative .tar.gz is made absolute.
	t.Chdir(t.TempDir())
	cwd, _ := os.Getwd()
	in, _, err = buildPython(t, file, "-working-dir", "dist/app.tar.gz", "-python", "pkg.mod:train_func", "-arg", "")
	if err != nil {
		t.Fatal(err)
	}
	if in.Python.WorkingDir != filepath.Join(cwd, "dist/app.tar.gz") || in.Python.WorkingDirSHA256 != "" {
		t.Fatalf("working_dir %q sha %q", in.Python.WorkingDir, in.Python.WorkingDirSHA256)
	}
	if in.Python.Entrypoint != "pkg.mod:train_func" || !reflect.DeepEqual(in.Python.Args, []string{""}) {
		t.Fatalf("entrypoint %q args %q", in.Python.Entrypoint, in.Python.Args)
	}
}

func TestPythonFlagErrors(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "train.py")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-python", "t.py", "-env", "NOEQUALS"}, `-env "NOEQUALS": want NAME=VALUE`},
		{[]string{"-python", "t.py", "-env", "=v"}, `-env "=v": want NAME=VALUE`},
		{[]string{"-arg", "x", "-env", "A=1"}, "-arg, -env: give the Python entrypoint with -python"},
		{[]string{"-working-dir", dir}, "-working-dir: give the Python entrypoint"},
		{[]string{"-python", "t.py", "-working-dir", filepath.Join(dir, "missing")}, "-working-dir " + filepath.Join(dir, "missing") + ": no such directory here"},
		{[]string{"-python", "t.py", "-working-dir", file}, "-working-dir " + file + ": not a directory"},
		{[]string{"-python", "t.py", "-working-dir", ""}, `-working-dir "": give a directory`},
	} {
		_, _, err := buildPython(t, "", c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: err = %v, want %q", c.args, err, c.want)
		}
	}
}

// A local -working-dir (relative to the current directory) is packed into
// the run's storage, and the input names the archive and its digest; the
// archive is what a worker fetches.
func TestPythonWorkingDirUpload(t *testing.T) {
	proj := t.TempDir()
	for name, body := range map[string]string{"train.py": "print(1)\n", "pkg/m.py": "X = 1\n", "__pycache__/m.pyc": "b"} {
		p := filepath.Join(proj, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Chdir(filepath.Dir(proj))
	store := t.TempDir()
	in, py, err := buildPython(t, "", "-python", "train.py", "-working-dir", filepath.Base(proj), "-storage", store, "-workers", "1")
	if err != nil {
		t.Fatal(err)
	}
	if py.packDir != proj || in.Python.WorkingDir != proj {
		t.Fatalf("packDir %q, working_dir %q, want %q", py.packDir, in.Python.WorkingDir, proj)
	}
	var log strings.Builder
	ctx := context.Background()
	if err := py.upload(ctx, &in, &log); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(in.Run.Name, "python-") {
		t.Fatalf("run name %q, want python-<time>", in.Run.Name)
	}
	_, sum, err := python.Pack(proj, 0)
	if err != nil {
		t.Fatal(err)
	}
	uri := filepath.Join(store, in.Run.Name, "working_dir", "sha256-"+sum+".tar.gz")
	if in.Python.WorkingDir != uri || in.Python.WorkingDirSHA256 != sum {
		t.Fatalf("working_dir %q sha %q, want %q %q", in.Python.WorkingDir, in.Python.WorkingDirSHA256, uri, sum)
	}
	if !strings.Contains(log.String(), uri) {
		t.Fatalf("log %q does not name %s", log.String(), uri)
	}
	if err := in.WithDefaults().Validate(); err != nil {
		t.Fatal(err)
	}
	got, err := python.Fetch(ctx, in.Python.WorkingDir, in.Python.WorkingDirSHA256, t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(got, "pkg", "m.py")); err != nil || string(b) != "X = 1\n" {
		t.Fatalf("fetched pkg/m.py: %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(got, "__pycache__")); err == nil {
		t.Fatal("__pycache__ was packed")
	}

	// A bad input fails before anything is written.
	store2 := t.TempDir()
	in, py, err = buildPython(t, "", "-python", "train.py", "-func", "mnist-mlp", "-working-dir", proj, "-storage", store2, "-name", "r")
	if err != nil {
		t.Fatal(err)
	}
	if err := py.upload(ctx, &in, io.Discard); err == nil || !strings.Contains(err.Error(), "train_func") {
		t.Fatalf("bad input: %v", err)
	}
	if ents, _ := os.ReadDir(store2); len(ents) != 0 {
		t.Fatalf("a refused input wrote %v", ents)
	}
	// Storage inside the packed directory would pack earlier archives; dev's
	// home (.tempotrain) is left out by Pack.
	inner := filepath.Join(proj, "runs")
	in, py, err = buildPython(t, "", "-python", "train.py", "-working-dir", proj, "-storage", inner, "-name", "r", "-workers", "1")
	if err != nil {
		t.Fatal(err)
	}
	if err := py.upload(ctx, &in, io.Discard); err == nil || !strings.Contains(err.Error(), "holds the run's storage "+inner) {
		t.Fatalf("storage inside: %v", err)
	}
	home := filepath.Join(proj, ".tempotrain", "runs")
	in, py, err = buildPython(t, "", "-python", "train.py", "-working-dir", proj, "-storage", home, "-name", "r", "-workers", "1")
	if err != nil {
		t.Fatal(err)
	}
	if err := py.upload(ctx, &in, io.Discard); err != nil {
		t.Fatalf("storage in .tempotrain: %v", err)
	}
	if in.Python.WorkingDirSHA256 != sum {
		t.Fatalf("packed the storage in .tempotrain: sha256 %s, want %s", in.Python.WorkingDirSHA256, sum)
	}
}

// fit -print-input packs and uploads too: the input it prints names the
// archive.
func TestFitPrintInputPython(t *testing.T) {
	proj := t.TempDir()
	if err := os.WriteFile(filepath.Join(proj, "train.py"), []byte("print(1)\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	store := t.TempDir()
	var err error
	out := captureStdout(t, func() {
		err = runFit([]string{"-python", "train.py:train_func", "-working-dir", proj, "-storage", store, "-name", "py1", "-workers", "1", "-print-input"})
	})
	if err != nil {
		t.Fatal(err)
	}
	var got train.FitInput
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("output %q: %v", out, err)
	}
	if got.TrainFunc != api.PythonFunc || got.Python == nil || got.Python.Entrypoint != "train.py:train_func" {
		t.Fatalf("printed %s", out)
	}
	if _, err := os.Stat(got.Python.WorkingDir); err != nil || !strings.HasPrefix(got.Python.WorkingDir, filepath.Join(store, "py1", "working_dir")+"/") {
		t.Fatalf("working_dir %q: %v", got.Python.WorkingDir, err)
	}
}

// dev takes the same flags, and checks them before it starts a server.
func TestDevPythonFlagErrors(t *testing.T) {
	home := t.TempDir()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-python", "t.py", "-env", "BAD"}, `-env "BAD": want NAME=VALUE`},
		{[]string{"-interpreter", "python3"}, "-interpreter: give the Python entrypoint with -python"},
		{[]string{"-python", "t.py", "-working-dir", filepath.Join(home, "nope")}, "no such directory here"},
		{[]string{"-python", "t.py", "-func", "mnist-mlp", "-working-dir", home}, "train_func"},
	} {
		err := runDev(append([]string{"-home", home, "-port", "1", "-ui-port", "0"}, c.args...))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("dev %q: err = %v, want %q", c.args, err, c.want)
		}
	}
	if ents, _ := os.ReadDir(home); len(ents) != 0 {
		t.Fatalf("a refused dev wrote %v", ents)
	}
}
