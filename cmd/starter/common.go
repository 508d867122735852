package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strings"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"

	"github.com/tempotrain/tempotrain/app"
	"github.com/tempotrain/tempotrain/train"
)

// conn holds the flags that reach a Temporal server: the Temporal CLI's
// client configuration and environment (app.Connection), overridden by
// flags.
type conn struct{ address, namespace, profile, codecKeys string }

func (c *conn) flags(fs *flag.FlagSet) {
	fs.StringVar(&c.address, "address", "", "Temporal frontend host:port (default: the client configuration, TEMPORAL_ADDRESS, or localhost:7233)")
	fs.StringVar(&c.namespace, "namespace", "", "Temporal namespace (default: the client configuration, TEMPORAL_NAMESPACE, or default)")
	fs.StringVar(&c.profile, "profile", "", "profile of the Temporal CLI's configuration file (TLS, API key, address; env TEMPORAL_PROFILE)")
	fs.StringVar(&c.codecKeys, "codec-keys", "", "key file of the payload encryption codec (env "+app.CodecKeysEnv+")")
}

func (c *conn) connection() app.Connection {
	return app.Connection{Profile: c.profile, Address: c.address, Namespace: c.namespace, CodecKeys: c.codecKeys, Logger: quietLogger()}
}

func (c *conn) dial() (client.Client, error) {
	return c.connection().Dial(telemetry)
}

func quietLogger() log.Logger {
	return log.NewStructuredLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
}

// inputFlags builds a FitInput from a JSON file and/or flags: a flag given on
// the command line wins over the file, a flag not given leaves the file's
// field alone, and a flag's non-empty default (-storage of some commands)
// fills only a field that neither sets.
type inputFlags struct {
	fs                                                                *flag.FlagSet
	file, fn, config, storage, name, scoreAttr, scoreOrder, rankQueue string
	workers, maxFailures, numToKeep, minWorkers, maxWorkers, perProc  int
	gpu                                                               bool
	heartbeat, lastCall                                               time.Duration
	resumeFrom, schedule                                              string
	asyncUpload, allowFresh                                           bool
	collectiveTimeout, startTimeout                                   time.Duration
	datasets                                                          datasetFlag
	label                                                             string
}

// datasetFlag collects -dataset name=uri flags, in order.
type datasetFlag []struct{ name, uri string }

func (d *datasetFlag) String() string {
	var parts []string
	for _, x := range *d {
		parts = append(parts, x.name+"="+x.uri)
	}
	return strings.Join(parts, ",")
}

func (d *datasetFlag) Set(v string) error {
	name, uri, ok := strings.Cut(v, "=")
	if !ok || name == "" || uri == "" {
		return fmt.Errorf("want name=uri (train=/data/train.csv), got %q", v)
	}
	*d = append(*d, struct{ name, uri string }{name, uri})
	return nil
}

func (f *inputFlags) register(fs *flag.FlagSet, defStorage string) {
	f.fs = fs
	fs.StringVar(&f.file, "input", "", "JSON file holding a FitInput (the flags below, when given, override its fields)")
	fs.StringVar(&f.fn, "func", "", "registered training function (train_func)")
	fs.StringVar(&f.config, "config", "", "JSON config handed to every rank")
	fs.IntVar(&f.workers, "workers", 0, "number of ranks (scaling.num_workers)")
	fs.IntVar(&f.minWorkers, "min-workers", 0, "elastic: the fewest ranks an attempt trains with (scaling.min_workers; with -max-workers)")
	fs.IntVar(&f.maxWorkers, "max-workers", 0, "elastic: the most ranks the run grows to (scaling.max_workers; with -min-workers)")
	fs.IntVar(&f.perProc, "ranks-per-process", 0, "ranks one worker process runs together as one activity, like torchrun's --nproc-per-node (scaling.ranks_per_process; default one rank an activity)")
	fs.DurationVar(&f.lastCall, "last-call", 0, "elastic: wait for more workers once min-workers started (scaling.last_call; default 5s)")
	fs.BoolVar(&f.gpu, "gpu", false, "run ranks on the GPU task queue (scaling.use_gpu); -gpu=false turns it off")
	fs.StringVar(&f.rankQueue, "rank-queue", "", "task queue of the ranks (scaling.task_queue)")
	fs.StringVar(&f.storage, "storage", defStorage, `storage path: a directory or "s3://bucket/prefix" (run.storage_path)`)
	fs.StringVar(&f.name, "name", "", "run name (run.name); an existing run resumes")
	fs.IntVar(&f.maxFailures, "max-failures", 0, "restarts allowed: 0 none, -1 unlimited (run.failure.max_failures)")
	fs.DurationVar(&f.heartbeat, "heartbeat-timeout", 0, "rank heartbeat timeout (run.failure.heartbeat_timeout; default 60s)")
	fs.IntVar(&f.numToKeep, "num-to-keep", 0, "checkpoints kept, 0 all (run.checkpoint.num_to_keep)")
	fs.StringVar(&f.resumeFrom, "resume-from", "", `warm start: a checkpoint URI, or "previous-best" in a schedule (run.resume_from)`)
	fs.StringVar(&f.schedule, "schedule", "", "the schedule the run belongs to (run.schedule; default: the Schedule that started it)")
	fs.BoolVar(&f.asyncUpload, "async-upload", false, "rank 0 uploads checkpoints in the background (run.checkpoint.async_upload)")
	fs.BoolVar(&f.allowFresh, "allow-fresh-start", false, "train from the start when no checkpoint verifies (run.failure.allow_fresh_start)")
	fs.DurationVar(&f.collectiveTimeout, "collective-timeout", 0, "bound on every collective operation (run.failure.collective_timeout; default 5m)")
	fs.DurationVar(&f.startTimeout, "start-timeout", 0, "bound on waiting for workers and peers (run.failure.start_timeout; default 10m)")
	fs.StringVar(&f.scoreAttr, "score-attr", "", "metric that ranks checkpoints (run.checkpoint.score_attribute)")
	fs.StringVar(&f.scoreOrder, "score-order", "", "max or min (run.checkpoint.score_order)")
	fs.Var(&f.datasets, "dataset", "a dataset as name=uri, repeatable: -dataset train=/data/t.csv -dataset valid=s3://b/v.parquet (datasets.NAME.uri)")
	fs.StringVar(&f.label, "label", "", "label column of every dataset of the input (datasets.*.label)")
}

