package builtin

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"sync"
	"syscall"
	"time"

	"github.com/tempotrain/tempotrain/collective"
	"github.com/tempotrain/tempotrain/compute"
	"github.com/tempotrain/tempotrain/data"
	"github.com/tempotrain/tempotrain/data/format"
	"github.com/tempotrain/tempotrain/train"
)

// CheckpointFile is the name of the state file in a checkpoint directory.
const CheckpointFile = "state.ttstate"

// StateFormat is the format (Meta "format") of the built-in functions'
// checkpoints: predict.StateFormat, which predict.Load reads.
const StateFormat = "tempotrain state v1"

// TabularMLP is the name of the tabular training function, and of its
// model in checkpoints.
const TabularMLP = "tabular-mlp"

// Functions maps each built-in training function's name to its model.
var Functions = map[string]string{
	"mnist-mlp":      "mlp",
	"mnist-cnn":      "cnn",
	"mnist-resnet18": "resnet18",
	TabularMLP:       TabularMLP,
}

var once sync.Once

// Register registers the built-in training functions with train.Register,
// with no options (a rank given a GPU fails: see Options.GPUBackend). It
// may be called any number of times.
func Register() {
	once.Do(func() {
		if err := RegisterWith(Options{}); err != nil {
			panic(err)
		}
	})
}

// RegisterWith registers the built-in training functions with
// train.Register, the neural networks with o (a worker built with -tags
// cuda gives o.GPUBackend). It registers them once per process: a second
// call, or one after Register, is an error naming the taken name.
func RegisterWith(o Options) error {
	for name, model := range Functions {
		if err := train.Register(name, FuncWith(model, o)); err != nil {
			return err
		}
	}
	return train.Register(GBDT, GBDTFunc)
}

// Func returns the training function of a model ("mlp", "cnn", "resnet18",
// "tabular-mlp").
func Func(model string) train.Func { return FuncWith(model, Options{}) }

// FuncWith is Func with options (Options.AfterStep; its DDP reducer is
// the collective's buckets).
func FuncWith(model string, opts Options) train.Func {
	return func(ctx context.Context, tc *train.Context) error {
		var comm compute.Communicator
		o := opts
		if c := tc.Comm(); c != nil {
			comm = c
			o.DDP.NewReducer = func(grads [][]float32, bucketBytes int) (compute.GradReducer, error) {
				return collective.NewReducer(c, grads, bucketBytes)
			}
		} else if tc.WorldSize() > 1 {
			return fmt.Errorf("no collective group for a world of %d", tc.WorldSize())
		}
		return Run(ctx, tc, comm, model, o)
	}
}

// Options are what the runtime does not configure through JSON.
type Options struct {
	// DDP configures gradient reduction. Its BucketBytes comes from
	// Config.BucketKiB; a nil NewReducer means flat all-reduces.
	DDP compute.DDPOptions
	// AfterStep, when set, is called on every rank after each training
	// step of a run on datasets (step counts the epoch's steps done, from
	// 1; epoch counts from 0), after the checkpoint of that step if any. An
	// error ends the rank: tests inject failures with it.
	AfterStep func(tc *train.Context, epoch, step int) error
	// GPUBackend opens the compute backend of a GPU ordinal, for a rank
	// given a GPU (Context.Device). A worker built with -tags cuda gives
	// the CUDA backend (cmd/worker); without one, a rank given a GPU fails
	// non-retryably.
	GPUBackend func(device int) (compute.Backend, error)
}

