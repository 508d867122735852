package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/tempotrain/tempotrain/tracing"
	"github.com/tempotrain/tempotrain/train"
)

// buildInput registers inputFlags on a fresh FlagSet (with defStorage as
// -storage's default, as a command does), writes file (if not empty) as the
// -input file, parses args and builds.
func buildInput(t *testing.T, defStorage, file string, args ...string) (train.FitInput, error) {
	t.Helper()
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var f inputFlags
	f.register(fs, defStorage)
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
	return f.build()
}

// fullFile sets every field an inputFlags flag can set.
const fullFile = `{
  "train_func": "mnist-cnn",
  "config": {"epochs":2},
  "scaling": {"num_workers": 4, "use_gpu": true, "task_queue": "file-q"},
  "run": {
    "name": "file-run",
    "storage_path": "/file/runs",
    "failure": {"max_failures": 3, "heartbeat_timeout": "90s"},
    "checkpoint": {"num_to_keep": 5, "score_attribute": "acc", "score_order": "min"}
  },
  "datasets": {"train": {"uri": "/file/t.csv", "label": "y"}}
}`

func fileInput() train.FitInput {
	var in train.FitInput
	in.TrainFunc = "mnist-cnn"
	in.Config = json.RawMessage(`{"epochs":2}`)
	in.Scaling.NumWorkers, in.Scaling.UseGPU, in.Scaling.TaskQueue = 4, true, "file-q"
	in.Run.Name, in.Run.StoragePath = "file-run", "/file/runs"
	in.Run.Failure.MaxFailures, in.Run.Failure.HeartbeatTimeout = 3, train.Duration(90*time.Second)
	in.Run.Checkpoint.NumToKeep, in.Run.Checkpoint.ScoreAttribute, in.Run.Checkpoint.ScoreOrder = 5, "acc", "min"
	in.Datasets = map[string]train.DatasetSpec{"train": {URI: "/file/t.csv", Label: "y"}}
	return in
}

// allFlags sets every flag of inputFlags to a value the file does not have.
var allFlags = []string{
	"-func", "mnist-mlp", "-config", `{"lr":0.1}`, "-workers", "8", "-gpu=false", "-rank-queue", "flag-q",
	"-storage", "s3://bucket/runs", "-name", "flag-run", "-max-failures", "-1", "-heartbeat-timeout", "30s",
	"-num-to-keep", "2", "-score-attr", "loss", "-score-order", "max", "-dataset", "train=/flag/t.csv", "-label", "z",
}

func flagInput() train.FitInput {
	var in train.FitInput
	in.TrainFunc = "mnist-mlp"
	in.Config = json.RawMessage(`{"lr":0.1}`)
	in.Scaling.NumWorkers, in.Scaling.TaskQueue = 8, "flag-q"
	in.Run.Name, in.Run.StoragePath = "flag-run", "s3://bucket/runs"
	in.Run.Failure.MaxFailures, in.Run.Failure.HeartbeatTimeout = -1, train.Duration(30*time.Second)
	in.Run.Checkpoint.NumToKeep, in.Run.Checkpoint.ScoreAttribute, in.Run.Checkpoint.ScoreOrder = 2, "loss", "max"
	in.Datasets = map[string]train.DatasetSpec{"train": {URI: "/flag/t.csv", Label: "z"}}
	return in
}

