package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tempotrain/tempotrain/examples/internal/local"
	"github.com/tempotrain/tempotrain/train"
)

// TestExample runs the example as `go run ./examples/python-pytorch
// -interpreter /usr/bin/python3` does from the repository root: two
// PyTorch ranks learn the table and rank 0's state.pt is committed. It
// needs Debian's python3-torch: without it the test skips, and fails
// instead when TEMPOTRAIN_REQUIRE_TORCH=1 (as CI sets it).
func TestExample(t *testing.T) {
	if _, err := os.Stat("/usr/lib/python3/dist-packages/torch/__init__.py"); err != nil {
		if os.Getenv("TEMPOTRAIN_REQUIRE_TORCH") == "1" {
			t.Fatalf("needs python3-torch (TEMPOTRAIN_REQUIRE_TORCH=1): %v", err)
		}
		t.Skipf("needs python3-torch (apt-get install python3-torch): %v", err)
	}
	res := local.Run(t, 3*time.Minute, func(ctx context.Context, out io.Writer) (*train.Result, error) {
		return run(ctx, out, ".", "/usr/bin/python3", t.TempDir())
	})
	if res.Reports != 5 {
		t.Errorf("reports = %d, want 5 (one per epoch)", res.Reports)
	}
	if acc := res.Metrics["accuracy"]; acc < 0.9 {
		t.Errorf("accuracy = %v, want at least 0.9", acc)
	}
	if res.Checkpoint == nil {
		t.Fatal("no checkpoint")
	}
	if _, err := os.Stat(filepath.Join(res.Checkpoint.URI, "state.pt")); err != nil {
		t.Errorf("the checkpoint lacks rank 0's state.pt: %v", err)
	}
}
