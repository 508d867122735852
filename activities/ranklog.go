package activities

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/storage"
)

// A rank's log: every record the rank logs (r.log, and tc.Logger() of its
// training function, through which a Python process's output comes too)
// goes to the worker's handler, as before, and as a text line (slog's
// TextHandler: time, level, message, attributes) to the run's storage,
// {run}/logs/attempt-{n}/rank-{r}.log (storage.RankLog), which
// `starter logs` reads. The worker's lines carry the run, attempt and rank;
// the rank log's do not repeat them.
//
// A rank learns its number before it trains: at once for a fixed-size run,
// at the rendezvous for an elastic slot. What it logs before then waits in
// memory (rankLogPending bytes at most) and goes first into the log; a slot
// that never joins a group writes no log.

const (
	// rankLogLevel is the least level that reaches the rank log.
	rankLogLevel = slog.LevelInfo
	// rankLogPending bounds what waits for the rank log to open.
	rankLogPending = 64 << 10
	// rankLogCloseTimeout bounds the rank log's last flush when the rank
	// ends; rankLogCancelTimeout when it was cancelled, which the workflow
	// waits for only a few seconds (on S3 what the flush did not upload is
	// the last 5 s of lines at most).
	rankLogCloseTimeout  = 5 * time.Second
	rankLogCancelTimeout = time.Second
)

// rankLogSink is the writer of the rank log's text handler: it holds what
// comes before the log is opened, then hands everything to it.
type rankLogSink struct {
	mu      sync.Mutex
	log     *storage.RankLog
	pending []byte
	closed  bool
}

func (s *rankLogSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.log != nil:
		return s.log.Write(p)
	case !s.closed && len(s.pending)+len(p) <= rankLogPending:
		s.pending = append(s.pending, p...)
	}
	return len(p), nil
}

// open starts the log with what is pending.
func (s *rankLogSink) open(l *storage.RankLog) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.log != nil {
		return
	}
	s.log = l
	if len(s.pending) > 0 {
		l.Write(s.pending)
		s.pending = nil
	}
}

// close closes the log, if it was opened, within ctx.
func (s *rankLogSink) close(ctx context.Context) error {
	s.mu.Lock()
	l := s.log
	s.closed, s.log, s.pending = true, nil, nil
	s.mu.Unlock()
	if l == nil {
		return nil
	}
	return l.Close(ctx)
}

// teeHandler hands each record to the worker's handler and to the rank
// log's. Attributes in drop, when given to WithAttrs outside any group,
// reach only the worker's handler: the rank's own run, attempt and rank,
// which every line of its log would otherwise repeat.
type teeHandler struct {
	worker, file slog.Handler
	drop         []slog.Attr
	grouped      bool
}

func (h *teeHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.worker.Enabled(ctx, l) || h.file.Enabled(ctx, l)
}

func (h *teeHandler) Handle(ctx context.Context, r slog.Record) error {
	if h.file.Enabled(ctx, r.Level) {
		_ = h.file.Handle(ctx, r) // the rank log never fails
	}
	if h.worker.Enabled(ctx, r.Level) {
		return h.worker.Handle(ctx, r)
	}
	return nil
}

func (h *teeHandler) WithAttrs(as []slog.Attr) slog.Handler {
	file := as
	if !h.grouped && len(h.drop) > 0 {
		file = nil
		for _, a := range as {
			if !h.dropped(a) {
				file = append(file, a)
			}
		}
	}
	c := *h
	c.worker = h.worker.WithAttrs(as)
	if len(file) > 0 {
		c.file = h.file.WithAttrs(file)
	}
	return &c
}

func (h *teeHandler) dropped(a slog.Attr) bool {
	for _, d := range h.drop {
		if a.Key == d.Key && a.Value.Resolve().Equal(d.Value) {
			return true
		}
	}
	return false
}

func (h *teeHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	c := *h
	c.worker, c.file, c.grouped = h.worker.WithGroup(name), h.file.WithGroup(name), true
	return &c
}

// startLog sets up the rank's loggers: r.log (the worker's, tagged with
// the run, attempt and rank or slot) and r.fnLog (for the training
// function's Context, which adds those tags itself), both writing the rank
// log too. The log opens with openLog.
func (r *rank) startLog(in api.RunRankInput) {
	r.logSink = &rankLogSink{}
	file := slog.NewTextHandler(r.logSink, &slog.HandlerOptions{Level: rankLogLevel})
	r.workerLog = r.a.o.Logger.With("run", in.RunName, "attempt", in.Attempt, rankKey(in), in.Rank)
	r.log = slog.New(&teeHandler{worker: r.workerLog.Handler(), file: file})
	r.fnFile = file
}

// openLog opens the rank log of the rank's attempt and number, once both
// are known, with what the rank logged so far.
func (r *rank) openLog() {
	l := r.store.RankLog(r.in.Attempt, r.in.Rank, storage.RankLogOptions{Logger: r.workerLog})
	r.logSink.open(l)
}

// fnLogger is the logger of the training function's Context: the worker's
// handler as is (NewContext tags it), and the rank log without the tags.
func (r *rank) fnLogger() *slog.Logger {
	return slog.New(&teeHandler{worker: r.a.o.Logger.Handler(), file: r.fnFile, drop: []slog.Attr{
		slog.String("run", r.in.RunName), slog.Int("attempt", r.in.Attempt), slog.Int("rank", r.in.Rank),
	}})
}

// closeLog ends the rank log, whatever ended the rank, with a line that
// says how (err is RunRank's error), within rankLogCloseTimeout, or
// rankLogCancelTimeout when actx (the activity's context) ended; a failure
// to write it is the worker's to log, not the rank's.
func (r *rank) closeLog(actx context.Context, err error) {
	end := slog.New(r.fnFile)
	var app *temporal.ApplicationError
	switch {
	case errors.As(err, &app):
		end.Error("rank ended", "error", app.Message(), "kind", app.Type())
	case err != nil:
		end.Error("rank ended", "error", err)
	default:
		end.Info("rank ended", "reports", r.reports.Load())
	}
	timeout := rankLogCloseTimeout
	if actx.Err() != nil {
		timeout = rankLogCancelTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := r.logSink.close(ctx); err != nil {
		r.workerLog.Warn("rank log incomplete", "error", err)
	}
}
