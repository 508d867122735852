package data

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tempotrain/tempotrain/api"
)

// heapPeaks runs fn and samples the heap meanwhile, with the collector made
// eager (GOGC 10) so that the heap follows live memory closely. It returns
// the peaks above the heap before of the live heap (as marked by the last
// collection: what the code holds) and of the allocated heap (live, plus
// garbage not yet collected).
func heapPeaks(fn func()) (live, alloc uint64) {
	old := debug.SetGCPercent(10)
	defer debug.SetGCPercent(old)
	// Twice: sync.Pools (parquet-go's page buffers) keep a victim cache
	// through one collection, which would inflate the start.
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapAlloc
	var allocPeak, livePeak atomic.Uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		var m runtime.MemStats
		sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
		for {
			runtime.ReadMemStats(&m)
			if m.HeapAlloc > allocPeak.Load() {
				allocPeak.Store(m.HeapAlloc)
			}
			metrics.Read(sample)
			if v := sample[0].Value.Uint64(); v > livePeak.Load() {
				livePeak.Store(v)
			}
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
		}
	})
	fn()
	runtime.GC() // what fn still holds at its end counts too
	close(stop)
	wg.Wait()
	above := func(v uint64) uint64 { return v - min(v, base) }
	return above(livePeak.Load()), above(allocPeak.Load())
}

// TestStreamStaysInBudget streams a CSV and a Parquet file several times
// larger than the memory budget, and checks the heap's peaks while opening,
// fitting and reading an epoch: the live heap stays within 3/4 of the
// budget (what the shard holds: two shuffle windows of a fifth each, units
// and buffers) and the allocated heap, garbage included, within the budget.
// The same check fails on reading the file into memory (the control), so
// the measurement can see a breach.
func TestStreamStaysInBudget(t *testing.T) {
	if testing.Short() {
		t.Skip("writes a 48 MB file")
	}
	const budgetMiB = 6
	dir := t.TempDir()
	csvPath := filepath.Join(dir, "big.csv")
	f, err := os.Create(csvPath)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	w.WriteString("id,a,b,c,d,e,f,g,h,y\n")
	var line []byte
	const rows = 600_000
	for i := range rows {
		line = strconv.AppendInt(line[:0], int64(i), 10)
		for k := range 8 {
			line = append(line, ',')
			line = strconv.AppendFloat(line, float64(i%1000)*0.001+float64(k)*1.25, 'f', 4, 64)
		}
		line = append(line, ',')
		line = strconv.AppendInt(line, int64(i%2), 10)
		line = append(line, '\n')
		w.Write(line)
	}
	w.Flush()
	f.Close()
	st, _ := os.Stat(csvPath)
	budget := uint64(budgetMiB << 20)
	if uint64(st.Size()) < 6*budget {
		t.Fatalf("the file (%d bytes) is not much larger than the budget", st.Size())
	}
	// In memory the rows would take rows × 11 × 4 bytes, 4x the budget.
	spec := api.DatasetSpec{URI: csvPath, Label: "y", Mode: "stream", MemoryBudgetMiB: budgetMiB}
	var seen int
	check := func(what string, size int64, live, alloc uint64) {
		t.Helper()
		t.Logf("%s of %d MiB streamed with a %d MiB budget: peaks above the start: live heap %.1f MiB, allocated %.1f MiB",
			what, size>>20, budgetMiB, float64(live)/(1<<20), float64(alloc)/(1<<20))
		if live > budget*3/4 || alloc > budget {
			t.Errorf("%s: peaks %.1f MiB live, %.1f MiB allocated: over 3/4 of the %d MiB budget live or over it allocated",
				what, float64(live)/(1<<20), float64(alloc)/(1<<20), budgetMiB)
		}
	}
	live, alloc := heapPeaks(func() {
		s, err := Open(context.Background(), spec, ShardOptions{BatchSize: 256, Seed: 1}, nil)
		if err != nil {
			t.Error(err)
			return
		}
		defer s.Close()
		x, y := make([]float32, 256*s.Width()), make([]float32, 256)
		for {
			n, err := s.Next(context.Background(), x, y)
			if err != nil {
				break
			}
			seen += n
		}
	})
	if seen != rows {
		t.Fatalf("streamed %d rows, want %d", seen, rows)
	}
	check("CSV", st.Size(), live, alloc)
	// Parquet, in row groups of 100k rows (larger than a shuffle window:
	// streamed as slices of row groups).
	tbl := newTestTable(rows)
	pqPath := filepath.Join(dir, "big.parquet")
	tbl.writeParquet(t, pqPath, 0, rows, 100_000)
	pst, _ := os.Stat(pqPath)
	if uint64(pst.Size()) < 2*budget {
		t.Fatalf("the Parquet file (%d bytes) is not larger than the budget", pst.Size())
	}
	seen = 0
	live, alloc = heapPeaks(func() {
		s, err := Open(context.Background(), api.DatasetSpec{URI: pqPath, Label: "y", Mode: "stream", MemoryBudgetMiB: budgetMiB}, ShardOptions{BatchSize: 256, Seed: 1}, nil)
		if err != nil {
			t.Error(err)
			return
		}
		defer s.Close()
		if _, err := s.Fit(context.Background(), []api.PreprocessorSpec{{Type: "simple_imputer", Columns: []string{"x"}}, {Type: "one_hot_encoder", Columns: []string{"city"}}}); err != nil {
			t.Error(err)
			return
		}
		x, y := make([]float32, 256*s.Width()), make([]float32, 256)
		for {
			n, err := s.Next(context.Background(), x, y)
			if err != nil {
				break
			}
			seen += n
		}
	})
	if seen != rows {
		t.Fatalf("streamed %d Parquet rows, want %d", seen, rows)
	}
	check("Parquet (fitted too)", pst.Size(), live, alloc)
	// The control: holding the file breaks the same bound.
	var hold []byte
	live, alloc = heapPeaks(func() { hold, _ = os.ReadFile(csvPath) })
	if live <= budget || alloc <= budget || len(hold) == 0 {
		t.Fatalf("the control read %d bytes with peaks of %d live, %d allocated: the measurement cannot see a breach", len(hold), live, alloc)
	}
	runtime.KeepAlive(hold)
	// And mode memory refuses it.
	spec.Mode = "memory"
	_, err = Open(context.Background(), spec, ShardOptions{}, nil)
	wantErr(t, err, true, "more than memory_budget_mib 6")
}
