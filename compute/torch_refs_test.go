package compute_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/tempotrain/tempotrain/compute"
	"github.com/tempotrain/tempotrain/compute/internal/kern"
)

// Expected values computed by PyTorch 1.13 itself (testdata/torch_refs.json,
// written by testdata/gen_torch_refs.py), so that the optimizers and layers
// are not only checked against references written from our own reading of
// PyTorch. The inputs are not stored: both sides build them from the same
// formula (genSpec.values), and the file holds PyTorch's outputs.
//
// Every case runs through several implementations of ours: the CPU backend
// (AVX-512 paths where the machine has them), the CPU backend on its
// portable C paths, the CPU backend with convolutions one sample per GEMM
// (so both the grouped and the per-sample code run, including the pointwise
// shortcut), the public layers in a Model, and the float64 reference kernels
// that the conformance suite trusts.
//
// Tolerance: an element passes when |got - want| ≤ refAbs + refRel·|want|.
// The outputs are float32 computed two ways (PyTorch: MKL-DNN or its own
// loops; ours: OpenBLAS, C, Go) whose sums run in different orders, so
// bitwise equality is not expected: each rounding is up to 2⁻²⁴ ≈ 6e-8
// relative, and sums of tens to hundreds of terms, or five optimizer steps,
// pile up a few of them. 1e-5 relative leaves room for that and still sits
// orders of magnitude below any real difference of formula (a missing bias
// correction, dampening on the first momentum step, biased instead of
// unbiased running variance: 1e-3 or more). The absolute term is for sums
// that cancel to nearly nothing, whose relative error means nothing: inputs
// and outputs are O(1), so 1e-6 is about ten float32 roundings of the terms.
// Observed (go test -v logs it per check): at most 30% of this tolerance,
// with relative errors up to 4e-6 where |want| ≥ 0.1.
const (
	refRel = 1e-5
	refAbs = 1e-6
)

const refsFile = "testdata/torch_refs.json"

// genSpec is the input rule of gen_torch_refs.py: element i is
// float32(((i·389 + 17 + 71·seed) mod m − h) / h · scale + offset), h = (m−1)/2,
// computed in float64 (IEEE operations in the same order give the same bits).
type genSpec struct {
	Seed   int     `json:"seed"`
	M      int     `json:"m"`
	Scale  float64 `json:"scale"`
	Offset float64 `json:"offset"`
}

func (g genSpec) values(n int) []float32 {
	h := float64(g.M-1) / 2
	v := make([]float32, n)
	for i := range v {
		u := (i*389 + 17 + 71*g.Seed) % g.M
		v[i] = float32((float64(u)-h)/h*g.Scale + g.Offset)
	}
	return v
}

type torchRefs struct {
	TorchVersion string `json:"torch_version"`
	GenCheck     []struct {
		Spec   genSpec   `json:"spec"`
		Values []float32 `json:"values"`
	} `json:"gen_check"`
	Optim     []optimCase `json:"optim"`
	Conv      []convCase  `json:"conv"`
	Pool      []poolCase  `json:"pool"`
	BatchNorm []bnCase    `json:"batchnorm"`
}

type optimCase struct {
	Name   string                  `json:"name"`
	Config compute.OptimizerConfig `json:"config"`
	N      int                     `json:"n"`
	P0     genSpec                 `json:"p0"`
	Grads  []genSpec               `json:"grads"`
	LRs    []float64               `json:"lrs"`
	Params [][]float32             `json:"params"` // after each step
}

type convCase struct {
	Name  string `json:"name"`
	Shape struct {
		N, C, H, W, K, KH, KW, Stride, Pad int
	} `json:"shape"`
	ReLU   bool      `json:"relu"`
	Pool   bool      `json:"pool"` // 2×2 max pooling of stride 2 after the activation
	Bias   bool      `json:"bias"`
	X      genSpec   `json:"x"`
	W      genSpec   `json:"w"`
	B      genSpec   `json:"b"`
	DY     genSpec   `json:"dy"`
	YShape []int     `json:"y_shape"`
	Y      []float32 `json:"y"`
	DX     []float32 `json:"dx"`
	DW     []float32 `json:"dw"`
	DB     []float32 `json:"db"`
}

func (c *convCase) conv() compute.ConvShape {
	s := compute.ConvShape{C: c.Shape.C, H: c.Shape.H, W: c.Shape.W, K: c.Shape.K, KH: c.Shape.KH, KW: c.Shape.KW,
		Stride: c.Shape.Stride, Pad: c.Shape.Pad}
	s.Init()
	return s
}

