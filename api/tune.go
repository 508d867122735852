package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// The Tune workflow: a hyperparameter search whose trials are child Fit
// workflows (Ray Tune's Tuner over a Ray Train trainer).
const (
	// TuneWorkflowType is the registered name of the Tune workflow.
	TuneWorkflowType = "Tune"
	// SignalStop stops a Fit gracefully: its running attempt is cancelled,
	// its committed checkpoints are kept and it ends as succeeded. The Tune
	// sends it to a trial its scheduler stops; a person may send it too
	// (temporal workflow signal --name stop).
	SignalStop = "stop"
	// SignalTrialReport carries a trial's report (TrialReport) from its Fit
	// to the Tune that started it, as each report is recorded.
	SignalTrialReport = "tempotrain-trial-report"
	// SignalTrialContinue answers a trial's report (its index) that the
	// Tune judged and let go on; its Fit holds the report until then.
	SignalTrialContinue = "tempotrain-trial-continue"
	// QueryTune answers the search as it stands (a TuneResult).
	QueryTune = "tune"
	// ActivityTuneBest writes {storage}/{tune}/best.json.
	ActivityTuneBest = "TuneBest"
	// ActivityLoadTune reads {storage}/{tune}/tune.json (TuneState), and
	// ActivitySaveTune writes it.
	ActivityLoadTune = "LoadTune"
	ActivitySaveTune = "SaveTune"
	// TuneStateFile is a search's state in storage: a search started again
	// with its name continues it.
	TuneStateFile = "tune.json"
	// BestFile is the pointer file of a search's best checkpoint, under
	// {storage}/{tune}/: predict.Load follows it.
	BestFile = "best.json"
	// SATune is the Keyword search attribute every trial of a search
	// carries: the search's name.
	SATune = "TempotrainTune"
	// TimeAttrIteration is Ray's training_iteration: how many reports the
	// trial made, counting this one. A stop condition or time_attr may use
	// it; every report has it.
	TimeAttrIteration = "training_iteration"
)

// TuneSearchAttributes are the search attributes the Tune adds to
// SearchAttributes.
var TuneSearchAttributes = map[string]SearchAttributeType{SATune: SAKeyword}

// Bounds of a search.
const (
	// MaxTrials bounds the trials of one search (num_samples, times the grid):
	// each is a child workflow.
	MaxTrials = 1000
	// maxParams bounds param_space's keys.
	maxParams = 64
	// maxChoices bounds the values of one choice or grid_search.
	maxChoices = 1000
)

// Ray's defaults of the ASHA scheduler (AsyncHyperBandScheduler).
const (
	DefaultASHAMaxT            = 100
	DefaultASHAGracePeriod     = 1
	DefaultASHAReductionFactor = 4
)

// TuneInput is the input of the Tune workflow, plain JSON:
//
//	{"trainer": {"train_func": "tabular-mlp", "config": {"epochs": 20}, "scaling": {"num_workers": 1},
//	             "run": {"name": "search", "storage_path": "/tmp/runs"}, "datasets": {...}},
//	 "param_space": {"config.lr": {"loguniform": [1e-4, 1e-1]}, "config.hidden": {"choice": [[64], [128, 64]]}},
//	 "tune_config": {"metric": "valid_accuracy", "mode": "max", "num_samples": 12,
//	                 "scheduler": {"type": "asha", "time_attr": "epoch", "max_t": 20}}}
type TuneInput struct {
	// Trainer is the Fit input every trial starts from (Ray's trainer):
	// param_space's values replace its fields. Its run.name names the
	// search (default: the workflow ID) and run.storage_path is where the
	// search lives: trial T of search S is the run {storage_path}/{S}/{T}.
	Trainer FitInput `json:"trainer"`
	// ParamSpace maps a dotted path into Trainer ("config.lr",
	// "scaling.num_workers") to a sampler ({"loguniform": [1e-4, 1e-1]}) or
	// to a constant (any JSON value that is not an object).
	ParamSpace map[string]json.RawMessage `json:"param_space"`
	// TuneConfig: metric, mode, samples, scheduler.
	TuneConfig TuneConfig `json:"tune_config"`
}

