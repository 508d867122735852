package builtin

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/compute"
	"github.com/tempotrain/tempotrain/train"
)

// State keys of a checkpoint trained on the run's datasets, besides the
// model's and the optimizer's.
const (
	// ModelBlob holds an api.ModelInfo as JSON: what a predictor needs to
	// rebuild the model.
	ModelBlob = api.ModelInfoBlob
	// epochSumsBlob holds the sums of the epoch's metrics so far (JSON),
	// for a checkpoint taken mid-epoch.
	epochSumsBlob = "epoch_sums.json"
	// stepsDoneInt counts the steps done in the epoch epochs_done (0 at the
	// end of an epoch).
	stepsDoneInt = "steps_done"
)

// ReadModelInfo reads the ModelInfo of a state, or reports that it has
// none (a checkpoint of a function run on Fashion-MNIST's files).
func ReadModelInfo(st *compute.State) (api.ModelInfo, bool, error) {
	b, ok := st.Blobs[ModelBlob]
	if !ok {
		return api.ModelInfo{}, false, nil
	}
	var mi api.ModelInfo
	if err := json.Unmarshal(b, &mi); err != nil {
		return mi, true, fmt.Errorf("state blob %s: %w", ModelBlob, err)
	}
	return mi, true, nil
}

// BuildModel builds the network an api.ModelInfo describes, for batches up
// to maxBatch (its parameters are then loaded from a state).
func BuildModel(be compute.Backend, mi api.ModelInfo, maxBatch int, seed uint64) (*compute.Model, error) {
	if mi.Model == TabularMLP {
		if len(mi.Input) != 1 {
			return nil, fmt.Errorf("tabular-mlp: input shape %v, want [width]", mi.Input)
		}
		return compute.NewMLP(be, mi.Input[0], mi.Hidden, mi.Outputs, maxBatch, seed)
	}
	return compute.NewModelFor(mi.Model, be, mi.Input, mi.Outputs, maxBatch, seed)
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
