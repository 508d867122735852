package builtin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"time"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/collective"
	"github.com/tempotrain/tempotrain/compute"
	"github.com/tempotrain/tempotrain/data"
	"github.com/tempotrain/tempotrain/data/format"
	"github.com/tempotrain/tempotrain/train"
)

// State keys of a checkpoint trained on the run's datasets, besides the
// model's and the optimizer's.
const (
	// ModelBlob holds a ModelInfo as JSON: what a predictor needs to rebuild
	// the model.
	ModelBlob = "model.json"
	// epochSumsBlob holds the sums of the epoch's metrics so far (JSON),
	// for a checkpoint taken mid-epoch.
	epochSumsBlob = "epoch_sums.json"
	// stepsDoneInt counts the steps done in the epoch epochs_done (0 at the
	// end of an epoch).
	stepsDoneInt = "steps_done"
)

// ModelInfo describes a model trained on datasets; a checkpoint holds it
// as JSON (ModelBlob) beside the parameters, the pipeline
// (data.PipelineFile) and the train shard's position.
type ModelInfo struct {
	// Function is the training function ("tabular-mlp", "mnist-cnn").
	Function string `json:"function"`
	// Model is the network: "tabular-mlp", or compute's "mlp", "cnn",
	// "resnet18".
	Model string `json:"model"`
	// Task is "classification" or "regression".
	Task string `json:"task"`
	// Input is the shape of one row's features, after the pipeline.
	Input []int `json:"input"`
	// Outputs of the network: the classes, or 1.
	Outputs int `json:"outputs"`
	// Hidden sizes of tabular-mlp.
	Hidden []int `json:"hidden,omitempty"`
	// Classes name the class numbers (classification).
	Classes []string `json:"classes,omitempty"`
	// TargetMean and TargetStd: the network predicts (y - mean) / std
	// (regression; 0 and 1 when the target is not standardised).
	TargetMean float64 `json:"target_mean,omitempty"`
	TargetStd  float64 `json:"target_std,omitempty"`
}

// ReadModelInfo reads the ModelInfo of a state, or reports that it has
// none (a checkpoint of a function run on Fashion-MNIST's files).
func ReadModelInfo(st *compute.State) (ModelInfo, bool, error) {
	b, ok := st.Blobs[ModelBlob]
	if !ok {
		return ModelInfo{}, false, nil
	}
	var mi ModelInfo
	if err := json.Unmarshal(b, &mi); err != nil {
		return mi, true, fmt.Errorf("state blob %s: %w", ModelBlob, err)
	}
	return mi, true, nil
}

// BuildModel builds the network a ModelInfo describes, for batches up to
// maxBatch (its parameters are then loaded from a state).
func BuildModel(be compute.Backend, mi ModelInfo, maxBatch int, seed uint64) (*compute.Model, error) {
	if mi.Model == TabularMLP {
		if len(mi.Input) != 1 {
			return nil, fmt.Errorf("tabular-mlp: input shape %v, want [width]", mi.Input)
		}
		return compute.NewMLP(be, mi.Input[0], mi.Hidden, mi.Outputs, maxBatch, seed)
	}
	return compute.NewModelFor(mi.Model, be, mi.Input, mi.Outputs, maxBatch, seed)
}

// dsRunner trains a network on the run's datasets: the "train" dataset's
// shard through its fitted (or restored) pipeline, every other dataset
// evaluated after each epoch, checkpoints with the model, the pipeline and
// the train shard's position, resumable mid-epoch.
type dsRunner struct {
	ctx         context.Context
	tc          *train.Context
	cfg         Config
	o           Options
	info        ModelInfo
	rank, world int
	// standardize: a regression target is standardised from the train
	// data on a fresh run.
	standardize bool
	// defaultPre: without preprocessors in the Fit input, fit an imputer,
	// a scaler and an encoder over every column (tabular-mlp).
	defaultPre bool

	be      compute.Backend
	m       *compute.Model
	opt     *compute.Optimizer
	ddp     *compute.DDP
	ce      *compute.CrossEntropy
	mse     *compute.MSE
	sched   compute.Schedule
	gradMem *collective.SharedBuffer

	train *data.Shard
	evals []*evalSet
	pipe  *data.Pipeline
	// classValue maps a class number to its value, when the config's task
	// is regression and the datasets read the label as classes.
	classValue []float32

	x, y   compute.Tensor
	hx, hy []float32
	lab    []float32 // the batch's labels as the shard gives them
	// rankBatch is the most rows a rank takes in a step; global a step's
	// rows over all ranks (Config.batches).
	rankBatch, global int
	weight            gradWeight

	// A run resumed from a mid-epoch checkpoint (resumeMid) goes on with
	// step startStep of epoch startEpoch: the step of this world's steps
	// that the rows consumed make (data.Position.Batches after the seek).
	startEpoch, startStep int
	resumeMid             bool
	// carry holds, on rank 0, the sums of the epoch's metrics over all
	// ranks up to the last mid-epoch checkpoint (zero elsewhere); its
	// seconds are summed over as many ranks as this world has (rescaled
	// when a checkpoint of another world size resumes).
	carry [nTrainSums]float64
	// stepsPerEpoch is the train shard's steps (LR schedule).
	stepsPerEpoch int
}

