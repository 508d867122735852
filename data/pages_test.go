package data

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/data/format"
)

// TestParquetDecodesPagesOnce streams Parquet files whose row groups hold
// several pages per column (1000-row row groups, pages of 192 to 512 rows)
// and counts the data pages each rank decodes per epoch: a page is in one
// unit, a unit in one window, so every page is decoded at most once per
// rank and epoch, for units of one run of pages (windows small against the
// pages) and of several, for every world size, remainder, epoch, and over
// the reads Fit makes too. Units are cut where every column read starts a
// page. With a window smaller than a unit, a page is decoded once per
// window that takes rows of it, no more.
func TestParquetDecodesPagesOnce(t *testing.T) {
	t.Parallel()
	tbl := newTestTable(6000)
	uri := tbl.writeFiles(t, t.TempDir(), "parquet", 2, 1000)
	type config struct {
		name     string
		features []string // nil: every column
		window   int
		units    []int64 // of the first file's first row groups
	}
	configs := []config{
		// id's pages start every 256 rows, y's every 512: runs of 512
		// and 488 rows, larger than a unit's target (window/8).
		{"runs", []string{"id"}, 1200, []int64{512, 488, 512, 488}},
		// Runs grouped: a row group is a unit.
		{"grouped", []string{"id"}, 9000, []int64{1000, 1000, 1000}},
		// x's pages start every 192 rows: no row inside a row group
		// starts a page in every column; a row group is one run.
		{"all columns", nil, 2000, []int64{1000, 1000, 1000}},
	}
	for _, c := range configs {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			spec := idOnly(uri)
			spec.Features = c.features
			spec.Mode, spec.MemoryBudgetMiB, spec.ShuffleWindowRows = "stream", 1, c.window
			for world := 1; world <= 3; world++ {
				for _, rem := range []string{"pad", "exact"} {
					spec.Remainder = rem
					for r := range world {
						s := mustOpen(t, spec, ShardOptions{Rank: r, WorldSize: world, BatchSize: 7, Seed: 3}, nil)
						if world == 1 && !slices.Equal(s.units[:len(c.units)], c.units) {
							t.Errorf("units %v..., want %v...", s.units[:len(c.units)], c.units)
						}
						count := countPages(s)
						if c.features == nil {
							// One pass over the rank's share of the rows.
							if _, err := s.Fit(context.Background(), []api.PreprocessorSpec{{Type: "simple_imputer", Columns: []string{"x"}}, {Type: "one_hot_encoder", Columns: []string{"city"}}}); err != nil {
								t.Fatal(err)
							}
							count.check(t, "Fit's reads", 1)
						}
						for epoch := range 2 {
							count.reset()
							if err := s.SetEpoch(epoch); err != nil {
								t.Fatal(err)
							}
							drain(t, s)
							count.check(t, fmt.Sprintf("world %d rank %d %s epoch %d", world, r, rem, epoch), 1)
						}
					}
				}
			}
		})
	}
	// Windows of 300 rows against units of 512: a unit is cut by windows,
	// and a page is decoded once per window that takes rows of it.
	spec := idOnly(uri)
	spec.Mode, spec.MemoryBudgetMiB, spec.ShuffleWindowRows = "stream", 1, 300
	s := mustOpen(t, spec, ShardOptions{Rank: 1, WorldSize: 2, BatchSize: 7, Seed: 3}, nil)
	count := countPages(s)
	count.reset()
	drain(t, s)
	want := map[pageKey]int{}
	for _, w := range s.wins {
		seen := map[pageKey]bool{}
		for _, p := range w.pieces {
			file, rg, lo, _, leaves := format.ParquetUnit(s.src, p.u)
			for _, j := range []int{0, 1} {
				leaf := leaves[j]
				size := int64(256) // id's pages
				if j == 1 {
					size = 512 // y's
				}
				for k := (lo + p.lo) / size; k*size < lo+p.hi; k++ {
					seen[pageKey{file, rg, leaf, int(k)}] = true
				}
			}
		}
		for k := range seen {
			want[k]++
		}
	}
	count.mu.Lock()
	defer count.mu.Unlock()
	if !maps.Equal(count.n, want) {
		t.Errorf("pages decoded %v, want once per window that takes rows of them: %v", count.n, want)
	}
}

type pageKey struct{ file, rg, leaf, page int }

type pageCount struct {
	mu sync.Mutex
	n  map[pageKey]int
}

// countPages counts the data pages s's Parquet source decodes.
func countPages(s *Shard) *pageCount {
	c := &pageCount{n: map[pageKey]int{}}
	format.OnParquetPage(s.src, func(file, rg, leaf, page int) {
		c.mu.Lock()
		c.n[pageKey{file, rg, leaf, page}]++
		c.mu.Unlock()
	})
	return c
}

func (c *pageCount) reset() {
	c.mu.Lock()
	clear(c.n)
	c.mu.Unlock()
}

