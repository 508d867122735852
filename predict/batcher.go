package predict

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of BatcherOptions.
const (
	DefaultMaxBatch = 64
	DefaultMaxWait  = 2 * time.Millisecond
	DefaultMaxQueue = 1024
)

// ErrQueueFull is a request turned away because the Batcher's queue holds
// MaxQueue requests already (the server answers 503).
var ErrQueueFull = errors.New("predict: too many requests queued")

// ErrClosed is a request to a Batcher (or Server) that is closed or shutting
// down.
var ErrClosed = errors.New("predict: closed")

// BatcherOptions configure a Batcher. The zero value is the defaults.
type BatcherOptions struct {
	// MaxBatch is the most rows one Predict of the wrapped predictor gets
	// (default DefaultMaxBatch, 64). A request of MaxBatch rows or more
	// runs alone; 1 turns batching off (each request runs alone, still
	// through the queue and the Concurrency limit).
	MaxBatch int
	// MaxWait is the longest a request waits in the queue for others to
	// join its batch, counted from its arrival (default DefaultMaxWait,
	// 2ms). Negative is no wait: a batch takes what is queued when a
	// worker gets to it. Under load requests queue while every worker is
	// busy, so batches fill without waiting. A batch stops gathering as
	// soon as it holds its share of the requests in flight at once over the
	// last 100–200ms (in Predict; for a Server, between the start and the
	// end of their HTTP requests): that many divided among the Concurrency
	// workers, and no more than are not in running batches. So a lone
	// client is not delayed, N clients in a closed loop do not wait for an
	// N+1st, and their requests keep every worker busy (N/Concurrency a
	// batch: one batch computes while the next one's requests arrive).
	MaxWait time.Duration
	// MaxQueue is the most requests waiting for a worker; one more is
	// ErrQueueFull at once (default DefaultMaxQueue, 1024).
	MaxQueue int
	// Concurrency is the number of batches in Predict at once (default
	// runtime.GOMAXPROCS(0)).
	Concurrency int
}

func (o BatcherOptions) withDefaults() BatcherOptions {
	if o.MaxBatch <= 0 {
		o.MaxBatch = DefaultMaxBatch
	}
	if o.MaxWait == 0 {
		o.MaxWait = DefaultMaxWait
	}
	if o.MaxQueue <= 0 {
		o.MaxQueue = DefaultMaxQueue
	}
	if o.Concurrency <= 0 {
		o.Concurrency = runtime.GOMAXPROCS(0)
	}
	return o
}

// Batcher is a Predictor in front of another that batches concurrent
// requests dynamically: requests whose inputs have the same trailing shapes
// are concatenated along the batch dimension, up to MaxBatch rows, until the
// first has waited MaxWait or until the batch holds its share of the
// requests lately in flight (see MaxWait), run as one Predict, and the
// outputs split back per request. A request that fails Check is rejected
// before it joins a batch; if a batched Predict fails (or panics), every
// request in it gets the error.
//
// Requests queue (at most MaxQueue) for Concurrency workers; one worker at a
// time gathers a batch from the queue while the others run theirs, so that
// under load a batch takes everything that queued meanwhile.
type Batcher struct {
	p    Predictor
	md   Metadata
	opts BatcherOptions
	// shapeKeyed: some input has a -1 beyond the batch dimension, so
	// requests batch together only when those dimensions agree.
	shapeKeyed bool

	mu     sync.RWMutex // closed and sends on queue
	closed bool
	queue  chan *call

	// active counts the requests in flight (in Predict, or for a Server
	// from the start of the HTTP request to its end); peak is the most at
	// once in the current and the previous peakWindow.
	active   atomic.Int64
	peakMu   sync.Mutex
	peakCur  int64
	peakPrev int64
	peakAt   time.Time // start of the current window
	// running counts the requests in batches in Predict.
	running atomic.Int64
	// queued counts the requests waiting for a batch (in queue or pending,
	// not yet taken nor given up).
	queued atomic.Int64
	// onBatch, if set, is told the rows of every batch (a Server's metrics).
	onBatch func(rows int)

	// gather is held by the worker that gathers a batch; pending are
	// requests it took from the queue for a later batch (of other shapes,
	// or that did not fit), oldest first, at most MaxQueue.
	gather  sync.Mutex
	pending []*call
	workers sync.WaitGroup
	once    sync.Once
	err     error
}

