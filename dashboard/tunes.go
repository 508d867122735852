package dashboard

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/storage"
	"github.com/tempotrain/tempotrain/train"
)

// TunesQuery is the visibility query of the searches list: Tune
// workflows, ANDed with a query of the caller's own (extra).
func TunesQuery(extra string) string {
	q := fmt.Sprintf("WorkflowType = '%s'", api.TuneWorkflowType)
	if extra != "" {
		q += " AND (" + extra + ")"
	}
	return q
}

// TunesPage is the answer of GET /api/tunes: the Tune searches, newest
// first (Name is the search's TempotrainTune, else its workflow ID).
type TunesPage struct {
	Query string       `json:"query"`
	Tunes []RunSummary `json:"tunes"`
	// WebUIWorkflows: as RunsPage's.
	WebUIWorkflows string `json:"web_ui_workflows,omitempty"`
}

func (s *Server) apiTunes(w http.ResponseWriter, r *http.Request) {
	limit, err := intParam(r, "limit", DefaultRunsLimit, 1, MaxRunsLimit)
	if err != nil {
		writeError(w, err)
		return
	}
	query := TunesQuery(r.URL.Query().Get("query"))
	tunes, ok := s.list(w, r, query, limit)
	if !ok {
		return
	}
	page := TunesPage{Query: query, Tunes: tunes, WebUIWorkflows: s.webUIWorkflows()}
	writeJSON(w, page)
}

// TuneView is the answer of GET /api/tunes/{id}: the search as it stands
// (the Tune's Query while it runs, its result once it ended: `starter tune
// results -json`) and each trial's curve of the search's metric, read
// from the trial's metrics.jsonl.
type TuneView struct {
	WorkflowID     string          `json:"workflow_id"`
	RunID          string          `json:"run_id"`
	WorkflowStatus string          `json:"workflow_status"`
	Start          time.Time       `json:"start"`
	Close          *time.Time      `json:"close,omitempty"`
	Result         *api.TuneResult `json:"result"`
	// Curves are the trials' curves of Result.Metric, in Result.Trials'
	// order (best first); a trial without reports has an empty one.
	Curves []TrialCurve `json:"curves"`
	// WebUI is the search's page in the Temporal Web UI; WebUIWorkflows
	// as RunsPage's, for the trials' links.
	WebUI          string    `json:"web_ui,omitempty"`
	WebUIWorkflows string    `json:"web_ui_workflows,omitempty"`
	Now            time.Time `json:"now"`
}

// TrialCurve is a trial's curve of a metric: Value[k] was reported with
// "epoch" X[k] (its report's number, from 1, when it reports no epoch) by
// report Index[k] of its run.
type TrialCurve struct {
	Trial      string    `json:"trial"`
	WorkflowID string    `json:"workflow_id"`
	Status     string    `json:"status"`
	Index      []int     `json:"index"`
	X          []float64 `json:"x"`
	Value      []float64 `json:"value"`
}

// CurveOf is metric's curve over recs: by "epoch", by report number
// (from 1) in reports without one; reports without the metric are left
// out. `starter tune plot` draws the same.
func CurveOf(recs []api.ReportRecord, metric string) (index []int, x, y []float64) {
	index, x, y = []int{}, []float64{}, []float64{}
	for i, r := range recs {
		v, ok := r.Metrics[metric]
		if !ok {
			continue
		}
		e, ok := r.Metrics["epoch"]
		if !ok {
			e = float64(i + 1)
		}
		index, x, y = append(index, r.Index), append(x, e), append(y, v)
	}
	return index, x, y
}

// TrialStorage splits a trial's run directory (TrialResult.Path) into its
// storage and its run's name.
func TrialStorage(tr api.TrialResult) (store, name string) {
	return strings.TrimSuffix(tr.Path, "/"+tr.Name), tr.Name
}

func (s *Server) apiTune(w http.ResponseWriter, r *http.Request) {
	v, err := s.tuneView(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, v)
}

func (s *Server) tuneView(ctx context.Context, id string) (*TuneView, error) {
	desc, err := s.o.Client.DescribeWorkflowExecution(ctx, id, "")
	if err != nil {
		return nil, fmt.Errorf("workflow %s: %w", id, err)
	}
	info := desc.GetWorkflowExecutionInfo()
	if info.GetType().GetName() != api.TuneWorkflowType {
		return nil, &httpError{http.StatusNotFound, fmt.Errorf("workflow %s is a %s workflow, not a %s search", id, info.GetType().GetName(), api.TuneWorkflowType)}
	}
	v := &TuneView{WorkflowID: id, RunID: info.GetExecution().GetRunId(), Now: time.Now(), Curves: []TrialCurve{},
		WorkflowStatus: lowerEnum(info.GetStatus().String(), "WORKFLOW_EXECUTION_STATUS_"), Start: info.GetStartTime().AsTime()}
	if ct := info.GetCloseTime(); ct != nil {
		t := ct.AsTime()
		v.Close = &t
	}
	if v.WebUIWorkflows = s.webUIWorkflows(); v.WebUIWorkflows != "" {
		v.WebUI = fmt.Sprintf("%s/%s/%s/history", v.WebUIWorkflows, url.PathEscape(id), url.PathEscape(v.RunID))
	}
	// A Query waits for a worker to answer: bounded, as the run page's.
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	res, err := train.GetTuneResult(qctx, s.o.Client, id)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("search %s: %w", id, err)
	}
	v.Result = res
	for _, tr := range res.Trials {
		c := TrialCurve{Trial: tr.Name, WorkflowID: tr.WorkflowID, Status: tr.Status}
		if tr.Iterations > 0 && tr.Path != "" {
			store, name := TrialStorage(tr)
			b, err := s.backend(ctx, store)
			if err != nil {
				return nil, fmt.Errorf("search %s: trial %s: storage %s: %w", id, tr.Name, store, err)
			}
			var recs []api.ReportRecord
			err = ScanReports(ctx, storage.NewRun(b, name), 0, func(r api.ReportRecord) { recs = append(recs, r) })
			if err != nil && !errors.Is(err, storage.ErrNotFound) {
				return nil, fmt.Errorf("search %s: trial %s: %w", id, tr.Name, err)
			}
			c.Index, c.X, c.Value = CurveOf(recs, res.Metric)
		} else {
			c.Index, c.X, c.Value = []int{}, []float64{}, []float64{}
		}
		v.Curves = append(v.Curves, c)
	}
	return v, nil
}