// check fails if some page was decoded more than most times, or if the
// pages were not numbered (no offset index used).
func (c *pageCount) check(t *testing.T, what string, most int) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.n) == 0 {
		t.Fatalf("%s: no page decoded", what)
	}
	for k, n := range c.n {
		if k.page < 0 {
			t.Fatalf("%s: a page read without the offset index: %+v", what, k)
		}
		if n > most {
			t.Fatalf("%s: page %+v decoded %d times, want at most %d", what, k, n, most)
		}
	}
	c.n = map[pageKey]int{}
}

func drain(t *testing.T, s *Shard) {
	t.Helper()
	for {
		if _, err := s.NextBatch(context.Background()); errors.Is(err, io.EOF) {
			return
		} else if err != nil {
			t.Fatal(err)
		}
	}
}

// TestCutWindowsAtUnits: windows hold at most size rows, the pieces in
// order, and cut a piece only when it is larger than a window; a window
// ends early only for a piece that would not fit.
func TestCutWindowsAtUnits(t *testing.T) {
	t.Parallel()
	rng := &pcg{hi: 7, lo: 1}
	for trial := range 200 {
		size := int64(1 + rng.next()%50)
		var pieces []piece
		for u := range int(rng.next() % 20) {
			k := int64(1 + rng.next()%70)
			lo := int64(rng.next() % 5)
			pieces = append(pieces, piece{u: u, lo: lo, hi: lo + k})
		}
		wins := cutWindows(pieces, size)
		var got []piece
		var pos int64
		for i, w := range wins {
			if w.idx != i || w.start != pos || w.end <= w.start || w.end-w.start > size {
				t.Fatalf("trial %d: window %d: %+v (size %d, at %d)", trial, i, w, size, pos)
			}
			var rows int64
			for _, p := range w.pieces {
				rows += p.hi - p.lo
				if n := len(got); n > 0 && got[n-1].u == p.u && got[n-1].hi == p.lo {
					got[n-1].hi = p.hi // a piece cut by the window before
				} else {
					got = append(got, p)
				}
			}
			if rows != w.end-w.start {
				t.Fatalf("trial %d: window %d holds %d rows, spans %d", trial, i, rows, w.end-w.start)
			}
			pos = w.end
			if i+1 < len(wins) {
				next := wins[i+1].pieces[0]
				whole := slices.Contains(pieces, next)
				if whole && next.hi-next.lo <= size && rows+next.hi-next.lo <= size {
					t.Fatalf("trial %d: window %d ends at %d rows of %d, but the next piece (%d rows) fits", trial, i, rows, size, next.hi-next.lo)
				}
			}
			for _, p := range w.pieces {
				if !slices.Contains(pieces, p) {
					// A cut piece: only one larger than a window.
					for _, q := range pieces {
						if q.u == p.u && q.hi-q.lo <= size {
							t.Fatalf("trial %d: piece %+v (%d rows, window %d) was cut", trial, q, q.hi-q.lo, size)
						}
					}
				}
			}
		}
		if !slices.Equal(got, pieces) {
			t.Fatalf("trial %d: windows hold %v, want %v", trial, got, pieces)
		}
	}
}

// TestStreamLayoutInPosition: a stream's position names its layout; one
// saved without (by a version that cut streams otherwise) or under another
// is refused, saying why; a position in memory mode has none and still
// seeks.
func TestStreamLayoutInPosition(t *testing.T) {
	t.Parallel()
	tbl := newTestTable(300)
	specs := shardSpecs(t, tbl)
	for _, name := range []string{"parquet/stream", "csv/stream"} {
		s := mustOpen(t, specs[name], ShardOptions{WorldSize: 2, BatchSize: 4, Seed: 1}, nil)
		pos := s.Position()
		if !strings.HasPrefix(pos.Settings.Layout, streamLayout+"/") {
			t.Fatalf("%s: layout %q", name, pos.Settings.Layout)
		}
		pos.Batches = 3
		if err := s.Seek(pos); err != nil {
			t.Fatal(err)
		}
		old := pos
		old.Settings.Layout = ""
		err := s.Seek(old)
		if !errors.Is(err, ErrPositionMismatch) {
			t.Fatalf("%s: seek to a position without layout: %v, want ErrPositionMismatch", name, err)
		}
		wantErr(t, err, false, "cut by an older version", "epoch's end")
		other := pos
		other.Settings.Layout = streamLayout + "/0011223344556677"
		wantErr(t, s.Seek(other), false, "stream layout "+other.Settings.Layout+" saved", "units")
	}
	m := mustOpen(t, specs["parquet/memory"], ShardOptions{WorldSize: 2, BatchSize: 4, Seed: 1}, nil)
	pos := m.Position()
	if pos.Settings.Layout != "" {
		t.Fatalf("memory mode: layout %q", pos.Settings.Layout)
	}
	pos.Batches = 5
	if err := m.Seek(pos); err != nil {
		t.Fatal(err)
	}
}
