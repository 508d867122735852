package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tempotrain/tempotrain/app"
	"github.com/tempotrain/tempotrain/bench/internal/hostinfo"
	"github.com/tempotrain/tempotrain/train"
)

// manyConfig is the many-runs mode: runs Fits of world ranks each, all
// started at once, on procs worker processes of slots rank slots each, all
// polling one rank queue (a cluster's).
type manyConfig struct {
	runs, world, procs, slots int
	steps, stepMS             int
	startTimeout, timeout     time.Duration
	keep                      bool
	pollers                   int // the workflow worker's (0: app's default)
}

// manyRun is one of the runs.
type manyRun struct {
	run *train.Run
	res *train.Result
	err error
	h   historyStats
	// first is rank 0's first step of attempt 1 (zero: none).
	first time.Time
}

// runMany starts c.runs Fits at once and measures what each waited and
// what they all cost.
func runMany(c manyConfig, ho *hostinfo.Options) error {
	hs := hostinfo.Start(os.Stdout, ho)
	defer hs.End()
	b, down, err := up(c.keep, c.pollers)
	if err != nil {
		return err
	}
	defer down()
	b.procs = c.procs
	const queue = "scale-many"
	for range c.procs {
		if err := b.startWorkerOn(queue, c.slots); err != nil {
			return err
		}
	}
	pollers := c.pollers
	if pollers <= 0 {
		pollers = app.DefaultWorkflowPollers
	}
	acts := rankActivities(c.world)
	fmt.Printf("\n%d runs of %d ranks (%d rank tasks%s) at once on %d worker processes of %d rank slots (%d slots: %d runs at a time), %d steps of %d ms, a report and checkpoint at the end; workflow worker pollers %d\n",
		c.runs, c.world, c.runs*acts, perProcessNote(), c.procs, c.slots, c.procs*c.slots, c.procs*c.slots/acts, c.steps, c.stepMS, pollers)
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	runs := make([]manyRun, c.runs)
	before := b.cpu()
	start := time.Now()

	// Start every run, a few at a time (as many clients would), and wait
	// for each in start order with a bounded number of waiters: a waiter is
	// a long poll on the server, as a user's Fit call is.
	var done atomic.Int64
	started := make(chan int, c.runs)
	var startErr error
	go func() {
		startErr = forEach(c.runs, 8, func(i int) error {
			marks := filepath.Join(b.dir, "marks", fmt.Sprint(i))
			if err := os.MkdirAll(marks, 0o755); err != nil {
				return err
			}
			cfg := trivialConfig{Steps: c.steps, StepMS: c.stepMS, ReportEvery: c.steps, MarkDir: marks}
			r, err := train.NewTrainer(b.c, "scale-trivial", cfg, train.ScalingConfig{NumWorkers: c.world, TaskQueue: queue, RanksPerProcess: ranksPerProcess},
				train.RunConfig{Name: fmt.Sprintf("many-%d", i), StoragePath: filepath.Join(b.dir, "runs"),
					Failure: train.FailureConfig{MaxFailures: 2, StartTimeout: train.Duration(c.startTimeout)}}).Start(ctx)
			if err != nil {
				return fmt.Errorf("run %d: start: %w", i, err)
			}
			runs[i].run = r
			started <- i
			return nil
		})
		close(started)
	}()
	var waiters sync.WaitGroup
	for range 32 {
		waiters.Add(1)
		go func() {
			defer waiters.Done()
			for i := range started {
				runs[i].res, runs[i].err = runs[i].run.Wait(ctx)
				done.Add(1)
			}
		}()
	}
	// Progress every 15 s: runs done, and who spent the processor.
	stop := make(chan struct{})
	var progress sync.WaitGroup
	progress.Add(1)
	go func() {
		defer progress.Done()
		last, lastT := before, start
		for {
			select {
			case <-stop:
				return
			case <-time.After(15 * time.Second):
			}
			now, t := b.cpu(), time.Now()
			d, s := now.sub(last), t.Sub(lastT).Seconds()
			fmt.Printf("  +%3.0f s: %d of %d runs done; load %.1f; processor %% of the last %.0f s: server %.0f, PostgreSQL %.0f, workers %.0f, controller %.0f; heartbeats %.0f/s, polls %.0f/s\n",
				t.Sub(start).Seconds(), done.Load(), c.runs, hostinfo.LoadAvg(), s, 100*d.server/s, 100*d.postgres/s, 100*d.workers/s, 100*d.controller/s,
				d.requests["RecordActivityTaskHeartbeat"]/s, (d.requests["PollActivityTaskQueue"]+d.requests["PollWorkflowTaskQueue"])/s)
			last, lastT = now, t
		}
	}()
	waiters.Wait()
	close(stop)
	progress.Wait()
	wall := time.Since(start)
	cpu := b.cpu().sub(before)
	if startErr != nil {
		return startErr
	}

	// Each run's history and rank 0's first step.
	hctx, hcancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer hcancel()
	err = forEach(c.runs, 4, func(i int) error {
		r := &runs[i]
		h, err := readHistory(hctx, b.c, r.run.WorkflowID, r.run.RunID, c.world)
		if err != nil {
			return err
		}
		r.h = h
		r.first, _ = readMark(filepath.Join(b.dir, "marks", fmt.Sprint(i), "attempt-1"))
		return nil
	})
	if err != nil {
		return err
	}
	s := summarize(runs, c.world)
	s.wall, s.cpu = wall, cpu
	s.print()
	printServerLog(filepath.Join(b.pg.Dir(), "temporal-server.log"))
	return nil
}

