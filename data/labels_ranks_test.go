package data

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tempotrain/tempotrain/api"
)

// TestLabelClassesCombinedOverRanks: each rank fits the label over its own
// contiguous part of the rows, and here every part holds two classes of the
// four (rows 0-3 cat/dog, 4-7 dog/emu, 8-11 emu/fox over 3 ranks; the same
// with numbers). The classes must be the union over all ranks, the same on
// every rank, and a row's class number the same whichever rank reads it: a
// rank that kept its own part's classes would number the rows wrongly.
func TestLabelClassesCombinedOverRanks(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, tt := range []struct {
		name    string
		values  []string
		classes []string
	}{
		{"strings", []string{"cat", "dog", "emu", "fox"}, []string{"cat", "dog", "emu", "fox"}},
		{"numbers", []string{"7", "-1", "30", "2.5"}, []string{"-1", "2.5", "7", "30"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var sb strings.Builder
			sb.WriteString("a,y\n")
			want := map[float32]float32{} // feature a -> class number
			for i := range 12 {
				v := tt.values[i/4+i%2]
				fmt.Fprintf(&sb, "%d,%s\n", i, v)
				want[float32(i)] = float32(slices.Index(tt.classes, v))
			}
			p := filepath.Join(dir, tt.name+".csv")
			if err := os.WriteFile(p, []byte(sb.String()), 0o644); err != nil {
				t.Fatal(err)
			}
			const n = 3
			comms := newComms(t, n)
			no := false
			spec := api.DatasetSpec{URI: p, Label: "y", Task: "classification", Shuffle: &no}
			errs := eachRank(n, func(r int) error {
				s, err := Open(context.Background(), spec, ShardOptions{Rank: r, WorldSize: n, BatchSize: 4}, comms[r])
				if err != nil {
					return err
				}
				defer s.Close()
				if got := s.Label().Classes; !slices.Equal(got, tt.classes) {
					return fmt.Errorf("classes %v, want %v", got, tt.classes)
				}
				x, y := make([]float32, 4*s.Width()), make([]float32, 4)
				seen := 0
				for {
					k, err := s.Next(context.Background(), x, y)
					for i := range k {
						if w := want[x[i*s.Width()]]; y[i] != w {
							return fmt.Errorf("row a=%v: class %v, want %v", x[i*s.Width()], y[i], w)
						}
					}
					seen += k
					if err != nil || k == 0 {
						break
					}
				}
				if seen == 0 {
					return fmt.Errorf("read no rows")
				}
				return nil
			})
			for r, err := range errs {
				if err != nil {
					t.Errorf("rank %d: %v", r, err)
				}
			}
		})
	}
}
