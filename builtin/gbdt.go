package builtin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/tempotrain/tempotrain/data"
	"github.com/tempotrain/tempotrain/gbdt"
	"github.com/tempotrain/tempotrain/train"
)

// GBDT is the name of the gradient-boosted trees training function
// (Ray's XGBoostTrainer): the run gives datasets ("train", and optionally
// "valid") and XGBoost's parameters as its config; nothing else.
const GBDT = "gbdt"

// GBDTFormat is the format (Meta "format") of a gbdt checkpoint: the model
// in XGBoost's JSON format (GBDTModelFile, which xgboost.Booster loads), the
// trainer's state for resuming (GBDTStateFile), the fitted preprocessors
// (data.PipelineFile) and the features' importance (GBDTImportanceFile).
const GBDTFormat = "gbdt v1"

// Files of a gbdt checkpoint.
const (
	GBDTModelFile      = "model.json"
	GBDTStateFile      = "gbdt_state.json"
	GBDTImportanceFile = "importance.json"
)

// gbdtOwn are the config fields of the gbdt function that are not
// XGBoost's parameters.
type gbdtOwn struct {
	// CheckpointEvery is the number of rounds between checkpoints; the last
	// round always has one. Default 10.
	CheckpointEvery int `json:"checkpoint_every"`
	// ReadBatch is the number of rows a rank reads at a time. Default 4096.
	ReadBatch int `json:"read_batch"`
}

// gbdtConfig splits a gbdt run's config into its own fields and XGBoost's
// parameters (gbdt.ParseParams, which names unknown ones).
func gbdtConfig(raw json.RawMessage) (gbdtOwn, gbdt.Params, error) {
	own := gbdtOwn{CheckpointEvery: 10, ReadBatch: 4096}
	fields := map[string]json.RawMessage{}
	if len(raw) > 0 && string(raw) != "null" {
		if err := json.Unmarshal(raw, &fields); err != nil {
			return own, gbdt.Params{}, fmt.Errorf("config: %w", err)
		}
	}
	for name, dst := range map[string]*int{"checkpoint_every": &own.CheckpointEvery, "read_batch": &own.ReadBatch} {
		v, ok := fields[name]
		if !ok {
			continue
		}
		if err := json.Unmarshal(v, dst); err != nil || *dst < 1 {
			return own, gbdt.Params{}, fmt.Errorf("config: %s = %s: want a positive integer", name, v)
		}
		delete(fields, name)
	}
	// A multi-class objective without num_class takes it from the data's
	// classes: a placeholder passes ParseParams' check, and GBDTFunc sets
	// the real number before training.
	_, hasNumClass := fields["num_class"]
	var objective string
	_ = json.Unmarshal(fields["objective"], &objective)
	fromData := !hasNumClass && (objective == gbdt.MultiSoftprob || objective == gbdt.MultiSoftmax)
	if fromData {
		fields["num_class"] = json.RawMessage("2")
	}
	rest, err := json.Marshal(fields)
	if err != nil {
		return own, gbdt.Params{}, err
	}
	p, err := gbdt.ParseParams(rest)
	if fromData {
		p.NumClass = 0
	}
	return own, p, err
}

// taskOf is the dataset task an objective needs: class numbers for the
// classifiers, values for the others.
func taskOf(objective string) string {
	switch objective {
	case gbdt.BinaryLogistic, gbdt.MultiSoftprob, gbdt.MultiSoftmax:
		return "classification"
	}
	return "regression"
}

