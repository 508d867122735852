package dashboard

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/storage"
	"github.com/tempotrain/tempotrain/train"
	"github.com/tempotrain/tempotrain/workflows"
)

//go:embed static
var static embed.FS

// Defaults of Options.
const (
	DefaultMaxPoints = 2000
	DefaultRunsLimit = 200
	MaxRunsLimit     = 5000
	// DefaultLogTail is how much of a rank log's end a request without an
	// offset gets.
	DefaultLogTail = 256 << 10
	// cachedRuns bounds the runs whose reports the server keeps decoded.
	cachedRuns = 32
)

// Options configure a Server.
type Options struct {
	// Client reaches the Temporal server whose runs are shown.
	Client client.Client
	// Namespace of the runs, for the Web UI's links. Default "default".
	Namespace string
	// DataConverter decodes the runs' inputs (a codec's, when payloads
	// are encrypted). Default: the SDK's default data converter.
	DataConverter converter.DataConverter
	// WebUI is the Temporal Web UI's base URL ("http://localhost:8233"),
	// for the links to it; "" links nowhere.
	WebUI string
	// MaxPoints is how many points of a curve the metrics route returns
	// unless asked otherwise. Default DefaultMaxPoints.
	MaxPoints int
}

// Server is the dashboard: its pages and its JSON API (Handler).
type Server struct {
	o Options

	mu       sync.Mutex
	runs     map[string]*runCache // by workflow ID
	backends map[string]storage.Backend
}

// runCache is what the server keeps of a run between requests: its input
// (where it stores), and its reports decoded so far.
type runCache struct {
	in   api.FitInput
	name string
	run  *storage.Run
	used time.Time

	mu   sync.Mutex // held while reports are read into cols
	cols *columns
}

// New returns a dashboard over o's Temporal server.
func New(o Options) *Server {
	if o.Namespace == "" {
		o.Namespace = "default"
	}
	if o.DataConverter == nil {
		o.DataConverter = converter.GetDefaultDataConverter()
	}
	if o.MaxPoints <= 0 {
		o.MaxPoints = DefaultMaxPoints
	}
	return &Server{o: o, runs: map[string]*runCache{}, backends: map[string]storage.Backend{}}
}

// Handler serves the pages, the static files and the JSON API
// (docs/dashboard.md).
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	sub, _ := fs.Sub(static, "static")
	files := http.FileServerFS(sub)
	page := func(name string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			b, err := fs.ReadFile(sub, name)
			if err != nil {
				writeError(w, err)
				return
			}
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			w.Header().Set("Cache-Control", "no-cache")
			_, _ = w.Write(b)
		}
	}
	mux.HandleFunc("GET /{$}", page("index.html"))
	mux.HandleFunc("GET /runs/{id}", page("run.html"))
	mux.HandleFunc("GET /tunes/{id}", page("tune.html"))
	mux.Handle("GET /static/", http.StripPrefix("/static", files))
	mux.HandleFunc("GET /api/runs", s.apiRuns)
	mux.HandleFunc("GET /api/runs/{id}", s.apiRun)
	mux.HandleFunc("GET /api/runs/{id}/metrics", s.apiMetrics)
	mux.HandleFunc("GET /api/runs/{id}/logs", s.apiLogs)
	mux.HandleFunc("GET /api/runs/{id}/logs/{attempt}/{rank}", s.apiLog)
	mux.HandleFunc("GET /api/tunes", s.apiTunes)
	mux.HandleFunc("GET /api/tunes/{id}", s.apiTune)
	return mux
}

// httpError is an error with the HTTP status it answers.
type httpError struct {
	code int
	err  error
}

func (e *httpError) Error() string { return e.err.Error() }
func (e *httpError) Unwrap() error { return e.err }

func badRequest(format string, args ...any) error {
	return &httpError{http.StatusBadRequest, fmt.Errorf(format, args...)}
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, err error) {
	code := http.StatusBadGateway // Temporal or storage failed
	var he *httpError
	var nf *serviceerror.NotFound
	switch {
	case errors.As(err, &he):
		code = he.code
	case errors.As(err, &nf), errors.Is(err, storage.ErrNotFound):
		code = http.StatusNotFound
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": err.Error()})
}

// intParam reads an integer query parameter, def when absent.
func intParam(r *http.Request, name string, def, lo, hi int) (int, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		return 0, badRequest("%s=%q: want an integer from %d to %d", name, v, lo, hi)
	}
	return n, nil
}