// call is one request in a Batcher.
type call struct {
	ctx     context.Context
	inputs  []Tensor // in Metadata order
	rows    int
	key     string
	arrived time.Time
	state   atomic.Int32
	out     []Tensor
	err     error
	done    chan struct{}
}

// States of a call: a worker takes a queued call, or its caller gives up on it.
const (
	callQueued int32 = iota
	callTaken
	callCanceled
)

// take takes a queued call for a batch; false if its caller gave up on it.
func (b *Batcher) take(c *call) bool {
	if c.state.CompareAndSwap(callQueued, callTaken) {
		b.queued.Add(-1)
		return true
	}
	return false
}

// NewBatcher starts a Batcher in front of p; Close stops it and closes p.
func NewBatcher(p Predictor, opts BatcherOptions) *Batcher { return newBatcher(p, opts, nil) }

// newBatcher is NewBatcher with onBatch told the rows of every batch.
func newBatcher(p Predictor, opts BatcherOptions, onBatch func(rows int)) *Batcher {
	opts = opts.withDefaults()
	b := &Batcher{p: p, md: p.Metadata(), opts: opts, queue: make(chan *call, opts.MaxQueue), peakAt: time.Now(), onBatch: onBatch}
	for _, s := range b.md.Inputs {
		for _, d := range s.Shape[min(1, len(s.Shape)):] {
			if d < 0 {
				b.shapeKeyed = true
			}
		}
	}
	b.workers.Add(opts.Concurrency)
	for range opts.Concurrency {
		go b.work()
	}
	return b
}

// Metadata is the wrapped predictor's.
func (b *Batcher) Metadata() Metadata { return b.md }

// Options returns the options in effect, defaults filled in.
func (b *Batcher) Options() BatcherOptions { return b.opts }

// Predict checks in against the model's inputs, queues it and returns its
// own rows of the batch it ran in. A full queue is ErrQueueFull, a closed
// Batcher ErrClosed. If ctx ends while the request is queued, Predict returns
// ctx's error at once; once its batch has started it returns when the batch
// ends.
func (b *Batcher) Predict(ctx context.Context, in Batch) ([]Tensor, error) {
	return b.predict(ctx, in, false)
}

// peakWindow is how long the most requests seen in flight at once counts:
// a batch waits for as many (see next) for up to two windows after the load
// falls.
const peakWindow = 100 * time.Millisecond

// enter counts a request in flight until the returned func is called.
func (b *Batcher) enter() (leave func()) {
	n := b.active.Add(1)
	b.peakMu.Lock()
	if now := time.Now(); now.Sub(b.peakAt) >= peakWindow {
		b.peakPrev, b.peakCur = b.peakCur, 0
		if now.Sub(b.peakAt) >= 2*peakWindow {
			b.peakPrev = 0
		}
		b.peakAt = now
	}
	b.peakCur = max(b.peakCur, n)
	b.peakMu.Unlock()
	return func() { b.active.Add(-1) }
}

// peak is the most requests in flight at once lately.
func (b *Batcher) peak() int64 {
	b.peakMu.Lock()
	defer b.peakMu.Unlock()
	return max(b.peakCur, b.peakPrev, b.active.Load())
}

// target is how many requests a batch being gathered waits for (before
// MaxWait): the requests lately in flight at once shared among the
// workers, so that a closed loop of N clients keeps every worker busy with
// N/Concurrency each (one batch computes while the next one's requests are
// read and decoded) rather than all N in one batch and the cores idle
// around it; and never more than could still come: those in flight less
// those in batches running.
func (b *Batcher) target() int64 {
	peak, conc := b.peak(), int64(b.opts.Concurrency)
	t := (peak + conc - 1) / conc
	return max(1, min(t, peak-b.running.Load()))
}