type poolCase struct {
	Name  string `json:"name"`
	Shape struct {
		N, C, H, W, KH, KW, Stride, Pad int
	} `json:"shape"`
	Kind   string    `json:"kind"` // "max" or "avg"
	X      genSpec   `json:"x"`
	DY     genSpec   `json:"dy"`
	YShape []int     `json:"y_shape"`
	Y      []float32 `json:"y"`
	DX     []float32 `json:"dx"`
}

func (c *poolCase) pool() compute.PoolShape {
	s := compute.PoolShape{H: c.Shape.H, W: c.Shape.W, KH: c.Shape.KH, KW: c.Shape.KW, Stride: c.Shape.Stride, Pad: c.Shape.Pad}
	s.Init()
	return s
}

type bnCase struct {
	Name     string  `json:"name"`
	Shape    []int   `json:"shape"`
	Momentum float64 `json:"momentum"`
	Eps      float64 `json:"eps"`
	Gamma    genSpec `json:"gamma"`
	Beta     genSpec `json:"beta"`
	RunMean  genSpec `json:"running_mean"`
	RunVar   genSpec `json:"running_var"`
	// Train is two training steps from the initial running statistics.
	Train []struct {
		X  genSpec `json:"x"`
		DY genSpec `json:"dy"`
		bnStep
	} `json:"train"`
	EvalX genSpec   `json:"eval_x"`
	EvalY []float32 `json:"eval_y"`
}

func (c *bnCase) channels() int { return c.Shape[1] }
func (c *bnCase) len() int      { return prodInts(c.Shape) }

// bnStep is one training step's outputs; an implementation leaves nil what
// it cannot observe.
type bnStep struct {
	Y       []float32 `json:"y"`
	Mean    []float32 `json:"mean"`
	InvStd  []float32 `json:"invstd"`
	RunMean []float32 `json:"running_mean"`
	RunVar  []float32 `json:"running_var"`
	DX      []float32 `json:"dx"`
	DGamma  []float32 `json:"dgamma"`
	DBeta   []float32 `json:"dbeta"`
}

func prodInts(s []int) int {
	n := 1
	for _, d := range s {
		n *= d
	}
	return n
}

func loadTorchRefs(t *testing.T, path string) *torchRefs {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var r torchRefs
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&r); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if len(r.GenCheck) == 0 || len(r.Optim) == 0 || len(r.Conv) == 0 || len(r.Pool) == 0 || len(r.BatchNorm) == 0 {
		t.Fatalf("%s: a section is empty", path)
	}
	return &r
}

// refStats gathers, per check, the largest errors seen against PyTorch:
// relative where the tolerance's relative term dominates (|want| ≥
// refAbs/refRel = 0.1), absolute below, and the largest error as a fraction
// of the tolerance.
type refStats struct {
	maxRel, maxAbs, maxUse map[string]float64
	n                      map[string]int
}

func newRefStats() *refStats {
	return &refStats{maxRel: map[string]float64{}, maxAbs: map[string]float64{}, maxUse: map[string]float64{}, n: map[string]int{}}
}

// compare checks got against PyTorch's want element by element and records
// the errors under key.
func (st *refStats) compare(t *testing.T, key, name string, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d elements, want %d", name, len(got), len(want))
		return
	}
	var bad, worst int
	var worstRatio float64
	for i, w := range want {
		g := got[i]
		d := math.Abs(float64(g) - float64(w))
		if math.IsNaN(d) {
			t.Errorf("%s[%d] = %v, want %v (output not written?)", name, i, g, w)
			return
		}
		if aw := math.Abs(float64(w)); aw >= refAbs/refRel {
			st.maxRel[key] = math.Max(st.maxRel[key], d/aw)
		} else {
			st.maxAbs[key] = math.Max(st.maxAbs[key], d)
		}
		r := d / (refAbs + refRel*math.Abs(float64(w)))
		st.maxUse[key] = math.Max(st.maxUse[key], r)
		if r > 1 {
			bad++
			if r > worstRatio {
				worst, worstRatio = i, r
			}
		}
	}
	st.n[key] += len(want)
	if bad > 0 {
		t.Errorf("%s: %d of %d elements differ from PyTorch; worst [%d]: got %.9g want %.9g (|diff| %.3g, %.1f× the tolerance %g + %g·|want|)",
			name, bad, len(want), worst, got[worst], want[worst], math.Abs(float64(got[worst])-float64(want[worst])), worstRatio, refAbs, refRel)
	}
}

