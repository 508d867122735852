package dashboard

import (
	"context"
	"fmt"
	"strings"
	"time"

	"go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/tempotrain/tempotrain/api"
)

// RunsQuery builds the visibility query of a runs list: Fit workflows,
// of training function fn and in state status when given ("" for any),
// ANDed with a query of the caller's own (extra).
func RunsQuery(fn, status, extra string) (string, error) {
	parts := []string{fmt.Sprintf("WorkflowType = '%s'", api.WorkflowType)}
	if fn != "" {
		parts = append(parts, fmt.Sprintf("%s = '%s'", api.SAFunc, quoteless(fn)))
	}
	if status != "" {
		switch api.RunStatus(status) {
		case api.StatusRunning, api.StatusSucceeded, api.StatusFailed, api.StatusCancelled, api.StatusStopped:
		default:
			return "", fmt.Errorf("status %q: want running, succeeded, failed, cancelled or stopped", status)
		}
		parts = append(parts, fmt.Sprintf("%s = '%s'", api.SAStatus, status))
	}
	if extra != "" {
		parts = append(parts, "("+extra+")")
	}
	return strings.Join(parts, " AND "), nil
}

func quoteless(s string) string { return strings.ReplaceAll(s, "'", "") }

// RunSummary is one run of a runs list: its workflow and the search
// attributes its Fit upserted. Attempt, WorldSize and BestScore are nil
// when the run has not set them (yet).
type RunSummary struct {
	WorkflowID string `json:"workflow_id"`
	RunID      string `json:"run_id"`
	// Name is the run's name (TempotrainRun), else its workflow ID.
	Name string `json:"name"`
	Func string `json:"func"`
	// Tune is TempotrainTune: the search a trial belongs to, or a Tune
	// search's own name.
	Tune string `json:"tune,omitempty"`
	// Status is TempotrainStatus, else the workflow's own status in lower
	// case (running, completed, failed, terminated, ...).
	Status    string     `json:"status"`
	Attempt   *int       `json:"attempt"`
	WorldSize *int       `json:"world_size"`
	BestScore *float64   `json:"best_score"`
	Start     time.Time  `json:"start"`
	Close     *time.Time `json:"close,omitempty"`
	// DurationS is the run's time so far, or until it closed, in seconds.
	DurationS float64 `json:"duration_s"`
}

// ListRuns lists at most limit runs of a visibility query, newest first
// (RunsQuery builds one).
func ListRuns(ctx context.Context, cl client.Client, query string, limit int) ([]RunSummary, error) {
	var out []RunSummary
	var token []byte
	now := time.Now()
	for len(out) < limit {
		resp, err := cl.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: query, NextPageToken: token, PageSize: int32(min(limit-len(out), 1000))})
		if err != nil {
			return out, fmt.Errorf("list runs (%s): %w", query, err)
		}
		for _, e := range resp.GetExecutions() {
			if len(out) == limit {
				break
			}
			out = append(out, summaryOf(e, now))
		}
		if token = resp.GetNextPageToken(); len(token) == 0 {
			break
		}
	}
	return out, nil
}

func summaryOf(e *workflow.WorkflowExecutionInfo, now time.Time) RunSummary {
	sa := e.GetSearchAttributes().GetIndexedFields()
	dc := converter.GetDefaultDataConverter()
	str := func(name string) string {
		var s string
		if p := sa[name]; p != nil {
			_ = dc.FromPayload(p, &s)
		}
		return s
	}
	integer := func(name string) *int {
		var v int
		if p := sa[name]; p != nil && dc.FromPayload(p, &v) == nil {
			return &v
		}
		return nil
	}
	s := RunSummary{
		WorkflowID: e.GetExecution().GetWorkflowId(), RunID: e.GetExecution().GetRunId(),
		Name: str(api.SARun), Func: str(api.SAFunc), Tune: str(api.SATune), Status: str(api.SAStatus),
		Attempt: integer(api.SAAttempt), WorldSize: integer(api.SAWorldSize),
		Start: e.GetStartTime().AsTime(),
	}
	var best float64
	if p := sa[api.SABestScore]; p != nil && dc.FromPayload(p, &best) == nil {
		s.BestScore = &best
	}
	if s.Status == "" {
		s.Status = strings.ToLower(strings.TrimPrefix(e.GetStatus().String(), "WORKFLOW_EXECUTION_STATUS_"))
	}
	if s.Name == "" {
		s.Name = s.WorkflowID
	}
	end := now
	if ct := e.GetCloseTime(); ct != nil {
		t := ct.AsTime()
		s.Close, end = &t, t
	}
	s.DurationS = end.Sub(s.Start).Seconds()
	return s
}
