package gbdt

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

// Objectives.
const (
	RegSquaredError = "reg:squarederror"
	RegLogistic     = "reg:logistic"
	BinaryLogistic  = "binary:logistic"
	MultiSoftprob   = "multi:softprob"
	MultiSoftmax    = "multi:softmax"
	CountPoisson    = "count:poisson"
)

// Grow policies.
const (
	Depthwise = "depthwise"
	Lossguide = "lossguide"
)

var objectives = []string{BinaryLogistic, CountPoisson, MultiSoftmax, MultiSoftprob, RegLogistic, RegSquaredError}

var metricNames = []string{"auc", "error", "logloss", "mae", "merror", "mlogloss", "poisson-nloglik", "rmse"}

// Params are XGBoost's training parameters, with XGBoost's names (in JSON)
// and defaults (DefaultParams). Only the histogram tree method is
// implemented.
type Params struct {
	Objective     string // objective; default reg:squarederror
	NumClass      int    // num_class; required (≥ 2) for multi:*, else 0
	NumBoostRound int    // num_boost_round; default 10 (xgboost.train's)
	// Tree booster.
	Eta             float64 // eta (alias learning_rate); default 0.3
	MaxDepth        int     // max_depth; default 6; 0 = unlimited (lossguide only)
	MaxLeaves       int     // max_leaves; default 0 = unlimited
	GrowPolicy      string  // grow_policy: depthwise (default) or lossguide
	MinChildWeight  float64 // min_child_weight; default 1
	Lambda          float64 // lambda (alias reg_lambda); default 1
	Alpha           float64 // alpha (alias reg_alpha); default 0
	Gamma           float64 // gamma (alias min_split_loss); default 0
	MaxDeltaStep    float64 // max_delta_step; default 0 = no clipping (ParseParams: 0.7 with count:poisson, as XGBoost)
	Subsample       float64 // subsample; default 1
	ColsampleBytree float64 // colsample_bytree; default 1
	MaxBin          int     // max_bin; default 256
	// Objective.
	BaseScore      float64 // base_score (a probability for logistic objectives); default 0.5
	ScalePosWeight float64 // scale_pos_weight (binary:logistic, reg:logistic); default 1
	// Seed drives subsample and colsample_bytree (seed); default 0.
	Seed uint64
	// EvalMetric are the metrics computed per round on every evaluation
	// set (eval_metric, a name or a list); empty: the objective's default.
	EvalMetric []string
	// EarlyStoppingRounds stops training when the last metric on the last
	// evaluation set has not improved for this many rounds
	// (early_stopping_rounds); 0: never.
	EarlyStoppingRounds int
}

// DefaultParams returns XGBoost 1.7's defaults.
func DefaultParams() Params {
	return Params{
		Objective:       RegSquaredError,
		NumBoostRound:   10,
		Eta:             0.3,
		MaxDepth:        6,
		GrowPolicy:      Depthwise,
		MinChildWeight:  1,
		Lambda:          1,
		Subsample:       1,
		ColsampleBytree: 1,
		MaxBin:          256,
		BaseScore:       0.5,
		ScalePosWeight:  1,
	}
}