// predict is Predict; entered says that the caller counted the request in
// flight already (a Server, from the start of the HTTP request).
func (b *Batcher) predict(ctx context.Context, in Batch, entered bool) ([]Tensor, error) {
	if !entered {
		defer b.enter()()
	}
	if err := Check(b.md.Inputs, in); err != nil {
		return nil, err
	}
	c := &call{ctx: ctx, rows: in.Rows(), arrived: time.Now(), done: make(chan struct{})}
	c.inputs = make([]Tensor, len(b.md.Inputs))
	for i, s := range b.md.Inputs {
		t, _ := in.Input(s.Name)
		c.inputs[i] = *t
	}
	if b.shapeKeyed {
		var k strings.Builder
		for _, t := range c.inputs {
			for _, d := range t.Shape[min(1, len(t.Shape)):] {
				k.WriteString(strconv.Itoa(d))
				k.WriteByte(',')
			}
			k.WriteByte(';')
		}
		c.key = k.String()
	}
	b.mu.RLock()
	if b.closed {
		b.mu.RUnlock()
		return nil, ErrClosed
	}
	b.queued.Add(1)
	select {
	case b.queue <- c:
	default:
		b.queued.Add(-1)
		b.mu.RUnlock()
		return nil, fmt.Errorf("%w (%d)", ErrQueueFull, b.opts.MaxQueue)
	}
	b.mu.RUnlock()
	select {
	case <-c.done:
	case <-ctx.Done():
		if c.state.CompareAndSwap(callQueued, callCanceled) {
			b.queued.Add(-1)
			return nil, ctx.Err()
		}
		<-c.done // its batch is running: it still reads c's inputs
	}
	return c.out, c.err
}

// Close stops taking requests, lets the queued ones run, then closes the
// wrapped predictor and returns its error.
func (b *Batcher) Close() error {
	b.once.Do(func() {
		b.mu.Lock()
		b.closed = true
		close(b.queue)
		b.mu.Unlock()
		b.workers.Wait()
		b.err = b.p.Close()
	})
	return b.err
}

func (b *Batcher) work() {
	defer b.workers.Done()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		b.gather.Lock()
		group, rows, ok := b.next(timer)
		b.gather.Unlock()
		if !ok {
			return
		}
		b.run(group, rows)
	}
}

// next gathers the next batch: its first request (the oldest pending one or
// the next in the queue), then every request of the same trailing shapes
// that fits (pending ones first; the others are set aside) until MaxBatch
// rows, the first request's MaxWait, or until the batch holds its share of
// the requests lately in flight (target: waiting longer could only wait for
// requests that are not coming or that another worker will take; a lone
// client is never delayed, 16 clients in a closed loop with 2 workers go in
// batches of 8, each as soon as its 8 are in). A request of no rows runs
// alone. ok is false once the queue is closed and nothing is pending.
func (b *Batcher) next(timer *time.Timer) (group []*call, rows int, ok bool) {
	var first *call
	for first == nil {
		if len(b.pending) > 0 {
			first = b.pending[0]
			b.pending[0] = nil
			b.pending = b.pending[1:]
		} else if first, ok = <-b.queue; !ok {
			return nil, 0, false
		}
		if !b.take(first) {
			first = nil // its caller gave up
		}
	}
	group, rows = []*call{first}, first.rows
	if rows >= b.opts.MaxBatch || rows == 0 {
		return group, rows, true
	}
	// Pending requests of the same shapes join first, oldest first.
	kept := b.pending[:0]
	for _, c := range b.pending {
		if c.key == first.key && c.rows > 0 && rows+c.rows <= b.opts.MaxBatch && b.take(c) {
			group = append(group, c)
			rows += c.rows
		} else if c.state.Load() == callQueued {
			kept = append(kept, c)
		}
	}
	clear(b.pending[len(kept):])
	b.pending = kept
	wait := time.Until(first.arrived.Add(b.opts.MaxWait))
	waiting := false
	defer func() {
		if waiting {
			timer.Stop()
		}
	}()
	for rows < b.opts.MaxBatch && len(b.pending) < b.opts.MaxQueue {
		target := b.target()
		if int64(len(group)) >= target {
			return group, rows, true // the other workers take the rest
		}
		var c *call
		select {
		case c, ok = <-b.queue:
		default:
			if wait <= 0 || int64(len(group)+len(b.pending)) >= target {
				return group, rows, true // no one to wait for
			}
			if !waiting {
				timer.Reset(wait)
				waiting = true
			}
			select {
			case c, ok = <-b.queue:
			case <-timer.C:
				waiting = false
				return group, rows, true
			}
		}
		if !ok {
			return group, rows, true
		}
		if c.key != first.key || c.rows == 0 || rows+c.rows > b.opts.MaxBatch {
			b.pending = append(b.pending, c) // for a later batch
			if c.key == first.key && c.rows > 0 {
				return group, rows, true // this one is full
			}
			continue
		}
		if b.take(c) {
			group = append(group, c)
			rows += c.rows
		}
	}
	return group, rows, true
}

