package main

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tempotrain/tempotrain/storage"
)

func TestServeArguments(t *testing.T) {
	t.Parallel()
	if err := runServe(nil); err == nil || !strings.Contains(err.Error(), "-checkpoint is required") {
		t.Errorf("no -checkpoint: %v", err)
	}
	missing := filepath.Join(t.TempDir(), "run", "checkpoint_000001")
	if err := runServe([]string{"-checkpoint", missing}); !errors.Is(err, storage.ErrNotFound) || !strings.Contains(err.Error(), missing) {
		t.Errorf("a checkpoint that does not exist: %v, want ErrNotFound naming it", err)
	}
}
