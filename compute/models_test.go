package compute_test

import (
	"math"
	"strings"
	"testing"

	"github.com/tempotrain/tempotrain/compute"
)

// NewModelFor on Fashion-MNIST's shape is NewModel, bit for bit: the
// built-in functions' runs without datasets do not change.
func TestNewModelForFashionMNISTIsNewModel(t *testing.T) {
	t.Parallel()
	for _, name := range compute.ModelNames() {
		a, err := compute.NewModel(name, compute.CPU(), 2, 7)
		if err != nil {
			t.Fatal(err)
		}
		b, err := compute.NewModelFor(name, compute.CPU(), []int{1, 28, 28}, 10, 2, 7)
		if err != nil {
			t.Fatal(err)
		}
		if a.Summary() != b.Summary() || !equal(a.P.Data(), b.P.Data()) || !equal(a.B.Data(), b.B.Data()) {
			t.Errorf("%s: NewModelFor([1 28 28], 10) differs from NewModel", name)
		}
	}
}

// The models follow the data's shape and classes: other sizes, channels
// and class counts build, run forward and backward, and give one output per
// class.
func TestNewModelForOtherShapes(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name    string
		in      []int
		classes int
		params  int
	}{
		// conv1 3·9·32+32, conv2 32·9·64+64, fc1 64·8·8·128+128, fc2 128·5+5.
		{"cnn", []int{3, 32, 32}, 5, 896 + 18496 + 524416 + 645},
		// Odd sizes floor through both poolings: 30 → 15 → 7.
		{"cnn", []int{1, 30, 30}, 2, 320 + 18496 + (64*7*7*128 + 128) + 258},
		{"mlp", []int{3, 16, 16}, 4, (768*512 + 512) + (512*256 + 256) + (256*4 + 4)},
		{"mlp", []int{13}, 3, (13*512 + 512) + (512*256 + 256) + (256*3 + 3)},
		// ResNet-18: the stem takes 3 channels, fc 512→7; the rest is as on
		// Fashion-MNIST (11,175,370 - 64·49 - 5130).
		{"resnet18", []int{3, 24, 24}, 7, 11175370 - 64*49 - 5130 + 3*64*49 + 512*7 + 7},
	} {
		m, err := compute.NewModelFor(tt.name, compute.CPU(), tt.in, tt.classes, 3, 1)
		if err != nil {
			t.Fatalf("%s %v: %v", tt.name, tt.in, err)
		}
		if m.NumParams() != tt.params {
			t.Errorf("%s %v: %d parameters, want %d\n%s", tt.name, tt.in, m.NumParams(), tt.params, m.Summary())
		}
		if got := m.OutShape(); len(got) != 1 || got[0] != tt.classes {
			t.Errorf("%s %v: output shape %v, want [%d]", tt.name, tt.in, got, tt.classes)
		}
		x := compute.CPU().New(append([]int{3}, tt.in...)...)
		for i := range x.Data() {
			x.Data()[i] = float32(i%7) / 7
		}
		y := m.Forward(x, true)
		if y.Dim(0) != 3 || y.Dim(1) != tt.classes {
			t.Fatalf("%s %v: forward gives %d×%d", tt.name, tt.in, y.Dim(0), y.Dim(1))
		}
		dy := compute.CPU().New(3, tt.classes)
		for i := range dy.Data() {
			dy.Data()[i] = 0.1
		}
		m.Backward(dy, nil)
		var g float64
		for _, v := range m.G.Data() {
			g += math.Abs(float64(v))
		}
		if !(g > 0) {
			t.Errorf("%s %v: backward left every gradient zero", tt.name, tt.in)
		}
	}
}

func TestNewModelForErrors(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name    string
		in      []int
		classes int
		want    string
	}{
		{"vgg", []int{1, 28, 28}, 10, `unknown model "vgg"`},
		{"cnn", []int{1, 3, 3}, 10, "height and width at least 4"},
		{"cnn", []int{784}, 10, "want [channels height width]"},
		{"resnet18", []int{28, 28}, 10, "want [channels height width]"},
		{"mlp", []int{0}, 10, "at least 1"},
		{"mlp", []int{10}, 0, "0 outputs"},
	} {
		_, err := compute.NewModelFor(tt.name, compute.CPU(), tt.in, tt.classes, 2, 1)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s %v %d classes: error %v, want one saying %q", tt.name, tt.in, tt.classes, err, tt.want)
		}
	}
}

func TestNewMLP(t *testing.T) {
	t.Parallel()
	m, err := compute.NewMLP(compute.CPU(), 10, []int{64, 32}, 3, 4, 1)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range m.Params() {
		names = append(names, p.Name)
	}
	if got := strings.Join(names, " "); got != "fc1.weight fc1.bias fc2.weight fc2.bias fc3.weight fc3.bias" {
		t.Errorf("parameters %s", got)
	}
	if want := 10*64 + 64 + 64*32 + 32 + 32*3 + 3; m.NumParams() != want {
		t.Errorf("%d parameters, want %d", m.NumParams(), want)
	}
	// No hidden layer: a linear model.
	lin, err := compute.NewMLP(compute.CPU(), 5, nil, 1, 4, 1)
	if err != nil || lin.NumParams() != 6 {
		t.Errorf("linear model: %v, %d parameters, want 6", err, lin.NumParams())
	}
	same, _ := compute.NewMLP(compute.CPU(), 10, []int{64, 32}, 3, 4, 1)
	other, _ := compute.NewMLP(compute.CPU(), 10, []int{64, 32}, 3, 4, 2)
	if !equal(m.P.Data(), same.P.Data()) || equal(m.P.Data(), other.P.Data()) {
		t.Error("the seed does not fix the parameters")
	}
	if _, err := compute.NewMLP(compute.CPU(), 10, []int{64, 0}, 3, 4, 1); err == nil || !strings.Contains(err.Error(), "hidden layer 2 has 0 units") {
		t.Errorf("hidden size 0: %v", err)
	}
}

