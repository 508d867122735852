package activities

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/data/format"
	"github.com/tempotrain/tempotrain/predict"
	"github.com/tempotrain/tempotrain/storage"
)

// The BatchPredict activities. PlanBatchPredict and the PredictShards of a
// run go to the same task queue, so the worker that planned (and loaded
// the predictor) predicts too: a worker loads a checkpoint's predictor
// once, on first use, and keeps it for the shards that follow (at most
// maxPredictors checkpoints, the least recently used closed first;
// Activities.Close closes them when the worker stops).
//
// A shard's output is written to a local temporary file and committed with
// one storage Put, which is atomic (a local rename, an S3 PutObject or a
// completed multipart upload): a shard cut at any point, by a cancellation
// or a dead process, leaves no part of a file behind under its name, and a
// retried shard replaces the file of the attempt before, so an output holds
// exactly one file per shard.

// maxPredictors bounds the predictors a worker keeps loaded.
const maxPredictors = 2

// RegisterPredict registers PlanBatchPredict, PredictShard and
// CommitBatchPredict, for a worker on a predict task queue.
func (a *Activities) RegisterPredict(r worker.ActivityRegistry) {
	r.RegisterActivityWithOptions(a.PlanBatchPredict, activity.RegisterOptions{Name: api.ActivityPlanBatchPredict})
	r.RegisterActivityWithOptions(a.PredictShard, activity.RegisterOptions{Name: api.ActivityPredictShard})
	r.RegisterActivityWithOptions(a.CommitBatchPredict, activity.RegisterOptions{Name: api.ActivityCommitBatchPredict})
}

// predictorCache holds the predictors an Activities loaded, by checkpoint
// URI.
type predictorCache struct {
	mu      sync.Mutex
	entries map[string]*cachedPredictor
	clock   int64
	closed  bool
	// load is predict.Load; tests count or replace it.
	load func(ctx context.Context, uri string) (predict.Predictor, error)
}

type cachedPredictor struct {
	ready chan struct{} // closed when p or err is set
	p     predict.Predictor
	err   error
	refs  int
	used  int64
}

func newPredictorCache() *predictorCache {
	return &predictorCache{entries: map[string]*cachedPredictor{}, load: predict.Load}
}

func (a *Activities) predictors() *predictorCache { return a.predict }

// Close closes the predictors a's activities loaded. Call it once the
// workers using a have stopped.
func (a *Activities) Close() error { return a.predict.close() }

// get returns the predictor of uri, loading it once for all callers; done
// releases it. A load that fails is not kept: the next get tries again.
func (c *predictorCache) get(ctx context.Context, uri string) (predict.Predictor, func(), error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, nil, errors.New("activities: the worker is stopping")
	}
	c.clock++
	e, ok := c.entries[uri]
	if !ok {
		e = &cachedPredictor{ready: make(chan struct{})}
		c.entries[uri] = e
		go func() {
			// The load outlives a caller that gives up: another may wait.
			p, err := c.load(context.WithoutCancel(ctx), uri)
			c.mu.Lock()
			e.p, e.err = p, err
			if err != nil {
				delete(c.entries, uri)
			}
			closed := c.closed
			c.mu.Unlock()
			close(e.ready)
			if closed && p != nil {
				p.Close()
			}
		}()
	}
	e.refs++
	e.used = c.clock
	c.mu.Unlock()
	release := func() {
		c.mu.Lock()
		e.refs--
		c.evictLocked()
		c.mu.Unlock()
	}
	select {
	case <-e.ready:
	case <-ctx.Done():
		release()
		return nil, nil, ctx.Err()
	}
	if e.err != nil {
		release()
		return nil, nil, e.err
	}
	return e.p, release, nil
}

// evictLocked closes the least recently used predictors nobody holds while
// more than maxPredictors are loaded.
func (c *predictorCache) evictLocked() {
	for len(c.entries) > maxPredictors {
		var old string
		var at int64 = -1
		for uri, e := range c.entries {
			select {
			case <-e.ready:
			default:
				continue
			}
			if e.refs == 0 && (at < 0 || e.used < at) {
				old, at = uri, e.used
			}
		}
		if at < 0 {
			return
		}
		e := c.entries[old]
		delete(c.entries, old)
		if e.p != nil {
			e.p.Close()
		}
	}
}

