package doccheck

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTwoCommands: README.md's "Two commands" section gives the demo's
// command and the test command, and the test command is what CI's entry
// point (.ci/run) runs.
func TestTwoCommands(t *testing.T) {
	doc := readDoc(t, "README.md")
	_, sec, ok := strings.Cut(doc, "\n## Two commands\n")
	if !ok {
		t.Fatal(`README.md has no "## Two commands" section`)
	}
	if end := strings.Index(sec, "\n## "); end >= 0 {
		sec = sec[:end]
	}
	fenced := ScanMarkdown(sec).Fenced
	if len(fenced) != 2 {
		t.Fatalf(`README.md's "Two commands" holds %d command lines, want 2 (the demo, the tests): %+v`, len(fenced), fenced)
	}
	if demo := fenced[0].Text; demo != ".ci/setup && go run ./cmd/starter dev" {
		t.Errorf("the demo's command is %q, want .ci/setup && go run ./cmd/starter dev", demo)
	}
	test := fenced[1].Text
	b, err := os.ReadFile(filepath.Join(root, ".ci", "run"))
	if err != nil {
		t.Fatal(err)
	}
	runs := false
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		runs = runs || line == test || line == "exec "+test
	}
	if !runs {
		t.Errorf("README.md's test command %q is not what .ci/run runs:\n%s", test, b)
	}
}
