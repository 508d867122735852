package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/tempotrain/tempotrain/app"
	"github.com/tempotrain/tempotrain/internal/freeport"
	"github.com/tempotrain/tempotrain/train"
)

func freeTCPPort(t *testing.T) int {
	t.Helper()
	p, err := freeport.Pick("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// uiColumns is what the Web UI keeps in localStorage when a user adds
// columns to the workflow list ("Configure columns"): our search
// attributes after the pinned Status and Workflow ID.
const uiColumns = `{"default":[{"label":"Status","pinned":true},{"label":"Workflow ID","pinned":true},` +
	`{"label":"TempotrainRun","pinned":false},{"label":"TempotrainFunc","pinned":false},{"label":"TempotrainStatus","pinned":false},` +
	`{"label":"TempotrainAttempt","pinned":false},{"label":"TempotrainWorldSize","pinned":false},{"label":"TempotrainBestScore","pinned":false},` +
	`{"label":"Start","pinned":false}]}`

// TestWebUI opens the dev server's Web UI in headless Chromium while a run
// trains: the workflow list shows the run's search attributes as columns,
// and the run's page its one-line summary, its details (storage, config)
// and its current details (function, ranks, epoch, best score). The
// screenshots are written to TEMPOTRAIN_UI_SHOTS (default: the test's
// temporary directory) and their paths logged.
func TestWebUI(t *testing.T) {
	chromium := needProgram(t, "chromium", "TEMPOTRAIN_REQUIRE_CHROMIUM")
	uiPort := freeTCPPort(t)
	_, cl := startEnv(t, app.DevServerOptions{UIPort: uiPort})
	ui := scheduleEnv.local.Server.UIURL
	if ui == "" {
		t.Fatal("the dev server has no UI")
	}
	// A report every 4 s: the run continues as new after about 200
	// reports (13 minutes), well after this test's 8 minutes, so the run
	// page stays the current execution's however slowly the browser loads
	// (CI once saw it continue as new at 3.5 min, during the Pending
	// Activities check, with a report a second; and once ran out of the 4
	// minutes this test had, on a machine loaded by other packages' tests).
	in := train.FitInput{TrainFunc: "schedule-score", Config: json.RawMessage(`{"epochs":400,"sleep_ms":4000}`),
		Scaling: train.ScalingConfig{NumWorkers: 2, TaskQueue: scheduleEnv.rq},
		Run: train.RunConfig{Name: "ui-check", StoragePath: t.TempDir(),
			Checkpoint: train.CheckpointConfig{ScoreAttribute: "loss", ScoreOrder: "min"}}}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	run, err := train.NewTrainerFromInput(cl, in, train.WithTaskQueue(scheduleEnv.tq)).Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cl.CancelWorkflow(context.Background(), run.WorkflowID, "") }()
	// Wait for reports: the current details and the search attributes are
	// set by then.
	for {
		st, err := run.Status(ctx)
		if err == nil && st.Reports >= 3 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the run never reported 3 times: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}

	shots := os.Getenv("TEMPOTRAIN_UI_SHOTS")
	if shots == "" {
		shots = t.TempDir()
	}
	bctx := headless(t, ctx, chromium)

	// The columns go into localStorage before any of the UI's own scripts
	// run on each page: set after a first load, the UI's store could write
	// its defaults over them while it starts.
	_, err = chromedp.Run(bctx, func(ctx context.Context, tg *chromedp.Target) (page.AddScriptToEvaluateOnNewDocumentResult, error) {
		return cdp.Call(ctx, tg, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{
			Source: fmt.Sprintf(`localStorage.setItem("namespace-workflow-table-columns", %q)`, uiColumns)})
	})
	if err != nil {
		t.Fatalf("columns into localStorage: %v", err)
	}
	list := ui + "/namespaces/default/workflows"
	// The list is loaded again when it lacks the columns or the run (a
	// loaded machine can be slow to answer the UI's first queries); the
	// last try's page is kept for the error.
	for try := 1; ; try++ {
		tctx, cancelTry := context.WithTimeout(bctx, 30*time.Second)
		err = chromedp.Do(tctx,
			chromedp.Navigate(list),
			chromedp.WaitVisible(chromedp.CSS(`th[data-testid="workflows-summary-table-header-cell-TempotrainFunc"]`)),
			chromedp.WaitVisible(chromedp.CSS(`a[href*="`+run.WorkflowID+`"]`)),
			chromedp.Sleep(time.Second), // the cells of the new columns fill in
		)
		cancelTry()
		if err == nil {
			break
		}
		if try == 3 {
			saveShot(t, bctx, shots, "ui-workflow-list-failed.png")
			body, _ := chromedp.Run(bctx, chromedp.Text(chromedp.CSS("body")))
			t.Fatalf("workflow list at %s, %d tries: %v; the page says:\n%s", list, try, err, body)
		}
		t.Logf("workflow list at %s, try %d: %v; loading it again", list, try, err)
	}
	header := browserText(t, bctx, "thead")
	rows := browserText(t, bctx, "tbody")
	saveShot(t, bctx, shots, "ui-workflow-list.png")
	for _, want := range []string{"TempotrainRun", "TempotrainFunc", "TempotrainStatus", "TempotrainAttempt", "TempotrainWorldSize", "TempotrainBestScore"} {
		if !strings.Contains(header, want) {
			t.Errorf("the list's header lacks the column %s: %q", want, header)
		}
	}
	for _, want := range []string{run.WorkflowID, "ui-check", "schedule-score", "Running"} {
		if !strings.Contains(rows, want) {
			t.Errorf("the list's rows lack %q: %q", want, rows)
		}
	}

	// The run's User Metadata tab: the UI renders the static summary and
	// details and the current details as Markdown, each in a same-origin
	// iframe.
	// The run's current execution: a Fit whose history grew long has
	// continued as new, and the closed execution has no pending ranks.
	desc, err := cl.DescribeWorkflowExecution(ctx, run.WorkflowID, "")
	if err != nil {
		t.Fatal(err)
	}
	runPage := fmt.Sprintf("%s/namespaces/default/workflows/%s/%s", ui, run.WorkflowID, desc.GetWorkflowExecutionInfo().GetExecution().GetRunId())
	// The page is loaded again every 30 s until it renders: on a loaded
	// machine one of the UI's requests can fail, and the page then stays
	// as it was (CI waited 8 minutes on one load).
	var frames []string
	for try := 1; ; try++ {
		tctx, cancelTry := context.WithTimeout(bctx, 30*time.Second)
		err = chromedp.Do(tctx,
			chromedp.Navigate(runPage+"/user-metadata"),
			chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
				for {
					fr, err := chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll('iframe')).map(f => (f.contentDocument && f.contentDocument.body) ? f.contentDocument.body.innerText : '')`)(ctx, tg)
					if err == nil && len(fr) == 3 && fr[0] != "" && fr[1] != "" && fr[2] != "" {
						frames = fr
						return nil
					}
					if _, err := chromedp.Sleep(200*time.Millisecond)(ctx, tg); err != nil {
						return fmt.Errorf("the summary, details and current details did not render (last: %q, %v): %w", fr, err, ctx.Err())
					}
				}
			}),
		)
		cancelTry()
		if err == nil {
			break
		}
		if try == 6 || ctx.Err() != nil {
			saveShot(t, bctx, shots, "ui-run-metadata-failed.png")
			body, _ := chromedp.Run(bctx, chromedp.Text(chromedp.CSS("body")))
			t.Fatalf("the run's page %s/user-metadata, %d tries: %v; the page says:\n%s", runPage, try, err, body)
		}
		t.Logf("the run's page, try %d: %v; loading it again", try, err)
	}
	saveShot(t, bctx, shots, "ui-run-metadata.png")
	t.Logf("the run's summary, details and current details in the UI:\n%s", strings.Join(frames, "\n---\n"))
	for i, want := range [][]string{
		{in.Summary()},
		{"Run ui-check, training function schedule-score", "storage: " + in.Run.StoragePath, "ranks: 2 ranks", "best by loss (min)", `"epochs": 400`},
		{"schedule-score on 2 ranks, attempt 1", "reports, best loss"},
	} {
		for _, w := range want {
			if !strings.Contains(frames[i], w) {
				t.Errorf("%s in the UI lacks %q: %q", []string{"the summary", "the details", "the current details"}[i], w, frames[i])
			}
		}
	}

	// The Pending Activities tab: every rank's heartbeat (epoch, samples/s).
	// The tab shows the heartbeats as of its loading: it is loaded again
	// until they carry samples/s (on a loaded machine the first load can
	// come before the server has a heartbeat with them).
	for try := 1; ; try++ {
		tctx, cancelTry := context.WithTimeout(bctx, 30*time.Second)
		err = chromedp.Do(tctx,
			chromedp.Navigate(runPage+"/pending-activities"),
			chromedp.WaitVisible(`//*[contains(text(), "samples_per_s")]`),
		)
		cancelTry()
		if err == nil {
			break
		}
		if try == 6 || ctx.Err() != nil {
			saveShot(t, bctx, shots, "ui-run-pending-activities-failed.png")
			body, _ := chromedp.Run(bctx, chromedp.Text(chromedp.CSS("body")))
			t.Fatalf("the run's pending activities, %d tries: %v; the page says:\n%s", try, err, body)
		}
		t.Logf("the run's pending activities, try %d: %v; loading the tab again", try, err)
	}
	pending := browserText(t, bctx, "main")
	saveShot(t, bctx, shots, "ui-run-pending-activities.png")
	if n := strings.Count(pending, `"phase": "train"`); n != 2 {
		t.Errorf("%d ranks training in the Pending Activities tab, want 2:\n%s", n, pending)
	}
	if st, err := run.Status(ctx); err == nil && st.Done {
		t.Errorf("the run ended during the check: %+v", st)
	}
}

// browserText is the text of the first element a CSS selector matches.
func browserText(t *testing.T, ctx context.Context, css string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(css)))
	if err != nil {
		t.Fatalf("text of %s: %v", css, err)
	}
	return s
}

// saveShot screenshots the whole page into dir/name and logs its path.
func saveShot(t *testing.T, ctx context.Context, dir, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	if len(png) < 10_000 {
		t.Errorf("screenshot %s is %d bytes: blank?", name, len(png))
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", path, len(png))
}
