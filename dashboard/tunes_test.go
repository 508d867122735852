package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/app"
	"github.com/tempotrain/tempotrain/dashboard/tunetest"
)

// readJSONL reads a trial's metrics.jsonl as the file holds it, a
// report a line.
func readJSONL(t *testing.T, path string) []api.ReportRecord {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	out := make([]api.ReportRecord, len(lines))
	for i, l := range lines {
		if err := json.Unmarshal([]byte(l), &out[i]); err != nil {
			t.Fatalf("%s line %d: %v", path, i+1, err)
		}
	}
	return out
}

// TestAPITune runs a real search of 5 trials on a dev server and its
// worker, and reads it through the JSON API: GET /api/tunes lists it, GET
// /api/tunes/{id} answers its trials (the Tune's own result) with each
// trial's curve of valid_loss equal to the trial's metrics.jsonl, the
// stopped trials' curves shorter than the completed ones'; the runs list
// names each trial's search; the search page is served.
func TestAPITune(t *testing.T) {
	tq, rq := "tq-"+t.Name(), "rq-"+t.Name()
	local, err := app.StartLocal(app.LocalOptions{
		Worker: &app.WorkerOptions{Workflows: true, TaskQueue: tq, RankSlots: 2, RankQueue: rq},
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer local.Stop()
	cl := local.Client
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	store := t.TempDir()
	tu, err := tunetest.Tuner(cl, "dash-tune", store, tq, rq)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	s, err := tu.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h := New(Options{Client: cl, WebUI: "http://ui.example"}).Handler()
	// While it runs, the route answers the Tune's Query.
	var live TuneView
	get(t, h, "/api/tunes/"+s.WorkflowID, &live)
	if live.WorkflowStatus != "running" || live.Result == nil || live.Result.Metric != "valid_loss" {
		t.Errorf("the search while it runs: %s, %+v", live.WorkflowStatus, live.Result)
	}
	res, err := s.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the search took %v", time.Since(t0).Round(time.Millisecond))

	var v TuneView
	size, took := get(t, h, "/api/tunes/"+s.WorkflowID, &v)
	t.Logf("GET /api/tunes/%s: %d bytes in %v", s.WorkflowID, size, took.Round(time.Millisecond))
	if v.WorkflowStatus != "completed" || v.Result == nil || !v.Result.Done || len(v.Result.Trials) != tunetest.Trials || len(v.Curves) != tunetest.Trials {
		t.Fatalf("the search: %s, %+v, %d curves", v.WorkflowStatus, v.Result, len(v.Curves))
	}
	if v.Result.Best == nil || v.Result.Best.Name != res.Best.Name || v.Result.Trials[0].Name != res.Best.Name {
		t.Errorf("best %+v, the search's result says %s", v.Result.Best, res.Best.Name)
	}
	if v.WebUI != "http://ui.example/namespaces/default/workflows/"+s.WorkflowID+"/"+v.RunID+"/history" {
		t.Errorf("the Web UI link: %q", v.WebUI)
	}
	stopped, completed := 0, 0
	shortest, longest := 1<<30, 0
	for k, tr := range v.Result.Trials {
		c := v.Curves[k]
		recs := readJSONL(t, filepath.Join(store, "dash-tune", tr.Name, "metrics.jsonl"))
		t.Logf("%s %-9s lr %s: %d reports, best %v at epoch %g; drawn %v", tr.Name, tr.Status, tr.Params["config.lr"], len(recs), *tr.Metric, tr.BestEpoch, c.Value)
		if c.Trial != tr.Name || c.WorkflowID != s.WorkflowID+"-"+tr.Name || c.Status != tr.Status {
			t.Errorf("curve %d: %s %s %s, trial %s %s", k, c.Trial, c.WorkflowID, c.Status, tr.Name, tr.Status)
		}
		if len(recs) != tr.Iterations || len(c.Value) != len(recs) || len(c.X) != len(recs) || len(c.Index) != len(recs) {
			t.Fatalf("%s: %d reports in metrics.jsonl, %d iterations, %d points drawn", tr.Name, len(recs), tr.Iterations, len(c.Value))
		}
		best, at := recs[0].Metrics["valid_loss"], recs[0].Metrics["epoch"]
		for i, r := range recs {
			if c.Index[i] != r.Index || c.X[i] != r.Metrics["epoch"] || c.Value[i] != r.Metrics["valid_loss"] {
				t.Errorf("%s: point %d: report %d, epoch %g, %g; metrics.jsonl: report %d, epoch %g, %g", tr.Name, i, c.Index[i], c.X[i], c.Value[i], r.Index, r.Metrics["epoch"], r.Metrics["valid_loss"])
			}
			if r.Metrics["valid_loss"] < best {
				best, at = r.Metrics["valid_loss"], r.Metrics["epoch"]
			}
		}
		if *tr.Metric != best || tr.BestEpoch != at || tr.Epochs != recs[len(recs)-1].Metrics["epoch"] {
			t.Errorf("%s: best %g at %g, %g epochs; metrics.jsonl: %g at %g", tr.Name, *tr.Metric, tr.BestEpoch, tr.Epochs, best, at)
		}
		switch tr.Status {
		case api.TrialStopped:
			stopped++
			shortest = min(shortest, len(c.Value))
		case api.TrialCompleted:
			completed++
			longest = max(longest, len(c.Value))
		default:
			t.Errorf("%s: %s %s", tr.Name, tr.Status, tr.Error)
		}
	}
	if stopped == 0 || completed == 0 || shortest >= longest || longest != tunetest.Epochs {
		t.Errorf("%d trials stopped (the shortest curve %d points), %d completed (the longest %d): want stopped curves shorter than 6 epochs", stopped, shortest, completed, longest)
	}

	// The searches list, and the trials in the runs list, with their
	// search's name.
	deadline := time.Now().Add(30 * time.Second)
	for {
		var tunes TunesPage
		var runs RunsPage
		get(t, h, "/api/tunes", &tunes)
		get(t, h, "/api/runs?query="+url.QueryEscape(fmt.Sprintf("%s = 'dash-tune'", api.SATune)), &runs)
		ok := len(tunes.Tunes) == 1 && tunes.Tunes[0].WorkflowID == s.WorkflowID && tunes.Tunes[0].Tune == "dash-tune" && len(runs.Runs) == tunetest.Trials
		for _, r := range runs.Runs {
			ok = ok && r.Tune == "dash-tune" && strings.HasPrefix(r.WorkflowID, s.WorkflowID+"-")
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the searches %+v; the runs of the search %+v", tunes.Tunes, runs.Runs)
		}
		time.Sleep(300 * time.Millisecond)
	}
	// A trial's run page links its search.
	var rv RunView
	get(t, h, "/api/runs/"+v.Curves[0].WorkflowID, &rv)
	if rv.TuneWorkflowID != s.WorkflowID {
		t.Errorf("trial %s's run names the search %q, want %s", v.Curves[0].WorkflowID, rv.TuneWorkflowID, s.WorkflowID)
	}
	for path, want := range map[string]int{"/tunes/" + s.WorkflowID: 200, "/static/tune.js": 200, "/api/tunes/" + s.WorkflowID + "-" + api.TrialName(0): 404, "/api/tunes/nope": 404} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		if rec.Code != want {
			t.Errorf("GET %s: %d, want %d: %s", path, rec.Code, want, rec.Body)
		}
	}
}

// TestCurveOf: by epoch where the reports have one, by report number
// (from 1) where not; reports without the metric left out.
func TestCurveOf(t *testing.T) {
	recs := []api.ReportRecord{
		{Index: 0, Metrics: api.Metrics{"loss": 3, "epoch": 1}},
		{Index: 1, Metrics: api.Metrics{"acc": 0.5, "epoch": 1.5}},
		{Index: 2, Metrics: api.Metrics{"loss": 2, "epoch": 2}},
		{Index: 3, Metrics: api.Metrics{"loss": 1}},
	}
	idx, x, y := CurveOf(recs, "loss")
	if fmt.Sprint(idx, x, y) != "[0 2 3] [1 2 4] [3 2 1]" {
		t.Errorf("CurveOf: %v %v %v", idx, x, y)
	}
	if idx, x, y := CurveOf(recs, "nope"); idx == nil || len(idx)+len(x)+len(y) != 0 {
		t.Errorf("a metric nobody reports: %v %v %v, want empty (not null in JSON)", idx, x, y)
	}
	for path, want := range map[string]string{"/runs/s/trial_0001": "/runs/s", "s3://b/runs/s/trial_0001": "s3://b/runs/s"} {
		if store, name := TrialStorage(api.TrialResult{Name: "trial_0001", Path: path}); store != want || name != "trial_0001" {
			t.Errorf("TrialStorage(%s) = %s, %s", path, store, name)
		}
	}
	if q := TunesQuery("StartTime > '2026-01-01'"); q != "WorkflowType = 'Tune' AND (StartTime > '2026-01-01')" {
		t.Errorf("TunesQuery: %s", q)
	}
}
