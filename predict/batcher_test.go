package predict_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tempotrain/tempotrain/predict"
)

// concurrently runs f(0..n-1) in n goroutines and waits for them.
func concurrently(n int, f func(i int)) {
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(i)
		}()
	}
	wg.Wait()
}

// TestBatcherBatchesAndRoutes: 64 concurrent requests of 1 to 3 rows are
// served by far fewer Predict calls, none over MaxBatch rows, and every
// request gets exactly its own rows back.
func TestBatcherBatchesAndRoutes(t *testing.T) {
	f := newFake(0.25)
	f.delay = 2 * time.Millisecond
	b := predict.NewBatcher(f, predict.BatcherOptions{MaxBatch: 16, MaxWait: 20 * time.Millisecond})
	defer b.Close()
	concurrently(64, func(i int) {
		rows := 1 + i%3
		outs, err := b.Predict(context.Background(), fakeBatch(100*i, rows, 3))
		if err != nil {
			t.Error(err)
			return
		}
		if err := checkFakeOutputs(outs, 0.25, 100*i, rows, 3); err != nil {
			t.Errorf("request %d: %v", i, err)
		}
	})
	sizes, _ := f.stats()
	total := 0
	for _, s := range sizes {
		total += s
		if s > 16 {
			t.Errorf("a batch of %d rows, MaxBatch 16", s)
		}
	}
	want := 0
	for i := range 64 {
		want += 1 + i%3
	}
	if total != want {
		t.Errorf("%d rows predicted, the requests had %d", total, want)
	}
	if len(sizes) > 16 {
		t.Errorf("64 requests took %d Predict calls (%v), want far fewer", len(sizes), sizes)
	}
	t.Logf("64 requests, %d Predict calls: %v", len(sizes), sizes)
}

// TestBatcherOff: MaxBatch 1 runs every request alone.
func TestBatcherOff(t *testing.T) {
	f := newFake(0)
	b := predict.NewBatcher(f, predict.BatcherOptions{MaxBatch: 1})
	concurrently(32, func(i int) {
		outs, err := b.Predict(context.Background(), fakeBatch(i, 1, 3))
		if err == nil {
			err = checkFakeOutputs(outs, 0, i, 1, 3)
		}
		if err != nil {
			t.Error(err)
		}
	})
	b.Close()
	if sizes, closed := f.stats(); len(sizes) != 32 || !closed {
		t.Errorf("%d Predict calls for 32 requests, closed %v", len(sizes), closed)
	}
}

// TestBatcherLargeRequestAlone: a request of MaxBatch rows or more runs
// alone and whole.
func TestBatcherLargeRequestAlone(t *testing.T) {
	f := newFake(0)
	b := predict.NewBatcher(f, predict.BatcherOptions{MaxBatch: 8})
	defer b.Close()
	outs, err := b.Predict(context.Background(), fakeBatch(5, 20, 3))
	if err == nil {
		err = checkFakeOutputs(outs, 0, 5, 20, 3)
	}
	if err != nil {
		t.Fatal(err)
	}
	if sizes, _ := f.stats(); len(sizes) != 1 || sizes[0] != 20 {
		t.Errorf("Predict calls %v", sizes)
	}
}

// TestBatcherBadInputRejectedAlone: a request that fails Check is rejected
// before it joins a batch, with the input named, and the others succeed.
func TestBatcherBadInputRejectedAlone(t *testing.T) {
	f := newFake(0)
	f.delay = time.Millisecond
	b := predict.NewBatcher(f, predict.BatcherOptions{MaxWait: 10 * time.Millisecond})
	defer b.Close()
	concurrently(40, func(i int) {
		in := fakeBatch(10*i, 1, 3)
		if i%10 == 3 {
			in.Inputs[0].Shape = []int{1, 4} // the model takes [-1 3]
		}
		outs, err := b.Predict(context.Background(), in)
		if i%10 == 3 {
			if !errors.Is(err, predict.ErrInvalidInput) || !strings.Contains(err.Error(), `input "x"`) {
				t.Errorf("bad request %d: %v", i, err)
			}
			return
		}
		if err == nil {
			err = checkFakeOutputs(outs, 0, 10*i, 1, 3)
		}
		if err != nil {
			t.Errorf("good request %d: %v", i, err)
		}
	})
	sizes, _ := f.stats()
	rows := 0
	for _, s := range sizes {
		rows += s
	}
	if rows != 36 {
		t.Errorf("%d rows predicted, want the 36 good ones", rows)
	}
}

