package storage

import (
	"context"
	"fmt"
	"io"
	"path"
	"path/filepath"
	"strconv"
	"strings"
)

// CheckpointDir is the name of checkpoint seq's directory in its run.
func CheckpointDir(seq int) string { return fmt.Sprintf("checkpoint_%06d", seq) }

// parseCheckpointDir returns the seq of a "checkpoint_NNNNNN" name.
func parseCheckpointDir(name string) (int, bool) {
	digits, ok := strings.CutPrefix(name, "checkpoint_")
	if !ok || len(digits) < 6 {
		return 0, false
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	seq, err := strconv.Atoi(digits)
	return seq, err == nil && CheckpointDir(seq) == name
}

// RankLogPath is where rank's log of attempt lies in its run:
// "logs/attempt-{attempt}/rank-{rank}.log".
func RankLogPath(attempt, rank int) string {
	return fmt.Sprintf("%s/attempt-%d/rank-%d.log", LogsDir, attempt, rank)
}

// parseRankLogPath reads a path RankLogPath wrote.
func parseRankLogPath(p string) (attempt, rank int, ok bool) {
	rest, ok := strings.CutPrefix(p, LogsDir+"/attempt-")
	if !ok {
		return 0, 0, false
	}
	a, file, ok := strings.Cut(rest, "/")
	if !ok {
		return 0, 0, false
	}
	digits, ok := strings.CutPrefix(file, "rank-")
	if !ok {
		return 0, 0, false
	}
	if digits, ok = strings.CutSuffix(digits, ".log"); !ok {
		return 0, 0, false
	}
	attempt, err1 := strconv.Atoi(a)
	rank, err2 := strconv.Atoi(digits)
	if err1 != nil || err2 != nil || attempt < 0 || rank < 0 || RankLogPath(attempt, rank) != p {
		return 0, 0, false
	}
	return attempt, rank, true
}

// RankLogURI is the URI of rank's log of attempt.
func (r *Run) RankLogURI(attempt, rank int) string {
	return r.b.URI(r.prefix + RankLogPath(attempt, rank))
}

func (r *Run) ckptPrefix(seq int) string { return r.prefix + CheckpointDir(seq) + "/" }

// CheckpointURI is the URI of checkpoint seq's directory.
func (r *Run) CheckpointURI(seq int) string { return r.b.URI(r.prefix + CheckpointDir(seq)) }

// splitCheckpointURI splits ".../{run}/checkpoint_{seq}" into the storage
// path, the run name and seq.
func splitCheckpointURI(uri string) (storagePath, run string, seq int, err error) {
	u := strings.TrimRight(strings.TrimSpace(uri), "/")
	dir := path.Base(u)
	seq, ok := parseCheckpointDir(dir)
	if !ok {
		return "", "", 0, fmt.Errorf("%q is not a checkpoint URI: its last element should be checkpoint_NNNNNN", uri)
	}
	runDir := strings.TrimSuffix(u, "/"+dir)
	i := strings.LastIndex(runDir, "/")
	if i < 0 || runDir == u {
		return "", "", 0, fmt.Errorf("%q is not a checkpoint URI: want {storage}/{run}/checkpoint_NNNNNN", uri)
	}
	storagePath, run = runDir[:i], runDir[i+1:]
	if run == "" && storagePath != "s3:/" {
		// "{storage}//checkpoint_NNNNNN": an empty path element.
		return "", "", 0, fmt.Errorf("%q is not a checkpoint URI: an empty run name", uri)
	}
	if run == "." || run == ".." {
		return "", "", 0, fmt.Errorf("%q is not a checkpoint URI: run name %q", uri, run)
	}
	switch storagePath {
	case "":
		storagePath = "/"
	case "file://":
		storagePath = "file:///"
	case "s3:/":
		// "s3://bucket/checkpoint_000001": the bucket root is the run.
		storagePath, run = runDir, ""
	}
	return storagePath, run, seq, nil
}

// ReadURI reads the one object uri names: an absolute or relative path,
// file:///path or s3://bucket/key. Its last element is the key, what
// comes before it the storage path (Open's).
func ReadURI(ctx context.Context, uri string) ([]byte, error) {
	return ReadURIMax(ctx, uri, 0)
}

// ReadURIMax is ReadURI that reads no more than maxBytes+1 bytes of the
// object and fails when it is larger than maxBytes (0: no limit).
func ReadURIMax(ctx context.Context, uri string, maxBytes int64) ([]byte, error) {
	u := strings.TrimSpace(uri)
	if !strings.Contains(u, "://") && !filepath.IsAbs(u) {
		abs, err := filepath.Abs(u)
		if err != nil {
			return nil, err
		}
		u = filepath.ToSlash(abs)
	}
	i := strings.LastIndex(u, "/")
	dir, key := u[:i], u[i+1:]
	switch dir {
	case "":
		dir = "/"
	case "file://":
		dir = "file:///"
	case "s3:/":
		return nil, fmt.Errorf("%w: %q names no bucket", ErrMisconfigured, uri)
	}
	be, err := Open(ctx, dir)
	if err != nil {
		return nil, err
	}
	rc, err := be.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	if maxBytes <= 0 {
		return io.ReadAll(rc)
	}
	data, err := io.ReadAll(io.LimitReader(rc, maxBytes+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > maxBytes {
		return nil, fmt.Errorf("%q is larger than the limit of %d bytes", uri, maxBytes)
	}
	return data, nil
}
