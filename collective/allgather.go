package collective

// Ring all-gather of byte slices of any lengths, and the barrier.
//
// AllGather runs the all-gather half of the ring (ring.go) twice: first over
// the lengths (8 bytes per rank), so that every rank can allocate one buffer
// and knows where each rank's bytes go, then over the bytes themselves, rank
// r owning chunk r. Barrier runs the same schedule with empty chunks: a rank
// leaves step size-2 only after a frame has come round from every other rank,
// so every rank has entered.

import (
	"context"
	"encoding/binary"
	"fmt"
)

// maxShared bounds AllocShared's size, against corrupt sizes.
const maxShared = 1 << 40

// AllGather returns every rank's in: out[i] is rank i's bytes (out[Rank()] a
// copy of in). Lengths may differ across ranks. The slices share one
// allocation; each is capped at its own length.
func (c *Comm) AllGather(ctx context.Context, in []byte) ([][]byte, error) {
	start := c.began()
	out, err := c.allGather(ctx, in)
	c.observe(ctx, obsAllGather, len(in), start, err)
	return out, err
}

func (c *Comm) allGather(ctx context.Context, in []byte) ([][]byte, error) {
	c.opMu.Lock()
	defer c.opMu.Unlock()
	out := make([][]byte, c.size)
	if c.size == 1 {
		out[0] = append([]byte{}, in...)
		return out, c.soloErr(opAllGather)
	}
	n := c.size
	lengths := make([]byte, 8*n)
	binary.LittleEndian.PutUint64(lengths[8*c.rank:], uint64(len(in)))
	if err := c.gatherRecords(ctx, opAllGatherLengths, lengths, 8, uint64(len(lengths))); err != nil {
		return nil, err
	}
	total, limit := uint64(0), uint64(c.opts.MaxGatherBytes)
	for i := range n {
		l := binary.LittleEndian.Uint64(lengths[8*i:])
		total += l
		if l > limit || total > limit {
			err := c.opErr(fmt.Errorf("rank %d announced %d bytes: the gather's total would pass Options.MaxGatherBytes (%d)", i, l, limit))
			c.fail(err)
			return nil, err
		}
		c.p.bounds[i+1] = c.p.bounds[i] + int(l)
	}
	all := make([]byte, total)
	copy(all[c.p.bounds[c.rank]:], in)
	c.seq++
	c.ringPlan(opAllGather, all, 1, 0, total)
	for i := range n {
		out[i] = all[c.p.bounds[i]:c.p.bounds[i+1]:c.p.bounds[i+1]]
	}
	if err := c.run(ctx); err != nil {
		return nil, err
	}
	return out, nil
}

// gatherRecords runs the ring all-gather of buf, rank r's record of rec
// bytes at buf[r*rec:], as operation op with total in its frames. Called
// under opMu.
func (c *Comm) gatherRecords(ctx context.Context, op opcode, buf []byte, rec int, total uint64) error {
	c.seq++
	for i := range c.size + 1 {
		c.p.bounds[i] = rec * i
	}
	c.ringPlan(op, buf, 1, 0, total)
	return c.run(ctx)
}

// Barrier returns once every rank has called Barrier.
func (c *Comm) Barrier(ctx context.Context) error {
	start := c.began()
	err := c.barrier(ctx)
	c.observe(ctx, obsBarrier, 0, start, err)
	return err
}

func (c *Comm) barrier(ctx context.Context) error {
	c.opMu.Lock()
	defer c.opMu.Unlock()
	if c.size == 1 {
		return c.soloErr(opBarrier)
	}
	c.seq++
	clear(c.p.bounds)
	c.ringPlan(opBarrier, nil, 1, 0, 0)
	return c.run(ctx)
}
