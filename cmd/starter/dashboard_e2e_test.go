package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/app"
	"github.com/tempotrain/tempotrain/dashboard"
	"github.com/tempotrain/tempotrain/dashboard/tunetest"
	"github.com/tempotrain/tempotrain/storage"
	"github.com/tempotrain/tempotrain/train"
)

// curvesGate holds the last epoch of curvesFn's second attempt until the
// test closes it: the run is held running, its ranks heartbeating, while
// the test looks at the page.
var curvesGate = make(chan struct{})

// curvesFn trains config.epochs epochs of a made-up model: each epoch it
// reports train_loss, valid_loss and valid_accuracy, and rank 0
// checkpoints. Attempt 1 fails in epoch config.fail_at; attempt 2
// resumes from the last checkpoint and, in its last epoch, waits for
// curvesGate counting samples.
func curvesFn(ctx context.Context, tc *train.Context) error {
	var cfg struct {
		Epochs  int `json:"epochs"`
		FailAt  int `json:"fail_at"`
		SleepMS int `json:"sleep_ms"`
	}
	if err := tc.Config(&cfg); err != nil {
		return err
	}
	start := 1
	if ck := tc.Checkpoint(); ck != nil {
		b, err := ck.ReadFile("epoch")
		if err != nil {
			return err
		}
		start = int(binary.LittleEndian.Uint64(b)) + 1
	}
	for e := start; e <= cfg.Epochs; e++ {
		for step := range 5 {
			tc.SetProgress(e, step)
			time.Sleep(time.Duration(cfg.SleepMS) * time.Millisecond / 5)
			tc.AddSamples(32)
		}
		if e == cfg.FailAt && tc.Attempt() == 1 {
			return fmt.Errorf("injected failure in epoch %d", e)
		}
		if e == cfg.Epochs && tc.Attempt() > 1 {
			for held := true; held; {
				select {
				case <-curvesGate:
					held = false
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(50 * time.Millisecond):
					tc.AddSamples(32)
				}
			}
		}
		var ck *train.Checkpoint
		if tc.WorldRank() == 0 {
			dir, err := tc.NewCheckpointDir()
			if err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(dir, "epoch"), binary.LittleEndian.AppendUint64(nil, uint64(e)), 0o644); err != nil {
				return err
			}
			ck = train.NewCheckpoint(dir)
		}
		f := float64(e)
		// valid_loss is best in epoch 5, then overfits.
		m := train.Metrics{"train_loss": 2 / f, "valid_loss": 1/f + 0.05*(f-5)*(f-5), "valid_accuracy": 1 - 1/(f+1), "epoch": f}
		if err := tc.Report(m, ck); err != nil {
			return err
		}
	}
	return nil
}

func init() { train.MustRegister("dashboard-curves", curvesFn) }

// pageCharts is what the run page's charts hold: chart name, then its
// series' labels and uPlot's data (x, then each series' y, null where a
// series has no report).
type pageCharts map[string]struct {
	Labels []string     `json:"labels"`
	Data   [][]*float64 `json:"data"`
}

