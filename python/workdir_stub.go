package python

// Placeholder until workdir.go lands (removed in that merge).

import (
	"context"
	"fmt"
	"os"
)

const DefaultMaxWorkingDir = 100 << 20

func Fetch(ctx context.Context, uri, sum, cacheDir string, maxBytes int64) (string, error) {
	if fi, err := os.Stat(uri); err == nil && fi.IsDir() {
		return uri, nil
	}
	return "", fmt.Errorf("working_dir %s: not a directory", uri)
}
