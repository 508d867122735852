package api

import (
	"encoding/json"
	"fmt"
)

// ModelInfoBlob is the state blob of a checkpoint trained on a run's
// datasets that holds its ModelInfo as JSON.
const ModelInfoBlob = "model.json"

// ModelInfo describes a network a built-in training function trained on
// a run's datasets: what a predictor needs to rebuild it. A checkpoint
// holds it as JSON (the state blob ModelInfoBlob) beside the parameters,
// the fitted pipeline and the train shard's position; builtin writes it,
// predict reads it.
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

// Bounds of what a ModelInfo may declare (Check): a network is built from
// these numbers before its parameters are read, so they are bounded before
// anything is allocated.
const (
	// MaxModelInputDims bounds len(Input).
	MaxModelInputDims = 8
	// MaxModelInputValues bounds the values of one row (Input's product).
	MaxModelInputValues = 1 << 20
	// MaxModelOutputs bounds Outputs.
	MaxModelOutputs = 1 << 16
	// MaxModelHiddenLayers and MaxModelHiddenWidth bound Hidden.
	MaxModelHiddenLayers = 64
	MaxModelHiddenWidth  = 1 << 16
)

// ParseModelInfo decodes a ModelInfo from its JSON and checks it.
func ParseModelInfo(b []byte) (ModelInfo, error) {
	var mi ModelInfo
	if err := json.Unmarshal(b, &mi); err != nil {
		return ModelInfo{}, fmt.Errorf("model info: %w", err)
	}
	if err := mi.Check(); err != nil {
		return ModelInfo{}, err
	}
	return mi, nil
}

// Check says whether mi describes a network a predictor can build: a
// known task, one output per named class (the names are there to count)
// or one for a regression, and an input shape and hidden sizes within the
// bounds above. The error names the field and its value.
func (mi ModelInfo) Check() error {
	switch {
	case mi.Task != "classification" && mi.Task != "regression":
		return fmt.Errorf("model info: task %q (want classification or regression)", mi.Task)
	case mi.Outputs < 1 || mi.Outputs > MaxModelOutputs:
		return fmt.Errorf("model info: outputs %d (want 1 to %d)", mi.Outputs, MaxModelOutputs)
	case mi.Task == "classification" && len(mi.Classes) != mi.Outputs:
		return fmt.Errorf("model info: a classifier of %d outputs names %d classes", mi.Outputs, len(mi.Classes))
	case mi.Task == "regression" && mi.Outputs != 1:
		return fmt.Errorf("model info: a regression of %d outputs (want 1)", mi.Outputs)
	case len(mi.Input) == 0 || len(mi.Input) > MaxModelInputDims:
		return fmt.Errorf("model info: input shape %v (want 1 to %d dimensions)", mi.Input, MaxModelInputDims)
	case len(mi.Hidden) > MaxModelHiddenLayers:
		return fmt.Errorf("model info: %d hidden layers (at most %d)", len(mi.Hidden), MaxModelHiddenLayers)
	}
	n := 1
	for _, d := range mi.Input {
		// n ≤ MaxModelInputValues and d ≤ MaxModelInputValues: no overflow.
		if d < 1 || d > MaxModelInputValues || n*d > MaxModelInputValues {
			return fmt.Errorf("model info: input shape %v (want positive sizes of at most %d values in all)", mi.Input, MaxModelInputValues)
		}
		n *= d
	}
	for i, h := range mi.Hidden {
		if h < 1 || h > MaxModelHiddenWidth {
			return fmt.Errorf("model info: hidden[%d] = %d (want 1 to %d)", i, h, MaxModelHiddenWidth)
		}
	}
	return nil
}

// InputValues is the number of values of one row: Input's product. Call it
// on a ModelInfo that passed Check.
func (mi ModelInfo) InputValues() int {
	n := 1
	for _, d := range mi.Input {
		n *= d
	}
	return n
}
