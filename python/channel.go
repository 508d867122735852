package python

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/tempotrain/tempotrain/train"
)

// maxLine bounds one message from the process (a report's metrics).
const maxLine = 4 << 20

// message is what the process sends (PROTOCOL.md).
type message struct {
	Op           string                     `json:"op"`
	ID           *int64                     `json:"id"`
	Pid          int                        `json:"pid"`
	Metrics      map[string]json.RawMessage `json:"metrics"`
	Checkpoint   *string                    `json:"checkpoint"`
	Epoch        int                        `json:"epoch"`
	Step         int                        `json:"step"`
	N            int64                      `json:"n"`
	Type         string                     `json:"type"`
	Message      string                     `json:"message"`
	Traceback    string                     `json:"traceback"`
	NonRetryable bool                       `json:"non_retryable"`
}

// failure is the exception the process reported before it exited.
type failure struct {
	typ, message, traceback string
	nonRetryable            bool
}

// maxTraceLines is how many of a traceback's last lines the rank's error
// (and so Result.Error) carries; the whole traceback is in the rank log.
const maxTraceLines = 12

func (f *failure) err(entry string) error {
	lines := strings.Split(strings.TrimRight(f.traceback, "\n"), "\n")
	if len(lines) > maxTraceLines {
		lines = append([]string{"  ..."}, lines[len(lines)-maxTraceLines:]...)
	}
	for i, l := range lines {
		if len(l) > 300 {
			lines[i] = l[:300] + "..."
		}
	}
	msg := f.message
	if len(msg) > 2000 {
		msg = msg[:2000] + "..."
	}
	err := fmt.Errorf("python %s: %s: %s\n%s", entry, f.typ, msg, strings.Join(lines, "\n"))
	if f.nonRetryable {
		return train.NonRetryable(err)
	}
	return err
}

type chanState struct {
	hello, done bool
	// stopped: should_stop said yes, so a function that then returns was
	// preempted (train.ErrPreempted), not finished.
	stopped bool
	failure *failure
}

// channel serves one process's requests.
type channel struct {
	f   *os.File
	tc  *train.Context
	log *slog.Logger

	wmu sync.Mutex // writes
	mu  sync.Mutex // st
	st  chanState

	reqs chan message
	eof  chan struct{}
}

func newChannel(f *os.File, tc *train.Context, log *slog.Logger) *channel {
	return &channel{f: f, tc: tc, log: log, reqs: make(chan message, 64), eof: make(chan struct{})}
}

func (c *channel) state() chanState {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.st
}

// serve reads messages until the process's end closes. Messages that
// want an answer are handled one at a time, in order, by another
// goroutine: a report that waits for its checkpoint's commit does not
// stop progress from being read meanwhile.
func (c *channel) serve(ctx context.Context) {
	go func() {
		for m := range c.reqs {
			c.handle(ctx, m)
		}
	}()
	defer close(c.eof)
	defer close(c.reqs)
	r := bufio.NewReaderSize(c.f, 64<<10)
	for {
		line, err := readLine(r)
		if err != nil {
			if err.Error() != "EOF" && !strings.Contains(err.Error(), "closed") {
				c.log.Warn("python channel: read failed", "error", err)
			}
			return
		}
		var m message
		if err := json.Unmarshal(line, &m); err != nil {
			c.log.Warn("python channel: a message that is not JSON", "error", err, "line", abbrev(string(line), 200))
			continue
		}
		switch m.Op {
		case "progress":
			c.tc.SetProgress(m.Epoch, m.Step)
		case "samples":
			c.tc.AddSamples(int(m.N))
		case "error":
			c.mu.Lock()
			c.st.failure = &failure{typ: m.Type, message: m.Message, traceback: m.Traceback, nonRetryable: m.NonRetryable}
			c.mu.Unlock()
		case "done":
			c.mu.Lock()
			c.st.done = true
			c.mu.Unlock()
		default:
			if m.ID == nil {
				c.log.Warn("python channel: a message without id", "op", abbrev(m.Op, 50))
				continue
			}
			c.reqs <- m
		}
	}
}

