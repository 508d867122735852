package data

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"testing"

	"github.com/tempotrain/tempotrain/api"
)

// segment is one attempt's part of an epoch: world ranks, batch rows per
// rank (or global rows per step over all ranks when global), taking steps
// steps (-1: to the end of the epoch).
type segment struct {
	world, batch int
	global       bool
	steps        int
}

func (g segment) String() string {
	kind := "per rank"
	if g.global {
		kind = "global"
	}
	return fmt.Sprintf("%d ranks, batch %d %s, %d steps", g.world, g.batch, kind, g.steps)
}

// rowsPerStep is the rows of a step over all ranks.
func (g segment) rowsPerStep() int {
	if g.global {
		return g.batch
	}
	return g.batch * g.world
}

// checkEpochSplit checks the rows an epoch of n rows gave over its segments
// (seen: how often each row was given): every row exactly once, but for
// the last segment's padding (remainder pad: fewer than its world size
// repeats, of rows given once already) or cut (drop: fewer than its world
// size left out; dropLast: a last step smaller than a whole one, or under
// exact each rank's partial last batch); left rows were left for the last
// segment. Up to extra padding rows (streamed segments': a stream mixes
// them into its ranks' last windows) may repeat rows, taking the place of
// rows then left out if the last step is dropped.
func checkEpochSplit(t *testing.T, what string, n int, seen map[int]int, last segment, left int, rem string, dropLast bool, extra int) {
	t.Helper()
	dups, distinct := 0, 0
	for id, c := range seen {
		if id < 0 || id >= n {
			t.Fatalf("%s: row %d out of [0, %d)", what, id, n)
		}
		if c > 0 {
			distinct++
			dups += c - 1
		}
	}
	var wantDups, wantMissing int
	// Padding a stream took before the last segment may have repeated rows
	// not taken yet then: the rows left may be up to extra more.
	for more := 0; more <= extra; more++ {
		wantDups, wantMissing = lastStep(last, left+more, rem, dropLast)
		if distinct <= n-wantMissing && distinct >= n-wantMissing-extra && dups >= wantDups && dups <= wantDups+extra {
			return
		}
	}
	t.Fatalf("%s: %d distinct rows of %d (want %d, or up to %d fewer), %d repeats (want %d, or up to %d more)",
		what, distinct, n, n-wantMissing, extra, dups, wantDups, extra)
}

