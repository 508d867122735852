package compute

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
)

// Param is a learnable tensor of a model, or a buffer (BatchNorm's running
// statistics) when it has no gradient. W and G are views into the model's
// flat arenas, so that the whole model is one vector for the optimizer, the
// all-reduce and checkpoints.
type Param struct {
	// Name is unique in the model ("conv1.weight", "layer2.0.bn1.bias").
	Name  string
	Shape []int
	// W holds the values; G the gradient (zero Tensor for buffers).
	W, G Tensor
	// Index is the position in Model.Params (or Model.Buffers).
	Index int
	// Offset is the element offset of W in the model's arena.
	Offset int
	init   Init
}

// Len is the number of elements.
func (p *Param) Len() int {
	n := 1
	for _, d := range p.Shape {
		n *= d
	}
	return n
}

// Init fills a new parameter on the host from a seeded generator.
type Init func(rng *rand.Rand, w []float32)

// UniformInit draws from U(-bound, bound): PyTorch's default for Linear and
// Conv2d weights and biases with bound = 1/√fanIn.
func UniformInit(bound float64) Init {
	return func(rng *rand.Rand, w []float32) {
		for i := range w {
			w[i] = float32((2*rng.Float64() - 1) * bound)
		}
	}
}

// NormalInit draws from N(0, std²) (Kaiming normal: std = √(2/fan)).
func NormalInit(std float64) Init {
	return func(rng *rand.Rand, w []float32) {
		for i := range w {
			w[i] = float32(rng.NormFloat64() * std)
		}
	}
}

// ConstInit sets every element to v.
func ConstInit(v float32) Init {
	return func(_ *rand.Rand, w []float32) {
		for i := range w {
			w[i] = v
		}
	}
}

// Layer is one forward/backward pair of a model. Layers are built once for a
// largest batch; Forward and Backward then run on any batch up to it without
// allocating, returning views of tensors the layer owns (valid until its next
// call).
type Layer interface {
	// Build declares the layer's parameters and allocates its activations
	// for input shape in (without the batch dimension); it returns the output
	// shape.
	Build(b *Builder, in []int) (out []int, err error)
	// Forward computes the output for x [n, in...]. train selects batch
	// statistics and dropout.
	Forward(x Tensor, train bool) Tensor
	// Backward takes dL/dy of the last Forward, writes the gradients of the
	// layer's parameters and returns dL/dx (the zero Tensor when the builder
	// said the input gradient is not wanted). It may overwrite dy.
	Backward(dy Tensor) Tensor
	// Params lists the layer's learnable parameters in registration order.
	Params() []*Param
}

// Builder is what Layer.Build declares parameters and allocates through.
type Builder struct {
	be       Backend
	maxBatch int
	prefix   string
	// InputGrad says whether the layer being built must compute dL/dx.
	InputGrad bool
	params    []*Param
	buffers   []*Param
	ws        *Tensor
	wsLen     int
	seed      *uint64
	dropouts  int
}

// Backend returns the backend the model runs on.
func (b *Builder) Backend() Backend { return b.be }

// MaxBatch is the largest batch the model will see.
func (b *Builder) MaxBatch() int { return b.maxBatch }

// Param declares a learnable parameter; its memory exists once Build returns.
func (b *Builder) Param(name string, shape []int, init Init) *Param {
	p := &Param{Name: b.prefix + name, Shape: append([]int(nil), shape...), init: init}
	b.params = append(b.params, p)
	return p
}

// Buffer declares a tensor saved with the model but not learned.
func (b *Builder) Buffer(name string, shape []int, init Init) *Param {
	p := &Param{Name: b.prefix + name, Shape: append([]int(nil), shape...), init: init}
	b.buffers = append(b.buffers, p)
	return p
}

// Activation allocates a [MaxBatch, shape...] tensor.
func (b *Builder) Activation(shape ...int) Tensor {
	return b.be.New(append([]int{b.maxBatch}, shape...)...)
}

// Workspace returns a scratch tensor of at least n elements shared by all
// layers of the model (layers run one at a time); it is allocated when the
// model's Build returns.
func (b *Builder) Workspace(n int) *Tensor {
	b.wsLen = max(b.wsLen, n)
	return b.ws
}

// DropoutSeed returns the model's per-step seed cell and a distinct index
// for the calling layer.
func (b *Builder) DropoutSeed() (*uint64, int) {
	b.dropouts++
	return b.seed, b.dropouts
}