// Run trains model as rank tc.WorldRank() of the group comm (nil for a
// single rank). Func calls it with tc.Comm(); tests and benchmarks may give
// another Communicator. tabular-mlp, and the other models when the run has
// datasets, train on the run's datasets (see the package doc); the others
// on Fashion-MNIST's files.
func Run(ctx context.Context, tc *train.Context, comm compute.Communicator, model string, o Options) error {
	if model == TabularMLP {
		return runDatasets(ctx, tc, comm, TabularMLP, TabularMLP, o)
	}
	if len(tc.DatasetNames()) > 0 {
		return runDatasets(ctx, tc, comm, "mnist-"+model, model, o)
	}
	cfg := Config{}
	if err := tc.Config(&cfg); err != nil {
		return err
	}
	cfg.rankThreads(tc)
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return train.NonRetryable(fmt.Errorf("config: %w", err))
	}
	if cfg.CheckpointEverySteps != 0 {
		return train.NonRetryable(fmt.Errorf("config: checkpoint_every_steps %d: mid-epoch checkpoints need the run's datasets (Fashion-MNIST's files checkpoint per epoch)", cfg.CheckpointEverySteps))
	}
	r := &runner{ctx: ctx, tc: tc, cfg: cfg, model: model, rank: tc.WorldRank(), world: tc.WorldSize()}
	if comm != nil && (comm.Rank() != r.rank || comm.Size() != r.world) {
		return fmt.Errorf("rank %d of %d: collective group says rank %d of %d", r.rank, r.world, comm.Rank(), comm.Size())
	}
	err := r.setup(comm, o)
	if r.gradMem != nil {
		// After training: every all-reduce of the gradients has returned
		// (DDP.Backward waits for its buckets).
		defer r.gradMem.Free()
	}
	if c, ok := r.be.(io.Closer); ok {
		// A GPU backend holds device memory: a long-lived worker must not
		// keep it after the rank.
		defer c.Close()
	}
	if err != nil {
		return fmt.Errorf("%s: %w", model, err)
	}
	if err := r.train(); err != nil {
		return fmt.Errorf("%s: %w", model, err)
	}
	return nil
}

type runner struct {
	ctx         context.Context
	tc          *train.Context
	cfg         Config
	model       string
	rank, world int

	be     compute.Backend
	m      *compute.Model
	opt    *compute.Optimizer
	ddp    *compute.DDP
	loss   *compute.CrossEntropy
	trainL *data.Loader
	testL  *data.Loader
	rng    *rand.PCG // draws each step's dropout seed
	sched  compute.Schedule
	x, y   compute.Tensor
	hx, hy []float32 // host batch buffers (x's and y's memory on the CPU)
	// rankBatch is the most rows a rank takes in a step; global a step's rows
	// over all ranks (Config.batches).
	rankBatch, global int
	weight            gradWeight
	startEpoch        int
	// A run preempted mid-epoch resumes startEpoch after rowsDone rows of
	// its order (0: at its start), at step startStep of this world's steps
	// (the LR schedule's clock); carry (rank 0's) holds the epoch's metric
	// sums of the steps before, over ranks of this world (seconds rescaled).
	startStep int
	rowsDone  int
	carry     [nFashionSums]float64
	gradMem   *collective.SharedBuffer // the gradient arena, when the group shares memory
}

// sharer is a Communicator that can allocate memory every rank reaches
// (*collective.Comm).
type sharer interface {
	AllocShared(ctx context.Context, bytes int) (*collective.SharedBuffer, error)
}

// shareGradients moves a CPU model's gradient arena into memory every rank
// of the group can reach, where the group shares memory (all ranks on one
// host): the gradients' all-reduces then run the direct algorithm of
// collective/shared.go instead of the ring. Every rank calls it at the same
// point of setup, as AllocShared requires; GPU ranks keep gradients on the
// device.
func (r *runner) shareGradients(comm compute.Communicator) error {
	b, err := shareGradients(r.ctx, r.tc, r.m, comm)
	r.gradMem = b
	return err
}

// shareGradients puts m's gradients in memory shared by the group, when
// it shares memory (see runner.shareGradients); it returns the buffer to
// free after training, or nil.
func shareGradients(ctx context.Context, tc *train.Context, m *compute.Model, comm compute.Communicator) (*collective.SharedBuffer, error) {
	sc, ok := comm.(sharer)
	if !ok || tc.WorldSize() < 2 || tc.Device() >= 0 {
		return nil, nil
	}
	b, err := sc.AllocShared(ctx, 4*m.G.Len())
	if err != nil {
		return nil, fmt.Errorf("gradient memory: %w", err)
	}
	if !b.Shared() {
		b.Free()
		return nil, nil
	}
	if err := m.UseGradientMemory(b.Float32s()); err != nil {
		b.Free()
		return nil, err
	}
	return b, nil
}

