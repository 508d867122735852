package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// needProgram skips a test whose program is missing, or fails it when the
// environment variable says CI installed it.
func needProgram(t *testing.T, prog, require string) string {
	t.Helper()
	path, err := exec.LookPath(prog)
	if err != nil {
		if os.Getenv(require) == "1" {
			t.Fatalf("%s is not installed and %s=1", prog, require)
		}
		t.Skipf("%s is not installed (apt install %s; %s=1 fails instead)", prog, prog, require)
	}
	return path
}

// buildStarter builds this command into a temporary directory.
func buildStarter(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "starter")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func shellQuote(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}

var (
	barLine   = regexp.MustCompile(`epoch (\d+)/8 +\[[=>-]+\]`)
	finalBar  = regexp.MustCompile(`epoch 8/8 +\[=+\] +100 % done attempt 2 · 1 restarts · 2 ranks · ckpt 8`)
	statusRow = regexp.MustCompile(`status +succeeded`)
)

// TestProgressDisplay runs `starter fit` on a run of 8 slow epochs whose
// attempt 1 fails in epoch 3: in a real terminal (tmux) it draws one bar
// that moves (epochs, ETA, samples/s, the restart) above which the reports
// scroll, and a Result table; on a pipe it prints plain lines, no escape
// codes and no bar.
func TestProgressDisplay(t *testing.T) {
	tmux := needProgram(t, "tmux", "TEMPOTRAIN_REQUIRE_TMUX")
	addr, _ := startScheduleEnv(t)
	bin := buildStarter(t)
	store := t.TempDir()
	args := func(name string) []string {
		return []string{"fit", "-address", addr, "-task-queue", scheduleEnv.tq, "-rank-queue", scheduleEnv.rq,
			"-func", "schedule-score", "-workers", "2", "-name", name, "-storage", store, "-max-failures", "1",
			"-config", `{"epochs":8,"sleep_ms":600,"fail_at":3,"absolute":true}`}
	}

	t.Run("terminal", func(t *testing.T) {
		session := "tempotrain-progress"
		_ = exec.Command(tmux, "kill-session", "-t", session).Run()
		cmd := shellQuote(append([]string{bin}, args("in-tmux")...)) + "; echo EXIT=$?; sleep 120"
		if out, err := exec.Command(tmux, "new-session", "-d", "-s", session, "-x", "160", "-y", "45", cmd).CombinedOutput(); err != nil {
			t.Fatalf("tmux new-session: %v\n%s", err, out)
		}
		t.Cleanup(func() { _ = exec.Command(tmux, "kill-session", "-t", session).Run() })
		seen := map[string]bool{}
		var screen string
		deadline := time.Now().Add(2 * time.Minute)
		for time.Now().Before(deadline) {
			out, err := exec.Command(tmux, "capture-pane", "-p", "-t", session).Output()
			if err != nil {
				t.Fatalf("tmux capture-pane: %v", err)
			}
			screen = string(out)
			if m := barLine.FindStringSubmatch(screen); m != nil && m[1] != "0" && m[1] != "8" && strings.Contains(screen, "ETA ") {
				seen["a bar part way, with an ETA"] = true
			}
			if strings.Contains(screen, "attempt 2 · 1 restarts") {
				seen["the restart"] = true
			}
			if regexp.MustCompile(`ETA \S+ attempt \d[^\n]*\d+ samples/s`).MatchString(screen) {
				seen["samples/s while training"] = true
			}
			if strings.Contains(screen, "EXIT=") {
				break
			}
			time.Sleep(150 * time.Millisecond)
		}
		t.Logf("the terminal at the end:\n%s", strings.TrimRight(screen, "\n"))
		if !strings.Contains(screen, "EXIT=0") {
			t.Fatalf("starter fit did not exit 0 within 2 minutes")
		}
		for _, want := range []string{"a bar part way, with an ETA", "the restart", "samples/s while training"} {
			if !seen[want] {
				t.Errorf("the terminal never showed %s", want)
			}
		}
		if n := len(barLine.FindAllString(screen, -1)); n != 1 {
			t.Errorf("%d bars on the final screen: want one, redrawn in place", n)
		}
		if !finalBar.MatchString(screen) {
			t.Errorf("the final bar is not complete at epoch 8/8 after one restart")
		}
		if !statusRow.MatchString(screen) || !strings.Contains(screen, "attempt 2 report 7: epochs=8") {
			t.Errorf("the final screen lacks the reports or the Result table")
		}
	})

	t.Run("pipe", func(t *testing.T) {
		var out, errOut bytes.Buffer
		c := exec.Command(bin, args("on-pipe")...)
		c.Stdout, c.Stderr = &out, &errOut
		if err := c.Run(); err != nil {
			t.Fatalf("starter fit: %v\nstdout:\n%s\nstderr:\n%s", err, out.String(), errOut.String())
		}
		s := out.String()
		t.Logf("stdout on a pipe:\n%s", s)
		if strings.Contains(s, "\x1b[") || barLine.MatchString(s) {
			t.Errorf("escape codes or a bar on a pipe")
		}
		for _, want := range []string{"attempt 1 report 0:", "attempt 2 · 1 restarts · 2 ranks", "attempt 2 report 7: epochs=8"} {
			if !strings.Contains(s, want) {
				t.Errorf("stdout on a pipe lacks %q", want)
			}
		}
		if !statusRow.MatchString(s) {
			t.Errorf("stdout on a pipe lacks the Result table")
		}
	})
}
