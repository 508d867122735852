package storage

import (
	"context"
	"encoding/json"
	"math"
	"strings"
	"testing"
)

func TestManifestCheck(t *testing.T) {
	t.Parallel()
	good := FileEntry{Path: "a", Size: 1, SHA256: sha([]byte("x"))}
	for _, tc := range []struct {
		name string
		m    Manifest
		want string
	}{
		{"ok", Manifest{Version: 1, Seq: 5, Files: []FileEntry{good}, Bytes: 1}, ""},
		{"newer format", Manifest{Version: 2, Seq: 5}, "format version 2"},
		{"wrong seq", Manifest{Version: 1, Seq: 4}, "says seq 4"},
		{"escaping path", Manifest{Version: 1, Seq: 5, Files: []FileEntry{{Path: "../../etc/x", SHA256: good.SHA256}}}, "file path"},
		{"absolute path", Manifest{Version: 1, Seq: 5, Files: []FileEntry{{Path: "/etc/x", SHA256: good.SHA256}}}, "file path"},
		{"manifest as a file", Manifest{Version: 1, Seq: 5, Files: []FileEntry{{Path: ManifestFile, SHA256: good.SHA256}}}, "file path"},
		{"duplicate", Manifest{Version: 1, Seq: 5, Files: []FileEntry{good, good}, Bytes: 2}, "duplicated"},
		{"bad sum", Manifest{Version: 1, Seq: 5, Files: []FileEntry{{Path: "a", SHA256: "xyz"}}}, "sha256"},
		{"bytes", Manifest{Version: 1, Seq: 5, Files: []FileEntry{good}, Bytes: 7}, "bytes 7"},
	} {
		err := tc.m.check(5)
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error mentioning %q", tc.name, err, tc.want)
		}
	}
}

func TestManifestKeepsNonFiniteMetrics(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, _ := NewLocal(t.TempDir())
	r := NewRun(b, "r")
	commit(t, r, 1, ckptFiles(1), Manifest{Metrics: map[string]float64{"loss": math.NaN(), "up": math.Inf(1), "down": math.Inf(-1), "acc": 0.25}})
	m, err := r.ReadManifest(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if !math.IsNaN(m.Metrics["loss"]) || !math.IsInf(m.Metrics["up"], 1) || !math.IsInf(m.Metrics["down"], -1) || m.Metrics["acc"] != 0.25 || len(m.Metrics) != 4 {
		t.Fatalf("metrics %v", m.Metrics)
	}
	put(t, b, "r/checkpoint_000001/manifest.json", []byte(`{"version":1,"seq":1,"files":[],"bytes":0,"metrics":{"x":"lots"}}`))
	_, err = r.ReadManifest(ctx, 1)
	wantErrIs(t, err, ErrCorrupt)
}

func TestManifestJSONShape(t *testing.T) {
	t.Parallel()
	// The manifest is read by other tools; its field names are the format.
	data, _ := json.Marshal(Manifest{Version: 1, Seq: 2, Files: []FileEntry{{Path: "a", Size: 1, SHA256: "s"}}})
	for _, k := range []string{`"version":1`, `"seq":2`, `"files":[{"path":"a","size":1,"sha256":"s"}]`, `"bytes":0`, `"time":`} {
		if !strings.Contains(string(data), k) {
			t.Errorf("manifest JSON %s lacks %s", data, k)
		}
	}
}
