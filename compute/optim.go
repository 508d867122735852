package compute

import (
	"fmt"
	"math"
)

// OptimizerConfig selects and tunes an optimizer. Defaults (zero values) are
// PyTorch's: no momentum, no weight decay, Adam betas 0.9/0.999, eps 1e-8.
type OptimizerConfig struct {
	// Name is "sgd" (default), "adam" or "adamw".
	Name string `json:"name,omitempty"`
	// SGD.
	Momentum  float64 `json:"momentum,omitempty"`
	Dampening float64 `json:"dampening,omitempty"`
	Nesterov  bool    `json:"nesterov,omitempty"`
	// WeightDecay is L2 (sgd, adam) or decoupled (adamw) weight decay.
	// adamw defaults to 0.01 as PyTorch's AdamW; set a negative value for 0.
	WeightDecay float64 `json:"weight_decay,omitempty"`
	// Adam and AdamW.
	Beta1 float64 `json:"beta1,omitempty"`
	Beta2 float64 `json:"beta2,omitempty"`
	Eps   float64 `json:"eps,omitempty"`
}

func (c OptimizerConfig) withDefaults() (OptimizerConfig, error) {
	if c.Name == "" {
		c.Name = "sgd"
	}
	switch c.Name {
	case "sgd":
		if c.Nesterov && (c.Momentum <= 0 || c.Dampening != 0) {
			return c, fmt.Errorf("optimizer sgd: nesterov needs momentum > 0 and dampening 0")
		}
	case "adam", "adamw":
		if c.Beta1 == 0 {
			c.Beta1 = 0.9
		}
		if c.Beta2 == 0 {
			c.Beta2 = 0.999
		}
		if c.Eps == 0 {
			c.Eps = 1e-8
		}
		if c.Name == "adamw" && c.WeightDecay == 0 {
			c.WeightDecay = 0.01
		}
		if c.Beta1 < 0 || c.Beta1 >= 1 || c.Beta2 < 0 || c.Beta2 >= 1 {
			return c, fmt.Errorf("optimizer %s: betas (%g, %g) outside [0, 1)", c.Name, c.Beta1, c.Beta2)
		}
	default:
		return c, fmt.Errorf("unknown optimizer %q (have sgd, adam, adamw)", c.Name)
	}
	if c.WeightDecay < 0 {
		c.WeightDecay = 0
	}
	if c.Momentum < 0 || math.IsNaN(c.Momentum) {
		return c, fmt.Errorf("optimizer %s: momentum %g < 0", c.Name, c.Momentum)
	}
	return c, nil
}

// Validate reports a configuration NewOptimizer would refuse.
func (c OptimizerConfig) Validate() error {
	_, err := c.withDefaults()
	return err
}

// Optimizer updates a model's parameters from their gradients, over the
// model's flat arena in one call per step. Its state (momentum or Adam
// moments) is laid out like Model.P.
type Optimizer struct {
	cfg   OptimizerConfig
	m     *Model
	slots []Tensor
	names []string
	steps int
}

// NewOptimizer returns an optimizer for m's parameters.
func NewOptimizer(m *Model, cfg OptimizerConfig) (*Optimizer, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	o := &Optimizer{cfg: cfg, m: m}
	n := m.P.Len()
	switch {
	case cfg.Name == "sgd" && cfg.Momentum > 0:
		o.names = []string{"momentum_buffer"}
	case cfg.Name == "adam", cfg.Name == "adamw":
		o.names = []string{"exp_avg", "exp_avg_sq"}
	}
	for range o.names {
		o.slots = append(o.slots, m.be.New(max(n, 1)).Flat(0, n))
	}
	return o, nil
}

// Config returns the configuration with defaults filled in.
func (o *Optimizer) Config() OptimizerConfig { return o.cfg }

// Steps counts the steps taken.
func (o *Optimizer) Steps() int { return o.steps }

// Step applies one update with learning rate lr.
func (o *Optimizer) Step(lr float64) {
	o.steps++
	c := o.cfg
	m := o.m
	switch c.Name {
	case "sgd":
		var buf Tensor
		if len(o.slots) > 0 {
			buf = o.slots[0]
		}
		m.be.SGD(m.P, m.G, buf, SGDConfig{LR: lr, Momentum: c.Momentum, Dampening: c.Dampening,
			WeightDecay: c.WeightDecay, Nesterov: c.Nesterov, First: o.steps == 1})
	default:
		m.be.Adam(m.P, m.G, o.slots[0], o.slots[1], AdamConfig{LR: lr, Beta1: c.Beta1, Beta2: c.Beta2,
			Eps: c.Eps, WeightDecay: c.WeightDecay, Decoupled: c.Name == "adamw", Step: o.steps})
	}
}

// Schedule gives the learning rate of each step (counted from 0 over the
// whole run).
type Schedule interface {
	LR(step int) float64
}

// ConstantLR is the same rate at every step.
type ConstantLR float64

func (c ConstantLR) LR(int) float64 { return float64(c) }

// StepLR multiplies Base by Gamma every Every steps (PyTorch's StepLR, with
// Every = step_size epochs × steps per epoch).
type StepLR struct {
	Base, Gamma float64
	Every       int
}

func (s StepLR) LR(step int) float64 {
	if s.Every <= 0 {
		return s.Base
	}
	return s.Base * math.Pow(s.Gamma, float64(step/s.Every))
}

// CosineLR anneals from Base to Min over Total steps along half a cosine,
// after Warmup steps of linear warm-up from 0; Min after Total.
type CosineLR struct {
	Base, Min     float64
	Total, Warmup int
}

func (c CosineLR) LR(step int) float64 {
	if step < c.Warmup {
		return c.Base * float64(step+1) / float64(c.Warmup)
	}
	span := c.Total - c.Warmup
	if span <= 0 || step >= c.Total {
		return c.Min
	}
	t := float64(step-c.Warmup) / float64(span)
	return c.Min + (c.Base-c.Min)*(1+math.Cos(math.Pi*t))/2
}
