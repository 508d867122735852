package data

import (
	"fmt"
	"testing"
)

// TestRowIDs: a rank's row ids are the file-order indices of the rows Next
// gives it, in that order, in memory and streamed, for every world size; a
// shuffled stream refuses.
func TestRowIDs(t *testing.T) {
	t.Parallel()
	tab := newTestTable(301)
	for _, format := range []string{"csv", "parquet"} {
		uri := tab.writeFiles(t, t.TempDir(), format, 3, 40)
		for _, mode := range []string{"memory", "stream"} {
			for world := 1; world <= 4; world++ {
				t.Run(fmt.Sprintf("%s/%s/%d", format, mode, world), func(t *testing.T) {
					seen := map[int64]bool{}
					for r := 0; r < world; r++ {
						spec := idOnly(uri)
						spec.Mode, spec.Remainder = mode, "exact"
						off := false
						spec.Shuffle = &off
						if mode == "stream" {
							spec.MemoryBudgetMiB = 1
						}
						s := mustOpen(t, spec, ShardOptions{Rank: r, WorldSize: world, BatchSize: 16}, nil)
						if err := s.SetEpoch(0); err != nil {
							t.Fatal(err)
						}
						ids, err := s.RowIDs()
						if err != nil {
							t.Fatal(err)
						}
						got, _ := epochRows(t, s)
						if len(got) != len(ids) {
							t.Fatalf("rank %d: %d rows, %d row ids", r, len(got), len(ids))
						}
						for i := range got {
							if int64(got[i]) != ids[i] {
								t.Fatalf("rank %d row %d: id column %d, RowIDs says %d", r, i, got[i], ids[i])
							}
							if seen[ids[i]] {
								t.Fatalf("row %d given twice", ids[i])
							}
							seen[ids[i]] = true
						}
					}
					if len(seen) != tab.n {
						t.Errorf("%d rows over %d ranks, want %d", len(seen), world, tab.n)
					}
				})
			}
		}
	}
	spec := idOnly(tab.writeFiles(t, t.TempDir(), "csv", 2, 0))
	spec.Mode, spec.MemoryBudgetMiB = "stream", 1
	s := mustOpen(t, spec, ShardOptions{BatchSize: 8}, nil)
	if _, err := s.RowIDs(); err == nil {
		t.Error("row ids of a shuffled stream")
	}
}