// RunsPage is the answer of GET /api/runs.
type RunsPage struct {
	Query string       `json:"query"`
	Runs  []RunSummary `json:"runs"`
	// WebUI is the Web UI's list of the same runs; "" without a Web UI.
	WebUI string `json:"web_ui,omitempty"`
	// WebUIWorkflows is the Web UI's page of workflows: a run's page is
	// {web_ui_workflows}/{workflow_id}/{run_id}/history.
	WebUIWorkflows string `json:"web_ui_workflows,omitempty"`
}

func (s *Server) apiRuns(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, err := intParam(r, "limit", DefaultRunsLimit, 1, MaxRunsLimit)
	if err != nil {
		writeError(w, err)
		return
	}
	query, err := RunsQuery(q.Get("func"), q.Get("status"), q.Get("query"))
	if err != nil {
		writeError(w, badRequest("%w", err))
		return
	}
	runs, ok := s.list(w, r, query, limit)
	if !ok {
		return
	}
	page := RunsPage{Query: query, Runs: runs, WebUIWorkflows: s.webUIWorkflows()}
	if page.WebUIWorkflows != "" {
		page.WebUI = page.WebUIWorkflows + "?query=" + url.QueryEscape(query)
	}
	writeJSON(w, page)
}

// list answers the workflows of a visibility query (ListRuns), or writes
// why not (400 for a query Temporal refuses) and returns false.
func (s *Server) list(w http.ResponseWriter, r *http.Request, query string, limit int) ([]RunSummary, bool) {
	runs, err := ListRuns(r.Context(), s.o.Client, query, limit)
	if err != nil {
		var ia *serviceerror.InvalidArgument
		if errors.As(err, &ia) {
			err = &httpError{http.StatusBadRequest, err}
		}
		writeError(w, err)
		return nil, false
	}
	if runs == nil {
		runs = []RunSummary{}
	}
	return runs, true
}

// webUIWorkflows is the Web UI's page of the namespace's workflows; ""
// without a Web UI.
func (s *Server) webUIWorkflows() string {
	if s.o.WebUI == "" {
		return ""
	}
	return fmt.Sprintf("%s/namespaces/%s/workflows", s.o.WebUI, url.PathEscape(s.o.Namespace))
}