// TuneConfig configures the search (Ray's TuneConfig, with the scheduler and
// the stop condition in it).
type TuneConfig struct {
	// Metric the search optimizes: a key of the trials' reports. Required.
	Metric string `json:"metric"`
	// Mode is "max" or "min". Required.
	Mode string `json:"mode"`
	// NumSamples is how many trials are drawn (Ray's num_samples); with
	// grid_search values, how many times the grid is repeated. Default 1.
	NumSamples int `json:"num_samples,omitempty"`
	// MaxConcurrentTrials bounds the trials running at once. Default 0:
	// all of them (as Ray, which is bounded by resources: here the trials'
	// ranks wait for rank slots, up to run.failure.start_timeout).
	MaxConcurrentTrials int `json:"max_concurrent_trials,omitempty"`
	// Seed makes the trials' parameters reproducible: the same seed gives
	// the same trials. Default: a seed drawn once, and reported in the
	// TuneResult.
	Seed *int64 `json:"seed,omitempty"`
	// Search is "random" (the default: Ray's basic variant generator:
	// grid_search values crossed, other samplers drawn, num_samples times)
	// or "grid": every sampler enumerated (choice and grid_search by their
	// values, randint by its integers, quniform by its steps), crossed.
	Search string `json:"search,omitempty"`
	// Scheduler stops poor trials early. Default none (FIFO: every trial
	// runs to its end).
	Scheduler *SchedulerConfig `json:"scheduler,omitempty"`
	// Stop ends a trial (status stopped) once a report has any of these
	// metrics at or above its value (Ray's dict stop condition):
	// {"valid_accuracy": 0.95} or {"training_iteration": 10}.
	Stop map[string]float64 `json:"stop,omitempty"`
}

// SchedulerConfig is a trial scheduler, in Ray's names.
type SchedulerConfig struct {
	// Type is "asha" (AsyncHyperBandScheduler) or "fifo" (none).
	Type string `json:"type"`
	// TimeAttr is the report's key that measures a trial's progress.
	// Default "training_iteration" (Ray's); "epoch" for the built-ins.
	TimeAttr string `json:"time_attr,omitempty"`
	// MaxT is the most TimeAttr a trial runs to. Default 100.
	MaxT float64 `json:"max_t,omitempty"`
	// GracePeriod is the first rung: no trial is stopped before it.
	// Default 1.
	GracePeriod float64 `json:"grace_period,omitempty"`
	// ReductionFactor: a trial goes on past a rung only in the top
	// 1/ReductionFactor of the trials that reached it. Default 4.
	ReductionFactor float64 `json:"reduction_factor,omitempty"`
	// StopLastTrials stops a trial that reached MaxT (Ray's
	// stop_last_trials). Default true.
	StopLastTrials *bool `json:"stop_last_trials,omitempty"`
}

// WithDefaults returns the scheduler with Ray's defaults filled in.
func (s SchedulerConfig) WithDefaults() SchedulerConfig {
	if s.TimeAttr == "" {
		s.TimeAttr = TimeAttrIteration
	}
	if s.MaxT == 0 {
		s.MaxT = DefaultASHAMaxT
	}
	if s.GracePeriod == 0 {
		s.GracePeriod = DefaultASHAGracePeriod
	}
	if s.ReductionFactor == 0 {
		s.ReductionFactor = DefaultASHAReductionFactor
	}
	if s.StopLastTrials == nil {
		t := true
		s.StopLastTrials = &t
	}
	return s
}

// WithDefaults returns a copy with every unset optional field at its default.
func (in TuneInput) WithDefaults() TuneInput {
	c := &in.TuneConfig
	if c.NumSamples == 0 {
		c.NumSamples = 1
	}
	if c.Search == "" {
		c.Search = "random"
	}
	if c.Scheduler != nil {
		s := c.Scheduler.WithDefaults()
		c.Scheduler = &s
	}
	return in
}

