package gbdt

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"testing"
)

// TestResumeIsByteIdentical trains k rounds, serialises the state (JSON),
// resumes it (on another world size) and finishes: the model file must be
// byte-identical to an uninterrupted run's, and so must the metrics of the
// rounds after the resumption; with subsample, colsample, multi-class,
// lossguide and early stopping.
func TestResumeIsByteIdentical(t *testing.T) {
	cases := []struct {
		params        string
		stopAt        int
		before, after []int // world sizes (row splits) of the two runs
	}{
		{`{"objective":"multi:softprob","num_class":3,"num_boost_round":6,"subsample":0.7,"colsample_bytree":0.6,"seed":9}`, 2, []int{1}, []int{2}},
		{`{"objective":"binary:logistic","num_boost_round":30,"early_stopping_rounds":2,"eta":0.6,"max_depth":8,"min_child_weight":0,"eval_metric":"logloss"}`, 3, []int{2}, []int{3}},
		{`{"objective":"reg:squarederror","num_boost_round":5,"grow_policy":"lossguide","max_leaves":7,"max_depth":0,"alpha":0.2}`, 4, []int{3}, []int{1}},
	}
	for _, tc := range cases {
		p := mustParams(t, tc.params)
		t.Run(p.Objective, func(t *testing.T) {
			all := synth(900, 7, p.Objective, p.NumClass, 31)
			d, v := shard(all, 600, 300)[0], shard(all, 600, 300)[1]
			// Uninterrupted, one rank.
			ref, err := NewTrainer(context.Background(), Local(), p, d, Eval{Name: "valid", Data: v})
			if err != nil {
				t.Fatal(err)
			}
			var refRounds []Round
			if err := ref.Run(context.Background(), func(r Round) error { refRounds = append(refRounds, r); return nil }); err != nil {
				t.Fatal(err)
			}
			want := saveModel(t, ref.Model())
			// Interrupted after stopAt rounds on tc.before ranks.
			n := tc.before[0]
			sizes := unevenSizes(d.Rows, n)
			ds, vs := shard(d, sizes...), shard(v, unevenSizes(v.Rows, n)...)
			comms := group(t, n)
			states := make([][]byte, n)
			if err := firstErr(each(n, func(r int) error {
				tr, err := NewTrainer(context.Background(), comms[r], p, ds[r], Eval{Name: "valid", Data: vs[r]})
				if err != nil {
					return err
				}
				for range tc.stopAt {
					if _, err := tr.Step(context.Background()); err != nil {
						return err
					}
				}
				states[r], err = json.Marshal(tr.State())
				return err
			})); err != nil {
				t.Fatal(err)
			}
			for r := 1; r < n; r++ {
				if !bytes.Equal(states[r], states[0]) {
					t.Fatalf("rank %d's state differs from rank 0's", r)
				}
			}
			// Resumed on tc.after ranks from rank 0's state.
			n = tc.after[0]
			sizes = unevenSizes(d.Rows, n)
			ds, vs = shard(d, sizes...), shard(v, unevenSizes(v.Rows, n)...)
			comms = group(t, n)
			models := make([][]byte, n)
			rounds := make([][]Round, n)
			if err := firstErr(each(n, func(r int) error {
				var st State
				if err := json.Unmarshal(states[0], &st); err != nil {
					return err
				}
				tr, err := Resume(context.Background(), comms[r], &st, ds[r], Eval{Name: "valid", Data: vs[r]})
				if err != nil {
					return err
				}
				if err := tr.Run(context.Background(), func(x Round) error { rounds[r] = append(rounds[r], x); return nil }); err != nil {
					return err
				}
				var b bytes.Buffer
				if err := tr.Model().SaveJSON(&b); err != nil {
					return err
				}
				models[r] = b.Bytes()
				return nil
			})); err != nil {
				t.Fatal(err)
			}
			for r := range n {
				if !bytes.Equal(models[r], want) {
					t.Fatalf("rank %d: resumed model differs from the uninterrupted one:\n%s", r, firstDiff(want, models[r]))
				}
				if got, w := fmt.Sprint(rounds[r]), fmt.Sprint(refRounds[tc.stopAt:]); got != w {
					t.Fatalf("rank %d: metrics after resuming %s, uninterrupted %s", r, got, w)
				}
			}
		})
	}
}

func saveModel(t testing.TB, m *Model) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := m.SaveJSON(&b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestResumeRejectsMismatchedState(t *testing.T) {
	p := mustParams(t, `{"objective":"binary:logistic","num_boost_round":3}`)
	d := synth(200, 5, p.Objective, 0, 1)
	tr, err := NewTrainer(context.Background(), Local(), p, d)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Step(context.Background()); err != nil {
		t.Fatal(err)
	}
	st := tr.State()
	other := synth(200, 4, p.Objective, 0, 1)
	if _, err := Resume(context.Background(), Local(), st, other); err == nil {
		t.Fatal("resumed on data with another number of features")
	}
	st2 := *st
	st2.Round = 2
	if _, err := Resume(context.Background(), Local(), &st2, d); err == nil {
		t.Fatal("resumed a state whose round disagrees with its trees")
	}
	if _, err := Resume(context.Background(), Local(), &State{}, d); err == nil {
		t.Fatal("resumed an empty state")
	}
}
