package compute

// CrossEntropy is softmax followed by the mean negative log-likelihood.
//
//	logits [n, classes], labels [n] (class indices as floats) → loss (scalar), dlogits [n, classes]
type CrossEntropy struct {
	be      Backend
	dlogits Tensor
	stats   Tensor
	// host receives stats. A slice of its own, not an array field: a device
	// backend hands its address to cgo, which refuses memory that shares an
	// allocation with Go pointers (be, the tensors).
	host []float32
}

// NewCrossEntropy allocates the loss for batches up to maxBatch.
func NewCrossEntropy(be Backend, maxBatch, classes int) *CrossEntropy {
	return &CrossEntropy{be: be, dlogits: be.New(maxBatch, classes), stats: be.New(2), host: make([]float32, 2)}
}

// Forward computes the loss of a batch. It returns the summed (not averaged)
// loss and the number of rows whose first maximum logit is the label. With
// grad it also computes dL/dlogits of the mean loss, returned by Grad.
func (l *CrossEntropy) Forward(logits, labels Tensor, grad bool) (lossSum float64, correct int) {
	var d Tensor
	if grad {
		d = rows(l.dlogits, logits.Dim(0))
	}
	l.be.SoftmaxCrossEntropy(logits, labels, d, l.stats)
	l.be.Download(l.host, l.stats)
	return float64(l.host[0]), int(l.host[1])
}

// Grad returns dL/dlogits [n, classes] of the last Forward with grad.
func (l *CrossEntropy) Grad(n int) Tensor { return rows(l.dlogits, n) }