// backendOf opens the rank's compute backend: its GPU, or the CPU with
// cfg.Threads BLAS threads. A GPU rank's gradients are all-reduced flat
// (o's reducer is dropped).
func backendOf(tc *train.Context, cfg Config, o *Options) (compute.Backend, error) {
	if d := tc.Device(); d >= 0 {
		if o.GPUBackend == nil {
			return nil, train.NonRetryable(fmt.Errorf("this rank was given GPU %d but its worker was built without -tags cuda", d))
		}
		be, err := o.GPUBackend(d)
		if err != nil {
			return nil, fmt.Errorf("GPU %d: %w", d, err)
		}
		// Buckets reduce host gradients; a GPU model's gradients are
		// all-reduced flat.
		o.DDP.NewReducer = nil
		return be, nil
	}
	compute.SetThreads(cfg.Threads)
	return compute.CPU(), nil
}

// ddpOptions are o's DDP options as the config sets them: the bucket size,
// buckets off, or on only where enough gradients are final early.
func ddpOptions(cfg Config, o Options) compute.DDPOptions {
	d := o.DDP
	d.BucketBytes = cfg.BucketKiB << 10
	switch {
	case d.NewReducer == nil:
	case cfg.BucketKiB < 0 || cfg.Buckets == "off":
		d.NewReducer = nil
	case cfg.Buckets == "auto":
		d.MinEarlyShare = MinEarlyShare
	}
	return d
}

func (r *runner) setup(comm compute.Communicator, o Options) error {
	cfg := r.cfg
	var err error
	if r.global, r.rankBatch, err = cfg.batches(r.world); err != nil {
		return train.NonRetryable(fmt.Errorf("config: %w", err))
	}
	be, err := backendOf(r.tc, cfg, &o)
	if err != nil {
		return err
	}
	r.be = be
	trainDS, err := format.LoadFashionMNIST(cfg.DataDir, "train")
	if err != nil {
		return train.NonRetryable(err)
	}
	testDS, err := format.LoadFashionMNIST(cfg.DataDir, "t10k")
	if err != nil {
		return train.NonRetryable(err)
	}
	trainDS, testDS = trainDS.Subset(cfg.TrainLimit), testDS.Subset(cfg.TestLimit)
	norm := format.NewNormalize(format.FashionMNISTMean, format.FashionMNISTStd)
	lc := data.LoaderConfig{Rank: r.rank, World: r.world, Batch: r.rankBatch, Seed: cfg.Seed, Shuffle: true, Pad: true, Normalize: norm}
	if cfg.BatchSemantics == GlobalBatch {
		lc.GlobalBatch = r.global
	}
	if r.trainL, err = data.PrepareData(trainDS, lc); err != nil {
		return train.NonRetryable(err)
	}
	r.testL, err = data.PrepareData(testDS, data.LoaderConfig{Rank: r.rank, World: r.world, Batch: r.rankBatch, Normalize: norm})
	if err != nil {
		return train.NonRetryable(err)
	}

	if r.m, err = compute.NewModel(r.model, r.be, r.rankBatch, cfg.Seed); err != nil {
		return train.NonRetryable(err)
	}
	if err := r.shareGradients(comm); err != nil {
		return err
	}
	if r.opt, err = compute.NewOptimizer(r.m, cfg.optimizer()); err != nil {
		return train.NonRetryable(err)
	}
	r.rng = rand.NewPCG(cfg.Seed, 0x64726f70) // "drop"
	if ck := r.tc.Checkpoint(); ck != nil {
		if err := r.restore(ck); err != nil {
			return err
		}
	}
	// After a restore every rank holds the checkpoint; the broadcast makes
	// rank 0's copy authoritative either way.
	if r.ddp, err = compute.PrepareModel(r.ctx, r.m, comm, ddpOptions(cfg, o)); err != nil {
		return err
	}
	if err := r.ddp.BroadcastOptimizer(r.ctx, r.opt); err != nil {
		return err
	}
	r.loss = compute.NewCrossEntropy(r.be, r.rankBatch, 10)
	r.weight = gradWeight{be: r.be}
	r.sched = cfg.schedule(r.trainL.EpochSteps(), r.world)
	r.x = r.be.New(r.rankBatch, 1, 28, 28)
	r.y = r.be.New(r.rankBatch)
	r.hx, r.hy = r.x.Data(), r.y.Data()
	if r.hx == nil {
		r.hx, r.hy = make([]float32, r.x.Len()), make([]float32, r.y.Len())
	}
	return nil
}

