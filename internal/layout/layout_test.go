package layout

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/tempotrain/tempotrain"

// layers gives every package family (a path and everything under it) its
// layer; higher layers may import lower ones.
var layers = map[string]int{
	"api": 0, "internal/freeport": 0,
	"collective": 1, "storage": 1, "tracing": 1, "internal/netns": 1, "internal/pgtemporal": 1,
	"data/format": 2, // the dataset readers, beneath data
	"compute":     3, "data": 3,
	"train": 4, "gbdt": 4,
	"builtin": 5, "predict": 5, "train/trainrt": 5, "python": 5,
	"workflows": 6, "activities": 6,
	"app": 7, "dashboard": 7,
	// Worker child processes, for app's tests and bench/elastic.
	"internal/workerproc": 8,
	"cmd":                 9, "bench": 9,
	// Runnable examples: package main programs, as cmd.
	"examples":          9,
	"internal/layout":   10,
	"internal/doccheck": 10, // the documentation's links, fields and flags
}

// importers lists, for a family that not every higher layer may use, the
// families that may import it outside tests. train/trainrt is the
// runtime's side of train: the worker side runs ranks with it, the commands
// and benchmarks list or run functions; the workflows never run a rank.
var importers = map[string][]string{
	"train/trainrt": {"activities", "app", "cmd", "bench"},
	// Registering the Python runner lets Fit inputs run code on a worker:
	// only the processes that assemble a worker decide to.
	"python": {"app", "cmd", "bench", "examples"},
}

// family returns the entry of layers a package path (relative to the
// module) belongs to: the longest entry that is the path or a parent of it.
func family(rel string) (string, bool) {
	best := ""
	for f := range layers {
		if (rel == f || strings.HasPrefix(rel, f+"/")) && len(f) > len(best) {
			best = f
		}
	}
	return best, best != ""
}

type pkg struct {
	ImportPath string
	Imports    []string
}

func listModule(t *testing.T) []pkg {
	t.Helper()
	out, err := exec.Command("go", "list", "-json", module+"/...").Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("go list: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("go list: %v", err)
	}
	var pkgs []pkg
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

// violations lists the imports of pkgs that break the layering.
func violations(pkgs []pkg) []string {
	var out []string
	for _, p := range pkgs {
		rel := strings.TrimPrefix(p.ImportPath, module+"/")
		from, ok := family(rel)
		if !ok {
			out = append(out, rel+": no layer (give it one in internal/layout/layout_test.go)")
			continue
		}
		for _, imp := range p.Imports {
			if !strings.HasPrefix(imp, module+"/") {
				continue
			}
			irel := strings.TrimPrefix(imp, module+"/")
			to, ok := family(irel)
			switch {
			case !ok:
				out = append(out, rel+" imports "+irel+", which has no layer")
			case to == from:
			case layers[to] >= layers[from]:
				out = append(out, rel+" (layer "+itoa(layers[from])+") imports "+irel+" (layer "+itoa(layers[to])+"): imports must point down")
			case importers[to] != nil && !slices.Contains(importers[to], from):
				out = append(out, rel+" imports "+irel+", which only "+strings.Join(importers[to], ", ")+" may import")
			}
		}
	}
	sort.Strings(out)
	return out
}

func itoa(i int) string { return strconv.Itoa(i) }

func TestImportsPointDown(t *testing.T) {
	pkgs := listModule(t)
	if len(pkgs) < 10 {
		t.Fatalf("go list found %d packages", len(pkgs))
	}
	for _, v := range violations(pkgs) {
		t.Error(v)
	}
}

// TestViolationsAreCaught feeds the check imports that break the rules.
func TestViolationsAreCaught(t *testing.T) {
	bad := []pkg{
		{ImportPath: module + "/train", Imports: []string{module + "/activities"}},         // upward
		{ImportPath: module + "/workflows", Imports: []string{module + "/activities"}},     // sideways
		{ImportPath: module + "/newthing", Imports: nil},                                   // no layer
		{ImportPath: module + "/compute/cuda", Imports: []string{module + "/compute"}},     // own family: fine
		{ImportPath: module + "/builtin", Imports: []string{module + "/train", "fmt"}},     // down: fine
		{ImportPath: module + "/workflows", Imports: []string{module + "/train/trainrt"}},  // down, but not an importer
		{ImportPath: module + "/activities", Imports: []string{module + "/train/trainrt"}}, // an importer: fine
		{ImportPath: module + "/train/trainrt", Imports: []string{module + "/train"}},      // down: fine
		{ImportPath: module + "/data/format", Imports: []string{module + "/data"}},         // a reader importing its parent: upward
		{ImportPath: module + "/data", Imports: []string{module + "/data/format"}},         // down: fine
	}
	got := violations(bad)
	if len(got) != 5 {
		t.Fatalf("violations = %q, want 5 (upward, sideways, no layer, trainrt from workflows, data/format importing data)", got)
	}
	for _, want := range []string{"workflows imports train/trainrt, which only activities", "data/format (layer 2) imports data (layer 3)"} {
		found := false
		for _, v := range got {
			found = found || strings.Contains(v, want)
		}
		if !found {
			t.Errorf("violations = %q, want one saying %q", got, want)
		}
	}
}