func (st *refStats) log(t *testing.T) {
	keys := make([]string, 0, len(st.n))
	for k := range st.n {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "\n  %-22s %6d elements  rel err %.1e  abs err %.1e  %3.0f%% of the tolerance", k, st.n[k], st.maxRel[k], st.maxAbs[k], 100*st.maxUse[k])
	}
	t.Logf("largest differences from PyTorch (rel: where |want| ≥ 0.1, abs: below):%s", b.String())
}

// refImpl is one implementation of ours of what torch_refs.json covers. A nil
// function, or a nil result, skips what the implementation cannot run or
// observe.
type refImpl struct {
	name string
	// setup switches process-wide knobs and returns their restore.
	setup func() func()
	optim func(c *optimCase) [][]float32
	conv  func(c *convCase) (y, dx, dw, db []float32)
	pool  func(c *poolCase) (y, dx []float32)
	bn    func(c *bnCase) (steps []bnStep, evalY []float32)
}

func TestTorchRefs(t *testing.T) {
	// Not parallel: the implementations flip process-wide switches
	// (kern.SetPortable, kern.FwdSpan).
	refs := loadTorchRefs(t, refsFile)
	t.Logf("references from PyTorch %s", refs.TorchVersion)

	// The input rule gives the bits PyTorch was fed.
	for _, g := range refs.GenCheck {
		if got := g.Spec.values(len(g.Values)); !reflect.DeepEqual(got, g.Values) {
			t.Fatalf("input rule %+v: Go builds %v, the generator built %v", g.Spec, got, g.Values)
		}
	}

	cpu := cpuImpl(compute.CPU())
	portable := cpuImpl(compute.CPU())
	portable.name, portable.setup = "cpu-portable", func() func() {
		kern.SetPortable(true)
		return func() { kern.SetPortable(false) }
	}
	ungrouped := cpuImpl(compute.CPU())
	ungrouped.name, ungrouped.optim, ungrouped.pool, ungrouped.bn = "cpu-ungrouped", nil, nil, nil
	ungrouped.setup = func() func() {
		f, b := kern.FwdSpan, kern.BwdSpan
		kern.FwdSpan, kern.BwdSpan = 1, 1
		return func() { kern.FwdSpan, kern.BwdSpan = f, b }
	}
	all := newRefStats()
	for _, impl := range []refImpl{cpu, portable, ungrouped, layersImpl(compute.CPU()), float64Impl()} {
		t.Run(impl.name, func(t *testing.T) {
			if impl.setup != nil {
				defer impl.setup()()
			}
			st := newRefStats()
			runTorchRefs(t, refs, impl, st)
			st.log(t)
			for k, v := range st.maxRel {
				all.maxRel[k] = math.Max(all.maxRel[k], v)
			}
			for k, v := range st.maxAbs {
				all.maxAbs[k] = math.Max(all.maxAbs[k], v)
			}
			for k, v := range st.maxUse {
				all.maxUse[k] = math.Max(all.maxUse[k], v)
			}
			for k, v := range st.n {
				all.n[k] += v
			}
		})
	}
	all.log(t)
}

