package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/tempotrain/tempotrain/storage/miniotest"
)

// TestBenchRuns keeps the benchmark working: one small round, every
// measurement present. The numbers themselves are for `go run`.
func TestBenchRuns(t *testing.T) {
	if _, err := miniotest.Binary(); err != nil {
		miniotest.Missing(t, err)
	}
	c := Config{MiB: 8, Files: 2, Rounds: 1, Reports: 2, Compute: 1.5, Dir: t.TempDir()}
	var log bytes.Buffer
	r, err := Run(context.Background(), c, &log)
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	if r.Bytes != 8<<20 || r.OursUp <= 0 || r.PeerUp <= 0 || r.OursDown <= 0 || r.PeerDown <= 0 {
		t.Fatalf("result %+v", r)
	}
	for _, mode := range []string{"copy", "link"} {
		if a, ok := r.Async[mode]; !ok || a.Sync <= 0 || a.Hidden > 1 {
			t.Fatalf("async %s: %+v", mode, a)
		}
	}
	var out bytes.Buffer
	Print(&out, c, r)
	for _, want := range []string{"upload", "download", "async copy", "async link", "ratio"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("report lacks %q:\n%s", want, out.String())
		}
	}
}
