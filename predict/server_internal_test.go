package predict

import "testing"

// TestUnderPrefix: whole path elements, file URIs as paths, ".." and
// surrounding spaces refused.
func TestUnderPrefix(t *testing.T) {
	prefixes := []string{"/data/runs", "s3://models/prod/", "file:///srv/ckpt"}
	for _, tt := range []struct {
		uri  string
		want bool
	}{
		{"/data/runs/r/checkpoint_000001", true},
		{"/data/runs", true},
		{"file:///data/runs/r/checkpoint_000001", true},
		{"/srv/ckpt/promoted.json", true},
		{"s3://models/prod/r/checkpoint_000001", true},
		{"/data/runs2/r/checkpoint_000001", false},
		{"/data/run", false},
		{"/data/runs/../secret/checkpoint_000001", false},
		{"/data/runs/r/..", false},
		{" /data/runs/r/checkpoint_000001", false},
		{"/data/runs/r/checkpoint_000001\x00", false},
		{"s3://models/prodx/r", false},
		{"s3://models/prod/../dev/r", false},
		{"/etc/passwd", false},
		{"", false},
	} {
		if got := underPrefix(tt.uri, prefixes); got != tt.want {
			t.Errorf("underPrefix(%q) = %v, want %v", tt.uri, got, tt.want)
		}
	}
	if underPrefix("/data/runs/r", nil) {
		t.Error("under a prefix with none given")
	}
}
