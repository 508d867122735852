package storage

import (
	"fmt"
	"path"
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