// GBDTFunc is the gbdt training function. Every rank reads its rows of
// "train" (every row exactly once over the ranks) and "valid" if the run has
// it, fits the run's preprocessors across the ranks (or restores them from
// the checkpoint), and boosts: per node the ranks sum gradient histograms
// over the collective, so any number of ranks makes the same model, byte for
// byte. Metrics go through Report every round ({dataset}_{metric}, "round");
// rank 0 checkpoints every checkpoint_every rounds and at the end, and a
// resumed run ends with the model an uninterrupted one makes.
func GBDTFunc(ctx context.Context, tc *train.Context) error {
	own, params, err := gbdtConfig(tc.RawConfig())
	if err != nil {
		return train.NonRetryable(err)
	}
	task := taskOf(params.Objective)
	opts := train.DatasetOptions{BatchSize: own.ReadBatch, Exact: true, Task: task}
	trainShard, err := tc.Dataset(ctx, "train", opts)
	if err != nil {
		return err
	}
	defer trainShard.Close()
	ck := tc.Checkpoint()
	var pipe *data.Pipeline
	if ck != nil {
		pipe, err = data.LoadPipeline(ck.Dir)
		switch {
		case err == nil:
			err = trainShard.SetPipeline(pipe)
		case errors.Is(err, fs.ErrNotExist):
			err = fmt.Errorf("checkpoint %s has no %s", ck, data.PipelineFile)
		}
	} else {
		pipe, err = trainShard.Fit(ctx, tc.Preprocessors())
	}
	if err != nil {
		return err
	}
	if task == "classification" && params.NumClass == 0 && params.Objective != gbdt.BinaryLogistic {
		params.NumClass = len(pipe.Label.Classes)
	}
	trainDS, err := readGBDT(ctx, trainShard, true)
	if err != nil {
		return err
	}
	evals := []gbdt.Eval{{Name: "train", Data: trainDS}}
	for _, name := range tc.DatasetNames() {
		if name == "train" {
			continue
		}
		sh, err := tc.Dataset(ctx, name, opts)
		if err != nil {
			return err
		}
		defer sh.Close()
		if err := sh.SetPipeline(pipe); err != nil {
			return train.NonRetryable(err)
		}
		ds, err := readGBDT(ctx, sh, false)
		if err != nil {
			return err
		}
		evals = append(evals, gbdt.Eval{Name: name, Data: ds})
	}
	var comm gbdt.Collective = gbdt.Local()
	if c := tc.Comm(); c != nil {
		comm = c
	}
	var t *gbdt.Trainer
	if ck != nil {
		b, err := ck.ReadFile(GBDTStateFile)
		if err != nil {
			return fmt.Errorf("resume from %s: %w", ck, err)
		}
		var st gbdt.State
		if err := json.Unmarshal(b, &st); err != nil {
			return train.NonRetryable(fmt.Errorf("resume from %s: %s: %w", ck, GBDTStateFile, err))
		}
		t, err = gbdt.Resume(ctx, comm, &st, trainDS, evals...)
		if err != nil {
			return train.NonRetryable(fmt.Errorf("resume from %s: %w", ck, err))
		}
	} else if t, err = gbdt.NewTrainer(ctx, comm, params, trainDS, evals...); err != nil {
		return gbdtErr(fmt.Errorf("datasets.train (label %q): %w", trainShard.Label().Column, err))
	}
	// Where rank 0's time outside the rounds goes: checkpoint writes, and
	// reports with and without a checkpoint (logged at the end).
	var saveTime, reportTime, ckptReportTime time.Duration
	var reports, ckptReports int
	for !t.Done() {
		r, err := t.Step(ctx)
		if err != nil {
			return gbdtErr(err)
		}
		done := t.Rounds()
		tc.AddSamples(trainDS.Rows) // a round visits every local row
		tc.SetProgress(done, 0)
		m := train.Metrics(r.Map())
		m["round"] = float64(done)
		var save *train.Checkpoint
		if tc.WorldRank() == 0 && (done%own.CheckpointEvery == 0 || t.Done()) {
			t0 := time.Now()
			if save, err = saveGBDT(tc, t, pipe); err != nil {
				return err
			}
			saveTime += time.Since(t0)
		}
		t0 := time.Now()
		if err := tc.Report(m, save); err != nil {
			return fmt.Errorf("report round %d: %w", done, err)
		}
		if save != nil {
			ckptReportTime += time.Since(t0)
			ckptReports++
		} else {
			reportTime += time.Since(t0)
			reports++
		}
	}
	tm := t.Timings()
	tc.Logger().Info("gbdt: rounds done", "rounds", t.Rounds(), "trees_s", tm.Trees.Seconds(), "eval_s", tm.Eval.Seconds(),
		"checkpoint_write_s", saveTime.Seconds(), "reports", reports, "report_s", reportTime.Seconds(),
		"checkpoint_reports", ckptReports, "checkpoint_report_s", ckptReportTime.Seconds())
	return nil
}

// gbdtErr marks what a restart cannot fix (gbdt.ErrInvalid: bad labels,
// parameters, features) as non-retryable.
func gbdtErr(err error) error {
	if errors.Is(err, gbdt.ErrInvalid) {
		return train.NonRetryable(err)
	}
	return err
}

// readGBDT reads a shard's epoch 0 into a gbdt.Dataset with row ids from the
// dataset's file order, so that sampling does not depend on the world size.
func readGBDT(ctx context.Context, sh *data.Shard, withIDs bool) (*gbdt.Dataset, error) {
	if err := sh.SetEpoch(0); err != nil {
		return nil, err
	}
	w := sh.Width()
	ds := &gbdt.Dataset{Cols: w}
	if withIDs {
		ids, err := sh.RowIDs()
		if err != nil {
			return nil, err
		}
		ds.RowID = make([]uint64, len(ids))
		for i, id := range ids {
			ds.RowID[i] = uint64(id)
		}
	}
	x := make([]float32, sh.BatchSize()*w)
	y := make([]float32, sh.BatchSize())
	for {
		n, err := sh.Next(ctx, x, y)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		ds.X = append(ds.X, x[:n*w]...)
		ds.Label = append(ds.Label, y[:n]...)
		ds.Rows += n
	}
	if ds.RowID != nil && len(ds.RowID) != ds.Rows {
		return nil, fmt.Errorf("dataset %s: %d rows read, %d row ids", sh.Name(), ds.Rows, len(ds.RowID))
	}
	return ds, nil
}

// saveGBDT writes rank 0's checkpoint of the rounds done so far.
func saveGBDT(tc *train.Context, t *gbdt.Trainer, pipe *data.Pipeline) (*train.Checkpoint, error) {
	dir, err := tc.NewCheckpointDir()
	if err != nil {
		return nil, err
	}
	model := t.Model()
	var mb bytes.Buffer
	if err := model.SaveJSON(&mb); err != nil {
		return nil, err
	}
	st, err := json.Marshal(t.State())
	if err != nil {
		return nil, err
	}
	imp := map[string]map[string]float64{}
	for _, kind := range []string{"weight", "gain", "cover"} {
		v, err := model.Importance(kind)
		if err != nil {
			return nil, err
		}
		imp[kind] = map[string]float64{}
		for i, x := range v {
			if x != 0 && i < len(pipe.Features) {
				imp[kind][pipe.Features[i]] = x
			}
		}
	}
	ib, err := json.MarshalIndent(imp, "", "  ")
	if err != nil {
		return nil, err
	}
	for name, b := range map[string][]byte{GBDTModelFile: mb.Bytes(), GBDTStateFile: st, GBDTImportanceFile: ib} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return nil, err
		}
	}
	if err := pipe.Save(dir); err != nil {
		return nil, err
	}
	ck := train.NewCheckpoint(dir)
	ck.Meta = map[string]string{"format": GBDTFormat, "model": GBDT, "objective": t.Params().Objective,
		"rounds": strconv.Itoa(t.Rounds()), "file": GBDTModelFile}
	return ck, nil
}
