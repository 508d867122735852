package collective

// Gradient buckets, as PyTorch DDP's Reducer.
//
// A model's gradients (one slice per parameter, in registration order) are
// packed into buckets of about bucketBytes, filled in reverse registration
// order, because backward produces the last layers' gradients first. Ready(i)
// copies gradient i into its bucket's flat buffer; when the bucket's last
// gradient arrives, the bucket is issued: a worker goroutine runs its mean
// all-reduce while backward goes on computing earlier layers. Buckets are
// issued strictly in bucket order (bucket 1 waits for bucket 0 even if it is
// complete first), so every rank runs the same all-reduces in the same order
// whatever order its gradients become ready in. After a bucket's all-reduce
// the worker copies the averaged values back into the gradient slices. Wait
// returns when every bucket of the step is done and resets for the next step.
//
// The layout is a function of the gradients' lengths and bucketBytes only,
// so it is identical on every rank: a bucket holds a run of consecutive
// gradients, lo..hi, laid out in index order.
//
// Bucket views (DDP's gradient_as_bucket_view): when a bucket's gradients
// are adjacent slices of one array, as a model's gradient arena makes them
// (compute's are), the bucket is that stretch of the array itself: Ready
// copies nothing, the all-reduce works on the gradients in place and nothing
// is copied back. Other buckets (gradients allocated apart, or slices capped
// short of their neighbours) are packed and unpacked as above. The element
// layout is the same either way, so ranks may differ in which buckets are
// views.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
)

// DefaultBucketBytes is the default bucket size of NewReducer, DDP's 25 MiB.
const DefaultBucketBytes = 25 << 20

// Reducer averages gradients across the ranks of a Comm in buckets that
// overlap the backward pass. Ready and Wait may be called from different
// goroutines; no other operation may run on the Comm between the first Ready
// of a step and Wait (the Comm runs one operation at a time and the ranks
// must agree on the order). Between Ready(i) and Wait, gradient i belongs to
// the Reducer: the caller must neither read nor write it.
type Reducer struct {
	c       *Comm
	grads   [][]float32
	buckets []bucket
	slots   []slot // per gradient: where it sits in its bucket

	mu         sync.Mutex
	ready      []bool
	next       int // next bucket to issue
	running    bool
	queue      chan int   // issued buckets, to the worker; never blocks (capacity = buckets)
	done       chan error // the worker's first error, once per step
	stepCtx    context.Context
	stepCancel context.CancelFunc
	misuse     error // a Ready out of range or repeated, reported by Wait

	onBucketDone func(b int) // tests: called after bucket b is written back
}

type bucket struct {
	flat    []float32
	grads   []int // gradient indices, in packing order
	pending int   // gradients of this step not yet ready
	view    bool  // flat is the gradients' own memory: no copies
}

type slot struct{ bucket, offset int }

// NewReducer groups grads (one slice per parameter, in registration order)
// into buckets of about bucketBytes (DefaultBucketBytes when 0), filled in
// reverse registration order; a gradient larger than bucketBytes gets a
// bucket of its own. The slices must keep their lengths; their contents are
// read at Ready and overwritten with the mean before Wait returns.
func NewReducer(c *Comm, grads [][]float32, bucketBytes int) (*Reducer, error) {
	if c == nil {
		return nil, errors.New("collective: NewReducer: nil Comm")
	}
	if bucketBytes < 0 {
		return nil, fmt.Errorf("collective: NewReducer: bucketBytes %d: must be >= 0", bucketBytes)
	}
	if bucketBytes == 0 {
		bucketBytes = DefaultBucketBytes
	}
	r := &Reducer{c: c, grads: grads, slots: make([]slot, len(grads)), ready: make([]bool, len(grads))}
	var cur *bucket
	size := 0
	for i := len(grads) - 1; i >= 0; i-- {
		if cur == nil {
			r.buckets = append(r.buckets, bucket{})
			cur, size = &r.buckets[len(r.buckets)-1], 0
		}
		r.slots[i] = slot{bucket: len(r.buckets) - 1}
		cur.grads = append(cur.grads, i)
		size += len(grads[i])
		if 4*size >= bucketBytes {
			cur = nil
		}
	}
	for b := range r.buckets {
		r.layOut(&r.buckets[b])
	}
	r.queue = make(chan int, len(r.buckets))
	r.done = make(chan error, 1)
	r.reset()
	return r, nil
}

