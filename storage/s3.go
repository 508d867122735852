package storage

import (
	"context"
	"fmt"
	"strings"
)

func openS3(ctx context.Context, storagePath string) (Backend, error) {
	if _, _, err := parseS3Path(storagePath); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("storage path %q: the S3 backend is not built yet", storagePath)
}

// parseS3Path splits "s3://bucket/prefix" into bucket and prefix (no slashes
// at either end).
func parseS3Path(p string) (bucket, prefix string, err error) {
	rest := strings.TrimPrefix(p, "s3://")
	bucket, prefix, _ = strings.Cut(rest, "/")
	if bucket == "" {
		return "", "", fmt.Errorf("%w: storage path %q names no bucket (want s3://bucket/prefix)", ErrMisconfigured, p)
	}
	prefix = strings.Trim(prefix, "/")
	if prefix != "" {
		if err := validKey(prefix); err != nil {
			return "", "", fmt.Errorf("%w: storage path %q: prefix: %w", ErrMisconfigured, p, err)
		}
	}
	return bucket, prefix, nil
}