// cached returns the run of workflow id, reading its input the first time.
func (s *Server) cached(ctx context.Context, id string) (*runCache, error) {
	s.mu.Lock()
	rc := s.runs[id]
	if rc != nil {
		rc.used = time.Now()
	}
	s.mu.Unlock()
	if rc != nil {
		return rc, nil
	}
	in, err := FitInputOf(ctx, s.o.Client, s.o.DataConverter, id)
	if err != nil {
		return nil, err
	}
	name := in.Run.Name
	if name == "" {
		name = id // Fit names a run without a name after its workflow
	}
	rc = &runCache{in: in, name: name, used: time.Now(), cols: newColumns()}
	if in.Run.StoragePath != "" {
		b, err := s.backend(ctx, in.Run.StoragePath)
		if err != nil {
			return nil, fmt.Errorf("run %s: storage %s: %w", id, in.Run.StoragePath, err)
		}
		rc.run = storage.NewRun(b, name)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if old := s.runs[id]; old != nil {
		return old, nil
	}
	if len(s.runs) >= cachedRuns {
		var oldest string
		for k, v := range s.runs {
			if oldest == "" || v.used.Before(s.runs[oldest].used) {
				oldest = k
			}
		}
		delete(s.runs, oldest)
	}
	s.runs[id] = rc
	return rc, nil
}

func (s *Server) backend(ctx context.Context, path string) (storage.Backend, error) {
	s.mu.Lock()
	b := s.backends[path]
	s.mu.Unlock()
	if b != nil {
		return b, nil
	}
	b, err := storage.Open(ctx, path)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.backends[path] = b
	s.mu.Unlock()
	return b, nil
}

// RunView is the answer of GET /api/runs/{id}: the run's input, its
// status (the status Query with its ranks' heartbeats: `starter status
// -json`), its run.json, and its checkpoints with their scores.
type RunView struct {
	WorkflowID string `json:"workflow_id"`
	// RunID is the current execution's.
	RunID string `json:"run_id"`
	Name  string `json:"name"`
	// WorkflowStatus is the workflow's (running, completed, failed,
	// canceled, terminated, continued_as_new, timed_out).
	WorkflowStatus string       `json:"workflow_status"`
	Start          time.Time    `json:"start"`
	Close          *time.Time   `json:"close,omitempty"`
	Input          api.FitInput `json:"input"`
	// Status is the status Query's answer while the workflow runs; nil
	// once it closed, or when the Query failed (no worker runs the
	// workflow's code, say: StatusError says why).
	Status      *api.Status `json:"status,omitempty"`
	StatusError string      `json:"status_error,omitempty"`
	// Ranks are Status.Ranks with the age of their last heartbeat.
	Ranks []RankView `json:"ranks"`
	// State is run.json; nil before the run first recorded it.
	State *api.RunState `json:"state,omitempty"`
	// History is the attempts: the status Query's, else run.json's.
	History []api.AttemptRecord `json:"history"`
	// Checkpoints are the run's kept checkpoints (run.json), by seq.
	Checkpoints []CheckpointView `json:"checkpoints"`
	// Storage is the run's directory in its storage.
	Storage string `json:"storage,omitempty"`
	// WebUI is the workflow's page in the Temporal Web UI.
	WebUI string `json:"web_ui,omitempty"`
	// TuneWorkflowID is the search's, when the run is a trial of one (its
	// parent workflow, and it carries TempotrainTune).
	TuneWorkflowID string    `json:"tune_workflow_id,omitempty"`
	Now            time.Time `json:"now"`
}

// RankView is a rank's status and how long ago it last heartbeat.
type RankView struct {
	api.RankStatus
	HeartbeatAgeS *float64 `json:"heartbeat_age_s"`
}

// CheckpointView is a checkpoint with its score (the run's score
// attribute among its metrics) and whether it is the best one.
type CheckpointView struct {
	api.Checkpoint
	Score *float64 `json:"score,omitempty"`
	Best  bool     `json:"best,omitempty"`
}

func (s *Server) apiRun(w http.ResponseWriter, r *http.Request) {
	v, err := s.runView(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, v)
}

func (s *Server) runView(ctx context.Context, id string) (*RunView, error) {
	rc, err := s.cached(ctx, id)
	if err != nil {
		return nil, err
	}
	desc, err := s.o.Client.DescribeWorkflowExecution(ctx, id, "")
	if err != nil {
		return nil, fmt.Errorf("workflow %s: %w", id, err)
	}
	info := desc.GetWorkflowExecutionInfo()
	v := &RunView{WorkflowID: id, RunID: info.GetExecution().GetRunId(), Name: rc.name, Input: rc.in, Now: time.Now(),
		WorkflowStatus: lowerEnum(info.GetStatus().String(), "WORKFLOW_EXECUTION_STATUS_"), Start: info.GetStartTime().AsTime(),
		Ranks: []RankView{}, History: []api.AttemptRecord{}, Checkpoints: []CheckpointView{}}
	if ct := info.GetCloseTime(); ct != nil {
		t := ct.AsTime()
		v.Close = &t
	}
	if p := info.GetParentExecution().GetWorkflowId(); p != "" && info.GetSearchAttributes().GetIndexedFields()[api.SATune] != nil {
		v.TuneWorkflowID = p
	}
	if s.o.WebUI != "" {
		v.WebUI = fmt.Sprintf("%s/namespaces/%s/workflows/%s/%s/history", s.o.WebUI, url.PathEscape(s.o.Namespace), url.PathEscape(id), url.PathEscape(v.RunID))
	}
	// A closed workflow is asked nothing: a Query of it waits for a worker
	// to replay its history, for as long as none polls; its run.json says
	// how it ended.
	var st *api.Status
	if v.WorkflowStatus == "running" {
		qctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		st, err = train.StatusOf(qctx, s.o.Client, id)
		cancel()
		if err != nil {
			v.StatusError = err.Error()
		}
	}
	if st != nil {
		v.Status = st
		for _, rk := range st.Ranks {
			rv := RankView{RankStatus: rk}
			if !rk.LastHeartbeat.IsZero() {
				age := v.Now.Sub(rk.LastHeartbeat).Seconds()
				rv.HeartbeatAgeS = &age
			}
			v.Ranks = append(v.Ranks, rv)
		}
		v.History = st.History
	}
	if rc.run != nil {
		v.Storage = rc.run.URI()
		var state api.RunState
		found, err := rc.run.LoadState(ctx, &state)
		if err != nil {
			return nil, fmt.Errorf("run %s: %w", id, err)
		}
		if found {
			v.State = &state
			if len(v.History) == 0 {
				v.History = state.History
			}
			v.Checkpoints = checkpointViews(state.Checkpoints, rc.in.Run.Checkpoint)
		}
	}
	if v.History == nil {
		v.History = []api.AttemptRecord{}
	}
	return v, nil
}

// checkpointViews scores ckpts and marks the best (workflows.BestFirst's
// first), when the run ranks its checkpoints by an attribute.
func checkpointViews(ckpts []api.Checkpoint, cfg api.CheckpointConfig) []CheckpointView {
	out := make([]CheckpointView, 0, len(ckpts))
	best := -1
	if cfg.ScoreAttribute != "" && len(ckpts) > 0 {
		if b := workflows.BestFirst(ckpts, cfg)[0]; !math.IsNaN(b.Metrics[cfg.ScoreAttribute]) {
			if _, ok := b.Metrics[cfg.ScoreAttribute]; ok {
				best = b.Seq
			}
		}
	}
	for _, c := range ckpts {
		cv := CheckpointView{Checkpoint: c, Best: c.Seq == best}
		if v, ok := c.Metrics[cfg.ScoreAttribute]; ok && !math.IsNaN(v) && !math.IsInf(v, 0) {
			cv.Score = &v
		}
		out = append(out, cv)
	}
	return out
}

func lowerEnum(s, prefix string) string { return strings.ToLower(strings.TrimPrefix(s, prefix)) }

// MetricsView is the answer of GET /api/runs/{id}/metrics: every metric's
// curve over the report index, the restarts, and the world size over the
// reports.
type MetricsView struct {
	Run string `json:"run"`
	// Reports is how many reports the run has in its storage.
	Reports int `json:"reports"`
	// From, To: the range of report indexes asked.
	From int `json:"from"`
	To   int `json:"to"`
	// MaxPoints is the most points a series has; Downsampled says whether
	// a series had more in the range and was cut down to its extremes.
	MaxPoints   int       `json:"max_points"`
	Downsampled bool      `json:"downsampled"`
	Series      []Series  `json:"series"`
	Restarts    []Restart `json:"restarts"`
	// WorldSize: from each attempt's first report, its ranks.
	WorldSize Series `json:"world_size"`
	Elastic   bool   `json:"elastic"`
}

func (s *Server) apiMetrics(w http.ResponseWriter, r *http.Request) {
	maxPoints, err := intParam(r, "max_points", s.o.MaxPoints, 0, 1_000_000)
	if err == nil && maxPoints > 0 && maxPoints < 4 {
		err = badRequest("max_points=%d: want 0 (all) or at least 4", maxPoints)
	}
	var from, to int
	if err == nil {
		from, err = intParam(r, "from", 0, 0, math.MaxInt32)
	}
	if err == nil {
		to, err = intParam(r, "to", math.MaxInt32, 0, math.MaxInt32)
	}
	if err != nil {
		writeError(w, err)
		return
	}
	v, err := s.metrics(r.Context(), r.PathValue("id"), from, to, maxPoints)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, v)
}