// Sub builds a child layer with its parameter names under prefix.
func (b *Builder) Sub(prefix string, l Layer, in []int, inputGrad bool) ([]int, error) {
	oldP, oldG := b.prefix, b.InputGrad
	b.prefix, b.InputGrad = oldP+prefix, inputGrad
	out, err := l.Build(b, in)
	b.prefix, b.InputGrad = oldP, oldG
	if err != nil {
		return nil, fmt.Errorf("%s: %w", strings.TrimSuffix(oldP+prefix, "."), err)
	}
	return out, nil
}

// Model is a stack of layers with its parameters in flat arenas.
type Model struct {
	be      Backend
	layers  []Layer
	names   []string
	params  []*Param
	buffers []*Param
	in, out []int
	// P, G and B are the flat arenas of parameter values, gradients and
	// buffers, in declaration order.
	P, G, B  Tensor
	maxBatch int
	seed     uint64
	ws       *Tensor
}

// Named pairs a layer with the name its parameters go under.
type Named struct {
	Name  string
	Layer Layer
}

// Build builds layers for input shape in (without the batch dimension) and
// batches up to maxBatch, and initialises the parameters from seed. Layer i's
// parameters are named "<name>.<param>" from layers[i].Name.
func Build(be Backend, in []int, maxBatch int, seed uint64, layers ...Named) (*Model, error) {
	m := &Model{be: be, in: append([]int(nil), in...), maxBatch: maxBatch, ws: new(Tensor)}
	b := &Builder{be: be, maxBatch: maxBatch, ws: m.ws, seed: &m.seed}
	shape := m.in
	for i, nl := range layers {
		prefix := ""
		if nl.Name != "" {
			prefix = nl.Name + "."
		}
		var err error
		// The model's input never needs a gradient.
		shape, err = b.Sub(prefix, nl.Layer, shape, i > 0)
		if err != nil {
			return nil, fmt.Errorf("build layer %d: %w", i, err)
		}
		m.layers = append(m.layers, nl.Layer)
		m.names = append(m.names, nl.Name)
	}
	m.out = shape
	m.params, m.buffers = b.params, b.buffers
	if err := checkNames(m.params, m.buffers); err != nil {
		return nil, err
	}
	if b.wsLen > 0 {
		*m.ws = be.New(b.wsLen)
	}
	m.P = bindArena(be, m.params, true)
	m.G = be.New(max(m.P.Len(), 1)).Flat(0, m.P.Len())
	for _, p := range m.params {
		p.G = m.G.Flat(p.Offset, p.Offset+p.Len()).Reshape(p.Shape...)
	}
	m.B = bindArena(be, m.buffers, false)
	rng := rand.New(rand.NewPCG(seed, 0x7465_6d70_6f74_7261)) // "tempotra"
	m.initParams(rng)
	return m, nil
}

// UseGradientMemory moves the gradient arena G into buf, which must hold at
// least G.Len() elements and serve nothing else while the model lives:
// gradients keep their values and their order, and every gradient becomes a
// view of buf. Host backends only. The runtime passes memory every rank of
// its collective group can reach (collective.AllocShared), so that the
// gradients' all-reduces skip the ring.
func (m *Model) UseGradientMemory(buf []float32) error {
	n := m.P.Len()
	if n == 0 {
		return nil
	}
	old := m.G.Data()
	if old == nil {
		return fmt.Errorf("gradient memory: backend %s keeps gradients on its device", m.be.Name())
	}
	if len(buf) < n {
		return fmt.Errorf("gradient memory: %d elements, the model's gradients need %d", len(buf), n)
	}
	copy(buf[:n], old)
	m.G = HostTensor(buf[:n:n], n)
	for _, p := range m.params {
		p.G = m.G.Flat(p.Offset, p.Offset+p.Len()).Reshape(p.Shape...)
	}
	return nil
}

func checkNames(lists ...[]*Param) error {
	seen := map[string]bool{}
	for _, l := range lists {
		for _, p := range l {
			if seen[p.Name] {
				return fmt.Errorf("build model: two parameters named %q", p.Name)
			}
			seen[p.Name] = true
		}
	}
	return nil
}

func bindArena(be Backend, ps []*Param, _ bool) Tensor {
	total := 0
	for i, p := range ps {
		p.Index, p.Offset = i, total
		total += p.Len()
	}
	arena := be.New(max(total, 1)).Flat(0, total)
	for _, p := range ps {
		p.W = arena.Flat(p.Offset, p.Offset+p.Len()).Reshape(p.Shape...)
	}
	return arena
}

