package main

import (
	"bytes"
	"context"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tempotrain/tempotrain/examples/internal/local"
	"github.com/tempotrain/tempotrain/train"
)

// TestExample runs the example as `go run ./examples/go-function` does,
// into a temporary directory: the line is found, every epoch reported, and
// the latest checkpoint holds the parameters.
func TestExample(t *testing.T) {
	var out bytes.Buffer
	res := local.Run(t, 2*time.Minute, func(ctx context.Context, w io.Writer) (*train.Result, error) {
		return run(ctx, io.MultiWriter(w, &out), 60, 2, t.TempDir())
	})
	if res.Reports != 60 || res.Attempts != 1 {
		t.Errorf("reports %d, attempts %d; want 60 and 1", res.Reports, res.Attempts)
	}
	if w, b := res.Metrics["w"], res.Metrics["b"]; math.Abs(w-3) > 0.02 || math.Abs(b-1) > 0.02 {
		t.Errorf("w = %v, b = %v; want about 3 and 1", w, b)
	}
	if res.Checkpoint == nil {
		t.Fatal("no checkpoint")
	}
	if _, err := os.Stat(filepath.Join(res.Checkpoint.URI, "params.json")); err != nil {
		t.Errorf("latest checkpoint: %v", err)
	}
	if !strings.Contains(out.String(), "w = 2.99") {
		t.Errorf("printed %q, want it to say w = 2.99...", out.String())
	}
}
