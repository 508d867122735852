package main

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The codec server does not start without a token unless told to, and
// refuses to listen on every interface without the names it is reached by.
func TestCodecServerArguments(t *testing.T) {
	t.Setenv(codecTokenEnv, "")
	keys := filepath.Join(t.TempDir(), "keys.json")
	key := base64.StdEncoding.EncodeToString([]byte(strings.Repeat("k", 32)))
	if err := os.WriteFile(keys, []byte(`{"encrypt": "a", "keys": {"a": "`+key+`"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := runCodecServer([]string{"-codec-keys", keys, "-listen", "127.0.0.1:0"}); err == nil || !strings.Contains(err.Error(), "-auth-token") {
		t.Errorf("no token: %v, want a refusal naming -auth-token", err)
	}
	if err := runCodecServer([]string{"-codec-keys", keys, "-listen", "0.0.0.0:0", "-auth-token", "tok"}); err == nil || !strings.Contains(err.Error(), "every interface") {
		t.Errorf("every interface without -hosts: %v, want a refusal", err)
	}
}
