package gbdt

import (
	"context"
	"fmt"
	"math"
	"strconv"
)

// State is everything training needs to go on after a round: the
// parameters, the model so far (in XGBoost's JSON format), the cut points
// and the early-stopping state. There is no random state to carry: subsample
// and colsample_bytree draw from a hash of (seed, round, group, row or
// feature). It is the same on every rank, so rank 0 alone can checkpoint it;
// encoding/json marshals it, and Resume from it, with any world size, gives
// the model an uninterrupted run gives, byte for byte.
type State struct {
	Params Params `json:"params"`
	Round  int    `json:"round"` // rounds done
	Model  *Model `json:"model"`
	Cuts   *Cuts  `json:"cuts"`
	// Early stopping: the best score (a string, as it may be NaN) and its
	// round (-1 before any), and whether training stopped.
	BestScore     string `json:"best_score"`
	BestIteration int    `json:"best_iteration"`
	Stopped       bool   `json:"stopped"`
}

// State returns the trainer's state after the rounds done so far.
func (t *Trainer) State() *State {
	cuts := &Cuts{
		Ptr:     append([]uint32(nil), t.cuts.Ptr...),
		Values:  append([]float32(nil), t.cuts.Values...),
		Min:     append([]float32(nil), t.cuts.Min...),
		Missing: append([]bool(nil), t.cuts.Missing...),
	}
	p := t.p
	p.EvalMetric = append([]string(nil), p.EvalMetric...)
	return &State{
		Params:        p,
		Round:         t.round,
		Model:         t.model.clone(),
		Cuts:          cuts,
		BestScore:     strconv.FormatFloat(t.es.bestScore, 'g', -1, 64),
		BestIteration: t.es.bestIter,
		Stopped:       t.es.stopped,
	}
}

// Resume continues training from st on every rank's shard of train (the
// same rows as the run that saved st, split across any number of ranks):
// the margins are recomputed from the model, the cut points come from st.
// Collective. To train further than st.Params.NumBoostRound, raise it in st
// before resuming.
func Resume(ctx context.Context, c Collective, st *State, train *Dataset, evals ...Eval) (*Trainer, error) {
	if st == nil || st.Model == nil || st.Cuts == nil {
		return nil, fmt.Errorf("gbdt: resume: incomplete state (model or cuts missing)")
	}
	p := st.Params
	if err := p.Validate(); err != nil {
		return nil, err
	}
	t, err := newTrainer(ctx, c, p, train, evals)
	if err != nil {
		return nil, err
	}
	cuts := st.Cuts
	if len(cuts.Ptr) != train.Cols+1 || len(cuts.Min) != train.Cols || len(cuts.Missing) != train.Cols ||
		int(cuts.Ptr[train.Cols]) != len(cuts.Values) {
		return nil, fmt.Errorf("gbdt: resume: the state's cuts are for another number of features than the data's %d", train.Cols)
	}
	for f := range train.Cols {
		if cuts.Ptr[f+1] < cuts.Ptr[f] {
			return nil, fmt.Errorf("gbdt: resume: the state's cuts of feature %d are malformed", f)
		}
	}
	m := st.Model.clone()
	if m.Objective != p.Objective || m.NumFeature != train.Cols || m.NumGroups() != p.groups() {
		return nil, fmt.Errorf("gbdt: resume: the state's model (%s, %d features, %d groups) does not match the parameters and data (%s, %d features, %d groups)",
			m.Objective, m.NumFeature, m.NumGroups(), p.Objective, train.Cols, p.groups())
	}
	if len(m.Trees) != st.Round*p.groups() {
		return nil, fmt.Errorf("gbdt: resume: the state's model has %d trees after %d rounds, want %d", len(m.Trees), st.Round, st.Round*p.groups())
	}
	if err := m.check(); err != nil {
		return nil, err
	}
	t.cuts = cuts
	t.bins = newBinMatrix(cuts, train.X, train.Rows, train.Cols)
	// Trees of a state are the state's own (clone shares them): bind copies.
	for i, tr := range m.Trees {
		cp := *tr
		if err := cp.bindBins(cuts); err != nil {
			return nil, fmt.Errorf("gbdt: resume: tree %d: %w", i, err)
		}
		m.Trees[i] = &cp
	}
	m.Attributes = map[string]string{}
	for k, v := range st.Model.Attributes {
		m.Attributes[k] = v
	}
	t.model = m
	t.round = st.Round
	bs, err := strconv.ParseFloat(st.BestScore, 64)
	if err != nil {
		bs = math.NaN()
	}
	t.es = earlyStop{bestScore: bs, bestIter: st.BestIteration, stopped: st.Stopped}
	// Margins: the same float32 additions, tree by tree, as training made.
	k := t.k
	for ti, tr := range m.Trees {
		g := m.TreeInfo[ti]
		for r := range train.Rows {
			t.margins[r*k+g] += tr.Cond[tr.leafBins(t.bins, r)]
		}
	}
	for _, e := range t.evals {
		if !e.isTrain {
			if err := m.addTrees(0, len(m.Trees), e.d.X, e.d.Rows, e.margins); err != nil {
				return nil, err
			}
		}
	}
	return t, nil
}
