package data

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"sort"
	"testing"

	"github.com/tempotrain/tempotrain/api"
)

// shardSpecs are the ways of reading one table: CSV and Parquet, in memory
// and streamed with small windows and units (so that windows hold several
// units and units are cut at the ranks' edges).
func shardSpecs(t *testing.T, tbl *testTable) map[string]api.DatasetSpec {
	t.Helper()
	dir := t.TempDir()
	csvDir, pqDir := filepath.Join(dir, "csv"), filepath.Join(dir, "pq")
	for _, d := range []string{csvDir, pqDir} {
		if err := mkdir(d); err != nil {
			t.Fatal(err)
		}
	}
	csvGlob := tbl.writeFiles(t, csvDir, "csv", 3, 0)
	pqGlob := tbl.writeFiles(t, pqDir, "parquet", 2, 37)
	out := map[string]api.DatasetSpec{}
	for name, uri := range map[string]string{"csv": csvGlob, "parquet": pqGlob} {
		mem := idOnly(uri)
		mem.Mode = "memory"
		out[name+"/memory"] = mem
		st := idOnly(uri)
		st.Mode, st.ShuffleWindowRows, st.MemoryBudgetMiB = "stream", 50, 1
		out[name+"/stream"] = st
	}
	return out
}

// TestShardCoverage: over world sizes 1..5 and row counts that do not
// divide, every row is in exactly one rank's shard per epoch ("exact"),
// padding repeats as many rows as DistributedSampler pads and "drop" leaves
// out as many as it drops; ranks take the same number of steps under pad and
// drop; the order changes with the epoch.
func TestShardCoverage(t *testing.T) {
	t.Parallel()
	for _, n := range []int{1, 2, 97, 301} {
		tbl := newTestTable(n)
		for name, spec := range shardSpecs(t, tbl) {
			t.Run(fmt.Sprintf("%s/rows%d", name, n), func(t *testing.T) {
				t.Parallel()
				for world := 1; world <= 5; world++ {
					for _, rem := range []string{"exact", "pad", "drop"} {
						if rem == "drop" && n < world {
							continue
						}
						sp := spec
						sp.Remainder = rem
						coverage(t, sp, n, world)
					}
				}
			})
		}
	}
}

func coverage(t *testing.T, spec api.DatasetSpec, n, world int) {
	t.Helper()
	var orders [2][]int
	for epoch := range 2 {
		seen := map[int]int{}
		steps := -1
		var all []int
		for r := range world {
			s := mustOpen(t, spec, ShardOptions{Rank: r, WorldSize: world, BatchSize: 8, Seed: 11}, nil)
			if epoch > 0 {
				if err := s.SetEpoch(epoch); err != nil {
					t.Fatal(err)
				}
			}
			ids, batches := epochRows(t, s)
			if int64(len(ids)) != s.Len() || len(batches) != s.Steps() {
				t.Fatalf("%s world %d rank %d: %d rows in %d batches, Len %d Steps %d", spec.Remainder, world, r, len(ids), len(batches), s.Len(), s.Steps())
			}
			if spec.Remainder != "exact" {
				if steps >= 0 && s.Steps() != steps {
					t.Fatalf("%s world %d: rank %d takes %d steps, rank 0 %d", spec.Remainder, world, r, s.Steps(), steps)
				}
				steps = s.Steps()
			}
			for _, id := range ids {
				seen[id]++
			}
			all = append(all, ids...)
		}
		orders[epoch] = all
		dups, distinct := 0, len(seen)
		for _, c := range seen {
			dups += c - 1
		}
		switch spec.Remainder {
		case "exact":
			if distinct != n || dups != 0 {
				t.Fatalf("exact, world %d: %d distinct rows of %d, %d repeats", world, distinct, n, dups)
			}
		case "pad":
			want := (n+world-1)/world*world - n
			if distinct != n || dups != want {
				t.Fatalf("pad, world %d: %d distinct rows of %d, %d repeats (want %d)", world, distinct, n, dups, want)
			}
		case "drop":
			if distinct != n/world*world || dups != 0 {
				t.Fatalf("drop, world %d: %d distinct rows, want %d, %d repeats", world, distinct, n/world*world, dups)
			}
		}
		for id := range seen {
			if id < 0 || id >= n {
				t.Fatalf("row id %d out of [0, %d)", id, n)
			}
		}
	}
	if n > 20 && slices.Equal(orders[0], orders[1]) {
		t.Fatalf("%s world %d: epochs 0 and 1 have the same order", spec.Remainder, world)
	}
}

// TestShuffleDeterministic: the same (seed, epoch) gives the same batches
// on a fresh shard; another seed another order; without shuffle rows come
// in file order.
func TestShuffleDeterministic(t *testing.T) {
	t.Parallel()
	tbl := newTestTable(200)
	for name, spec := range shardSpecs(t, tbl) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			run := func(seed uint64, epoch int, sp api.DatasetSpec) []int {
				s := mustOpen(t, sp, ShardOptions{Rank: 1, WorldSize: 2, BatchSize: 16, Seed: seed}, nil)
				if err := s.SetEpoch(epoch + 1); err != nil { // a detour must not matter
					t.Fatal(err)
				}
				epochRows(t, s)
				if err := s.SetEpoch(epoch); err != nil {
					t.Fatal(err)
				}
				ids, _ := epochRows(t, s)
				return ids
			}
			a, b := run(3, 2, spec), run(3, 2, spec)
			if !slices.Equal(a, b) {
				t.Fatal("same seed and epoch, different orders")
			}
			if slices.Equal(a, run(4, 2, spec)) {
				t.Fatal("seeds 3 and 4 give the same order")
			}
			if sorted := slices.Sorted(slices.Values(a)); slices.Equal(a, sorted) {
				t.Fatal("the shuffled order is sorted")
			}
			no := false
			sp := spec
			sp.Shuffle, sp.Remainder = &no, "exact"
			ids := run(3, 2, sp)
			if !sort.IntsAreSorted(ids) {
				t.Fatalf("without shuffle, rows out of order: %v", ids)
			}
		})
	}
}