func (c *predictorCache) close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	var errs []error
	for uri, e := range c.entries {
		select {
		case <-e.ready:
			if e.p != nil {
				errs = append(errs, e.p.Close())
			}
		default: // still loading: closed when it is done
		}
		delete(c.entries, uri)
	}
	return errors.Join(errs...)
}

// invalid is a non-retryable InvalidInput error naming what is wrong.
func invalid(format string, args ...any) error {
	msg := "invalid BatchPredict input: " + fmt.Sprintf(format, args...)
	return temporal.NewNonRetryableApplicationError(msg, api.ErrInvalidInput.String(), nil)
}

// loadPredictor is predictors().get with its errors classified: a
// checkpoint that is not there, is damaged or of an unknown format fails
// for good; an unusable storage path is a StorageError.
func (a *Activities) loadPredictor(ctx context.Context, uri string) (predict.Predictor, func(), error) {
	p, release, err := a.predictors().get(ctx, uri)
	switch {
	case err == nil:
		return p, release, nil
	case errors.Is(err, storage.ErrNotFound):
		return nil, nil, invalid("checkpoint = %q: not a committed checkpoint (no manifest: it does not exist, was deleted, or its commit did not finish): %v", uri, err)
	case errors.Is(err, storage.ErrCorrupt):
		return nil, nil, invalid("checkpoint = %q: damaged: %v", uri, err)
	case errors.Is(err, predict.ErrUnknownFormat):
		return nil, nil, invalid("checkpoint = %q: %v", uri, err)
	case errors.Is(err, storage.ErrMisconfigured):
		return nil, nil, temporal.NewNonRetryableApplicationError(fmt.Sprintf("checkpoint = %q: %v", uri, err), api.ErrStorage.String(), err)
	}
	return nil, nil, fmt.Errorf("load checkpoint %s: %w", uri, err)
}

// tableOptions are the TableOptions of an input.
func tableOptions(in api.BatchPredictInput) predict.TableOptions {
	o := predict.TableOptions{Features: in.Dataset.Features, PassThrough: in.PassThrough, Outputs: in.Outputs}
	if in.Dataset.Label != "" {
		o.Exclude = []string{in.Dataset.Label}
	}
	return o
}

// PlanBatchPredict checks a BatchPredict's input against what is there
// (the checkpoint's predictor, the dataset's files and columns, the
// output) and cuts the dataset into shards: a CSV file each; a Parquet
// file's row groups, consecutive ones together up to ShardRows rows, a
// larger one cut in ShardRows pieces. What no retry fixes fails
// non-retryably: an InvalidInput error naming the field or column, or a
// StorageError for an output that cannot be written.
func (a *Activities) PlanBatchPredict(ctx context.Context, pin api.PredictPlanInput) (api.PredictPlan, error) {
	defer keepAlive(ctx)()
	in := pin.Input.WithDefaults()
	if err := in.Validate(); err != nil {
		return api.PredictPlan{}, temporal.NewNonRetryableApplicationError(err.Error(), api.ErrInvalidInput.String(), err)
	}
	p, release, err := a.loadPredictor(ctx, in.Checkpoint)
	if err != nil {
		return api.PredictPlan{}, err
	}
	md := p.Metadata()
	release()
	tbl, err := openTable(ctx, in.Dataset)
	if err != nil {
		return api.PredictPlan{}, err
	}
	m, err := predict.MapTable(md, tbl.Columns(), tableOptions(in))
	if err != nil {
		return api.PredictPlan{}, invalid("dataset %s does not fit checkpoint %s: %v", in.Dataset.URI, in.Checkpoint, trimKind(err))
	}
	if err := a.checkOutput(ctx, in); err != nil {
		return api.PredictPlan{}, err
	}
	plan := api.PredictPlan{Model: md.Name, DatasetFormat: tbl.Format(), RowsIn: tbl.Rows(), Columns: outputColumns(m), Checkpoint: md.Checkpoint}
	for fi, f := range tbl.Files() {
		plan.Files = append(plan.Files, f.URI)
		add := func(lo, hi int64) {
			plan.Shards = append(plan.Shards, api.PredictShardSpec{Index: len(plan.Shards), File: fi, Lo: lo, Hi: hi})
		}
		if f.Rows < 0 {
			add(0, -1)
			continue
		}
		var lo, at int64
		for _, n := range f.RowGroups {
			if at > lo && at+n-lo > in.ShardRows {
				add(lo, at)
				lo = at
			}
			for at+n-lo > in.ShardRows {
				add(lo, lo+in.ShardRows)
				lo += in.ShardRows
			}
			at += n
		}
		if at > lo {
			add(lo, at)
		}
	}
	activity.GetLogger(ctx).Info("batch predict planned", "model", md.Name, "files", len(plan.Files), "shards", len(plan.Shards), "rows", plan.RowsIn)
	return plan, nil
}

