package doccheck

import (
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestLinks: every relative link of the pages points at a file or
// directory that exists, and an anchor at a heading of its page.
func TestLinks(t *testing.T) {
	anchors := map[string]map[string]bool{}
	anchorsOf := func(rel string) map[string]bool {
		if a, ok := anchors[rel]; ok {
			return a
		}
		a := Anchors(ScanMarkdown(readDoc(t, rel)).Headings)
		anchors[rel] = a
		return a
	}
	checked := 0
	for _, rel := range docFiles(t) {
		for _, l := range Links(ScanMarkdown(readDoc(t, rel)).Prose) {
			target := l.Text
			if u, err := url.Parse(target); err != nil || u.Scheme != "" {
				continue // http(s), mailto
			}
			file, anchor, _ := strings.Cut(target, "#")
			dest := rel
			if file != "" {
				dest = path.Clean(path.Join(path.Dir(rel), file))
				if strings.HasPrefix(dest, "../") {
					t.Errorf("%s:%d: link %q leaves the repository", rel, l.Line, target)
					continue
				}
				st, err := os.Stat(filepath.Join(root, filepath.FromSlash(dest)))
				if err != nil {
					t.Errorf("%s:%d: link %q: no such file %s", rel, l.Line, target, dest)
					continue
				}
				if st.IsDir() || !strings.HasSuffix(dest, ".md") {
					if anchor != "" {
						t.Errorf("%s:%d: link %q: an anchor into %s, which is not a Markdown page", rel, l.Line, target, dest)
					}
					checked++
					continue
				}
			}
			if anchor != "" && !anchorsOf(dest)[anchor] {
				t.Errorf("%s:%d: link %q: %s has no heading with the anchor #%s", rel, l.Line, target, dest, anchor)
			}
			checked++
		}
	}
	t.Logf("checked %d links", checked)
	if checked < 50 {
		t.Errorf("checked %d links; the pages hold more (is the scanner broken?)", checked)
	}
}

// repoPath is a code span that names a path in the repository: words
// joined by slashes, the first a top-level entry of the repository.
var repoPath = regexp.MustCompile(`^(?:\./)?[A-Za-z0-9_.-]+(?:/[A-Za-z0-9_.-]+)+/?$`)

// TestRepoPaths: every path of the repository named in backticks exists.
func TestRepoPaths(t *testing.T) {
	top := map[string]bool{}
	ents, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		top[e.Name()] = true
	}
	checked := 0
	for _, rel := range docFiles(t) {
		sc := ScanMarkdown(readDoc(t, rel))
		for _, s := range CodeSpans(sc.Prose) {
			p := strings.TrimPrefix(s.Text, "./")
			if !repoPath.MatchString(s.Text) || !top[strings.SplitN(p, "/", 2)[0]] {
				continue
			}
			if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(p))); err != nil {
				t.Errorf("%s:%d: `%s`: no such file or directory in the repository", rel, s.Line, s.Text)
			}
			checked++
		}
	}
	t.Logf("checked %d repository paths", checked)
	if checked < 20 {
		t.Errorf("checked %d paths; the pages name more (is the scanner broken?)", checked)
	}
}

// TestScannerFindsWhatItMust runs the scanner on a page written to break
// it: links inside code are no links, spans cross line breaks, fenced
// lines continue with a backslash, repeated headings get numbered anchors.
func TestScannerFindsWhatItMust(t *testing.T) {
	md := "# Title\n\nSee [a](docs/a.md#x) and `[not](a/link.md)`, `go test\n./app -run TestX`.\n\n" +
		"```sh\ngo run ./cmd/starter fit \\\n  -workers 2\n[no](link.md)\n```\n\n## Same\n\n## Same\n"
	sc := ScanMarkdown(md)
	links := Links(sc.Prose)
	if len(links) != 1 || links[0].Text != "docs/a.md#x" || links[0].Line != 3 {
		t.Errorf("links = %+v, want only docs/a.md#x on line 3", links)
	}
	spans := CodeSpans(sc.Prose)
	if len(spans) != 2 || spans[1].Text != "go test ./app -run TestX" {
		t.Errorf("code spans = %+v, want the link-like one and the go test one joined", spans)
	}
	if len(sc.Fenced) != 2 || sc.Fenced[0].Text != "go run ./cmd/starter fit -workers 2" {
		t.Errorf("fenced lines = %+v, want the continued command joined", sc.Fenced)
	}
	a := Anchors(sc.Headings)
	for _, want := range []string{"title", "same", "same-1"} {
		if !a[want] {
			t.Errorf("anchors %v lack %s", a, want)
		}
	}
}
