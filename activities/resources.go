package activities

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"

	"go.temporal.io/sdk/temporal"

	"github.com/tempotrain/tempotrain/api"
)

// pool hands a worker's CPUs and GPUs to its ranks. A rank asks for all it
// needs at once (never part of it, then the rest: two ranks holding halves
// would wait for each other forever) and waits its turn in a queue: the
// first to ask is the first served, so that a rank asking for much is not
// passed forever by smaller ones. CPUs are counted in thousandths (a rank
// may ask for half of one); GPUs are ordinals, each held by one rank.
type pool struct {
	mu      sync.Mutex
	cpus    int   // free thousandths of a CPU
	devices []int // free GPU ordinals, ascending
	waiting []*claim

	totalCPUs    int // thousandths
	totalDevices int
}

// claim is one rank's ask, and what it was given.
type claim struct {
	cpus, gpus int // thousandths; count
	devices    []int
	granted    chan struct{} // closed when devices and cpus are the claim's
}

func newPool(cpus int, devices []int) *pool {
	d := slices.Clone(devices)
	slices.Sort(d)
	return &pool{cpus: cpus * 1000, devices: d, totalCPUs: cpus * 1000, totalDevices: len(d)}
}

// milliCPUs is cpu CPUs in the pool's thousandths, rounded up.
func milliCPUs(cpu float64) int { return int(math.Ceil(cpu * 1000)) }

// acquire waits until the pool can give cpus thousandths of a CPU and gpus
// GPUs, and takes them; release gives them back. An ask larger than the
// whole pool waits forever, so the caller checks fits first.
func (p *pool) acquire(ctx context.Context, cpus, gpus int) (*claim, error) {
	c := &claim{cpus: cpus, gpus: gpus, granted: make(chan struct{})}
	p.mu.Lock()
	p.waiting = append(p.waiting, c)
	p.grant()
	p.mu.Unlock()
	select {
	case <-c.granted:
		return c, nil
	case <-ctx.Done():
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if i := slices.Index(p.waiting, c); i >= 0 {
		p.waiting = slices.Delete(p.waiting, i, i+1)
		p.grant() // the asks behind it may fit now
		return nil, ctx.Err()
	}
	// Granted as the context ended: give it back.
	p.put(c)
	return nil, ctx.Err()
}

// release gives back what c holds.
func (p *pool) release(c *claim) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.put(c)
}

func (p *pool) put(c *claim) {
	p.cpus += c.cpus
	p.devices = append(p.devices, c.devices...)
	slices.Sort(p.devices)
	c.devices = nil
	p.grant()
}

// grant serves the waiting claims in order while the first fits. p.mu is
// held.
func (p *pool) grant() {
	for len(p.waiting) > 0 {
		c := p.waiting[0]
		if c.cpus > p.cpus || c.gpus > len(p.devices) {
			return
		}
		p.cpus -= c.cpus
		c.devices = slices.Clone(p.devices[:c.gpus])
		p.devices = p.devices[c.gpus:]
		p.waiting = p.waiting[1:]
		close(c.granted)
	}
}

// fits says whether the whole pool holds cpus thousandths and gpus GPUs.
func (p *pool) fits(cpus, gpus int) bool { return cpus <= p.totalCPUs && gpus <= p.totalDevices }

// takeResources waits for what the rank asks of this worker: its
// Resources, or one GPU for a GPU rank without them. It returns the GPUs it
// was given (none for a CPU rank) and the function that gives them back.
func (a *Activities) takeResources(ctx context.Context, in api.RunRankInput) ([]int, func(), error) {
	cpus, gpus := rankShape(in)
	if cpus == 0 && gpus == 0 {
		return nil, func() {}, nil
	}
	if gpus > 0 && a.pool.totalDevices == 0 {
		return nil, nil, temporal.NewNonRetryableApplicationError(
			"this worker has no GPUs (start cmd/worker with -gpus) but took a GPU rank", api.ErrUser.String(), nil)
	}
	if !a.pool.fits(cpus, gpus) {
		// Only a queue shared with other kinds of worker gets here: a
		// worker polls only the shape queues it can hold.
		return nil, nil, temporal.NewNonRetryableApplicationError(fmt.Sprintf(
			"this worker has %s but took a rank that asks for %s: is its rank queue shared with workers that have more?",
			api.Resources{CPU: float64(a.o.CPUs), GPU: len(a.o.Devices)}, in.Resources), api.ErrUser.String(), nil)
	}
	c, err := a.pool.acquire(ctx, cpus, gpus)
	if err != nil {
		return nil, nil, err
	}
	return c.devices, func() { a.pool.release(c) }, nil
}

// rankShape is what one rank of in holds on its worker: milli-CPUs and
// GPUs (none: it holds nothing).
func rankShape(in api.RunRankInput) (mcpus, gpus int) {
	if in.Resources != nil {
		return milliCPUs(in.Resources.CPU), in.Resources.GPU
	}
	if in.UseGPU {
		return 0, 1
	}
	return 0, 0
}

// bundleFits says whether this worker can hold n ranks of in at once (a
// bundle's), with an error that says what it lacks when not.
func (a *Activities) bundleFits(in api.RunRankInput, n int) error {
	cpus, gpus := rankShape(in)
	if (cpus == 0 && gpus == 0) || a.pool.fits(n*cpus, n*gpus) {
		return nil
	}
	return temporal.NewNonRetryableApplicationError(fmt.Sprintf(
		"this worker has %s but took a bundle of %d ranks that ask for %s each (scaling.ranks_per_process %d): start workers that have that many times as much, or run fewer ranks a process",
		api.Resources{CPU: float64(a.o.CPUs), GPU: len(a.o.Devices)}, n, api.Resources{CPU: float64(cpus) / 1000, GPU: gpus}, n), api.ErrUser.String(), nil)
}