func runTorchRefs(t *testing.T, refs *torchRefs, impl refImpl, st *refStats) {
	if impl.optim != nil {
		for i := range refs.Optim {
			c := &refs.Optim[i]
			got := impl.optim(c)
			if len(got) != len(c.Params) {
				t.Fatalf("optim %s: %d steps, want %d", c.Name, len(got), len(c.Params))
			}
			key := "optim " + c.Config.Name
			if c.Config.Nesterov {
				key += " nesterov"
			} else if c.Config.Momentum > 0 {
				key += " momentum"
			}
			for s := range got {
				st.compare(t, key, fmt.Sprintf("optim %s: params after step %d", c.Name, s+1), got[s], c.Params[s])
			}
		}
	}
	if impl.conv != nil {
		for i := range refs.Conv {
			c := &refs.Conv[i]
			y, dx, dw, db := impl.conv(c)
			if y == nil {
				continue
			}
			kind := "conv2d"
			if c.Pool {
				kind = "conv2d+maxpool"
			}
			st.compare(t, kind+" y", "conv "+c.Name+" y", y, c.Y)
			st.compare(t, kind+" dx", "conv "+c.Name+" dx", dx, c.DX)
			st.compare(t, kind+" dw", "conv "+c.Name+" dw", dw, c.DW)
			if c.Bias {
				st.compare(t, kind+" db", "conv "+c.Name+" db", db, c.DB)
			} else if db != nil {
				t.Errorf("conv %s: a bias gradient without a bias", c.Name)
			}
		}
	}
	if impl.pool != nil {
		for i := range refs.Pool {
			c := &refs.Pool[i]
			y, dx := impl.pool(c)
			if y == nil {
				continue
			}
			st.compare(t, c.Kind+"pool y", "pool "+c.Name+" y", y, c.Y)
			st.compare(t, c.Kind+"pool dx", "pool "+c.Name+" dx", dx, c.DX)
		}
	}
	if impl.bn != nil {
		for i := range refs.BatchNorm {
			c := &refs.BatchNorm[i]
			steps, evalY := impl.bn(c)
			if steps == nil {
				continue
			}
			for s, got := range steps {
				want := c.Train[s].bnStep
				name := fmt.Sprintf("batchnorm %s step %d ", c.Name, s+1)
				for _, p := range []struct {
					key       string
					got, want []float32
				}{
					{"train y", got.Y, want.Y},
					{"saved mean", got.Mean, want.Mean},
					{"saved invstd", got.InvStd, want.InvStd},
					{"running mean", got.RunMean, want.RunMean},
					{"running var", got.RunVar, want.RunVar},
					{"dx", got.DX, want.DX},
					{"dgamma", got.DGamma, want.DGamma},
					{"dbeta", got.DBeta, want.DBeta},
				} {
					if p.got != nil {
						st.compare(t, "batchnorm "+p.key, name+p.key, p.got, p.want)
					}
				}
			}
			st.compare(t, "batchnorm eval y", "batchnorm "+c.Name+" eval y", evalY, c.EvalY)
		}
	}
}

// cpuImpl runs the ops of backend be (host tensors) and the Optimizer.
func cpuImpl(be compute.Backend) refImpl {
	nan := float32(math.NaN())
	// out returns a tensor poisoned with NaN, so that an element left
	// unwritten fails.
	out := func(shape ...int) compute.Tensor {
		t := be.New(shape...)
		be.Fill(t, nan)
		return t
	}
	return refImpl{
		name: "cpu",
		optim: func(c *optimCase) [][]float32 {
			return runOptimizer(be, c)
		},
		conv: func(c *convCase) (y, dx, dw, db []float32) {
			s, n := c.conv(), c.Shape.N
			x := compute.HostTensor(c.X.values(n*s.C*s.H*s.W), n, s.C, s.H, s.W)
			w := compute.HostTensor(c.W.values(s.K*s.Col), s.K, s.C, s.KH, s.KW)
			var b, dbT compute.Tensor
			if c.Bias {
				b, dbT = compute.HostTensor(c.B.values(s.K), s.K), out(s.K)
			}
			act := compute.Identity
			if c.ReLU {
				act = compute.ReLUAct
			}
			ws := be.New(s.Workspace(n))
			yT := out(c.YShape...)
			dyT := compute.HostTensor(c.DY.values(yT.Len()), c.YShape...)
			dxT, dwT := out(n, s.C, s.H, s.W), out(s.K, s.C, s.KH, s.KW)
			if c.Pool {
				idx := out(c.YShape...)
				be.ConvPool2D(&s, x, w, b, yT, idx, ws, act)
				be.ConvPool2DBackward(&s, x, w, yT, idx, dyT, dxT, dwT, dbT, ws, act)
			} else {
				be.Conv2D(&s, x, w, b, yT, ws, act)
				be.Conv2DBackward(&s, x, w, yT, dyT, dxT, dwT, dbT, ws, act)
			}
			return yT.Data(), dxT.Data(), dwT.Data(), dbT.Data()
		},
		pool: func(c *poolCase) (y, dx []float32) {
			s, n, ch := c.pool(), c.Shape.N, c.Shape.C
			x := compute.HostTensor(c.X.values(n*ch*s.H*s.W), n, ch, s.H, s.W)
			yT, dxT := out(n, ch, s.OutH, s.OutW), out(n, ch, s.H, s.W)
			dyT := compute.HostTensor(c.DY.values(yT.Len()), n, ch, s.OutH, s.OutW)
			if c.Kind == "avg" {
				be.AvgPool2D(&s, x, yT)
				be.AvgPool2DBackward(&s, dyT, dxT)
			} else {
				be.MaxPool2D(&s, x, yT)
				be.MaxPool2DBackward(&s, x, dyT, dxT)
			}
			return yT.Data(), dxT.Data()
		},
		bn: func(c *bnCase) ([]bnStep, []float32) {
			ch, n := c.channels(), c.len()
			gamma := compute.HostTensor(c.Gamma.values(ch), ch)
			beta := compute.HostTensor(c.Beta.values(ch), ch)
			rm := compute.HostTensor(c.RunMean.values(ch), ch)
			rv := compute.HostTensor(c.RunVar.values(ch), ch)
			var steps []bnStep
			for _, tr := range c.Train {
				x := compute.HostTensor(tr.X.values(n), c.Shape...)
				y, mean, invstd := out(c.Shape...), out(ch), out(ch)
				be.BatchNormTrain(x, gamma, beta, y, mean, invstd, rm, rv, c.Momentum, c.Eps)
				s := bnStep{Y: y.Data(), Mean: mean.Data(), InvStd: invstd.Data(),
					RunMean: clone(rm.Data()), RunVar: clone(rv.Data())}
				dy := compute.HostTensor(tr.DY.values(n), c.Shape...)
				dx, dg, db := out(c.Shape...), out(ch), out(ch)
				be.BatchNormBackward(x, gamma, dy, mean, invstd, dx, dg, db)
				s.DX, s.DGamma, s.DBeta = dx.Data(), dg.Data(), db.Data()
				steps = append(steps, s)
			}
			ye := out(c.Shape...)
			be.BatchNormEval(compute.HostTensor(c.EvalX.values(n), c.Shape...), gamma, beta, rm, rv, ye, c.Eps)
			return steps, ye.Data()
		},
	}
}

