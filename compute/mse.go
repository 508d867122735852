package compute

// MSE is the mean squared error of a regression (PyTorch's MSELoss with
// reduction "mean"):
//
//	predictions [n, k], targets [n, k] (or [n] when k = 1) → loss (scalar), dpredictions [n, k]
//
// It works on the host: a device backend's predictions and targets are
// downloaded and the gradient uploaded ([n, k] floats, small beside the
// model's own work).
type MSE struct {
	be      Backend
	outputs int
	grad    Tensor
	hp, ht  []float32 // host copies, for device backends
	hg      []float32
}

// NewMSE allocates the loss for batches up to maxBatch of outputs values
// each.
func NewMSE(be Backend, maxBatch, outputs int) *MSE {
	return &MSE{be: be, outputs: outputs, grad: be.New(maxBatch, outputs)}
}

// Forward returns the summed (not averaged) squared error of a batch, Σ (p -
// y)² over its rows and outputs, in float64. With grad it also computes the
// gradient of the mean loss, 2(p - y)/(n·k), returned by Grad.
func (l *MSE) Forward(pred, target Tensor, grad bool) (sqSum float64) {
	n := pred.Dim(0)
	m := n * l.outputs
	p, t := pred.Data(), target.Data()
	if p == nil {
		l.hp = growF32(l.hp, m)
		l.be.Download(l.hp, pred)
		p = l.hp
	}
	if t == nil {
		l.ht = growF32(l.ht, m)
		l.be.Download(l.ht, target)
		t = l.ht
	}
	p, t = p[:m], t[:m]
	var g []float32
	if grad {
		if g = rows(l.grad, n).Data(); g == nil {
			l.hg = growF32(l.hg, m)
			g = l.hg
		}
	}
	scale := 2 / float64(m)
	for i, v := range p {
		d := float64(v) - float64(t[i])
		sqSum += d * d
		if g != nil {
			g[i] = float32(scale * d)
		}
	}
	if grad && rows(l.grad, n).Data() == nil {
		l.be.Upload(rows(l.grad, n), g)
	}
	return sqSum
}

// Grad returns dL/dpredictions [n, k] of the last Forward with grad.
func (l *MSE) Grad(n int) Tensor { return rows(l.grad, n) }

func growF32(s []float32, n int) []float32 {
	if cap(s) < n {
		return make([]float32, n)
	}
	return s[:n]
}
