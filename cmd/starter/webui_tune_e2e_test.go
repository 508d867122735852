package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/app"
	"github.com/tempotrain/tempotrain/train"
)

// TestWebUITune runs a small search (3 trials) on a dev server and opens
// its Web UI in headless Chromium: the workflow list shows the Tune and its
// child Fits, the Tune's Relationships tab its children, and a trial's its
// parent. The screenshot of the Tune's children is ui-tune.png in
// TEMPOTRAIN_UI_SHOTS (default: the test's temporary directory; the one in
// docs/ui-tune.png was made so). Run it alone: Chromium stalls under load.
func TestWebUITune(t *testing.T) {
	chromium := needProgram(t, "chromium", "TEMPOTRAIN_REQUIRE_CHROMIUM")
	start := time.Now()
	_, cl := startEnv(t, app.DevServerOptions{UIPort: freeTCPPort(t)})
	ui := scheduleEnv.local.Server.UIURL
	if ui == "" {
		t.Fatal("the dev server has no UI")
	}
	seed := int64(3)
	in := api.TuneInput{
		Trainer: train.FitInput{TrainFunc: "schedule-score", Config: json.RawMessage(`{"epochs":2}`),
			Scaling: train.ScalingConfig{NumWorkers: 1, TaskQueue: scheduleEnv.rq},
			Run:     train.RunConfig{Name: "ui-search", StoragePath: t.TempDir()}},
		ParamSpace: map[string]json.RawMessage{"config.penalty": json.RawMessage(`{"grid_search": [0, 0.25, 0.5]}`)},
		TuneConfig: api.TuneConfig{Metric: "loss", Mode: "min", Seed: &seed},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	s, err := train.NewTunerFromInput(cl, in, train.WithTuneTaskQueue(scheduleEnv.tq)).Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Trials) != 3 || res.Best == nil {
		t.Fatalf("the search: %d trials, best %+v", len(res.Trials), res.Best)
	}
	t.Logf("search %s ended in %v", s.WorkflowID, time.Since(start))
	children := make([]string, 0, len(res.Trials))
	for _, tr := range res.Trials {
		children = append(children, tr.WorkflowID)
	}

	shots := os.Getenv("TEMPOTRAIN_UI_SHOTS")
	if shots == "" {
		shots = t.TempDir()
	}
	bctx := headless(t, ctx, chromium)

	runID := func(id string) string {
		d, err := cl.DescribeWorkflowExecution(ctx, id, "")
		if err != nil {
			t.Fatal(err)
		}
		return d.GetWorkflowExecutionInfo().GetExecution().GetRunId()
	}
	page := func(id string) string {
		return fmt.Sprintf("%s/namespaces/default/workflows/%s/%s", ui, id, runID(id))
	}
	// The list: the search and its trials.
	pageShows(t, bctx, shots, "ui-tune-list", ui+"/namespaces/default/workflows", append([]string{s.WorkflowID}, children...))
	// The search's Relationships tab: its children; a trial's: its parent.
	pageShows(t, bctx, shots, "ui-tune", page(s.WorkflowID)+"/relationships", children)
	pageShows(t, bctx, shots, "ui-tune-trial", page(children[0])+"/relationships", []string{s.WorkflowID})
	t.Logf("TestWebUITune: %v", time.Since(start))
}

// pageShows loads url until its text has every string of wants (a loaded
// machine can be slow to answer the UI's queries: the page is loaded again
// every 20 s, 6 times at most) and saves a screenshot name.png.
func pageShows(t *testing.T, bctx context.Context, shots, name, url string, wants []string) {
	t.Helper()
	var body string
	for try := 1; ; try++ {
		tctx, cancelTry := context.WithTimeout(bctx, 20*time.Second)
		err := chromedp.Do(tctx,
			chromedp.Navigate(url),
			chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
				for {
					var err error
					body, err = chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`)(ctx, tg)
					missing := ""
					for _, w := range wants {
						if !strings.Contains(body, w) {
							missing = w
							break
						}
					}
					if err == nil && missing == "" {
						return nil
					}
					if _, err := chromedp.Sleep(200*time.Millisecond)(ctx, tg); err != nil {
						return fmt.Errorf("the page lacks %q: %w", missing, err)
					}
				}
			}),
			chromedp.Sleep(500*time.Millisecond), // the rest renders
		)
		cancelTry()
		if err == nil {
			break
		}
		if try == 6 {
			saveShot(t, bctx, shots, name+"-failed.png")
			t.Fatalf("%s, %d tries: %v; the page says:\n%s", url, try, err, body)
		}
		t.Logf("%s, try %d: %v; loading it again", url, try, err)
	}
	saveShot(t, bctx, shots, name+".png")
}

// headless starts headless Chromium (1600x1000, its own profile) for the
// test's time, or ctx's.
func headless(t *testing.T, ctx context.Context, chromium string) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium), chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.Flag("disable-quic", true), chromedp.WindowSize(1600, 1000),
		chromedp.UserDataDir(t.TempDir()))
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	t.Cleanup(cancelAlloc)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	t.Cleanup(cancelBrowser)
	// Started now, on bctx: the browser lives as long as the context of
	// its first Run (a try's timeout would close it).
	if err := chromedp.Do(bctx, chromedp.Sleep(time.Millisecond)); err != nil {
		t.Fatalf("start %s: %v", chromium, err)
	}
	return bctx
}
