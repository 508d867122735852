// Package benchdata generates the tables the benchmarks share, so that
// bench/gbdt and bench/predict train and predict on the same data.
package benchdata

import (
	"math"
	"math/rand/v2"
)

// BinaryCols is the number of features of Binary's rows.
const BinaryCols = 28

// Binary makes rows × BinaryCols features and binary labels, a function of
// seed: normal, uniform, heavy-tailed and few-valued features, 5% missing
// values (NaN) in four of them, and a logistic label of a nonlinear function
// of the features. x is row-major.
func Binary(rows int, seed uint64) (x, y []float32) {
	const cols = BinaryCols
	rng := rand.New(rand.NewPCG(seed, 0x6762647462))
	x = make([]float32, rows*cols)
	y = make([]float32, rows)
	nan := float32(math.NaN())
	for i := range rows {
		r := x[i*cols : (i+1)*cols]
		for f := range 12 {
			r[f] = float32(rng.NormFloat64())
		}
		for f := 12; f < 20; f++ {
			r[f] = float32(rng.Float64()*4 - 2)
		}
		for f := 20; f < 24; f++ {
			r[f] = float32(rng.ExpFloat64()) // heavy right tail
		}
		for f := 24; f < 28; f++ {
			r[f] = float32(rng.IntN(16)) // few distinct values
		}
		z := 0.8*float64(r[0]) - 0.6*float64(r[1]) + 0.5*float64(r[2]*r[3]) + math.Sin(2*float64(r[12])) +
			0.7*math.Abs(float64(r[13])) - 0.4*float64(r[20]) + 0.3*float64(r[24])/4 - 0.5*float64(r[4]*r[4]) +
			0.4*float64(r[5])*float64(r[14]) - 0.2
		if rng.Float64() < 1/(1+math.Exp(-2*z)) {
			y[i] = 1
		}
		for _, f := range []int{3, 9, 15, 21} {
			if rng.Float64() < 0.05 {
				r[f] = nan
			}
		}
	}
	return x, y
}