// paramFields maps every accepted JSON name to a setter. Aliases are
// XGBoost's.
var paramFields = map[string]func(p *Params, v json.RawMessage) error{
	"objective":             strField(func(p *Params) *string { return &p.Objective }),
	"num_class":             intField(func(p *Params) *int { return &p.NumClass }),
	"num_boost_round":       intField(func(p *Params) *int { return &p.NumBoostRound }),
	"eta":                   floatField(func(p *Params) *float64 { return &p.Eta }),
	"learning_rate":         floatField(func(p *Params) *float64 { return &p.Eta }),
	"max_depth":             intField(func(p *Params) *int { return &p.MaxDepth }),
	"max_leaves":            intField(func(p *Params) *int { return &p.MaxLeaves }),
	"grow_policy":           strField(func(p *Params) *string { return &p.GrowPolicy }),
	"min_child_weight":      floatField(func(p *Params) *float64 { return &p.MinChildWeight }),
	"lambda":                floatField(func(p *Params) *float64 { return &p.Lambda }),
	"reg_lambda":            floatField(func(p *Params) *float64 { return &p.Lambda }),
	"alpha":                 floatField(func(p *Params) *float64 { return &p.Alpha }),
	"reg_alpha":             floatField(func(p *Params) *float64 { return &p.Alpha }),
	"gamma":                 floatField(func(p *Params) *float64 { return &p.Gamma }),
	"min_split_loss":        floatField(func(p *Params) *float64 { return &p.Gamma }),
	"max_delta_step":        floatField(func(p *Params) *float64 { return &p.MaxDeltaStep }),
	"subsample":             floatField(func(p *Params) *float64 { return &p.Subsample }),
	"colsample_bytree":      floatField(func(p *Params) *float64 { return &p.ColsampleBytree }),
	"max_bin":               intField(func(p *Params) *int { return &p.MaxBin }),
	"base_score":            floatField(func(p *Params) *float64 { return &p.BaseScore }),
	"scale_pos_weight":      floatField(func(p *Params) *float64 { return &p.ScalePosWeight }),
	"seed":                  seedField,
	"eval_metric":           metricField,
	"early_stopping_rounds": intField(func(p *Params) *int { return &p.EarlyStoppingRounds }),
	// Accepted for compatibility with XGBoost parameter sets; each has one
	// allowed value (or is ignored: nthread, verbosity), checked here.
	"tree_method": constField("hist"),
	"booster":     constField("gbtree"),
	"nthread":     func(*Params, json.RawMessage) error { return nil },
	"verbosity":   func(*Params, json.RawMessage) error { return nil },
}

