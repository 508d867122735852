package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/data"
	"github.com/tempotrain/tempotrain/storage"
)

// LoadRun proves the storage path is usable (a marker is written and
// deleted, as Ray does) and reads the run's run.json if the run exists. An
// unusable path fails non-retryably with ErrTypeStorage before any rank
// starts.
func (a *Activities) LoadRun(ctx context.Context, in api.LoadRunInput) (api.LoadRunOutput, error) {
	defer keepAlive(ctx)()
	if err := storage.Check(ctx, in.StoragePath); err != nil {
		if errors.Is(err, storage.ErrMisconfigured) {
			return api.LoadRunOutput{}, temporal.NewNonRetryableApplicationError(
				fmt.Sprintf("run.storage_path = %q: %v", in.StoragePath, err), api.ErrStorage.String(), err)
		}
		return api.LoadRunOutput{}, fmt.Errorf("check storage %q: %w", in.StoragePath, err)
	}
	var resolved string
	if in.ResumeFrom == api.ResumePreviousBest {
		var err error
		if resolved, err = a.resolvePreviousBest(ctx, in.StoragePath, in.Schedule); err != nil {
			return api.LoadRunOutput{}, err
		}
		in.ResumeFrom = resolved
	}
	if strings.HasSuffix(in.ResumeFrom, "/"+api.BestFile) {
		// A search's best.json: its best checkpoint.
		b, err := storage.ReadURI(ctx, in.ResumeFrom)
		if err == nil {
			var p api.Pointer
			if p, err = api.ParsePointer(b); err == nil {
				in.ResumeFrom = p.Checkpoint
			}
		}
		if err != nil {
			return api.LoadRunOutput{}, temporal.NewNonRetryableApplicationError(
				fmt.Sprintf("run.resume_from = %q: %v", in.ResumeFrom, err), api.ErrStorage.String(), err)
		}
	}
	if in.ResumeFrom != "" {
		if _, err := storage.OpenCheckpoint(ctx, in.ResumeFrom); err != nil {
			if errors.Is(err, storage.ErrNotFound) || errors.Is(err, storage.ErrCorrupt) || errors.Is(err, storage.ErrMisconfigured) {
				return api.LoadRunOutput{}, temporal.NewNonRetryableApplicationError(
					fmt.Sprintf("run.resume_from = %q: not a committed checkpoint: %v", in.ResumeFrom, err), api.ErrStorage.String(), err)
			}
			return api.LoadRunOutput{}, err
		}
	}
	if err := checkDatasets(ctx, in.Datasets); err != nil {
		return api.LoadRunOutput{}, err
	}
	run, err := a.run(ctx, in.StoragePath, in.RunName)
	if err != nil {
		return api.LoadRunOutput{}, temporal.NewNonRetryableApplicationError(err.Error(), api.ErrStorage.String(), err)
	}
	out := api.LoadRunOutput{Path: run.URI(), ResumeFrom: in.ResumeFrom}
	var st api.RunState
	found, err := run.LoadState(ctx, &st)
	if err != nil {
		return out, fmt.Errorf("load %s/run.json: %w", run.URI(), err)
	}
	if found {
		if st.Version > api.RunStateVersion {
			return out, temporal.NewNonRetryableApplicationError(
				fmt.Sprintf("%s/run.json has format version %d; this worker reads up to %d", run.URI(), st.Version, api.RunStateVersion),
				api.ErrStorage.String(), nil)
		}
		out.State = &st
	}
	return out, nil
}

// checkDatasets lists every dataset's files and reads their schemas, in
// name order: a dataset that cannot work (no files, a missing column, an
// unknown format) fails the run before any rank starts, non-retryably, as a
// bad input does.
func checkDatasets(ctx context.Context, specs map[string]api.DatasetSpec) error {
	names := make([]string, 0, len(specs))
	for n := range specs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if err := data.Check(ctx, specs[n]); err != nil {
			if errors.Is(err, data.ErrInvalid) {
				return temporal.NewNonRetryableApplicationError(
					fmt.Sprintf("invalid Fit input: datasets.%s: %v", n, err), api.ErrInvalidInput.String(), err)
			}
			return fmt.Errorf("check datasets.%s: %w", n, err)
		}
	}
	return nil
}

// RecordRun appends reports to metrics.jsonl, saves run.json and only then
// deletes the checkpoints retention retired. Each step is idempotent, so a
// retried call repeats nothing.
func (a *Activities) RecordRun(ctx context.Context, in api.RecordRunInput) error {
	defer keepAlive(ctx)()
	run, err := a.run(ctx, in.StoragePath, in.RunName)
	if err != nil {
		return err
	}
	if len(in.Reports) > 0 {
		lines := make([]json.RawMessage, len(in.Reports))
		for i, r := range in.Reports {
			if lines[i], err = json.Marshal(r); err != nil {
				return fmt.Errorf("encode report %d: %w", r.Index, err)
			}
		}
		if err := run.AppendMetrics(ctx, in.Reports[0].Index, lines); err != nil {
			return fmt.Errorf("append %d reports to %s/metrics.jsonl: %w", len(lines), run.URI(), err)
		}
	}
	if err := run.SaveState(ctx, in.State); err != nil {
		return fmt.Errorf("save %s/run.json: %w", run.URI(), err)
	}
	for _, seq := range in.Delete {
		if err := run.DeleteCheckpoint(ctx, seq); err != nil {
			return fmt.Errorf("retention: delete %s: %w", run.CheckpointURI(seq), err)
		}
	}
	return nil
}

// keepAlive heartbeats until the returned stop is called, so that the
// workflow learns within BookkeepingHeartbeatTimeout that the worker running
// a bookkeeping activity died.
func keepAlive(ctx context.Context) (stop func()) {
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(api.BookkeepingHeartbeatTimeout / 5)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				activity.RecordHeartbeat(ctx)
			}
		}
	}()
	return func() {
		close(done)
		<-stopped
	}
}
