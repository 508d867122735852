package data

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"

	"github.com/tempotrain/tempotrain/api"
)

// BenchmarkOpenCSV reads TEMPOTRAIN_BENCH_CSV (a table from bench/data)
// into memory.
func BenchmarkOpenCSV(b *testing.B) {
	p := os.Getenv("TEMPOTRAIN_BENCH_CSV")
	if p == "" {
		b.Skip("set TEMPOTRAIN_BENCH_CSV to a table written by bench/data")
	}
	st, _ := os.Stat(p)
	b.SetBytes(st.Size())
	for b.Loop() {
		s, err := Open(context.Background(), api.DatasetSpec{URI: p, Label: "y", Mode: "memory", MemoryBudgetMiB: 8192}, ShardOptions{}, nil)
		if err != nil {
			b.Fatal(err)
		}
		s.Close()
	}
}

// writeBenchTable writes a table shaped as bench/data's (28 FLOAT columns,
// 2 dictionary-encoded strings, an INT64 label; Snappy; parquet-go's
// default pages of 256 KiB) in row groups of rg rows.
func writeBenchTable(tb testing.TB, path string, rows, rg int) {
	tb.Helper()
	g := parquet.Group{}
	var cols []string
	for j := range 28 {
		c := fmt.Sprintf("f%02d", j)
		cols = append(cols, c)
		g[c] = parquet.Compressed(parquet.Leaf(parquet.FloatType), &parquet.Snappy)
	}
	g["cat_a"] = parquet.Compressed(parquet.Encoded(parquet.String(), &parquet.RLEDictionary), &parquet.Snappy)
	g["cat_b"] = parquet.Compressed(parquet.Encoded(parquet.String(), &parquet.RLEDictionary), &parquet.Snappy)
	g["y"] = parquet.Compressed(parquet.Int(64), &parquet.Snappy)
	schema := parquet.NewSchema("table", g)
	f, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	w := parquet.NewGenericWriter[any](f, schema, parquet.MaxRowsPerRowGroup(int64(rg)))
	leaf := map[string]int{}
	for i, c := range schema.Columns() {
		leaf[c[0]] = i
	}
	rng := rand.New(rand.NewPCG(42, 1))
	batch := make([]parquet.Row, 0, 4096)
	for i := range rows {
		row := make(parquet.Row, len(cols)+3)
		for _, c := range cols {
			row[leaf[c]] = parquet.FloatValue(float32(rng.NormFloat64())).Level(0, 0, leaf[c])
		}
		row[leaf["cat_a"]] = parquet.ByteArrayValue(fmt.Appendf(nil, "a%02d", rng.IntN(12))).Level(0, 0, leaf["cat_a"])
		row[leaf["cat_b"]] = parquet.ByteArrayValue(fmt.Appendf(nil, "b%03d", rng.IntN(200))).Level(0, 0, leaf["cat_b"])
		row[leaf["y"]] = parquet.Int64Value(int64(rng.IntN(2))).Level(0, 0, leaf["y"])
		batch = append(batch, row)
		if len(batch) == cap(batch) || i == rows-1 {
			if _, err := w.WriteRows(batch); err != nil {
				tb.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	if err := w.Close(); err != nil {
		tb.Fatal(err)
	}
}

func cpuNow() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkStreamEpoch reads one epoch of rank 0 of 2 (raw batches of 256,
// no pipeline) of a 512Ki-row table shaped as bench/data's
// (TEMPOTRAIN_BENCH_ROWS rows when set), streamed with a 32 MiB budget
// (windows of about 50k rows, unit targets of about 6k) and in memory,
// with row groups of 128Ki rows (pages of 64256 rows, larger than a unit's
// target) and of 8Ki rows. Besides wall time it reports cpu-ns/row: the
// process's user+system CPU (all goroutines, background reads included)
// per row, the measure that other jobs on the machine disturb least.
func BenchmarkStreamEpoch(b *testing.B) {
	rows := 512 << 10
	if p := os.Getenv("TEMPOTRAIN_BENCH_ROWS"); p != "" {
		fmt.Sscan(p, &rows)
	}
	for _, rg := range []int{128 << 10, 8 << 10} {
		b.Run(fmt.Sprintf("rg%dk", rg>>10), func(b *testing.B) {
			path := filepath.Join(b.TempDir(), "table.parquet")
			writeBenchTable(b, path, rows, rg)
			for _, mode := range []string{"stream", "memory"} {
				b.Run(mode, func(b *testing.B) {
					budget := 32
					if mode == "memory" {
						budget = 4096
					}
					spec := api.DatasetSpec{URI: path, Label: "y", Mode: mode, MemoryBudgetMiB: budget}
					s, err := Open(context.Background(), spec, ShardOptions{Rank: 0, WorldSize: 2, BatchSize: 256, Seed: 1}, nil)
					if err != nil {
						b.Fatal(err)
					}
					defer s.Close()
					var n int64
					var cpu time.Duration
					for i := 0; b.Loop(); i++ {
						c0 := cpuNow()
						if err := s.SetEpoch(i); err != nil {
							b.Fatal(err)
						}
						for {
							bt, err := s.NextBatch(context.Background())
							if errors.Is(err, io.EOF) {
								break
							}
							if err != nil {
								b.Fatal(err)
							}
							n += int64(bt.N)
						}
						cpu += cpuNow() - c0
					}
					b.ReportMetric(float64(cpu.Nanoseconds())/float64(n), "cpu-ns/row")
					b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "rows/s")
				})
			}
		})
	}
}
