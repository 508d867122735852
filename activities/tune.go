package activities

import (
	"context"

	"go.temporal.io/sdk/temporal"

	"github.com/tempotrain/tempotrain/api"
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