// TestBatcherFailedBatch: when a batched Predict fails (or panics), every
// request in that batch gets the error and the requests of other batches
// do not.
func TestBatcherFailedBatch(t *testing.T) {
	for _, panics := range []bool{false, true} {
		f := newFake(0)
		f.delay = time.Millisecond
		f.fail = func(in predict.Batch) error {
			tag, _ := in.Input("tag")
			for _, v := range tag.INT64 {
				if v == 13 {
					if panics {
						panic("tag 13")
					}
					return errors.New("unlucky tag 13")
				}
			}
			return nil
		}
		b := predict.NewBatcher(f, predict.BatcherOptions{MaxBatch: 8, MaxWait: 10 * time.Millisecond})
		errs := make([]error, 48)
		concurrently(48, func(i int) {
			_, errs[i] = b.Predict(context.Background(), fakeBatch(i, 1, 3))
		})
		b.Close()
		// The batches the fake saw: the one with tag 13 fails as a whole.
		f.mu.Lock()
		failed := map[int64]bool{}
		for _, tags := range f.tags {
			bad := false
			for _, v := range tags {
				bad = bad || v == 13
			}
			for _, v := range tags {
				failed[v] = bad
			}
		}
		f.mu.Unlock()
		nFailed := 0
		for i, err := range errs {
			want := "unlucky tag 13"
			if panics {
				want = "panicked: tag 13"
			}
			if failed[int64(i)] {
				nFailed++
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("request %d in the failed batch: %v", i, err)
				}
			} else if err != nil {
				t.Errorf("request %d in a good batch: %v", i, err)
			}
		}
		if nFailed < 2 {
			t.Logf("the failed batch had %d request(s)", nFailed)
		}
	}
}

// TestBatcherShapeKeyed: an input whose trailing dimension is free batches
// only with requests of the same trailing shape.
func TestBatcherShapeKeyed(t *testing.T) {
	f := newFake(1)
	f.xDim = -1
	f.delay = time.Millisecond
	b := predict.NewBatcher(f, predict.BatcherOptions{MaxWait: 10 * time.Millisecond})
	defer b.Close()
	concurrently(40, func(i int) {
		d := 2 + i%3
		outs, err := b.Predict(context.Background(), fakeBatch(i, 1, d))
		if err == nil {
			err = checkFakeOutputs(outs, 1, i, 1, d)
		}
		if err != nil {
			t.Errorf("request %d (d=%d): %v", i, d, err)
		}
	})
	if sizes, _ := f.stats(); len(sizes) > 20 {
		t.Errorf("%d Predict calls for 40 requests of 3 shapes: %v", len(sizes), sizes)
	}
}

// TestBatcherQueueFull: with every worker busy and MaxQueue requests
// queued, more are ErrQueueFull at once; the queued ones still run.
func TestBatcherQueueFull(t *testing.T) {
	f := newFake(0)
	f.gate = make(chan struct{})
	f.started = make(chan struct{}, 8)
	b := predict.NewBatcher(f, predict.BatcherOptions{Concurrency: 1, MaxQueue: 2, MaxBatch: 1})
	defer b.Close()
	errs := make(chan error, 8)
	run := func(tag int) {
		go func() {
			_, err := b.Predict(context.Background(), fakeBatch(tag, 1, 3))
			errs <- err
		}()
	}
	run(0)
	<-f.started // the only worker is busy until the gate opens
	for i := 1; i < 8; i++ {
		run(i)
	}
	// 2 of the 7 queue, 5 are turned away.
	for range 5 {
		if err := <-errs; !errors.Is(err, predict.ErrQueueFull) {
			t.Fatalf("with the queue full: %v", err)
		}
	}
	close(f.gate)
	for range 3 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

// TestBatcherCanceledWhileQueued: a request whose context ends while it is
// queued returns at once and is never predicted.
func TestBatcherCanceledWhileQueued(t *testing.T) {
	f := newFake(0)
	f.gate = make(chan struct{})
	f.started = make(chan struct{}, 8)
	b := predict.NewBatcher(f, predict.BatcherOptions{Concurrency: 1, MaxBatch: 1})
	done := make(chan error, 1)
	go func() {
		_, err := b.Predict(context.Background(), fakeBatch(1, 1, 3))
		done <- err
	}()
	<-f.started
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := b.Predict(ctx, fakeBatch(2, 1, 3)); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("queued request: %v", err)
	}
	close(f.gate)
	if err := <-done; err != nil {
		t.Error(err)
	}
	b.Close()
	if sizes, _ := f.stats(); len(sizes) != 1 {
		t.Errorf("Predict calls %v: the canceled request ran", sizes)
	}
}