// initParams draws every parameter, then every buffer, in declaration order
// from rng, so that a seed fixes the whole model.
func (m *Model) initParams(rng *rand.Rand) {
	for _, l := range [][]*Param{m.params, m.buffers} {
		for _, p := range l {
			h := make([]float32, p.Len())
			if p.init != nil {
				p.init(rng, h)
			}
			m.be.Upload(p.W, h)
		}
	}
}

// Backend returns the model's backend.
func (m *Model) Backend() Backend { return m.be }

// Params lists the learnable parameters in declaration order.
func (m *Model) Params() []*Param { return m.params }

// Buffers lists the non-learned tensors (running statistics).
func (m *Model) Buffers() []*Param { return m.buffers }

// MaxBatch is the largest batch the model was built for.
func (m *Model) MaxBatch() int { return m.maxBatch }

// InShape and OutShape are the per-sample input and output shapes.
func (m *Model) InShape() []int  { return append([]int(nil), m.in...) }
func (m *Model) OutShape() []int { return append([]int(nil), m.out...) }

// NumParams counts the learnable elements.
func (m *Model) NumParams() int { return m.P.Len() }

// SetDropoutSeed sets the seed dropout layers draw their next masks from.
// A training loop sets it once per step from its own seeded generator.
func (m *Model) SetDropoutSeed(s uint64) { m.seed = s }

// Freeze prepares the model for inference with the parameters it holds
// now: on the CPU backend, every Linear layer's weights are packed once for
// the AVX-512 kernel (where the processor has AVX-512), which Forward(x,
// false) then runs at every batch size without packing them again. Load,
// Forward(x, true) and Unfreeze undo it; parameters written any other way
// after Freeze are not seen by Forward(x, false) until Freeze is called
// again. A model serving predictions (package predict) is frozen; one being
// trained is frozen while it is evaluated (package builtin), so that its
// reported metrics are computed as its predictor computes them.
func (m *Model) Freeze() { m.freeze(true) }

// Unfreeze undoes Freeze.
func (m *Model) Unfreeze() { m.freeze(false) }

// freezer is a layer that prepares its parameters for inference.
type freezer interface{ freeze(on bool) }

func (m *Model) freeze(on bool) {
	for _, l := range m.layers {
		if f, ok := l.(freezer); ok {
			f.freeze(on)
		}
	}
}

// Forward runs the layers on x [n, in...] with n ≤ MaxBatch.
func (m *Model) Forward(x Tensor, train bool) Tensor {
	if x.Dim(0) > m.maxBatch {
		panic(fmt.Sprintf("compute: batch of %d > model's max batch %d", x.Dim(0), m.maxBatch))
	}
	for _, l := range m.layers {
		x = l.Forward(x, train)
	}
	return x
}

// Backward runs the layers backward from dL/dy, writing every parameter's
// gradient (overwriting, not accumulating). After each layer it calls ready
// (if not nil) with that layer's parameters, whose gradients are then final:
// the hook data-parallel training uses to start all-reducing them early.
func (m *Model) Backward(dy Tensor, ready func([]*Param)) {
	for i := len(m.layers) - 1; i >= 0; i-- {
		dy = m.layers[i].Backward(dy)
		if ready != nil {
			if ps := m.layers[i].Params(); len(ps) > 0 {
				ready(ps)
			}
		}
	}
}

// EarlyGradientShare is the fraction of gradient elements that are final
// before backward reaches the first layer with parameters: what a bucketed
// all-reduce can overlap with the rest of backward. The MLP's first layer
// holds 75% of its parameters (share 0.25); the CNN's first convolution
// 320 of 421,642 (share ≈ 1).
func (m *Model) EarlyGradientShare() float64 {
	if m.P.Len() == 0 {
		return 0
	}
	for _, l := range m.layers {
		if ps := l.Params(); len(ps) > 0 {
			first := 0
			for _, p := range ps {
				first += p.Len()
			}
			return 1 - float64(first)/float64(m.P.Len())
		}
	}
	return 0
}

// Summary lists the parameters with their shapes, one a line.
func (m *Model) Summary() string {
	var b strings.Builder
	for _, p := range m.params {
		fmt.Fprintf(&b, "%-32s %v\n", p.Name, p.Shape)
	}
	fmt.Fprintf(&b, "%d parameters\n", m.NumParams())
	return b.String()
}

// fanBound is 1/√fanIn, PyTorch's default init bound.
func fanBound(fanIn int) float64 { return 1 / math.Sqrt(float64(fanIn)) }