// evalSet is an evaluation dataset and how many of this rank's rows count
// (-1: all).
type evalSet struct {
	name  string
	s     *data.Shard
	count int64
	warn  string
}

// The training sums of an epoch, per rank, then summed over ranks.
const (
	sumLoss    = iota // the loss, summed over rows
	sumHits           // correct rows (classification), squared error in label units (regression)
	sumRows           // rows
	sumSeconds        // wall seconds of the loop
	sumCPU            // CPU seconds of the loop
	nTrainSums
)

// runDatasets is Run for a function that reads the run's datasets.
func runDatasets(ctx context.Context, tc *train.Context, comm compute.Communicator, fn, model string, o Options) error {
	r := &dsRunner{ctx: ctx, tc: tc, o: o, rank: tc.WorldRank(), world: tc.WorldSize()}
	r.info = ModelInfo{Function: fn, Model: model}
	if model == TabularMLP {
		tcfg := TabularConfig{}
		if err := tc.Config(&tcfg); err != nil {
			return err
		}
		if err := tcfg.setDefaults(); err != nil {
			return train.NonRetryable(fmt.Errorf("config: %w", err))
		}
		r.cfg, r.info.Hidden, r.info.Task = tcfg.Config, tcfg.Hidden, tcfg.Task
		r.standardize, r.defaultPre = *tcfg.StandardizeTarget, true
	} else {
		cfg := Config{}
		if err := tc.Config(&cfg); err != nil {
			return err
		}
		if err := cfg.datasetFields(); err != nil {
			return train.NonRetryable(fmt.Errorf("config: %w", err))
		}
		cfg.setDefaults()
		if err := cfg.validate(); err != nil {
			return train.NonRetryable(fmt.Errorf("config: %w", err))
		}
		r.cfg, r.standardize = cfg, true
	}
	if comm != nil && (comm.Rank() != r.rank || comm.Size() != r.world) {
		return fmt.Errorf("rank %d of %d: collective group says rank %d of %d", r.rank, r.world, comm.Rank(), comm.Size())
	}
	err := r.setup(comm)
	if r.gradMem != nil {
		defer r.gradMem.Free()
	}
	if c, ok := r.be.(io.Closer); ok {
		defer c.Close()
	}
	defer r.close()
	if err != nil {
		return fmt.Errorf("%s: %w", fn, err)
	}
	if err := r.loop(); err != nil {
		return fmt.Errorf("%s: %w", fn, err)
	}
	return nil
}

func (r *dsRunner) close() {
	if r.train != nil {
		r.train.Close()
	}
	for _, e := range r.evals {
		e.s.Close()
	}
}

// invalid makes a dataset error that no restart fixes non-retryable.
func invalid(err error) error {
	if errors.Is(err, data.ErrInvalid) && !train.IsNonRetryable(err) {
		return train.NonRetryable(err)
	}
	return err
}