// TestBatcherCloseDrains: Close lets queued requests finish, then closes the
// predictor; later requests are ErrClosed.
func TestBatcherCloseDrains(t *testing.T) {
	f := newFake(0)
	f.delay = 5 * time.Millisecond
	b := predict.NewBatcher(f, predict.BatcherOptions{MaxBatch: 2, Concurrency: 1})
	var wg sync.WaitGroup
	for i := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := b.Predict(context.Background(), fakeBatch(i, 1, 3)); err != nil && !errors.Is(err, predict.ErrClosed) {
				t.Error(err)
			}
		}()
	}
	time.Sleep(2 * time.Millisecond)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	f.mu.Lock()
	if f.inflightAtClose != 0 || f.predictsAfterClose != 0 || f.closes != 1 {
		t.Errorf("closed with %d in flight, %d Predicts after, %d Closes", f.inflightAtClose, f.predictsAfterClose, f.closes)
	}
	f.mu.Unlock()
	if _, err := b.Predict(context.Background(), fakeBatch(1, 1, 3)); !errors.Is(err, predict.ErrClosed) {
		t.Errorf("after Close: %v", err)
	}
	b.Close() // twice is fine
}

// TestBatcherLoneCallerNotDelayed: a batch stops waiting once it holds its
// share of the requests lately in flight, so a caller alone does not wait
// out MaxWait, while concurrent callers batch.
func TestBatcherLoneCallerNotDelayed(t *testing.T) {
	f := newFake(0)
	b := predict.NewBatcher(f, predict.BatcherOptions{MaxWait: time.Second})
	defer b.Close()
	start := time.Now()
	for i := range 5 {
		if _, err := b.Predict(context.Background(), fakeBatch(i, 1, 3)); err != nil {
			t.Fatal(err)
		}
	}
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Errorf("5 requests one after the other took %v with MaxWait 1s", d)
	}
	// 8 callers in a closed loop: once all 8 have been in flight, their
	// batches fill without waiting for a ninth. (When the load falls, the
	// last batches wait out MaxWait for a while: the peak lasts up to
	// 200ms.)
	f = newFake(0)
	f.delay = time.Millisecond
	b2 := predict.NewBatcher(f, predict.BatcherOptions{MaxWait: 20 * time.Millisecond})
	defer b2.Close()
	start = time.Now()
	concurrently(8, func(i int) {
		for j := range 20 {
			if _, err := b2.Predict(context.Background(), fakeBatch(100*i+j, 1, 3)); err != nil {
				t.Error(err)
			}
		}
	})
	sizes, _ := f.stats()
	d := time.Since(start)
	if d > 5*time.Second || len(sizes) > 160/2 {
		t.Errorf("8 callers × 20 requests: %v, %d Predict calls", d, len(sizes))
	}
	t.Logf("8 callers × 20 requests: %v, %d Predict calls", d, len(sizes))
}

// TestBatcherClosedLoopKeepsWorkersBusy: N callers in a closed loop are
// served in batches of about N/Concurrency, two running at once, rather than
// all N in one batch while the other worker idles (how many a batch waits
// for: TestBatcherTarget).
func TestBatcherClosedLoopKeepsWorkersBusy(t *testing.T) {
	f := newFake(0)
	f.delay = 2 * time.Millisecond
	b := predict.NewBatcher(f, predict.BatcherOptions{MaxWait: 20 * time.Millisecond, Concurrency: 2})
	defer b.Close()
	start := time.Now()
	concurrently(16, func(i int) {
		for j := range 30 {
			if _, err := b.Predict(context.Background(), fakeBatch(1000*i+j, 1, 3)); err != nil {
				t.Error(err)
			}
		}
	})
	d := time.Since(start)
	sizes, _ := f.stats()
	f.mu.Lock()
	maxIn := f.maxIn
	f.mu.Unlock()
	big := 0
	for _, s := range sizes {
		if s > 8 {
			big++
		}
	}
	t.Logf("16 callers × 30 requests: %v, %d Predict calls, %d of more than 8 rows, at most %d at once", d, len(sizes), big, maxIn)
	if maxIn < 2 {
		t.Errorf("at most %d Predict at once, want 2: one worker idled while the other ran", maxIn)
	}
	if big > len(sizes)/4 {
		t.Errorf("%d of %d batches over 8 rows: the callers were not shared between the workers", big, len(sizes))
	}
}
