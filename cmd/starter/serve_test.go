package main

import (
	"errors"
	"os"
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

// TestServeCredentials: beyond loopback serve refuses to start without a
// token unless -insecure, before it loads anything; a token file that is
// missing, empty or short is an error; -load-prefix needs -model-control.
func TestServeCredentials(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	missing := filepath.Join(dir, "run", "checkpoint_000001")
	good, short, empty := filepath.Join(dir, "good"), filepath.Join(dir, "short"), filepath.Join(dir, "empty")
	for f, v := range map[string]string{good: "0123456789abcdef-token\n", short: "pw", empty: " \n"} {
		if err := os.WriteFile(f, []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, tt := range []struct {
		args []string
		want string // "" is storage.ErrNotFound: the checks passed and Load ran
	}{
		{[]string{"-addr", "0.0.0.0:0"}, "-addr 0.0.0.0:0 is reachable beyond this machine: give a bearer token (-token-file, or env TEMPOTRAIN_SERVE_TOKEN), or -insecure"},
		{[]string{"-addr", ":8000"}, "-addr :8000 is reachable beyond this machine"},
		{[]string{"-addr", "[::]:0"}, "reachable beyond this machine"},
		{[]string{"-addr", "0.0.0.0:0", "-insecure"}, ""},
		{[]string{"-addr", "0.0.0.0:0", "-token-file", good}, ""},
		{[]string{"-addr", "127.0.0.1:0"}, ""},
		{[]string{"-addr", "localhost:0"}, ""},
		{[]string{"-addr", "[::1]:0"}, ""},
		{[]string{"-token-file", short}, "has 2 characters: want at least 16"},
		{[]string{"-token-file", empty}, "is empty"},
		{[]string{"-token-file", filepath.Join(dir, "nope")}, "-token-file: open"},
		{[]string{"-load-prefix", dir}, "-load-prefix needs -model-control"},
		{[]string{"-model-control", "-load-prefix", dir}, ""},
	} {
		err := runServe(append([]string{"-checkpoint", missing}, tt.args...))
		if tt.want == "" && !errors.Is(err, storage.ErrNotFound) || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("serve %v: %v, want %q", tt.args, err, tt.want)
		}
	}
}
