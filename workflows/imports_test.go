package workflows

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/parser"
	"go/token"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/tempotrain/tempotrain"

// forbiddenDeps are packages workflow code must never depend on, at any
// depth: I/O, compute and networking of our own, process spawning, and
// gorgonia (the build weight of the compute stack, and cgo).
var forbiddenDeps = []string{
	module + "/collective", module + "/compute", module + "/storage", module + "/data",
	module + "/activities", module + "/train", module + "/builtin", module + "/gbdt",
	module + "/predict", module + "/app", module + "/tracing",
	"os/exec", "gorgonia.org/",
}

// forbiddenOwnDeps are what our code and the standard library packages it
// uses must not reach. The Temporal SDK, which workflow code runs on,
// depends on net for its gRPC client; that path is the SDK's, not ours.
var forbiddenOwnDeps = []string{"net", "net/http", "os/exec", "syscall/js", "plugin"}

type listedPackage struct {
	ImportPath string
	Standard   bool
	Imports    []string
}

// TestWorkflowDependencies keeps I/O, compute and networking out of
// workflow code, at every depth of `go list -deps ./workflows`: none of
// forbiddenDeps anywhere, and none of forbiddenOwnDeps reachable through our
// packages and the standard library (third-party modules, the SDK among
// them, are not walked into).
func TestWorkflowDependencies(t *testing.T) {
	for _, p := range dependencyProblems(t, module+"/workflows") {
		t.Error(p)
	}
}

// TestDependencyCheckCatches runs the same check on a package that does
// reach the network and our runtime, so a check that can no longer fail is
// itself caught.
func TestDependencyCheckCatches(t *testing.T) {
	problems := strings.Join(dependencyProblems(t, module+"/activities"), "\n")
	for _, want := range []string{"depends on " + module + "/collective", "reaches net through its own code"} {
		if !strings.Contains(problems, want) {
			t.Errorf("check of activities did not report %q; it reported:\n%s", want, problems)
		}
	}
}

// dependencyProblems lists what pkg depends on that workflow code must not.
func dependencyProblems(t *testing.T, pkg string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", "-json", pkg).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("go list: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("go list: %v", err)
	}
	pkgs := map[string]listedPackage{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p listedPackage
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs[p.ImportPath] = p
	}
	if _, ok := pkgs[pkg]; !ok {
		t.Fatalf("go list -deps did not list %s", pkg)
	}
	name := strings.TrimPrefix(pkg, module+"/")
	var problems []string
	for dep := range pkgs {
		if dep == pkg {
			continue
		}
		for _, bad := range forbiddenDeps {
			if dep == bad || strings.HasPrefix(dep, strings.TrimSuffix(bad, "/")+"/") {
				problems = append(problems, fmt.Sprintf("%s depends on %s (%s)", name, dep, pathTo(pkgs, pkg, dep, nil)))
			}
		}
	}
	// Walk our packages and the standard library only.
	own := func(p string) bool { return pkgs[p].Standard || strings.HasPrefix(p, module+"/") }
	for _, bad := range forbiddenOwnDeps {
		if chain := pathTo(pkgs, pkg, bad, own); chain != "" {
			problems = append(problems, fmt.Sprintf("%s reaches %s through its own code: %s", name, bad, chain))
		}
	}
	sort.Strings(problems)
	return problems
}

// pathTo is an import chain from one package to another ("" if none),
// walking only into packages that follow accepts (all when nil).
func pathTo(pkgs map[string]listedPackage, from, to string, follow func(string) bool) string {
	parent := map[string]string{from: ""}
	queue := []string{from}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		if cur == to {
			chain := []string{to}
			for p := parent[to]; p != ""; p = parent[p] {
				chain = append([]string{p}, chain...)
			}
			return strings.Join(chain, " -> ")
		}
		for _, imp := range pkgs[cur].Imports {
			if _, seen := parent[imp]; seen {
				continue
			}
			if _, listed := pkgs[imp]; !listed || (follow != nil && !follow(imp)) {
				continue
			}
			parent[imp] = cur
			queue = append(queue, imp)
		}
	}
	return ""
}

// TestWorkflowCodeIsDeterministic checks the package's own files: no wall
// clock, no goroutines, no unordered or shared-state primitives that
// workflow code must take from the SDK instead.
func TestWorkflowCodeIsDeterministic(t *testing.T) {
	forbiddenDirect := []string{"net", "os", "os/exec", "math/rand", "sync", "time/tzdata"}
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
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, call := range []string{"time.Now(", "time.Sleep(", "time.After(", "time.NewTimer(", "time.Tick(", "go func"} {
			if strings.Contains(string(src), call) {
				t.Errorf("%s uses %s: use workflow.Now, workflow.Sleep, workflow.NewTimer, workflow.Go", name, call)
			}
		}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			for _, bad := range forbiddenDirect {
				if p == bad || strings.HasPrefix(p, bad+"/") {
					t.Errorf("%s imports %s: workflow code must stay deterministic (no I/O, network, wall clock)", name, p)
				}
			}
		}
	}
}