// trimKind drops the "invalid input: " of predict's errors, which the
// message says once already.
func trimKind(err error) string {
	return strings.TrimPrefix(err.Error(), predict.ErrInvalidInput.Error()+": ")
}

func openTable(ctx context.Context, spec api.DatasetSpec) (*format.Table, error) {
	tbl, err := format.OpenTable(ctx, spec)
	switch {
	case err == nil:
		return tbl, nil
	case errors.Is(err, format.ErrInvalid):
		return nil, invalid("dataset: %v", err)
	}
	return nil, fmt.Errorf("open dataset %s: %w", spec.URI, err)
}

func outputColumns(m *predict.TableMap) []api.OutputColumn {
	src := m.Sources()
	var out []api.OutputColumn
	for j, c := range m.Columns() {
		out = append(out, api.OutputColumn{Name: c.Name, Type: c.Type.String(), Nullable: c.Nullable, Source: src[j]})
	}
	return out
}

// checkOutput proves the output writable and refuses to overwrite a
// committed output unless asked to (then its manifest goes first, so that
// it no longer reads as complete).
func (a *Activities) checkOutput(ctx context.Context, in api.BatchPredictInput) error {
	b, err := a.outputBackend(ctx, in.Output)
	if err != nil {
		return err
	}
	if err := storage.CheckBackend(ctx, b); err != nil {
		if errors.Is(err, storage.ErrMisconfigured) {
			return temporal.NewNonRetryableApplicationError(fmt.Sprintf("output = %q: %v", in.Output, err), api.ErrStorage.String(), err)
		}
		return fmt.Errorf("check output %s: %w", in.Output, err)
	}
	rc, err := b.Get(ctx, api.PredictManifestName)
	switch {
	case errors.Is(err, storage.ErrNotFound):
		return nil
	case err != nil:
		return fmt.Errorf("read %s: %w", b.URI(api.PredictManifestName), err)
	}
	rc.Close()
	if !in.Overwrite {
		return invalid("output = %q already holds a committed BatchPredict (%s): choose another output, or set overwrite", in.Output, api.PredictManifestName)
	}
	if err := b.Delete(ctx, api.PredictManifestName); err != nil {
		return fmt.Errorf("overwrite: delete %s: %w", b.URI(api.PredictManifestName), err)
	}
	return nil
}

func (a *Activities) outputBackend(ctx context.Context, output string) (storage.Backend, error) {
	b, err := a.backend(ctx, output)
	if err != nil {
		if errors.Is(err, storage.ErrMisconfigured) {
			return nil, temporal.NewNonRetryableApplicationError(fmt.Sprintf("output = %q: %v", output, err), api.ErrStorage.String(), err)
		}
		return nil, err
	}
	return b, nil
}

// shardRun is the progress of one PredictShard, read by its heartbeat.
type shardRun struct {
	index int
	total int64
	rows  atomic.Int64
	phase atomic.Value // string
}

