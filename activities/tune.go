package activities

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"go.temporal.io/sdk/temporal"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/storage"
)

// TuneBest writes a search's best checkpoint as {storage}/{tune}/best.json,
// a pointer file that predict.Load follows, whole or not at all, and
// returns its URI.
func (a *Activities) TuneBest(ctx context.Context, in api.TuneBestRequest) (string, error) {
	defer keepAlive(ctx)()
	b, err := a.backend(ctx, in.StoragePath)
	if err != nil {
		return "", temporal.NewNonRetryableApplicationError(err.Error(), api.ErrStorage.String(), err)
	}
	key := in.Tune + "/" + api.BestFile
	if err := putPointer(ctx, b, key, in.Pointer); err != nil {
		return "", err
	}
	return b.URI(key), nil
}

// LoadTune reads a search's tune.json: nil when the search is new.
func (a *Activities) LoadTune(ctx context.Context, in api.TuneStateRequest) (*api.TuneState, error) {
	defer keepAlive(ctx)()
	b, err := a.backend(ctx, in.StoragePath)
	if err != nil {
		return nil, temporal.NewNonRetryableApplicationError(err.Error(), api.ErrStorage.String(), err)
	}
	key := in.Tune + "/" + api.TuneStateFile
	r, err := b.Get(ctx, key)
	if errors.Is(err, storage.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer r.Close()
	raw, err := io.ReadAll(io.LimitReader(r, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", b.URI(key), err)
	}
	var st api.TuneState
	if err := json.Unmarshal(raw, &st); err != nil || st.Version != api.TuneStateVersion {
		return nil, temporal.NewNonRetryableApplicationError(fmt.Sprintf("%s: not a search's state (version %d, want %d): %v",
			b.URI(key), st.Version, api.TuneStateVersion, err), api.ErrStorage.String(), err)
	}
	return &st, nil
}

// SaveTune writes a search's tune.json, whole or not at all.
func (a *Activities) SaveTune(ctx context.Context, in api.TuneStateRequest) error {
	defer keepAlive(ctx)()
	b, err := a.backend(ctx, in.StoragePath)
	if err != nil {
		return temporal.NewNonRetryableApplicationError(err.Error(), api.ErrStorage.String(), err)
	}
	buf, err := json.MarshalIndent(in.State, "", "  ")
	if err != nil {
		return err
	}
	key := in.Tune + "/" + api.TuneStateFile
	if err := b.Put(ctx, key, bytes.NewReader(buf), int64(len(buf))); err != nil {
		return fmt.Errorf("write %s: %w", b.URI(key), err)
	}
	return nil
}