func (r *dsRunner) setup(comm compute.Communicator) error {
	cfg := r.cfg
	be, err := backendOf(r.tc, cfg, &r.o)
	if err != nil {
		return err
	}
	r.be = be
	if !slices.Contains(r.tc.DatasetNames(), api.TrainDataset) {
		return train.NonRetryable(fmt.Errorf(`the run has no "train" dataset (it has: %v): give one in the Fit input's datasets (starter: -dataset train=URI)`, r.tc.DatasetNames()))
	}
	if r.global, r.rankBatch, err = cfg.batches(r.world); err != nil {
		return train.NonRetryable(fmt.Errorf("config: %w", err))
	}
	dopt := train.DatasetOptions{BatchSize: r.rankBatch, Seed: cfg.Seed}
	if r.train, err = r.tc.Dataset(r.ctx, api.TrainDataset, dopt); err != nil {
		return err
	}
	if cfg.BatchSemantics == GlobalBatch {
		if err := r.train.SetGlobalBatchSize(r.global); err != nil {
			return invalid(err)
		}
	}
	if set := r.train.Position().Settings; set.Remainder == "exact" && r.world > 1 {
		return train.NonRetryable(fmt.Errorf(`datasets.train.remainder is "exact": ranks would take different numbers of steps; training needs "pad" (the default) or "drop"`))
	}
	ck := r.tc.Checkpoint()
	var st *compute.State
	if ck != nil {
		if st, err = r.readCheckpoint(ck); err != nil {
			return err
		}
		if r.pipe, err = data.LoadPipeline(ck.Dir); err != nil {
			return fmt.Errorf("resume from checkpoint %s: %w", ck, err)
		}
		if err := r.train.SetPipeline(r.pipe); err != nil {
			return invalid(fmt.Errorf("resume from checkpoint %s: its preprocessors do not apply to datasets.train: %w", ck, err))
		}
	} else if err := r.fit(); err != nil {
		return err
	}
	if err := r.labels(st != nil); err != nil {
		return err
	}
	for _, name := range r.tc.DatasetNames() {
		if name == api.TrainDataset {
			continue
		}
		s, err := r.tc.Dataset(r.ctx, name, dopt)
		if err != nil {
			return err
		}
		e := &evalSet{name: name, s: s}
		r.evals = append(r.evals, e)
		if s.Label().Column == "" {
			return train.NonRetryable(fmt.Errorf(`datasets.%s has no label: it is evaluated after every epoch, which needs its "label" column (%q, as datasets.train's)`, name, r.pipe.Label.Column))
		}
		if err := s.SetPipeline(r.pipe); err != nil {
			return invalid(err)
		}
		e.count, e.warn = evalCount(s, r.rank, r.world)
		if e.warn != "" && r.rank == 0 {
			r.tc.Logger().Warn("dataset "+name+": "+e.warn, "dataset", name)
		}
	}

	shape := r.train.Shape()
	if st == nil {
		r.info.Input = shape
	} else if !slices.Equal(r.info.Input, shape) {
		return train.NonRetryable(fmt.Errorf("resume from checkpoint %s: its model takes rows of shape %v, datasets.train now gives %v", ck, r.info.Input, shape))
	}
	if r.m, err = BuildModel(r.be, r.info, r.rankBatch, cfg.Seed); err != nil {
		return train.NonRetryable(err)
	}
	if r.gradMem, err = shareGradients(r.ctx, r.tc, r.m, comm); err != nil {
		return err
	}
	if r.opt, err = compute.NewOptimizer(r.m, cfg.optimizer()); err != nil {
		return train.NonRetryable(err)
	}
	if st != nil {
		if err := r.m.Load(st); err != nil {
			return train.NonRetryable(fmt.Errorf("resume from checkpoint %s: %w (config hidden %v)", ck, err, r.info.Hidden))
		}
		if err := r.opt.Load(st); err != nil {
			return train.NonRetryable(fmt.Errorf("resume from checkpoint %s: %w", ck, err))
		}
	}
	if r.ddp, err = compute.PrepareModel(r.ctx, r.m, comm, ddpOptions(cfg, r.o)); err != nil {
		return err
	}
	if err := r.ddp.BroadcastOptimizer(r.ctx, r.opt); err != nil {
		return err
	}
	if r.info.Task == "classification" {
		r.ce = compute.NewCrossEntropy(r.be, r.rankBatch, r.info.Outputs)
	} else {
		r.mse = compute.NewMSE(r.be, r.rankBatch, 1)
		if st == nil {
			if err := r.targetStats(); err != nil {
				return err
			}
		}
	}
	r.stepsPerEpoch = r.train.Steps()
	r.sched = cfg.schedule(r.stepsPerEpoch, r.world)
	r.weight = gradWeight{be: r.be}
	r.x = r.be.New(append([]int{r.rankBatch}, shape...)...)
	r.y = r.be.New(r.rankBatch)
	r.hx, r.hy = r.x.Data(), r.y.Data()
	if r.hx == nil {
		r.hx, r.hy = make([]float32, r.x.Len()), make([]float32, r.y.Len())
	}
	r.lab = r.hy
	if r.info.Task == "regression" {
		r.lab = make([]float32, r.rankBatch)
	}
	if st != nil && r.startStep > 0 {
		if err := r.resumeData(ck); err != nil {
			return err
		}
	}
	return nil
}