func clone(v []float32) []float32 { return append([]float32(nil), v...) }

// vecLayer holds one parameter vector and computes nothing: a model for
// optimizer tests.
type vecLayer struct {
	n int
	p *compute.Param
}

func (l *vecLayer) Build(b *compute.Builder, in []int) ([]int, error) {
	l.p = b.Param("v", []int{l.n}, nil)
	return in, nil
}
func (l *vecLayer) Forward(x compute.Tensor, _ bool) compute.Tensor { return x }
func (l *vecLayer) Backward(dy compute.Tensor) compute.Tensor       { return dy }
func (l *vecLayer) Params() []*compute.Param                        { return []*compute.Param{l.p} }

// runOptimizer takes c's steps with an Optimizer of c's config (defaults
// filled in by NewOptimizer, step counting and the first momentum step by
// Step) and returns the parameters after each.
func runOptimizer(be compute.Backend, c *optimCase) [][]float32 {
	m, err := compute.Build(be, []int{1}, 1, 0, compute.Named{Name: "p", Layer: &vecLayer{n: c.N}})
	if err != nil {
		panic(err)
	}
	o, err := compute.NewOptimizer(m, c.Config)
	if err != nil {
		panic(fmt.Sprintf("optim %s: %v", c.Name, err))
	}
	be.Upload(m.P, c.P0.values(c.N))
	var out [][]float32
	for s, lr := range c.LRs {
		be.Upload(m.G, c.Grads[s].values(c.N))
		o.Step(lr)
		p := make([]float32, c.N)
		be.Download(p, m.P)
		out = append(out, p)
	}
	return out
}

// probe is a model's first layer that passes its input on and keeps the
// input gradient the next layer returns (a model's first layer is built
// without one).
type probe struct{ dx []float32 }

func (p *probe) Build(_ *compute.Builder, in []int) ([]int, error) { return in, nil }
func (p *probe) Forward(x compute.Tensor, _ bool) compute.Tensor   { return x }
func (p *probe) Backward(dy compute.Tensor) compute.Tensor {
	p.dx = clone(dy.Data())
	return compute.Tensor{}
}
func (p *probe) Params() []*compute.Param { return nil }

