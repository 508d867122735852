package storage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// rankLogBackends are the backends a rank log is tested on: each of
// allBackends, and local storage behind a recorder, which hides its append
// so that the log takes the whole-object path S3 takes.
func rankLogBackends(t *testing.T) []backendCase {
	cases := allBackends(t)
	return append(cases, backendCase{"local-whole", func(t *testing.T) Backend {
		return &recorder{Backend: cases[0].new(t)}
	}})
}

func forEachRankLogBackend(t *testing.T, fn func(t *testing.T, b Backend)) {
	t.Parallel()
	for _, bc := range rankLogBackends(t) {
		t.Run(bc.name, func(t *testing.T) {
			t.Parallel()
			fn(t, bc.new(t))
		})
	}
}

// logRecorder is a slog handler that keeps its records.
type logRecorder struct {
	mu   sync.Mutex
	msgs []string
}

func (h *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (h *logRecorder) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	msg := r.Message
	r.Attrs(func(a slog.Attr) bool {
		msg += " " + a.String()
		return true
	})
	h.msgs = append(h.msgs, msg)
	return nil
}
func (h *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *logRecorder) WithGroup(string) slog.Handler      { return h }
func (h *logRecorder) messages() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.msgs...)
}

func readRankLog(t *testing.T, r *Run, attempt, rank int, off int64) string {
	t.Helper()
	data, err := r.ReadRankLog(context.Background(), attempt, rank, off)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func TestRankLogWriteReadList(t *testing.T) {
	forEachRankLogBackend(t, func(t *testing.T, b Backend) {
		ctx := context.Background()
		r := NewRun(b, "demo")
		if _, err := r.ReadRankLog(ctx, 1, 0, 0); !errors.Is(err, ErrNotFound) {
			t.Fatalf("a log never written: %v, want ErrNotFound", err)
		}
		if logs, err := r.ListRankLogs(ctx); err != nil || len(logs) != 0 {
			t.Fatalf("no logs yet: %v %v", logs, err)
		}
		// Two attempts of two ranks, and objects that are not rank logs.
		put(t, b, "demo/logs/attempt-1/notes.txt", []byte("x"))
		put(t, b, "demo/logs/attempt-x/rank-0.log", []byte("x"))
		put(t, b, "demo/logs/attempt-01/rank-0.log", []byte("x"))
		lines := map[[2]int]string{}
		for _, ar := range [][2]int{{1, 0}, {1, 1}, {2, 0}, {10, 1}} {
			l := r.RankLog(ar[0], ar[1], RankLogOptions{})
			text := fmt.Sprintf("attempt %d rank %d line 1\n", ar[0], ar[1])
			if n, err := l.Write([]byte(text)); n != len(text) || err != nil {
				t.Fatalf("Write = %d, %v", n, err)
			}
			if err := l.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			if got := readRankLog(t, r, ar[0], ar[1], 0); got != text {
				t.Fatalf("after Sync %v: %q, want %q", ar, got, text)
			}
			more := "line 2\n"
			l.Write([]byte(more))
			if err := l.Close(ctx); err != nil {
				t.Fatal(err)
			}
			l.Write([]byte("after close\n"))
			lines[ar] = text + more
			if got := readRankLog(t, r, ar[0], ar[1], 0); got != text+more {
				t.Fatalf("after Close %v: %q, want %q", ar, got, text+more)
			}
			if got := readRankLog(t, r, ar[0], ar[1], int64(len(text))); got != more {
				t.Fatalf("from offset %d %v: %q, want %q", len(text), ar, got, more)
			}
			for _, off := range []int64{int64(len(text + more)), 1000} {
				if got := readRankLog(t, r, ar[0], ar[1], off); got != "" {
					t.Fatalf("from offset %d, at or past the end: %q", off, got)
				}
			}
		}
		logs, err := r.ListRankLogs(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, li := range logs {
			got = append(got, fmt.Sprintf("%d/%d/%d", li.Attempt, li.Rank, li.Size))
		}
		want := []string{"1/0/" + fmt.Sprint(len(lines[[2]int{1, 0}])), "1/1/" + fmt.Sprint(len(lines[[2]int{1, 1}])),
			"2/0/" + fmt.Sprint(len(lines[[2]int{2, 0}])), "10/1/" + fmt.Sprint(len(lines[[2]int{10, 1}]))}
		eq(t, "logs", got, want)
		if _, err := r.ReadRankLog(ctx, 1, 0, -1); err == nil || !strings.Contains(err.Error(), "offset -1") {
			t.Fatalf("negative offset: %v", err)
		}
		if want := b.URI("demo/logs/attempt-2/rank-0.log"); r.RankLogURI(2, 0) != want {
			t.Fatalf("RankLogURI %q, want %q", r.RankLogURI(2, 0), want)
		}
	})
}

func TestRankLogCap(t *testing.T) {
	forEachRankLogBackend(t, func(t *testing.T, b Backend) {
		ctx := context.Background()
		r := NewRun(b, "capped")
		l := r.RankLog(3, 2, RankLogOptions{Max: 100})
		var want string
		for i := 0; i < 5; i++ {
			line := fmt.Sprintf("line %d %s\n", i, strings.Repeat("x", 22)) // 30 bytes
			l.Write([]byte(line))
			if i < 3 {
				want += line
			}
		}
		l.Write([]byte("short\n")) // fits, but after the cut: dropped too
		if err := l.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		if got := readRankLog(t, r, 3, 2, 0); got != want {
			t.Fatalf("before Close: %q, want the first 3 lines %q", got, want)
		}
		if err := l.Close(ctx); err != nil {
			t.Fatal(err)
		}
		want += "[tempotrain] this log reached its limit of 100 bytes: 66 bytes after it were dropped\n"
		if got := readRankLog(t, r, 3, 2, 0); got != want {
			t.Fatalf("after Close: %q, want %q", got, want)
		}
	})
}

func TestRankLogDefaultCap(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, err := NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	r := NewRun(b, "big")
	l := r.RankLog(1, 0, RankLogOptions{})
	line := []byte(strings.Repeat("y", 1023) + "\n")
	const lines = DefaultRankLogMax/1024 + 100
	for i := 0; i < lines; i++ {
		l.Write(line)
	}
	if err := l.Close(ctx); err != nil {
		t.Fatal(err)
	}
	got := readRankLog(t, r, 1, 0, 0)
	tail := fmt.Sprintf("[tempotrain] this log reached its limit of %d bytes: %d bytes after it were dropped\n", DefaultRankLogMax, 100*1024)
	if len(got) != DefaultRankLogMax+len(tail) || !strings.HasSuffix(got, tail) {
		t.Fatalf("%d bytes ending %q; want %d + the line %q", len(got), got[max(0, len(got)-120):], DefaultRankLogMax, tail)
	}
}

// TestRankLogFlushesInBackground: what is written reaches storage without
// Sync: local storage appends at once, other backends upload every
// Interval.
func TestRankLogFlushesInBackground(t *testing.T) {
	forEachRankLogBackend(t, func(t *testing.T, b Backend) {
		r := NewRun(b, "bg")
		l := r.RankLog(1, 0, RankLogOptions{Interval: 100 * time.Millisecond})
		defer l.Close(context.Background())
		var want string
		for i := 0; i < 3; i++ {
			line := fmt.Sprintf("line %d\n", i)
			l.Write([]byte(line))
			want += line
			deadline := time.Now().Add(5 * time.Second)
			for {
				data, err := r.ReadRankLog(context.Background(), 1, 0, 0)
				if err == nil && string(data) == want {
					break
				}
				if err != nil && !errors.Is(err, ErrNotFound) {
					t.Fatal(err)
				}
				if time.Now().After(deadline) {
					t.Fatalf("after 5 s without Sync the log holds %q (%v), want %q", data, err, want)
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
	})
}

// TestRankLogStorageErrors: a store that refuses writes costs the writer
// nothing; the error is logged once and counted, and Close returns it.
func TestRankLogStorageErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	local, err := NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{Backend: local}
	var fail sync.Mutex
	failing := true
	rec.failPut = func(key string) error {
		fail.Lock()
		defer fail.Unlock()
		if failing {
			return errors.New("disk on fire")
		}
		return nil
	}
	h := &logRecorder{}
	r := NewRun(rec, "err")
	l := r.RankLog(1, 4, RankLogOptions{Interval: 10 * time.Millisecond, Logger: slog.New(h)})
	for i := 0; i < 10; i++ {
		if n, err := l.Write([]byte("line\n")); n != 5 || err != nil {
			t.Fatalf("Write = %d, %v; want 5, nil whatever storage does", n, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := l.Sync(ctx); err == nil || !strings.Contains(err.Error(), "disk on fire") {
		t.Fatalf("Sync: %v, want the storage error", err)
	}
	if n := l.Errors(); n < 2 {
		t.Fatalf("Errors() = %d, want the failed uploads counted (several)", n)
	}
	msgs := h.messages()
	if len(msgs) != 1 || !strings.Contains(msgs[0], "disk on fire") || !strings.Contains(msgs[0], "rank-4.log") {
		t.Fatalf("worker's log: %q, want one warning naming the error and the log", msgs)
	}
	// The store heals: the log arrives whole at Close, which still says
	// errors happened.
	fail.Lock()
	failing = false
	fail.Unlock()
	err = l.Close(ctx)
	if err == nil || !strings.Contains(err.Error(), "storage errors before the last flush, which worked") {
		t.Fatalf("Close: %v", err)
	}
	if got := readRankLog(t, r, 1, 4, 0); got != strings.Repeat("line\n", 10) {
		t.Fatalf("log after the store healed: %q", got)
	}
	if len(h.messages()) != 1 {
		t.Fatalf("worker's log: %q, want still one warning", h.messages())
	}
}

// hangingPut's Put waits for its context.
type hangingPut struct{ Backend }

func (hangingPut) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	<-ctx.Done()
	return ctx.Err()
}

// TestRankLogCloseIsBounded: Close returns when its context ends, even with
// an upload hanging.
func TestRankLogCloseIsBounded(t *testing.T) {
	t.Parallel()
	local, err := NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	r := NewRun(hangingPut{local}, "hang")
	l := r.RankLog(1, 0, RankLogOptions{Interval: 10 * time.Millisecond, Logger: slog.New(&logRecorder{})})
	l.Write([]byte("line\n"))
	time.Sleep(50 * time.Millisecond) // a background upload is hanging
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = l.Close(ctx)
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("Close took %v with a 200 ms context", took)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Close: %v, want the deadline", err)
	}
}

// TestRankLogConcurrentWrites: lines written from many goroutines all
// arrive, whole.
func TestRankLogConcurrentWrites(t *testing.T) {
	forEachRankLogBackend(t, func(t *testing.T, b Backend) {
		r := NewRun(b, "conc")
		l := r.RankLog(1, 0, RankLogOptions{Interval: 5 * time.Millisecond})
		var wg sync.WaitGroup
		for g := 0; g < 8; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 200; i++ {
					l.Write([]byte(fmt.Sprintf("g%d i%03d\n", g, i)))
				}
			}()
		}
		wg.Wait()
		if err := l.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		got := readRankLog(t, r, 1, 0, 0)
		seen := map[string]bool{}
		for _, line := range strings.Split(strings.TrimSuffix(got, "\n"), "\n") {
			seen[line] = true
		}
		for g := 0; g < 8; g++ {
			for i := 0; i < 200; i++ {
				if !seen[fmt.Sprintf("g%d i%03d", g, i)] {
					t.Fatalf("line g%d i%03d missing from %d bytes", g, i, len(got))
				}
			}
		}
		if len(seen) != 1600 || len(got) != 1600*len("g0 i000\n") {
			t.Fatalf("%d distinct lines, %d bytes", len(seen), len(got))
		}
	})
}

func TestParseRankLogPath(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		p             string
		attempt, rank int
		ok            bool
	}{
		{"logs/attempt-1/rank-0.log", 1, 0, true},
		{"logs/attempt-12/rank-345.log", 12, 345, true},
		{"logs/attempt-01/rank-0.log", 0, 0, false},
		{"logs/attempt-1/rank-00.log", 0, 0, false},
		{"logs/attempt-1/rank--1.log", 0, 0, false},
		{"logs/attempt-+1/rank-1.log", 0, 0, false},
		{"logs/attempt-1/rank-1.txt", 0, 0, false},
		{"logs/attempt-1/rank-1.log/x", 0, 0, false},
		{"logs/attempt-1", 0, 0, false},
		{"log/attempt-1/rank-1.log", 0, 0, false},
	} {
		a, r, ok := parseRankLogPath(tc.p)
		if a != tc.attempt || r != tc.rank || ok != tc.ok {
			t.Errorf("parseRankLogPath(%q) = %d, %d, %v; want %d, %d, %v", tc.p, a, r, ok, tc.attempt, tc.rank, tc.ok)
		}
		if tc.ok && RankLogPath(a, r) != tc.p {
			t.Errorf("RankLogPath(%d, %d) = %q, want %q", a, r, RankLogPath(a, r), tc.p)
		}
	}
}

// TestRankLogLocalIsAppended: on local storage a rank log is appended to,
// never replaced.
func TestRankLogLocalIsAppended(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, err := NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	r := NewRun(b, "app")
	// Two writers of the same log, one after the other (a rank log is
	// appended to, never replaced, on local storage).
	for i := 0; i < 2; i++ {
		l := r.RankLog(1, 0, RankLogOptions{})
		l.Write([]byte(fmt.Sprintf("writer %d\n", i)))
		if err := l.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := readRankLog(t, r, 1, 0, 0); got != "writer 0\nwriter 1\n" {
		t.Fatalf("%q", got)
	}
	if !bytes.Contains([]byte(r.RankLogURI(1, 0)), []byte("/app/logs/attempt-1/rank-0.log")) {
		t.Fatalf("URI %s", r.RankLogURI(1, 0))
	}
}

// TestRankLogRefusesLink: local storage appends into real directories below
// its root only.
func TestRankLogRefusesLink(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	root, elsewhere := t.TempDir(), t.TempDir()
	b, err := NewLocal(root)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "run"), 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(elsewhere, filepath.Join(root, "run", "logs")); err != nil {
		t.Fatal(err)
	}
	l := NewRun(b, "run").RankLog(1, 0, RankLogOptions{Logger: slog.New(&logRecorder{})})
	l.Write([]byte("line\n"))
	err = l.Close(ctx)
	if !errors.Is(err, ErrMisconfigured) || !strings.Contains(err.Error(), "symbolic link") {
		t.Fatalf("Close: %v, want the link refused", err)
	}
	if entries, _ := os.ReadDir(elsewhere); len(entries) != 0 {
		t.Fatalf("wrote through the link: %v", entries)
	}
}

// TestRankLogUploadCadence: on a backend without append the first lines go
// up at once, then at most one upload per Interval however many lines come.
func TestRankLogUploadCadence(t *testing.T) {
	t.Parallel()
	local, err := NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{Backend: local}
	r := NewRun(rec, "cadence")
	const interval = 400 * time.Millisecond
	l := r.RankLog(1, 0, RankLogOptions{Interval: interval})
	defer l.Close(context.Background())
	start := time.Now()
	l.Write([]byte("first\n"))
	for {
		if data, err := r.ReadRankLog(context.Background(), 1, 0, 0); err == nil && string(data) == "first\n" {
			break
		}
		if time.Since(start) > interval/2 {
			t.Fatalf("the first line was not up within %v", interval/2)
		}
		time.Sleep(5 * time.Millisecond)
	}
	for time.Since(start) < 5*interval/2 {
		l.Write([]byte("more\n"))
		time.Sleep(10 * time.Millisecond)
	}
	puts := 0
	for _, e := range rec.events() {
		if e == "put cadence/logs/attempt-1/rank-0.log" {
			puts++
		}
	}
	// At 0, and at most at 1, 2 intervals (and a tick late).
	if puts < 2 || puts > 3 {
		t.Fatalf("%d uploads in %v with a line every 10 ms, want 2 or 3 (one per %v)", puts, time.Since(start), interval)
	}
}

// FuzzRankLogPath: a path parseRankLogPath accepts is the one RankLogPath
// writes for what it parsed, so ListRankLogs names each log once.
func FuzzRankLogPath(f *testing.F) {
	for _, s := range []string{"logs/attempt-1/rank-0.log", "logs/attempt-01/rank-0.log", "logs/attempt-1/rank-+1.log", "logs/attempt-99999999999999999999/rank-0.log"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		a, r, ok := parseRankLogPath(p)
		if ok && (a < 0 || r < 0 || RankLogPath(a, r) != p) {
			t.Fatalf("parseRankLogPath(%q) = %d, %d: RankLogPath gives %q", p, a, r, RankLogPath(a, r))
		}
	})
}
