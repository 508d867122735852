package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tempotrain/tempotrain/storage/miniotest"
	"github.com/tempotrain/tempotrain/train"
)

// logsFn logs a line naming its attempt and rank; with config.fail every
// rank of attempt 1 fails after it, and config.sleep_ms makes it wait
// before a second line.
func logsFn(ctx context.Context, tc *train.Context) error {
	var cfg struct {
		Fail    bool `json:"fail"`
		SleepMS int  `json:"sleep_ms"`
	}
	if err := tc.Config(&cfg); err != nil {
		return err
	}
	tc.Logger().Info("hello", "from_attempt", tc.Attempt(), "from_rank", tc.WorldRank())
	if cfg.SleepMS > 0 {
		select {
		case <-time.After(time.Duration(cfg.SleepMS) * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
		tc.Logger().Info("after the sleep")
	}
	if cfg.Fail && tc.Attempt() == 1 {
		return errors.New("injected failure in attempt 1")
	}
	return nil
}

func init() { train.MustRegister("logs-hello", logsFn) }

// TestLogs runs real Fits on a dev server and reads what their ranks
// logged with `starter logs`: the latest attempt's every rank, merged by
// time; one rank of an earlier attempt, its storage found through the
// workflow; clear errors for what is not there; and -f, which follows a
// running run until its workflow closes.
func TestLogs(t *testing.T) {
	addr, cl := startScheduleEnv(t)
	t.Setenv("TEMPOTRAIN_STORAGE", "")
	store := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := func(name string, workers int, config string) *train.Run {
		t.Helper()
		in := train.FitInput{TrainFunc: "logs-hello", Config: json.RawMessage(config)}
		in.Scaling.NumWorkers, in.Scaling.TaskQueue = workers, scheduleEnv.rq
		in.Run.Name, in.Run.StoragePath, in.Run.Failure.MaxFailures = name, store, 1
		run, err := train.NewTrainerFromInput(cl, in, train.WithTaskQueue(scheduleEnv.tq)).Start(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return run
	}
	starter := func(args ...string) (string, error) {
		t.Helper()
		var out, errOut bytes.Buffer
		err := logs(ctx, args, &out, &errOut)
		if errOut.Len() > 0 {
			t.Logf("logs %v: stderr:\n%s", args, errOut.String())
		}
		return out.String(), err
	}

	run := start("logged", 2, `{"fail":true}`)
	res, err := run.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Attempts != 2 {
		t.Fatalf("%d attempts, want 2 (attempt 1 fails)", res.Attempts)
	}

	t.Run("latest attempt, every rank", func(t *testing.T) {
		out, err := starter("-name", "logged", "-storage", store)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("starter logs:\n%s", out)
		for _, want := range []string{
			"[rank 0] time=", `level=INFO msg="rank started" world_size=2`,
			"level=INFO msg=hello from_attempt=2 from_rank=0\n", "level=INFO msg=hello from_attempt=2 from_rank=1\n",
			"[rank 1] time=", `msg="rank ended" reports=0`,
		} {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q", want)
			}
		}
		if strings.Contains(out, "from_attempt=1") {
			t.Errorf("output holds attempt 1's lines")
		}
		var last time.Time
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			_, rest, ok := strings.Cut(line, "] ")
			if !strings.HasPrefix(line, "[rank ") || !ok {
				t.Fatalf("line %q has no [rank r] prefix", line)
			}
			ts, ok := lineTime(rest)
			if !ok {
				t.Fatalf("line %q has no time", line)
			}
			if ts.Before(last) {
				t.Errorf("line %q comes before %s: lines are not merged by time", line, last)
			}
			last = ts
		}
	})

	t.Run("one rank of attempt 1, storage from the workflow", func(t *testing.T) {
		out, err := starter("-name", "logged", "-address", addr, "-attempt", "1", "-rank", "1")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out, "level=INFO msg=hello from_attempt=1 from_rank=1\n") ||
			!strings.Contains(out, `level=ERROR msg="rank ended" error="injected failure in attempt 1" kind=TrainFuncError`) {
			t.Errorf("output:\n%s\nwants rank 1's hello of attempt 1 and its error", out)
		}
		if strings.Contains(out, "[rank") || strings.Contains(out, "from_rank=0") {
			t.Errorf("output:\n%s\nwants rank 1's lines alone, unprefixed", out)
		}
	})

	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no such attempt", []string{"-name", "logged", "-storage", store, "-attempt", "7"},
			`logs: run "logged" has no logs of attempt 7: attempts with logs: 1, 2`},
		{"no such rank", []string{"-name", "logged", "-storage", store, "-rank", "5"},
			`logs: run "logged", attempt 2 has no log of rank 5: ranks with logs: 0, 1`},
		{"no logs", []string{"-name", "nosuch", "-storage", store},
			`logs: run "nosuch" in ` + store + ` has no logs`},
		{"no storage, no workflow", []string{"-name", "nosuch", "-address", addr},
			`logs: run "nosuch": no -storage given (nor TEMPOTRAIN_STORAGE), and its workflow cannot say where it stores: workflow fit-nosuch not found`},
		{"no run", []string{"-storage", store}, "logs: give -name (or -workflow-id)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := starter(tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q (output %q)", err, tc.want, out)
			}
		})
	}

	t.Run("follow", func(t *testing.T) {
		defer func(d time.Duration) { followEvery = d }(followEvery)
		followEvery = 100 * time.Millisecond
		// Attempt 1 fails after its sleep; -f goes on to attempt 2.
		run := start("followed", 1, `{"sleep_ms":1500,"fail":true}`)
		began := time.Now()
		out, err := starter("-name", "followed", "-address", addr, "-f")
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("starter logs -f (%.1fs):\n%s", time.Since(began).Seconds(), out)
		if desc, err := cl.DescribeWorkflowExecution(ctx, run.WorkflowID, ""); err != nil || desc.GetWorkflowExecutionInfo().GetCloseTime() == nil {
			t.Fatalf("logs -f returned before the workflow closed (%v)", err)
		}
		at := 0
		for _, want := range []string{
			"msg=hello from_attempt=1 from_rank=0\n", `msg="after the sleep"`, `msg="rank ended" error="injected failure in attempt 1"`,
			"--- attempt 2 ---\n",
			"msg=hello from_attempt=2 from_rank=0\n", `msg="after the sleep"`, `msg="rank ended" reports=0`,
		} {
			i := strings.Index(out[at:], want)
			if i < 0 {
				t.Fatalf("output lacks %q after byte %d", want, at)
			}
			at += i + len(want)
		}
		if strings.Count(out, "msg=hello") != 2 {
			t.Errorf("a line printed twice, or missing")
		}
	})
}