// layersImpl runs the public layers (Conv2D, Pool2D, BatchNorm) in a Model:
// square kernels only, as the layers have.
func layersImpl(be compute.Backend) refImpl {
	build := func(in []int, n int, l compute.Layer) (*compute.Model, *probe) {
		p := &probe{}
		m, err := compute.Build(be, in, n, 0, compute.Named{Name: "probe", Layer: p}, compute.Named{Name: "l", Layer: l})
		if err != nil {
			panic(err)
		}
		return m, p
	}
	return refImpl{
		name: "layers",
		conv: func(c *convCase) (y, dx, dw, db []float32) {
			s := c.Shape
			if s.KH != s.KW {
				return nil, nil, nil, nil
			}
			l := &compute.Conv2D{C: s.C, K: s.K, Kernel: s.KH, Stride: s.Stride, Pad: s.Pad, NoBias: !c.Bias, MaxPool2: c.Pool}
			if c.ReLU {
				l.Act = compute.ReLUAct
			}
			m, p := build([]int{s.C, s.H, s.W}, s.N, l)
			ps := m.Params()
			be.Upload(ps[0].W, c.W.values(ps[0].Len()))
			if c.Bias {
				be.Upload(ps[1].W, c.B.values(ps[1].Len()))
			}
			yT := m.Forward(compute.HostTensor(c.X.values(s.N*s.C*s.H*s.W), s.N, s.C, s.H, s.W), true)
			if got := yT.Shape(); !reflect.DeepEqual(got, c.YShape) {
				panic(fmt.Sprintf("conv %s: layer output %v, PyTorch's %v", c.Name, got, c.YShape))
			}
			y = clone(yT.Data())
			m.Backward(compute.HostTensor(c.DY.values(yT.Len()), c.YShape...), nil)
			dw = clone(ps[0].G.Data())
			if c.Bias {
				db = clone(ps[1].G.Data())
			}
			return y, p.dx, dw, db
		},
		pool: func(c *poolCase) (y, dx []float32) {
			s := c.Shape
			var l *compute.Pool2D
			switch {
			case c.Kind == "avg" && s.KH == s.H && s.KW == s.W && s.Stride == 1 && s.Pad == 0:
				l = compute.NewGlobalAvgPool()
			case s.KH != s.KW:
				return nil, nil
			case c.Kind == "avg":
				l = compute.NewAvgPool2D(s.KH, s.Stride, s.Pad)
			default:
				l = compute.NewMaxPool2D(s.KH, s.Stride, s.Pad)
			}
			m, p := build([]int{s.C, s.H, s.W}, s.N, l)
			yT := m.Forward(compute.HostTensor(c.X.values(s.N*s.C*s.H*s.W), s.N, s.C, s.H, s.W), true)
			y = clone(yT.Data())
			m.Backward(compute.HostTensor(c.DY.values(yT.Len()), yT.Shape()...), nil)
			return y, p.dx
		},
		bn: func(c *bnCase) ([]bnStep, []float32) {
			ch, n := c.channels(), c.len()
			l := compute.NewBatchNorm(ch)
			if c.Name == "bn2d_default" && (l.Momentum != c.Momentum || l.Eps != c.Eps) {
				panic(fmt.Sprintf("NewBatchNorm: momentum %g eps %g, PyTorch's defaults %g %g", l.Momentum, l.Eps, c.Momentum, c.Eps))
			}
			l.Momentum, l.Eps = c.Momentum, c.Eps
			m, p := build(c.Shape[1:], c.Shape[0], l)
			ps, bs := m.Params(), m.Buffers()
			be.Upload(ps[0].W, c.Gamma.values(ch))
			be.Upload(ps[1].W, c.Beta.values(ch))
			be.Upload(bs[0].W, c.RunMean.values(ch))
			be.Upload(bs[1].W, c.RunVar.values(ch))
			var steps []bnStep
			for _, tr := range c.Train {
				y := m.Forward(compute.HostTensor(tr.X.values(n), c.Shape...), true)
				s := bnStep{Y: clone(y.Data()), RunMean: clone(bs[0].W.Data()), RunVar: clone(bs[1].W.Data())}
				m.Backward(compute.HostTensor(tr.DY.values(n), c.Shape...), nil)
				s.DX, s.DGamma, s.DBeta = p.dx, clone(ps[0].G.Data()), clone(ps[1].G.Data())
				steps = append(steps, s)
			}
			ye := m.Forward(compute.HostTensor(c.EvalX.values(n), c.Shape...), false)
			return steps, clone(ye.Data())
		},
	}
}

