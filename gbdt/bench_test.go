package gbdt

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkTrain trains 10 rounds (depth 6) on a generated table, one rank
// and two over loopback: go test ./gbdt -run '^$' -bench Train -benchtime 1x.
func BenchmarkTrain(b *testing.B) {
	for _, tc := range []struct {
		rows, cols int
		obj        string
		classes    int
	}{
		{200_000, 28, BinaryLogistic, 0},
		{20_000, 200, MultiSoftprob, 5},
	} {
		d := synth(tc.rows, tc.cols, tc.obj, tc.classes, 1)
		p := DefaultParams()
		p.Objective, p.NumClass, p.NumBoostRound = tc.obj, tc.classes, 10
		for _, n := range []int{1, 2} {
			b.Run(fmt.Sprintf("%s/%dx%d/ranks=%d", tc.obj, tc.rows, tc.cols, n), func(b *testing.B) {
				comms := group(b, n)
				shards := shard(d, unevenSizes(d.Rows, n)...)
				for b.Loop() {
					if err := firstErr(each(n, func(r int) error {
						_, _, err := Train(context.Background(), comms[r], p, shards[r])
						return err
					})); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkKernels compares the C hot loops with their Go references.
func BenchmarkKernels(b *testing.B) {
	d := synth(100_000, 28, RegSquaredError, 0, 2)
	cuts, err := sketch(context.Background(), Local(), d, 256)
	if err != nil {
		b.Fatal(err)
	}
	m := newBinMatrix(cuts, d.X, d.Rows, d.Cols)
	rows := make([]uint32, 0, d.Rows)
	for i := 0; i < d.Rows; i += 2 {
		rows = append(rows, uint32(i))
	}
	rand.New(rand.NewPCG(1, 1)).Shuffle(len(rows), func(i, j int) { rows[i], rows[j] = rows[j], rows[i] })
	gh := make([]float64, 2*d.Rows)
	for i := range gh {
		gh[i] = float64(i % 1000)
	}
	hist := make([]float64, 2*m.slots())
	ghp := make([]int64, d.Rows)
	for i := range ghp {
		ghp[i] = int64(i%1000-500)<<32 + int64(i%700)
	}
	acc := make([]int64, m.slots())
	tmp := make([]uint32, d.Rows)
	model, _, err := Train(context.Background(), Local(), Params{Objective: RegSquaredError, NumBoostRound: 20, Eta: 0.3, MaxDepth: 6,
		GrowPolicy: Depthwise, MinChildWeight: 1, Lambda: 1, Subsample: 1, ColsampleBytree: 1, MaxBin: 256, BaseScore: 0.5, ScalePosWeight: 1}, d)
	if err != nil {
		b.Fatal(err)
	}
	out := make([]float32, d.Rows)
	for _, impl := range []struct {
		name string
		c    bool
	}{{"C", true}, {"Go", false}} {
		b.Run("bin/"+impl.name, func(b *testing.B) {
			defer func(v bool) { useC = v }(useC)
			useC = impl.c
			for b.Loop() {
				newBinMatrix(cuts, d.X, d.Rows, d.Cols)
			}
		})
		b.Run("hist/"+impl.name, func(b *testing.B) {
			defer func(v bool) { useC = v }(useC)
			useC = impl.c
			for b.Loop() {
				m.hist(rows, gh, hist)
			}
		})
		b.Run("hist-packed/"+impl.name, func(b *testing.B) {
			defer func(v bool) { useC = v }(useC)
			useC = impl.c
			for b.Loop() {
				m.histPacked(rows, ghp, acc, hist)
			}
		})
		b.Run("partition/"+impl.name, func(b *testing.B) {
			defer func(v bool) { useC = v }(useC)
			useC = impl.c
			// A node's rows are ascending (partitions are stable) and not
			// yet partitioned by the split.
			sorted := make([]uint32, 0, len(rows))
			for i := 0; i < d.Rows; i += 2 {
				sorted = append(sorted, uint32(i))
			}
			work := make([]uint32, len(rows))
			for b.Loop() {
				copy(work, sorted)
				m.partition(work, 3, 100, true, tmp)
			}
		})
		b.Run("predict/"+impl.name, func(b *testing.B) {
			defer func(v bool) { useC = v }(useC)
			useC = impl.c
			for b.Loop() {
				model.addTrees(0, len(model.Trees), d.X, d.Rows, out)
			}
		})
	}
}

// BenchmarkTrainEval is a run's rounds with and without evaluation: 2
// ranks, 500k rows × 28 and a 50k-row valid set, AUC on train and valid
// every round (issue 32: evaluation ≤ 15% of a round). It reports rank 0's
// share of the rounds' time spent in evaluation (Trainer.Timings):
// go test ./gbdt -run '^$' -bench TrainEval -benchtime 1x.
func BenchmarkTrainEval(b *testing.B) {
	const n = 2
	d := synth(500_000, 28, BinaryLogistic, 0, 1)
	v := synth(50_000, 28, BinaryLogistic, 0, 2)
	p := DefaultParams()
	p.Objective, p.NumBoostRound, p.EvalMetric = BinaryLogistic, 20, []string{"auc"}
	comms := group(b, n)
	// Even shards, as Fit's readers make.
	shards := shard(d, d.Rows/n, d.Rows/n)
	vshards := shard(v, v.Rows/n, v.Rows/n)
	for _, evals := range []bool{false, true} {
		b.Run(fmt.Sprintf("evals=%v", evals), func(b *testing.B) {
			var tm Timings
			for b.Loop() {
				if err := firstErr(each(n, func(r int) error {
					var ev []Eval
					if evals {
						ev = []Eval{{"train", shards[r]}, {"valid", vshards[r]}}
					}
					t, err := NewTrainer(context.Background(), comms[r], p, shards[r], ev...)
					if err != nil {
						return err
					}
					if err := t.Run(context.Background(), nil); err != nil {
						return err
					}
					if r == 0 {
						tm = t.Timings()
					}
					return nil
				})); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(100*tm.Eval.Seconds()/(tm.Eval+tm.Trees).Seconds(), "eval%")
			b.ReportMetric(tm.Trees.Seconds()/float64(p.NumBoostRound)*1e3, "trees-ms/round")
			b.ReportMetric(tm.Eval.Seconds()/float64(p.NumBoostRound)*1e3, "eval-ms/round")
		})
	}
}
