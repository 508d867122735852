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

// linkProblem checks one link of the page rel: "" when target is absolute
// (http, mailto) or points at a file that exists (stat, relative to the
// repository) and, with an anchor, at a heading of that page (anchorsOf).
func linkProblem(rel, target string, stat func(string) (os.FileInfo, error), anchorsOf func(string) map[string]bool) string {
	if u, err := url.Parse(target); err != nil || u.Scheme != "" {
		return ""
	}
	file, anchor, _ := strings.Cut(target, "#")
	dest := rel
	if file != "" {
		dest = path.Clean(path.Join(path.Dir(rel), file))
		if strings.HasPrefix(dest, "../") {
			return "leaves the repository"
		}
		st, err := stat(dest)
		if err != nil {
			return "no such file " + dest
		}
		if st.IsDir() || !strings.HasSuffix(dest, ".md") {
			if anchor != "" {
				return "an anchor into " + dest + ", which is not a Markdown page"
			}
			return ""
		}
	}
	if anchor != "" && !anchorsOf(dest)[anchor] {
		return dest + " has no heading with the anchor #" + anchor
	}
	return ""
}

func statRepo(rel string) (os.FileInfo, error) {
	return os.Stat(filepath.Join(root, filepath.FromSlash(rel)))
}

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
		sc := ScanMarkdown(readDoc(t, rel))
		if sc.Unclosed > 0 {
			t.Errorf("%s:%d: a code fence that is never closed", rel, sc.Unclosed)
		}
		for _, l := range Links(sc.Prose) {
			if p := linkProblem(rel, l.Text, statRepo, anchorsOf); p != "" {
				t.Errorf("%s:%d: link %q: %s", rel, l.Line, l.Text, p)
			}
			checked++
		}
	}
	t.Logf("checked %d links", checked)
	if checked < 50 {
		t.Errorf("checked %d links; the pages hold more (is the scanner broken?)", checked)
	}
}

// TestLinkProblemsFound: the check catches a missing file, a missing
// anchor (in the page itself and in another), a link out of the
// repository, and lets good links through.
func TestLinkProblemsFound(t *testing.T) {
	anchorsOf := func(rel string) map[string]bool {
		return map[string]bool{"elastic-runs": rel == "docs/failures-elastic-preemption.md", "two-commands": rel == "README.md"}
	}
	for target, want := range map[string]string{
		"docs/no-such-guide.md":                            "no such file docs/no-such-guide.md",
		"docs/failures-elastic-preemption.md#elastic":      "has no heading with the anchor #elastic",
		"#two-command":                                     "README.md has no heading with the anchor #two-command",
		"../../etc/passwd":                                 "leaves the repository",
		"docs/curves.png#x":                                "not a Markdown page",
		"docs/failures-elastic-preemption.md#elastic-runs": "",
		"#two-commands":                                    "",
		"https://temporal.io":                              "",
		"examples/":                                        "",
	} {
		got := linkProblem("README.md", target, statRepo, anchorsOf)
		if (want == "") != (got == "") || !strings.Contains(got, want) {
			t.Errorf("link %q: problem %q, want %q", target, got, want)
		}
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
	if sc.Unclosed != 0 {
		t.Errorf("Unclosed = %d for a page whose fences all close", sc.Unclosed)
	}
	if u := ScanMarkdown("text\n```go\ncode\n").Unclosed; u != 2 {
		t.Errorf("Unclosed = %d for a fence opened on line 2 and never closed", u)
	}
	a := Anchors(sc.Headings)
	for _, want := range []string{"title", "same", "same-1"} {
		if !a[want] {
			t.Errorf("anchors %v lack %s", a, want)
		}
	}
}