// resumeData moves the train shard to a mid-epoch checkpoint's position.
// At another world size or batch size the shard shares the rest of the
// epoch among this world's ranks (data.Shard.Seek), the run goes on at the
// step of this world's steps that the rows consumed make, and the carried
// seconds are rescaled to this world's ranks.
func (r *dsRunner) resumeData(ck *train.Checkpoint) error {
	saved, err := data.ReadPosition(ck.Dir, api.TrainDataset)
	if err != nil {
		return fmt.Errorf("resume from checkpoint %s: its train data position: %w", ck, err)
	}
	if err := r.train.Seek(saved); err != nil {
		if errors.Is(err, data.ErrPositionMismatch) {
			return train.NonRetryable(fmt.Errorf("resume mid-epoch from checkpoint %s: %w", ck, err))
		}
		return fmt.Errorf("resume from checkpoint %s: %w", ck, err)
	}
	p := r.train.Position()
	same := saved.Settings.WorldSize == r.world && saved.Settings.RowsPerStep() == r.train.GlobalBatchSize()
	if p.Epoch != r.startEpoch || same && p.Batches != r.startStep {
		return fmt.Errorf("resume from checkpoint %s: its data position is epoch %d batch %d, its state says epoch %d step %d",
			ck, p.Epoch, p.Batches, r.startEpoch, r.startStep)
	}
	r.startStep, r.resumeMid = p.Batches, true
	if w := saved.Settings.WorldSize; w != r.world && w > 0 {
		r.carry[sumSeconds] *= float64(r.world) / float64(w)
	}
	return nil
}

// fit fits the run's preprocessors on the train shard over all ranks (or,
// for tabular-mlp without any, an imputer and a scaler over the numeric
// columns and a one-hot encoder over the categorical ones).
func (r *dsRunner) fit() error {
	specs := r.tc.Preprocessors()
	if len(specs) == 0 && r.defaultPre {
		specs = DefaultPreprocessors(r.train.Columns())
	}
	if len(specs) == 0 {
		r.pipe = r.train.Pipeline()
		return nil
	}
	p, err := r.train.Fit(r.ctx, specs)
	if err != nil {
		return invalid(err)
	}
	r.pipe = p
	return nil
}

// DefaultPreprocessors are tabular-mlp's preprocessors when the Fit input
// has none: missing numbers imputed with the mean, then standardised;
// categorical columns one-hot encoded (a missing or unseen category as all
// zeros).
func DefaultPreprocessors(cols []format.ColumnInfo) []api.PreprocessorSpec {
	var num, cat []string
	for _, c := range cols {
		if c.Kind == format.Numeric {
			num = append(num, c.Name)
		} else {
			cat = append(cat, c.Name)
		}
	}
	var specs []api.PreprocessorSpec
	if len(num) > 0 {
		specs = append(specs,
			api.PreprocessorSpec{Type: api.SimpleImputer, Columns: num, Strategy: "mean"},
			api.PreprocessorSpec{Type: api.StandardScaler, Columns: num})
	}
	if len(cat) > 0 {
		specs = append(specs, api.PreprocessorSpec{Type: api.OneHotEncoder, Columns: cat})
	}
	return specs
}

// labels settles the task, the outputs and the classes from the pipeline's
// label (fresh run) or checks them against the checkpoint's (resume).
func (r *dsRunner) labels(resumed bool) error {
	lab := r.pipe.Label
	if lab.Column == "" {
		return train.NonRetryable(errors.New(`datasets.train has no label: set its "label" column (starter: -label NAME)`))
	}
	task := r.info.Task
	if task == "" {
		task = lab.Task
	}
	switch {
	case task == "classification" && lab.Task != "classification":
		return train.NonRetryable(fmt.Errorf(`config task "classification", but datasets.train.task is %q: the label's classes are found when the dataset is read; set "task": "classification" on the datasets`, lab.Task))
	case task == "regression" && lab.Task == "classification":
		if !lab.Numeric {
			return train.NonRetryable(fmt.Errorf(`config task "regression", but label %q holds strings: a regression target must be numeric`, lab.Column))
		}
		// The datasets read the label as classes: map them back to their
		// values (every value of the other datasets must then be one the
		// train data has; "task": "regression" on the datasets avoids that).
		r.classValue = make([]float32, len(lab.Classes))
		for i, c := range lab.Classes {
			var v float64
			if _, err := fmt.Sscan(c, &v); err != nil {
				return fmt.Errorf("label class %q is not a number: %w", c, err)
			}
			r.classValue[i] = float32(v)
		}
	}
	outputs, classes := 1, []string(nil)
	if task == "classification" {
		outputs, classes = len(lab.Classes), lab.Classes
	}
	if resumed {
		if r.info.Task != task || r.info.Outputs != outputs || !slices.Equal(r.info.Classes, classes) {
			return train.NonRetryable(fmt.Errorf("resume: the checkpoint's model is a %s with %d outputs (classes %v); this run's data makes a %s with %d (classes %v)",
				r.info.Task, r.info.Outputs, r.info.Classes, task, outputs, classes))
		}
		return nil
	}
	r.info.Task, r.info.Outputs, r.info.Classes = task, outputs, classes
	r.info.TargetMean, r.info.TargetStd = 0, 1
	return nil
}

