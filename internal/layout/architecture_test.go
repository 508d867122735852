package layout

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// architectureLayers reads the table of ARCHITECTURE.md's "## Layers"
// section: each package named in backticks in a row's second column, with
// the layer of its first column.
func architectureLayers(doc string) (map[string]int, error) {
	_, rest, ok := strings.Cut(doc, "\n## Layers\n")
	if !ok {
		return nil, errNoSection
	}
	if end := strings.Index(rest, "\n## "); end >= 0 {
		rest = rest[:end]
	}
	row := regexp.MustCompile(`^\|\s*(\d+)\s*\|([^|]*)\|`)
	name := regexp.MustCompile("`([^`]+)`")
	out := map[string]int{}
	for _, line := range strings.Split(rest, "\n") {
		m := row.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		layer, _ := strconv.Atoi(m[1])
		for _, n := range name.FindAllStringSubmatch(m[2], -1) {
			out[n[1]] = layer
		}
	}
	return out, nil
}

var errNoSection = os.ErrNotExist

// TestArchitectureDocNamesEveryLayer: ARCHITECTURE.md at the repository
// root names every package family of layers with its layer, and nothing
// else, and every package it names exists. A package moved, added or given
// another layer without the page following fails here.
func TestArchitectureDocNamesEveryLayer(t *testing.T) {
	root := filepath.Join("..", "..")
	b, err := os.ReadFile(filepath.Join(root, "ARCHITECTURE.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc, err := architectureLayers(string(b))
	if err != nil {
		t.Fatalf("ARCHITECTURE.md has no \"## Layers\" section")
	}
	var problems []string
	for f, l := range layers {
		switch dl, ok := doc[f]; {
		case !ok:
			problems = append(problems, f+": in internal/layout's layers, not in ARCHITECTURE.md's table")
		case dl != l:
			problems = append(problems, f+": layer "+strconv.Itoa(dl)+" in ARCHITECTURE.md, "+strconv.Itoa(l)+" in internal/layout")
		}
	}
	for f := range doc {
		if _, ok := layers[f]; !ok {
			problems = append(problems, f+": in ARCHITECTURE.md's table, not in internal/layout's layers")
		}
		if st, err := os.Stat(filepath.Join(root, filepath.FromSlash(f))); err != nil || !st.IsDir() {
			problems = append(problems, f+": named in ARCHITECTURE.md, but there is no such directory")
		}
	}
	sort.Strings(problems)
	for _, p := range problems {
		t.Error(p)
	}
}

// TestArchitectureTableParsed: the parser finds rows, several packages a
// row, and ignores other sections.
func TestArchitectureTableParsed(t *testing.T) {
	doc := "# x\n\n## Layers\n\n| layer | packages | owns |\n|---|---|---|\n| 2 | `b`, `b/c` | things `not/this` |\n| 0 | `a` | z |\n\n## Other\n| 5 | `q` | |\n"
	got, err := architectureLayers(doc)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"a": 0, "b": 2, "b/c": 2}
	if len(got) != len(want) {
		t.Fatalf("parsed %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("parsed %v, want %v", got, want)
		}
	}
	if _, err := architectureLayers("# no table"); err == nil {
		t.Fatal("a page without the section parsed")
	}
}
