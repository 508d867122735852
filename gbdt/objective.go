package gbdt

import (
	"math"
)

// poissonMaxDeltaStep is count:poisson's max_delta_step (XGBoost's default,
// 0.7), which raises the hessian to exp(margin + 0.7) to keep Newton steps
// safe.
const poissonMaxDeltaStep = float32(0.7)

const hessEps = 1e-16

// baseMargin is base_score in margin space (XGBoost's ProbToMargin).
func baseMargin(objective string, baseScore float64) float32 {
	b := float32(baseScore)
	switch objective {
	case RegLogistic, BinaryLogistic:
		return float32(-math.Log(float64(1/b - 1)))
	case CountPoisson:
		return float32(math.Log(float64(b)))
	}
	return b
}

// sigmoid is XGBoost's common::Sigmoid in float32.
func sigmoid(x float32) float32 {
	return float32(1 / (1 + math.Exp(float64(min(-x, 88.7)))))
}

// gradients writes the first and second derivatives of the loss at margins
// (rows × k, row-major) into g and h (same shape), times the instance
// weights. pred, when not nil, is transform's output for margins (the
// probabilities of a logistic objective, which the last round's evaluation
// computed): they are not computed again.
func gradients(p Params, margins []float32, pred []float32, d *Dataset, g, h []float64) {
	k := p.groups()
	switch p.Objective {
	case RegSquaredError:
		for i, y := range d.Label {
			w := d.weight(i)
			g[i] = (float64(margins[i]) - float64(y)) * w
			h[i] = w
		}
	case RegLogistic, BinaryLogistic:
		spw := p.ScalePosWeight
		for i, y := range d.Label {
			w := d.weight(i)
			if y == 1 {
				w *= spw
			}
			var pr float64
			if pred != nil {
				pr = float64(pred[i])
			} else {
				pr = float64(sigmoid(margins[i]))
			}
			g[i] = (pr - float64(y)) * w
			h[i] = math.Max(pr*(1-pr), hessEps) * w
		}
	case CountPoisson:
		for i, y := range d.Label {
			w := d.weight(i)
			m := float64(margins[i])
			g[i] = (math.Exp(m) - float64(y)) * w
			h[i] = math.Exp(m+float64(poissonMaxDeltaStep)) * w
		}
	case MultiSoftprob, MultiSoftmax:
		prob := make([]float64, k)
		for i, y := range d.Label {
			w := d.weight(i)
			softmax(margins[i*k:(i+1)*k], prob)
			for c := range k {
				pc := prob[c]
				gc := pc
				if int(y) == c {
					gc -= 1
				}
				g[i*k+c] = gc * w
				h[i*k+c] = math.Max(2*pc*(1-pc), hessEps) * w
			}
		}
	}
}

// softmax writes the softmax of m into out (float64, max subtracted).
func softmax(m []float32, out []float64) {
	mx := m[0]
	for _, v := range m[1:] {
		mx = max(mx, v)
	}
	s := 0.0
	for c, v := range m {
		e := math.Exp(float64(v - mx))
		out[c] = e
		s += e
	}
	for c := range out {
		out[c] /= s
	}
}

// transform turns margins (rows × k) into predictions: probabilities for
// logistic and softprob objectives (rows × k), the class index for
// multi:softmax (rows), the mean count for count:poisson, the margin for
// reg:squarederror.
func transform(objective string, k int, margins []float32) []float32 {
	return transformInto(objective, k, margins, nil)
}

// transformInto is transform into buf where it has the capacity.
func transformInto(objective string, k int, margins []float32, buf []float32) []float32 {
	switch objective {
	case RegLogistic, BinaryLogistic:
		out := grow32(buf, len(margins))
		for i, m := range margins {
			out[i] = sigmoid(m)
		}
		return out
	case CountPoisson:
		out := grow32(buf, len(margins))
		for i, m := range margins {
			out[i] = float32(math.Exp(float64(m)))
		}
		return out
	case MultiSoftprob:
		out := grow32(buf, len(margins))
		prob := make([]float64, k)
		for i := 0; i < len(margins); i += k {
			softmax(margins[i:i+k], prob)
			for c := range k {
				out[i+c] = float32(prob[c])
			}
		}
		return out
	case MultiSoftmax:
		out := make([]float32, len(margins)/k)
		for i := range out {
			out[i] = float32(argmax(margins[i*k : (i+1)*k]))
		}
		return out
	}
	return append([]float32(nil), margins...)
}

// grow32 is buf resized to n, or a new slice where buf is too small.
func grow32(buf []float32, n int) []float32 {
	if cap(buf) < n {
		return make([]float32, n)
	}
	return buf[:n]
}

func argmax(v []float32) int {
	best := 0
	for c := 1; c < len(v); c++ {
		if v[c] > v[best] {
			best = c
		}
	}
	return best
}