// evalCount says how many of its rows a rank counts in an evaluation, so
// that every row of the dataset counts once over the ranks: all of them
// under remainder "exact"; under "pad" in memory, the rows before the
// padding (rank r's k-th row is row r + k·W of the epoch's order, padding
// where that passes the end). A streamed shard under "pad" mixes its padded
// rows into its last shuffle window, and "drop" leaves rows out: those
// count as read, with a warning.
func evalCount(s *data.Shard, rank, world int) (int64, string) {
	set := s.Position().Settings
	switch {
	case set.Remainder == "exact" || world == 1:
		return -1, ""
	case set.Remainder == "pad" && set.Mode == "memory":
		n := s.TotalRows()
		if int64(rank) >= n {
			return 0, ""
		}
		return (n - int64(rank) + int64(world) - 1) / int64(world), ""
	case set.Remainder == "pad":
		return -1, fmt.Sprintf(`streamed under remainder "pad", the %d padded rows count twice in its metrics: set "remainder": "exact" on it`,
			s.Len()*int64(world)-s.TotalRows())
	}
	return -1, fmt.Sprintf(`remainder %q leaves %d rows out of its metrics: set "remainder": "exact" on it`, set.Remainder, s.TotalRows()%int64(world))
}

// targetStats standardises a regression target: the mean and standard
// deviation of the train labels over all ranks (one read of the data;
// under remainder pad the few padded rows count twice).
func (r *dsRunner) targetStats() error {
	if !r.standardize {
		return nil
	}
	if err := r.train.SetEpoch(0); err != nil {
		return err
	}
	// Each rank's count, mean and sum of squared deviations (Welford), in
	// its own slots: the sum over ranks gathers them.
	all := make([]float64, 3*r.world)
	var n, mean, m2 float64
	for {
		k, err := r.train.Next(r.ctx, r.hxOrScratch(), r.labOrScratch())
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return invalid(err)
		}
		for _, v := range r.labels32(r.labOrScratch()[:k]) {
			n++
			d := float64(v) - mean
			mean += d / n
			m2 += d * (float64(v) - mean)
		}
	}
	all[3*r.rank], all[3*r.rank+1], all[3*r.rank+2] = n, mean, m2
	if err := r.ddp.SumFloat64(r.ctx, all); err != nil {
		return err
	}
	var total, sum float64
	for q := 0; q < r.world; q++ {
		total += all[3*q]
		sum += all[3*q] * all[3*q+1]
	}
	if total == 0 {
		return nil
	}
	mu := sum / total
	var ss float64
	for q := 0; q < r.world; q++ {
		d := all[3*q+1] - mu
		ss += all[3*q+2] + all[3*q]*d*d
	}
	std := math.Sqrt(ss / total)
	if !(std > 0) || math.IsInf(std, 0) {
		std = 1
	}
	r.info.TargetMean, r.info.TargetStd = mu, std
	return nil
}

// hxOrScratch and labOrScratch are batch buffers for targetStats, which
// runs before the model's tensors exist.
func (r *dsRunner) hxOrScratch() []float32 {
	if len(r.hx) < r.rankBatch*r.train.Width() {
		r.hx = make([]float32, r.rankBatch*r.train.Width())
	}
	return r.hx
}

func (r *dsRunner) labOrScratch() []float32 {
	if len(r.lab) < r.rankBatch {
		r.lab = make([]float32, r.rankBatch)
	}
	return r.lab
}

// labels32 turns the shard's labels into target values in place (class
// numbers into their values under the config's task override).
func (r *dsRunner) labels32(lab []float32) []float32 {
	if r.classValue != nil {
		for i, c := range lab {
			lab[i] = r.classValue[int(c)]
		}
	}
	return lab
}

