package predict

import (
	"bytes"
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/tempotrain/tempotrain/gbdt"
)

// BenchmarkGBDTPredict: a Predict of 20,000 rows by an XGBoost JSON
// model of 100 depth-6 trees over 28 features (the shape of bench/predict
// -gbdt's binary table): its rows/s.
func BenchmarkGBDTPredict(b *testing.B) {
	const rows, cols = 20000, 28
	rng := rand.New(rand.NewPCG(7, rows))
	d := &gbdt.Dataset{Rows: rows, Cols: cols}
	for range rows {
		var s float64
		for f := range cols {
			v := float32(rng.NormFloat64())
			s += float64(v) * float64(f%4-1)
			if rng.IntN(9) == 0 {
				v = float32(math.NaN())
			}
			d.X = append(d.X, v)
		}
		d.Label = append(d.Label, float32(max(0, math.Copysign(1, s))))
	}
	prm, err := gbdt.ParseParams([]byte(`{"objective":"binary:logistic","num_boost_round":100,"max_depth":6}`))
	if err != nil {
		b.Fatal(err)
	}
	m, _, err := gbdt.Train(context.Background(), gbdt.Local(), prm, d)
	if err != nil {
		b.Fatal(err)
	}
	buf, err := m.MarshalJSON()
	if err != nil {
		b.Fatal(err)
	}
	p, err := LoadXGBoost(bytes.NewReader(buf))
	if err != nil {
		b.Fatal(err)
	}
	in := Batch{Inputs: []Tensor{{Name: "features", Datatype: FP32, Shape: []int{rows, cols}, FP32: d.X}}}
	ctx := context.Background()
	for b.Loop() {
		if _, err := p.Predict(ctx, in); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)*rows/b.Elapsed().Seconds(), "rows/s")
}
