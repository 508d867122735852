//go:build !cuda

package cuda

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestShimIncludedOnce (not in the -tags cuda test binary, which runs
// where there are no sources): shim.h holds static state (the table of cuBLAS's
// functions that tt_blas_open fills), and every cgo preamble that includes
// it gets a copy of its own. Included from two files, cuBLAS was loaded into
// one copy and called through the other, still NULL: the first cublasCreate
// on a GPU jumped to address 0. So exactly one Go file may include it.
func TestShimIncludedOnce(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var including []string
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), `#include "shim.h"`) {
			including = append(including, f)
		}
	}
	if len(including) != 1 || including[0] != "driver.go" {
		t.Fatalf(`files including shim.h: %v; want driver.go alone (its static cuBLAS table is one per cgo preamble)`, including)
	}
}
