package train

import (
	"encoding/json"
	"fmt"
)

// Sampler is a param_space value that draws one (Ray Tune's tune.choice,
// tune.loguniform...): put it in NewTuner's paramSpace under a dotted key.
type Sampler struct {
	name string
	args any
}

// MarshalJSON writes the sampler as the Tune input has it: {"name": args}.
func (s Sampler) MarshalJSON() ([]byte, error) { return json.Marshal(map[string]any{s.name: s.args}) }

// Choice draws one of values (tune.choice).
func Choice(values ...any) Sampler { return Sampler{"choice", values} }

// GridSearch tries every one of values (tune.grid_search).
func GridSearch(values ...any) Sampler { return Sampler{"grid_search", values} }

// Uniform draws a float in [lower, upper) (tune.uniform).
func Uniform(lower, upper float64) Sampler { return Sampler{"uniform", []float64{lower, upper}} }

// LogUniform draws a float in [lower, upper) uniformly in log space
// (tune.loguniform).
func LogUniform(lower, upper float64) Sampler { return Sampler{"loguniform", []float64{lower, upper}} }

// RandInt draws an integer in [lower, upper) (tune.randint).
func RandInt(lower, upper int) Sampler { return Sampler{"randint", []int{lower, upper}} }

// QUniform draws a multiple of q in [lower, upper] (tune.quniform).
func QUniform(lower, upper, q float64) Sampler {
	return Sampler{"quniform", []float64{lower, upper, q}}
}

// ParamSpace encodes a param_space of samplers and constants as the Tune
// input holds it.
func ParamSpace(space map[string]any) (map[string]json.RawMessage, error) {
	out := make(map[string]json.RawMessage, len(space))
	for k, v := range space {
		b, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("param_space %q: %w", k, err)
		}
		out[k] = b
	}
	return out, nil
}
