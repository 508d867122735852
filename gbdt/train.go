package gbdt

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"
)

// Eval is a dataset that metrics are computed on after every round, under
// Name ("train", "valid", ...): each rank passes its own shard of it. Pass
// the training Dataset itself (the same pointer) to evaluate on the
// training rows without predicting them again.
type Eval struct {
	Name string
	Data *Dataset
}

// MetricValue is one metric on one evaluation set after a round.
type MetricValue struct {
	Name   string  // "{dataset}_{metric}", e.g. "valid_auc"
	Metric string  // "auc"
	Value  float64 // the same bits on every rank and every world size
}

// Round is what one boosting round reports.
type Round struct {
	Iteration int // 0-based
	Metrics   []MetricValue
}

// Map returns the metrics by name.
func (r Round) Map() map[string]float64 {
	m := make(map[string]float64, len(r.Metrics))
	for _, v := range r.Metrics {
		m[v.Name] = v.Value
	}
	return m
}

type evalSet struct {
	name    string
	d       *Dataset
	n       int     // rows over all ranks
	wscale  float64 // AUC's weight fixed point
	margins []float32
	isTrain bool
	scratch evalScratch
}

// Trainer trains one model, one boosting round per Step, on every rank of a
// group at once: all ranks create it with the same Params and call the same
// methods in the same order (each call is collective).
type Trainer struct {
	c      Collective
	p      Params
	cuts   *Cuts
	bins   *binMatrix
	labels *Dataset // Label, Weight only
	rowID  []uint64
	n      int // training rows over all ranks
	k      int
	// margins are rows × k float32, as XGBoost's predictions cache.
	margins []float32
	evals   []*evalSet
	model   *Model
	round   int
	es      earlyStop
	grads   []float64
	hess    []float64
	gr      grower
	times   Timings
	// pred are the probabilities of margins (logistic objectives, with the
	// training set among the evaluation sets), nil when margins changed
	// since; predBuf holds them.
	pred, predBuf []float32
}

// Timings are where a Trainer's rounds spent their time so far (this rank's
// wall time, collective waits included).
type Timings struct {
	Trees time.Duration // gradients, growing the trees, the margins' update
	Eval  time.Duration // the metrics of every evaluation set
}

// Timings returns the time spent in the rounds so far.
func (t *Trainer) Timings() Timings { return t.times }

type earlyStop struct {
	bestScore float64
	bestIter  int
	stopped   bool
}

// NewTrainer sketches the features of every rank's training shard (the
// cut points are agreed by all ranks), bins the shard and prepares the
// evaluation sets. Collective.
func NewTrainer(ctx context.Context, c Collective, p Params, train *Dataset, evals ...Eval) (*Trainer, error) {
	if err := p.Validate(); err != nil {
		return nil, invalid(err)
	}
	t, err := newTrainer(ctx, c, p, train, evals)
	if err != nil {
		return nil, err
	}
	if t.cuts, err = sketch(ctx, c, train, p.MaxBin); err != nil {
		return nil, err
	}
	t.bins = newBinMatrix(t.cuts, train.X, train.Rows, train.Cols)
	t.es = earlyStop{bestScore: math.NaN(), bestIter: -1}
	return t, nil
}