// batch loads step i of loader l into the model's input tensors.
func (r *runner) batch(l *data.Loader, i int) (x, y compute.Tensor) {
	n := l.Batch(i, r.hx, r.hy)
	x, y = r.x.Rows(0, n), r.y.Rows(0, n)
	if r.x.Data() == nil {
		r.be.Upload(x, r.hx[:x.Len()])
		r.be.Upload(y, r.hy[:n])
	}
	return x, y
}

// The metric sums of an epoch, summed over ranks.
const (
	fsLoss = iota
	fsCorrect
	fsSeen
	fsSeconds
	fsCPU
	nFashionSums
)

func (r *runner) train() error {
	steps := r.trainL.EpochSteps()
	for epoch := r.startEpoch; epoch < r.cfg.Epochs; epoch++ {
		first := 0
		if epoch == r.startEpoch && r.rowsDone > 0 {
			// The rest of the epoch after the rows a checkpoint's steps
			// consumed, shared among this world's ranks.
			if err := r.trainL.Resume(epoch, r.rowsDone); err != nil {
				return err
			}
			first = r.startStep
		} else {
			r.trainL.SetEpoch(epoch)
		}
		start, cpu0 := time.Now(), processCPU()
		var lossSum float64
		var correct, seen int
		n := r.trainL.Steps()
		for i := range n {
			if err := r.ctx.Err(); err != nil {
				return err
			}
			step := first + i
			x, y := r.batch(r.trainL, i)
			r.m.SetDropoutSeed(r.rng.Uint64())
			logits := r.m.Forward(x, true)
			l, c := r.loss.Forward(logits, y, true)
			grad := r.loss.Grad(x.Dim(0))
			r.weight.apply(grad, x.Dim(0), r.world, r.trainL.StepRows(i))
			if err := r.ddp.Backward(r.ctx, grad); err != nil {
				return fmt.Errorf("epoch %d step %d: %w", epoch, step, err)
			}
			r.opt.Step(r.sched.LR(epoch*steps + min(step, steps-1)))
			lossSum += l
			correct += c
			seen += x.Dim(0)
			r.tc.AddSamples(x.Dim(0))
			r.tc.SetProgress(epoch, step+1)
			if i+1 == n {
				break // the epoch's end checkpoints anyway
			}
			stop, err := r.tc.ShouldStop(r.ctx)
			if err != nil {
				return fmt.Errorf("epoch %d step %d: %w", epoch, step, err)
			}
			if stop {
				sums := [nFashionSums]float64{lossSum, float64(correct), float64(seen), time.Since(start).Seconds(), processCPU() - cpu0}
				return r.preempt(epoch, step+1, r.trainL.Consumed(i+1), sums)
			}
		}
		elapsed, cpu := time.Since(start).Seconds(), processCPU()-cpu0
		if err := r.ddp.SyncBuffers(r.ctx); err != nil {
			return err
		}
		testCorrect, testSeen := r.evaluate()
		sums := []float64{lossSum, float64(correct), float64(seen), float64(testCorrect), float64(testSeen), elapsed, cpu}
		if epoch == r.startEpoch && r.rank == 0 {
			// The steps before a preemption, summed over ranks then.
			sums[0] += r.carry[fsLoss]
			sums[1] += r.carry[fsCorrect]
			sums[2] += r.carry[fsSeen]
			sums[5] += r.carry[fsSeconds]
			sums[6] += r.carry[fsCPU]
		}
		if err := r.ddp.SumFloat64(r.ctx, sums); err != nil {
			return err
		}
		metrics := train.Metrics{
			"epoch":          float64(epoch + 1),
			"train_loss":     sums[0] / sums[2],
			"train_accuracy": sums[1] / sums[2],
			"test_accuracy":  sums[3] / max(sums[4], 1),
			"samples_per_s":  sums[2] / (sums[5] / float64(r.world)),
			"epoch_time_s":   sums[5] / float64(r.world),
			"cpu_s":          sums[6],
		}
		var ckpt *train.Checkpoint
		if r.rank == 0 {
			var err error
			if ckpt, err = r.save(epoch+1, 0, 0, [nFashionSums]float64{}); err != nil {
				return err
			}
		}
		if err := r.tc.Report(metrics, ckpt); err != nil {
			return fmt.Errorf("report epoch %d: %w", epoch+1, err)
		}
	}
	return nil
}