// TestResumeIsExact: a shard restored from a position saved after k
// batches yields, byte for byte, the batches an uninterrupted shard yields
// after its k-th, through the end of the epoch and the next epoch, for
// every k (mid-window, on window edges, at the epoch's end).
func TestResumeIsExact(t *testing.T) {
	t.Parallel()
	tbl := newTestTable(257)
	for name, spec := range shardSpecs(t, tbl) {
		spec.Features = nil // every column: the pipeline's output is compared
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			opt := ShardOptions{Rank: 1, WorldSize: 3, BatchSize: 10, Seed: 99}
			pre := []api.PreprocessorSpec{{Type: "simple_imputer", Columns: []string{"x"}}, {Type: "one_hot_encoder", Columns: []string{"city"}}}
			ref := mustOpen(t, spec, opt, nil)
			if _, err := ref.Fit(context.Background(), pre); err != nil {
				t.Fatal(err)
			}
			if err := ref.SetEpoch(4); err != nil {
				t.Fatal(err)
			}
			_, want0 := epochRows(t, ref)
			ref.SetEpoch(5)
			_, want1 := epochRows(t, ref)
			dir := t.TempDir()
			for k := 0; k <= len(want0); k++ {
				a := mustOpen(t, spec, opt, nil)
				p, err := a.Fit(context.Background(), pre)
				if err != nil {
					t.Fatal(err)
				}
				a.SetEpoch(4)
				x := make([]float32, 10*a.Width())
				for range k {
					if _, err := a.Next(context.Background(), x, make([]float32, 10)); err != nil {
						t.Fatal(err)
					}
				}
				if err := a.SaveState(dir); err != nil {
					t.Fatal(err)
				}
				if err := p.Save(dir); err != nil {
					t.Fatal(err)
				}
				a.Close()
				// A new process: open, load the pipeline, restore.
				b := mustOpen(t, spec, opt, nil)
				lp, err := LoadPipeline(dir)
				if err != nil {
					t.Fatal(err)
				}
				if err := b.SetPipeline(lp); err != nil {
					t.Fatal(err)
				}
				if err := b.RestoreState(dir); err != nil {
					t.Fatal(err)
				}
				if pos := b.Position(); pos.Epoch != 4 || pos.Batches != k {
					t.Fatalf("restored position %+v, want epoch 4 batch %d", pos, k)
				}
				_, got := epochRows(t, b)
				if !slices.EqualFunc(got, want0[k:], slices.Equal) {
					t.Fatalf("resumed after %d batches: the rest of the epoch differs (%d batches, want %d)", k, len(got), len(want0)-k)
				}
				b.SetEpoch(5)
				if _, got := epochRows(t, b); !slices.EqualFunc(got, want1, slices.Equal) {
					t.Fatalf("resumed after %d batches: the next epoch differs", k)
				}
				b.Close()
			}
		})
	}
}

func TestSeekMismatch(t *testing.T) {
	t.Parallel()
	tbl := newTestTable(50)
	specs := shardSpecs(t, tbl)
	a := mustOpen(t, specs["csv/stream"], ShardOptions{WorldSize: 2, BatchSize: 4, Seed: 1}, nil)
	pos := a.Position()
	// Another world size and batch size re-split the epoch (see
	// TestSeekRefusesRealMismatches); another seed does not.
	b := mustOpen(t, specs["csv/stream"], ShardOptions{WorldSize: 3, BatchSize: 5, Seed: 2}, nil)
	err := b.Seek(pos)
	if !errors.Is(err, ErrPositionMismatch) {
		t.Fatalf("err = %v, want ErrPositionMismatch", err)
	}
	wantErr(t, err, false, "seed 1 saved, 2 now")
	c := mustOpen(t, specs["csv/memory"], ShardOptions{WorldSize: 2, BatchSize: 4, Seed: 1}, nil)
	wantErr(t, c.Seek(pos), false, "mode stream saved, memory now")
	if err := b.RestoreState(t.TempDir()); err == nil {
		t.Fatal("restore from a directory without a position: no error")
	}
}

// TestNextDoesNotAllocate: a steady-state batch allocates nothing, in
// memory and streaming within a window.
func TestNextDoesNotAllocate(t *testing.T) {
	tbl := newTestTable(2000)
	specs := shardSpecs(t, tbl)
	for _, name := range []string{"csv/memory", "parquet/memory", "parquet/stream"} {
		sp := specs[name]
		sp.Features = nil
		if sp.Mode == "stream" {
			sp.ShuffleWindowRows = 2000
			sp.MemoryBudgetMiB = 8
		}
		s := mustOpen(t, sp, ShardOptions{BatchSize: 16}, nil)
		if _, err := s.Fit(context.Background(), []api.PreprocessorSpec{{Type: "standard_scaler", Columns: []string{"x"}}, {Type: "one_hot_encoder", Columns: []string{"city"}}}); err != nil {
			t.Fatal(err)
		}
		x, y := make([]float32, 16*s.Width()), make([]float32, 16)
		s.Next(context.Background(), x, y) // the window is read, translations built
		allocs := testing.AllocsPerRun(50, func() {
			if _, err := s.Next(context.Background(), x, y); err != nil && !errors.Is(err, io.EOF) {
				t.Fatal(err)
			}
		})
		if allocs != 0 {
			t.Errorf("%s: %v allocations per batch, want 0", name, allocs)
		}
	}
}
