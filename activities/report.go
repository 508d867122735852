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
	// wait: the workflow answers this report only once it has decided on
	// it (RunRankInput.WaitMetric), and its Report waits for the answer.
	wait bool
	// ctx is the Report's: its values (the report's span) go with the
	// Update, and it ends the Update of a report that waits.
	ctx context.Context
}

// Report implements trainrt.Reporter. On rank 0 it commits the checkpoint
// (files, then the manifest) and queues the report, which the rank's
// sender (send.go) sends to the workflow in the background, in order;
// with AsyncUpload it returns after a local snapshot, and the report goes
// once the upload is committed. A report the workflow must decide on
// (RunRankInput.WaitMetric) is sent before Report returns. A report that
// failed to reach the workflow fails the next Report, and the rank. On
// other ranks Report counts the report.
func (r *rank) Report(ctx context.Context, m train.Metrics, ck *train.Checkpoint) error {
	r.reportMu.Lock()
	defer r.reportMu.Unlock()
	n := r.reports.Add(1)
	if r.in.Rank != 0 {
		return nil
	}
	if err := r.send.failed(); err != nil {
		return err
	}
	q := queued{n: n, req: api.ReportRequest{Attempt: r.in.Attempt, Rank: r.in.Rank, Metrics: m}, committed: true, ctx: ctx}
	if w := r.in.WaitMetric; w != "" {
		_, q.wait = m[w]
	}
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
	return r.enqueue(ctx, q)
}

// committed marks the queued report of a checkpoint whose upload finished.
func (r *rank) committed(man *storage.Manifest) {
	if man == nil {
		return
	}
	r.upload.Done(man.Bytes, man.Time, nil)
	r.upload = tracing.PendingCheckpoint{}
	r.send.committed(man)
	r.ckpt.Store(int64(man.Seq))
}

// drain ends the rank's reporting once the training function has returned
// (fnErr is what it returned): after a function that succeeded it waits
// for the last background upload; then for the sender to send every
// report queued and committed, which a cancelled rank still does for
// reportCancelGrace. It returns fnErr, or else what failed.
func (r *rank) drain(ctx context.Context, fnErr error) error {
	if r.in.Rank != 0 {
		return fnErr
	}
	if fnErr == nil {
		r.reportMu.Lock()
		defer r.reportMu.Unlock()
		if r.async != nil {
			last, err := r.async.Wait(ctx)
			if err != nil {
				r.upload.Done(0, time.Now(), err)
				r.upload = tracing.PendingCheckpoint{}
				r.send.close()
				r.stopSender(ctx)
				return fmt.Errorf("background upload of the last checkpoint failed: %w", err)
			}
			r.committed(last)
		}
	}
	r.send.close()
	err := r.stopSender(ctx)
	if fnErr != nil {
		if err != nil {
			r.log.Warn("reports queued before the training function failed did not all reach the workflow", "error", err)
		}
		return fnErr
	}
	return err
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