// preempt checkpoints after step steps of epoch, which consumed rows rows
// of its order, because a worker of the group is stopping
// (train.Context.ShouldStop), and returns train.ErrPreempted: the next
// attempt resumes there, at any world size, so no finished step is lost.
// The epoch's metric sums so far travel in the checkpoint.
func (r *runner) preempt(epoch, step, rows int, sums [nFashionSums]float64) error {
	if epoch == r.startEpoch && r.rank == 0 {
		for i := range sums {
			sums[i] += r.carry[i]
		}
	}
	if err := r.ddp.SumFloat64(r.ctx, sums[:]); err != nil {
		return err
	}
	var ckpt *train.Checkpoint
	if r.rank == 0 {
		var err error
		if ckpt, err = r.save(epoch, step, rows, sums); err != nil {
			return err
		}
	}
	m := train.Metrics{"epoch": float64(epoch), "step": float64(step), "preempted": 1}
	if err := r.tc.Report(m, ckpt); err != nil {
		return fmt.Errorf("report the preemption checkpoint at epoch %d step %d: %w", epoch, step, err)
	}
	return fmt.Errorf("epoch %d step %d: %w", epoch, step, train.ErrPreempted)
}

// processCPU is the CPU time (user and system) of this process so far, in
// seconds.
func processCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

// evaluate counts this rank's correct predictions on its shard of the test set.
func (r *runner) evaluate() (correct, seen int) {
	// Frozen, the model computes every row as a predictor loaded from its
	// checkpoint does (package predict), so the accuracy reported here is
	// the predictor's, exactly; the next training step unfreezes it.
	r.m.Freeze()
	for i := 0; i < r.testL.Steps(); i++ {
		x, y := r.batch(r.testL, i)
		_, c := r.loss.Forward(r.m.Forward(x, false), y, false)
		correct += c
		seen += x.Dim(0)
	}
	return correct, seen
}

// State keys of a checkpoint taken mid-epoch, besides steps_done and carry
// (a checkpoint from before they existed has neither: it was taken at the
// world size and batch size that resume it, or must be).
const (
	// rowsDoneInt is the rows of the epoch's order the steps done consumed
	// over all ranks (data.Loader.Consumed, data.Position.Consumed).
	rowsDoneInt = "rows_done"
	// worldSizeInt and globalBatchInt are the world size and a step's rows
	// over all ranks at the checkpoint.
	worldSizeInt   = "world_size"
	globalBatchInt = "global_batch"
)

// save writes rank 0's checkpoint after epochs whole epochs and step steps
// of the next (0 at an epoch's end), which consumed rows rows of its order,
// with that partial epoch's metric sums.
func (r *runner) save(epochs, step, rows int, carry [nFashionSums]float64) (*train.Checkpoint, error) {
	dir, err := r.tc.NewCheckpointDir()
	if err != nil {
		return nil, err
	}
	st := compute.NewState()
	st.Blobs["model"] = []byte(r.model)
	st.Ints["epochs_done"] = int64(epochs)
	if step > 0 {
		st.Ints["steps_done"] = int64(step)
		st.Ints[rowsDoneInt] = int64(rows)
		st.Ints[worldSizeInt] = int64(r.world)
		st.Ints[globalBatchInt] = int64(r.global)
		st.Blobs["carry"] = floatsBytes(carry[:])
	}
	rng, err := r.rng.MarshalBinary()
	if err != nil {
		return nil, err
	}
	st.Blobs["rng.dropout"] = rng
	r.m.Save(st)
	r.opt.Save(st)
	ck := train.NewCheckpoint(dir)
	if err := st.SaveFile(ck.Path(CheckpointFile)); err != nil {
		return nil, err
	}
	ck.Meta = map[string]string{"model": r.model, "format": StateFormat, "file": CheckpointFile}
	return ck, nil
}