func TestMergeByTime(t *testing.T) {
	t.Parallel()
	a := []string{
		"time=2026-01-01T00:00:01Z level=INFO msg=a1",
		"no time: stays after a1",
		"time=2026-01-01T00:00:04Z level=INFO msg=a4",
	}
	b := []string{
		"time=2026-01-01T00:00:00.5Z level=INFO msg=b0",
		"time=2026-01-01T00:00:02Z level=INFO msg=b2",
		"time=2026-01-01T00:00:01.5Z level=INFO msg=b1.5 (a clock step back: kept after b2)",
	}
	var got []string
	for _, m := range mergeByTime([][]string{a, b}) {
		got = append(got, [][]string{a, b}[m.batch][m.line])
	}
	want := []string{b[0], a[0], a[1], b[1], b[2], a[2]}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("merged:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// timedWriter notes when each line was written.
type timedWriter struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	lines []timedLine
}

type timedLine struct {
	at   time.Time
	text string
}

func (w *timedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, l := range strings.SplitAfter(string(p), "\n") {
		if l != "" {
			w.lines = append(w.lines, timedLine{time.Now(), l})
		}
	}
	return w.buf.Write(p)
}

// writtenAt is when the first line holding s was written.
func (w *timedWriter) writtenAt(s string) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, l := range w.lines {
		if strings.Contains(l.text, s) {
			return l.at, true
		}
	}
	return time.Time{}, false
}

// TestLogsS3: on S3 a rank's log is uploaded whole every 5 s while the
// rank runs, and at its end: `logs -f` shows a line of a rank that then
// sleeps 7 s well before the rank ends, and `logs` reads every rank.
func TestLogsS3(t *testing.T) {
	srv := miniotest.Start(t)
	bucket := srv.CreateBucket(t, "")
	srv.SetEnv(t)
	t.Setenv("TEMPOTRAIN_STORAGE", "")
	addr, cl := startScheduleEnv(t)
	store := "s3://" + bucket + "/runs"
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	defer func(d time.Duration) { followEvery = d }(followEvery)
	followEvery = 200 * time.Millisecond

	in := train.FitInput{TrainFunc: "logs-hello", Config: json.RawMessage(`{"sleep_ms":7000}`)}
	in.Scaling.NumWorkers, in.Scaling.TaskQueue = 2, scheduleEnv.rq
	in.Run.Name, in.Run.StoragePath = "on-s3", store
	run, err := train.NewTrainerFromInput(cl, in, train.WithTaskQueue(scheduleEnv.tq)).Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out timedWriter
	var errOut bytes.Buffer
	if err := logs(ctx, []string{"-name", "on-s3", "-address", addr, "-f"}, &out, &errOut); err != nil {
		t.Fatalf("logs -f: %v\n%s", err, errOut.String())
	}
	if _, err := run.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("starter logs -f:\n%s", out.buf.String())
	for r := range 2 {
		hello, ok1 := out.writtenAt(fmt.Sprintf("[rank %d] ", r))
		ended, ok2 := out.writtenAt(`msg="rank ended" reports=0`)
		if !ok1 || !ok2 {
			t.Fatalf("logs -f printed no line of rank %d, or no end", r)
		}
		if gap := ended.Sub(hello); gap < 2*time.Second {
			t.Errorf("rank %d's first line came %v before the end: want it uploaded while the rank slept 7 s", r, gap)
		}
	}
	if n := strings.Count(out.buf.String(), "msg=hello"); n != 2 {
		t.Errorf("%d hello lines, want one per rank", n)
	}

	var all bytes.Buffer
	if err := logs(ctx, []string{"-name", "on-s3", "-storage", store, "-rank", "1"}, &all, &errOut); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"msg=hello from_attempt=1 from_rank=1\n", `msg="after the sleep"`, `msg="rank ended" reports=0`} {
		if !strings.Contains(all.String(), want) {
			t.Errorf("logs -rank 1 on S3:\n%s\nlacks %q", all.String(), want)
		}
	}
}
