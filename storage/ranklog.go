package storage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// A rank's log, {run}/logs/attempt-{n}/rank-{r}.log, holds the text lines
// the rank logged in that attempt. It is written by one RankLog:
//
//   - on local storage, appended to the file as lines come (a background
//     goroutine writes what Write buffered, at once), fsynced on Sync and
//     Close;
//   - on other backends (S3 cannot append), kept whole in memory and
//     uploaded whole when it changed, at most once per Interval (the first
//     lines at once), and at Sync and Close.
//
// Either way the log keeps the first Max bytes a RankLog is given, in whole
// writes (a write that would cross Max is dropped with everything after
// it), and Close ends a log that dropped bytes with one line saying how
// many. The object only ever grows, so a reader that remembers how far it
// read (ReadRankLog's offset) reads each byte once.
//
// Write never fails and never waits on storage: it copies into memory. A
// storage error is counted, logged once to RankLogOptions.Logger, retried
// at the next flush, and returned by Sync and Close only.

const (
	// DefaultRankLogMax bounds one rank's log of one attempt.
	DefaultRankLogMax = 16 << 20
	// DefaultRankLogInterval is how often a changed log is uploaded to a
	// backend that cannot append (S3), and how often local storage retries
	// an append that failed.
	DefaultRankLogInterval = 5 * time.Second
	// rankLogFlushTimeout bounds one background flush.
	rankLogFlushTimeout = 30 * time.Second
	// maxRankLogRead bounds what ReadRankLog returns.
	maxRankLogRead = maxSmallObject
)

// RankLogOptions configure a RankLog. Every field documents its default.
type RankLogOptions struct {
	// Max bounds the bytes the log keeps (the final line saying how many
	// were dropped comes on top). Default DefaultRankLogMax.
	Max int64
	// Interval is how often, at most, a changed log is uploaded whole to a
	// backend that cannot append. Default DefaultRankLogInterval.
	Interval time.Duration
	// Logger hears the first storage error, once. It must not write into
	// this log. Default slog.Default().
	Logger *slog.Logger
}

// appender is implemented by backends that append to an object in place
// (local files).
type appender interface {
	openAppend(key string) (*os.File, error)
}

// fromGetter is implemented by backends that read an object from an offset
// without reading what comes before it (S3's ranged GET).
type fromGetter interface {
	getFrom(ctx context.Context, key string, off int64) (io.ReadCloser, error)
}

// RankLog writes one rank's log of one attempt. Its methods are safe for
// concurrent use.
type RankLog struct {
	run      *Run
	key      string
	max      int64
	interval time.Duration
	log      *slog.Logger
	app      appender // nil: whole-object uploads

	mu      sync.Mutex
	kept    int64  // bytes accepted, at most max
	dropped int64  // bytes refused over max
	data    []byte // whole-object: every byte accepted; append: those not written yet
	dirty   bool   // whole-object: changed since the last upload
	closed  bool

	// ioMu serialises flushes (the background one, Sync, Close), so that an
	// older snapshot never overwrites a newer one. It guards f and
	// lastUpload.
	ioMu       sync.Mutex
	f          *os.File  // append: the open file
	lastUpload time.Time // whole-object: the last upload's start

	kick     chan struct{}
	stop     chan struct{}
	done     chan struct{}
	bg       context.Context
	bgCancel context.CancelFunc

	errs   atomic.Int64
	warned atomic.Bool
}