func newTrainer(ctx context.Context, c Collective, p Params, train *Dataset, evals []Eval) (*Trainer, error) {
	if c == nil {
		return nil, errors.New("gbdt: nil Collective (use Local() for a single rank)")
	}
	if err := train.check("train", p); err != nil {
		return nil, invalid(err)
	}
	if p.EarlyStoppingRounds > 0 && len(evals) == 0 {
		return nil, invalid(fmt.Errorf("gbdt: early_stopping_rounds = %d needs at least one evaluation set", p.EarlyStoppingRounds))
	}
	t := &Trainer{c: c, p: p, k: p.groups()}
	// All ranks must agree on the features; rows add up.
	cols, err := gatherInts(ctx, c, int64(train.Cols))
	if err != nil {
		return nil, err
	}
	for r, nc := range cols {
		if int(nc) != train.Cols {
			return nil, invalid(fmt.Errorf("gbdt: rank %d has %d features, rank %d has %d: every shard needs the same columns", r, nc, c.Rank(), train.Cols))
		}
	}
	rows, err := gatherInts(ctx, c, int64(train.Rows))
	if err != nil {
		return nil, err
	}
	off := 0
	for r, nr := range rows {
		if r < c.Rank() {
			off += int(nr)
		}
		t.n += int(nr)
	}
	t.labels = &Dataset{Rows: train.Rows, Label: append([]float32(nil), train.Label...)}
	if train.Weight != nil {
		t.labels.Weight = append([]float32(nil), train.Weight...)
	}
	t.rowID = make([]uint64, train.Rows)
	for i := range t.rowID {
		if train.RowID != nil {
			t.rowID[i] = train.RowID[i]
		} else {
			t.rowID[i] = uint64(off + i)
		}
	}
	base := baseMargin(p.Objective, p.BaseScore)
	t.margins = make([]float32, train.Rows*t.k)
	for i := range t.margins {
		t.margins[i] = base
	}
	for i, e := range evals {
		if e.Name == "" {
			return nil, fmt.Errorf("gbdt: evaluation set %d has no name", i)
		}
		es := &evalSet{name: e.Name, d: e.Data, isTrain: e.Data == train}
		if !es.isTrain {
			if err := e.Data.check(e.Name, p); err != nil {
				return nil, invalid(err)
			}
			if e.Data.Cols != train.Cols {
				return nil, fmt.Errorf("gbdt: evaluation set %s has %d features, train has %d", e.Name, e.Data.Cols, train.Cols)
			}
			es.margins = make([]float32, e.Data.Rows*t.k)
			for i := range es.margins {
				es.margins[i] = base
			}
		}
		d := e.Data
		if es.isTrain {
			d = t.labels
		}
		es.d = d
		ns, err := gatherInts(ctx, c, int64(d.Rows))
		if err != nil {
			return nil, err
		}
		for _, x := range ns {
			es.n += int(x)
		}
		w := []float64{0, 0}
		for i := range d.Rows {
			w[0] = max(w[0], d.weight(i))
		}
		if d.Weight != nil {
			w[1] = 1
		}
		if err := allMax(ctx, c, w); err != nil {
			return nil, err
		}
		if w[1] > 0 && w[0] > 0 {
			_, ex := math.Frexp(w[0])
			es.wscale = math.Ldexp(1, 31-ex)
		}
		t.evals = append(t.evals, es)
	}
	spw := 1.0
	if p.Objective == BinaryLogistic || p.Objective == RegLogistic {
		spw = p.ScalePosWeight
	}
	nc := 0
	if t.k > 1 {
		nc = t.k
	}
	t.model = &Model{Objective: p.Objective, NumClass: nc, NumFeature: train.Cols, BaseScore: float64(float32(p.BaseScore)),
		Attributes: map[string]string{}, ScalePosWeight: spw}
	t.grads = make([]float64, train.Rows*t.k)
	t.hess = make([]float64, train.Rows*t.k)
	return t, nil
}

// Done reports whether training is over: num_boost_round rounds done, or
// stopped early.
func (t *Trainer) Done() bool { return t.round >= t.p.NumBoostRound || t.es.stopped }

// Rounds is the number of rounds done.
func (t *Trainer) Rounds() int { return t.round }

// Params returns the parameters.
func (t *Trainer) Params() Params { return t.p }

// Cuts returns the cut points (shared; do not modify).
func (t *Trainer) Cuts() *Cuts { return t.cuts }

// Model returns the model so far (a copy that later rounds leave alone).
func (t *Trainer) Model() *Model { return t.model.clone() }