// MSE: PyTorch's MSELoss(reduction="mean"): the summed squared error, and
// the gradient of the mean, checked against the formula and against
// finite differences of the loss.
func TestMSE(t *testing.T) {
	t.Parallel()
	be := compute.CPU()
	l := compute.NewMSE(be, 4, 2)
	p := compute.HostTensor([]float32{1, 2, 3, 4, 5, 6}, 3, 2)
	y := compute.HostTensor([]float32{1.5, 2, 1, 4, 5, 8.25}, 3, 2)
	sum := l.Forward(p, y, true)
	// (−0.5)² + 0 + 2² + 0 + 0 + (−2.25)²
	if want := 0.25 + 4 + 5.0625; sum != want {
		t.Errorf("squared error sum %v, want %v", sum, want)
	}
	g := l.Grad(3).Data()
	if g == nil || len(g) != 6 {
		t.Fatalf("gradient %v", g)
	}
	mean := func(pv []float32) float64 {
		var s float64
		for i, v := range pv {
			d := float64(v) - float64(y.Data()[i])
			s += d * d
		}
		return s / 6
	}
	for i := range p.Data() {
		if want := float32(2 * (float64(p.Data()[i]) - float64(y.Data()[i])) / 6); g[i] != want {
			t.Errorf("grad[%d] = %v, want %v", i, g[i], want)
		}
		const h = 1e-3
		pp := append([]float32(nil), p.Data()...)
		pm := append([]float32(nil), p.Data()...)
		pp[i] += h
		pm[i] -= h
		fd := (mean(pp) - mean(pm)) / (2 * h)
		if math.Abs(fd-float64(g[i])) > 1e-4 {
			t.Errorf("grad[%d] = %v, finite differences %v", i, g[i], fd)
		}
	}
	// A smaller batch uses the first rows; targets may be [n] for one output.
	one := compute.NewMSE(be, 4, 1)
	if s := one.Forward(compute.HostTensor([]float32{2, 0}, 2, 1), compute.HostTensor([]float32{0, 1}, 2), false); s != 5 {
		t.Errorf("one output: %v, want 5", s)
	}
}

// resnet18 is initialised as the PyTorch models it is compared with
// (bench/train/ddp.py, bench/gpu/peer.py, python/examples/fashion_resnet18):
// torchvision's resnet18, whose convolutions get Kaiming normal (fan out,
// std √(2/(K·kh·kw))), then conv1 replaced by a 1-channel nn.Conv2d with its
// default U(±1/√(C·49)) (rms 1/√(3·C·49)); BatchNorm weight 1, bias 0; fc
// nn.Linear's U(±1/√512). The stem once had the Kaiming normal too (rms
// 0.025 instead of 0.082), which under the BatchNorm after it trained the
// stem with about ten times PyTorch's effective learning rate: 0.8635 and
// 0.8551 instead of 0.8837 and 0.8629 test accuracy after a full epoch
// (bench/train, seeds 0 and 1).
func TestResNet18InitScales(t *testing.T) {
	t.Parallel()
	for _, c := range []int{1, 3} {
		m, err := compute.NewModelFor("resnet18", compute.CPU(), []int{c, 28, 28}, 10, 1, 5)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range m.Params() {
			w := p.W.Data()
			var sq, mx float64
			for _, v := range w {
				sq += float64(v) * float64(v)
				mx = math.Max(mx, math.Abs(float64(v)))
			}
			rms := math.Sqrt(sq / float64(len(w)))
			var wantRMS, bound float64
			switch {
			case p.Name == "conv1.weight":
				bound = 1 / math.Sqrt(float64(c*49))
				wantRMS = bound / math.Sqrt(3)
			case p.Name == "fc.weight":
				bound = 1 / math.Sqrt(512)
				wantRMS = bound / math.Sqrt(3)
			case strings.HasSuffix(p.Name, "conv1.weight"), strings.HasSuffix(p.Name, "conv2.weight"),
				strings.HasSuffix(p.Name, "downsample.0.weight"):
				wantRMS = math.Sqrt(2 / float64(p.Shape[0]*p.Shape[2]*p.Shape[3]))
			default:
				continue // BatchNorm's constants and fc.bias (10 draws)
			}
			if math.Abs(rms-wantRMS) > 0.05*wantRMS {
				t.Errorf("%d channels: %s rms %.4g, want %.4g ± 5%%", c, p.Name, rms, wantRMS)
			}
			if bound > 0 && mx > bound {
				t.Errorf("%d channels: %s has |w| = %.4g > bound %.4g", c, p.Name, mx, bound)
			}
		}
	}
}