// TestDashboard opens the dashboard in headless Chromium on a real run
// with an injected failure: while the run trains, the run page shows its
// two ranks' samples/s and heartbeats; once it ended, every curve the page
// drew holds exactly the reports in storage (train and valid loss on one
// chart), the restart is drawn on every chart and listed with its reason,
// the best checkpoint is marked, the attempts and the rank logs are there,
// the page links to the workflow in the Web UI, and the runs list shows
// the run. Screenshots go to TEMPOTRAIN_UI_SHOTS (default: the test's
// temporary directory): dashboard-run.png and dashboard-runs.png.
func TestDashboard(t *testing.T) {
	chromium := needProgram(t, "chromium", "TEMPOTRAIN_REQUIRE_CHROMIUM")
	_, cl := startEnv(t, app.DevServerOptions{UIPort: freeTCPPort(t)})
	ui := scheduleEnv.local.Server.UIURL
	dash := httptest.NewServer(dashboard.New(dashboard.Options{Client: cl, WebUI: ui}).Handler())
	defer dash.Close()

	store := t.TempDir()
	in := train.FitInput{TrainFunc: "dashboard-curves", Config: json.RawMessage(`{"epochs":8,"fail_at":3,"sleep_ms":150}`),
		Scaling: train.ScalingConfig{NumWorkers: 2, TaskQueue: scheduleEnv.rq},
		Run: train.RunConfig{Name: "dash-check", StoragePath: store, Failure: train.FailureConfig{MaxFailures: 1},
			Checkpoint: train.CheckpointConfig{ScoreAttribute: "valid_loss", ScoreOrder: "min"}}}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	run, err := train.NewTrainerFromInput(cl, in, train.WithTaskQueue(scheduleEnv.tq), train.WithDashboard(dash.URL)).Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	released := false
	release := func() {
		if !released {
			close(curvesGate)
			released = true
		}
	}
	defer release()
	defer func() { _ = cl.CancelWorkflow(context.Background(), run.WorkflowID, "") }()

	br := openBrowser(t, ctx, chromium)
	bctx, shots, load, eval := br.ctx, br.shots, br.load, br.eval

	// While attempt 2 is held in its last epoch: both ranks with their
	// samples/s and heartbeats, the restart already marked.
	runPage := dash.URL + "/runs/" + run.WorkflowID
	load("the run page while the run trains", runPage,
		`window.tempotrain && tempotrain.run && tempotrain.run.status && tempotrain.run.status.attempt === 2 && tempotrain.metrics.restarts.length === 1 && `+
			`tempotrain.run.ranks.filter(r => r.attempt === 2 && r.samples_per_s > 0 && r.heartbeat_age_s !== null).length === 2 && `+
			`document.querySelectorAll('#ranks tbody tr').length === 2`)
	var ranks []string
	eval(`[...document.querySelectorAll('#ranks tbody tr')].map(tr => tr.innerText)`, &ranks)
	t.Logf("the ranks on the page:\n%s", strings.Join(ranks, "\n"))
	saveShot(t, bctx, shots, "dashboard-run-live.png")
	for i, r := range ranks {
		if f := strings.Fields(r); len(f) < 10 || f[0] != "2" || f[1] != fmt.Sprint(i) || f[2] != "train" || f[6] == "0" || !strings.HasSuffix(f[8], "s") {
			t.Errorf("rank %d's row: %q: want attempt 2, rank %d, training, samples/s > 0, a heartbeat age", i, r, i)
		}
	}

	release()
	res, err := run.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := dashboard.LoadReports(ctx, store, "dash-check")
	if err != nil {
		t.Fatal(err)
	}
	if res.Attempts != 2 || len(recs) != res.Reports {
		t.Fatalf("the run: %d attempts, %d reports, %d in storage", res.Attempts, res.Reports, len(recs))
	}
	// A second run, which fails, for the runs list.
	in2 := in
	in2.Run.Name, in2.Run.Failure.MaxFailures = "dash-fails", 0
	run2, err := train.NewTrainerFromInput(cl, in2, train.WithTaskQueue(scheduleEnv.tq)).Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The page, once more, after the run: it polls until it has every
	// report and sees the workflow closed.
	load("the run page after the run", runPage, fmt.Sprintf(
		`window.tempotrain && tempotrain.metrics && tempotrain.metrics.reports === %d && tempotrain.run.workflow_status === "completed" && `+
			`Object.keys(tempotrain.marks).length >= 3 && document.querySelectorAll('#logsel option').length > 0 && document.getElementById('log').textContent.length > 0`, len(recs)))
	saveShot(t, bctx, shots, "dashboard-run.png")

	// Every point drawn is a report in storage, and every report's every
	// metric is drawn.
	var charts pageCharts
	eval(`Object.fromEntries(Object.entries(tempotrain.charts).map(([k, u]) => [k, {labels: u.series.slice(1).map(s => s.label), data: u.data}]))`, &charts)
	drawn := map[string]map[int]float64{}
	for name, c := range charts {
		for k, label := range c.Labels {
			if drawn[label] != nil {
				t.Errorf("metric %s is drawn twice", label)
			}
			drawn[label] = map[int]float64{}
			for i, x := range c.Data[0] {
				if y := c.Data[k+1][i]; y != nil {
					drawn[label][int(*x)] = *y
				}
			}
			t.Logf("chart %q: %s, %d points", name, label, len(drawn[label]))
		}
	}
	if l := charts["loss"].Labels; len(l) != 2 || l[0] != "train_loss" || l[1] != "valid_loss" {
		t.Errorf("the loss chart holds %q, want train_loss and valid_loss", l)
	}
	stored := 0
	firstOf2 := -1
	for _, r := range recs {
		if r.Attempt == 2 && firstOf2 < 0 {
			firstOf2 = r.Index
		}
		for m, v := range r.Metrics {
			stored++
			if got, ok := drawn[m][r.Index]; !ok || got != v {
				t.Errorf("report %d's %s = %v; the page drew %v (drawn: %v)", r.Index, m, v, got, ok)
			}
		}
	}
	n := 0
	for _, pts := range drawn {
		n += len(pts)
	}
	if n != stored {
		t.Errorf("the page drew %d points, storage holds %d", n, stored)
	}

	// The restart: before attempt 2's first report, drawn on every metric
	// chart, and listed with its reason.
	var marks map[string][]struct {
		Attempt, Index int
		X              float64
	}
	eval(`tempotrain.marks`, &marks)
	for name := range charts {
		if m := marks[name]; len(m) != 1 || m[0].Attempt != 2 || m[0].Index != firstOf2 || m[0].X <= 0 {
			t.Errorf("chart %q's restart marks: %+v, want attempt 2 before report %d", name, m, firstOf2)
		}
	}
	restarts := browserText(t, bctx, "#restarts")
	if !strings.Contains(restarts, fmt.Sprintf("before report %d: attempt 2 (failure)", firstOf2)) || !strings.Contains(restarts, "injected failure in epoch 3") {
		t.Errorf("the restarts listed: %q", restarts)
	}
	// The best checkpoint is the one of epoch 5's report; the attempts,
	// the input and the Web UI's link.
	best := browserText(t, bctx, "#checkpoints tr.best")
	var bestSeq int
	for _, r := range recs {
		if r.Metrics["epoch"] == 5 {
			bestSeq = r.Checkpoint
		}
	}
	if f := strings.Fields(best); len(f) == 0 || f[0] != fmt.Sprint(bestSeq) || !strings.Contains(best, "best") {
		t.Errorf("the best checkpoint's row: %q, want checkpoint %d", best, bestSeq)
	}
	var attempts []string
	eval(`[...document.querySelectorAll('#attempts tbody tr')].map(tr => tr.innerText)`, &attempts)
	if len(attempts) != 2 || !strings.Contains(attempts[0], "injected failure in epoch 3") || !strings.HasSuffix(attempts[1], "ok") {
		t.Errorf("the attempts: %q", attempts)
	}
	if in := browserText(t, bctx, "#input"); !strings.Contains(in, `"train_func": "dashboard-curves"`) {
		t.Errorf("the input: %q", in)
	}
	desc, err := cl.DescribeWorkflowExecution(ctx, run.WorkflowID, "")
	if err != nil {
		t.Fatal(err)
	}
	var href string
	eval(`document.getElementById('webui').href`, &href)
	if want := fmt.Sprintf("%s/namespaces/default/workflows/%s/%s/history", ui, run.WorkflowID, desc.GetWorkflowExecutionInfo().GetExecution().GetRunId()); href != want {
		t.Errorf("the Web UI link: %q, want %q", href, want)
	}
	// And back: the run's details, which the Web UI shows, link its page.
	var details string
	if err := converter.GetDefaultDataConverter().FromPayload(desc.GetExecutionConfig().GetUserMetadata().GetDetails(), &details); err != nil {
		t.Fatal(err)
	}
	if want := "(" + runPage + ")"; !strings.Contains(details, want) {
		t.Errorf("the run's details in the Web UI lack the link %s:\n%s", want, details)
	}

	// A drag over the loss chart from report 1.6 to 5.4 zooms every chart
	// into reports 2 to 5 (fetched again for that range); a double-click
	// shows all reports again.
	var all []string
	for _, r := range recs {
		all = append(all, fmt.Sprint(r.Index))
	}
	allX := `Object.values(tempotrain.charts).filter(u => u.series[0].label === "report").every(u => u.data[0].join() === %q)`
	_, err = chromedp.Run(bctx, chromedp.Evaluate[chromedp.Void](`(() => { const u = tempotrain.charts.loss, l = u.valToPos(1.6, "x"), r = u.valToPos(5.4, "x"); `+
		`u.setSelect({left: l, width: r - l, top: 0, height: u.over.clientHeight}); })()`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(bctx, chromedp.Poll[chromedp.Void](fmt.Sprintf(allX, "2,3,4,5"), chromedp.WithPollingTimeout(30*time.Second))); err != nil {
		t.Errorf("zooming into reports 2-5: %v", err)
	}
	if _, err := chromedp.Run(bctx, chromedp.Evaluate[chromedp.Void](`tempotrain.charts.loss.root.dispatchEvent(new MouseEvent("dblclick", {bubbles: true}))`)); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(bctx, chromedp.Poll[chromedp.Void](fmt.Sprintf(allX, strings.Join(all, ",")), chromedp.WithPollingTimeout(30*time.Second))); err != nil {
		t.Errorf("back to all reports: %v", err)
	}

	// The runs list, once the second run failed.
	if _, err := run2.Wait(ctx); err == nil || !strings.Contains(err.Error(), "injected failure in epoch 3") {
		t.Fatalf("the second run: %v", err)
	}
	row := func(id, status string) string {
		return fmt.Sprintf(`document.querySelector('tr[data-workflow-id=%q]') && document.querySelector('tr[data-workflow-id=%q]').innerText.includes(%q)`, id, id, status)
	}
	load("the runs list", dash.URL+"/?func=dashboard-curves", row(run.WorkflowID, "succeeded")+" && "+row(run2.WorkflowID, "failed"))
	saveShot(t, bctx, shots, "dashboard-runs.png")
	text := browserText(t, bctx, fmt.Sprintf(`tr[data-workflow-id=%q]`, run.WorkflowID))
	if f := strings.Split(text, "\t"); len(f) < 9 || f[0] != "dash-check" || f[1] != "dashboard-curves" || f[2] != "succeeded" || f[3] != "2" || f[4] != "2" || f[5] != bestScore(recs, bestSeq) {
		t.Errorf("the run's row in the list: %q, want its best score %s", text, bestScore(recs, bestSeq))
	}
	eval(fmt.Sprintf(`document.querySelector('tr[data-workflow-id=%q] a[title]').href`, run.WorkflowID), &href)
	if !strings.HasPrefix(href, ui+"/namespaces/default/workflows/"+run.WorkflowID+"/") {
		t.Errorf("the run's row links the Web UI at %q", href)
	}

	// A run of 100,000 reports (its storage written here; its Fit on a
	// queue no worker polls): the page draws it from at most 2,000 points
	// a curve, the restart at report 60,000 marked, and the world size of
	// this elastic run over the reports: 2 ranks, then 3.
	const many = 100_000
	bigStore := t.TempDir()
	b, err := storage.Open(ctx, bigStore)
	if err != nil {
		t.Fatal(err)
	}
	big := storage.NewRun(b, "dash-big")
	batch := make([]json.RawMessage, 0, 10_000)
	for i := range many {
		line := fmt.Sprintf(`{"index":%d,"attempt":%d,"time":"2026-11-01T00:00:00Z","metrics":{"train_loss":%g,"valid_loss":%g}}`, i, 1+i/60_000, 1/float64(i+1), 1.5/float64(i+1))
		if batch = append(batch, json.RawMessage(line)); len(batch) == cap(batch) {
			if err := big.AppendMetrics(ctx, i+1-len(batch), batch); err != nil {
				t.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	if err := big.SaveState(ctx, &api.RunState{Version: api.RunStateVersion, Name: "dash-big", Reports: many, Attempts: 2, Failures: 1,
		History: []api.AttemptRecord{{Attempt: 1, WorldSize: 2, Error: "rank 1 lost"}, {Attempt: 2, WorldSize: 3}}}); err != nil {
		t.Fatal(err)
	}
	bigIn := in
	bigIn.Run.Name, bigIn.Run.StoragePath = "dash-big", bigStore
	bigIn.Scaling = train.ScalingConfig{MinWorkers: 2, MaxWorkers: 3, TaskQueue: scheduleEnv.rq} // elastic
	if _, err := cl.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "fit-dash-big", TaskQueue: "nobody-" + t.Name()}, api.WorkflowType, bigIn); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	load("a run of 100,000 reports", dash.URL+"/runs/fit-dash-big",
		`window.tempotrain && tempotrain.metrics && tempotrain.metrics.reports === 100000 && tempotrain.charts.loss && (tempotrain.marks.loss || []).length === 1`)
	took := time.Since(t0)
	// uPlot draws in a microtask after setData: the one queued after it
	// runs once the chart is drawn.
	redraw, err := chromedp.Run(bctx, chromedp.Evaluate[float64](`(async () => { const u = tempotrain.charts.loss, t = performance.now(); `+
		`u.setData(u.data); await new Promise(r => queueMicrotask(r)); return performance.now() - t; })()`, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatal(err)
	}
	var drawn100k []int
	eval(`tempotrain.charts.loss.data.slice(1).map(y => y.filter(v => v !== null).length)`, &drawn100k)
	t.Logf("a run of %d reports: the page drew its curves %v after it was opened, %d and %d points; a redraw takes %.1f ms", many, took.Round(time.Millisecond), drawn100k[0], drawn100k[1], redraw)
	if len(drawn100k) != 2 || drawn100k[0] > dashboard.DefaultMaxPoints || drawn100k[1] > dashboard.DefaultMaxPoints || drawn100k[0] < dashboard.DefaultMaxPoints/2 {
		t.Errorf("the curves of 100,000 reports hold %v points, want at most %d each", drawn100k, dashboard.DefaultMaxPoints)
	}
	var ws [][]float64
	eval(`tempotrain.charts["world size"].data`, &ws)
	if want := [][]float64{{0, 60_000, many - 1}, {2, 3, 3}}; fmt.Sprint(ws) != fmt.Sprint(want) {
		t.Errorf("the world size chart holds %v, want %v", ws, want)
	}
	if note := browserText(t, bctx, "#reports"); !strings.Contains(note, "100000 reports") || !strings.Contains(note, "downsampled") {
		t.Errorf("the page does not say the curves were downsampled: %q", note)
	}
}

// browser is a headless Chromium of a test, its screenshots' folder
// (TEMPOTRAIN_UI_SHOTS, default the test's temporary directory), and the
// test's context.
type browser struct {
	t     *testing.T
	ctx   context.Context // the browser's
	test  context.Context
	shots string
}

// openBrowser starts chromium; it stops with ctx.
func openBrowser(t *testing.T, ctx context.Context, chromium string) *browser {
	t.Helper()
	shots := os.Getenv("TEMPOTRAIN_UI_SHOTS")
	if shots == "" {
		shots = t.TempDir()
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium), chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.WindowSize(1400, 1000), chromedp.UserDataDir(t.TempDir()))
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	t.Cleanup(cancelAlloc)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	t.Cleanup(cancelBrowser)
	// The browser starts with the first action on bctx: one on a context
	// of a try's timeout would stop it with the try.
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("start %s: %v", chromium, err)
	}
	return &browser{t: t, ctx: bctx, test: ctx, shots: shots}
}

// load opens url and waits until the page's JavaScript says cond, loading
// it again (a loaded machine can be slow to answer) up to 6 times, 30 s
// each.
func (b *browser) load(what, url, cond string) {
	t := b.t
	t.Helper()
	for try := 1; ; try++ {
		tctx, cancelTry := context.WithTimeout(b.ctx, 30*time.Second)
		err := chromedp.Do(tctx, chromedp.Navigate(url), chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			_, err := chromedp.Poll[chromedp.Void](cond, chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(0))(ctx, tg)
			return err
		}))
		cancelTry()
		if err == nil {
			return
		}
		if try == 6 || b.test.Err() != nil {
			saveShot(t, b.ctx, b.shots, "dashboard-failed.png")
			body, _ := chromedp.Run(b.ctx, chromedp.Text(chromedp.CSS("body")))
			t.Fatalf("%s at %s, %d tries, waiting for %s: %v; the page says:\n%s", what, url, try, cond, err, body)
		}
		t.Logf("%s, try %d: %v; loading it again", what, try, err)
	}
}

