package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"
	"go.temporal.io/sdk/client"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/train"
)

// watcher follows a run while the starter waits for it: it prints each
// report as a line and, when stdout is a terminal, draws a progress bar
// under them (epochs done of the config's epochs, samples/s of all ranks,
// ETA, attempt and restarts, world size, standbys, the latest checkpoint).
// On a pipe it prints plain lines only, with a progress line whenever the
// attempt, the world size or the checkpoint changes.
type watcher struct {
	c          client.Client
	workflowID string
	start      time.Time
	out        io.Writer // report lines; above the bar in a terminal
	bar        *runBar   // nil on a pipe
	printed    int
	firstStep  bool
	last       string // the last plain progress line
}

func newWatcher(c client.Client, run *train.Run, in api.FitInput, stdout *os.File) *watcher {
	w := &watcher{c: c, workflowID: run.WorkflowID, start: time.Now(), out: stdout}
	if isatty.IsTerminal(stdout.Fd()) && os.Getenv("TERM") != "dumb" {
		w.bar = newRunBar(stdout, run.Name, totalEpochs(in.Config))
		w.out = w.bar.p
	}
	return w
}

// totalEpochs reads how many epochs (or boosting rounds) a config asks for;
// 0 when it does not say.
func totalEpochs(cfg json.RawMessage) int {
	var m map[string]any
	if json.Unmarshal(cfg, &m) != nil {
		return 0
	}
	for _, k := range []string{"epochs", "num_epochs", "max_epochs", "num_boost_round"} {
		if v, ok := m[k].(float64); ok && v > 0 {
			return int(v)
		}
	}
	if p, ok := m["params"].(map[string]any); ok { // gbdt's config
		if v, ok := p["num_boost_round"].(float64); ok && v > 0 {
			return int(v)
		}
	}
	return 0
}

// epochsDone says how far the run is: the latest report's epoch (or
// round), else the ranks' epoch in progress less one.
func epochsDone(st *train.Status) int {
	for _, k := range []string{"epoch", "round", "epochs"} {
		if v, ok := st.Latest[k]; ok && !math.IsNaN(v) {
			return int(v)
		}
	}
	done := 0
	for _, r := range st.Ranks {
		if r.Attempt == st.Attempt && r.Epoch > 0 {
			done = max(done, r.Epoch-1)
		}
	}
	return done
}

// summary is the one-line state of a run beside its bar.
func summary(st *train.Status) string {
	var sps float64
	for _, r := range st.Ranks {
		if r.Attempt == st.Attempt && r.Rank >= 0 {
			sps += r.SamplesPerSec
		}
	}
	if sps == 0 {
		sps = st.Latest["samples_per_s"] // the ranks are gone: the last report's
	}
	parts := []string{fmt.Sprintf("attempt %d", st.Attempt)}
	if st.Failures > 0 {
		parts = append(parts, fmt.Sprintf("%d restarts", st.Failures))
	}
	if st.WorldSize > 0 {
		parts = append(parts, fmt.Sprintf("%d ranks", st.WorldSize))
	}
	if st.Standbys > 0 {
		parts = append(parts, fmt.Sprintf("%d standby", st.Standbys))
	}
	if sps > 0 {
		parts = append(parts, fmt.Sprintf("%.0f samples/s", sps))
	}
	if st.Checkpoint != nil {
		parts = append(parts, fmt.Sprintf("ckpt %d", st.Checkpoint.Seq))
	}
	return strings.Join(parts, " · ")
}

