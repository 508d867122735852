package doccheck

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// commandFlags are the flags of every command: "starter fit", "starter
// schedule create", "worker".
func commandFlags(t *testing.T) map[string]map[string]bool {
	starter, worker := built(t)
	out := map[string]map[string]bool{}
	set := func(cmd string, flags []Flag) {
		m := map[string]bool{"h": true, "help": true}
		for _, f := range flags {
			m[f.Name] = true
		}
		out[cmd] = m
	}
	names, _ := commands(t, starter, "-h")
	for _, c := range names {
		if c == "schedule" {
			subs, _ := commands(t, starter, "schedule", "-h")
			for _, s := range subs {
				set("starter schedule "+s, helpFlags(t, starter, "schedule", s))
			}
			continue
		}
		set("starter "+c, helpFlags(t, starter, c))
	}
	// tune's subcommands (its own flags are those of a search's start).
	for _, s := range []string{"results", "plot"} {
		set("starter tune "+s, helpFlags(t, starter, "tune", s))
	}
	set("worker", helpFlags(t, worker))
	return out
}

var testFunc = regexp.MustCompile(`(?m)^func ((?:Test|Benchmark|Example|Fuzz)\w*)\(`)

// testNames lists the test functions of the package in dir.
func testNames(t *testing.T, dir string) []string {
	files, _ := filepath.Glob(filepath.Join(root, filepath.FromSlash(dir), "*_test.go"))
	var names []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range testFunc.FindAllStringSubmatch(string(b), -1) {
			names = append(names, m[1])
		}
	}
	return names
}

// commandProblems checks one command line: the packages `go run|test|build`
// names exist, `-run` patterns match tests of the package, and the flags of
// starter's commands and of the worker exist.
func commandProblems(t *testing.T, text string, flags map[string]map[string]bool) []string {
	var problems []string
	tok := strings.Fields(text)
	for i := 0; i < len(tok); i++ {
		w := strings.Trim(tok[i], "`")
		if w == "go" && i+1 < len(tok) && regexp.MustCompile(`^(run|test|build|vet|generate|install)$`).MatchString(tok[i+1]) {
			sub := tok[i+1]
			var pkgs []string
			var runPat string
			j := i + 2
			for ; j < len(tok) && !stopToken(tok[j]); j++ {
				a := strings.Trim(tok[j], "`")
				switch {
				case strings.HasPrefix(a, "./"):
					p := strings.TrimSuffix(strings.TrimSuffix(strings.TrimPrefix(a, "./"), "..."), "/")
					if p != "" && p != "." {
						pkgs = append(pkgs, p)
					}
				case a == "-run" && j+1 < len(tok):
					runPat = strings.Trim(tok[j+1], `'"`+"`")
				}
				if sub == "run" && len(pkgs) > 0 {
					break // the program's own arguments follow
				}
			}
			for _, p := range pkgs {
				if st, err := os.Stat(filepath.Join(root, filepath.FromSlash(p))); err != nil || !st.IsDir() {
					problems = append(problems, "go "+sub+" ./"+p+": no such package directory")
				}
			}
			if sub == "test" && runPat != "" && len(pkgs) == 1 {
				problems = append(problems, runProblems(t, pkgs[0], runPat)...)
			}
			if sub != "run" {
				i = j - 1 // go test's flags are not the package's program's
			}
			continue
		}
		cmd := ""
		switch {
		case w == "starter" || strings.HasSuffix(w, "cmd/starter"):
			if i+1 < len(tok) {
				c := strings.Trim(tok[i+1], "`")
				if flags["starter "+c] != nil {
					cmd, i = "starter "+c, i+1
					if i+1 < len(tok) && flags[cmd+" "+tok[i+1]] != nil { // tune results, tune plot
						cmd, i = cmd+" "+tok[i+1], i+1
					}
				} else if c == "schedule" {
					cmd, i = "starter schedule create", i+1 // flags first: create
					if i+1 < len(tok) && flags["starter schedule "+tok[i+1]] != nil {
						cmd, i = "starter schedule "+tok[i+1], i+1
					}
				}
			}
		case w == "cmd/worker" || w == "./cmd/worker" || w == "/tmp/worker" || w == "./worker-gpu":
			cmd = "worker"
		}
		if cmd == "" {
			continue
		}
		for j := i + 1; j < len(tok) && !stopToken(tok[j]); j++ {
			a := strings.Trim(tok[j], "`")
			if len(a) < 2 || a[0] != '-' || !(a[1] >= 'a' && a[1] <= 'z') {
				continue
			}
			name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
			name = strings.TrimRight(name, ",.;:)")
			if !flags[cmd][name] {
				problems = append(problems, cmd+": no flag -"+name)
			}
		}
	}
	return problems
}