// eval evaluates expr in the page and decodes its JSON into v.
func (b *browser) eval(expr string, v any) {
	t := b.t
	t.Helper()
	s, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](`JSON.stringify(`+expr+`)`))
	if err != nil {
		t.Fatalf("%s: %v", expr, err)
	}
	if err := json.Unmarshal([]byte(s), v); err != nil {
		t.Fatalf("%s: %v: %s", expr, err, s)
	}
}

// bestScore is the valid_loss of checkpoint seq as the page prints it.
func bestScore(recs []api.ReportRecord, seq int) string {
	for _, r := range recs {
		if r.Checkpoint == seq {
			return strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.4g", r.Metrics["valid_loss"]), "0"), ".")
		}
	}
	return "?"
}

// TestDashboardTune opens a real search's page (dashboard/tunetest:
// 5 trials, ASHA stops some) in headless Chromium: its one chart draws a
// series per trial holding exactly the trial's reports of the metric in
// storage (by epoch), the stopped trials dashed and shorter, the best
// thick and starred; the table has every trial with its best metric and
// a link to its run page. Screenshot: dashboard-tune.png.
func TestDashboardTune(t *testing.T) {
	chromium := needProgram(t, "chromium", "TEMPOTRAIN_REQUIRE_CHROMIUM")
	_, cl := startEnv(t, app.DevServerOptions{})
	dash := httptest.NewServer(dashboard.New(dashboard.Options{Client: cl}).Handler())
	defer dash.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	store := t.TempDir()
	tu, err := tunetest.Tuner(cl, "dash-tune-page", store, scheduleEnv.tq, scheduleEnv.rq)
	if err != nil {
		t.Fatal(err)
	}
	s, err := tu.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cl.CancelWorkflow(context.Background(), s.WorkflowID, "") }()
	br := openBrowser(t, ctx, chromium)
	page := dash.URL + "/tunes/" + s.WorkflowID
	// Live: the chart draws while trials train.
	br.load("the search page while it runs", page, `window.tempotrain && tempotrain.tune && tempotrain.tune.workflow_status === "running" && tempotrain.chart !== null`)
	res, err := s.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	br.load("the search page after the search", page, fmt.Sprintf(`window.tempotrain && tempotrain.tune && tempotrain.tune.workflow_status === "completed" && `+
		`tempotrain.chart && tempotrain.chart.series.length === %d && document.querySelectorAll('#trials tbody tr').length === %d`, tunetest.Trials+1, tunetest.Trials))
	saveShot(t, br.ctx, br.shots, "dashboard-tune.png")

	var chart struct {
		Series []struct {
			Label string    `json:"label"`
			Dash  []float64 `json:"dash"`
			Width float64   `json:"width"`
		} `json:"series"`
		Data [][]*float64 `json:"data"`
	}
	br.eval(`{series: tempotrain.chart.series.slice(1).map(s => ({label: s.label, dash: s.dash || null, width: s.width})), data: tempotrain.chart.data}`, &chart)
	byName := map[string]api.TrialResult{}
	for _, tr := range res.Trials {
		byName[tr.Name] = tr
	}
	if len(chart.Series) != len(res.Trials) {
		t.Fatalf("the chart has %d series, the search %d trials", len(chart.Series), len(res.Trials))
	}
	stoppedMax, completedMin := 0, 1<<30
	for k, sr := range chart.Series {
		name, star := strings.CutSuffix(sr.Label, " ★")
		tr, ok := byName[name]
		if !ok {
			t.Fatalf("series %q is no trial's", sr.Label)
		}
		if best := name == res.Best.Name; star != best || (best && sr.Width <= 2) || (!best && sr.Width > 2) {
			t.Errorf("series %q: width %g; the best trial is %s", sr.Label, sr.Width, res.Best.Name)
		}
		if dashed := len(sr.Dash) > 0; dashed != (tr.Status == api.TrialStopped) {
			t.Errorf("series %q of a %s trial: dash %v", sr.Label, tr.Status, sr.Dash)
		}
		store, run := dashboard.TrialStorage(tr)
		recs, err := dashboard.LoadReports(ctx, store, run)
		if err != nil {
			t.Fatal(err)
		}
		drawn := map[float64]float64{}
		for i, x := range chart.Data[0] {
			if y := chart.Data[k+1][i]; y != nil {
				drawn[*x] = *y
			}
		}
		for _, r := range recs {
			if got, ok := drawn[r.Metrics["epoch"]]; !ok || got != r.Metrics["valid_loss"] {
				t.Errorf("%s: epoch %g's valid_loss %v; drawn %v (%v)", name, r.Metrics["epoch"], r.Metrics["valid_loss"], got, ok)
			}
		}
		if len(drawn) != len(recs) {
			t.Errorf("%s: %d points drawn, %d reports in storage", name, len(drawn), len(recs))
		}
		t.Logf("series %q (%s): %d points, width %g, dash %v", sr.Label, tr.Status, len(drawn), sr.Width, sr.Dash)
		switch tr.Status {
		case api.TrialStopped:
			stoppedMax = max(stoppedMax, len(drawn))
		case api.TrialCompleted:
			completedMin = min(completedMin, len(drawn))
		}
	}
	if stoppedMax == 0 || stoppedMax >= completedMin {
		t.Errorf("stopped trials' curves hold up to %d points, completed ones at least %d: want them visibly shorter", stoppedMax, completedMin)
	}
	var rows []string
	br.eval(`[...document.querySelectorAll('#trials tbody tr')].map(tr => tr.innerText + "\t" + tr.querySelector('a').getAttribute('href'))`, &rows)
	for i, row := range rows {
		tr := res.Trials[i]
		f := strings.Split(row, "\t")
		if len(f) < 10 || !strings.HasPrefix(f[0], tr.Name) || f[1] != tr.Status || f[len(f)-1] != "/runs/"+tr.WorkflowID {
			t.Errorf("row %d: %q, want trial %s %s linking /runs/%s", i, row, tr.Name, tr.Status, tr.WorkflowID)
		}
	}
}
