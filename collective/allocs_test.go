package collective

import (
	"context"
	"testing"
)

// A steady-state operation allocates nothing, on any rank: AllocsPerRun
// counts every allocation of the process, and all ranks run in it. Not
// parallel, so that no other test's allocations are counted.
func TestOperationsAllocateNothing(t *testing.T) {
	const n = 3
	comms := newGroup(t, n, Options{SegmentBytes: 1 << 16})
	f32 := make([][]float32, n)
	f64 := make([][]float64, n)
	raw := make([][]byte, n)
	for r := range n {
		f32[r], f64[r], raw[r] = make([]float32, 100_003), make([]float64, 50_001), make([]byte, 300_000)
	}
	// Once the group has a shared buffer, a large all-reduce first asks
	// where every rank's buffer is: the ring's case above then pays that
	// exchange, and the shared case runs the direct all-reduce.
	shared := allocShared(t, comms, 4*100_003)
	cancellable, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, tc := range []struct {
		name string
		f    func(r int) error
	}{
		{"AllReduceFloat32", func(r int) error { return comms[r].AllReduceFloat32(context.Background(), f32[r], Sum) }},
		{"AllReduceFloat64Mean", func(r int) error { return comms[r].AllReduceFloat64(context.Background(), f64[r], Mean) }},
		{"AllReduceFloat32CancellableContext", func(r int) error { return comms[r].AllReduceFloat32(cancellable, f32[r], Mean) }},
		{"AllReduceFloat32Shared", func(r int) error {
			return comms[r].AllReduceFloat32(context.Background(), shared[r].Float32s()[:100_003], Mean)
		}},
		{"Broadcast", func(r int) error { return comms[r].Broadcast(cancellable, raw[r], 1) }},
		{"Barrier", func(r int) error { return comms[r].Barrier(context.Background()) }},
	} {
		p := drive(t, comms, tc.f)
		if err := p.step(); err != nil { // warm-up: buffers, timers, iovec caches
			t.Fatal(err)
		}
		var err error
		allocs := testing.AllocsPerRun(20, func() {
			if e := p.step(); e != nil {
				err = e
			}
		})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if allocs != 0 {
			t.Errorf("%s: %v allocations per operation (all ranks), want 0", tc.name, allocs)
		}
		if tc.name == "AllReduceFloat32Shared" && shared[0].Shared() && comms[0].directOps == 0 {
			t.Errorf("%s: ran the ring", tc.name)
		}
	}
}