// layOut places a bucket's gradients (a run lo..hi, listed from hi down) in
// index order and makes the bucket a view of them if they are adjacent.
func (r *Reducer) layOut(b *bucket) {
	lo := b.grads[len(b.grads)-1]
	size := 0
	for _, i := range slices.Backward(b.grads) {
		r.slots[i].offset = size
		size += len(r.grads[i])
	}
	if g := r.grads[lo]; size > 0 && cap(g) >= size {
		// The first gradient's array reaches over the whole bucket; it is
		// the bucket if every gradient sits where the layout puts it.
		view := g[:size:size]
		b.view = true
		for _, i := range b.grads {
			if len(r.grads[i]) > 0 && &view[r.slots[i].offset] != &r.grads[i][0] {
				b.view = false
			}
		}
		if b.view {
			b.flat = view
			return
		}
	}
	b.flat = make([]float32, size)
}

// InPlace reports whether bucket b is a view of its gradients (no copies).
func (r *Reducer) InPlace(b int) bool { return r.buckets[b].view }

// NumBuckets is the number of buckets; Bucket(b) lists the gradient indices
// of bucket b in packing order (bucket 0 holds the last-registered ones).
func (r *Reducer) NumBuckets() int { return len(r.buckets) }

// Bucket returns the gradient indices of bucket b.
func (r *Reducer) Bucket(b int) []int { return append([]int(nil), r.buckets[b].grads...) }

func (r *Reducer) reset() {
	for b := range r.buckets {
		r.buckets[b].pending = len(r.buckets[b].grads)
	}
	clear(r.ready)
	r.next, r.running, r.misuse = 0, false, nil
	r.stepCtx, r.stepCancel = nil, nil
}

// Ready says gradient i is final for this step. It copies the gradient into
// its bucket; when that completes the bucket (and every bucket before it has
// been issued), the bucket's mean all-reduce starts in the background. The
// first Ready of a step binds the step to ctx: cancelling it fails the
// step's all-reduces.
func (r *Reducer) Ready(ctx context.Context, i int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case i < 0 || i >= len(r.grads):
		r.misuse = errors.Join(r.misuse, fmt.Errorf("Ready(%d): no such gradient (have %d)", i, len(r.grads)))
		return
	case r.ready[i]:
		r.misuse = errors.Join(r.misuse, fmt.Errorf("Ready(%d) twice in one step", i))
		return
	}
	if r.stepCtx == nil {
		r.stepCtx, r.stepCancel = context.WithCancel(ctx)
	}
	r.ready[i] = true
	s := r.slots[i]
	b := &r.buckets[s.bucket]
	if !b.view {
		copy(b.flat[s.offset:], r.grads[i])
	}
	b.pending--
	for r.next < len(r.buckets) && r.buckets[r.next].pending == 0 {
		if !r.running {
			r.running = true
			go r.work(r.stepCtx)
		}
		r.queue <- r.next
		r.next++
	}
}

// work runs one step's all-reduces, bucket by bucket, in issue order.
func (r *Reducer) work(ctx context.Context) {
	var first error
	for range r.buckets {
		b := <-r.queue
		if b < 0 { // Wait gave up on buckets that were never issued
			continue
		}
		bk := &r.buckets[b]
		if err := r.c.AllReduceFloat32(ctx, bk.flat, Mean); err != nil {
			if first == nil {
				first = fmt.Errorf("bucket %d of %d: %w", b, len(r.buckets), err)
			}
			continue
		}
		if !bk.view {
			for _, i := range bk.grads {
				off := r.slots[i].offset
				copy(r.grads[i], bk.flat[off:off+len(r.grads[i])])
			}
		}
		if r.onBucketDone != nil {
			r.onBucketDone(b)
		}
	}
	r.done <- first
}

// Wait waits for every bucket of this step, then resets the Reducer for the
// next step. It returns the first error of the step's all-reduces, or an
// error if some gradient was never marked ready (then no all-reduce of the
// buckets from the first incomplete one on has run on this rank, and the
// other ranks' will fail at their deadline). Cancelling ctx cancels the
// step's all-reduces; Wait still returns only once the worker has stopped.
func (r *Reducer) Wait(ctx context.Context) error {
	r.mu.Lock()
	running, misuse, cancel := r.running, r.misuse, r.stepCancel
	var missing []int
	for i, ok := range r.ready {
		if !ok && len(missing) < 8 {
			missing = append(missing, i)
		}
	}
	r.mu.Unlock()
	var err error
	if running {
		stop := context.AfterFunc(ctx, cancel)
		if len(missing) > 0 {
			// The worker waits for buckets that will never be issued.
			cancel()
			for range len(r.buckets) - r.next {
				r.queue <- -1
			}
		}
		err = <-r.done
		stop()
	}
	if cancel != nil {
		cancel()
	}
	if len(missing) > 0 {
		err = errors.Join(fmt.Errorf("gradients never marked ready this step (first: %v)", missing), err)
	}
	r.mu.Lock()
	r.reset()
	r.mu.Unlock()
	if err = errors.Join(misuse, err); err != nil {
		return fmt.Errorf("collective: rank %d: Reducer: %w", r.c.rank, err)
	}
	return nil
}