func to64(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

func to32(v []float64) []float32 {
	if v == nil {
		return nil
	}
	out := make([]float32, len(v))
	for i, x := range v {
		out[i] = float32(x)
	}
	return out
}

// float64Impl runs the float64 reference kernels, the ones the conformance
// suite checks every backend against.
func float64Impl() refImpl {
	return refImpl{
		name: "float64-reference",
		optim: func(c *optimCase) [][]float32 {
			m, _ := compute.Build(compute.CPU(), []int{1}, 1, 0, compute.Named{Name: "p", Layer: &vecLayer{n: c.N}})
			o, err := compute.NewOptimizer(m, c.Config)
			if err != nil {
				panic(err)
			}
			cfg := o.Config() // with defaults
			p := to64(c.P0.values(c.N))
			s1, s2 := make([]float64, c.N), make([]float64, c.N)
			var out [][]float32
			for s, lr := range c.LRs {
				g := to64(c.Grads[s].values(c.N))
				if cfg.Name == "sgd" {
					kern.SGD(p, g, s1, lr, cfg.Momentum, cfg.Dampening, cfg.WeightDecay, cfg.Nesterov, s == 0)
				} else {
					kern.Adam(p, g, s1, s2, lr, cfg.Beta1, cfg.Beta2, cfg.Eps, cfg.WeightDecay, cfg.Name == "adamw", s+1)
				}
				out = append(out, to32(p))
			}
			return out
		},
		conv: func(c *convCase) (y, dx, dw, db []float32) {
			s, n := c.conv(), c.Shape.N
			x, w := to64(c.X.values(n*s.C*s.H*s.W)), to64(c.W.values(s.K*s.Col))
			var b, dbv []float64
			if c.Bias {
				b, dbv = to64(c.B.values(s.K)), make([]float64, s.K)
			}
			ws := make([]float64, s.Workspace(n))
			yv := make([]float64, prodInts(c.YShape))
			dy := to64(c.DY.values(len(yv)))
			dxv, dwv := make([]float64, len(x)), make([]float64, len(w))
			if c.Pool {
				idx := make([]float64, len(yv))
				kern.Conv2DPool(&s, x, w, b, yv, idx, ws, n, c.ReLU)
				kern.Conv2DPoolBackward(&s, x, w, yv, idx, dy, dxv, dwv, dbv, ws, n, c.ReLU)
			} else {
				kern.Conv2D(&s, x, w, b, yv, ws, n, c.ReLU)
				kern.Conv2DBackward(&s, x, w, yv, dy, dxv, dwv, dbv, ws, n, c.ReLU)
			}
			return to32(yv), to32(dxv), to32(dwv), to32(dbv)
		},
		pool: func(c *poolCase) (y, dx []float32) {
			s, planes := c.pool(), c.Shape.N*c.Shape.C
			x := to64(c.X.values(planes * s.H * s.W))
			yv, dxv := make([]float64, planes*s.OutH*s.OutW), make([]float64, len(x))
			dy := to64(c.DY.values(len(yv)))
			if c.Kind == "avg" {
				kern.AvgPool(&s, x, yv, planes)
				kern.AvgPoolBackward(&s, dy, dxv, planes)
			} else {
				kern.MaxPool(&s, x, yv, planes)
				kern.MaxPoolBackward(&s, x, dy, dxv, planes)
			}
			return to32(yv), to32(dxv)
		},
		bn: func(c *bnCase) ([]bnStep, []float32) {
			ch, n := c.channels(), c.len()
			nb, sp := c.Shape[0], n/(c.Shape[0]*ch)
			gamma, beta := to64(c.Gamma.values(ch)), to64(c.Beta.values(ch))
			rm, rv := to64(c.RunMean.values(ch)), to64(c.RunVar.values(ch))
			var steps []bnStep
			for _, tr := range c.Train {
				x := to64(tr.X.values(n))
				y, mean, invstd := make([]float64, n), make([]float64, ch), make([]float64, ch)
				kern.BatchNormTrain(x, gamma, beta, y, mean, invstd, rm, rv, nb, ch, sp, c.Momentum, c.Eps)
				dy := to64(tr.DY.values(n))
				dx, dg, db := make([]float64, n), make([]float64, ch), make([]float64, ch)
				kern.BatchNormBackward(x, gamma, dy, mean, invstd, dx, dg, db, nb, ch, sp)
				steps = append(steps, bnStep{Y: to32(y), Mean: to32(mean), InvStd: to32(invstd), RunMean: to32(rm),
					RunVar: to32(rv), DX: to32(dx), DGamma: to32(dg), DBeta: to32(db)})
			}
			ye := make([]float64, n)
			kern.BatchNormEval(to64(c.EvalX.values(n)), gamma, beta, rm, rv, ye, nb, ch, sp, c.Eps)
			return steps, to32(ye)
		},
	}
}

// TestTorchRefsUpToDate regenerates torch_refs.json with PyTorch and
// compares it with the checked-in file, so that the script and the file
// cannot drift apart. It needs PyTorch 1.13 under /usr/bin/python3 (or
// $TEMPOTRAIN_TORCH_PYTHON) and runs only with TEMPOTRAIN_REQUIRE_TORCH=1.
func TestTorchRefsUpToDate(t *testing.T) {
	if os.Getenv("TEMPOTRAIN_REQUIRE_TORCH") != "1" {
		t.Skip("set TEMPOTRAIN_REQUIRE_TORCH=1 to regenerate " + refsFile + " with PyTorch (testdata/gen_torch_refs.py) and compare it with the checked-in file")
	}
	t.Parallel()
	python := os.Getenv("TEMPOTRAIN_TORCH_PYTHON")
	if python == "" {
		python = "/usr/bin/python3"
	}
	fresh := filepath.Join(t.TempDir(), "torch_refs.json")
	cmd := exec.Command(python, "testdata/gen_torch_refs.py", "-o", fresh)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s testdata/gen_torch_refs.py: %v\n%s", python, err, out)
	}
	a, err := os.ReadFile(refsFile)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(fresh)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(a, b) {
		return
	}
	// Another machine's PyTorch may round differently (other SIMD paths):
	// the structure and every non-float value must be the same, floats
	// within the comparison's tolerance.
	var va, vb any
	for _, p := range []struct {
		raw []byte
		v   *any
	}{{a, &va}, {b, &vb}} {
		d := json.NewDecoder(bytes.NewReader(p.raw))
		d.UseNumber()
		if err := d.Decode(p.v); err != nil {
			t.Fatal(err)
		}
	}
	var diffs []string
	diffJSON("", va, vb, &diffs)
	if len(diffs) > 0 {
		if len(diffs) > 20 {
			diffs = append(diffs[:20], fmt.Sprintf("... and %d more", len(diffs)-20))
		}
		t.Fatalf("%s is out of date with testdata/gen_torch_refs.py (regenerate it: %s compute/testdata/gen_torch_refs.py):\n%s",
			refsFile, python, strings.Join(diffs, "\n"))
	}
	t.Logf("regenerated file differs only in float rounding within the tolerance")
}