func (s *Server) metrics(ctx context.Context, id string, from, to, maxPoints int) (*MetricsView, error) {
	rc, err := s.cached(ctx, id)
	if err != nil {
		return nil, err
	}
	v := &MetricsView{Run: rc.name, From: from, To: to, MaxPoints: maxPoints, Series: []Series{}, Restarts: []Restart{}, Elastic: rc.in.Scaling.Elastic()}
	if rc.run == nil {
		return v, nil
	}
	var state api.RunState
	if _, err := rc.run.LoadState(ctx, &state); err != nil {
		return nil, fmt.Errorf("run %s: %w", id, err)
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	// run.json counts the reports recorded: when it counts no more than
	// were decoded, the metrics are not read again.
	if state.Reports == 0 || state.Reports > len(rc.cols.attempt) {
		if err := ScanReports(ctx, rc.run, len(rc.cols.attempt), rc.cols.add); err != nil {
			return nil, fmt.Errorf("run %s: %w", id, err)
		}
	}
	cols := rc.cols
	v.Reports = len(cols.attempt)
	for _, name := range slices.Sorted(maps.Keys(cols.metrics)) {
		sr := cols.metrics[name].seriesOf(name, from, to, maxPoints)
		if len(sr.Index) < sr.Points {
			v.Downsampled = true
		}
		v.Series = append(v.Series, sr)
	}
	if r := restartsOf(state.History, cols.attempt); r != nil {
		v.Restarts = r
	}
	v.WorldSize = worldSizes(state.History, cols.attempt)
	return v, nil
}

// LogInfo is one rank log of GET /api/runs/{id}/logs.
type LogInfo struct {
	Attempt int   `json:"attempt"`
	Rank    int   `json:"rank"`
	Size    int64 `json:"size"`
	// URL is the log's route.
	URL string `json:"url"`
}

func (s *Server) apiLogs(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	rc, err := s.cached(r.Context(), id)
	if err != nil {
		writeError(w, err)
		return
	}
	out := []LogInfo{}
	if rc.run != nil {
		logs, err := rc.run.ListRankLogs(r.Context())
		if err != nil {
			writeError(w, err)
			return
		}
		for _, l := range logs {
			out = append(out, LogInfo{Attempt: l.Attempt, Rank: l.Rank, Size: l.Size,
				URL: fmt.Sprintf("/api/runs/%s/logs/%d/%d", url.PathEscape(id), l.Attempt, l.Rank)})
		}
	}
	writeJSON(w, out)
}

// apiLog answers a rank log's bytes from ?offset= on (default: its last
// DefaultLogTail bytes), as text; X-Log-Offset says where they start.
func (s *Server) apiLog(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	attempt, err1 := strconv.Atoi(r.PathValue("attempt"))
	rank, err2 := strconv.Atoi(r.PathValue("rank"))
	if err1 != nil || err2 != nil || attempt < 1 || rank < 0 {
		writeError(w, badRequest("log %s/%s: want an attempt from 1 and a rank from 0", r.PathValue("attempt"), r.PathValue("rank")))
		return
	}
	rc, err := s.cached(r.Context(), id)
	if err != nil {
		writeError(w, err)
		return
	}
	if rc.run == nil {
		writeError(w, &httpError{http.StatusNotFound, fmt.Errorf("run %s has no storage path", id)})
		return
	}
	offset := int64(-1)
	if v := r.URL.Query().Get("offset"); v != "" {
		if offset, err = strconv.ParseInt(v, 10, 64); err != nil || offset < 0 {
			writeError(w, badRequest("offset=%q: want a byte offset from 0", v))
			return
		}
	}
	if offset < 0 { // the tail
		logs, err := rc.run.ListRankLogs(r.Context())
		if err != nil {
			writeError(w, err)
			return
		}
		offset = 0
		for _, l := range logs {
			if l.Attempt == attempt && l.Rank == rank {
				offset = max(0, l.Size-DefaultLogTail)
			}
		}
	}
	data, err := rc.run.ReadRankLog(r.Context(), attempt, rank, offset)
	if err != nil {
		writeError(w, fmt.Errorf("run %s: log of attempt %d, rank %d: %w", id, attempt, rank, err))
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Log-Offset", strconv.FormatInt(offset, 10))
	_, _ = w.Write(data)
}