// RankLog starts the log of rank in attempt: a goroutine flushes it until
// Close, which the writer must call when the rank ends.
func (r *Run) RankLog(attempt, rank int, o RankLogOptions) *RankLog {
	if o.Max <= 0 {
		o.Max = DefaultRankLogMax
	}
	if o.Interval <= 0 {
		o.Interval = DefaultRankLogInterval
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	l := &RankLog{
		run: r, key: r.key(RankLogPath(attempt, rank)), max: o.Max, interval: o.Interval,
		log:  o.Logger,
		kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
	}
	l.app, _ = r.b.(appender)
	l.bg, l.bgCancel = context.WithCancel(context.Background())
	go l.loop()
	return l
}

// URI names the log.
func (l *RankLog) URI() string { return l.run.b.URI(l.key) }

// Errors counts the storage errors the log met.
func (l *RankLog) Errors() int64 { return l.errs.Load() }

// Write keeps p for the log; it always returns len(p), nil. p is whole
// lines (slog's handlers write one record per call). Past Max, p and
// everything after it is dropped; after Close, p is ignored.
func (l *RankLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	switch {
	case l.closed:
	case l.dropped > 0 || l.kept+int64(len(p)) > l.max:
		l.dropped += int64(len(p))
	default:
		l.data = append(l.data, p...)
		l.kept += int64(len(p))
		l.dirty = true
	}
	l.mu.Unlock()
	select {
	case l.kick <- struct{}{}:
	default:
	}
	return len(p), nil
}

// loop flushes in the background: local appends as soon as Write kicks;
// whole-object uploads too, unless the last upload is under an interval
// old: then a tick (a fifth of the interval) uploads once it is. The ticks
// also retry what failed.
func (l *RankLog) loop() {
	defer close(l.done)
	t := time.NewTicker(max(l.interval/5, time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-l.kick:
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(l.bg, rankLogFlushTimeout)
		l.flush(ctx, false, false)
		cancel()
	}
}

// flush writes what is new: appended to the file (fsynced when sync is
// set), or the whole log uploaded when it changed (and, unless now is set,
// the last upload is an interval old).
func (l *RankLog) flush(ctx context.Context, sync, now bool) error {
	l.ioMu.Lock()
	defer l.ioMu.Unlock()
	var err error
	if l.app != nil {
		err = l.flushAppend(sync)
	} else {
		err = l.flushWhole(ctx, now)
	}
	if err != nil {
		l.errs.Add(1)
		if l.warned.CompareAndSwap(false, true) {
			l.log.Warn("rank log: storage error; the rank goes on, later errors are counted, not logged", "log", l.URI(), "error", err)
		}
	}
	return err
}

func (l *RankLog) flushAppend(sync bool) error {
	l.mu.Lock()
	data := l.data
	l.data = nil
	l.mu.Unlock()
	if l.f == nil && len(data) > 0 {
		f, err := l.app.openAppend(l.key)
		if err != nil {
			l.unwrite(data)
			return err
		}
		l.f = f
	}
	if len(data) > 0 {
		n, err := l.f.Write(data)
		if err != nil {
			l.unwrite(data[n:])
			return fmt.Errorf("append to %s: %w", l.URI(), err)
		}
	}
	if sync && l.f != nil {
		if err := l.f.Sync(); err != nil {
			return fmt.Errorf("sync %s: %w", l.URI(), err)
		}
	}
	return nil
}

// unwrite puts back what a failed append did not write, before what came
// since.
func (l *RankLog) unwrite(data []byte) {
	if len(data) == 0 {
		return
	}
	l.mu.Lock()
	l.data = append(data[:len(data):len(data)], l.data...)
	l.mu.Unlock()
}

func (l *RankLog) flushWhole(ctx context.Context, now bool) error {
	l.mu.Lock()
	if !l.dirty || !now && time.Since(l.lastUpload) < l.interval {
		l.mu.Unlock()
		return nil
	}
	l.lastUpload = time.Now()
	// data only grows by append, so this prefix stays as it is.
	snap := l.data[:len(l.data):len(l.data)]
	l.dirty = false
	l.mu.Unlock()
	if err := l.run.b.Put(ctx, l.key, bytes.NewReader(snap), int64(len(snap))); err != nil {
		l.mu.Lock()
		l.dirty = true
		l.mu.Unlock()
		return err
	}
	return nil
}

// Sync writes what the log holds to storage now (local: and fsyncs it).
func (l *RankLog) Sync(ctx context.Context) error {
	return l.flush(ctx, true, true)
}

// Close ends the log: the line saying how many bytes were dropped, if any,
// then a last flush within ctx. Its error (the last flush's, with the count
// of errors the log met) is for the caller's own log; the log is closed
// either way.
func (l *RankLog) Close(ctx context.Context) error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	if l.dropped > 0 {
		l.data = append(l.data, fmt.Sprintf("[tempotrain] this log reached its limit of %d bytes: %d bytes after it were dropped\n", l.max, l.dropped)...)
		l.dirty = true
	}
	l.mu.Unlock()
	close(l.stop)
	select {
	case <-l.done:
	case <-ctx.Done():
		l.bgCancel() // a background upload in flight gives up
		<-l.done
	}
	l.bgCancel()
	err := l.flush(ctx, true, true)
	l.ioMu.Lock()
	if l.f != nil {
		if cerr := l.f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("close %s: %w", l.URI(), cerr)
		}
		l.f = nil
	}
	l.ioMu.Unlock()
	if err != nil {
		return fmt.Errorf("rank log %s: %d storage errors, the last: %w", l.URI(), l.errs.Load(), err)
	}
	if n := l.errs.Load(); n > 0 {
		return fmt.Errorf("rank log %s: %d storage errors before the last flush, which worked", l.URI(), n)
	}
	return nil
}