// ParamNames lists the JSON names ParseParams accepts, sorted.
func ParamNames() []string {
	names := make([]string, 0, len(paramFields))
	for k := range paramFields {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

// ParseParams decodes XGBoost-style parameters from a JSON object on top of
// DefaultParams and validates them. Numbers may be given as JSON numbers or
// as numeric strings (as XGBoost's Python API passes them). An unknown name
// is an error that lists the valid ones.
func ParseParams(data []byte) (Params, error) {
	p := DefaultParams()
	var raw map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&raw); err != nil {
		return p, invalid(fmt.Errorf("gbdt: params: %w", err))
	}
	keys := make([]string, 0, len(raw))
	for k := range raw {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		set, ok := paramFields[k]
		if !ok {
			return p, invalid(fmt.Errorf("gbdt: unknown parameter %q; valid parameters: %s", k, strings.Join(ParamNames(), ", ")))
		}
		if err := set(&p, raw[k]); err != nil {
			return p, invalid(fmt.Errorf("gbdt: parameter %s = %s: %w", k, string(raw[k]), err))
		}
	}
	if _, set := raw["max_delta_step"]; !set && p.Objective == CountPoisson {
		// XGBoost's learner does this for count:poisson.
		p.MaxDeltaStep = float64(poissonMaxDeltaStep)
	}
	return p, invalid(p.Validate())
}

// UnmarshalJSON is ParseParams.
func (p *Params) UnmarshalJSON(data []byte) error {
	q, err := ParseParams(data)
	if err != nil {
		return err
	}
	*p = q
	return nil
}

// MarshalJSON writes every parameter under its XGBoost name, so that
// ParseParams reads it back unchanged.
func (p Params) MarshalJSON() ([]byte, error) {
	m := map[string]any{
		"objective":             p.Objective,
		"num_class":             p.NumClass,
		"num_boost_round":       p.NumBoostRound,
		"eta":                   p.Eta,
		"max_depth":             p.MaxDepth,
		"max_leaves":            p.MaxLeaves,
		"grow_policy":           p.GrowPolicy,
		"min_child_weight":      p.MinChildWeight,
		"lambda":                p.Lambda,
		"alpha":                 p.Alpha,
		"gamma":                 p.Gamma,
		"max_delta_step":        p.MaxDeltaStep,
		"subsample":             p.Subsample,
		"colsample_bytree":      p.ColsampleBytree,
		"max_bin":               p.MaxBin,
		"base_score":            p.BaseScore,
		"scale_pos_weight":      p.ScalePosWeight,
		"seed":                  strconv.FormatUint(p.Seed, 10),
		"eval_metric":           append([]string{}, p.EvalMetric...),
		"early_stopping_rounds": p.EarlyStoppingRounds,
	}
	return json.Marshal(m)
}

// Validate checks every field and names the first bad one with its value.
func (p Params) Validate() error {
	bad := func(name string, v any, why string) error {
		return fmt.Errorf("gbdt: parameter %s = %v: %s", name, v, why)
	}
	if !contains(objectives, p.Objective) {
		return bad("objective", strconv.Quote(p.Objective), "unknown objective; valid objectives: "+strings.Join(objectives, ", "))
	}
	multi := p.Objective == MultiSoftprob || p.Objective == MultiSoftmax
	switch {
	case multi && p.NumClass < 2:
		return bad("num_class", p.NumClass, "must be at least 2 for "+p.Objective)
	case !multi && p.NumClass > 1:
		return bad("num_class", p.NumClass, "is only for multi:softprob and multi:softmax, not "+p.Objective)
	case p.NumClass < 0:
		return bad("num_class", p.NumClass, "must not be negative")
	case p.NumClass > MaxClasses:
		return bad("num_class", p.NumClass, fmt.Sprintf("must be at most %d", MaxClasses))
	case p.NumBoostRound < 0:
		return bad("num_boost_round", p.NumBoostRound, "must not be negative")
	case !(p.Eta >= 0) || math.IsInf(p.Eta, 0):
		return bad("eta", p.Eta, "must be a finite number ≥ 0")
	case p.MaxDepth < 0 || p.MaxDepth > 30:
		return bad("max_depth", p.MaxDepth, "must be in [0, 30]")
	case p.MaxLeaves < 0:
		return bad("max_leaves", p.MaxLeaves, "must not be negative")
	case p.GrowPolicy != Depthwise && p.GrowPolicy != Lossguide:
		return bad("grow_policy", strconv.Quote(p.GrowPolicy), "valid policies: depthwise, lossguide")
	case p.MaxDepth == 0 && p.MaxLeaves == 0:
		return bad("max_depth", 0, "max_depth and max_leaves cannot both be unconstrained (0)")
	case p.MaxDepth == 0 && p.GrowPolicy == Depthwise:
		return bad("max_depth", 0, "depthwise growth needs max_depth ≥ 1 (use grow_policy lossguide with max_leaves)")
	case !(p.MinChildWeight >= 0) || math.IsInf(p.MinChildWeight, 0):
		return bad("min_child_weight", p.MinChildWeight, "must be a finite number ≥ 0")
	case !(p.Lambda >= 0) || math.IsInf(p.Lambda, 0):
		return bad("lambda", p.Lambda, "must be a finite number ≥ 0")
	case !(p.Alpha >= 0) || math.IsInf(p.Alpha, 0):
		return bad("alpha", p.Alpha, "must be a finite number ≥ 0")
	case !(p.Gamma >= 0) || math.IsInf(p.Gamma, 0):
		return bad("gamma", p.Gamma, "must be a finite number ≥ 0")
	case !(p.MaxDeltaStep >= 0) || math.IsInf(p.MaxDeltaStep, 0):
		return bad("max_delta_step", p.MaxDeltaStep, "must be a finite number ≥ 0")
	case !(p.Subsample > 0 && p.Subsample <= 1):
		return bad("subsample", p.Subsample, "must be in (0, 1]")
	case !(p.ColsampleBytree > 0 && p.ColsampleBytree <= 1):
		return bad("colsample_bytree", p.ColsampleBytree, "must be in (0, 1]")
	case p.MaxBin < 2 || p.MaxBin > 65000:
		return bad("max_bin", p.MaxBin, "must be in [2, 65000]")
	case math.IsNaN(p.BaseScore) || math.IsInf(p.BaseScore, 0):
		return bad("base_score", p.BaseScore, "must be finite")
	case !(p.ScalePosWeight > 0) || math.IsInf(p.ScalePosWeight, 0):
		return bad("scale_pos_weight", p.ScalePosWeight, "must be a finite number > 0")
	case p.EarlyStoppingRounds < 0:
		return bad("early_stopping_rounds", p.EarlyStoppingRounds, "must not be negative")
	}
	switch p.Objective {
	case RegLogistic, BinaryLogistic:
		if !(p.BaseScore > 0 && p.BaseScore < 1) {
			return bad("base_score", p.BaseScore, "must be in (0, 1) for "+p.Objective)
		}
	case CountPoisson:
		if !(p.BaseScore > 0) {
			return bad("base_score", p.BaseScore, "must be > 0 for count:poisson")
		}
	}
	for _, m := range p.EvalMetric {
		if !contains(metricNames, m) {
			return bad("eval_metric", strconv.Quote(m), "unknown metric; valid metrics: "+strings.Join(metricNames, ", "))
		}
		if err := metricFits(m, p.Objective); err != nil {
			return bad("eval_metric", strconv.Quote(m), err.Error())
		}
	}
	return nil
}

// metrics returns the metrics to compute: EvalMetric or the objective's
// default (XGBoost's).
func (p Params) metrics() []string {
	if len(p.EvalMetric) > 0 {
		return p.EvalMetric
	}
	switch p.Objective {
	case BinaryLogistic:
		return []string{"logloss"}
	case MultiSoftprob, MultiSoftmax:
		return []string{"mlogloss"}
	case CountPoisson:
		return []string{"poisson-nloglik"}
	}
	return []string{"rmse"}
}

// groups is the number of trees per round (outputs per row).
func (p Params) groups() int {
	if p.NumClass > 1 {
		return p.NumClass
	}
	return 1
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func strField(f func(*Params) *string) func(*Params, json.RawMessage) error {
	return func(p *Params, v json.RawMessage) error {
		var s string
		if err := json.Unmarshal(v, &s); err != nil {
			return fmt.Errorf("want a string")
		}
		*f(p) = s
		return nil
	}
}

// number reads a JSON number or a numeric string.
func number(v json.RawMessage) (string, error) {
	var n json.Number
	if err := json.Unmarshal(v, &n); err == nil {
		return n.String(), nil
	}
	var s string
	if err := json.Unmarshal(v, &s); err == nil {
		return strings.TrimSpace(s), nil
	}
	return "", fmt.Errorf("want a number")
}

func floatField(f func(*Params) *float64) func(*Params, json.RawMessage) error {
	return func(p *Params, v json.RawMessage) error {
		s, err := number(v)
		if err != nil {
			return err
		}
		x, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return fmt.Errorf("want a number")
		}
		*f(p) = x
		return nil
	}
}

func intField(f func(*Params) *int) func(*Params, json.RawMessage) error {
	return func(p *Params, v json.RawMessage) error {
		s, err := number(v)
		if err != nil {
			return err
		}
		x, err := strconv.ParseInt(s, 10, 32)
		if err != nil {
			// 6.0 is an integer too.
			fl, ferr := strconv.ParseFloat(s, 64)
			if ferr != nil || fl != math.Trunc(fl) || math.Abs(fl) > math.MaxInt32 {
				return fmt.Errorf("want an integer")
			}
			x = int64(fl)
		}
		*f(p) = int(x)
		return nil
	}
}

func seedField(p *Params, v json.RawMessage) error {
	s, err := number(v)
	if err != nil {
		return err
	}
	if x, err := strconv.ParseUint(s, 10, 64); err == nil {
		p.Seed = x
		return nil
	}
	x, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return fmt.Errorf("want an integer")
	}
	p.Seed = uint64(x)
	return nil
}

func metricField(p *Params, v json.RawMessage) error {
	var one string
	if err := json.Unmarshal(v, &one); err == nil {
		p.EvalMetric = []string{one}
		return nil
	}
	var list []string
	if err := json.Unmarshal(v, &list); err != nil {
		return fmt.Errorf("want a metric name or a list of names")
	}
	p.EvalMetric = list
	return nil
}

func constField(allowed ...string) func(*Params, json.RawMessage) error {
	return func(_ *Params, v json.RawMessage) error {
		var s string
		if err := json.Unmarshal(v, &s); err != nil || !contains(allowed, s) {
			return fmt.Errorf("only %s is supported", strings.Join(allowed, ", "))
		}
		return nil
	}
}
