package kern

import "math"

// BatchNormTrain normalises each channel with the batch's statistics and
// updates the running ones as PyTorch does (momentum m, unbiased running
// variance). Sums are taken in float64.
//
//	x [n, c, s] (s = H·W, 1 for BatchNorm1d), gamma, beta [c] → y [n, c, s]
//	mean, invstd [c]: saved for the backward; runMean, runVar [c]: updated
func BatchNormTrain[T Float](x, gamma, beta, y, mean, invstd, runMean, runVar []T, n, c, s int, momentum, eps float64) {
	cnt := float64(n * s)
	for ch := 0; ch < c; ch++ {
		var sum float64
		for i := 0; i < n; i++ {
			for _, v := range x[(i*c+ch)*s : (i*c+ch+1)*s] {
				sum += float64(v)
			}
		}
		mu := sum / cnt
		var sq float64
		for i := 0; i < n; i++ {
			for _, v := range x[(i*c+ch)*s : (i*c+ch+1)*s] {
				d := float64(v) - mu
				sq += d * d
			}
		}
		variance := sq / cnt
		is := 1 / math.Sqrt(variance+eps)
		mean[ch], invstd[ch] = T(mu), T(is)
		unbiased := variance
		if cnt > 1 {
			unbiased = sq / (cnt - 1)
		}
		runMean[ch] = T((1-momentum)*float64(runMean[ch]) + momentum*mu)
		runVar[ch] = T((1-momentum)*float64(runVar[ch]) + momentum*unbiased)
		scale := T(is) * gamma[ch]
		shift := beta[ch] - T(mu)*scale
		for i := 0; i < n; i++ {
			xs, ys := x[(i*c+ch)*s:(i*c+ch+1)*s], y[(i*c+ch)*s:(i*c+ch+1)*s]
			for j, v := range xs {
				ys[j] = v*scale + shift
			}
		}
	}
}

// BatchNormEval normalises with the running statistics.
//
//	x [n, c, s] → y [n, c, s]
func BatchNormEval[T Float](x, gamma, beta, runMean, runVar, y []T, n, c, s int, eps float64) {
	for ch := 0; ch < c; ch++ {
		scale := T(1/math.Sqrt(float64(runVar[ch])+eps)) * gamma[ch]
		shift := beta[ch] - runMean[ch]*scale
		for i := 0; i < n; i++ {
			xs, ys := x[(i*c+ch)*s:(i*c+ch+1)*s], y[(i*c+ch)*s:(i*c+ch+1)*s]
			for j, v := range xs {
				ys[j] = v*scale + shift
			}
		}
	}
}

// BatchNormBackward is BatchNormTrain's backward.
//
//	x, dy [n, c, s], gamma, mean, invstd [c] → dx [n, c, s], dgamma, dbeta [c]
//	x̂ = (x-mean)·invstd; dbeta = Σ dy; dgamma = Σ dy·x̂
//	dx = gamma·invstd/M · (M·dy - dbeta - x̂·dgamma), M = n·s
func BatchNormBackward[T Float](x, gamma, dy, mean, invstd, dx, dgamma, dbeta []T, n, c, s int) {
	cnt := float64(n * s)
	for ch := 0; ch < c; ch++ {
		mu, is := float64(mean[ch]), float64(invstd[ch])
		var sdy, sdyx float64
		for i := 0; i < n; i++ {
			xs, dys := x[(i*c+ch)*s:(i*c+ch+1)*s], dy[(i*c+ch)*s:(i*c+ch+1)*s]
			for j, v := range xs {
				g := float64(dys[j])
				sdy += g
				sdyx += g * (float64(v) - mu) * is
			}
		}
		dbeta[ch], dgamma[ch] = T(sdy), T(sdyx)
		k := float64(gamma[ch]) * is / cnt
		a := T(k * cnt)         // coefficient of dy
		b := T(-k * sdy)        // constant
		cx := T(-k * sdyx * is) // coefficient of (x - mean)
		m := T(mu)
		for i := 0; i < n; i++ {
			xs, dys, dxs := x[(i*c+ch)*s:(i*c+ch+1)*s], dy[(i*c+ch)*s:(i*c+ch+1)*s], dx[(i*c+ch)*s:(i*c+ch+1)*s]
			for j, v := range xs {
				dxs[j] = a*dys[j] + b + cx*(v-m)
			}
		}
	}
}
