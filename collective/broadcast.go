package collective

// Chain broadcast, pipelined by segment.
//
// The root's buffer travels round the ring from the root: root -> root+1 ->
// ... -> root-1. The buffer is cut into nseg segments; a rank receives
// segment j from its left neighbour straight into place and its sender
// forwards it to the right as soon as it has landed, while the next segment
// is on the wire. The last rank (root-1) only receives. For a large buffer
// the time approaches one buffer's transfer, whatever the world size; a
// small one pays size-1 hops of latency.

import (
	"context"
	"fmt"
)

// Broadcast copies root's buf into every rank's buf, in place. Every rank
// passes a buffer of the same length and the same root.
func (c *Comm) Broadcast(ctx context.Context, buf []byte, root int) error {
	start := c.began()
	err := c.broadcast(ctx, buf, root)
	c.observe(ctx, obsBroadcast, len(buf), start, err)
	return err
}

func (c *Comm) broadcast(ctx context.Context, buf []byte, root int) error {
	if root < 0 || root >= c.size {
		return c.badCall(fmt.Errorf("Broadcast: root %d not in [0, %d)", root, c.size))
	}
	c.opMu.Lock()
	defer c.opMu.Unlock()
	if c.size == 1 {
		return c.soloErr(opBroadcast)
	}
	c.seq++
	p := &c.p
	p.kind, p.op, p.data, p.elem = planChain, opBroadcast, buf, 1
	p.rank, p.size, p.root, p.mean = c.rank, c.size, root, false
	p.total = uint64(len(buf))
	p.setSegments(len(buf), c.opts.SegmentBytes)
	return c.run(ctx)
}

// BroadcastFloat32 is Broadcast for a float32 buffer (parameters from rank 0).
func (c *Comm) BroadcastFloat32(ctx context.Context, buf []float32, root int) error {
	return c.Broadcast(ctx, bytesOf(buf), root)
}
