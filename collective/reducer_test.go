package collective

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// model returns per-rank gradients of a model with the given parameter
// lengths; value(r, p, i) fills them.
func model(ranks int, lengths []int, value func(r, p, i int) float32) [][][]float32 {
	grads := make([][][]float32, ranks)
	for r := range ranks {
		grads[r] = make([][]float32, len(lengths))
		for p, n := range lengths {
			grads[r][p] = make([]float32, n)
			for i := range n {
				grads[r][p][i] = value(r, p, i)
			}
		}
	}
	return grads
}

// unbucketed averages each rank's gradients with one AllReduce of all of
// them, concatenated: the reference.
func unbucketed(t *testing.T, comms []*Comm, grads [][][]float32) [][][]float32 {
	t.Helper()
	out := make([][][]float32, len(comms))
	noErrors(t, "reference AllReduce", each(len(comms), func(r int) error {
		var flat []float32
		for _, g := range grads[r] {
			flat = append(flat, g...)
		}
		if err := comms[r].AllReduceFloat32(context.Background(), flat, Mean); err != nil {
			return err
		}
		for _, g := range grads[r] {
			out[r] = append(out[r], flat[:len(g):len(g)])
			flat = flat[len(g):]
		}
		return nil
	}))
	return out
}

// step runs one bucketed step on every rank, each rank marking its gradients
// ready in its own random order.
func step(t *testing.T, comms []*Comm, reducers []*Reducer, seed uint64) {
	t.Helper()
	noErrors(t, "bucketed step", each(len(comms), func(r int) error {
		order := rand.New(rand.NewPCG(seed, uint64(r))).Perm(len(reducers[r].grads))
		for _, i := range order {
			reducers[r].Ready(context.Background(), i)
		}
		return reducers[r].Wait(context.Background())
	}))
}

var testLengths = []int{3, 0, 1000, 17, 1 << 16, 5, 4096, 1, 77777, 12, 300, 9}

func TestReducerEqualsUnbucketed(t *testing.T) {
	t.Parallel()
	const ranks = 4
	for _, tc := range []struct {
		name  string
		value func(r, p, i int) float32
		tol   float64
	}{
		// Integer values sum exactly whatever the order: bit for bit.
		{"integers", func(r, p, i int) float32 { return float32((r+1)*(p+3) + i%1000) }, 0},
		// Positive random values: only the summation order differs.
		{"random", func(r, p, i int) float32 {
			return 0.5 + float32(rand.New(rand.NewPCG(uint64(r), uint64(p*1_000_003+i))).Float64())
		}, 1e-6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			comms := newGroup(t, ranks, Options{SegmentBytes: 1 << 14})
			grads := model(ranks, testLengths, tc.value)
			want := unbucketed(t, comms, grads)
			reducers := make([]*Reducer, ranks)
			for r := range ranks {
				var err error
				if reducers[r], err = NewReducer(comms[r], grads[r], 64<<10); err != nil {
					t.Fatal(err)
				}
			}
			if reducers[0].NumBuckets() < 3 {
				t.Fatalf("%d buckets: the test wants several", reducers[0].NumBuckets())
			}
			step(t, comms, reducers, 1)
			for r := range ranks {
				for p := range grads[r] {
					for i, got := range grads[r][p] {
						w := want[r][p][i]
						if tc.tol == 0 && got != w || math.Abs(float64(got-w)) > tc.tol*math.Abs(float64(w)) {
							t.Fatalf("rank %d param %d [%d]: bucketed %v, unbucketed %v", r, p, i, got, w)
						}
					}
				}
			}
		})
	}
}

// Buckets are packed from the last parameter backwards, about bucketBytes
// each, the same on every rank.
func TestReducerBucketLayout(t *testing.T) {
	t.Parallel()
	comms := newGroup(t, 1, Options{})
	r, err := NewReducer(comms[0], make([][]float32, 0), 0)
	if err != nil || r.NumBuckets() != 0 {
		t.Fatalf("no gradients: %v buckets, %v", r.NumBuckets(), err)
	}
	grads := model(1, []int{10, 10, 10, 30, 10}, func(int, int, int) float32 { return 0 })[0]
	r, err = NewReducer(comms[0], grads, 80) // 20 floats
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for b := range r.NumBuckets() {
		got = append(got, fmt.Sprint(r.Bucket(b)))
	}
	if want := "[4 3] [2 1] [0]"; strings.Join(got, " ") != want {
		t.Fatalf("buckets %s, want %s", strings.Join(got, " "), want)
	}
	if _, err := NewReducer(comms[0], grads, -1); err == nil {
		t.Fatal("negative bucketBytes accepted")
	}
}

