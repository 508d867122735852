package kern

import (
	"os"
	"strings"
	"testing"
)

// TestPathNamesWhatRuns: Path names the clone this processor's flags
// select, the packed GEMM only where AVX-512 runs, and OpenBLAS's core.
func TestPathNamesWhatRuns(t *testing.T) {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		t.Skip("no /proc/cpuinfo")
	}
	var flags map[string]bool
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "flags" {
			flags = map[string]bool{}
			for _, f := range strings.Fields(v) {
				flags[f] = true
			}
			break
		}
	}
	if flags == nil {
		t.Skip("no flags in /proc/cpuinfo")
	}
	want := "clones=baseline"
	switch {
	case flags["avx512f"]:
		want = "clones=avx512f packed=avx512"
	case flags["avx2"] && flags["fma"]:
		want = "clones=avx2+fma packed=off"
	}
	p := Path()
	t.Logf("kernel path: %s", p)
	if !strings.HasPrefix(p, want) {
		t.Errorf("Path() = %q, want it to start with %q for this processor's flags", p, want)
	}
	if i := strings.Index(p, " openblas="); i < 0 || len(p) == i+len(" openblas=") || strings.HasSuffix(p, "=unknown") {
		t.Errorf("Path() = %q names no OpenBLAS core", p)
	}
	SetPortable(true)
	defer SetPortable(false)
	if q := Path(); !strings.Contains(q, " packed=off ") {
		t.Errorf("with SetPortable, Path() = %q, want packed=off", q)
	}
}
