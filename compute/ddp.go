package compute

import (
	"context"
	"fmt"

	"github.com/tempotrain/tempotrain/collective"
)

// Communicator is the part of a collective group data-parallel training
// uses; *collective.Comm implements it.
type Communicator interface {
	Rank() int
	Size() int
	AllReduceFloat32(ctx context.Context, buf []float32, op collective.Op) error
	AllReduceFloat64(ctx context.Context, buf []float64, op collective.Op) error
	BroadcastFloat32(ctx context.Context, buf []float32, root int) error
}

var _ Communicator = (*collective.Comm)(nil)

// GradReducer all-reduces gradients bucket by bucket while backward runs
// (*collective.Reducer): Ready(i) says gradient i is final, Wait returns
// once every gradient holds the mean over ranks, or the step's first error.
type GradReducer interface {
	Ready(ctx context.Context, i int)
	Wait(ctx context.Context) error
}

var _ GradReducer = (*collective.Reducer)(nil)

// DDPOptions configure PrepareModel.
type DDPOptions struct {
	// NewReducer builds a bucketed reducer over the model's gradients, one
	// slice per parameter in declaration order, with buckets of about
	// bucketBytes (collective.NewReducer). Nil: one flat all-reduce of the
	// gradient arena after backward.
	NewReducer func(grads [][]float32, bucketBytes int) (GradReducer, error)
	// BucketBytes is passed to NewReducer. Default 0 (NewReducer's default).
	BucketBytes int
	// MinEarlyShare skips the bucketed reducer when less than this fraction
	// of the gradients is final before backward's last layer
	// (Model.EarlyGradientShare): then nearly nothing can overlap, and
	// buckets only add copies. Default 0: always use NewReducer when set.
	MinEarlyShare float64
}

// DDP is a model prepared for data-parallel training (PyTorch's
// DistributedDataParallel, Ray's prepare_model): replicas start equal and
// their gradients are averaged after every backward, so that identical
// optimizer steps keep them equal.
type DDP struct {
	m       *Model
	comm    Communicator
	reducer GradReducer
	stage   []float32 // host copy of a device arena
	ready   func([]*Param)
	ctx     context.Context
}

// PrepareModel broadcasts m's parameters and buffers from rank 0, so every
// rank starts from rank 0's initialisation (or checkpoint), and returns the
// data-parallel wrapper. comm may be nil for a single rank.
func PrepareModel(ctx context.Context, m *Model, comm Communicator, o DDPOptions) (*DDP, error) {
	d := &DDP{m: m, comm: comm}
	d.ready = d.onReady
	if d.Size() == 1 {
		return d, nil
	}
	if err := d.Broadcast(ctx, m.P, m.B); err != nil {
		return nil, fmt.Errorf("prepare model: %w", err)
	}
	if o.NewReducer != nil && m.EarlyGradientShare() >= o.MinEarlyShare {
		grads := make([][]float32, len(m.params))
		arena := m.G.Data()
		for i, p := range m.params {
			grads[i] = p.G.Data()
			if arena != nil {
				// Not capped at the parameter, as p.G's slice is: the
				// reducer sees that adjacent gradients are one array and
				// reduces its buckets in place (DDP's
				// gradient_as_bucket_view), without packing copies.
				grads[i] = arena[p.Offset : p.Offset+p.Len()]
			}
			if grads[i] == nil && p.Len() > 0 {
				return nil, fmt.Errorf("prepare model: bucketed reduction needs host gradients, backend %s has none", m.be.Name())
			}
		}
		r, err := o.NewReducer(grads, o.BucketBytes)
		if err != nil {
			return nil, fmt.Errorf("prepare model: gradient reducer: %w", err)
		}
		d.reducer = r
	}
	return d, nil
}

// Bucketed reports whether gradients go through the bucketed reducer.
func (d *DDP) Bucketed() bool { return d.reducer != nil }

// Model returns the wrapped model.
func (d *DDP) Model() *Model { return d.m }

// Rank and Size are the data-parallel group's.
func (d *DDP) Rank() int {
	if d.comm == nil {
		return 0
	}
	return d.comm.Rank()
}

func (d *DDP) Size() int {
	if d.comm == nil {
		return 1
	}
	return d.comm.Size()
}

// Backward runs the model's backward from dL/dy and leaves in every
// gradient its mean over ranks.
func (d *DDP) Backward(ctx context.Context, dy Tensor) error {
	if d.Size() == 1 {
		d.m.Backward(dy, nil)
		return nil
	}
	if d.reducer == nil {
		d.m.Backward(dy, nil)
		return d.allReduce(ctx, d.m.G)
	}
	d.ctx = ctx
	d.m.Backward(dy, d.ready)
	d.ctx = nil
	if err := d.reducer.Wait(ctx); err != nil {
		return fmt.Errorf("all-reduce gradients: %w", err)
	}
	return nil
}

func (d *DDP) onReady(ps []*Param) {
	for _, p := range ps {
		d.reducer.Ready(d.ctx, p.Index)
	}
}

func (d *DDP) allReduce(ctx context.Context, t Tensor) error {
	if h := t.Data(); h != nil || t.Len() == 0 {
		if err := d.comm.AllReduceFloat32(ctx, h, collective.Mean); err != nil {
			return fmt.Errorf("all-reduce gradients: %w", err)
		}
		return nil
	}
	buf := d.staging(t.Len())
	d.m.be.Download(buf, t)
	if err := d.comm.AllReduceFloat32(ctx, buf, collective.Mean); err != nil {
		return fmt.Errorf("all-reduce gradients: %w", err)
	}
	d.m.be.Upload(t, buf)
	return nil
}

func (d *DDP) staging(n int) []float32 {
	if cap(d.stage) < n {
		d.stage = make([]float32, n)
	}
	return d.stage[:n]
}

// Broadcast overwrites ts on every rank with rank 0's values.
func (d *DDP) Broadcast(ctx context.Context, ts ...Tensor) error {
	if d.Size() == 1 {
		return nil
	}
	for _, t := range ts {
		if t.Len() == 0 {
			continue
		}
		if h := t.Data(); h != nil {
			if err := d.comm.BroadcastFloat32(ctx, h, 0); err != nil {
				return fmt.Errorf("broadcast from rank 0: %w", err)
			}
			continue
		}
		buf := d.staging(t.Len())
		d.m.be.Download(buf, t)
		if err := d.comm.BroadcastFloat32(ctx, buf, 0); err != nil {
			return fmt.Errorf("broadcast from rank 0: %w", err)
		}
		d.m.be.Upload(t, buf)
	}
	return nil
}

// SyncBuffers gives every rank rank 0's buffers (BatchNorm running
// statistics). Rank 0's buffers only ever see rank 0's batches, as under
// PyTorch DDP's per-step broadcast; syncing before evaluation and
// checkpoints gives the same values at one collective per epoch.
func (d *DDP) SyncBuffers(ctx context.Context) error {
	return d.Broadcast(ctx, d.m.B)
}

// BroadcastOptimizer gives every rank rank 0's optimizer state (after
// loading a checkpoint only rank 0 may have read).
func (d *DDP) BroadcastOptimizer(ctx context.Context, o *Optimizer) error {
	return d.Broadcast(ctx, o.slots...)
}

// SumFloat64 all-reduces host values (metrics) with a sum.
func (d *DDP) SumFloat64(ctx context.Context, v []float64) error {
	if d.Size() == 1 {
		return nil
	}
	if err := d.comm.AllReduceFloat64(ctx, v, collective.Sum); err != nil {
		return fmt.Errorf("all-reduce metrics: %w", err)
	}
	return nil
}
