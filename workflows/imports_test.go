package workflows

import (
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestWorkflowImports keeps I/O, compute and networking out of workflow code.
// Its own files import none of them; its dependencies include no compute,
// storage, activities or CUDA package. (collective is reachable only through
// the type of train.Context.Comm, which workflow code never calls.)
func TestWorkflowImports(t *testing.T) {
	const mod = "github.com/tempotrain/tempotrain/"
	forbiddenDirect := []string{mod + "compute", mod + "collective", mod + "storage", mod + "activities", mod + "data",
		"net", "net/http", "os", "os/exec", "gorgonia.org/cu", "gorgonia.org/tensor", "math/rand", "sync"}
	files, _ := filepath.Glob("*.go")
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		src, _ := os.ReadFile(name)
		for _, call := range []string{"time.Now(", "time.Sleep(", "time.After(", "time.NewTimer(", "time.Tick(", "go func"} {
			if strings.Contains(string(src), call) {
				t.Errorf("%s uses %s: use workflow.Now, workflow.Sleep, workflow.NewTimer, workflow.Go", name, call)
			}
		}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			for _, bad := range forbiddenDirect {
				if p == bad || strings.HasPrefix(p, bad+"/") {
					t.Errorf("%s imports %s: workflow code must stay deterministic (no I/O, compute, network, wall clock)", name, p)
				}
			}
		}
	}
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, bad := range []string{mod + "compute", mod + "storage", mod + "activities", mod + "data", "gorgonia.org/cu"} {
			if dep == bad || strings.HasPrefix(dep, bad+"/") {
				t.Errorf("workflows depends on %s", dep)
			}
		}
	}
}
