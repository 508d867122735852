package activities

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/sdk/temporal"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/collective"
	"github.com/tempotrain/tempotrain/storage"
	"github.com/tempotrain/tempotrain/tracing"
	"github.com/tempotrain/tempotrain/train"
)

// restore brings the newest checkpoint that verifies into the scratch dir.
// A checkpoint with a missing manifest or a bad sum is skipped for the one
// before it: first the candidates the workflow gave (the newest few), then
// every older committed checkpoint storage lists. When the run has
// checkpoints and none verifies, the rank fails non-retryably
// (api.ErrNoCheckpoint) unless AllowFreshStart lets it train from the start.
// Every rank must end on the same one; rank 0 tells the workflow which
// (the restored Update, for the attempt's history) and which did not
// verify: the workflow keeps those in run.json (RunState.Unusable) and no
// later attempt is offered them or downloads them again. The reasons named
// in an error or the Update are bounded (api.Abbreviate).
func (r *rank) restore(ctx context.Context, comm *collective.Comm) (*train.Checkpoint, error) {
	var chosen *train.Checkpoint
	var writtenPath string // the chosen checkpoint's writer's kernel path
	var skipped []string
	var unusable []int
	try := func(c train.Checkpoint) (bool, error) {
		if c.Seq > 0 && slices.Contains(r.in.Unusable, c.Seq) {
			skipped = append(skipped, fmt.Sprintf("checkpoint %d: did not verify in an earlier attempt (run.json)", c.Seq))
			return false, nil
		}
		dst := filepath.Join(r.scratch, fmt.Sprintf("checkpoint_%06d", c.Seq))
		p := r.tr.BeginCheckpoint(ctx, tracing.CheckpointRestore, c.Seq)
		man, err := r.restoreOne(ctx, c, dst)
		var links []trace.Link
		if l, ok := tracing.LinkTo(man.Meta[tracing.MetaTraceParent], "committed_by"); ok {
			links = append(links, l)
		}
		p.Done(man.Bytes, time.Now(), err, links...)
		if errors.Is(err, storage.ErrCorrupt) || errors.Is(err, storage.ErrNotFound) {
			r.log.Warn("checkpoint unusable, trying the one before", "seq", c.Seq, "uri", c.URI, "error", err)
			what := fmt.Sprintf("checkpoint %d", c.Seq)
			if c.Seq == 0 {
				what = c.URI
			}
			skipped = append(skipped, fmt.Sprintf("%s: %v", what, err))
			if c.Seq > 0 {
				unusable = append(unusable, c.Seq)
			}
			_ = os.RemoveAll(dst)
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("restore checkpoint %d: %w", c.Seq, err)
		}
		ck := c
		ck.Dir, ck.Bytes, ck.Meta = dst, man.Bytes, userMeta(man.Meta)
		writtenPath = man.Meta[metaKernelPath]
		if c.Seq == 0 { // a warm start: the manifest tells the rest
			ck.Seq, ck.Attempt, ck.Metrics, ck.Time = man.Seq, man.Attempt, man.Metrics, man.Time
		}
		chosen = &ck
		return true, nil
	}
	oldest := 0 // the oldest seq tried so far, 0 for none
	for _, c := range r.in.Checkpoints {
		ok, err := try(c)
		if err != nil {
			return nil, err
		}
		if ok {
			break
		}
		if c.Seq > 0 {
			oldest = c.Seq
		}
	}
	if chosen == nil && oldest > 1 {
		// Older checkpoints than the workflow listed: whatever storage
		// holds, newest first.
		older, err := r.store.ListCheckpoints(ctx)
		if err != nil {
			return nil, fmt.Errorf("list older checkpoints: %w", err)
		}
		for i := len(older) - 1; i >= 0 && chosen == nil; i-- {
			m := older[i]
			if m.Seq >= oldest || slices.Contains(r.in.Unusable, m.Seq) {
				continue // tried above, or by an earlier attempt
			}
			if _, err := try(train.Checkpoint{URI: r.store.CheckpointURI(m.Seq), Seq: m.Seq, Attempt: m.Attempt, Metrics: m.Metrics, Time: m.Time}); err != nil {
				return nil, err
			}
		}
	}
	if len(r.in.Checkpoints) > 0 && chosen == nil {
		if !r.in.AllowFreshStart {
			return nil, temporal.NewNonRetryableApplicationError(fmt.Sprintf(
				"no checkpoint of run %s verifies (%s): stopping rather than training from the start; set run.failure.allow_fresh_start to start over",
				r.in.RunName, strings.Join(api.Abbreviate(skipped), "; ")), api.ErrNoCheckpoint.String(), nil)
		}
		r.log.Warn("no checkpoint verifies; starting from scratch (allow_fresh_start)", "tried", len(skipped))
	}
	seq := 0
	if chosen != nil {
		seq = chosen.Seq
		r.ckpt.Store(int64(seq))
	}
	paths := []string{r.kernelPath()}
	if comm.Size() > 1 {
		// Each rank's seq and kernel path: one seq for all, and rank 0
		// learns whose kernels differ from the checkpoint writer's.
		all, err := comm.AllGather(ctx, []byte(strconv.Itoa(seq)+"\x00"+paths[0]))
		if err != nil {
			return nil, fmt.Errorf("agree on the checkpoint: %w", err)
		}
		paths = make([]string, len(all))
		for i, b := range all {
			got, path, _ := strings.Cut(string(b), "\x00")
			if got != strconv.Itoa(seq) {
				return nil, fmt.Errorf("restored checkpoint %d but rank %d restored %s", seq, i, got)
			}
			paths[i] = path
		}
	}
	if r.in.Rank == 0 && (len(r.in.Checkpoints) > 0 || chosen != nil) {
		req := api.RestoredRequest{Attempt: r.in.Attempt, Seq: seq, Skipped: api.Abbreviate(skipped), Unusable: unusable}
		if chosen != nil {
			req.KernelPathChanged = kernelPathChanged(seq, writtenPath, paths)
			if req.KernelPathChanged != "" {
				r.log.Warn("restoring on other CPU kernels than the checkpoint's writer", "detail", req.KernelPathChanged)
			}
		}
		if chosen != nil && len(r.in.Checkpoints) > 0 && r.in.Checkpoints[0].Seq == 0 && chosen.URI == r.in.Checkpoints[0].URI {
			req.URI = chosen.URI
		}
		if err := r.update(ctx, api.UpdateRestored, fmt.Sprintf("restored-a%d", r.in.Attempt), req, nil); err != nil {
			return nil, fmt.Errorf("tell the workflow the checkpoint restored: %w", err)
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

// userMeta is a restored manifest's Meta as the user wrote it: without
// the keys tempotrain adds (the traceparent, the kernel path).
func userMeta(meta map[string]string) map[string]string {
	_, tp := meta[tracing.MetaTraceParent]
	_, kp := meta[metaKernelPath]
	if !tp && !kp {
		return meta
	}
	out := make(map[string]string, len(meta))
	for k, v := range meta {
		if k != tracing.MetaTraceParent && k != metaKernelPath {
			out[k] = v
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// kernelPathChanged says which ranks restore checkpoint seq, written on
// kernel path written, on another path (paths[i] is rank i's); empty when
// none does or the writer's path is unknown (a checkpoint of an older
// version, a Python or GPU run).
func kernelPathChanged(seq int, written string, paths []string) string {
	if written == "" {
		return ""
	}
	byPath := map[string][]string{}
	var order []string
	for i, p := range paths {
		if p == "" || p == written {
			continue
		}
		if _, ok := byPath[p]; !ok {
			order = append(order, p)
		}
		byPath[p] = append(byPath[p], strconv.Itoa(i))
	}
	if len(order) == 0 {
		return ""
	}
	var parts []string
	for _, p := range order {
		rs := byPath[p]
		if len(rs) == len(paths) {
			parts = append(parts, fmt.Sprintf("every rank restores on %q", p))
			continue
		}
		word := "rank"
		if len(rs) > 1 {
			word = "ranks"
		}
		parts = append(parts, fmt.Sprintf("%s %s on %q", word, strings.Join(api.Abbreviate(rs), ", "), p))
	}
	return fmt.Sprintf("checkpoint %d was written on kernel path %q; %s: results from here on are not bit-identical to an uninterrupted run's",
		seq, written, strings.Join(parts, "; "))
}
