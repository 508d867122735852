package predict

import (
	"math"
	"testing"

	"github.com/tempotrain/tempotrain/data/format"
)

// The image classifier's normalisation gives whole pixels the loader's
// table values, bit for bit, and every other value (fractions, out of
// range, -0, NaN, values past int32) the formula's.
func TestImageNormalize(t *testing.T) {
	c := &imageClassifier{norm: format.NewNormalize(format.FashionMNISTMean, format.FashionMNISTStd)}
	formula := func(v float32) float32 {
		return float32((float64(v)/255 - format.FashionMNISTMean) / format.FashionMNISTStd)
	}
	var src, want []float32
	for v := range 256 {
		src, want = append(src, float32(v)), append(want, c.norm[v])
	}
	for _, v := range []float32{0.5, 254.5, 255.5, 256, -1, -0.25, 1e10, -1e10, 3e9, -3e9, float32(math.Inf(1)), float32(math.Inf(-1))} {
		src, want = append(src, v), append(want, formula(v))
	}
	src, want = append(src, float32(math.Copysign(0, -1))), append(want, c.norm[0])
	dst := make([]float32, len(src)+1)
	dst[len(src)] = 7
	c.normalize(dst, src)
	for i, v := range src {
		if math.Float32bits(dst[i]) != math.Float32bits(want[i]) {
			t.Errorf("pixel %v: %v, want %v", v, dst[i], want[i])
		}
	}
	if dst[len(src)] != 7 {
		t.Error("normalize wrote past the source's length")
	}
	nan := []float32{float32(math.NaN())}
	c.normalize(nan, nan)
	if !math.IsNaN(float64(nan[0])) {
		t.Errorf("NaN pixel: %v", nan[0])
	}
}

// BenchmarkImageNormalize: one batch of 256 Fashion-MNIST-sized images.
func BenchmarkImageNormalize(b *testing.B) {
	c := &imageClassifier{norm: format.NewNormalize(format.FashionMNISTMean, format.FashionMNISTStd)}
	src := make([]float32, 256*784)
	for i := range src {
		src[i] = float32(i * 7 % 256)
	}
	dst := make([]float32, len(src))
	for range b.N {
		c.normalize(dst, src)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(src)), "ns/pixel")
}