func (s *shardRun) progress() api.PredictProgress {
	return api.PredictProgress{Shard: s.index, Rows: s.rows.Load(), Total: s.total, Phase: s.phase.Load().(string)}
}

// PredictShard predicts the rows of one shard and commits them as the
// output file {output}/part-{index:05d}.{format}, with one atomic write.
// It heartbeats {shard, rows done} every HeartbeatInterval; a cancellation
// (with a heartbeat's reply) stops it before anything is committed.
func (a *Activities) PredictShard(ctx context.Context, in api.PredictShardInput) (api.PredictShardOutput, error) {
	info := activity.GetInfo(ctx)
	s := &shardRun{index: in.Shard.Index, total: in.Shard.Rows()}
	s.phase.Store("load")
	hctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(a.o.HeartbeatInterval)
		defer t.Stop()
		for {
			a.recordHeartbeat(ctx, s.progress())
			select {
			case <-hctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	defer wg.Wait()
	defer stop()

	out, err := a.predictShard(ctx, in, s)
	if err != nil {
		return out, err
	}
	out.Attempt = int(info.Attempt)
	a.o.Logger.Info("shard predicted", "shard", in.Shard.Index, "rows", out.Rows, "file", out.File, "attempt", out.Attempt)
	return out, nil
}

func (a *Activities) predictShard(ctx context.Context, in api.PredictShardInput, s *shardRun) (api.PredictShardOutput, error) {
	bp := in.Input.WithDefaults()
	out := api.PredictShardOutput{Index: in.Shard.Index}
	p, release, err := a.loadPredictor(ctx, bp.Checkpoint)
	if err != nil {
		return out, err
	}
	defer release()
	spec := bp.Dataset
	spec.URI, spec.Format = in.File, in.DatasetFormat
	tbl, err := openTable(ctx, spec)
	if err != nil {
		return out, err
	}
	m, err := predict.MapTable(p.Metadata(), tbl.Columns(), tableOptions(bp))
	if err != nil {
		return out, invalid("%s does not fit checkpoint %s: %v", in.File, bp.Checkpoint, trimKind(err))
	}
	if got := outputColumns(m); !slices.Equal(got, in.Columns) {
		return out, invalid("%s: its output columns %v differ from the plan's %v: did the dataset change since the run started?", in.File, got, in.Columns)
	}
	b, err := a.outputBackend(ctx, bp.Output)
	if err != nil {
		return out, err
	}

	// Predict into a local temporary file.
	if err := os.MkdirAll(a.o.ScratchDir, 0o755); err != nil {
		return out, fmt.Errorf("scratch dir: %w", err)
	}
	f, err := os.CreateTemp(a.o.ScratchDir, fmt.Sprintf("predict-%05d-*.%s", in.Shard.Index, bp.Format))
	if err != nil {
		return out, fmt.Errorf("scratch file: %w", err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	bw := bufio.NewWriterSize(f, 1<<20)
	tw, err := format.NewTableWriter(bw, bp.Format, m.Columns(), format.WriterOptions{})
	if err != nil {
		return out, err
	}
	s.phase.Store("predict")
	read, err := tbl.Read(ctx, 0, in.Shard.Lo, in.Shard.Hi, m.ReadColumns(), bp.BatchSize, func(b *format.Batch) error {
		x, err := m.Inputs(b)
		if err != nil {
			return err
		}
		y, err := p.Predict(ctx, x)
		if err != nil {
			return err
		}
		r, err := m.Rows(b, y)
		if err != nil {
			return err
		}
		if err := tw.Write(r); err != nil {
			return err
		}
		s.rows.Add(int64(b.N))
		return nil
	})
	if err != nil {
		return out, a.shardError(ctx, in, err)
	}
	if err := tw.Close(); err != nil {
		return out, err
	}
	if err := bw.Flush(); err != nil {
		return out, fmt.Errorf("write %s: %w", f.Name(), err)
	}
	if tw.Rows() != read || (in.Shard.Hi >= 0 && read != in.Shard.Rows()) {
		return out, fmt.Errorf("shard %d: %d rows read, %d written, the shard has %d", in.Shard.Index, read, tw.Rows(), in.Shard.Rows())
	}
	size, err := f.Seek(0, io.SeekCurrent)
	if err != nil {
		return out, err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return out, err
	}
	// Commit: one atomic Put under the shard's name.
	s.phase.Store("commit")
	name := api.PartName(in.Shard.Index, bp.Format)
	if err := b.Put(ctx, name, f, size); err != nil {
		if errors.Is(err, storage.ErrMisconfigured) {
			return out, temporal.NewNonRetryableApplicationError(fmt.Sprintf("output = %q: %v", bp.Output, err), api.ErrStorage.String(), err)
		}
		return out, fmt.Errorf("commit %s: %w", b.URI(name), err)
	}
	out.File, out.Rows, out.Bytes = b.URI(name), read, size
	return out, nil
}

// shardError classifies an error of reading or predicting: rows that do
// not fit the model, or a file that changed or does not parse, fail for
// good; the rest may pass on a retry.
func (a *Activities) shardError(ctx context.Context, in api.PredictShardInput, err error) error {
	where := fmt.Sprintf("shard %d (%s)", in.Shard.Index, in.File)
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.Is(err, format.ErrInvalid), errors.Is(err, predict.ErrInvalidInput):
		return invalid("%s: %v", where, err)
	}
	return fmt.Errorf("%s: %w", where, err)
}

// partName matches the names of output files (part-00003.parquet).
var partName = regexp.MustCompile(`^part-[0-9]{5,}\.(parquet|csv)$`)

// CommitBatchPredict writes the output's manifest, {output}/_SUCCESS, last:
// after deleting the part files an earlier unfinished run into the same
// output left beyond this run's (its own are replaced, shard by shard), so
// that the output holds exactly this run's files.
func (a *Activities) CommitBatchPredict(ctx context.Context, in api.CommitPredictInput) error {
	defer keepAlive(ctx)()
	bp := in.Input.WithDefaults()
	b, err := a.outputBackend(ctx, bp.Output)
	if err != nil {
		return err
	}
	man := api.BatchPredictManifest{Version: api.PredictManifestVersion, Checkpoint: bp.Checkpoint, Model: in.Plan.Model,
		Dataset: bp.Dataset.URI, Format: bp.Format, Columns: in.Plan.Columns, Created: in.Created}
	ours := map[string]bool{}
	for i, sh := range in.Plan.Shards {
		name := api.PartName(sh.Index, bp.Format)
		ours[name] = true
		if i >= len(in.Rows) || i >= len(in.Bytes) {
			return fmt.Errorf("commit: %d shards, rows of %d", len(in.Plan.Shards), len(in.Rows))
		}
		man.Shards = append(man.Shards, api.ManifestPart{Index: sh.Index, File: name, Input: in.Plan.Files[sh.File],
			Lo: sh.Lo, Hi: sh.Lo + in.Rows[i], Rows: in.Rows[i], Bytes: in.Bytes[i]})
		man.RowsIn += in.Rows[i]
		man.RowsOut += in.Rows[i]
	}
	objs, err := b.List(ctx, "part-")
	if err != nil {
		return fmt.Errorf("list %s: %w", b.URI(""), err)
	}
	for _, o := range objs {
		if partName.MatchString(o.Key) && !ours[o.Key] {
			if err := b.Delete(ctx, o.Key); err != nil {
				return fmt.Errorf("delete %s of an earlier run: %w", b.URI(o.Key), err)
			}
		}
	}
	body, err := json.MarshalIndent(man, "", "  ")
	if err != nil {
		return err
	}
	body = append(body, '\n')
	if err := b.Put(ctx, api.PredictManifestName, strings.NewReader(string(body)), int64(len(body))); err != nil {
		return fmt.Errorf("write %s: %w", b.URI(api.PredictManifestName), err)
	}
	return nil
}