// poll prints what is new and moves the bar.
func (w *watcher) poll(ctx context.Context) {
	st, _ := train.StatusOf(ctx, w.c, w.workflowID)
	if st == nil {
		return // not queryable yet (no workflow task ran), or gone
	}
	for _, r := range st.Recent {
		if r.Index < w.printed {
			continue
		}
		w.printed = r.Index + 1
		fmt.Fprintf(w.out, "[%6.1fs] attempt %d report %d: %s%s\n", time.Since(w.start).Seconds(), r.Attempt, r.Index, fmtMetrics(r.Metrics), ckptNote(r.Checkpoint))
	}
	if !w.firstStep {
		for _, r := range st.Ranks {
			if r.Step >= 0 && r.Epoch >= 0 {
				w.firstStep = true
				fmt.Fprintf(w.out, "[%6.1fs] first training step reported by a rank heartbeat\n", time.Since(w.start).Seconds())
				break
			}
		}
	}
	line := summary(st)
	if w.bar != nil {
		w.bar.update(epochsDone(st), line)
	} else if line != w.last && !st.Done {
		w.last = line
		fmt.Fprintf(w.out, "[%6.1fs] %s\n", time.Since(w.start).Seconds(), line)
	}
}

// finish stops the bar: complete when the run succeeded, where it stood
// otherwise.
func (w *watcher) finish(ok bool) {
	if w.bar != nil {
		w.bar.finish(ok)
	}
}

// runBar is one run's bar. Its total is the config's epochs, or grows with
// the run when the config does not say.
type runBar struct {
	p     *mpb.Progress
	bar   *mpb.Bar
	total int

	mu       sync.Mutex
	info     string
	t0       time.Time // when the bar first saw an epoch end
	e0, done int
}

const refresh = 150 * time.Millisecond

func newRunBar(out io.Writer, name string, total int) *runBar {
	b := &runBar{total: total}
	b.p = mpb.New(mpb.WithOutput(out), mpb.WithWidth(32), mpb.WithRefreshRate(refresh))
	barTotal := int64(total)
	if total <= 0 {
		barTotal = 1
	}
	b.bar = b.p.New(barTotal, mpb.BarStyle().Lbound("[").Rbound("]"),
		mpb.PrependDecorators(
			decor.Name(name+" ", decor.WCSyncSpaceR),
			decor.Any(func(decor.Statistics) string {
				b.mu.Lock()
				defer b.mu.Unlock()
				if b.total > 0 {
					return fmt.Sprintf("epoch %d/%d", b.done, b.total)
				}
				return fmt.Sprintf("epoch %d", b.done)
			}, decor.WCSyncSpaceR),
		),
		mpb.AppendDecorators(
			decor.Percentage(decor.WCSyncSpace),
			decor.Any(func(s decor.Statistics) string { return b.eta(s) }, decor.WCSyncSpace),
			decor.Any(func(decor.Statistics) string {
				b.mu.Lock()
				defer b.mu.Unlock()
				return " " + b.info
			}),
		),
	)
	return b
}

// eta extrapolates the epochs this bar saw end.
func (b *runBar) eta(s decor.Statistics) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if s.Completed {
		return "done"
	}
	if b.total <= 0 || b.done <= b.e0 || b.t0.IsZero() {
		return "ETA --"
	}
	per := time.Since(b.t0) / time.Duration(b.done-b.e0)
	left := time.Duration(b.total-b.done) * per
	return "ETA " + left.Round(time.Second).String()
}

func (b *runBar) update(done int, info string) {
	b.mu.Lock()
	if b.t0.IsZero() || done < b.e0 {
		b.t0, b.e0 = time.Now(), done
	}
	b.done, b.info = done, info
	total := b.total
	b.mu.Unlock()
	if total <= 0 {
		b.bar.SetTotal(int64(done+1), false)
	}
	b.bar.SetCurrent(int64(done))
}

func (b *runBar) finish(ok bool) {
	// Lines written just before are printed at the next refresh: let it
	// come while the bar still runs.
	time.Sleep(2 * refresh)
	if ok {
		b.bar.SetTotal(-1, true) // complete at the current value
		b.bar.SetCurrent(b.bar.Current())
	} else {
		b.bar.Abort(false)
	}
	b.p.Wait()
}

// waitAndWatch waits for a run's Result, printing its progress meanwhile.
func waitAndWatch(ctx context.Context, c client.Client, run *train.Run, in api.FitInput) (*train.Result, error) {
	w := newWatcher(c, run, in, os.Stdout)
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
			w.finish(err == nil)
			return res, err
		case <-t.C:
			w.poll(ctx)
		}
	}
}
