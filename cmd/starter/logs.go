package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/dashboard"
	"github.com/tempotrain/tempotrain/storage"
	"github.com/tempotrain/tempotrain/train"
)

// followEvery is how often `logs -f` looks for new lines.
var followEvery = time.Second

// devStorage is where `starter dev` keeps its runs by default (its -home,
// then runs/).
const devStorage = ".tempotrain/runs"

// runLogs prints what a run's ranks logged, from the rank logs in its
// storage ({run}/logs/attempt-{n}/rank-{r}.log): the latest attempt, every
// rank, lines merged by time and each prefixed "[rank r]"; or one rank, one
// attempt. -f follows until the run's workflow closes.
func runLogs(args []string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return logs(ctx, args, os.Stdout, os.Stderr)
}

func logs(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("logs", flag.ExitOnError)
	var c conn
	c.flags(fs)
	name := fs.String("name", "", "run name (its workflow is fit-<name>)")
	wfID := fs.String("workflow-id", "", "workflow ID of a Fit started another way (CLI, UI, Schedule)")
	store := fs.String("storage", os.Getenv("TEMPOTRAIN_STORAGE"), `storage path of the run: a directory or "s3://bucket/prefix" (env TEMPOTRAIN_STORAGE; default: the one the run's workflow was given, else `+devStorage+` when the run is there)`)
	rank := fs.Int("rank", -1, "only this rank, without the [rank r] prefix (default: every rank)")
	attempt := fs.Int("attempt", 0, "this attempt (default: the latest that has logs)")
	follow := fs.Bool("f", false, "follow: print new lines as they come, until the run's workflow closes or Ctrl-C")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: starter logs -name RUN [-rank R] [-attempt N] [-f] [-storage PATH]\n\nPrints what a run's ranks logged, from its storage.\n\n")
		fs.PrintDefaults()
	}
	_ = fs.Parse(args)
	if fs.NArg() > 0 {
		return fmt.Errorf("logs: unexpected argument %q (boolean flags take their value with '=': -f=false)", fs.Arg(0))
	}
	if *name == "" && *wfID == "" {
		return errors.New("logs: give -name (or -workflow-id)")
	}
	if *attempt < 0 {
		return fmt.Errorf("logs: -attempt %d: attempts count from 1", *attempt)
	}
	id := *wfID
	if id == "" {
		id = train.WorkflowID(*name)
	}

	// The workflow, when it is needed: for the storage path or the run's
	// name it was given, and to know when to stop following.
	var (
		cl client.Client
		dc converter.DataConverter
	)
	dial := func() error {
		if cl != nil {
			return nil
		}
		o, err := c.connection().ClientOptions(telemetry)
		if err != nil {
			return err
		}
		if cl, err = client.Dial(o); err != nil {
			return fmt.Errorf("dial Temporal at %s (namespace %s): %w", o.HostPort, o.Namespace, err)
		}
		dc = o.DataConverter
		if dc == nil {
			dc = converter.GetDefaultDataConverter()
		}
		return nil
	}
	defer func() {
		if cl != nil {
			cl.Close()
		}
	}()
	if *store == "" || *name == "" {
		var in api.FitInput
		err := dial()
		if err == nil {
			in, err = dashboard.FitInputOf(ctx, cl, dc, id)
		}
		switch {
		case err == nil:
			if *store == "" {
				*store = in.Run.StoragePath
			}
			if *name == "" {
				// Fit names a run without a name after its workflow.
				if *name = in.Run.Name; *name == "" {
					*name = id
				}
			}
		case *name != "" && devRunExists(*name):
			*store, _ = filepath.Abs(devStorage)
		case *store == "":
			return fmt.Errorf("logs: run %q: no -storage given (nor TEMPOTRAIN_STORAGE), and its workflow cannot say where it stores: %w", *name, err)
		default:
			return fmt.Errorf("logs: the run of workflow %s: %w", id, err)
		}
	}
	b, err := storage.Open(ctx, *store)
	if err != nil {
		return fmt.Errorf("logs: %w", err)
	}
	lf := &logFollower{run: storage.NewRun(b, *name), name: *name, store: *store, w: stdout, rank: *rank, attempt: *attempt}
	if !*follow {
		return lf.once(ctx)
	}
	if err := dial(); err != nil {
		return fmt.Errorf("logs -f: %w", err)
	}
	closed := func() (bool, error) {
		desc, err := cl.DescribeWorkflowExecution(ctx, id, "")
		if err != nil {
			return false, fmt.Errorf("logs -f: workflow %s: %w", id, err)
		}
		return desc.GetWorkflowExecutionInfo().GetStatus() != enums.WORKFLOW_EXECUTION_STATUS_RUNNING, nil
	}
	return lf.follow(ctx, closed, stderr)
}

func devRunExists(name string) bool {
	st, err := os.Stat(filepath.Join(devStorage, name))
	return err == nil && st.IsDir()
}

// logFollower prints a run's rank logs.
type logFollower struct {
	run         *storage.Run
	name, store string
	w           io.Writer
	// rank, attempt: what was asked (-1, 0: every rank, the latest).
	rank, attempt int

	// cur is the attempt being printed; off, how far each of its ranks'
	// logs was printed (whole lines).
	cur int
	off map[int]int64
}