// lastStep is what the last step of a segment given left rows pads (rows
// repeated) and cuts (rows left out).
func lastStep(last segment, left int, rem string, dropLast bool) (dups, missing int) {
	g, w := last.rowsPerStep(), last.world
	l := left % g
	switch rem {
	case "pad":
		dups = (l+w-1)/w*w - l
	case "drop":
		missing = l % w
		l -= missing
	}
	switch {
	case dropLast && rem == "exact":
		batch := func(r int) int { return g/w + b2i(r < g%w) }
		for r := range min(l, w) {
			if share := (l - r + w - 1) / w; share < batch(r) || (l+w-1)/w < batch(0) {
				missing += share
			}
		}
	case dropLast && l > 0 && l+dups < g:
		// The last step is dropped whole, with its padding.
		missing, dups = missing+l, 0
	}
	return dups, missing
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestLoaderResumesAtAnyWorldSize: an epoch taken for s steps by W ranks,
// then (Resume after Consumed items) by W' ranks, possibly with another
// batch, per rank or global, then by W” ranks to its end, gives every item
// exactly once over all ranks (up to the last segment's padding); the
// items of the first s steps are exactly a prefix of the epoch's
// permutation; the ranks of a segment agree on Consumed and take as many
// steps.
func TestLoaderResumesAtAnyWorldSize(t *testing.T) {
	t.Parallel()
	segs := [][]segment{
		{{4, 8, false, 3}, {3, 8, false, -1}},
		{{3, 8, false, 2}, {4, 8, false, -1}},
		{{4, 5, false, 1}, {3, 5, false, 2}, {4, 5, false, -1}},
		{{2, 7, false, 4}, {5, 3, false, -1}},
		{{1, 16, false, 2}, {4, 16, false, -1}},
		{{4, 16, false, 2}, {1, 16, false, -1}},
		{{4, 32, true, 2}, {3, 32, true, 1}, {4, 32, true, -1}},
		{{3, 10, true, 3}, {4, 10, true, -1}},
		{{4, 6, false, 1}, {3, 32, true, 1}, {2, 5, false, -1}},
		{{4, 8, false, 0}, {3, 8, false, -1}},
	}
	for _, n := range []int{1, 7, 97, 301, 1000} {
		for _, pad := range []bool{true, false} {
			for _, dropLast := range []bool{false, true} {
				for _, plan := range segs {
					name := fmt.Sprintf("n%d/pad=%v/dropLast=%v/%v", n, pad, dropLast, plan)
					loaderEpoch(t, name, n, pad, dropLast, plan)
				}
			}
		}
	}
}

func loaderEpoch(t *testing.T, name string, n int, pad, dropLast bool, plan []segment) {
	t.Helper()
	const epoch = 3
	ds := synth(n)
	// The epoch's permutation: one rank, one item a step, in order.
	ref, err := PrepareData(ds, LoaderConfig{Batch: 1, Seed: 5, Shuffle: true})
	if err != nil {
		t.Fatal(err)
	}
	ref.SetEpoch(epoch)
	perm := ref.Indices()
	seen := map[int]int{}
	consumed := 0
	x, y := make([]float32, 2*64), make([]float32, 64)
	// The segment the epoch ended in, and the items consumed before it.
	before, end := 0, plan[0]
	for si, g := range plan {
		if consumed < n {
			before, end = consumed, g
		}
		next := -1
		steps := -1
		for r := range g.world {
			cfg := LoaderConfig{Rank: r, World: g.world, Batch: g.batch, Seed: 5, Shuffle: true, Pad: pad, DropLast: dropLast}
			if g.global {
				cfg.Batch, cfg.GlobalBatch = 1, g.batch
			}
			l, err := PrepareData(ds, cfg)
			if err != nil {
				t.Fatal(err)
			}
			if si == 0 {
				l.SetEpoch(epoch)
			} else if err := l.Resume(epoch, consumed); err != nil {
				t.Fatal(err)
			}
			if pad && steps >= 0 && l.Steps() != steps {
				t.Fatalf("%s: segment %d: rank %d takes %d steps, rank 0 %d", name, si, r, l.Steps(), steps)
			}
			steps = l.Steps()
			k := g.steps
			if k < 0 || k > l.Steps() {
				k = l.Steps()
			}
			at := 0
			for i := range k {
				m := l.Batch(i, x, y)
				if m > l.BatchSize() {
					t.Fatalf("%s: batch of %d items, BatchSize %d", name, m, l.BatchSize())
				}
				rows := l.StepRows(i)
				if !g.global && pad && m*g.world != rows {
					t.Fatalf("%s: step %d: %d items of %d over the ranks, per-rank batches differ", name, i, m, rows)
				}
				for _, id := range l.Indices()[at : at+m] {
					seen[int(id)]++
				}
				at += m
			}
			c := l.Consumed(k)
			if !pad && r > 0 {
				continue // ranks end at different steps: rank 0's position holds
			}
			if next >= 0 && c != next {
				t.Fatalf("%s: segment %d: rank %d consumed %d, rank 0 %d", name, si, r, c, next)
			}
			next = c
		}
		if g.steps >= 0 && next < n {
			// A prefix of the permutation, exactly.
			want := map[int]int{}
			for _, i := range perm[:next] {
				want[int(i)]++
			}
			for id, c := range seen {
				if want[id] != c {
					t.Fatalf("%s: after segment %d (%d consumed): row %d seen %d times, in the prefix %d times", name, si, next, id, c, want[id])
				}
			}
			if len(want) != len(seen) {
				t.Fatalf("%s: after segment %d: %d rows seen, the prefix of %d holds %d", name, si, len(seen), next, len(want))
			}
		}
		if next < consumed {
			t.Fatalf("%s: segment %d: consumed went back from %d to %d", name, si, consumed, next)
		}
		consumed = next
	}
	rem := "exact"
	if pad {
		rem = "pad"
	}
	checkEpochSplit(t, name, n, seen, end, n-before, rem, dropLast, 0)
}

// TestLoaderResumeSameWorldIsExact: resumed at the same world size and
// batch, the rest of the epoch is, batch for batch, the uninterrupted
// loader's.
func TestLoaderResumeSameWorldIsExact(t *testing.T) {
	t.Parallel()
	for _, cfg := range []LoaderConfig{
		{Rank: 1, World: 3, Batch: 8, Seed: 2, Shuffle: true, Pad: true},
		{Rank: 2, World: 3, GlobalBatch: 32, Batch: 1, Seed: 2, Shuffle: true, Pad: true},
		{Rank: 0, World: 4, Batch: 5, Seed: 2, Shuffle: true, Pad: true, DropLast: true},
	} {
		ds := synth(301)
		full, _ := PrepareData(ds, cfg)
		full.SetEpoch(1)
		x, y := make([]float32, 64), make([]float32, 32)
		var want []float32
		for i := range full.Steps() {
			m := full.Batch(i, x, y)
			want = append(want, y[:m]...)
			want = append(want, -1)
		}
		for k := range full.Steps() {
			l, _ := PrepareData(ds, cfg)
			if err := l.Resume(1, full.Consumed(k)); err != nil {
				t.Fatal(err)
			}
			if l.Steps() != full.Steps()-k {
				t.Fatalf("%+v: resumed after %d steps: %d steps left, want %d", cfg, k, l.Steps(), full.Steps()-k)
			}
			var got []float32
			for i := range l.Steps() {
				m := l.Batch(i, x, y)
				got = append(got, y[:m]...)
				got = append(got, -1)
			}
			// The tail of want after k batches.
			cut, marks := 0, 0
			for marks < k {
				if want[cut] == -1 {
					marks++
				}
				cut++
			}
			if !slices.Equal(got, want[cut:]) {
				t.Fatalf("%+v: resumed after %d steps: the rest of the epoch differs", cfg, k)
			}
		}
	}
}

// TestShardResumesAtAnyWorldSize: in memory, a position saved after s
// steps of W ranks restores on W' ranks (another batch size, per rank or
// global, too), which share the rest of the epoch: over the segments every
// row exactly once (up to the last one's padding or cut), the steps
// equal over the ranks, Left counting them down; a third segment on W”
// ranks from the second's position likewise.
func TestShardResumesAtAnyWorldSize(t *testing.T) {
	t.Parallel()
	plans := [][]segment{
		{{4, 8, false, 3}, {3, 8, false, -1}},
		{{3, 8, false, 2}, {4, 8, false, -1}},
		{{4, 5, false, 1}, {3, 5, false, 2}, {4, 5, false, -1}},
		{{2, 7, false, 4}, {5, 3, false, -1}},
		{{4, 16, true, 2}, {3, 16, true, 1}, {4, 16, true, -1}},
		{{1, 9, false, 3}, {3, 20, true, -1}},
		{{4, 6, false, 0}, {3, 6, false, -1}},
	}
	for _, n := range []int{97, 301} {
		tbl := newTestTable(n)
		dir := t.TempDir()
		specs := map[string]string{
			"csv":     tbl.writeFiles(t, mkdirT(t, filepath.Join(dir, "csv")), "csv", 3, 0),
			"parquet": tbl.writeFiles(t, mkdirT(t, filepath.Join(dir, "pq")), "parquet", 2, 37),
		}
		for format, uri := range specs {
			for _, mode := range []string{"memory", "stream"} {
				for _, rem := range []string{"pad", "drop", "exact"} {
					for _, dropLast := range []bool{false, true} {
						spec := idOnly(uri)
						spec.Mode, spec.Remainder, spec.DropLastBatch = mode, rem, dropLast
						if mode == "stream" {
							// Windows of 20 rows, several units each.
							spec.ShuffleWindowRows, spec.MemoryBudgetMiB = 20, 1
						}
						for _, plan := range plans {
							name := fmt.Sprintf("%s/%s/rows%d/%s/dropLast=%v/%v", format, mode, n, rem, dropLast, plan)
							t.Run(name, func(t *testing.T) {
								t.Parallel()
								shardEpoch(t, spec, n, plan)
							})
						}
					}
				}
			}
		}
	}
}

func mkdirT(t *testing.T, d string) string {
	if err := mkdir(d); err != nil {
		t.Fatal(err)
	}
	return d
}

func shardEpoch(t *testing.T, spec api.DatasetSpec, n int, plan []segment) {
	const epoch = 2
	seen := map[int]int{}
	dir := t.TempDir()
	// The segment the epoch ended in, the distinct rows seen before it, and
	// how many repeats streamed segments' padding may have added.
	distinctBefore, end, extra := 0, plan[0], 0
	exact := spec.Remainder == "exact"
	var pos0 Position
	for si, g := range plan {
		if pos0.Consumed < int64(n) {
			distinctBefore, end = len(seen), g
			if spec.Mode == "stream" && spec.Remainder == "pad" {
				extra += g.world - 1
			}
		}
		out := t.TempDir()
		for r := range g.world {
			opt := ShardOptions{Rank: r, WorldSize: g.world, BatchSize: g.batch, Seed: 4}
			if g.global {
				opt.BatchSize = 1
			}
			s := mustOpen(t, spec, opt, nil)
			if s.Streaming() != (spec.Mode == "stream") {
				t.Fatalf("mode %s, streaming %v", spec.Mode, s.Streaming())
			}
			if g.global {
				if err := s.SetGlobalBatchSize(g.batch); err != nil {
					t.Fatal(err)
				}
			}
			if si == 0 {
				if err := s.SetEpoch(epoch); err != nil {
					t.Fatal(err)
				}
			} else if err := s.RestoreState(dir); err != nil {
				t.Fatal(err)
			}
			if s.Position().Epoch != epoch {
				t.Fatalf("restored at epoch %d", s.Position().Epoch)
			}
			x, y := make([]float32, s.BatchSize()*s.Width()), make([]float32, s.BatchSize())
			left := s.Left()
			took := 0
			for g.steps < 0 || took < g.steps {
				m, err := s.Next(context.Background(), x, y)
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				took++
				if s.Left() != left-took {
					t.Fatalf("after %d batches: Left %d, want %d", took, s.Left(), left-took)
				}
				if !exact && !g.global && m*g.world != s.StepRows() {
					t.Fatalf("a batch of %d rows in a step of %d over %d ranks", m, s.StepRows(), g.world)
				}
				for i := range m {
					seen[int(x[i*s.Width()])]++
				}
			}
			if g.steps >= 0 && took != g.steps && s.Left() != 0 {
				t.Fatalf("segment %d rank %d: %d batches, want %d", si, r, took, g.steps)
			}
			p := s.Position()
			if r == 0 {
				pos0 = p
				if err := s.SaveState(out); err != nil {
					t.Fatal(err)
				}
			} else if !exact && (p.Consumed != pos0.Consumed || p.Batches != pos0.Batches) {
				t.Fatalf("segment %d: rank %d at %+v, rank 0 at %+v", si, r, p, pos0)
			}
			s.Close()
		}
		dir = out
	}
	checkEpochSplit(t, "", n, seen, end, n-distinctBefore, spec.Remainder, spec.DropLastBatch, extra)
}

// TestShardResumesOldPosition: a position saved before positions held the
// rows consumed (only batches) resumes on another world size from the
// rows its batches consumed.
func TestShardResumesOldPosition(t *testing.T) {
	t.Parallel()
	tbl := newTestTable(200)
	spec := idOnly(tbl.writeFiles(t, t.TempDir(), "csv", 2, 0))
	spec.Mode = "memory"
	seen := map[int]int{}
	var pos Position
	for r := range 4 {
		s := mustOpen(t, spec, ShardOptions{Rank: r, WorldSize: 4, BatchSize: 8, Seed: 1}, nil)
		x := make([]float32, 8*s.Width())
		for range 3 {
			m, err := s.Next(context.Background(), x, nil)
			if err != nil {
				t.Fatal(err)
			}
			for i := range m {
				seen[int(x[i*s.Width()])]++
			}
		}
		pos = s.Position()
	}
	if pos.Consumed != 96 {
		t.Fatalf("consumed %d after 3 steps of 4×8", pos.Consumed)
	}
	pos.Consumed = 0 // as an older version saved it
	for r := range 3 {
		s := mustOpen(t, spec, ShardOptions{Rank: r, WorldSize: 3, BatchSize: 8, Seed: 1}, nil)
		if err := s.Seek(pos); err != nil {
			t.Fatal(err)
		}
		if p := s.Position(); p.Consumed != 96 || p.Batches != 4 {
			t.Fatalf("seeked to %+v: want 96 rows consumed, batch 4 of 3×8", p)
		}
		ids, _ := epochRows(t, s)
		for _, id := range ids {
			seen[id]++
		}
	}
	checkEpochSplit(t, "old position", 200, seen, segment{3, 8, false, -1}, 200-96, "pad", false, 0)
}

// TestSeekRefusesRealMismatches: another world size or batch re-splits,
// in memory and streamed, but another seed, shuffle, remainder, mode,
// shuffle window or data is still refused.
func TestSeekRefusesRealMismatches(t *testing.T) {
	t.Parallel()
	tbl := newTestTable(120)
	specs := shardSpecs(t, tbl)
	mem := specs["csv/memory"]
	a := mustOpen(t, mem, ShardOptions{WorldSize: 2, BatchSize: 4, Seed: 1}, nil)
	a.Next(context.Background(), make([]float32, 4*a.Width()), nil)
	pos := a.Position()
	b := mustOpen(t, mem, ShardOptions{WorldSize: 3, BatchSize: 5, Seed: 1}, nil)
	if err := b.Seek(pos); err != nil {
		t.Fatalf("memory, another world size and batch: %v", err)
	}
	c := mustOpen(t, mem, ShardOptions{WorldSize: 3, BatchSize: 5, Seed: 2}, nil)
	wantErr(t, c.Seek(pos), false, "seed 1 saved, 2 now")
	noShuffle := mem
	off := false
	noShuffle.Shuffle = &off
	d := mustOpen(t, noShuffle, ShardOptions{WorldSize: 3, BatchSize: 5, Seed: 1}, nil)
	wantErr(t, d.Seek(pos), false, "shuffle true saved, false now")
	drop := mem
	drop.Remainder = "drop"
	e := mustOpen(t, drop, ShardOptions{WorldSize: 3, BatchSize: 5, Seed: 1}, nil)
	wantErr(t, e.Seek(pos), false, "remainder pad saved, drop now")
	other := newTestTable(121)
	om := idOnly(other.writeFiles(t, t.TempDir(), "csv", 1, 0))
	om.Mode = "memory"
	f := mustOpen(t, om, ShardOptions{WorldSize: 3, BatchSize: 5, Seed: 1}, nil)
	wantErr(t, f.Seek(pos), false, "total rows 120 saved, 121 now", "files")

	st := specs["csv/stream"]
	g := mustOpen(t, st, ShardOptions{WorldSize: 2, BatchSize: 4, Seed: 1}, nil)
	g.Next(context.Background(), make([]float32, 4*g.Width()), nil)
	spos := g.Position()
	h := mustOpen(t, st, ShardOptions{WorldSize: 3, BatchSize: 4, Seed: 1}, nil)
	if err := h.Seek(spos); err != nil {
		t.Fatalf("stream, another world size: %v", err)
	}
	if p := h.Position(); len(p.Splits) != 1 || p.Splits[0] != (PositionSplit{WorldSize: 2, RowsPerStep: 8, Consumed: 8}) {
		t.Fatalf("stream re-split: splits %+v", p.Splits)
	}
	wide := st
	wide.ShuffleWindowRows = 60
	k := mustOpen(t, wide, ShardOptions{WorldSize: 3, BatchSize: 4, Seed: 1}, nil)
	wantErr(t, k.Seek(spos), false, "shuffle window rows 50 saved, 60 now")
	wantErr(t, c.Seek(spos), false, "mode stream saved, memory now")
}

// TestResplitResumeIsExact: a shard that re-split an epoch (restored on 3
// ranks from a position of 4) and saved its position after k more
// batches resumes, at the same settings, batch for batch where it was, in
// memory and streamed (the position's Splits replay the layout); and at
// yet another world size from there, every row is still taken once.
func TestResplitResumeIsExact(t *testing.T) {
	t.Parallel()
	tbl := newTestTable(157)
	for name, spec := range shardSpecs(t, tbl) {
		if spec.Mode == "stream" {
			spec.ShuffleWindowRows = 20
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			first := t.TempDir()
			for r := range 4 {
				s := mustOpen(t, spec, ShardOptions{Rank: r, WorldSize: 4, BatchSize: 5, Seed: 8}, nil)
				s.SetEpoch(1)
				x := make([]float32, 5*s.Width())
				for range 3 {
					if _, err := s.Next(ctx, x, nil); err != nil {
						t.Fatal(err)
					}
				}
				if r == 0 {
					if err := s.SaveState(first); err != nil {
						t.Fatal(err)
					}
				}
			}
			opt := ShardOptions{Rank: 1, WorldSize: 3, BatchSize: 7, Seed: 8}
			ref := mustOpen(t, spec, opt, nil)
			if err := ref.RestoreState(first); err != nil {
				t.Fatal(err)
			}
			p := ref.Position()
			if wantSplits := spec.Mode == "stream"; (len(p.Splits) == 1) != wantSplits || p.Consumed != 60 {
				t.Fatalf("restored on 3 ranks: %+v", p)
			}
			_, want := epochRows(t, ref)
			for k := 0; k <= len(want); k++ {
				a := mustOpen(t, spec, opt, nil)
				if err := a.RestoreState(first); err != nil {
					t.Fatal(err)
				}
				x := make([]float32, 7*a.Width())
				for range k {
					if _, err := a.Next(ctx, x, nil); err != nil {
						t.Fatal(err)
					}
				}
				dir := t.TempDir()
				if err := a.SaveState(dir); err != nil {
					t.Fatal(err)
				}
				b := mustOpen(t, spec, opt, nil)
				if err := b.RestoreState(dir); err != nil {
					t.Fatal(err)
				}
				if pa, pb := a.Position(), b.Position(); pa.Batches != pb.Batches || pa.Consumed != pb.Consumed || len(pa.Splits) != len(pb.Splits) {
					t.Fatalf("after %d batches: saved %+v, restored %+v", k, pa, pb)
				}
				if _, got := epochRows(t, b); !slices.EqualFunc(got, want[k:], slices.Equal) {
					t.Fatalf("resumed after %d batches of the re-split epoch: the rest differs (%d batches, want %d)", k, len(got), len(want)-k)
				}
			}
		})
	}
}

