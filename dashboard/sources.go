package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/storage"
)

// FitInputOf reads the FitInput a Fit workflow was started (or continued
// as new) with: the first payload of its first event. dc decodes it (nil:
// the default data converter; a codec's when payloads are encrypted).
func FitInputOf(ctx context.Context, cl client.Client, dc converter.DataConverter, id string) (api.FitInput, error) {
	var in api.FitInput
	if dc == nil {
		dc = converter.GetDefaultDataConverter()
	}
	it := cl.GetWorkflowHistory(ctx, id, "", false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	if !it.HasNext() {
		return in, fmt.Errorf("workflow %s has no history", id)
	}
	ev, err := it.Next()
	if err != nil {
		var nf *serviceerror.NotFound
		if errors.As(err, &nf) {
			return in, fmt.Errorf("workflow %s not found: %w", id, err)
		}
		return in, fmt.Errorf("workflow %s: %w", id, err)
	}
	attrs := ev.GetWorkflowExecutionStartedEventAttributes()
	if attrs == nil || attrs.GetWorkflowType().GetName() != api.WorkflowType {
		return in, fmt.Errorf("workflow %s is not a %s workflow", id, api.WorkflowType)
	}
	if err := dc.FromPayloads(attrs.GetInput(), &in); err != nil {
		return in, fmt.Errorf("workflow %s: its input: %w", id, err)
	}
	return in, nil
}

// LoadReports reads every report of run name from the storage at store
// (Ray's metrics_dataframe): the lines of its metrics.jsonl.
func LoadReports(ctx context.Context, store, name string) ([]api.ReportRecord, error) {
	b, err := storage.Open(ctx, store)
	if err != nil {
		return nil, err
	}
	var recs []api.ReportRecord
	if err := ScanReports(ctx, storage.NewRun(b, name), 0, func(r api.ReportRecord) { recs = append(recs, r) }); err != nil {
		return nil, fmt.Errorf("metrics of run %q in %s: %w", name, store, err)
	}
	return recs, nil
}

// ScanReports calls fn with each report of run whose index is from on,
// in index order; the lines before are skipped without being decoded.
func ScanReports(ctx context.Context, run *storage.Run, from int, fn func(api.ReportRecord)) error {
	return run.ScanMetrics(ctx, func(i int, line json.RawMessage) error {
		if i < from {
			return nil
		}
		var r api.ReportRecord
		if err := json.Unmarshal(line, &r); err != nil {
			return fmt.Errorf("report %d: %w", i, err)
		}
		fn(r)
		return nil
	})
}

// MetricNames lists every metric any report has, in name order.
func MetricNames(recs []api.ReportRecord) []string {
	keys := map[string]bool{}
	for _, r := range recs {
		for k := range r.Metrics {
			keys[k] = true
		}
	}
	names := make([]string, 0, len(keys))
	for k := range keys {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}