// setters maps each flag of inputFlags but -input to what it sets in in.
func (f *inputFlags) setters(in *train.FitInput) map[string]func() {
	return map[string]func(){
		"func": func() { in.TrainFunc = f.fn },
		"config": func() {
			in.Config = nil
			if f.config != "" {
				in.Config = json.RawMessage(f.config)
			}
		},
		"workers":           func() { in.Scaling.NumWorkers = f.workers },
		"min-workers":       func() { in.Scaling.MinWorkers = f.minWorkers },
		"max-workers":       func() { in.Scaling.MaxWorkers = f.maxWorkers },
		"last-call":         func() { in.Scaling.LastCall = train.Duration(f.lastCall) },
		"ranks-per-process": func() { in.Scaling.RanksPerProcess = f.perProc },
		"gpu":               func() { in.Scaling.UseGPU = f.gpu },
		"rank-queue":        func() { in.Scaling.TaskQueue = f.rankQueue },
		"storage":           func() { in.Run.StoragePath = f.storage },
		"name":              func() { in.Run.Name = f.name },
		"max-failures":      func() { in.Run.Failure.MaxFailures = f.maxFailures },
		"heartbeat-timeout": func() { in.Run.Failure.HeartbeatTimeout = train.Duration(f.heartbeat) },
		"num-to-keep":       func() { in.Run.Checkpoint.NumToKeep = f.numToKeep },
		"resume-from":       func() { in.Run.ResumeFrom = f.resumeFrom },
		"schedule":          func() { in.Run.Schedule = f.schedule },
		"async-upload":      func() { in.Run.Checkpoint.AsyncUpload = f.asyncUpload },
		"allow-fresh-start": func() { in.Run.Failure.AllowFreshStart = f.allowFresh },
		"collective-timeout": func() {
			in.Run.Failure.CollectiveTimeout = train.Duration(f.collectiveTimeout)
		},
		"start-timeout": func() { in.Run.Failure.StartTimeout = train.Duration(f.startTimeout) },
		"score-attr":    func() { in.Run.Checkpoint.ScoreAttribute = f.scoreAttr },
		"score-order":   func() { in.Run.Checkpoint.ScoreOrder = f.scoreOrder },
		"dataset": func() {
			if in.Datasets == nil {
				in.Datasets = map[string]train.DatasetSpec{}
			}
			for _, d := range f.datasets {
				spec := in.Datasets[d.name]
				spec.URI = d.uri
				in.Datasets[d.name] = spec
			}
		},
		// Visit goes in name order: -label comes after -dataset.
		"label": func() {
			for name, spec := range in.Datasets {
				spec.Label = f.label
				in.Datasets[name] = spec
			}
		},
	}
}

// build returns the FitInput of the -input file (if any) with the flags given
// on the command line applied; call it after the FlagSet is parsed.
func (f *inputFlags) build() (train.FitInput, error) {
	var in train.FitInput
	if f.fs.NArg() > 0 {
		// flag stops at the first argument that is not a flag: "-gpu false"
		// is -gpu followed by the argument "false", and every flag after it
		// would be dropped silently.
		return in, fmt.Errorf("unexpected argument %q (boolean flags take their value with '=': -gpu=false)", f.fs.Arg(0))
	}
	if f.file != "" {
		b, err := os.ReadFile(f.file)
		if err != nil {
			return in, err
		}
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&in); err != nil {
			return in, fmt.Errorf("-input %s: %w", f.file, err)
		}
	}
	set := f.setters(&in)
	given := map[string]bool{}
	f.fs.Visit(func(fl *flag.Flag) {
		given[fl.Name] = true
		if apply, ok := set[fl.Name]; ok {
			apply()
		}
	})
	if !given["storage"] && in.Run.StoragePath == "" {
		in.Run.StoragePath = f.storage // the flag's default, if any
	}
	if len(in.Config) > 0 && !json.Valid(in.Config) {
		return in, fmt.Errorf("-config %s: not valid JSON", in.Config)
	}
	return in, nil
}

func printJSON(v any) {
	b, _ := json.MarshalIndent(v, "", "  ")
	fmt.Println(string(b))
}

func decodeFirst(b []byte, v any) error { return json.Unmarshal(b, v) }

func ckptNote(seq int) string {
	if seq == 0 {
		return ""
	}
	return fmt.Sprintf("  [checkpoint %d]", seq)
}

func fmtMetrics(m train.Metrics) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%s=%.4g", k, m[k])
	}
	return b.String()
}