// Step runs one boosting round: one tree per output group, then the
// metrics of every evaluation set. Collective.
func (t *Trainer) Step(ctx context.Context) (Round, error) {
	if t.Done() {
		return Round{}, fmt.Errorf("gbdt: training is done (%d rounds)", t.round)
	}
	p := &t.p
	k := t.k
	n := t.labels.Rows
	start := time.Now()
	gradients(*p, t.margins, t.pred, t.labels, t.grads, t.hess)
	t.pred = nil
	// Per group: max |g|, max h, and -min h (a negative hessian rules out
	// the packed pairs).
	mx := make([]float64, 3*k)
	for i := range n {
		for g := range k {
			mx[3*g] = max(mx[3*g], math.Abs(t.grads[i*k+g]))
			mx[3*g+1] = max(mx[3*g+1], t.hess[i*k+g])
			mx[3*g+2] = max(mx[3*g+2], -t.hess[i*k+g])
		}
	}
	if err := allMax(ctx, t.c, mx); err != nil {
		return Round{}, err
	}
	gr := &t.gr
	if gr.rows == nil {
		*gr = grower{c: t.c, p: &t.p, cuts: t.cuts, m: t.bins, n: t.n,
			rows: make([]uint32, 0, n), tmp: make([]uint32, n),
			width: 2*t.bins.slots() + 2}
	}
	var skipped []uint32
	for g := range k {
		gr.fsg, gr.fsh = quantScale(mx[3*g], t.n), quantScale(mx[3*g+1], t.n)
		gr.packed = packedHist && t.n <= maxPackedRows && !(mx[3*g+2] > 0)
		if gr.packed {
			gr.sg, gr.sh = packedScales(mx[3*g], mx[3*g+1], t.n)
			if gr.ghp == nil {
				gr.ghp, gr.acc = make([]int64, n), make([]int64, t.bins.slots())
			}
			quantisePacked(t.grads, t.hess, n, k, g, gr.sg, gr.sh, gr.ghp)
		} else {
			gr.sg, gr.sh = gr.fsg, gr.fsh
		}
		if gr.gh == nil {
			gr.gh = make([]float64, 2*n)
		}
		quantise(t.grads, t.hess, n, k, g, gr.fsg, gr.fsh, gr.gh)
		gr.rows, skipped = gr.rows[:0], skipped[:0]
		for i := range n {
			if sampled(p, t.rowID[i], t.round, g) {
				gr.rows = append(gr.rows, uint32(i))
			} else {
				skipped = append(skipped, uint32(i))
			}
		}
		gr.feats = sampleFeatures(p, t.bins.cols, t.round, g, t.c.Rank(), t.c.Size())
		gr.leaves = gr.leaves[:0]
		if err := gr.grow(ctx); err != nil {
			return Round{}, err
		}
		if gr.packed {
			if err := gr.renew(ctx); err != nil {
				return Round{}, err
			}
		}
		tree := gr.tree
		for _, l := range gr.leaves {
			v := tree.Cond[l.id]
			for _, r := range gr.rows[l.begin:l.end] {
				t.margins[int(r)*k+g] += v
			}
		}
		for _, r := range skipped {
			t.margins[int(r)*k+g] += tree.Cond[tree.leafBins(t.bins, int(r))]
		}
		t.model.Trees = append(t.model.Trees, tree)
		t.model.TreeInfo = append(t.model.TreeInfo, g)
		last := len(t.model.Trees) - 1
		for _, e := range t.evals {
			if !e.isTrain {
				if err := t.model.addTrees(last, last+1, e.d.X, e.d.Rows, e.margins); err != nil {
					return Round{}, err
				}
			}
		}
	}
	res := Round{Iteration: t.round}
	t.round++
	// The probabilities of the training rows are the next round's
	// gradients' (logistic objectives): computed here, part of the round,
	// when the training set's metrics need them too.
	for _, e := range t.evals {
		if e.isTrain && (p.Objective == BinaryLogistic || p.Objective == RegLogistic) {
			t.predBuf = transformInto(p.Objective, k, t.margins, t.predBuf)
			t.pred = t.predBuf
			e.scratch.given = t.pred
		}
	}
	evalStart := time.Now()
	t.times.Trees += evalStart.Sub(start)
	defer func() { t.times.Eval += time.Since(evalStart) }()
	for _, e := range t.evals {
		mg := e.margins
		if e.isTrain {
			mg = t.margins
		}
		vals, err := evalMetrics(ctx, t.c, p, e.name, e.d, mg, e.n, e.wscale, &e.scratch)
		if err != nil {
			return Round{}, err
		}
		res.Metrics = append(res.Metrics, vals...)
	}
	if p.EarlyStoppingRounds > 0 && len(res.Metrics) > 0 {
		t.earlyStopping(res)
	}
	return res, nil
}

// earlyStopping follows XGBoost's EarlyStopping callback: the last metric
// of the last evaluation set decides; training stops once it has not
// improved for early_stopping_rounds rounds.
func (t *Trainer) earlyStopping(r Round) {
	mv := r.Metrics[len(r.Metrics)-1]
	s := mv.Value
	improved := false
	switch {
	case math.IsNaN(s):
	case t.es.bestIter < 0 || math.IsNaN(t.es.bestScore):
		improved = true
	case higherIsBetter(mv.Metric):
		improved = s > t.es.bestScore
	default:
		improved = s < t.es.bestScore
	}
	if improved {
		t.es.bestScore, t.es.bestIter = s, r.Iteration
	}
	if t.es.bestIter >= 0 {
		t.model.Attributes["best_iteration"] = strconv.Itoa(t.es.bestIter)
		t.model.Attributes["best_score"] = strconv.FormatFloat(t.es.bestScore, 'g', -1, 64)
	}
	if r.Iteration-max(t.es.bestIter, 0) >= t.p.EarlyStoppingRounds {
		t.es.stopped = true
	}
}

// Run steps until Done, calling report (if not nil) after each round; an
// error from report stops training and is returned.
func (t *Trainer) Run(ctx context.Context, report func(Round) error) error {
	for !t.Done() {
		r, err := t.Step(ctx)
		if err != nil {
			return err
		}
		if report != nil {
			if err := report(r); err != nil {
				return err
			}
		}
	}
	return nil
}

// Train trains a model with p on every rank's shard of train (collective):
// NewTrainer, then Run. It returns the model (the same on every rank) and
// every round's metrics.
func Train(ctx context.Context, c Collective, p Params, train *Dataset, evals ...Eval) (*Model, []Round, error) {
	t, err := NewTrainer(ctx, c, p, train, evals...)
	if err != nil {
		return nil, nil, err
	}
	var rounds []Round
	err = t.Run(ctx, func(r Round) error {
		rounds = append(rounds, r)
		return nil
	})
	if err != nil {
		return nil, rounds, err
	}
	return t.Model(), rounds, nil
}
