package dashboard

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/app"
	"github.com/tempotrain/tempotrain/storage"
)

// get fetches path from h and decodes its JSON into v (unless nil),
// returning the body's size and how long the answer took.
func get(t *testing.T, h http.Handler, path string, v any) (int, time.Duration) {
	t.Helper()
	rec := httptest.NewRecorder()
	t0 := time.Now()
	h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
	took := time.Since(t0)
	if rec.Code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, rec.Code, rec.Body)
	}
	if v != nil {
		if err := json.Unmarshal(rec.Body.Bytes(), v); err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
	}
	return rec.Body.Len(), took
}

// TestAPIAtScale runs the JSON API against a real Temporal dev server
// holding 1,000 runs, one of which has 100,000 reports in its storage
// (and two attempts, the first failed, and a rank log): the runs list
// holds them all with their search attributes, the metrics route cuts
// each curve to max_points without losing its ends or its spikes, and
// both answer in bounded time and size. The runs are Fit workflows no
// worker runs: what the dashboard reads of them is the visibility
// store's, the history's input and the storage's.
func TestAPIAtScale(t *testing.T) {
	srv, err := app.StartDevServer(app.DevServerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	cl, err := client.Dial(client.Options{HostPort: srv.Address})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()

	// The run of 100,000 reports: train_loss every report, valid_loss
	// every 10th, a spike at report 77,777; attempt 2 from report 60,000.
	const reports, runs = 100_000, 1000
	store := t.TempDir()
	b, err := storage.Open(ctx, store)
	if err != nil {
		t.Fatal(err)
	}
	run := storage.NewRun(b, "big")
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	var lines []json.RawMessage
	for i := range reports {
		a := 1
		if i >= 60_000 {
			a = 2
		}
		m := api.Metrics{"train_loss": 1 / float64(i+1)}
		if i == 77_777 {
			m["train_loss"] = 50
		}
		if i%10 == 0 {
			m["valid_loss"] = 2 / float64(i+1)
		}
		l, _ := json.Marshal(api.ReportRecord{Index: i, Attempt: a, Time: t0.Add(time.Duration(i) * time.Second), Metrics: m})
		lines = append(lines, l)
		if len(lines) == 10_000 {
			if err := run.AppendMetrics(ctx, i+1-len(lines), lines); err != nil {
				t.Fatal(err)
			}
			lines = nil
		}
	}
	state := api.RunState{Version: api.RunStateVersion, Name: "big", TrainFunc: "scale", Status: api.StatusRunning, Attempts: 2, Failures: 1, Reports: reports,
		History:     []api.AttemptRecord{{Attempt: 1, WorldSize: 4, Start: t0, End: t0.Add(time.Hour), Error: "rank 3: injected failure"}, {Attempt: 2, WorldSize: 4, Start: t0.Add(time.Hour)}},
		Checkpoints: []api.Checkpoint{{Seq: 1, Attempt: 1, Metrics: api.Metrics{"valid_loss": 0.5}}, {Seq: 2, Attempt: 2, Metrics: api.Metrics{"valid_loss": 0.25}}, {Seq: 3, Attempt: 2, Metrics: api.Metrics{"valid_loss": 0.375}}}}
	if err := run.SaveState(ctx, &state); err != nil {
		t.Fatal(err)
	}
	logText := "time=2026-11-01T00:00:00Z level=INFO msg=hello rank=0\n"
	if err := b.Put(ctx, "big/"+storage.RankLogPath(2, 0), strings.NewReader(logText), int64(len(logText))); err != nil {
		t.Fatal(err)
	}

	// 1,000 runs: "big" and 999 others, on a queue no worker polls.
	t1 := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, runs)
	for w := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < runs; i += 32 {
				name := fmt.Sprintf("run-%04d", i)
				in := api.FitInput{TrainFunc: "scale", Run: api.RunConfig{Name: name, StoragePath: store,
					Checkpoint: api.CheckpointConfig{ScoreAttribute: "valid_loss", ScoreOrder: "min"}}}
				if i == 0 {
					name, in.Run.Name = "big", "big"
				}
				fn := []string{"mnist-mlp", "gbdt", "scale"}[i%3]
				status := []string{"running", "succeeded", "failed"}[i%3]
				sa := temporal.NewSearchAttributes(
					temporal.NewSearchAttributeKeyKeyword(api.SARun).ValueSet(name),
					temporal.NewSearchAttributeKeyKeyword(api.SAFunc).ValueSet(fn),
					temporal.NewSearchAttributeKeyKeyword(api.SAStatus).ValueSet(status),
					temporal.NewSearchAttributeKeyInt64(api.SAAttempt).ValueSet(int64(1+i%2)),
					temporal.NewSearchAttributeKeyInt64(api.SAWorldSize).ValueSet(4),
					temporal.NewSearchAttributeKeyFloat64(api.SABestScore).ValueSet(float64(i)/1000),
				)
				_, err := cl.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "fit-" + name, TaskQueue: "nobody-" + t.Name(), TypedSearchAttributes: sa}, api.WorkflowType, in)
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	t.Logf("started %d Fit workflows in %.1fs", runs, time.Since(t1).Seconds())

	h := New(Options{Client: cl, WebUI: "http://ui.example"}).Handler()
	// Visibility is eventually consistent: wait until it lists them all.
	var page RunsPage
	deadline := time.Now().Add(time.Minute)
	for {
		size, took := get(t, h, "/api/runs?limit=5000", &page)
		if len(page.Runs) == runs {
			t.Logf("GET /api/runs?limit=5000: %d runs, %d KiB in %v", len(page.Runs), size>>10, took.Round(time.Millisecond))
			if took > 10*time.Second {
				t.Errorf("listing %d runs took %v", runs, took)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("visibility lists %d runs of %d after a minute", len(page.Runs), runs)
		}
		time.Sleep(500 * time.Millisecond)
	}
	var big *RunSummary
	for i, r := range page.Runs {
		if r.Name == "big" {
			big = &page.Runs[i]
		}
	}
	if big == nil || big.Func != "mnist-mlp" || big.Status != "running" || big.Attempt == nil || *big.Attempt != 1 || big.WorldSize == nil || *big.WorldSize != 4 || big.BestScore == nil || *big.BestScore != 0 {
		t.Errorf("the run big in the list: %+v", big)
	}
	var failed RunsPage
	get(t, h, "/api/runs?status=failed&func=scale&limit=5000", &failed)
	if len(failed.Runs) != runs/3 { // i%3 == 2
		t.Errorf("status=failed&func=scale: %d runs, want %d", len(failed.Runs), runs/3)
	}
	if !strings.Contains(failed.WebUI, "http://ui.example/namespaces/default/workflows?query=") {
		t.Errorf("the list's Web UI link: %q", failed.WebUI)
	}

	// The run of 100,000 reports, cold (its reports read from storage)
	// and warm (the reports decoded before are kept).
	var m MetricsView
	size, cold := get(t, h, "/api/runs/fit-big/metrics", &m)
	_, warm := get(t, h, "/api/runs/fit-big/metrics", &m)
	t.Logf("GET /api/runs/fit-big/metrics (100,000 reports): %d KiB; %v cold, %v warm", size>>10, cold.Round(time.Millisecond), warm.Round(time.Millisecond))
	if m.Reports != reports || !m.Downsampled || len(m.Series) != 2 {
		t.Fatalf("metrics: %d reports, downsampled %v, %d series", m.Reports, m.Downsampled, len(m.Series))
	}
	for _, s := range m.Series {
		want := map[string]int{"train_loss": reports, "valid_loss": reports / 10}[s.Name]
		if s.Points != want || len(s.Index) > DefaultMaxPoints || len(s.Index) < DefaultMaxPoints/2 {
			t.Errorf("%s: %d points of %d, want at most %d of %d", s.Name, len(s.Index), s.Points, DefaultMaxPoints, want)
		}
		if s.Index[0] != 0 || s.Index[len(s.Index)-1] != reports-map[string]int{"train_loss": 1, "valid_loss": 10}[s.Name] {
			t.Errorf("%s: the first and last points drawn are reports %d and %d", s.Name, s.Index[0], s.Index[len(s.Index)-1])
		}
	}
	spike := false
	for k, i := range m.Series[0].Index {
		spike = spike || (i == 77_777 && m.Series[0].Value[k] == 50)
	}
	if !spike {
		t.Error("train_loss lost its spike at report 77,777")
	}
	if len(m.Restarts) != 1 || m.Restarts[0].Index != 60_000 || m.Restarts[0].Reason != "rank 3: injected failure" {
		t.Errorf("restarts: %+v", m.Restarts)
	}
	if size > 256<<10 || warm > 2*time.Second {
		t.Errorf("the metrics of 100,000 reports: %d KiB in %v (warm): too big or too slow for a page polling it every 2 s", size>>10, warm)
	}
	// A zoom: reports 1,000 to 1,999 in full.
	get(t, h, "/api/runs/fit-big/metrics?from=1000&to=1999&max_points=0", &m)
	if n := len(m.Series[0].Index); n != 1000 || m.Series[0].Index[0] != 1000 || m.Downsampled {
		t.Errorf("reports 1000-1999: %d points from %d", n, m.Series[0].Index[0])
	}

	// The run's page: its input, run.json, the best checkpoint, the Web
	// UI's link; no worker answers the status Query.
	var v RunView
	size, took := get(t, h, "/api/runs/fit-big", &v)
	t.Logf("GET /api/runs/fit-big: %d bytes in %v (its status Query unanswered)", size, took.Round(time.Millisecond))
	if v.Input.TrainFunc != "scale" || v.State == nil || v.State.Reports != reports || len(v.History) != 2 || v.StatusError == "" {
		t.Errorf("run view: input %+v, state %v, history %d, status error %q", v.Input, v.State != nil, len(v.History), v.StatusError)
	}
	if len(v.Checkpoints) != 3 || !v.Checkpoints[1].Best || v.Checkpoints[0].Best || v.Checkpoints[2].Best || *v.Checkpoints[1].Score != 0.25 {
		t.Errorf("checkpoints: %+v", v.Checkpoints)
	}
	if v.WebUI != "http://ui.example/namespaces/default/workflows/fit-big/"+v.RunID+"/history" {
		t.Errorf("web UI link %q", v.WebUI)
	}
	var logs []LogInfo
	get(t, h, "/api/runs/fit-big/logs", &logs)
	if len(logs) != 1 || logs[0].Attempt != 2 || logs[0].Rank != 0 || logs[0].URL != "/api/runs/fit-big/logs/2/0" {
		t.Fatalf("logs: %+v", logs)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", logs[0].URL, nil))
	if body, _ := io.ReadAll(rec.Body); !bytes.Equal(body, []byte(logText)) {
		t.Errorf("log: %q", body)
	}

	// Errors name what was wrong.
	for path, want := range map[string]string{
		"/api/runs/fit-nope":                     "not found",
		"/api/runs?status=sleeping":              `status \"sleeping\"`,
		"/api/runs/fit-big/metrics?max_points=2": "max_points=2",
		"/api/runs/fit-big/logs/0/0":             "want an attempt from 1",
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		if rec.Code/100 != 4 || !strings.Contains(rec.Body.String(), want) {
			t.Errorf("GET %s: %d %s, want a 4xx saying %s", path, rec.Code, rec.Body, want)
		}
	}
	// The pages and uPlot are served from the binary.
	for _, path := range []string{"/", "/runs/fit-big", "/static/vendor/uplot/uPlot.iife.min.js", "/static/run.js"} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		if rec.Code != http.StatusOK || rec.Body.Len() < 500 {
			t.Errorf("GET %s: %d, %d bytes", path, rec.Code, rec.Body.Len())
		}
	}
}