// forEach calls f(i) for i from 0 to n-1 on workers goroutines and returns
// the first error; a goroutine whose call fails takes no more.
func forEach(n, workers int, f func(i int) error) error {
	var (
		next  atomic.Int64
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
	)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := f(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	return first
}

// readMark reads the time rank 0 wrote at its first step.
func readMark(path string) (time.Time, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return time.Time{}, err
	}
	return time.Parse(time.RFC3339Nano, string(b))
}

// manySummary is what the runs of the many-runs mode cost and waited.
type manySummary struct {
	runs, completed, failed, restarted, reports int
	failures                                    []string // the first few errors
	again                                       []string // the first few runs that needed a second attempt, and why
	// Per run, seconds: RunRank scheduled to the last rank started (the
	// wait for rank slots), Fit start to rank 0's first step, Fit start to
	// its close.
	slotWait, first, total []float64
	// Per run, seconds: its first workflow task's scheduled to completed,
	// Fit start to its last RunRank scheduled.
	firstTask, scheduled []float64
	events               []float64
	wft                  []float64 // every workflow task's scheduled to completed, ms
	wall                 time.Duration
	cpu                  cpuSample
}

func summarize(runs []manyRun, world int) manySummary {
	s := manySummary{runs: len(runs)}
	for _, r := range runs {
		switch {
		case r.err != nil:
			s.failed++
			if len(s.failures) < 3 {
				s.failures = append(s.failures, r.err.Error())
			}
		case r.res != nil:
			s.completed++
			s.reports += r.res.Reports
			if r.res.Attempts > 1 {
				s.restarted++
				if len(s.again) < 3 {
					s.again = append(s.again, fmt.Sprintf("%s (%d attempts, %d failures)", r.res.Name, r.res.Attempts, r.res.Failures))
				}
			}
		}
		h := r.h
		if len(h.wft) > 0 {
			s.firstTask = append(s.firstTask, h.wft[0]/1000)
		}
		if h.scheduled > 0 {
			s.scheduled = append(s.scheduled, h.scheduled.Seconds())
		}
		if h.startedN == rankActivities(world) {
			s.slotWait = append(s.slotWait, (h.started - h.scheduled).Seconds())
		}
		if !r.first.IsZero() && !h.begin.IsZero() {
			s.first = append(s.first, r.first.Sub(h.begin).Seconds())
		}
		if !h.end.IsZero() {
			s.total = append(s.total, h.end.Sub(h.begin).Seconds())
		}
		s.events = append(s.events, float64(h.events))
		s.wft = append(s.wft, h.wft...)
	}
	return s
}

func (s manySummary) print() {
	fmt.Printf("  wall %.1f s; %d of %d runs completed (%d failed, %d needed a second attempt), %d reports\n",
		s.wall.Seconds(), s.completed, s.runs, s.failed, s.restarted, s.reports)
	for _, f := range s.failures {
		fmt.Printf("  failed: %s\n", f)
	}
	for _, a := range s.again {
		fmt.Printf("  a second attempt: %s\n", a)
	}
	dist := func(name string, v []float64) {
		med := pct(v, 50)
		fmt.Printf("  %s (%d runs): p50 %.2f s, p90 %.2f s, p99 %.2f s, max %.2f s (max/p50 %.1f)\n",
			name, len(v), med, pct(v, 90), pct(v, 99), pct(v, 100), pct(v, 100)/med)
	}
	dist("first workflow task, scheduled to completed", s.firstTask)
	dist("Fit start to its ranks scheduled", s.scheduled)
	dist("wait for rank slots (all RunRank scheduled to the last started)", s.slotWait)
	dist("Fit start to rank 0's first step", s.first)
	dist("Fit start to its close", s.total)
	n := float64(s.runs)
	sum := 0.0
	for _, e := range s.events {
		sum += e
	}
	fmt.Printf("  history: %.1f events per run (max %.0f); workflow tasks: %d, scheduled to completed p50 %.0f ms, p99 %.0f ms, max %.0f ms\n",
		sum/n, pct(s.events, 100), len(s.wft), pct(s.wft, 50), pct(s.wft, 99), pct(s.wft, 100))
	c := s.cpu
	fmt.Printf("  processor seconds: temporal-server %.1f, PostgreSQL %.1f, worker processes %.1f, controller (this process) %.1f; per run: %.3f, %.3f, %.3f, %.3f\n",
		c.server, c.postgres, c.workers, c.controller, c.server/n, c.postgres/n, c.workers/n, c.controller/n)
	ops := make([]string, 0, len(c.requests))
	for op, v := range c.requests {
		if v > 0 {
			ops = append(ops, op)
		}
	}
	sort.Slice(ops, func(i, j int) bool { return c.requests[ops[i]] > c.requests[ops[j]] })
	fmt.Printf("  frontend requests per run:")
	for _, op := range ops {
		fmt.Printf(" %s %.1f", op, c.requests[op]/n)
	}
	fmt.Println()
}

var logMsg = regexp.MustCompile(`"msg":"([^"]*)"`)

// printServerLog prints the server log's most frequent messages (warnings
// and errors at its level), where a limit that binds shows.
func printServerLog(path string) {
	f, err := os.Open(path)
	if err != nil {
		return
	}
	defer f.Close()
	counts := map[string]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		if m := logMsg.FindStringSubmatch(sc.Text()); m != nil {
			counts[m[1]]++
		}
	}
	msgs := make([]string, 0, len(counts))
	for m := range counts {
		msgs = append(msgs, m)
	}
	slices.SortFunc(msgs, func(a, b string) int { return counts[b] - counts[a] })
	fmt.Printf("  server log (%s):", path)
	if len(msgs) == 0 {
		fmt.Print(" no warnings")
	}
	fmt.Println()
	for _, m := range msgs[:min(8, len(msgs))] {
		fmt.Printf("    %6d %s\n", counts[m], strings.TrimSpace(m))
	}
}