// run predicts one batch and hands every call its rows.
func (b *Batcher) run(group []*call, rows int) {
	if b.onBatch != nil {
		b.onBatch(rows)
	}
	b.running.Add(int64(len(group)))
	defer func() {
		b.running.Add(-int64(len(group)))
		for _, c := range group {
			close(c.done)
		}
	}()
	if len(group) == 1 {
		c := group[0]
		c.out, c.err = b.invoke(c.ctx, c.inputs, rows)
		return
	}
	inputs := concatCalls(group, rows)
	outs, err := b.invoke(context.Background(), inputs, rows)
	if err != nil {
		for _, c := range group {
			c.err = err
		}
		return
	}
	lo := 0
	for _, c := range group {
		c.out = sliceRows(outs, lo, lo+c.rows)
		lo += c.rows
	}
}

// invoke runs the wrapped predictor, turning a panic into an error and
// checking that every output has one row per input row.
func (b *Batcher) invoke(ctx context.Context, inputs []Tensor, rows int) (outs []Tensor, err error) {
	defer func() {
		if r := recover(); r != nil {
			outs, err = nil, fmt.Errorf("predict: %s panicked: %v", b.md.Name, r)
		}
	}()
	outs, err = b.p.Predict(ctx, Batch{Inputs: inputs})
	if err != nil {
		return nil, err
	}
	for i := range outs {
		t := &outs[i]
		if t.Rows() != rows || t.dataLen() != t.Len() {
			return nil, fmt.Errorf("predict: %s gave output %q of shape %v with %d elements for a batch of %d rows",
				b.md.Name, t.Name, t.Shape, t.dataLen(), rows)
		}
	}
	return outs, nil
}

// concatCalls joins the calls' inputs along the batch dimension.
func concatCalls(group []*call, rows int) []Tensor {
	out := make([]Tensor, len(group[0].inputs))
	for i := range out {
		f := &group[0].inputs[i]
		t := Tensor{Name: f.Name, Datatype: f.Datatype, Shape: append([]int{rows}, f.Shape[1:]...)}
		n := t.Len()
		switch t.Datatype {
		case FP32:
			t.FP32 = make([]float32, 0, n)
			for _, c := range group {
				t.FP32 = append(t.FP32, c.inputs[i].FP32...)
			}
		case INT64:
			t.INT64 = make([]int64, 0, n)
			for _, c := range group {
				t.INT64 = append(t.INT64, c.inputs[i].INT64...)
			}
		case BYTES:
			t.Bytes = make([]string, 0, n)
			for _, c := range group {
				t.Bytes = append(t.Bytes, c.inputs[i].Bytes...)
			}
		}
		out[i] = t
	}
	return out
}

// sliceRows returns rows [lo, hi) of each output, sharing their data (capped,
// so that an append by one request cannot reach another's rows).
func sliceRows(outs []Tensor, lo, hi int) []Tensor {
	res := make([]Tensor, len(outs))
	for i := range outs {
		t := &outs[i]
		per := 0
		if r := t.Rows(); r > 0 {
			per = t.Len() / r
		}
		s := Tensor{Name: t.Name, Datatype: t.Datatype, Shape: append([]int{hi - lo}, t.Shape[1:]...)}
		a, z := lo*per, hi*per
		switch t.Datatype {
		case FP32:
			s.FP32 = t.FP32[a:z:z]
		case INT64:
			s.INT64 = t.INT64[a:z:z]
		case BYTES:
			s.Bytes = t.Bytes[a:z:z]
		}
		res[i] = s
	}
	return res
}