// readLine reads one line of at most maxLine bytes.
func readLine(r *bufio.Reader) ([]byte, error) {
	var buf []byte
	for {
		frag, err := r.ReadSlice('\n')
		buf = append(buf, frag...)
		if len(buf) > maxLine {
			return nil, fmt.Errorf("a message longer than %d bytes", maxLine)
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if err != nil {
			return nil, err
		}
		return buf, nil
	}
}

func (c *channel) handle(ctx context.Context, m message) {
	var out map[string]any
	var err error
	switch m.Op {
	case "hello":
		c.mu.Lock()
		c.st.hello = true
		c.mu.Unlock()
		out = c.hello()
	case "report":
		err = c.report(ctx, m)
	case "should_stop":
		var stop bool
		stop, err = c.tc.ShouldStop(ctx)
		if stop {
			c.mu.Lock()
			c.st.stopped = true
			c.mu.Unlock()
		}
		out = map[string]any{"stop": stop}
	case "checkpoint_dir":
		var dir string
		dir, err = c.tc.NewCheckpointDir()
		out = map[string]any{"path": dir}
	default:
		err = fmt.Errorf("unknown op %q", abbrev(m.Op, 50))
	}
	if out == nil {
		out = map[string]any{}
	}
	out["id"] = *m.ID
	if err != nil {
		out = map[string]any{"id": *m.ID, "ok": false, "error": err.Error()}
	} else {
		out["ok"] = true
	}
	c.write(out)
}

func (c *channel) hello() map[string]any {
	tc := c.tc
	spec := tc.Python()
	cfg := json.RawMessage("null")
	if raw := tc.RawConfig(); len(raw) > 0 {
		cfg = raw
	}
	var ckpt any
	if ck := tc.Checkpoint(); ck != nil && ck.Dir != "" {
		ckpt = ck.Dir
	}
	backend := "gloo"
	if tc.Device() >= 0 {
		backend = "nccl"
	}
	args := spec.Args
	if args == nil {
		args = []string{}
	}
	return map[string]any{
		"entrypoint": spec.Entrypoint,
		"args":       args,
		"config":     cfg,
		"checkpoint": ckpt,
		"context": map[string]any{
			"world_rank": tc.WorldRank(), "world_size": tc.WorldSize(),
			"local_rank": tc.LocalRank(), "local_world_size": tc.LocalWorldSize(),
			"node_rank": tc.NodeRank(), "experiment_name": tc.RunName(),
			"attempt": tc.Attempt(), "device": tc.Device(),
		},
		"backend":     backend,
		"scratch_dir": tc.ScratchDir(),
	}
}

func (c *channel) report(ctx context.Context, m message) error {
	metrics := make(train.Metrics, len(m.Metrics))
	for k, raw := range m.Metrics {
		v, err := metricValue(raw)
		if err != nil {
			return fmt.Errorf("metric %q: %w", k, err)
		}
		metrics[k] = v
	}
	dir := ""
	if m.Checkpoint != nil && *m.Checkpoint != "" {
		dir = *m.Checkpoint
		if !filepath.IsAbs(dir) {
			return fmt.Errorf("checkpoint %q: not an absolute path", dir)
		}
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			return fmt.Errorf("checkpoint %q: not a directory", dir)
		}
	}
	if c.tc.WorldSize() > 1 && c.tc.Comm() != nil {
		return reportShards(ctx, c.tc, metrics, dir)
	}
	var ck *train.Checkpoint
	if dir != "" {
		ck = train.NewCheckpoint(dir)
	}
	return c.tc.Report(metrics, ck)
}

// metricValue is a metric as PROTOCOL.md sends it: a number, or NaN and
// the infinities as strings.
func metricValue(raw json.RawMessage) (float64, error) {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return 0, err
	}
	switch x := v.(type) {
	case float64:
		return x, nil
	case bool:
		if x {
			return 1, nil
		}
		return 0, nil
	case string:
		switch x {
		case "NaN":
			return math.NaN(), nil
		case "Infinity":
			return math.Inf(1), nil
		case "-Infinity":
			return math.Inf(-1), nil
		}
	}
	return 0, fmt.Errorf("%s is not a number", abbrev(string(raw), 50))
}

func (c *channel) write(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		c.log.Error("python channel: answer", "error", err)
		return
	}
	b = append(b, '\n')
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_ = c.f.SetWriteDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.f.Write(b); err != nil {
		c.log.Debug("python channel: write", "error", err)
	}
}

// drain waits up to d for the process's end of the channel to close, so
// that a message written just before exiting is read.
func (c *channel) drain(d time.Duration) {
	select {
	case <-c.eof:
	case <-time.After(d):
	}
}

func (c *channel) close() { c.f.Close() }

func abbrev(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
