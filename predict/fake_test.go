package predict_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/tempotrain/tempotrain/predict"
)

// fakeModel is a deterministic Predictor that records how it is called.
// Inputs: "x" FP32 [-1, 3] (xDim: its second dimension, -1 for any) and
// "tag" INT64 [-1]. Outputs: "sum" FP32 [-1] (the row's sum plus bias),
// "x2" FP32 [-1, d] (x doubled) and "tag" INT64 [-1] (echoed).
type fakeModel struct {
	name  string
	bias  float32
	xDim  int
	delay time.Duration
	// gate, if set, holds every Predict until it is closed.
	gate chan struct{}
	// fail, if set, is an error (or panic) for some batches.
	fail func(b predict.Batch) error

	mu                 sync.Mutex
	sizes              []int     // rows of each Predict
	tags               [][]int64 // tags of each Predict
	inflight, maxIn    int
	closed             bool
	closes             int
	inflightAtClose    int
	predictsAfterClose int
	lastEnd, closedAt  time.Time
	started            chan struct{} // a token per Predict started, if set
}

func newFake(bias float32) *fakeModel { return &fakeModel{name: "fake", bias: bias, xDim: 3} }

func (f *fakeModel) Metadata() predict.Metadata {
	return predict.Metadata{Name: f.name, Format: "fake",
		Inputs: []predict.TensorSpec{
			{Name: "x", Datatype: predict.FP32, Shape: []int{-1, f.xDim}},
			{Name: "tag", Datatype: predict.INT64, Shape: []int{-1}},
		},
		Outputs: []predict.TensorSpec{
			{Name: "sum", Datatype: predict.FP32, Shape: []int{-1}},
			{Name: "x2", Datatype: predict.FP32, Shape: []int{-1, f.xDim}},
			{Name: "tag", Datatype: predict.INT64, Shape: []int{-1}},
		}}
}

func (f *fakeModel) Predict(ctx context.Context, b predict.Batch) ([]predict.Tensor, error) {
	if err := predict.Check(f.Metadata().Inputs, b); err != nil {
		return nil, err
	}
	x, _ := b.Input("x")
	tag, _ := b.Input("tag")
	rows := x.Rows()
	f.mu.Lock()
	if f.closed {
		f.predictsAfterClose++
		f.mu.Unlock()
		return nil, errors.New("fake: Predict after Close")
	}
	f.inflight++
	f.maxIn = max(f.maxIn, f.inflight)
	f.sizes = append(f.sizes, rows)
	f.tags = append(f.tags, append([]int64(nil), tag.INT64...))
	started := f.started
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.inflight--
		f.lastEnd = time.Now()
		f.mu.Unlock()
	}()
	if started != nil {
		started <- struct{}{}
	}
	if f.gate != nil {
		select {
		case <-f.gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	time.Sleep(f.delay)
	if f.fail != nil {
		if err := f.fail(b); err != nil {
			return nil, err
		}
	}
	d := x.Shape[1]
	sum := predict.Tensor{Name: "sum", Datatype: predict.FP32, Shape: []int{rows}, FP32: make([]float32, rows)}
	x2 := predict.Tensor{Name: "x2", Datatype: predict.FP32, Shape: []int{rows, d}, FP32: make([]float32, rows*d)}
	for r := range rows {
		s := f.bias
		for j := range d {
			v := x.FP32[r*d+j]
			s += v
			x2.FP32[r*d+j] = 2 * v
		}
		sum.FP32[r] = s
	}
	echo := predict.Tensor{Name: "tag", Datatype: predict.INT64, Shape: []int{rows}, INT64: append([]int64(nil), tag.INT64...)}
	return []predict.Tensor{sum, x2, echo}, nil
}

func (f *fakeModel) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closes++
	f.closed = true
	f.inflightAtClose = f.inflight
	f.closedAt = time.Now()
	return nil
}

// stats returns the rows of every Predict so far.
func (f *fakeModel) stats() (sizes []int, closed bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]int(nil), f.sizes...), f.closed
}

// fakeBatch is one request of rows rows: row i has x = [tag+i, tag+i+0.5,
// -(tag+i)] and tag tag+i.
func fakeBatch(tag, rows, d int) predict.Batch {
	x := predict.Tensor{Name: "x", Datatype: predict.FP32, Shape: []int{rows, d}}
	t := predict.Tensor{Name: "tag", Datatype: predict.INT64, Shape: []int{rows}}
	for i := range rows {
		v := float32(tag + i)
		for j := range d {
			x.FP32 = append(x.FP32, fakeX(v, j))
		}
		t.INT64 = append(t.INT64, int64(tag+i))
	}
	return predict.Batch{Inputs: []predict.Tensor{x, t}}
}

func fakeX(v float32, j int) float32 {
	switch j % 3 {
	case 0:
		return v
	case 1:
		return v + 0.5
	}
	return -v / 4
}

// checkFakeOutputs checks that outs are the fake's outputs (with bias) for
// fakeBatch(tag, rows, d).
func checkFakeOutputs(outs []predict.Tensor, bias float32, tag, rows, d int) error {
	if len(outs) != 3 {
		return fmt.Errorf("%d outputs", len(outs))
	}
	for i := range rows {
		v := float32(tag + i)
		want := bias
		for j := range d {
			want += fakeX(v, j)
			if got := outs[1].FP32[i*d+j]; got != 2*fakeX(v, j) {
				return fmt.Errorf("row %d: x2[%d] = %v, want %v", i, j, got, 2*fakeX(v, j))
			}
		}
		if outs[0].FP32[i] != want || outs[2].INT64[i] != int64(tag+i) {
			return fmt.Errorf("row %d of request %d: sum %v tag %d, want %v %d", i, tag, outs[0].FP32[i], outs[2].INT64[i], want, tag+i)
		}
	}
	if outs[0].Rows() != rows || outs[1].Rows() != rows || len(outs[1].FP32) != rows*d {
		return fmt.Errorf("shapes %v %v %v for %d rows", outs[0].Shape, outs[1].Shape, outs[2].Shape, rows)
	}
	return nil
}
