package main

import (
	"context"
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

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/app"
	"github.com/tempotrain/tempotrain/train"
)

// conn holds the flags that reach a Temporal server.
type conn struct{ address, namespace string }

func (c *conn) flags(fs *flag.FlagSet) {
	fs.StringVar(&c.address, "address", envOr("TEMPORAL_ADDRESS", "localhost:7233"), "Temporal frontend host:port (env TEMPORAL_ADDRESS)")
	fs.StringVar(&c.namespace, "namespace", envOr("TEMPORAL_NAMESPACE", "default"), "Temporal namespace (env TEMPORAL_NAMESPACE)")
}

func (c *conn) dial() (client.Client, error) {
	opts, err := app.ClientOptions(client.Options{HostPort: c.address, Namespace: c.namespace, Logger: quietLogger()}, telemetry)
	if err != nil {
		return nil, err
	}
	cl, err := client.Dial(opts)
	if err != nil {
		return nil, fmt.Errorf("dial Temporal at %s: %w", c.address, err)
	}
	return cl, nil
}

func quietLogger() log.Logger {
	return log.NewStructuredLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// inputFlags builds a FitInput from a JSON file and/or flags (flags win).
type inputFlags struct {
	file, fn, config, storage, name, scoreAttr, scoreOrder, rankQueue string
	workers, maxFailures, numToKeep                                   int
	gpu                                                               bool
	heartbeat                                                         time.Duration
}

func (f *inputFlags) register(fs *flag.FlagSet, defStorage string) {
	fs.StringVar(&f.file, "input", "", "JSON file holding a FitInput (the flags below override its fields)")
	fs.StringVar(&f.fn, "func", "", "registered training function (train_func)")
	fs.StringVar(&f.config, "config", "", "JSON config handed to every rank")
	fs.IntVar(&f.workers, "workers", 0, "number of ranks (scaling.num_workers)")
	fs.BoolVar(&f.gpu, "gpu", false, "run ranks on the GPU task queue (scaling.use_gpu)")
	fs.StringVar(&f.rankQueue, "rank-queue", "", "task queue of the ranks (scaling.task_queue)")
	fs.StringVar(&f.storage, "storage", defStorage, `storage path: a directory or "s3://bucket/prefix" (run.storage_path)`)
	fs.StringVar(&f.name, "name", "", "run name (run.name); an existing run resumes")
	fs.IntVar(&f.maxFailures, "max-failures", -2, "restarts allowed, -1 unlimited (run.failure.max_failures; default 0)")
	fs.DurationVar(&f.heartbeat, "heartbeat-timeout", 0, "rank heartbeat timeout (run.failure.heartbeat_timeout; default 60s)")
	fs.IntVar(&f.numToKeep, "num-to-keep", 0, "checkpoints kept, 0 all (run.checkpoint.num_to_keep)")
	fs.StringVar(&f.scoreAttr, "score-attr", "", "metric that ranks checkpoints (run.checkpoint.score_attribute)")
	fs.StringVar(&f.scoreOrder, "score-order", "", "max or min (run.checkpoint.score_order)")
}

func (f *inputFlags) build() (train.FitInput, error) {
	var in train.FitInput
	if f.file != "" {
		b, err := os.ReadFile(f.file)
		if err != nil {
			return in, err
		}
		dec := json.NewDecoder(strings.NewReader(string(b)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&in); err != nil {
			return in, fmt.Errorf("-input %s: %w", f.file, err)
		}
	}
	set := func(cond bool, apply func()) {
		if cond {
			apply()
		}
	}
	set(f.fn != "", func() { in.TrainFunc = f.fn })
	set(f.config != "", func() { in.Config = json.RawMessage(f.config) })
	set(f.workers != 0, func() { in.Scaling.NumWorkers = f.workers })
	set(f.gpu, func() { in.Scaling.UseGPU = true })
	set(f.rankQueue != "", func() { in.Scaling.TaskQueue = f.rankQueue })
	set(f.storage != "" && (f.file == "" || in.Run.StoragePath == ""), func() { in.Run.StoragePath = f.storage })
	set(f.name != "", func() { in.Run.Name = f.name })
	set(f.maxFailures != -2, func() { in.Run.Failure.MaxFailures = f.maxFailures })
	set(f.heartbeat != 0, func() { in.Run.Failure.HeartbeatTimeout = train.Duration(f.heartbeat) })
	set(f.numToKeep != 0, func() { in.Run.Checkpoint.NumToKeep = f.numToKeep })
	set(f.scoreAttr != "", func() { in.Run.Checkpoint.ScoreAttribute = f.scoreAttr })
	set(f.scoreOrder != "", func() { in.Run.Checkpoint.ScoreOrder = f.scoreOrder })
	if len(in.Config) > 0 && !json.Valid(in.Config) {
		return in, fmt.Errorf("-config %s: not valid JSON", in.Config)
	}
	return in, nil
}

func printJSON(v any) {
	b, _ := json.MarshalIndent(v, "", "  ")
	fmt.Println(string(b))
}

// watcher prints a run's reports as they arrive and its ranks' progress.
type watcher struct {
	c          client.Client
	workflowID string
	start      time.Time
	printed    int
	firstStep  time.Duration
}

// poll prints what is new; it returns false once the workflow is gone.
func (w *watcher) poll(ctx context.Context) {
	v, err := w.c.QueryWorkflow(ctx, w.workflowID, "", api.QueryStatus)
	if err == nil {
		var st api.Status
		if v.Get(&st) == nil {
			for _, r := range st.Recent {
				if r.Index < w.printed {
					continue
				}
				w.printed = r.Index + 1
				fmt.Printf("[%6.1fs] attempt %d report %d: %s%s\n", time.Since(w.start).Seconds(), r.Attempt, r.Index, fmtMetrics(r.Metrics), ckptNote(r.Checkpoint))
			}
		}
	}
	if w.firstStep == 0 {
		desc, err := w.c.DescribeWorkflowExecution(ctx, w.workflowID, "")
		if err != nil {
			return
		}
		for _, pa := range desc.GetPendingActivities() {
			if pa.GetActivityType().GetName() != api.ActivityRunRank || pa.GetHeartbeatDetails() == nil {
				continue
			}
			var p api.Progress
			if err := decodeFirst(pa.GetHeartbeatDetails().GetPayloads()[0].GetData(), &p); err == nil && p.Step >= 0 {
				w.firstStep = time.Since(w.start)
				fmt.Printf("[%6.1fs] first training step reported by a rank heartbeat\n", w.firstStep.Seconds())
				return
			}
		}
	}
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

// waitAndWatch waits for a run's Result, printing its progress meanwhile.
func waitAndWatch(ctx context.Context, c client.Client, run *train.Run) (*train.Result, error) {
	w := &watcher{c: c, workflowID: run.WorkflowID, start: time.Now()}
	done := make(chan struct{})
	var res *train.Result
	var err error
	go func() {
		defer close(done)
		res, err = run.Wait(ctx)
	}()
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-done:
			w.poll(context.Background())
			return res, err
		case <-t.C:
			w.poll(ctx)
		}
	}
}
