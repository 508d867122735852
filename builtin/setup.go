package builtin

import (
	"errors"
	"fmt"
	"io"
	"math"
	"slices"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/compute"
	"github.com/tempotrain/tempotrain/data"
	"github.com/tempotrain/tempotrain/data/format"
	"github.com/tempotrain/tempotrain/train"
)

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
