package activities

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/train"
)

// resourceProbe watches the ranks of "act-resources": how many run at once
// and what each was given.
var resourceProbe struct {
	mu            sync.Mutex
	running, most int
	cpus          []int
	devices       [][]int
}

func init() {
	train.MustRegister("act-resources", func(ctx context.Context, tc *train.Context) error {
		p := &resourceProbe
		p.mu.Lock()
		p.running++
		p.most = max(p.most, p.running)
		p.cpus = append(p.cpus, tc.CPUs())
		p.devices = append(p.devices, tc.Devices())
		p.mu.Unlock()
		defer func() {
			p.mu.Lock()
			p.running--
			p.mu.Unlock()
		}()
		// Hold until together stand running (or 10 s), then 300 ms more:
		// ranks that may run at once are seen at once however slow the
		// machine.
		var cfg struct {
			Together int `json:"together"`
		}
		if err := tc.Config(&cfg); err != nil {
			return err
		}
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			p.mu.Lock()
			n := p.running
			p.mu.Unlock()
			if n >= cfg.Together {
				break
			}
		}
		select {
		case <-time.After(300 * time.Millisecond):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
}

// TestRankWaitsForItsCPUs: two ranks that each ask for 2 of the worker's 3
// CPUs run one after the other, each seeing CPUs() == 2; two that ask for
// 1.5 run at once.
func TestRankWaitsForItsCPUs(t *testing.T) {
	for _, tt := range []struct {
		cpu      float64
		most     int
		wantCPUs int
	}{{2, 1, 2}, {1.5, 2, 2}} {
		p := &resourceProbe
		p.mu.Lock()
		p.running, p.most, p.cpus, p.devices = 0, 0, nil, nil
		p.mu.Unlock()
		// Two single-rank runs on one worker: the fake plays both (world 1).
		a := New(Options{ScratchDir: t.TempDir(), HeartbeatInterval: 5 * time.Millisecond, Logger: quiet, CPUs: 3})
		a.wf = newFakeWorkflow(1, 1)
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				in := rankInput("act-resources", t.TempDir(), "res-"+string(rune('a'+i)), 0, 1, fmt.Sprintf(`{"together":%d}`, tt.most))
				in.Resources = &api.Resources{CPU: tt.cpu}
				errs[i] = runRankShared(a, in)
			}()
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("CPU %v: rank %d: %v", tt.cpu, i, err)
			}
		}
		p.mu.Lock()
		if p.most != tt.most {
			t.Errorf("CPU %v each on 3 CPUs: %d ranks ran at once, want %d", tt.cpu, p.most, tt.most)
		}
		if !slices.Equal(p.cpus, []int{tt.wantCPUs, tt.wantCPUs}) {
			t.Errorf("CPU %v: the ranks saw CPUs() %v, want %d each", tt.cpu, p.cpus, tt.wantCPUs)
		}
		for _, d := range p.devices {
			if len(d) != 0 {
				t.Errorf("CPU ranks were given GPUs %v", d)
			}
		}
		p.mu.Unlock()
		if a.pool.cpus != 3000 || len(a.pool.waiting) != 0 {
			t.Errorf("after the ranks: %d thousandths free, %d waiting; want 3000, 0", a.pool.cpus, len(a.pool.waiting))
		}
	}
}

// TestRankGetsItsGPUs: a rank that asks for 2 GPUs gets two distinct
// ordinals, Device the first; a GPU rank without resources gets one.
func TestRankGetsItsGPUs(t *testing.T) {
	p := &resourceProbe
	p.mu.Lock()
	p.running, p.most, p.cpus, p.devices = 0, 0, nil, nil
	p.mu.Unlock()
	a := New(Options{ScratchDir: t.TempDir(), HeartbeatInterval: 5 * time.Millisecond, Logger: quiet, CPUs: 4, Devices: []int{3, 1, 2}})
	a.wf = newFakeWorkflow(1, 1)
	in := rankInput("act-resources", t.TempDir(), "gpus", 0, 1, `{}`)
	in.UseGPU, in.Resources = true, &api.Resources{CPU: 4, GPU: 2}
	if _, err := runRank(t, a, in, nil); err != nil {
		t.Fatal(err)
	}
	in.Resources = nil
	if _, err := runRank(t, a, in, nil); err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if want := [][]int{{1, 2}, {1}}; len(p.devices) != 2 || !slices.Equal(p.devices[0], want[0]) || !slices.Equal(p.devices[1], want[1]) {
		t.Errorf("devices %v, want %v", p.devices, want)
	}
	if !slices.Equal(p.cpus, []int{4, 0}) {
		t.Errorf("CPUs() %v, want [4 0]", p.cpus)
	}
}