// RankLogInfo is one rank log of a run.
type RankLogInfo struct {
	Attempt, Rank int
	Size          int64
}

// ListRankLogs returns the run's rank logs, sorted by attempt, then rank.
func (r *Run) ListRankLogs(ctx context.Context) ([]RankLogInfo, error) {
	objs, err := r.b.List(ctx, r.key(LogsDir+"/attempt-"))
	if err != nil {
		return nil, fmt.Errorf("run %s: list rank logs: %w", r.URI(), err)
	}
	var out []RankLogInfo
	for _, o := range objs {
		a, k, ok := parseRankLogPath(strings.TrimPrefix(o.Key, r.prefix))
		if ok {
			out = append(out, RankLogInfo{Attempt: a, Rank: k, Size: o.Size})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Attempt != out[j].Attempt {
			return out[i].Attempt < out[j].Attempt
		}
		return out[i].Rank < out[j].Rank
	})
	return out, nil
}

// ReadRankLog returns rank's log of attempt from byte offset on: nothing
// when the log holds no more. A log that does not exist (yet) is
// ErrNotFound.
func (r *Run) ReadRankLog(ctx context.Context, attempt, rank int, offset int64) ([]byte, error) {
	if offset < 0 {
		return nil, fmt.Errorf("run %s: read rank log: offset %d < 0", r.URI(), offset)
	}
	key := r.key(RankLogPath(attempt, rank))
	var (
		rc  io.ReadCloser
		err error
	)
	if fg, ok := r.b.(fromGetter); ok {
		rc, err = fg.getFrom(ctx, key, offset)
	} else {
		rc, err = r.b.Get(ctx, key)
		if err == nil && offset > 0 {
			if sk, ok := rc.(io.Seeker); ok {
				_, err = sk.Seek(offset, io.SeekStart)
			} else {
				_, err = io.CopyN(io.Discard, rc, offset)
				if errors.Is(err, io.EOF) {
					err = nil // shorter than offset: nothing new
				}
			}
			if err != nil {
				rc.Close()
			}
		}
	}
	if err != nil {
		return nil, fmt.Errorf("run %s: read log of rank %d, attempt %d: %w", r.URI(), rank, attempt, err)
	}
	defer rc.Close()
	data, err := io.ReadAll(io.LimitReader(rc, maxRankLogRead))
	if err != nil {
		return nil, fmt.Errorf("run %s: read log of rank %d, attempt %d: %w", r.URI(), rank, attempt, err)
	}
	return data, nil
}
