package main

import (
	"errors"
	"math"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tempotrain/tempotrain/train"
)

func TestParseStat(t *testing.T) {
	// A command with a space and a parenthesis, as postgres backends'
	// titles have.
	line := "4242 (postgres: x) y) S 4000 4242 4242 0 -1 4194560 100 0 0 0 250 75 12 3 20 0 1 0 100 1000 10"
	st, ok := parseStat(line)
	if !ok {
		t.Fatalf("parseStat(%q) failed", line)
	}
	want := stat{ppid: 4000, utime: 2.5, stime: 0.75, cutime: 0.12, cstime: 0.03}
	if st != want {
		t.Fatalf("parseStat = %+v, want %+v", st, want)
	}
	if _, ok := parseStat("4242 (truncated"); ok {
		t.Fatal("parseStat of a line without ')' succeeded")
	}
	if _, ok := parseStat("4242 (x) S 1 2"); ok {
		t.Fatal("parseStat of a short line succeeded")
	}
}

func TestProcCPUOfThisProcess(t *testing.T) {
	// Spin until this process has used some processor time: procCPU must
	// see at least what it had before.
	before := procCPU(os.Getpid(), false)
	x := 0.0
	for i := 0; i < 30_000_000; i++ {
		x += math.Sqrt(float64(i))
	}
	after := procCPU(os.Getpid(), false)
	if after <= 0 || after < before || x == 0 {
		t.Fatalf("procCPU: before %.2f s, after %.2f s", before, after)
	}
	if procCPU(0, true) != 0 {
		t.Fatal("procCPU(0) is not 0")
	}
}

func TestPct(t *testing.T) {
	v := []float64{5, 1, 4, 2, 3, 10, 9, 8, 7, 6}
	for _, c := range []struct{ p, want float64 }{{50, 5}, {99, 10}, {100, 10}, {10, 1}, {0, 1}} {
		if got := pct(v, c.p); got != c.want {
			t.Errorf("pct(%v, %g) = %g, want %g", v, c.p, got, c.want)
		}
	}
	if !math.IsNaN(pct(nil, 50)) {
		t.Error("pct(nil) is not NaN")
	}
	if v[0] != 5 {
		t.Error("pct sorted its argument")
	}
}

func TestParseRequests(t *testing.T) {
	body := `# HELP service_requests service_requests counter
# TYPE service_requests counter
service_requests{namespace="default",operation="QueryWorkflow",service_name="frontend"} 120
service_requests{namespace="default",operation="QueryWorkflow",service_name="history"} 30
service_requests{operation="UpdateWorkflowExecution",service_name="frontend"} 7
service_requests_total{operation="QueryWorkflow"} 999
service_errors{operation="QueryWorkflow"} 5
`
	got := parseRequests(body)
	if got["QueryWorkflow"] != 120 || got["UpdateWorkflowExecution"] != 7 || len(got) != 2 {
		t.Fatalf("parseRequests = %v, want QueryWorkflow 120 (the frontend's), UpdateWorkflowExecution 7", got)
	}
}

func TestSummarizeMany(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 18, 0, 0, 0, time.UTC)
	ok := manyRun{res: &train.Result{Attempts: 1, Reports: 1}, first: t0.Add(3 * time.Second),
		h: historyStats{begin: t0, end: t0.Add(5 * time.Second), events: 50, startedN: 2,
			scheduled: time.Second, started: 2500 * time.Millisecond, wft: []float64{400, 20}}}
	again := manyRun{res: &train.Result{Attempts: 2, Reports: 2}, first: t0.Add(7 * time.Second),
		h: historyStats{begin: t0, end: t0.Add(9 * time.Second), events: 70, startedN: 2,
			scheduled: 2 * time.Second, started: 3 * time.Second, wft: []float64{1000}}}
	// Not started (one rank of two): no slot wait, no first step.
	failed := manyRun{err: errors.New("deadline"), h: historyStats{begin: t0, end: t0.Add(time.Minute), events: 10, startedN: 1}}
	s := summarize([]manyRun{ok, again, failed}, 2)
	if s.completed != 2 || s.failed != 1 || s.restarted != 1 || s.reports != 3 || len(s.failures) != 1 {
		t.Fatalf("summarize: completed %d failed %d restarted %d reports %d failures %q, want 2, 1, 1, 3, one",
			s.completed, s.failed, s.restarted, s.reports, s.failures)
	}
	if want := []float64{1.5, 1}; !slices.Equal(s.slotWait, want) {
		t.Errorf("slot waits %v, want %v (last RunRank started - scheduled, runs whose ranks all started)", s.slotWait, want)
	}
	if want := []float64{3, 7}; !slices.Equal(s.first, want) {
		t.Errorf("first steps %v, want %v", s.first, want)
	}
	if want := []float64{5, 9, 60}; !slices.Equal(s.total, want) {
		t.Errorf("totals %v, want %v", s.total, want)
	}
	if want := []float64{0.4, 1}; !slices.Equal(s.firstTask, want) {
		t.Errorf("first workflow tasks %v, want %v (s)", s.firstTask, want)
	}
	if len(s.wft) != 3 || len(s.events) != 3 {
		t.Errorf("workflow tasks %v, events %v: want every run's", s.wft, s.events)
	}
}

func TestForEach(t *testing.T) {
	var mu sync.Mutex
	seen := map[int]int{}
	if err := forEach(100, 4, func(i int) error {
		mu.Lock()
		seen[i]++
		mu.Unlock()
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		if seen[i] != 1 {
			t.Fatalf("forEach called f(%d) %d times, want once (seen %v)", i, seen[i], seen)
		}
	}
	err := forEach(10, 2, func(i int) error {
		if i == 3 {
			return errors.New("three")
		}
		return nil
	})
	if err == nil || err.Error() != "three" {
		t.Fatalf("forEach's error %v, want f(3)'s", err)
	}
}

func TestGroupAttempt(t *testing.T) {
	for id, want := range map[string]int{
		"fit-scale-1024/attempt-2/group-7": 2,
		"fit-a/attempt-12/group-0":         12,
		"fit-scale-64":                     0,
		"fit-x/attempt-/group-1":           0,
		"fit-attempt-3/attempt-1/group-1":  1,
		"fit-b/attempt-4":                  4,
		"fit-c/attempt-x1/group-2":         0,
	} {
		if got := groupAttempt(id); got != want {
			t.Errorf("groupAttempt(%q) = %d, want %d", id, got, want)
		}
	}
}