func (r *runner) restore(ck *train.Checkpoint) error {
	st, err := compute.LoadFile(ck.Path(CheckpointFile))
	if err != nil {
		return fmt.Errorf("resume from checkpoint %s: %w", ck, err)
	}
	if m := string(st.Blobs["model"]); m != r.model {
		return train.NonRetryable(fmt.Errorf("resume from checkpoint %s: it holds model %q, this run trains %q", ck, m, r.model))
	}
	epochs, err := st.Int("epochs_done")
	if err != nil {
		return fmt.Errorf("resume from checkpoint %s: %w", ck, err)
	}
	if err := r.m.Load(st); err != nil {
		return fmt.Errorf("resume from checkpoint %s: %w", ck, err)
	}
	if err := r.opt.Load(st); err != nil {
		return fmt.Errorf("resume from checkpoint %s: %w", ck, err)
	}
	if err := r.rng.UnmarshalBinary(st.Blobs["rng.dropout"]); err != nil {
		return fmt.Errorf("resume from checkpoint %s: rng.dropout: %w", ck, err)
	}
	r.startEpoch = int(epochs)
	if step, ok := st.Ints["steps_done"]; ok {
		if err := bytesFloats(st.Blobs["carry"], r.carry[:]); err != nil {
			return fmt.Errorf("resume from checkpoint %s: carry: %w", ck, err)
		}
		world, global, rows := int64(r.world), int64(r.global), step*int64(r.global)
		if n, ok := st.Ints[rowsDoneInt]; ok {
			rows, world, global = n, st.Ints[worldSizeInt], st.Ints[globalBatchInt]
		}
		if world < 1 || global < 1 || rows < 1 {
			return fmt.Errorf("resume from checkpoint %s: mid-epoch at %d rows of %d ranks, %d a step", ck, rows, world, global)
		}
		r.rowsDone, r.startStep = int(rows), int(step)
		if global != int64(r.global) {
			// Steps of another size: the step of this size as many rows make.
			r.startStep = int(rows / int64(r.global))
		}
		r.carry[fsSeconds] *= float64(r.world) / float64(world)
	}
	return nil
}

// gradWeight weighs a rank's gradient when the ranks' batches of a step
// differ (a global batch the world size does not divide): the all-reduce
// averages the ranks' gradients of their mean losses, so a rank with n of
// the step's rows scales its own by n·world/rows, making the average the
// gradient of the mean loss over the step's rows.
type gradWeight struct {
	be compute.Backend
	w  compute.Tensor
	v  float32
}

func (g *gradWeight) apply(grad compute.Tensor, n, world, rows int) {
	if n*world == rows || rows == 0 {
		return
	}
	v := float32(float64(n*world) / float64(rows))
	if g.w.IsZero() || g.w.Len() < grad.Len() {
		g.w, g.v = g.be.New(grad.Len()), 0
	}
	if g.v != v {
		g.be.Fill(g.w, v)
		g.v = v
	}
	g.be.Mul(grad, grad, g.w.Flat(0, grad.Len()))
}

func floatsBytes(v []float64) []byte {
	b := make([]byte, 8*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(x))
	}
	return b
}

func bytesFloats(b []byte, dst []float64) error {
	if len(b) != 8*len(dst) {
		return fmt.Errorf("%d bytes, want %d", len(b), 8*len(dst))
	}
	for i := range dst {
		dst[i] = math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:]))
	}
	return nil
}
