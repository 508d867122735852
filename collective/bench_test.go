package collective

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// peers drives ranks 1..n-1 of a group from long-lived goroutines, so that a
// benchmark or an allocation count of rank 0's calls sees no goroutine
// start-up: step() runs f on every rank once and returns rank 0's error.
type peers struct {
	comms []*Comm
	start []chan struct{}
	done  chan error
	f     func(r int) error
}

func drive(t testing.TB, comms []*Comm, f func(r int) error) *peers {
	p := &peers{comms: comms, done: make(chan error, len(comms)), f: f}
	for r := 1; r < len(comms); r++ {
		ch := make(chan struct{})
		p.start = append(p.start, ch)
		go func() {
			for range ch {
				p.done <- f(r)
			}
		}()
	}
	t.Cleanup(func() {
		for _, ch := range p.start {
			close(ch)
		}
	})
	return p
}

func (p *peers) step() error {
	for _, ch := range p.start {
		ch <- struct{}{}
	}
	err := p.f(0)
	for range p.start {
		if e := <-p.done; e != nil && err == nil {
			err = e
		}
	}
	return err
}

func benchAllReduce(b *testing.B, bytes, n int) {
	benchAllReduceOf(b, bytes, n, false)
}

// benchAllReduceShared measures the all-reduce of buffers from AllocShared
// (the direct algorithm, shared.go, where the group shares memory).
func benchAllReduceShared(b *testing.B, bytes, n int) {
	benchAllReduceOf(b, bytes, n, true)
}

func benchAllReduceOf(b *testing.B, bytes, n int, shared bool) {
	benchAllReduceWith(b, benchOptions(), bytes, n, shared)
}

func benchAllReduceWith(b *testing.B, o Options, bytes, n int, shared bool) {
	comms := newGroup(b, n, o)
	bufs := make([][]float32, n)
	for r := range bufs {
		bufs[r] = make([]float32, bytes/4)
	}
	if shared {
		for r, sb := range allocShared(b, comms, bytes) {
			bufs[r] = sb.Float32s()
		}
	}
	p := drive(b, comms, func(r int) error {
		return comms[r].AllReduceFloat32(context.Background(), bufs[r], Sum)
	})
	if err := p.step(); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(bytes))
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPU()
	for b.Loop() {
		if err := p.step(); err != nil {
			b.Fatal(err)
		}
	}
	// Processor time per operation per rank: what it costs whatever the
	// machine's load (other processes only stretch the wall time).
	b.ReportMetric((processCPU()-cpu0).Seconds()*1e3/float64(b.N)/float64(n), "cpu-ms/op/rank")
	// busbw as nccl-tests defines it: what each rank's link carries.
	b.ReportMetric(float64(bytes)*2*float64(n-1)/float64(n)/(b.Elapsed().Seconds()/float64(b.N))/1e9, "busGB/s")
}

// benchOptions reads COLLECTIVE_SEGMENT and COLLECTIVE_SOCKBUF (bytes), to
// tune the defaults, and COLLECTIVE_SHM_SPINS (shmSpins). The transport is
// the default (shared memory); TEMPOTRAIN_COLLECTIVE_SHM=0 measures TCP.
func benchOptions() Options {
	var o Options
	o.SegmentBytes, _ = strconv.Atoi(os.Getenv("COLLECTIVE_SEGMENT"))
	o.SocketBuffer, _ = strconv.Atoi(os.Getenv("COLLECTIVE_SOCKBUF"))
	if s, err := strconv.Atoi(os.Getenv("COLLECTIVE_SHM_SPINS")); err == nil {
		shmSpins = s
	}
	return o
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func BenchmarkAllReduce4KiB2Ranks(b *testing.B)   { benchAllReduce(b, 4<<10, 2) }
func BenchmarkAllReduce1MiB2Ranks(b *testing.B)   { benchAllReduce(b, 1<<20, 2) }
func BenchmarkAllReduce64MiB2Ranks(b *testing.B)  { benchAllReduce(b, 64<<20, 2) }
func BenchmarkAllReduce4KiB4Ranks(b *testing.B)   { benchAllReduce(b, 4<<10, 4) }
func BenchmarkAllReduce64MiB4Ranks(b *testing.B)  { benchAllReduce(b, 64<<20, 4) }
func BenchmarkAllReduce64MiB8Ranks(b *testing.B)  { benchAllReduce(b, 64<<20, 8) }
func BenchmarkAllReduce256MiB2Ranks(b *testing.B) { benchAllReduce(b, 256<<20, 2) }

func BenchmarkAllReduceShared4KiB2Ranks(b *testing.B)  { benchAllReduceShared(b, 4<<10, 2) }
func BenchmarkAllReduceShared1MiB2Ranks(b *testing.B)  { benchAllReduceShared(b, 1<<20, 2) }
func BenchmarkAllReduceShared64MiB2Ranks(b *testing.B) { benchAllReduceShared(b, 64<<20, 2) }
func BenchmarkAllReduceShared64MiB4Ranks(b *testing.B) { benchAllReduceShared(b, 64<<20, 4) }
func BenchmarkAllReduceShared64MiB8Ranks(b *testing.B) { benchAllReduceShared(b, 64<<20, 8) }

// BenchmarkSmallAllReduce: 64 bytes and 16 KiB (lineMaxBytes) over groups
// of 4 to 256 ranks in this process, on the ring and on the line (line.go).
// On the ring every rank handles 2(n-1) frames, on the line at most 4, so
// where the ranks share the processors (here: all of them on this machine's)
// the line's cpu-ms/op/rank stays flat as n grows.
func BenchmarkSmallAllReduce(b *testing.B) {
	for _, bytes := range []int{64, lineMaxBytes} {
		for _, n := range []int{4, 8, 16, 64, 256} {
			for _, line := range []bool{false, true} {
				o := benchOptions()
				o.lineMinRanks = -1
				name := fmt.Sprintf("%dB/ranks%d/ring", bytes, n)
				if line {
					o.lineMinRanks = 2
					name = fmt.Sprintf("%dB/ranks%d/line", bytes, n)
				}
				b.Run(name, func(b *testing.B) { benchAllReduceWith(b, o, bytes, n, false) })
			}
		}
	}
}
