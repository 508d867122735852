package storage

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

type testState struct {
	Attempts int   `json:"attempts"`
	Kept     []int `json:"kept"`
}

func TestRunState(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b Backend) {
		ctx := context.Background()
		r := NewRun(b, "demo")
		var st testState
		found, err := r.LoadState(ctx, &st)
		if err != nil || found {
			t.Fatalf("fresh run: found=%v err=%v", found, err)
		}
		for i := 1; i <= 2; i++ {
			if err := r.SaveState(ctx, testState{Attempts: i, Kept: []int{i}}); err != nil {
				t.Fatal(err)
			}
			var got testState
			if found, err := r.LoadState(ctx, &got); err != nil || !found || got.Attempts != i || len(got.Kept) != 1 {
				t.Fatalf("load after save %d: %+v found=%v err=%v", i, got, found, err)
			}
		}
		if want := b.URI("demo"); r.URI() != want {
			t.Fatalf("URI %q, want %q", r.URI(), want)
		}
		put(t, b, "demo/run.json", []byte(`{"attempts":`))
		_, err = r.LoadState(ctx, &st)
		wantErrIs(t, err, ErrCorrupt)
		contains(t, err, "run.json")
	})
}

// metricsLines makes report lines i..j-1.
func metricsLines(i, j int) []json.RawMessage {
	var out []json.RawMessage
	for k := i; k < j; k++ {
		out = append(out, json.RawMessage(fmt.Sprintf(`{"report": %d, "loss": 0.5}`, k)))
	}
	return out
}

func TestAppendMetrics(t *testing.T) {
	t.Parallel()
	type call struct {
		first   int
		lines   []json.RawMessage
		wantErr string
	}
	for _, tc := range []struct {
		name    string
		initial string // metrics.jsonl before the calls ("" = absent)
		calls   []call
		want    int // reports after the calls; report i must be line i
	}{
		{"fresh", "", []call{{0, metricsLines(0, 3), ""}}, 3},
		{"in order", "", []call{{0, metricsLines(0, 2), ""}, {2, metricsLines(2, 5), ""}}, 5},
		{"retry is a no-op", "", []call{{0, metricsLines(0, 2), ""}, {0, metricsLines(0, 2), ""}}, 2},
		{"overlap appends only the new", "", []call{{0, metricsLines(0, 2), ""}, {1, metricsLines(1, 4), ""}}, 4},
		{"gap is refused", "", []call{{0, metricsLines(0, 2), ""}, {3, metricsLines(3, 4), "gap"}}, 2},
		{"torn last line is repaired", `{"report":0,"loss":0.5}` + "\n" + `{"report":1,"lo`, []call{{1, metricsLines(1, 3), ""}}, 3},
		{"torn line repaired by a retry", `{"report":0,"loss":0.5}` + "\n" + `{"rep`, []call{{0, metricsLines(0, 1), ""}}, 1},
		{"not JSON", "", []call{{0, []json.RawMessage{json.RawMessage(`{"a":`)}, "not JSON"}}, 0},
		{"negative index", "", []call{{-1, metricsLines(0, 1), "< 0"}}, 0},
	} {
		for _, generic := range []bool{false, true} {
			name := tc.name + map[bool]string{false: "/in-place", true: "/rewrite"}[generic]
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				root := t.TempDir()
				local, _ := NewLocal(root)
				var b Backend = local
				if generic {
					b = &recorder{Backend: local} // hides the in-place append
				}
				if tc.initial != "" {
					put(t, b, "r/metrics.jsonl", []byte(tc.initial))
				}
				r := NewRun(b, "r")
				for _, c := range tc.calls {
					err := r.AppendMetrics(ctx, c.first, c.lines)
					if c.wantErr == "" && err != nil {
						t.Fatalf("AppendMetrics(%d, %d lines): %v", c.first, len(c.lines), err)
					}
					if c.wantErr != "" {
						contains(t, err, c.wantErr)
					}
				}
				got, err := r.ReadMetrics(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if len(got) != tc.want {
					t.Fatalf("%d reports, want %d: %s", len(got), tc.want, got)
				}
				for i, l := range got {
					var v struct{ Report int }
					if err := json.Unmarshal(l, &v); err != nil || v.Report != i {
						t.Fatalf("line %d is %s, want report %d", i, l, i)
					}
				}
				// The file is all whole lines: the torn tail is gone, not just hidden.
				raw, err := os.ReadFile(filepath.Join(root, "r", "metrics.jsonl"))
				if err == nil && len(raw) > 0 && (raw[len(raw)-1] != '\n' || bytes.Count(raw, []byte("\n")) != tc.want) {
					t.Fatalf("metrics.jsonl is %q", raw)
				}
			})
		}
	}
}

func TestMetricsOnEveryBackend(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b Backend) {
		ctx := context.Background()
		r := NewRun(b, "m")
		if got, err := r.ReadMetrics(ctx); err != nil || len(got) != 0 {
			t.Fatalf("fresh run: %v %v", got, err)
		}
		for i := 0; i < 10; i += 2 {
			if err := r.AppendMetrics(ctx, i, metricsLines(i, i+3)); err != nil {
				t.Fatal(err)
			}
		}
		got, err := r.ReadMetrics(ctx)
		if err != nil || len(got) != 11 {
			t.Fatalf("%d reports (%v), want 11", len(got), err)
		}
		// A bad line that is not the last is corruption, not a torn write.
		put(t, b, "m/metrics.jsonl", []byte("{\"a\":1}\nnot json\n{\"a\":2}\n"))
		_, err = r.ReadMetrics(ctx)
		wantErrIs(t, err, ErrCorrupt)
		contains(t, err, "line 2")
	})
}

func TestReadMetricsSkipsTornLine(t *testing.T) {
	t.Parallel()
	b, _ := NewLocal(t.TempDir())
	put(t, b, "r/metrics.jsonl", []byte(strings.Join([]string{`{"a":1}`, `{"a":2}`, `{"a":`}, "\n")))
	got, err := NewRun(b, "r").ReadMetrics(context.Background())
	if err != nil || len(got) != 2 || string(got[1]) != `{"a":2}` {
		t.Fatalf("got %s, %v", got, err)
	}
}
