package activities

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/tempotrain/tempotrain/collective"
	"github.com/tempotrain/tempotrain/storage"
	"github.com/tempotrain/tempotrain/tracing"
	"github.com/tempotrain/tempotrain/train"
)

// restore brings the newest checkpoint that verifies into the scratch dir.
// A checkpoint with a missing manifest or a bad sum is skipped for the one
// before it; every rank must end on the same one.
func (r *rank) restore(ctx context.Context, comm *collective.Comm) (*train.Checkpoint, error) {
	var chosen *train.Checkpoint
	for _, c := range r.in.Checkpoints {
		dst := filepath.Join(r.scratch, fmt.Sprintf("checkpoint_%06d", c.Seq))
		p := r.tr.BeginCheckpoint(ctx, tracing.CheckpointRestore, c.Seq)
		man, err := r.restoreOne(ctx, c, dst)
		var links []trace.Link
		if l, ok := tracing.LinkTo(man.Meta[tracing.MetaTraceParent], "committed_by"); ok {
			links = append(links, l)
		}
		p.Done(man.Bytes, time.Now(), err, links...)
		if errors.Is(err, storage.ErrCorrupt) || errors.Is(err, storage.ErrNotFound) {
			r.log.Warn("checkpoint unusable, trying the one before", "seq", c.Seq, "error", err)
			_ = os.RemoveAll(dst)
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("restore checkpoint %d: %w", c.Seq, err)
		}
		ck := c
		ck.Dir, ck.Bytes, ck.Meta = dst, man.Bytes, userMeta(man.Meta)
		if c.Seq == 0 { // a warm start: the manifest tells the rest
			ck.Seq, ck.Attempt, ck.Metrics, ck.Time = man.Seq, man.Attempt, man.Metrics, man.Time
		}
		chosen = &ck
		break
	}
	if len(r.in.Checkpoints) > 0 && chosen == nil {
		r.log.Warn("no checkpoint verifies; starting from scratch", "candidates", len(r.in.Checkpoints))
	}
	seq := 0
	if chosen != nil {
		seq = chosen.Seq
		r.ckpt.Store(int64(seq))
	}
	if comm.Size() > 1 {
		all, err := comm.AllGather(ctx, []byte(strconv.Itoa(seq)))
		if err != nil {
			return nil, fmt.Errorf("agree on the checkpoint: %w", err)
		}
		for i, b := range all {
			if string(b) != strconv.Itoa(seq) {
				return nil, fmt.Errorf("restored checkpoint %d but rank %d restored %s", seq, i, b)
			}
		}
	}
	return chosen, nil
}

// restoreOne brings checkpoint c into dst: one of this run's by its seq, a
// warm start (Seq 0) from another run by its URI.
func (r *rank) restoreOne(ctx context.Context, c train.Checkpoint, dst string) (storage.Manifest, error) {
	if c.Seq > 0 {
		return r.store.RestoreCheckpoint(ctx, c.Seq, dst)
	}
	sc, err := storage.OpenCheckpoint(ctx, c.URI)
	if err != nil {
		return storage.Manifest{}, err
	}
	if err := sc.Download(ctx, dst); err != nil {
		return sc.Manifest, err
	}
	return sc.Manifest, nil
}

// userMeta is a restored manifest's Meta as the user wrote it.
func userMeta(meta map[string]string) map[string]string {
	if _, ok := meta[tracing.MetaTraceParent]; !ok {
		return meta
	}
	out := make(map[string]string, len(meta))
	for k, v := range meta {
		if k != tracing.MetaTraceParent {
			out[k] = v
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}
