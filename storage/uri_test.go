package storage

import "testing"

func TestSplitCheckpointURI(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		uri, storage, run string
		seq               int
		err               bool
	}{
		{"/data/runs/demo/checkpoint_000003", "/data/runs", "demo", 3, false},
		{"/data/runs/demo/checkpoint_000003/", "/data/runs", "demo", 3, false},
		{"/demo/checkpoint_1234567", "/", "demo", 1234567, false},
		{"file:///data/demo/checkpoint_000001", "file:///data", "demo", 1, false},
		{"file:///demo/checkpoint_000001", "file:///", "demo", 1, false},
		{"s3://b/p/q/demo/checkpoint_000010", "s3://b/p/q", "demo", 10, false},
		{"s3://b/demo/checkpoint_000010", "s3://b", "demo", 10, false},
		{"s3://b/checkpoint_000010", "s3://b", "", 10, false},
		{"/data/runs/demo", "", "", 0, true},
		{"/data/runs/demo/checkpoint_3", "", "", 0, true},
		{"/data/runs/demo/checkpoint_00000x", "", "", 0, true},
		{"checkpoint_000001", "", "", 0, true},
	} {
		s, r, seq, err := splitCheckpointURI(tc.uri)
		if tc.err != (err != nil) || s != tc.storage || r != tc.run || seq != tc.seq {
			t.Errorf("split(%q) = %q %q %d %v", tc.uri, s, r, seq, err)
		}
	}
}