// next reads the next batch of s into the model's input and target
// tensors; n is 0 at the end of the epoch. For a regression, lab holds
// the labels in their units and y the network's targets.
func (r *dsRunner) next(s *data.Shard) (x, y compute.Tensor, n int, err error) {
	n, err = s.Next(r.ctx, r.hx, r.lab)
	if errors.Is(err, io.EOF) {
		return x, y, 0, nil
	}
	if err != nil {
		if r.classValue != nil && errors.Is(err, data.ErrInvalid) {
			err = fmt.Errorf(`%w (config task "regression" reads the label through the train data's values: set "task": "regression" on every dataset)`, err)
		}
		return x, y, 0, invalid(err)
	}
	if r.info.Task == "regression" {
		r.labels32(r.lab[:n])
		mu, sd := r.info.TargetMean, r.info.TargetStd
		for i, v := range r.lab[:n] {
			r.hy[i] = float32((float64(v) - mu) / sd)
		}
	}
	x, y = r.x.Rows(0, n), r.y.Rows(0, n)
	if r.x.Data() == nil {
		r.be.Upload(x, r.hx[:x.Len()])
		r.be.Upload(y, r.hy[:n])
	}
	return x, y, n, nil
}

func (r *dsRunner) loop() error {
	cfg := r.cfg
	steps := r.stepsPerEpoch
	for epoch := r.startEpoch; epoch < cfg.Epochs; epoch++ {
		step := 0
		if epoch == r.startEpoch && r.resumeMid {
			step = r.startStep
		} else if err := r.train.SetEpoch(epoch); err != nil {
			return err
		}
		var acc [nTrainSums]float64
		seg, cpu0 := time.Now(), processCPU()
		for ; ; step++ {
			if err := r.ctx.Err(); err != nil {
				return err
			}
			x, y, n, err := r.next(r.train)
			if err != nil {
				return fmt.Errorf("epoch %d step %d: %w", epoch, step, err)
			}
			if n == 0 {
				break
			}
			// The schedule's clock: a resumed epoch may take a step more
			// than the epoch of this world's steps (padding).
			global := epoch*steps + min(step, steps-1)
			r.m.SetDropoutSeed(stepSeed(cfg.Seed, global))
			out := r.m.Forward(x, true)
			var loss, hits float64
			var grad compute.Tensor
			if r.ce != nil {
				l, c := r.ce.Forward(out, y, true)
				loss, hits, grad = l, float64(c), r.ce.Grad(n)
			} else {
				loss = r.mse.Forward(out, y, true)
				hits, grad = loss*r.info.TargetStd*r.info.TargetStd, r.mse.Grad(n)
			}
			r.weight.apply(grad, n, r.world, r.train.StepRows())
			if math.IsNaN(loss) || math.IsInf(loss, 0) {
				return train.NonRetryable(fmt.Errorf("epoch %d step %d: the loss is %v: missing values reach the model (impute them: simple_imputer), or training diverged (lower lr)", epoch, step, loss))
			}
			if err := r.ddp.Backward(r.ctx, grad); err != nil {
				return fmt.Errorf("epoch %d step %d: %w", epoch, step, err)
			}
			r.opt.Step(r.sched.LR(global))
			acc[sumLoss] += loss
			acc[sumHits] += hits
			acc[sumRows] += float64(n)
			r.tc.AddSamples(n)
			r.tc.SetProgress(epoch, step+1)
			more := r.train.Left() > 0
			if every := cfg.CheckpointEverySteps; every > 0 && (step+1)%every == 0 && more {
				acc[sumSeconds] += time.Since(seg).Seconds()
				acc[sumCPU] += processCPU() - cpu0
				if err := r.midEpoch(epoch, step+1, &acc); err != nil {
					return err
				}
				seg, cpu0 = time.Now(), processCPU()
			} else if more {
				// A worker of the group is stopping: checkpoint here, so
				// the next attempt loses no finished step.
				stop, err := r.tc.ShouldStop(r.ctx)
				if err != nil {
					return fmt.Errorf("epoch %d step %d: %w", epoch, step, err)
				}
				if stop {
					acc[sumSeconds] += time.Since(seg).Seconds()
					acc[sumCPU] += processCPU() - cpu0
					if err := r.midEpoch(epoch, step+1, &acc); err != nil {
						return err
					}
					return fmt.Errorf("epoch %d step %d: %w", epoch, step+1, train.ErrPreempted)
				}
			}
			if h := r.o.AfterStep; h != nil {
				if err := h(r.tc, epoch, step+1); err != nil {
					return err
				}
			}
		}
		acc[sumSeconds] += time.Since(seg).Seconds()
		acc[sumCPU] += processCPU() - cpu0
		if err := r.endEpoch(epoch, &acc); err != nil {
			return err
		}
	}
	return nil
}