// TestRankAsksForMoreThanTheWorkerHas: a worker that took a rank it can
// never hold (a rank queue shared with bigger workers) fails it at once,
// naming both; a GPU rank on a worker without GPUs likewise.
func TestRankAsksForMoreThanTheWorkerHas(t *testing.T) {
	a := New(Options{ScratchDir: t.TempDir(), HeartbeatInterval: 5 * time.Millisecond, Logger: quiet, CPUs: 2})
	a.wf = newFakeWorkflow(1, 1)
	for _, tt := range []struct {
		res  api.Resources
		want string
	}{
		{api.Resources{CPU: 8}, "this worker has {CPU: 2} but took a rank that asks for {CPU: 8}"},
		{api.Resources{GPU: 1}, "this worker has no GPUs"},
	} {
		in := rankInput("act-resources", t.TempDir(), "big", 0, 1, `{}`)
		in.Resources = &tt.res
		_, err := runRank(t, a, in, nil)
		var app *temporal.ApplicationError
		if !errors.As(err, &app) || !app.NonRetryable() || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: error %v, want a non-retryable one containing %q", tt.res, err, tt.want)
		}
	}
}

// TestPoolServesInOrder: a large ask is not passed by smaller ones that
// came after it; a cancelled ask leaves the queue and lets the next in.
func TestPoolServesInOrder(t *testing.T) {
	t.Parallel()
	p := newPool(4, []int{0, 1})
	ctx := context.Background()
	first, err := p.acquire(ctx, 3000, 1)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 3)
	go func() {
		c, _ := p.acquire(ctx, 4000, 0) // waits for first
		got <- "big"
		p.release(c)
	}()
	waitFor(t, func() bool { p.mu.Lock(); defer p.mu.Unlock(); return len(p.waiting) == 1 })
	go func() {
		c, _ := p.acquire(ctx, 1000, 1) // fits now, but big came first
		got <- "small"
		p.release(c)
	}()
	waitFor(t, func() bool { p.mu.Lock(); defer p.mu.Unlock(); return len(p.waiting) == 2 })
	cctx, cancel := context.WithCancel(ctx)
	cancelled := make(chan error, 1)
	go func() {
		_, err := p.acquire(cctx, 1000, 0)
		cancelled <- err
	}()
	waitFor(t, func() bool { p.mu.Lock(); defer p.mu.Unlock(); return len(p.waiting) == 3 })
	cancel()
	if err := <-cancelled; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled ask: %v", err)
	}
	select {
	case s := <-got:
		t.Fatalf("%s was served while the first holds 3 of 4 CPUs", s)
	case <-time.After(50 * time.Millisecond):
	}
	p.release(first)
	if a, b := <-got, <-got; a != "big" || b != "small" {
		t.Errorf("served %s then %s, want big then small", a, b)
	}
	waitFor(t, func() bool { p.mu.Lock(); defer p.mu.Unlock(); return p.cpus == 4000 && len(p.devices) == 2 })
}

// runRankShared runs RunRank in the SDK's activity test environment, as
// runRank does, without touching a: ranks may share it.
func runRankShared(a *Activities, in api.RunRankInput) error {
	var s testsuite.WorkflowTestSuite
	s.SetLogger(log.NewStructuredLogger(quiet))
	env := s.NewTestActivityEnvironment()
	env.RegisterActivityWithOptions(a.RunRank, activity.RegisterOptions{Name: api.ActivityRunRank})
	_, err := env.ExecuteActivity(api.ActivityRunRank, in)
	return err
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition never held")
		}
	}
}