func TestInputFlagsBuild(t *testing.T) {
	t.Parallel()
	with := func(in train.FitInput, mod func(*train.FitInput)) train.FitInput {
		mod(&in)
		return in
	}
	for _, c := range []struct {
		name       string
		defStorage string
		file       string
		args       []string
		want       train.FitInput
	}{
		{name: "flags only", args: allFlags, want: flagInput()},
		{name: "-dataset adds to the file's datasets, -label labels them all", file: fullFile,
			args: []string{"-label", "target", "-dataset", "valid=s3://b/v.parquet"},
			want: with(fileInput(), func(in *train.FitInput) {
				in.Datasets = map[string]train.DatasetSpec{"train": {URI: "/file/t.csv", Label: "target"}, "valid": {URI: "s3://b/v.parquet", Label: "target"}}
			})},
		{name: "file only", file: fullFile, want: fileInput()},
		{name: "every flag over the file", file: fullFile, args: allFlags, want: flagInput()},
		{name: "neither", want: train.FitInput{}},

		// The bug: -storage lost to the file's storage_path.
		{name: "-storage over the file's storage_path", file: fullFile, args: []string{"-storage", "/flag/runs"},
			want: with(fileInput(), func(in *train.FitInput) { in.Run.StoragePath = "/flag/runs" })},
		{name: "-storage over the file's, with a default", defStorage: "/default/runs", file: fullFile, args: []string{"-storage", "/flag/runs"},
			want: with(fileInput(), func(in *train.FitInput) { in.Run.StoragePath = "/flag/runs" })},
		// A default is not a flag given: it must not clobber the file.
		{name: "default storage keeps the file's", defStorage: "/default/runs", file: fullFile, want: fileInput()},
		{name: "default storage fills a file without one", defStorage: "/default/runs", file: `{"train_func":"f","scaling":{"num_workers":1}}`,
			want: with(train.FitInput{}, func(in *train.FitInput) {
				in.TrainFunc, in.Scaling.NumWorkers, in.Run.StoragePath = "f", 1, "/default/runs"
			})},
		{name: "default storage without a file", defStorage: "/default/runs", args: []string{"-func", "f"},
			want: with(train.FitInput{}, func(in *train.FitInput) { in.TrainFunc, in.Run.StoragePath = "f", "/default/runs" })},
		{name: "explicit empty -storage over the default", defStorage: "/default/runs", args: []string{"-storage="},
			want: train.FitInput{}},

		// Values that used to mean "not given" now win when given.
		{name: "-gpu=false over use_gpu true", file: fullFile, args: []string{"-gpu=false"},
			want: with(fileInput(), func(in *train.FitInput) { in.Scaling.UseGPU = false })},
		{name: "-gpu over a file without use_gpu", file: `{"train_func":"f"}`, args: []string{"-gpu"},
			want: with(train.FitInput{}, func(in *train.FitInput) { in.TrainFunc, in.Scaling.UseGPU = "f", true })},
		{name: "-max-failures 0 over 3", file: fullFile, args: []string{"-max-failures", "0"},
			want: with(fileInput(), func(in *train.FitInput) { in.Run.Failure.MaxFailures = 0 })},
		{name: "-max-failures -2 is passed on (Validate refuses it)", file: fullFile, args: []string{"-max-failures", "-2"},
			want: with(fileInput(), func(in *train.FitInput) { in.Run.Failure.MaxFailures = -2 })},
		{name: "-heartbeat-timeout 0 over 90s (back to the default)", file: fullFile, args: []string{"-heartbeat-timeout", "0"},
			want: with(fileInput(), func(in *train.FitInput) { in.Run.Failure.HeartbeatTimeout = 0 })},
		{name: "-workers 0 over 4", file: fullFile, args: []string{"-workers", "0"},
			want: with(fileInput(), func(in *train.FitInput) { in.Scaling.NumWorkers = 0 })},
		{name: "-num-to-keep 0 over 5", file: fullFile, args: []string{"-num-to-keep=0"},
			want: with(fileInput(), func(in *train.FitInput) { in.Run.Checkpoint.NumToKeep = 0 })},
		{name: "empty string flags clear the file's fields", file: fullFile,
			args: []string{"-func=", "-config=", "-rank-queue=", "-name=", "-score-attr=", "-score-order="},
			want: with(fileInput(), func(in *train.FitInput) {
				in.TrainFunc, in.Config, in.Scaling.TaskQueue, in.Run.Name = "", nil, "", ""
				in.Run.Checkpoint.ScoreAttribute, in.Run.Checkpoint.ScoreOrder = "", ""
			})},
		{name: "-config over the file's config", file: fullFile, args: []string{"-config", `{"epochs": 9}`},
			want: with(fileInput(), func(in *train.FitInput) { in.Config = json.RawMessage(`{"epochs": 9}`) })},
		{name: "heartbeat_timeout as a number of seconds", file: `{"run":{"failure":{"heartbeat_timeout":30}}}`,
			want: with(train.FitInput{}, func(in *train.FitInput) { in.Run.Failure.HeartbeatTimeout = train.Duration(30 * time.Second) })},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got, err := buildInput(t, c.defStorage, c.file, c.args...)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, c.want) {
				g, _ := json.Marshal(got)
				w, _ := json.Marshal(c.want)
				t.Errorf("input\n got %s\nwant %s", g, w)
			}
		})
	}
}

func TestInputFlagsErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		file string
		args []string
		want []string // substrings of the error
	}{
		{"unknown field", `{"train_func":"f","num_workers":2}`, nil, []string{"-input", `unknown field "num_workers"`}},
		{"unknown nested field", `{"run":{"storage":"/x"}}`, nil, []string{`unknown field "storage"`}},
		{"wrong type", `{"scaling":{"num_workers":"two"}}`, nil, []string{"num_workers"}},
		{"bad duration", `{"run":{"failure":{"heartbeat_timeout":"soon"}}}`, nil, []string{`duration "soon"`}},
		{"not JSON", `train_func: f`, nil, []string{"-input", "invalid character"}},
		{"bad -config", "", []string{"-config", `{"epochs":`}, []string{"-config", "not valid JSON"}},
		{"bad -config over a file", fullFile, []string{"-config", `epochs=2`}, []string{"-config epochs=2", "not valid JSON"}},
		{"-gpu false", fullFile, []string{"-gpu", "false", "-workers", "2"}, []string{`unexpected argument "false"`, "-gpu=false"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			_, err := buildInput(t, "", c.file, c.args...)
			if err == nil {
				t.Fatalf("no error, want one saying %q", c.want)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
	t.Run("missing file", func(t *testing.T) {
		t.Parallel()
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		var f inputFlags
		f.register(fs, "")
		missing := filepath.Join(t.TempDir(), "nope.json")
		if err := fs.Parse([]string{"-input", missing}); err != nil {
			t.Fatal(err)
		}
		if _, err := f.build(); err == nil || !strings.Contains(err.Error(), "nope.json") {
			t.Fatalf("err = %v, want one naming the file", err)
		}
	})
}

// Every flag of inputFlags but -input sets a field, and wins over the file
// when given alone.
func TestInputFlagsEachFlagWins(t *testing.T) {
	t.Parallel()
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	var f inputFlags
	f.register(fs, "")
	var in train.FitInput
	set := f.setters(&in)
	var names []string
	fs.VisitAll(func(fl *flag.Flag) {
		if fl.Name != "input" {
			names = append(names, fl.Name)
		}
	})
	var setterNames []string
	for n := range set {
		setterNames = append(setterNames, n)
	}
	sort.Strings(setterNames)
	if !reflect.DeepEqual(names, setterNames) {
		t.Fatalf("flags %v, setters %v: every flag needs a setter", names, setterNames)
	}
	// allFlags holds each flag once, with a value the file does not have.
	for i := 0; i < len(allFlags); i++ {
		args := []string{allFlags[i]}
		if !strings.Contains(allFlags[i], "=") {
			i++
			args = append(args, allFlags[i])
		}
		got, err := buildInput(t, "", fullFile, args...)
		if err != nil {
			t.Fatal(err)
		}
		if reflect.DeepEqual(got, fileInput()) {
			t.Errorf("%v: the file's value won", args)
		}
	}
}

func TestFmtMetrics(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		m    train.Metrics
		want string
	}{
		{nil, ""},
		{train.Metrics{"loss": 0.123456}, "loss=0.1235"},
		{train.Metrics{"loss": 2.5e-7, "accuracy": 0.91, "epoch": 3, "steps": 123456}, "accuracy=0.91 epoch=3 loss=2.5e-07 steps=1.235e+05"},
	} {
		if got := fmtMetrics(c.m); got != c.want {
			t.Errorf("fmtMetrics(%v) = %q, want %q", c.m, got, c.want)
		}
	}
	if got := ckptNote(0); got != "" {
		t.Errorf("ckptNote(0) = %q, want nothing", got)
	}
	if got := ckptNote(7); got != "  [checkpoint 7]" {
		t.Errorf("ckptNote(7) = %q", got)
	}
}

// The connection comes from the Temporal CLI's configuration file (a
// profile), then the environment, then the flags: a flag given wins.
func TestConnFromConfigEnvAndFlags(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "temporal.toml")
	if err := os.WriteFile(cfg, []byte(`
[profile.default]
address = "file.example:7233"
namespace = "from-file"

[profile.prod]
address = "prod.example:7233"
namespace = "prod"
api_key = "secret-key"
[profile.prod.tls]
server_name = "prod.example"
`), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TEMPORAL_CONFIG_FILE", cfg)
	t.Setenv("TEMPORAL_PROFILE", "")
	for _, c := range []struct {
		env             map[string]string
		args            []string
		address, nsWant string
		tls, apiKey     bool
	}{
		{nil, nil, "file.example:7233", "from-file", false, false},
		{map[string]string{"TEMPORAL_ADDRESS": "env.example:7233"}, nil, "env.example:7233", "from-file", false, false},
		{map[string]string{"TEMPORAL_ADDRESS": "env.example:7233"}, []string{"-address", "other:1", "-namespace", "ml"}, "other:1", "ml", false, false},
		{nil, []string{"-profile", "prod"}, "prod.example:7233", "prod", true, true},
	} {
		for k, v := range c.env {
			t.Setenv(k, v)
		}
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		var cn conn
		cn.flags(fs)
		if err := fs.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		o, err := cn.connection().ClientOptions(tracing.Noop())
		if err != nil {
			t.Fatalf("%v %v: %v", c.env, c.args, err)
		}
		if o.HostPort != c.address || o.Namespace != c.nsWant || (o.ConnectionOptions.TLS != nil) != c.tls || (o.Credentials != nil) != c.apiKey {
			t.Errorf("%v %v: address %q namespace %q TLS %v credentials %v, want %q %q %v %v", c.env, c.args,
				o.HostPort, o.Namespace, o.ConnectionOptions.TLS != nil, o.Credentials != nil, c.address, c.nsWant, c.tls, c.apiKey)
		}
		for k := range c.env {
			t.Setenv(k, "")
			os.Unsetenv(k)
		}
	}
	t.Setenv("TEMPORAL_PROFILE", "missing")
	if _, err := (&conn{}).connection().ClientOptions(tracing.Noop()); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("a missing profile: %v, want an error naming it", err)
	}
}

// captureStdout returns what f prints on os.Stdout.
func captureStdout(t *testing.T, f func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stdout
	os.Stdout = w
	done := make(chan string)
	go func() {
		b, _ := io.ReadAll(r)
		done <- string(b)
	}()
	defer func() { os.Stdout = old }()
	f()
	w.Close()
	return <-done
}

// fit -print-input prints the input it would start, without a server: the
// flags win over the file there too.
func TestFitPrintInput(t *testing.T) {
	path := filepath.Join(t.TempDir(), "in.json")
	if err := os.WriteFile(path, []byte(fullFile), 0o644); err != nil {
		t.Fatal(err)
	}
	var err error
	out := captureStdout(t, func() {
		err = runFit([]string{"-input", path, "-storage", "/flag/runs", "-gpu=false", "-print-input"})
	})
	if err != nil {
		t.Fatal(err)
	}
	var got train.FitInput
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("output %q: %v", out, err)
	}
	var config bytes.Buffer // printed indented
	if err := json.Compact(&config, got.Config); err != nil {
		t.Fatal(err)
	}
	got.Config = config.Bytes()
	want := fileInput()
	want.Run.StoragePath, want.Scaling.UseGPU = "/flag/runs", false
	if !reflect.DeepEqual(got, want) {
		t.Errorf("printed %s", out)
	}
}