// diffJSON lists where a (checked in) and b (fresh) differ.
func diffJSON(path string, a, b any, diffs *[]string) {
	switch a := a.(type) {
	case map[string]any:
		bm, ok := b.(map[string]any)
		if !ok {
			*diffs = append(*diffs, fmt.Sprintf("%s: object vs %T", path, b))
			return
		}
		keys := make([]string, 0, len(a)+len(bm))
		for k := range a {
			keys = append(keys, k)
		}
		for k := range bm {
			if _, ok := a[k]; !ok {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		for _, k := range keys {
			v, inA := a[k]
			w, inB := bm[k]
			switch {
			case k == "torch_version":
			case !inB:
				*diffs = append(*diffs, fmt.Sprintf("%s.%s: not in the fresh file", path, k))
			case !inA:
				*diffs = append(*diffs, fmt.Sprintf("%s.%s: only in the fresh file", path, k))
			default:
				diffJSON(path+"."+k, v, w, diffs)
			}
		}
	case []any:
		bl, ok := b.([]any)
		if !ok || len(bl) != len(a) {
			*diffs = append(*diffs, fmt.Sprintf("%s: list of %d vs %v", path, len(a), shortJSON(b)))
			return
		}
		for i := range a {
			diffJSON(fmt.Sprintf("%s[%d]", path, i), a[i], bl[i], diffs)
		}
	case json.Number:
		bn, ok := b.(json.Number)
		if !ok {
			*diffs = append(*diffs, fmt.Sprintf("%s: %s vs %v", path, a, shortJSON(b)))
			return
		}
		x, errA := a.Float64()
		y, errB := bn.Float64()
		if errA != nil || errB != nil || math.Abs(x-y) > refAbs+refRel*math.Abs(x) {
			*diffs = append(*diffs, fmt.Sprintf("%s: %s vs %s", path, a, bn))
		}
	default:
		if !reflect.DeepEqual(a, b) {
			*diffs = append(*diffs, fmt.Sprintf("%s: %v vs %v", path, shortJSON(a), shortJSON(b)))
		}
	}
}

func shortJSON(v any) string {
	s := fmt.Sprint(v)
	if len(s) > 60 {
		s = s[:60] + "..."
	}
	return s
}