// pick chooses the attempt and ranks to print from the logs there are, or
// says why there is nothing to print.
func (f *logFollower) pick(logs []storage.RankLogInfo) (attempt int, ranks []int, err error) {
	if len(logs) == 0 {
		return 0, nil, fmt.Errorf("logs: run %q in %s has no logs: no rank of it has logged (yet), or the run is not in this storage", f.name, f.store)
	}
	var attempts []int
	for _, l := range logs {
		if len(attempts) == 0 || attempts[len(attempts)-1] != l.Attempt {
			attempts = append(attempts, l.Attempt)
		}
	}
	attempt = attempts[len(attempts)-1]
	if f.attempt > 0 {
		if !slices.Contains(attempts, f.attempt) {
			return 0, nil, fmt.Errorf("logs: run %q has no logs of attempt %d: attempts with logs: %s", f.name, f.attempt, joinInts(attempts))
		}
		attempt = f.attempt
	}
	for _, l := range logs {
		if l.Attempt == attempt {
			ranks = append(ranks, l.Rank)
		}
	}
	if f.rank >= 0 {
		if !slices.Contains(ranks, f.rank) {
			return 0, nil, fmt.Errorf("logs: run %q, attempt %d has no log of rank %d: ranks with logs: %s", f.name, attempt, f.rank, joinInts(ranks))
		}
		ranks = []int{f.rank}
	}
	return attempt, ranks, nil
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ", ")
}

// once prints the chosen logs as they are.
func (f *logFollower) once(ctx context.Context) error {
	logs, err := f.run.ListRankLogs(ctx)
	if err != nil {
		return fmt.Errorf("logs: %w", err)
	}
	attempt, ranks, err := f.pick(logs)
	if err != nil {
		return err
	}
	f.switchTo(attempt)
	return f.poll(ctx, ranks, true)
}

// follow prints the chosen logs and what comes after, every followEvery,
// until closed says the workflow closed (then once more, for the last
// lines) or ctx ends. Without -attempt it moves on to each new attempt.
func (f *logFollower) follow(ctx context.Context, closed func() (bool, error), stderr io.Writer) error {
	waiting := false
	var ranks []int
	for {
		done, err := closed()
		if err != nil {
			return err
		}
		logs, err := f.run.ListRankLogs(ctx)
		if err != nil {
			return fmt.Errorf("logs: %w", err)
		}
		attempt, rs, perr := f.pick(logs)
		switch {
		case perr != nil && done && f.cur == 0:
			return perr
		case perr != nil && f.cur == 0:
			if !waiting {
				fmt.Fprintf(stderr, "%v; waiting\n", perr)
				waiting = true
			}
		case perr == nil && attempt != f.cur:
			if f.cur != 0 {
				// The last lines of the attempt that ended.
				if err := f.poll(ctx, ranks, true); err != nil {
					return err
				}
				fmt.Fprintf(f.w, "--- attempt %d ---\n", attempt)
			}
			f.switchTo(attempt)
			ranks = rs
		case perr == nil:
			ranks = rs
		}
		if f.cur != 0 {
			if err := f.poll(ctx, ranks, done); err != nil {
				return err
			}
		}
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(followEvery):
		}
	}
}

func (f *logFollower) switchTo(attempt int) {
	f.cur, f.off = attempt, map[int]int64{}
}

// poll prints the new whole lines of ranks' logs of the current attempt
// (and a last line without its newline when final), merged by time.
func (f *logFollower) poll(ctx context.Context, ranks []int, final bool) error {
	batches := make([][]string, len(ranks))
	for i, r := range ranks {
		data, err := f.run.ReadRankLog(ctx, f.cur, r, f.off[r])
		if errors.Is(err, storage.ErrNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("logs: %w", err)
		}
		whole := data
		if !final {
			whole = data[:bytes.LastIndexByte(data, '\n')+1]
		}
		f.off[r] += int64(len(whole))
		if len(whole) > 0 {
			batches[i] = strings.Split(strings.TrimSuffix(string(whole), "\n"), "\n")
		}
	}
	prefix := f.rank < 0
	for _, m := range mergeByTime(batches) {
		line := batches[m.batch][m.line]
		if prefix {
			line = fmt.Sprintf("[rank %d] %s", ranks[m.batch], line)
		}
		if _, err := fmt.Fprintln(f.w, line); err != nil {
			return err
		}
	}
	return nil
}

type lineRef struct{ batch, line int }

// mergeByTime orders the lines of several logs by their time= field,
// keeping each log's own order: a line without one takes the time of the
// line before it.
func mergeByTime(batches [][]string) []lineRef {
	times := make([][]time.Time, len(batches))
	total := 0
	for b, lines := range batches {
		var last time.Time
		for _, l := range lines {
			if t, ok := lineTime(l); ok {
				last = t
			}
			times[b] = append(times[b], last)
		}
		total += len(lines)
	}
	out := make([]lineRef, 0, total)
	next := make([]int, len(batches))
	for len(out) < total {
		pick := -1
		for b := range batches {
			if next[b] < len(batches[b]) && (pick < 0 || times[b][next[b]].Before(times[pick][next[pick]])) {
				pick = b
			}
		}
		out = append(out, lineRef{pick, next[pick]})
		next[pick]++
	}
	return out
}

// lineTime reads the time a slog text line starts with.
func lineTime(line string) (time.Time, bool) {
	v, ok := strings.CutPrefix(line, "time=")
	if !ok {
		return time.Time{}, false
	}
	if i := strings.IndexByte(v, ' '); i >= 0 {
		v = v[:i]
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	return t, err == nil
}