// stepSeed is the dropout seed of a global step: a function of (seed,
// step) alone, so a resumed run draws the same masks with no generator
// state in the checkpoint.
func stepSeed(seed uint64, step int) uint64 {
	z := seed ^ uint64(step)*0x9e3779b97f4a7c15
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// midEpoch checkpoints after step steps of epoch: the ranks sum their
// metrics so far into rank 0's carry, so the epoch's metrics come out the
// same, bit for bit, whether or not the run was interrupted here.
func (r *dsRunner) midEpoch(epoch, step int, acc *[nTrainSums]float64) error {
	sums := *acc
	if err := r.ddp.SumFloat64(r.ctx, sums[:]); err != nil {
		return err
	}
	if r.rank == 0 {
		for i := range sums {
			r.carry[i] += sums[i]
		}
	}
	*acc = [nTrainSums]float64{}
	if err := r.ddp.SyncBuffers(r.ctx); err != nil {
		return err
	}
	steps := max(r.stepsPerEpoch, 1)
	global := epoch*steps + min(step, steps-1)
	metrics := train.Metrics{"epoch": float64(epoch) + float64(min(step, steps-1))/float64(steps), "steps": float64(global)}
	var ckpt *train.Checkpoint
	if r.rank == 0 {
		var err error
		if ckpt, err = r.save(epoch, step); err != nil {
			return err
		}
	}
	if err := r.tc.Report(metrics, ckpt); err != nil {
		return fmt.Errorf("report epoch %d step %d: %w", epoch, step, err)
	}
	return nil
}

// endEpoch evaluates, reports the epoch's metrics and checkpoints.
func (r *dsRunner) endEpoch(epoch int, acc *[nTrainSums]float64) error {
	if err := r.ddp.SyncBuffers(r.ctx); err != nil {
		return err
	}
	sums := make([]float64, nTrainSums, nTrainSums+nEvalSums*len(r.evals))
	for i := range acc {
		sums[i] = acc[i] + r.carry[i]
	}
	r.carry = [nTrainSums]float64{}
	for _, e := range r.evals {
		es, err := r.evaluate(e)
		if err != nil {
			return fmt.Errorf("epoch %d: evaluate %s: %w", epoch, e.name, err)
		}
		sums = append(sums, es[:]...)
	}
	if err := r.ddp.SumFloat64(r.ctx, sums); err != nil {
		return err
	}
	rows := max(sums[sumRows], 1)
	secs := sums[sumSeconds] / float64(r.world)
	metrics := train.Metrics{
		"epoch":         float64(epoch + 1),
		"train_loss":    sums[sumLoss] / rows,
		"samples_per_s": sums[sumRows] / secs,
		"epoch_time_s":  secs,
		"cpu_s":         sums[sumCPU],
	}
	if r.info.Task == "classification" {
		metrics["train_accuracy"] = sums[sumHits] / rows
	} else {
		metrics["train_rmse"] = math.Sqrt(sums[sumHits] / rows)
	}
	for i, e := range r.evals {
		es := sums[nTrainSums+i*nEvalSums : nTrainSums+(i+1)*nEvalSums]
		n := max(es[evalRows], 1)
		metrics[e.name+"_loss"] = es[evalLoss] / n
		if r.info.Task == "classification" {
			metrics[e.name+"_accuracy"] = es[evalHits] / n
			continue
		}
		metrics[e.name+"_rmse"] = math.Sqrt(es[evalHits] / n)
		metrics[e.name+"_mae"] = es[evalAbs] / n
		// Deviations from the train mean, which is close to this set's:
		// no cancellation to speak of.
		ssTot := es[evalY2] - es[evalY]*es[evalY]/n
		if ssTot > 0 {
			metrics[e.name+"_r2"] = 1 - es[evalHits]/ssTot
		}
	}
	var ckpt *train.Checkpoint
	if r.rank == 0 {
		var err error
		if ckpt, err = r.save(epoch+1, 0); err != nil {
			return err
		}
	}
	if err := r.tc.Report(metrics, ckpt); err != nil {
		return fmt.Errorf("report epoch %d: %w", epoch+1, err)
	}
	return nil
}

// The sums of an evaluation, per rank, then over ranks.
const (
	evalLoss = iota // the loss, summed over rows
	evalHits        // correct rows, or squared error in label units
	evalRows
	evalAbs // absolute error in label units (regression)
	evalY   // labels minus the train mean, and their squares (regression)
	evalY2
	nEvalSums
)

// evaluate runs the model over this rank's rows of an evaluation dataset.
func (r *dsRunner) evaluate(e *evalSet) ([nEvalSums]float64, error) {
	var s [nEvalSums]float64
	if err := e.s.SetEpoch(0); err != nil {
		return s, err
	}
	left := e.count
	var host []float32
	r.m.Freeze() // as in runner.evaluate: the predictor's arithmetic, row for row
	for left != 0 {
		x, y, n, err := r.next(e.s)
		if err != nil {
			return s, err
		}
		if n == 0 {
			break
		}
		if left > 0 {
			n = int(min(int64(n), left))
			left -= int64(n)
			x, y = x.Rows(0, n), y.Rows(0, n)
		}
		out := r.m.Forward(x, false)
		s[evalRows] += float64(n)
		if r.ce != nil {
			l, c := r.ce.Forward(out, y, false)
			s[evalLoss] += l
			s[evalHits] += float64(c)
			continue
		}
		s[evalLoss] += r.mse.Forward(out, y, false)
		p := out.Data()
		if p == nil {
			host = slices.Grow(host[:0], n)[:n]
			r.be.Download(host, out)
			p = host
		}
		mu, sd := r.info.TargetMean, r.info.TargetStd
		for i, v := range r.lab[:n] {
			d := float64(p[i])*sd + mu - float64(v)
			s[evalHits] += d * d
			s[evalAbs] += math.Abs(d)
			c := float64(v) - mu
			s[evalY] += c
			s[evalY2] += c * c
		}
	}
	return s, nil
}

// save writes a checkpoint after step steps of epoch (step 0: epoch
// epochs done): the state, the pipeline, the train shard's position.
func (r *dsRunner) save(epoch, step int) (*train.Checkpoint, error) {
	dir, err := r.tc.NewCheckpointDir()
	if err != nil {
		return nil, err
	}
	st := compute.NewState()
	st.Blobs["model"] = []byte(r.info.Model)
	st.Ints["epochs_done"] = int64(epoch)
	st.Ints[stepsDoneInt] = int64(step)
	info, err := json.Marshal(r.info)
	if err != nil {
		return nil, err
	}
	st.Blobs[ModelBlob] = info
	if step > 0 {
		if st.Blobs[epochSumsBlob], err = json.Marshal(r.carry[:]); err != nil {
			return nil, err
		}
	}
	r.m.Save(st)
	r.opt.Save(st)
	ck := train.NewCheckpoint(dir)
	if err := st.SaveFile(ck.Path(CheckpointFile)); err != nil {
		return nil, err
	}
	if err := r.pipe.Save(dir); err != nil {
		return nil, err
	}
	if err := r.train.SaveState(dir); err != nil {
		return nil, err
	}
	ck.Meta = map[string]string{"model": r.info.Model, "format": StateFormat, "file": CheckpointFile}
	return ck, nil
}

// readCheckpoint reads the state of a checkpoint to resume from: the model
// description, where training was, and rank 0's carried sums.
func (r *dsRunner) readCheckpoint(ck *train.Checkpoint) (*compute.State, error) {
	st, err := compute.LoadFile(ck.Path(CheckpointFile))
	if err != nil {
		return nil, fmt.Errorf("resume from checkpoint %s: %w", ck, err)
	}
	if m := string(st.Blobs["model"]); m != r.info.Model {
		return nil, train.NonRetryable(fmt.Errorf("resume from checkpoint %s: it holds model %q, this run trains %q", ck, m, r.info.Model))
	}
	mi, ok, err := ReadModelInfo(st)
	switch {
	case err != nil:
		return nil, fmt.Errorf("resume from checkpoint %s: %w", ck, err)
	case !ok:
		return nil, train.NonRetryable(fmt.Errorf("resume from checkpoint %s: it was trained on Fashion-MNIST's files, not on datasets", ck))
	}
	if r.info.Hidden != nil && !slices.Equal(mi.Hidden, r.info.Hidden) {
		return nil, train.NonRetryable(fmt.Errorf("resume from checkpoint %s: config hidden %v, the checkpoint's model has hidden layers %v", ck, r.info.Hidden, mi.Hidden))
	}
	if r.info.Task != "" && mi.Task != r.info.Task {
		return nil, train.NonRetryable(fmt.Errorf("resume from checkpoint %s: config task %q, the checkpoint's model is a %s", ck, r.info.Task, mi.Task))
	}
	epochs, err := st.Int("epochs_done")
	if err != nil {
		return nil, fmt.Errorf("resume from checkpoint %s: %w", ck, err)
	}
	step, _ := st.Int(stepsDoneInt)
	r.startEpoch, r.startStep = int(epochs), int(step)
	if b, ok := st.Blobs[epochSumsBlob]; ok && r.rank == 0 {
		var carry []float64
		if err := json.Unmarshal(b, &carry); err != nil || len(carry) != nTrainSums {
			return nil, fmt.Errorf("resume from checkpoint %s: state blob %s: %q", ck, epochSumsBlob, b)
		}
		copy(r.carry[:], carry)
	}
	fn := r.info.Function
	r.info = mi
	r.info.Function = fn
	return st, nil
}