// InvalidTuneError says which field of a TuneInput is wrong and why.
type InvalidTuneError struct {
	Field  string
	Value  any
	Reason string
}

func (e *InvalidTuneError) Error() string {
	return fmt.Sprintf("invalid Tune input: %s = %s: %s", e.Field, fmtValue(e.Value), e.Reason)
}

func badTune(field string, v any, reason string) error {
	return &InvalidTuneError{Field: field, Value: v, Reason: reason}
}

// Samplers are the names of param_space's samplers (Ray Tune's).
var Samplers = []string{"choice", "grid_search", "uniform", "loguniform", "randint", "quniform"}

// sampler is one parsed param_space entry.
type sampler struct {
	key  string
	kind string            // a name of Samplers, or "" for a constant
	vals []json.RawMessage // choice, grid_search; the constant
	lo   float64
	hi   float64
	q    float64 // quniform
}

// Validate checks an input after WithDefaults and returns its trials for
// seed: bad input is an *InvalidTuneError naming the field and its value.
func (in TuneInput) Validate(seed int64) ([]Trial, error) {
	c := in.TuneConfig
	switch {
	case strings.TrimSpace(c.Metric) == "":
		return nil, badTune("tune_config.metric", c.Metric, "must name the metric the search optimizes, a key of the trials' reports")
	case c.Mode != "max" && c.Mode != "min":
		return nil, badTune("tune_config.mode", c.Mode, `must be "max" or "min"`)
	case c.NumSamples < 1:
		return nil, badTune("tune_config.num_samples", c.NumSamples, "must be at least 1")
	case c.NumSamples > MaxTrials:
		return nil, badTune("tune_config.num_samples", c.NumSamples, fmt.Sprintf("must be at most %d (each trial is a child workflow)", MaxTrials))
	case c.MaxConcurrentTrials < 0:
		return nil, badTune("tune_config.max_concurrent_trials", c.MaxConcurrentTrials, "must be 0 (all at once) or positive")
	case c.Search != "random" && c.Search != "grid":
		return nil, badTune("tune_config.search", c.Search, `must be "random" or "grid"`)
	case strings.ContainsAny(in.Trainer.Run.Name, "/\\") || in.Trainer.Run.Name == "." || in.Trainer.Run.Name == "..":
		return nil, badTune("trainer.run.name", in.Trainer.Run.Name, "names the search: a single path element (no '/', '\\', '.' or '..')")
	}
	if s := c.Scheduler; s != nil {
		switch {
		case s.Type != "asha" && s.Type != "fifo":
			return nil, badTune("tune_config.scheduler.type", s.Type, `must be "asha" or "fifo"`)
		case s.MaxT <= 0 || math.IsInf(s.MaxT, 0) || math.IsNaN(s.MaxT):
			return nil, badTune("tune_config.scheduler.max_t", s.MaxT, "must be positive")
		case s.GracePeriod <= 0 || s.GracePeriod > s.MaxT:
			return nil, badTune("tune_config.scheduler.grace_period", s.GracePeriod, fmt.Sprintf("must be positive and at most max_t (%g)", s.MaxT))
		case s.ReductionFactor <= 1 || math.IsInf(s.ReductionFactor, 0):
			return nil, badTune("tune_config.scheduler.reduction_factor", s.ReductionFactor, "must be greater than 1")
		}
	}
	for k, v := range c.Stop {
		if strings.TrimSpace(k) == "" || math.IsNaN(v) {
			return nil, badTune("tune_config.stop."+k, v, "must name a metric and a number")
		}
	}
	if len(in.ParamSpace) == 0 {
		return nil, badTune("param_space", "{}", `must give at least one key: {"config.lr": {"loguniform": [0.0001, 0.1]}}`)
	}
	if len(in.ParamSpace) > maxParams {
		return nil, badTune("param_space", fmt.Sprintf("%d keys", len(in.ParamSpace)), fmt.Sprintf("at most %d", maxParams))
	}
	space, err := in.parseSpace()
	if err != nil {
		return nil, err
	}
	trials, err := in.trials(space, seed)
	if err != nil {
		return nil, err
	}
	for _, t := range trials {
		fi, err := in.TrialInput("search", t)
		if err != nil {
			return nil, err
		}
		if err := fi.WithDefaults().Validate(); err != nil {
			if e, ok := err.(*InvalidInputError); ok {
				return nil, badTune("trainer."+e.Field, e.Value, fmt.Sprintf("%s (in %s: %s)", e.Reason, t.Name, t.ParamString()))
			}
			return nil, badTune("trainer", t.Name, err.Error())
		}
	}
	return trials, nil
}

