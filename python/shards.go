package python

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/tempotrain/tempotrain/storage"
	"github.com/tempotrain/tempotrain/train"
)

// MaxShard bounds one rank's part of a checkpoint sharded across ranks: it
// travels to rank 0 over the group's ring (and, as an all-gather, through
// every rank's memory).
const MaxShard = 1 << 30

// What each rank gives the report's all-gather, in its first byte.
const (
	shardNone  = 0 // no checkpoint directory
	shardFiles = 1 // a directory: rank 0's stays local, another rank's files follow
	shardError = 2 // the directory could not be read: the message follows
)

// reportShards is a report of a group (Ray V2's semantics): every rank
// calls it at the same points (a collective call, a barrier); the
// checkpoint directories any ranks report are merged into one, which rank
// 0 commits with its metrics. A rank other than 0 returns once its files
// are handed over, without waiting for the commit.
func reportShards(ctx context.Context, tc *train.Context, metrics train.Metrics, dir string) error {
	rank := tc.WorldRank()
	payload := []byte{shardNone}
	var own error
	if dir != "" {
		payload = []byte{shardFiles}
		if rank != 0 {
			var b bytes.Buffer
			b.WriteByte(shardFiles)
			if err := tarDir(&b, dir, MaxShard); err != nil {
				own = fmt.Errorf("checkpoint %s: %w", dir, err)
				payload = append([]byte{shardError}, own.Error()...)
			} else {
				payload = b.Bytes()
			}
		}
	}
	all, err := tc.Comm().AllGather(ctx, payload)
	if err != nil {
		return fmt.Errorf("report: with more than one rank, report is a collective call, as in Ray Train V2: "+
			"every rank must call it the same number of times (report metrics on every rank, a checkpoint from any); "+
			"rank %d's report found no matching report of the others: %w", rank, err)
	}
	if own != nil {
		return own
	}
	if rank != 0 {
		return tc.Report(metrics, nil)
	}
	any := false
	for r, p := range all {
		switch {
		case len(p) == 0:
			return fmt.Errorf("report: rank %d sent nothing", r)
		case p[0] == shardError:
			return fmt.Errorf("report: rank %d's %s", r, p[1:])
		case p[0] == shardFiles:
			any = true
		}
	}
	if !any {
		return tc.Report(metrics, nil)
	}
	if len(all) > 1 && all[0][0] == shardFiles && !othersHaveFiles(all) {
		return tc.Report(metrics, train.NewCheckpoint(dir)) // rank 0's alone, as it is
	}
	merged, err := tc.NewCheckpointDir()
	if err != nil {
		return err
	}
	if dir != "" {
		if err := storage.Snapshot(ctx, dir, merged, storage.SnapshotLink); err != nil {
			return fmt.Errorf("report: checkpoint %s: %w", dir, err)
		}
	}
	for r := 1; r < len(all); r++ {
		if all[r][0] != shardFiles {
			continue
		}
		if err := wdExtract(bytes.NewReader(all[r][1:]), merged, wdLimits{entries: MaxWorkingDirEntries, bytes: MaxShard}); err != nil {
			return fmt.Errorf("report: rank %d's checkpoint files (every rank's must have names of their own): %w", r, err)
		}
	}
	return tc.Report(metrics, train.NewCheckpoint(merged))
}

func othersHaveFiles(all [][]byte) bool {
	for _, p := range all[1:] {
		if p[0] == shardFiles {
			return true
		}
	}
	return false
}

// tarDir writes the regular files and directories under dir as a tar
// stream, at most max bytes of files.
func tarDir(w io.Writer, dir string, max int64) error {
	tw := tar.NewWriter(w)
	var total int64
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		name := filepath.ToSlash(rel)
		switch {
		case d.IsDir():
			return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: int64(info.Mode().Perm())})
		case info.Mode().IsRegular():
			if total += info.Size(); total > max {
				return fmt.Errorf("more than %d bytes of files", max)
			}
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: int64(info.Mode().Perm()), Size: info.Size()}); err != nil {
				return err
			}
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = io.CopyN(tw, f, info.Size())
			return err
		}
		return fmt.Errorf("%s is neither a file nor a directory", name)
	})
	if err != nil {
		return err
	}
	return tw.Close()
}