// TestSplitIsTheStridedShard: with per-rank batches, a split from an
// epoch's start is the layout shards had before splits existed (positions
// saved then resume the same rows): rank r takes rows r, r+W, ... of the
// order (DistributedSampler's), as many as remainder pad (padded with the
// order's first rows), drop or exact gives it, in batches of b but the
// last, a partial last batch dropped with dropLast; streaming, rank r's
// contiguous range is [r·rows, (r+1)·rows) (exact: share's), dropLast or
// not.
func TestSplitIsTheStridedShard(t *testing.T) {
	t.Parallel()
	for n := int64(1); n < 120; n++ {
		for w := 1; w <= 6; w++ {
			for b := 1; b <= 9; b++ {
				for _, rem := range []string{"pad", "drop", "exact"} {
					if rem == "drop" && n < int64(w) {
						continue
					}
					for _, dropLast := range []bool{false, true} {
						sp := newSplit(n, 0, b*w, w, rem, dropLast)
						for r := range w {
							var want []int64
							var rows, lo int64
							if rem == "exact" {
								for i := int64(r); i < n; i += int64(w) {
									want = append(want, i)
								}
								rows = int64(len(want))
								lo, _ = share(n, r, w)
							} else {
								rows = (n + int64(w) - 1) / int64(w)
								if rem == "drop" {
									rows = n / int64(w)
								}
								for k := range rows {
									want = append(want, (int64(r)+k*int64(w))%n)
								}
								lo = int64(r) * rows
							}
							what := fmt.Sprintf("%d rows, %d ranks, batch %d, %s, dropLast %v, rank %d", n, w, b, rem, dropLast, r)
							if sp.rangeRows(r) != rows || sp.before(r) != lo {
								t.Fatalf("%s: range [%d, +%d), want [%d, +%d)", what, sp.before(r), sp.rangeRows(r), lo, rows)
							}
							steps := (rows + int64(b) - 1) / int64(b)
							if dropLast {
								steps = rows / int64(b)
								rows = steps * int64(b)
								want = want[:rows]
							}
							var got []int64
							sp.offsets(r, func(off int64) { got = append(got, off%n) })
							if !slices.Equal(got, want) || sp.steps(r) != steps || sp.rows(r) != rows {
								t.Fatalf("%s: rows %v in %d steps, want %v in %d", what, got, sp.steps(r), want, steps)
							}
							var pos int64
							for k := range steps {
								if got, want := sp.batchAt(r, pos), min(int64(b), rows-pos); got != want {
									t.Fatalf("%s: step %d takes %d rows, want %d", what, k, got, want)
								}
								pos += sp.batchAt(r, pos)
							}
							if sp.batchAt(r, pos) != 0 {
								t.Fatalf("%s: a batch after the last", what)
							}
						}
					}
				}
			}
		}
	}
}