// parseSpace parses param_space, sorted by key, and checks that each key
// addresses a field of the trainer that a value of its sampler fits.
func (in TuneInput) parseSpace() ([]sampler, error) {
	keys := make([]string, 0, len(in.ParamSpace))
	for k := range in.ParamSpace {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var out []sampler
	for _, k := range keys {
		s, err := parseSampler(k, in.ParamSpace[k])
		if err != nil {
			return nil, err
		}
		if err := checkKey(k); err != nil {
			return nil, err
		}
		// The key must address a field of the Fit input that the sampler's
		// first value fits.
		v := s.first()
		if _, err := setParams(in.Trainer, map[string]json.RawMessage{k: v}); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

func checkKey(k string) error {
	field := "param_space." + k
	segs := strings.Split(k, ".")
	for _, s := range segs {
		if strings.TrimSpace(s) == "" {
			return badTune(field, k, `is not a dotted path into the trainer ("config.lr", "scaling.num_workers")`)
		}
	}
	switch {
	case k == "run" || k == "run.name" || k == "run.storage_path":
		return badTune(field, k, "is set by the search: each trial's run is {storage_path}/{search}/{trial}")
	case segs[0] == "config" || segs[0] == "scaling" || segs[0] == "run" || segs[0] == "train_func" ||
		segs[0] == "datasets" || segs[0] == "preprocessors" || segs[0] == "python":
		return nil
	}
	return badTune(field, k, "must start with a field of the trainer: config, scaling, run, datasets, preprocessors, python, train_func")
}

func parseSampler(k string, raw json.RawMessage) (sampler, error) {
	field := "param_space." + k
	s := sampler{key: k}
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || !json.Valid(raw) {
		return s, badTune(field, string(raw), "is not valid JSON")
	}
	if raw[0] != '{' {
		s.vals = []json.RawMessage{raw}
		return s, nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil {
		return s, badTune(field, string(raw), err.Error())
	}
	if len(obj) != 1 {
		return s, badTune(field, string(raw), fmt.Sprintf("must be one sampler, {\"loguniform\": [0.0001, 0.1]}, of %s (a constant object: {\"choice\": [{...}]})", strings.Join(Samplers, ", ")))
	}
	for name, args := range obj {
		s.kind = name
		switch name {
		case "choice", "grid_search":
			if err := json.Unmarshal(args, &s.vals); err != nil || len(s.vals) == 0 {
				return s, badTune(field+"."+name, string(args), "must be a non-empty list of values")
			}
			if len(s.vals) > maxChoices {
				return s, badTune(field+"."+name, fmt.Sprintf("%d values", len(s.vals)), fmt.Sprintf("at most %d", maxChoices))
			}
		case "uniform", "loguniform", "randint", "quniform":
			var nums []float64
			want := 2
			form := "[lower, upper]"
			if name == "quniform" {
				want, form = 3, "[lower, upper, q]"
			}
			if err := json.Unmarshal(args, &nums); err != nil || len(nums) != want {
				return s, badTune(field+"."+name, string(args), "must be "+form)
			}
			for _, x := range nums {
				if math.IsNaN(x) || math.IsInf(x, 0) {
					return s, badTune(field+"."+name, string(args), "must be finite")
				}
			}
			s.lo, s.hi = nums[0], nums[1]
			if !(s.lo < s.hi) {
				return s, badTune(field+"."+name, string(args), "lower must be below upper")
			}
			switch name {
			case "loguniform":
				if s.lo <= 0 {
					return s, badTune(field+"."+name, string(args), "lower must be positive")
				}
			case "randint":
				if s.lo != math.Trunc(s.lo) || s.hi != math.Trunc(s.hi) {
					return s, badTune(field+"."+name, string(args), "lower and upper must be integers (upper excluded)")
				}
			case "quniform":
				s.q = nums[2]
				if s.q <= 0 {
					return s, badTune(field+"."+name, string(args), "q must be positive")
				}
			}
		default:
			return s, badTune(field, name, fmt.Sprintf("unknown sampler: want one of %s", strings.Join(Samplers, ", ")))
		}
	}
	return s, nil
}

// first is a value of the sampler, to check the key with.
func (s sampler) first() json.RawMessage {
	switch s.kind {
	case "", "choice", "grid_search":
		return s.vals[0]
	case "randint":
		return fmtNum(s.lo, true)
	}
	return fmtNum(s.lo, false)
}

// grid is the values a grid search enumerates, or an error for a sampler
// that has no finite set of values.
func (s sampler) grid() ([]json.RawMessage, error) {
	switch s.kind {
	case "":
		return s.vals, nil
	case "choice", "grid_search":
		return s.vals, nil
	case "randint":
		if s.hi-s.lo > maxChoices {
			return nil, badTune("param_space."+s.key+".randint", fmt.Sprintf("[%g, %g]", s.lo, s.hi), fmt.Sprintf("has %g values: a grid takes at most %d", s.hi-s.lo, maxChoices))
		}
		var out []json.RawMessage
		for v := s.lo; v < s.hi; v++ {
			out = append(out, fmtNum(v, true))
		}
		return out, nil
	case "quniform":
		n := math.Floor((s.hi-s.lo)/s.q+1e-9) + 1
		if n > maxChoices {
			return nil, badTune("param_space."+s.key+".quniform", fmt.Sprintf("[%g, %g, %g]", s.lo, s.hi, s.q), fmt.Sprintf("has %g steps: a grid takes at most %d", n, maxChoices))
		}
		var out []json.RawMessage
		for i := 0; i < int(n); i++ {
			out = append(out, fmtNum(roundQ(s.lo+float64(i)*s.q, s.q), false))
		}
		return out, nil
	}
	return nil, badTune("param_space."+s.key, s.kind, `a continuous sampler cannot be enumerated by tune_config.search "grid": use grid_search, choice, randint or quniform, or search "random"`)
}

// sample draws one value.
func (s sampler) sample(rng *rand.Rand) json.RawMessage {
	switch s.kind {
	case "":
		return s.vals[0]
	case "choice":
		return s.vals[rng.IntN(len(s.vals))]
	case "uniform":
		return fmtNum(s.lo+rng.Float64()*(s.hi-s.lo), false)
	case "loguniform":
		l, h := math.Log(s.lo), math.Log(s.hi)
		return fmtNum(math.Exp(l+rng.Float64()*(h-l)), false)
	case "randint":
		return fmtNum(s.lo+float64(rng.Int64N(int64(s.hi-s.lo))), true)
	case "quniform":
		v := roundQ(s.lo+rng.Float64()*(s.hi-s.lo), s.q)
		return fmtNum(min(max(v, s.lo), s.hi), false)
	}
	panic("sample of " + s.kind)
}

// roundQ rounds v to a multiple of q (Ray's quantization), without the
// float noise of the division.
func roundQ(v, q float64) float64 {
	r := math.Round(v/q) * q
	f, _ := strconv.ParseFloat(strconv.FormatFloat(r, 'g', 12, 64), 64)
	return f
}

func fmtNum(v float64, integer bool) json.RawMessage {
	if integer {
		return json.RawMessage(strconv.FormatInt(int64(v), 10))
	}
	return json.RawMessage(strconv.FormatFloat(v, 'g', -1, 64))
}

// Trial is one point of the search: its name and the values its
// param_space keys take.
type Trial struct {
	Index  int                        `json:"index"`
	Name   string                     `json:"name"`
	Params map[string]json.RawMessage `json:"params"`
}

// TrialName is the run name of trial i.
func TrialName(i int) string { return fmt.Sprintf("trial_%04d", i) }

// ParamString is the trial's parameters, "config.lr=0.01 scaling.num_workers=2",
// keys sorted.
func (t Trial) ParamString() string { return paramString(t.Params) }

func paramString(p map[string]json.RawMessage) string {
	keys := make([]string, 0, len(p))
	for k := range p {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + string(p[k])
	}
	return strings.Join(parts, " ")
}

// trials generates the search's trials: a pure function of the input and
// seed. Trial i draws its values from a generator of its own (seed, i), keys
// in sorted order, so that a trial's values do not depend on the others.
func (in TuneInput) trials(space []sampler, seed int64) ([]Trial, error) {
	c := in.TuneConfig
	// The grid: grid_search keys in search "random", every key in "grid".
	var axes []sampler
	var values [][]json.RawMessage
	for _, s := range space {
		if s.kind == "grid_search" || (c.Search == "grid" && s.kind != "") {
			vs, err := s.grid()
			if err != nil {
				return nil, err
			}
			axes = append(axes, s)
			values = append(values, vs)
		}
	}
	cells := 1
	for _, vs := range values {
		cells *= len(vs)
		if cells*c.NumSamples > MaxTrials {
			return nil, badTune("param_space", fmt.Sprintf("a grid of at least %d points times num_samples %d", cells, c.NumSamples), fmt.Sprintf("at most %d trials", MaxTrials))
		}
	}
	var out []Trial
	for rep := 0; rep < c.NumSamples; rep++ {
		for cell := 0; cell < cells; cell++ {
			i := len(out)
			rng := rand.New(rand.NewPCG(uint64(seed), uint64(i)))
			t := Trial{Index: i, Name: TrialName(i), Params: map[string]json.RawMessage{}}
			// The grid's last axis varies fastest, as Ray's.
			rest := cell
			for a := len(axes) - 1; a >= 0; a-- {
				t.Params[axes[a].key] = values[a][rest%len(values[a])]
				rest /= len(values[a])
			}
			for _, s := range space {
				if _, ok := t.Params[s.key]; !ok {
					t.Params[s.key] = s.sample(rng)
				}
			}
			out = append(out, t)
		}
	}
	return out, nil
}

// TrialInput is the Fit input of trial t of the search named tune: the
// trainer with t's values, run {storage_path}/{tune}/{trial}, and checkpoints
// ranked by the search's metric unless the trainer ranks them otherwise.
func (in TuneInput) TrialInput(tune string, t Trial) (FitInput, error) {
	fi, err := setParams(in.Trainer, t.Params)
	if err != nil {
		return FitInput{}, err
	}
	fi.Run.StoragePath = JoinStorage(in.Trainer.Run.StoragePath, tune)
	fi.Run.Name = t.Name
	// A scheduled search promotes its best itself: its trials are not the
	// schedule's runs (their storage is the search's, not the schedule's).
	fi.Run.Schedule = ""
	if fi.Run.Checkpoint.ScoreAttribute == "" {
		fi.Run.Checkpoint.ScoreAttribute = in.TuneConfig.Metric
		fi.Run.Checkpoint.ScoreOrder = in.TuneConfig.Mode
	}
	return fi, nil
}

// JoinStorage is storage path p with one more path element.
func JoinStorage(p, elem string) string {
	return strings.TrimRight(p, "/") + "/" + elem
}

// setParams sets each dotted key of params in a copy of the trainer,
// through its JSON: a key that is no field of FitInput (below config, any
// key is), or a value its field cannot hold, is an error naming the key.
func setParams(trainer FitInput, params map[string]json.RawMessage) (FitInput, error) {
	b, err := json.Marshal(trainer)
	if err != nil {
		return FitInput{}, badTune("trainer", "", err.Error())
	}
	var doc map[string]any
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	if err := d.Decode(&doc); err != nil {
		return FitInput{}, badTune("trainer", "", err.Error())
	}
	keys := make([]string, 0, len(params))
	for k := range params {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		var v any
		d := json.NewDecoder(bytes.NewReader(params[k]))
		d.UseNumber()
		if err := d.Decode(&v); err != nil {
			return FitInput{}, badTune("param_space."+k, string(params[k]), err.Error())
		}
		segs := strings.Split(k, ".")
		m := doc
		for i, s := range segs[:len(segs)-1] {
			next, ok := m[s]
			if !ok || next == nil {
				nm := map[string]any{}
				m[s] = nm
				m = nm
				continue
			}
			nm, ok := next.(map[string]any)
			if !ok {
				return FitInput{}, badTune("param_space."+k, k, fmt.Sprintf("%s is not an object in the trainer", strings.Join(segs[:i+1], ".")))
			}
			m = nm
		}
		m[segs[len(segs)-1]] = v
	}
	b, err = json.Marshal(doc)
	if err != nil {
		return FitInput{}, badTune("param_space", "", err.Error())
	}
	var out FitInput
	d = json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(&out); err != nil {
		return FitInput{}, badTune("param_space", strings.Join(keys, ", "), "does not fit the trainer (a Fit input): "+err.Error())
	}
	return out, nil
}

// Trial statuses.
const (
	TrialPending   = "pending"
	TrialRunning   = "running"
	TrialCompleted = "completed"
	// TrialStopped: stopped early by the scheduler or the stop condition,
	// its checkpoints kept; not a failure.
	TrialStopped = "stopped"
	TrialFailed  = "failed"
)

// TrialReport is what a trial's Fit signals to its Tune (SignalTrialReport)
// for each report it records.
type TrialReport struct {
	Trial string `json:"trial"`
	// Index of the report in the trial's metrics.jsonl, from 0.
	Index   int     `json:"index"`
	Metrics Metrics `json:"metrics"`
	// Checkpoint is the URI of the checkpoint committed with it, if any.
	Checkpoint string    `json:"checkpoint,omitempty"`
	Time       time.Time `json:"time"`
}

// TrialResult is one trial of a TuneResult.
type TrialResult struct {
	Name       string                     `json:"name"`
	WorkflowID string                     `json:"workflow_id"`
	Params     map[string]json.RawMessage `json:"params"`
	Status     string                     `json:"status"`
	// Metric is the trial's best value of the search's metric; nil if it
	// reported none.
	Metric *float64 `json:"metric,omitempty"`
	// BestEpoch is the "epoch" of the report that had it (its
	// training_iteration when the report has no "epoch").
	BestEpoch float64 `json:"best_epoch,omitempty"`
	// Epochs is the highest "epoch" the trial reported (its reports when
	// it reports no "epoch").
	Epochs float64 `json:"epochs"`
	// Iterations counts its reports (training_iteration).
	Iterations int `json:"iterations"`
	// Checkpoint is the URI of its best checkpoint by the metric (its
	// latest when none has the metric).
	Checkpoint string `json:"checkpoint,omitempty"`
	// CheckpointSeq is that checkpoint's seq in the trial's run.
	CheckpointSeq int `json:"checkpoint_seq,omitempty"`
	// Path is the trial's run directory.
	Path string `json:"path,omitempty"`
	// StopReason says why a stopped trial was stopped.
	StopReason string `json:"stop_reason,omitempty"`
	// Error says why a failed trial failed.
	Error string `json:"error,omitempty"`
	// MetricNames are the keys its reports had: what a wrong metric name
	// is told.
	MetricNames []string  `json:"metric_names,omitempty"`
	Start       time.Time `json:"start,omitzero"`
	End         time.Time `json:"end,omitzero"`
}

// ParamString is the trial's parameters, keys sorted.
func (t TrialResult) ParamString() string { return paramString(t.Params) }

// TuneResult is what a Tune returns, and its Query answers while it runs.
type TuneResult struct {
	Name   string `json:"name"`
	Metric string `json:"metric"`
	Mode   string `json:"mode"`
	Seed   int64  `json:"seed"`
	// Trials, best first by Metric; those without it last, by name.
	Trials []TrialResult `json:"trials"`
	// Best is the best trial (nil until one reported the metric).
	Best *TrialResult `json:"best,omitempty"`
	// BestFile is the URI of best.json, once written.
	BestFile string `json:"best_file,omitempty"`
	// Done: the search ended.
	Done bool `json:"done,omitempty"`
	// Promoted: a scheduled search's best beat the schedule's promoted
	// model and replaced it ({storage}/{schedule}/promoted.json).
	Promoted bool `json:"promoted,omitempty"`
	// Error says why the search failed.
	Error string `json:"error,omitempty"`
	// Delay measures the reports' way from the trials' Fits to the Tune.
	Delay ReportDelay `json:"report_delay"`
}

// ReportDelay is the time from a trial's Fit recording a report to the Tune
// handling its signal, in workflow time (each workflow task's start).
type ReportDelay struct {
	Reports int     `json:"reports"`
	Sum     float64 `json:"sum_s"`
	Max     float64 `json:"max_s"`
}

// Mean is the mean delay in seconds.
func (d ReportDelay) Mean() float64 {
	if d.Reports == 0 {
		return 0
	}
	return d.Sum / float64(d.Reports)
}

// TuneBestRequest is the input of ActivityTuneBest: write Pointer to
// {StoragePath}/{Tune}/best.json. It returns the file's URI.
type TuneBestRequest struct {
	StoragePath string  `json:"storage_path"`
	Tune        string  `json:"tune"`
	Pointer     Pointer `json:"pointer"`
}

// Better says whether a beats b in mode.
func Better(a, b float64, mode string) bool {
	if mode == "min" {
		return a < b
	}
	return a > b
}

// SortTrials sorts trials best first by their metric in mode; those
// without one last, by name.
func SortTrials(trials []TrialResult, mode string) {
	slices.SortStableFunc(trials, func(a, b TrialResult) int {
		switch {
		case a.Metric != nil && b.Metric != nil:
			if Better(*a.Metric, *b.Metric, mode) {
				return -1
			}
			if Better(*b.Metric, *a.Metric, mode) {
				return 1
			}
		case a.Metric != nil:
			return -1
		case b.Metric != nil:
			return 1
		}
		return strings.Compare(a.Name, b.Name)
	})
}

// TuneStateVersion is the format version of tune.json.
const TuneStateVersion = 1

// TuneState is {storage}/{tune}/tune.json: what a search started again with
// the same name continues from (its seed, its trials as they ended, the
// scheduler's rungs).
type TuneState struct {
	Version int           `json:"version"`
	Name    string        `json:"name"`
	Seed    int64         `json:"seed"`
	Trials  []TrialResult `json:"trials"`
	ASHA    *ASHA         `json:"asha,omitempty"`
	Updated time.Time     `json:"updated"`
}

// TuneStateRequest is the input of ActivityLoadTune (State unset) and
// ActivitySaveTune.
type TuneStateRequest struct {
	StoragePath string     `json:"storage_path"`
	Tune        string     `json:"tune"`
	State       *TuneState `json:"state,omitempty"`
}

// Ended says whether a trial's status is final.
func (t TrialResult) Ended() bool {
	return t.Status == TrialCompleted || t.Status == TrialStopped || t.Status == TrialFailed
}
