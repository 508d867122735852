package steplog

import (
	"math"
	"os"
	"path/filepath"
	"testing"
)

func TestReadAndSteadyRate(t *testing.T) {
	base := filepath.Join(t.TempDir(), "steps")
	// Rank 0: a step every 0.5 s from t=100; rank 1 interleaved; a torn line.
	r0 := "100.000000 0 11 0 1\n100.500000 0 11 0 2\n101.000000 0 11 0 3\n101.500000 0 11 0 4\n"
	r1 := "100.250000 1 12 0 1\n100.750000 1 12 0 2\n101.25"
	if err := os.WriteFile(base+".0", []byte(r0), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(base+".1", []byte(r1), 0o644); err != nil {
		t.Fatal(err)
	}
	recs := Read(base)
	if len(recs) != 6 {
		t.Fatalf("read %d records, want 6 (the torn line skipped): %+v", len(recs), recs)
	}
	if recs[1].Rank != 1 || recs[1].PID != 12 || recs[1].Step != 1 {
		t.Fatalf("records not in time order: %+v", recs)
	}
	// Skip 1: steps 2..4 of rank 0, two intervals of 0.5 s, 2 steps × 64 samples / 1 s.
	if got := SteadyRate(recs, 1, 64); math.Abs(got-128) > 1e-6 {
		t.Fatalf("SteadyRate = %v, want 128", got)
	}
	if got := SteadyRate(recs, 3, 64); got != 0 {
		t.Fatalf("SteadyRate with too few steps = %v, want 0", got)
	}
}
