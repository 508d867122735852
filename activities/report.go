package activities

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/compute"
	"github.com/tempotrain/tempotrain/storage"
	"github.com/tempotrain/tempotrain/tracing"
	"github.com/tempotrain/tempotrain/train"
)

// queued is a report waiting for the workflow: sent once its checkpoint (if
// any) is committed, and always in order.
type queued struct {
	n         int64
	req       api.ReportRequest
	committed bool
}

// Report implements trainrt.Reporter. On rank 0 it commits the checkpoint
// (files, then the manifest) and reports to the workflow; with AsyncUpload
// it returns after a local snapshot and reports once the upload is
// committed. On other ranks it counts the report.
func (r *rank) Report(ctx context.Context, m train.Metrics, ck *train.Checkpoint) error {
	r.reportMu.Lock()
	defer r.reportMu.Unlock()
	n := r.reports.Add(1)
	if r.in.Rank != 0 {
		return nil
	}
	q := queued{n: n, req: api.ReportRequest{Attempt: r.in.Attempt, Rank: r.in.Rank, Metrics: m}, committed: true}
	if ck != nil {
		if ck.Dir == "" {
			return fmt.Errorf("report %d: the checkpoint has no directory (use train.NewCheckpoint(dir))", n)
		}
		seq := r.nextSeq
		man := storage.Manifest{Seq: seq, Attempt: r.in.Attempt, Metrics: m, Meta: r.manifestMeta(ctx, ck.Meta)}
		q.req.Checkpoint = &train.Checkpoint{URI: r.store.CheckpointURI(seq), Seq: seq, Attempt: r.in.Attempt, Metrics: m, Meta: ck.Meta}
		ownDir := strings.HasPrefix(ck.Dir, r.scratch+string(filepath.Separator))
		if r.async != nil {
			// A directory from NewCheckpointDir is never written again, so
			// hard links are a safe snapshot; any other gets copied.
			mode := storage.SnapshotCopy
			if ownDir {
				mode = storage.SnapshotLink
			}
			write := r.tr.BeginCheckpoint(ctx, tracing.CheckpointWrite, seq)
			prev, err := r.async.Submit(ctx, seq, ck.Dir, man, mode)
			if err != nil {
				r.upload.Done(0, time.Now(), err)
				r.upload = tracing.PendingCheckpoint{}
				write.Done(0, time.Now(), err)
				return fmt.Errorf("report %d: background upload of the previous checkpoint failed: %w", n, err)
			}
			write.Done(r.dirBytes(ck.Dir), time.Now(), nil)
			q.committed = false
			r.committed(prev)
			r.upload = r.tr.BeginCheckpoint(ctx, tracing.CheckpointUpload, seq)
		} else {
			upload := r.tr.BeginCheckpoint(ctx, tracing.CheckpointUpload, seq)
			done, err := r.store.CommitCheckpoint(ctx, seq, ck.Dir, man)
			upload.Done(done.Bytes, time.Now(), err)
			if err != nil {
				return fmt.Errorf("report %d: commit checkpoint %d: %w", n, seq, err)
			}
			q.req.Checkpoint.Bytes, q.req.Checkpoint.Time = done.Bytes, done.Time
			r.ckpt.Store(int64(seq))
		}
		r.nextSeq++
		if ownDir {
			_ = os.RemoveAll(ck.Dir)
		}
	}
	r.queue = append(r.queue, q)
	return r.flush(ctx)
}

// committed marks the queued report of a checkpoint whose upload finished.
func (r *rank) committed(man *storage.Manifest) {
	if man == nil {
		return
	}
	r.upload.Done(man.Bytes, man.Time, nil)
	r.upload = tracing.PendingCheckpoint{}
	for i := range r.queue {
		if c := r.queue[i].req.Checkpoint; c != nil && c.Seq == man.Seq {
			c.Bytes, c.Time = man.Bytes, man.Time
			r.queue[i].committed = true
		}
	}
	r.ckpt.Store(int64(man.Seq))
}

// flush sends the reports at the head of the queue whose checkpoints are
// committed.
func (r *rank) flush(ctx context.Context) error {
	for len(r.queue) > 0 && r.queue[0].committed {
		q := r.queue[0]
		var resp api.ReportResponse
		id := fmt.Sprintf("report-a%d-%d", r.in.Attempt, q.n)
		if err := r.update(ctx, api.UpdateReport, id, q.req, &resp); err != nil {
			return fmt.Errorf("report %d to the workflow: %w", q.n, err)
		}
		r.queue = r.queue[1:]
	}
	return nil
}

// drain waits for the last background upload and sends what is queued,
// once the training function has returned.
func (r *rank) drain(ctx context.Context) error {
	r.reportMu.Lock()
	defer r.reportMu.Unlock()
	if r.async != nil {
		last, err := r.async.Wait(ctx)
		if err != nil {
			r.upload.Done(0, time.Now(), err)
			r.upload = tracing.PendingCheckpoint{}
			return fmt.Errorf("background upload of the last checkpoint failed: %w", err)
		}
		r.committed(last)
	}
	return r.flush(ctx)
}

// manifestMeta is the Meta a checkpoint's manifest keeps: the user's, the
// kernel path of the rank that commits it (metaKernelPath), and with
// tracing on the traceparent of the report that commits it, so that the
// restore of another attempt (or a resumed run) links to it.
func (r *rank) manifestMeta(ctx context.Context, meta map[string]string) map[string]string {
	tp, kp := r.tr.TraceParent(ctx), r.kernelPath()
	if tp == "" && kp == "" {
		return meta
	}
	out := make(map[string]string, len(meta)+2)
	for k, v := range meta {
		out[k] = v
	}
	if tp != "" {
		out[tracing.MetaTraceParent] = tp
	}
	if kp != "" {
		out[metaKernelPath] = kp
	}
	return out
}

// metaKernelPath is the checkpoint manifest's Meta key that names the CPU
// kernels of the rank that wrote it (compute.KernelPath).
const metaKernelPath = "tempotrain.kernel_path"

// kernelPath names the kernels that compute this rank's results, for a
// Go function on the CPU: compute.KernelPath. Empty for a GPU rank (the
// device's kernels are ours, one build for every GPU) and a Python
// function (torch chooses its own).
func (r *rank) kernelPath() string {
	if r.in.UseGPU || r.in.TrainFunc == api.PythonFunc {
		return ""
	}
	return compute.KernelPath()
}

// dirBytes sums the sizes of the files under dir, for the checkpoint write
// span; only with tracing on.
func (r *rank) dirBytes(dir string) int64 {
	if r.tr == nil {
		return 0
	}
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}