// A bucket's all-reduce runs while the caller is still producing other
// gradients: every rank waits for bucket 0 to be done before it marks the
// remaining gradients ready.
func TestReducerOverlapsBackward(t *testing.T) {
	t.Parallel()
	const ranks = 3
	comms := newGroup(t, ranks, Options{})
	grads := model(ranks, testLengths, func(r, p, i int) float32 { return float32(r) })
	noErrors(t, "overlapped step", each(ranks, func(r int) error {
		red, err := NewReducer(comms[r], grads[r], 64<<10)
		if err != nil {
			return err
		}
		first := make(chan struct{}, red.NumBuckets())
		red.onBucketDone = func(b int) {
			if b == 0 {
				first <- struct{}{}
			}
		}
		for _, i := range red.Bucket(0) {
			red.Ready(context.Background(), i)
		}
		select {
		case <-first:
		case <-time.After(20 * time.Second):
			return fmt.Errorf("bucket 0 did not complete before Wait: no overlap")
		}
		for i := range grads[r] {
			if !red.ready[i] {
				red.Ready(context.Background(), i)
			}
		}
		if err := red.Wait(context.Background()); err != nil {
			return err
		}
		// A second step reuses the Reducer.
		for i := range grads[r] {
			red.Ready(context.Background(), len(grads[r])-1-i)
		}
		return red.Wait(context.Background())
	}))
	for r := range ranks {
		for p, g := range grads[r] {
			for i, v := range g {
				if v != 1 { // mean of 0, 1, 2, twice
					t.Fatalf("rank %d param %d [%d] = %v, want 1", r, p, i, v)
				}
			}
		}
	}
}

func TestReducerMisuse(t *testing.T) {
	t.Parallel()
	comms := newGroup(t, 2, Options{Timeout: 2 * time.Second})
	errs := each(2, func(r int) error {
		red, err := NewReducer(comms[r], model(1, []int{4, 4, 4}, func(int, int, int) float32 { return 1 })[0], 16)
		if err != nil {
			return err
		}
		red.Ready(context.Background(), 2)
		red.Ready(context.Background(), 2)
		red.Ready(context.Background(), 7)
		return red.Wait(context.Background()) // gradients 0 and 1 never ready
	})
	for r, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "twice") || !strings.Contains(err.Error(), "no such gradient") ||
			!strings.Contains(err.Error(), "never marked ready") {
			t.Errorf("rank %d: %v, want the three misuses", r, err)
		}
	}
}

// arena lays gradients of the given lengths out as adjacent slices of one
// array, as a model's gradient arena does; capped caps gradient i at its
// own length (a slice that cannot reach its neighbours).
func arena(lengths []int, capped map[int]bool) [][]float32 {
	total := 0
	for _, n := range lengths {
		total += n
	}
	all := make([]float32, total)
	grads := make([][]float32, len(lengths))
	off := 0
	for i, n := range lengths {
		grads[i] = all[off:]
		if capped[i] {
			grads[i] = all[off : off+n : off+n]
		}
		grads[i] = grads[i][:n]
		off += n
	}
	return grads
}

// Gradients in one arena are reduced in place, bucket by bucket (no copies),
// with the same bits as separately allocated gradients; a gradient that
// cannot reach its neighbours puts its bucket back on copies; ranks may
// differ in which buckets are views.
func TestReducerBucketViews(t *testing.T) {
	t.Parallel()
	const ranks = 3
	value := func(r, p, i int) float32 {
		return 0.5 + float32(rand.New(rand.NewPCG(uint64(r), uint64(p*1_000_003+i))).Float64())
	}
	comms := newGroup(t, ranks, Options{SegmentBytes: 1 << 14})
	apart := model(ranks, testLengths, value)
	inArena := make([][][]float32, ranks)
	for r := range ranks {
		var capped map[int]bool
		if r == 1 {
			// The first gradient of bucket 0 (77777, 12, 300, 9 floats): its
			// slice stops short of the others, so the bucket cannot be it.
			capped = map[int]bool{len(testLengths) - 4: true}
		}
		inArena[r] = arena(testLengths, capped)
		for p := range apart[r] {
			copy(inArena[r][p], apart[r][p])
		}
	}
	for _, grads := range [][][][]float32{apart, inArena} {
		reducers := make([]*Reducer, ranks)
		for r := range ranks {
			var err error
			if reducers[r], err = NewReducer(comms[r], grads[r], 64<<10); err != nil {
				t.Fatal(err)
			}
			for b := range reducers[r].NumBuckets() {
				want := &grads[0] == &inArena[0] && !(r == 1 && b == 0)
				if reducers[r].InPlace(b) != want {
					t.Fatalf("rank %d bucket %d: in place %v, want %v", r, b, reducers[r].InPlace(b), want)
				}
			}
		}
		step(t, comms, reducers, 3)
	}
	for r := range ranks {
		for p := range apart[r] {
			if !bytes.Equal(bytesOf(apart[r][p]), bytesOf(inArena[r][p])) {
				t.Fatalf("rank %d param %d: bucket views give other bits than copies", r, p)
			}
		}
	}
}
