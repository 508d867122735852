package doccheck

import (
	"regexp"
	"strconv"
	"strings"
	"unicode"
)

// Span is a piece of a Markdown file: a link's target, an inline code
// span's text, or a fenced code block's logical line (continuation lines
// joined), with the line it starts on (1-based).
type Span struct {
	Line int
	Text string
}

// Scan splits a Markdown document into its prose (fenced code blocks
// blanked, so that line numbers stay), its fenced code lines, and its
// headings.
type Scan struct {
	Prose    string
	Fenced   []Span
	Headings []string
	// Unclosed is the line of a code fence that the page never closes
	// (0: none): everything after it renders as code.
	Unclosed int
}

// ScanMarkdown scans md.
func ScanMarkdown(md string) Scan {
	var s Scan
	var prose []string
	in := false
	cont := -1 // index in Fenced of a line continued with a backslash
	for i, line := range strings.Split(md, "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "```") {
			in = !in
			s.Unclosed = 0
			if in {
				s.Unclosed = i + 1
			}
			cont = -1
			prose = append(prose, "")
			continue
		}
		if in {
			prose = append(prose, "")
			text := strings.TrimRight(strings.TrimSuffix(strings.TrimRight(line, " "), "\\"), " ")
			if cont >= 0 {
				s.Fenced[cont].Text += " " + strings.TrimSpace(text)
			} else {
				s.Fenced = append(s.Fenced, Span{Line: i + 1, Text: text})
			}
			cont = -1
			if strings.HasSuffix(strings.TrimRight(line, " "), "\\") {
				cont = len(s.Fenced) - 1
			}
			continue
		}
		if strings.HasPrefix(line, "#") {
			s.Headings = append(s.Headings, strings.TrimSpace(strings.TrimLeft(line, "#")))
		}
		prose = append(prose, line)
	}
	s.Prose = strings.Join(prose, "\n")
	return s
}

// CodeSpans returns the inline code spans of prose, a span's line breaks
// made spaces. A span does not cross a blank line.
func CodeSpans(prose string) []Span {
	var out []Span
	line := 1
	for i := 0; i < len(prose); i++ {
		switch prose[i] {
		case '\n':
			line++
		case '`':
			n := 1
			for i+n < len(prose) && prose[i+n] == '`' {
				n++
			}
			fence := prose[i : i+n]
			end := strings.Index(prose[i+n:], fence)
			if end < 0 {
				i += n - 1
				continue
			}
			body := prose[i+n : i+n+end]
			if strings.Contains(body, "\n\n") {
				i += n - 1
				continue
			}
			out = append(out, Span{Line: line, Text: strings.TrimSpace(strings.ReplaceAll(body, "\n", " "))})
			line += strings.Count(body, "\n")
			i += n + end + n - 1
		}
	}
	return out
}

var linkRE = regexp.MustCompile(`\[[^\]]*\]\(([^)\s]+)\)`)

// Links returns the targets of prose's inline links, outside code spans.
func Links(prose string) []Span {
	// Blank the code spans, keeping line breaks, so that a link written
	// inside one is not taken for a link.
	b := []byte(prose)
	for i := 0; i < len(b); i++ {
		if b[i] != '`' {
			continue
		}
		end := strings.IndexByte(prose[i+1:], '`')
		if end < 0 || strings.Contains(prose[i+1:i+1+end], "\n\n") {
			continue
		}
		for j := i; j <= i+1+end; j++ {
			if b[j] != '\n' {
				b[j] = ' '
			}
		}
		i += end + 1
	}
	text := string(b)
	var out []Span
	for _, m := range linkRE.FindAllStringSubmatchIndex(text, -1) {
		out = append(out, Span{Line: 1 + strings.Count(text[:m[0]], "\n"), Text: text[m[2]:m[3]]})
	}
	return out
}

// Anchors returns the anchors GitHub gives headings: lower case, letters,
// digits, '-' and '_' kept, spaces made '-', everything else dropped; a
// repeated anchor gets -1, -2, ...
func Anchors(headings []string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, h := range headings {
		var b strings.Builder
		for _, r := range strings.ToLower(h) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteByte('-')
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			seen[a]++
			a += "-" + strconv.Itoa(n)
		} else {
			seen[a] = 1
		}
		out[a] = true
	}
	return out
}
