package doccheck

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
)

// root is the repository's root, from this package's directory.
var root = filepath.Join("..", "..")

// docFiles are the pages the checks read, relative to root.
func docFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md", "ARCHITECTURE.md"}
	for _, glob := range []string{"docs/*.md", "examples/*.md", "examples/*/README.md"} {
		m, err := filepath.Glob(filepath.Join(root, glob))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range m {
			rel, _ := filepath.Rel(root, f)
			files = append(files, filepath.ToSlash(rel))
		}
	}
	sort.Strings(files[2:])
	return files
}

func readDoc(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(rel)))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Flag is one flag of a command, as its -h prints it.
type Flag struct {
	Name, Type, Usage string
}

// binaries builds cmd/starter and cmd/worker once per test process.
var binaries = struct {
	once            sync.Once
	starter, worker string
	err             error
	out             []byte
}{}

func built(t *testing.T) (starter, worker string) {
	t.Helper()
	binaries.once.Do(func() {
		dir, err := os.MkdirTemp("", "doccheck-")
		if err != nil {
			binaries.err = err
			return
		}
		binaries.starter, binaries.worker = filepath.Join(dir, "starter"), filepath.Join(dir, "worker")
		cmd := exec.Command("go", "build", "-o", dir+string(filepath.Separator), "./cmd/starter", "./cmd/worker")
		cmd.Dir = root
		binaries.out, binaries.err = cmd.CombinedOutput()
	})
	if binaries.err != nil {
		t.Fatalf("go build ./cmd/starter ./cmd/worker: %v\n%s", binaries.err, binaries.out)
	}
	return binaries.starter, binaries.worker
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binaries.starter != "" {
		os.RemoveAll(filepath.Dir(binaries.starter))
	}
	os.Exit(code)
}

var flagLine = regexp.MustCompile(`^  -([A-Za-z0-9][A-Za-z0-9_.-]*)(?: (\S+))?$`)

// helpFlags runs bin with args and -h and parses the flags it prints
// (flag.PrintDefaults' format).
func helpFlags(t *testing.T, bin string, args ...string) []Flag {
	t.Helper()
	out, err := exec.Command(bin, append(args, "-h")...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s -h: %v\n%s", filepath.Base(bin), strings.Join(args, " "), err, out)
	}
	var flags []Flag
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		line := sc.Text()
		if m := flagLine.FindStringSubmatch(line); m != nil {
			flags = append(flags, Flag{Name: m[1], Type: m[2]})
			continue
		}
		if strings.HasPrefix(line, "    \t") && len(flags) > 0 {
			f := &flags[len(flags)-1]
			f.Usage = strings.TrimSpace(f.Usage + " " + strings.TrimSpace(line))
		}
	}
	if len(flags) == 0 {
		t.Fatalf("%s %s -h printed no flags:\n%s", filepath.Base(bin), strings.Join(args, " "), out)
	}
	return flags
}

var commandLine = regexp.MustCompile(`^  ([a-z][a-z-]*)\s{2,}(.*)$`)

// commands runs bin with args (a usage request) and returns the commands
// its "commands:" section lists, with their one-line descriptions.
func commands(t *testing.T, bin string, args ...string) (names []string, about map[string]string) {
	t.Helper()
	out, _ := exec.Command(bin, args...).CombinedOutput()
	_, rest, ok := strings.Cut(string(out), "commands:\n")
	if !ok {
		t.Fatalf("%s %s: no commands: section in\n%s", filepath.Base(bin), strings.Join(args, " "), out)
	}
	about = map[string]string{}
	for _, line := range strings.Split(rest, "\n") {
		if strings.TrimSpace(line) == "" {
			break
		}
		if m := commandLine.FindStringSubmatch(line); m != nil {
			names = append(names, m[1])
			about[m[1]] = m[2]
		} else if len(names) > 0 && strings.HasPrefix(line, "    ") {
			last := names[len(names)-1]
			about[last] = strings.TrimSpace(about[last] + " " + strings.TrimSpace(line))
		}
	}
	return names, about
}

// generatedBlock returns what lies between the markers
// <!-- BEGIN GENERATED name --> and <!-- END GENERATED name --> in doc.
func generatedBlock(doc, name string) (before, block, after string, ok bool) {
	begin, end := "<!-- BEGIN GENERATED "+name+" -->\n", "<!-- END GENERATED "+name+" -->"
	i := strings.Index(doc, begin)
	j := strings.Index(doc, end)
	if i < 0 || j < i {
		return "", "", "", false
	}
	return doc[:i+len(begin)], doc[i+len(begin) : j], doc[j:], true
}

// checkGenerated compares the generated block name of the doc at rel with
// want; with -update it rewrites the block instead.
func checkGenerated(t *testing.T, rel, name, want string) {
	t.Helper()
	doc := readDoc(t, rel)
	before, got, after, ok := generatedBlock(doc, name)
	if !ok {
		t.Fatalf("%s has no <!-- BEGIN GENERATED %s --> ... <!-- END GENERATED %s --> block", rel, name, name)
	}
	if got == want {
		return
	}
	if *update {
		if err := os.WriteFile(filepath.Join(root, filepath.FromSlash(rel)), []byte(before+want+after), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: rewrote the %s block", rel, name)
		return
	}
	gl, wl := strings.Split(got, "\n"), strings.Split(want, "\n")
	var diff []string
	for i := 0; i < max(len(gl), len(wl)) && len(diff) < 20; i++ {
		var g, w string
		if i < len(gl) {
			g = gl[i]
		}
		if i < len(wl) {
			w = wl[i]
		}
		if g != w {
			diff = append(diff, "  doc:  "+g+"\n  code: "+w)
		}
	}
	t.Errorf("%s: the %s block is not what the code says (run go test ./internal/doccheck -run %s -update); first differences:\n%s",
		rel, name, t.Name(), strings.Join(diff, "\n"))
}
