package doccheck

import (
	"flag"
	"fmt"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the generated blocks of docs/cli.md and docs/fit-input.md from the code")

// cliReference is docs/cli.md's generated block: every command of
// cmd/starter (and of `starter schedule`) and cmd/worker, with every flag
// its -h prints.
func cliReference(t *testing.T) string {
	starter, worker := built(t)
	var b strings.Builder
	section := func(title, about string, flags []Flag) {
		fmt.Fprintf(&b, "### `%s`\n\n", title)
		if about != "" {
			fmt.Fprintf(&b, "%s\n\n", about)
		}
		b.WriteString("| flag | meaning |\n|---|---|\n")
		for _, f := range flags {
			name := "`-" + f.Name + "`"
			if f.Type != "" {
				name += " " + f.Type
			}
			fmt.Fprintf(&b, "| %s | %s |\n", name, cell(f.Usage))
		}
		b.WriteString("\n")
	}
	names, about := commands(t, starter, "-h")
	for _, c := range names {
		if c == "schedule" {
			subs, subAbout := commands(t, starter, "schedule", "-h")
			for _, s := range subs {
				section("starter schedule "+s, cell(subAbout[s]), helpFlags(t, starter, "schedule", s))
			}
			continue
		}
		section("starter "+c, cell(about[c]), helpFlags(t, starter, c))
	}
	section("worker", "cmd/worker: a worker process (the workflow side and rank slots)", helpFlags(t, worker))
	return b.String()
}

// cell makes s safe in a Markdown table cell.
func cell(s string) string {
	return strings.ReplaceAll(s, "|", `\|`)
}

// TestCLIDoc: docs/cli.md lists every command and every flag the
// binaries take, with their -h text.
func TestCLIDoc(t *testing.T) {
	checkGenerated(t, "docs/cli.md", "cli", cliReference(t))
}