func stopToken(s string) bool {
	return s == "|" || s == "||" || s == "&&" || s == ";" || strings.HasPrefix(s, "#") || s == "then" || s == "or" || s == "and"
}

// runProblems checks a -run pattern's alternatives against the tests of
// the package in dir.
func runProblems(t *testing.T, dir, pat string) []string {
	names := testNames(t, dir)
	var problems []string
	for _, alt := range strings.Split(pat, "|") {
		alt, _, _ = strings.Cut(alt, "/") // a subtest
		if strings.Trim(alt, "^$()") == "" {
			continue
		}
		re, err := regexp.Compile(alt)
		if err != nil {
			problems = append(problems, "go test ./"+dir+" -run "+pat+": "+err.Error())
			continue
		}
		found := false
		for _, n := range names {
			found = found || re.MatchString(n)
		}
		if !found {
			problems = append(problems, "go test ./"+dir+" -run "+pat+": no test of ./"+dir+" matches "+alt)
		}
	}
	return problems
}

// TestCommands: every command written in the pages (in code spans and
// code blocks) names packages, tests and flags that exist.
func TestCommands(t *testing.T) {
	flags := commandFlags(t)
	checked := 0
	for _, rel := range docFiles(t) {
		sc := ScanMarkdown(readDoc(t, rel))
		spans := append(CodeSpans(sc.Prose), sc.Fenced...)
		for _, s := range spans {
			for _, p := range commandProblems(t, s.Text, flags) {
				t.Errorf("%s:%d: %s (in %q)", rel, s.Line, p, s.Text)
			}
			if strings.Contains(s.Text, "go ") || strings.Contains(s.Text, "starter ") {
				checked++
			}
		}
	}
	t.Logf("checked %d commands", checked)
	if checked < 40 {
		t.Errorf("checked %d commands; the pages hold more (is the scanner broken?)", checked)
	}
}

// TestCommandProblemsFound: what the check must catch, and what it must
// let through.
func TestCommandProblemsFound(t *testing.T) {
	flags := commandFlags(t)
	bad := map[string]string{
		"go run ./bench/nosuch -n 3":                        "no such package",
		"go test ./app -run 'TestE2ENoSuchThing' -v":        "no test of ./app matches",
		"go run ./cmd/starter fit -workers 2 -no-such-flag": "starter fit: no flag -no-such-flag",
		"starter schedule create -id x -cronn '0 3 * * *'":  "no flag -cronn",
		"go run ./cmd/worker -allow-pythonn":                "worker: no flag -allow-pythonn",
		"starter tune plot -name s -nope":                   "starter tune plot: no flag -nope",
	}
	for cmd, want := range bad {
		p := commandProblems(t, cmd, flags)
		if len(p) != 1 || !strings.Contains(p[0], want) {
			t.Errorf("%q: problems %q, want one saying %q", cmd, p, want)
		}
	}
	for _, good := range []string{
		"go run ./cmd/starter dev -python train.py:train_func -working-dir python/examples/fashion_resnet18 -config '{\"epochs\": 2}'",
		"go test ./cmd/starter -run 'TestProgressDisplay|TestPlot' -v",
		"go test ./app -run TestHosts -v",
		"go test ./cmd/worker -run TestPrometheusScrapesWorker",
		"starter tune plot -name demo -o trials.png",
		"starter schedule -id nightly -cron x",
		"go run ./bench/allreduce -netns 1000 -ranks 2,4",
		"go test -run '^$' -bench Step ./tracing",
	} {
		if p := commandProblems(t, good, flags); len(p) != 0 {
			t.Errorf("%q: problems %q, want none", good, p)
		}
	}
}
