package computetest

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/tempotrain/tempotrain/collective"
	"github.com/tempotrain/tempotrain/compute"
)

// ErrAborted is returned by a fake group's operations after Abort.
var ErrAborted = errors.New("fake group aborted")

// FakeGroup is an in-process collective group for tests of data-parallel
// code: ranks are goroutines, an operation completes when every rank has
// called it, reductions sum in rank order (so every rank gets the same
// bits, as from a ring), and Abort fails every pending and later operation,
// as a peer's death fails a real group.
type FakeGroup struct {
	mu      sync.Mutex
	cond    *sync.Cond
	n       int
	arrived int
	gen     int
	kind    string
	bufs32  [][]float32
	bufs64  [][]float64
	root    int
	err     error
}

// NewFakeGroup returns a group of n ranks; Rank(r) is rank r's end.
func NewFakeGroup(n int) *FakeGroup {
	g := &FakeGroup{n: n, bufs32: make([][]float32, n), bufs64: make([][]float64, n)}
	g.cond = sync.NewCond(&g.mu)
	return g
}

// Rank returns rank r's Communicator.
func (g *FakeGroup) Rank(r int) compute.Communicator { return fakeRank{g, r} }

// Abort fails every pending and later operation with ErrAborted.
func (g *FakeGroup) Abort() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.err == nil {
		g.err = ErrAborted
	}
	g.cond.Broadcast()
}

type fakeRank struct {
	g *FakeGroup
	r int
}

func (f fakeRank) Rank() int { return f.r }
func (f fakeRank) Size() int { return f.g.n }

func (f fakeRank) AllReduceFloat32(ctx context.Context, buf []float32, op collective.Op) error {
	return f.g.do(ctx, f.r, "allreduce32", 0, buf, nil, func() { reduce(f.g.bufs32, op) })
}

func (f fakeRank) AllReduceFloat64(ctx context.Context, buf []float64, op collective.Op) error {
	return f.g.do(ctx, f.r, "allreduce64", 0, nil, buf, func() { reduce(f.g.bufs64, op) })
}

func (f fakeRank) BroadcastFloat32(ctx context.Context, buf []float32, root int) error {
	return f.g.do(ctx, f.r, "broadcast32", root, buf, nil, func() {
		for r, b := range f.g.bufs32 {
			if r != root {
				copy(b, f.g.bufs32[root])
			}
		}
	})
}

func reduce[T float32 | float64](bufs [][]T, op collective.Op) {
	n := len(bufs[0])
	for i := 0; i < n; i++ {
		s := bufs[0][i]
		for r := 1; r < len(bufs); r++ {
			s += bufs[r][i]
		}
		if op == collective.Mean {
			s /= T(len(bufs))
		}
		for r := range bufs {
			bufs[r][i] = s
		}
	}
}

// do deposits rank r's buffer; the last rank to arrive runs fn over all
// buffers (every other rank is blocked, so it may write into theirs) and
// releases the others.
func (g *FakeGroup) do(ctx context.Context, r int, kind string, root int, b32 []float32, b64 []float64, fn func()) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.err != nil {
		return g.err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if g.arrived == 0 {
		g.kind, g.root = kind, root
	} else if g.kind != kind || g.root != root || (b32 != nil && len(b32) != len(g.bufs32[firstArrived(g.bufs32, r)])) {
		g.err = fmt.Errorf("rank %d called %s(root %d, len %d) while others called %s(root %d)", r, kind, root, len(b32), g.kind, g.root)
		g.cond.Broadcast()
		return g.err
	}
	g.bufs32[r], g.bufs64[r] = b32, b64
	g.arrived++
	if g.arrived == g.n {
		fn()
		g.arrived = 0
		g.gen++
		clear(g.bufs32)
		clear(g.bufs64)
		g.cond.Broadcast()
		return nil
	}
	gen := g.gen
	for g.gen == gen && g.err == nil {
		g.cond.Wait()
	}
	if g.gen == gen {
		return g.err
	}
	return nil
}

func firstArrived(b [][]float32, self int) int {
	for r, v := range b {
		if v != nil && r != self {
			return r
		}
	}
	return self
}
