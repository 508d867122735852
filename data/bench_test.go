package data

import (
	"context"
	"os"
	"testing"

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
