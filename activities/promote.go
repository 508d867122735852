package activities

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/storage"
)

// Promote records a scheduled run's best checkpoint as the schedule's last
// ({storage}/{schedule}/last.json: what the next run's "previous-best"
// resolves to) and promotes it ({storage}/{schedule}/promoted.json) when it
// beats the promoted one by ScoreAttribute in ScoreOrder, or when none is
// promoted, or, without an attribute, always (the newest wins). Each file is
// written whole (storage.Backend.Put) or not at all. Retried, it gives the
// same answer: a run compared with its own promotion is promoted again.
func (a *Activities) Promote(ctx context.Context, in api.PromoteRequest) (api.PromoteOutput, error) {
	defer keepAlive(ctx)()
	b, err := a.backend(ctx, in.StoragePath)
	if err != nil {
		return api.PromoteOutput{}, temporal.NewNonRetryableApplicationError(err.Error(), api.ErrStorage.String(), err)
	}
	p := api.Pointer{Schedule: in.Schedule, Run: in.Run, Checkpoint: in.Best.URI, Seq: in.Best.Seq,
		Attribute: in.ScoreAttribute, Time: time.Now().UTC()}
	if v, ok := in.Best.Metrics[in.ScoreAttribute]; ok && in.ScoreAttribute != "" && !math.IsNaN(v) {
		p.Score = &v
	}
	if err := putPointer(ctx, b, in.Schedule+"/"+api.LastFile, p); err != nil {
		return api.PromoteOutput{}, err
	}
	var out api.PromoteOutput
	prev, err := readPointer(ctx, b, in.Schedule+"/"+api.PromotedFile)
	switch {
	case errors.Is(err, storage.ErrNotFound):
	case err != nil:
		return out, err
	default:
		out.Previous = &prev
	}
	if !better(p, out.Previous, in.ScoreOrder) {
		return out, nil
	}
	if err := putPointer(ctx, b, in.Schedule+"/"+api.PromotedFile, p); err != nil {
		return out, err
	}
	out.Promoted = true
	return out, nil
}

// better says whether p should replace the promoted pointer prev.
func better(p api.Pointer, prev *api.Pointer, order string) bool {
	switch {
	case prev == nil || prev.Run == p.Run:
		return true
	case p.Attribute == "":
		return true // no score: the newest
	case p.Score == nil:
		return false // this run has no score to compare
	case prev.Score == nil || prev.Attribute != p.Attribute:
		return true
	case order == "min":
		return *p.Score < *prev.Score
	default:
		return *p.Score > *prev.Score
	}
}

func putPointer(ctx context.Context, b storage.Backend, key string, p api.Pointer) error {
	buf, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return err
	}
	if err := b.Put(ctx, key, bytes.NewReader(buf), int64(len(buf))); err != nil {
		return fmt.Errorf("write %s: %w", b.URI(key), err)
	}
	return nil
}

func readPointer(ctx context.Context, b storage.Backend, key string) (api.Pointer, error) {
	r, err := b.Get(ctx, key)
	if err != nil {
		return api.Pointer{}, err
	}
	defer r.Close()
	raw, err := io.ReadAll(io.LimitReader(r, 1<<20))
	if err != nil {
		return api.Pointer{}, fmt.Errorf("read %s: %w", b.URI(key), err)
	}
	var p api.Pointer
	if err := json.Unmarshal(raw, &p); err != nil {
		return api.Pointer{}, fmt.Errorf("%s: %w: %v", b.URI(key), storage.ErrCorrupt, err)
	}
	return p, nil
}

// resolvePreviousBest is LoadRun's resolution of ResumeFrom "previous-best":
// the checkpoint of the schedule's last.json, or "" when the schedule has
// no successful run yet.
func (a *Activities) resolvePreviousBest(ctx context.Context, storagePath, schedule string) (string, error) {
	if schedule == "" {
		return "", temporal.NewNonRetryableApplicationError(
			`invalid Fit input: run.resume_from = "previous-best": the run was not started by a Temporal Schedule and run.schedule is empty`,
			api.ErrInvalidInput.String(), nil)
	}
	b, err := a.backend(ctx, storagePath)
	if err != nil {
		return "", err
	}
	p, err := readPointer(ctx, b, schedule+"/"+api.LastFile)
	if errors.Is(err, storage.ErrNotFound) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	return p.Checkpoint, nil
}
