package kern

import (
	"fmt"
	"testing"
)

// The convolutions of ResNet-18 on 1×28×28 inputs (compute's resnet18), batch 128.
func resnetConvs() []ConvShape {
	v := []ConvShape{
		{C: 1, H: 28, W: 28, K: 64, KH: 7, KW: 7, Stride: 2, Pad: 3},  // conv1
		{C: 64, H: 7, W: 7, K: 64, KH: 3, KW: 3, Stride: 1, Pad: 1},   // layer1
		{C: 64, H: 7, W: 7, K: 128, KH: 3, KW: 3, Stride: 2, Pad: 1},  // layer2.0.conv1
		{C: 128, H: 4, W: 4, K: 128, KH: 3, KW: 3, Stride: 1, Pad: 1}, // layer2
		{C: 128, H: 4, W: 4, K: 256, KH: 3, KW: 3, Stride: 2, Pad: 1}, // layer3.0.conv1
		{C: 256, H: 2, W: 2, K: 256, KH: 3, KW: 3, Stride: 1, Pad: 1}, // layer3
		{C: 256, H: 2, W: 2, K: 512, KH: 3, KW: 3, Stride: 2, Pad: 1}, // layer4.0.conv1
		{C: 512, H: 1, W: 1, K: 512, KH: 3, KW: 3, Stride: 1, Pad: 1}, // layer4
		{C: 256, H: 2, W: 2, K: 512, KH: 1, KW: 1, Stride: 2, Pad: 0}, // layer4.0.downsample
	}
	for i := range v {
		v[i].Init()
	}
	return v
}

func BenchmarkResNetConv(b *testing.B) {
	for _, s := range resnetConvs() {
		name := fmt.Sprintf("%dx%dx%d-k%d-%dx%ds%d", s.C, s.H, s.W, s.K, s.KH, s.KW, s.Stride)
		b.Run("im2col/"+name, func(b *testing.B) {
			n := 128
			g := group(n, s.Spatial, FwdSpan)
			x, col := fill32(n*s.C*s.H*s.W), make([]float32, s.Col*g*s.Spatial)
			in := s.C * s.H * s.W
			for b.Loop() {
				for i := 0; i < n; i++ {
					Im2Col(&s, x[i*in:(i+1)*in], col[(i%g)*s.Spatial:], g*s.Spatial)
				}
			}
		})
		b.Run("fwd/"+name, func(b *testing.B) { benchConv(b, s, false) })
		b.Run("bwd/"+name, func(b *testing.B) { benchConv(b, s, true) })
	}
}
