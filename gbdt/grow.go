package gbdt

// Growing one tree, data-parallel: every rank builds the histograms of its
// own rows, the ranks sum them (one all-reduce per level in depthwise
// growth, per expansion in lossguide growth), and every rank then holds the
// same histograms and picks the same splits. Gradients are integers in a
// fixed point (quantScale), so histogram sums are exact in any order and
// every world size gives the same bits. Split finding is split across ranks
// by feature (rank r scans features f ≡ r mod size) and the best splits are
// all-gathered.

import (
	"container/heap"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"sort"
)

// kRtEps is XGBoost's smallest loss change worth a split.
const kRtEps = 1e-6

type split struct {
	gain   float64
	feat   int
	bin    int // last bin going left; -1: every present value goes right
	dleft  bool
	gl, hl float64 // left sums, quantised
	ok     bool
}

// better orders candidates: larger gain, then lower feature, then the
// missing-right scan before the missing-left one, then lower bin; the
// sequential scan's first maximum.
func (s split) better(o split) bool {
	if !o.ok {
		return s.ok
	}
	if !s.ok {
		return false
	}
	if s.gain != o.gain {
		return s.gain > o.gain
	}
	if s.feat != o.feat {
		return s.feat < o.feat
	}
	if s.dleft != o.dleft {
		return !s.dleft
	}
	return s.bin < o.bin
}

type histBuf struct {
	data []float64
	refs int
}

type gnode struct {
	id         int32
	depth      int
	begin, end int     // rows[begin:end]
	g, h       float64 // quantised sums
	hist       []float64
	buf        *histBuf
	best       split
}

// grower grows the trees of one round for one output group.
type grower struct {
	c      Collective
	p      *Params
	cuts   *Cuts
	m      *binMatrix
	n      int // rows over all ranks
	gh     []float64
	sg     float64 // quantised gradient = g·sg
	sh     float64
	rows   []uint32
	tmp    []uint32
	feats  []int   // colsample: features this rank evaluates, ascending
	cfeats []int64 // feats for kern.c
	free   [][]float64
	// Quantised training (packedHist): ghp are the rows' packed coarse
	// pairs (sg, sh are then their scales), acc the histogram kernel's
	// scratch; fsg, fsh the fine scales the nodes' statistics are renewed
	// in once the tree has its splits.
	packed   bool
	ghp      []int64
	acc      []int64
	fsg, fsh float64
	width    int // histogram length: 2 per slot, plus 2 for the totals
	tree     *Tree
	// leaves: node id → rows range, for the margin update.
	leaves []*gnode
}

func (gr *grower) getBuf(n int) *histBuf {
	for i, b := range gr.free {
		if cap(b) >= n {
			gr.free[i] = gr.free[len(gr.free)-1]
			gr.free = gr.free[:len(gr.free)-1]
			b = b[:n]
			clear(b)
			return &histBuf{data: b}
		}
	}
	return &histBuf{data: make([]float64, n)}
}

func (gr *grower) release(n *gnode) {
	if n.buf == nil {
		return
	}
	n.buf.refs--
	if n.buf.refs == 0 {
		gr.free = append(gr.free, n.buf.data)
	}
	n.buf, n.hist = nil, nil
}

// buildHists builds the histograms of nodes (each gets a slice of one
// buffer) and sums them over ranks in one all-reduce.
func (gr *grower) buildHists(ctx context.Context, nodes []*gnode) error {
	if len(nodes) == 0 {
		return nil
	}
	b := gr.getBuf(len(nodes) * gr.width)
	b.refs = len(nodes)
	for i, n := range nodes {
		n.buf = b
		n.hist = b.data[i*gr.width : (i+1)*gr.width : (i+1)*gr.width]
		// Totals in the last slot.
		var g, h float64
		if gr.packed {
			g, h = unpack(gr.m.histPacked(gr.rows[n.begin:n.end], gr.ghp, gr.acc, n.hist))
		} else {
			g, h = gr.m.hist(gr.rows[n.begin:n.end], gr.gh, n.hist)
		}
		n.hist[gr.width-2] += g
		n.hist[gr.width-1] += h
	}
	return allSum(ctx, gr.c, b.data)
}

func (gr *grower) realG(q float64) float64 { return q / gr.sg }
func (gr *grower) realH(q float64) float64 { return q / gr.sh }

func thresholdL1(w, alpha float64) float64 {
	switch {
	case w > alpha:
		return w - alpha
	case w < -alpha:
		return w + alpha
	}
	return 0
}

// calcWeight is XGBoost's CalcWeight: the leaf weight of sums (G, H).
func calcWeight(p *Params, g, h float64) float64 {
	if h < p.MinChildWeight || h <= 0 {
		return 0
	}
	dw := -thresholdL1(g, p.Alpha) / (h + p.Lambda)
	if p.MaxDeltaStep != 0 && math.Abs(dw) > p.MaxDeltaStep {
		dw = math.Copysign(p.MaxDeltaStep, dw)
	}
	return dw
}

// calcGain is XGBoost's CalcGain.
func calcGain(p *Params, g, h float64) float64 {
	if h < p.MinChildWeight || h <= 0 {
		return 0
	}
	if p.MaxDeltaStep == 0 {
		t := thresholdL1(g, p.Alpha)
		return t * t / (h + p.Lambda)
	}
	w := calcWeight(p, g, h)
	ret := -(2*g*w + (h+p.Lambda)*w*w)
	if p.Alpha != 0 {
		ret += p.Alpha * math.Abs(w)
	}
	return ret
}

// canSplit reports whether a node of hessian sum hq (quantised) at depth
// could have a valid split at all (both children need min_child_weight).
func (gr *grower) canSplit(hq float64, depth int) bool {
	if gr.p.MaxDepth > 0 && depth >= gr.p.MaxDepth {
		return false
	}
	return hq > 0 && gr.realH(hq) >= 2*gr.p.MinChildWeight
}

// bestLocal scans this rank's share of the features of n's histogram.
func (gr *grower) bestLocal(n *gnode) split {
	if useC {
		return gr.bestSplitC(n)
	}
	return gr.bestLocalGo(n)
}

// bestLocalGo is bestSplitC's reference.
func (gr *grower) bestLocalGo(n *gnode) split {
	p := gr.p
	G, H := gr.realG(n.g), gr.realH(n.h)
	parent := calcGain(p, G, H)
	mcw := p.MinChildWeight
	var best split
	try := func(f, b int, dleft bool, gl, hl float64) {
		hr := n.h - hl
		if hl <= 0 || hr <= 0 {
			return
		}
		HL, HR := gr.realH(hl), gr.realH(hr)
		if HL < mcw || HR < mcw {
			return
		}
		GL := gr.realG(gl)
		gain := calcGain(p, GL, HL) + calcGain(p, G-GL, HR) - parent
		c := split{gain: gain, feat: f, bin: b, dleft: dleft, gl: gl, hl: hl, ok: true}
		if c.better(best) {
			best = c
		}
	}
	for _, f := range gr.feats {
		off := int(gr.m.off[f])
		nb := gr.cuts.NumBins(f)
		h := n.hist[2*off : 2*(off+nb)]
		var mg, mh float64
		if gr.m.miss[f] >= 0 {
			mg, mh = n.hist[2*(off+nb)], n.hist[2*(off+nb)+1]
		}
		// Missing values right.
		var gl, hl float64
		for b := 0; b < nb; b++ {
			gl += h[2*b]
			hl += h[2*b+1]
			try(f, b, false, gl, hl)
		}
		if mh == 0 && mg == 0 {
			continue
		}
		// Missing values left.
		gl, hl = mg, mh
		try(f, -1, true, gl, hl)
		for b := 0; b < nb-1; b++ {
			gl += h[2*b]
			hl += h[2*b+1]
			try(f, b, true, gl, hl)
		}
	}
	return best
}

const splitRecord = 8 + 4 + 4 + 1 + 8 + 8

// evaluate finds the best split of every node in nodes: each rank scans its
// features, then the ranks all-gather their bests.
func (gr *grower) evaluate(ctx context.Context, nodes []*gnode) error {
	for _, n := range nodes {
		n.best = gr.bestLocal(n)
	}
	if gr.c.Size() == 1 {
		return nil
	}
	b := make([]byte, 0, len(nodes)*splitRecord)
	for _, n := range nodes {
		s := n.best
		if !s.ok {
			s.feat = -1
		}
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(s.gain))
		b = binary.LittleEndian.AppendUint32(b, uint32(int32(s.feat)))
		b = binary.LittleEndian.AppendUint32(b, uint32(int32(s.bin)))
		dl := byte(0)
		if s.dleft {
			dl = 1
		}
		b = append(b, dl)
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(s.gl))
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(s.hl))
	}
	all, err := gr.c.AllGather(ctx, b)
	if err != nil {
		return fmt.Errorf("gbdt: all-gather of splits: %w", err)
	}
	for r, part := range all {
		if len(part) != len(b) {
			return fmt.Errorf("gbdt: rank %d sent %d bytes of splits, want %d: ranks disagree on the tree", r, len(part), len(b))
		}
	}
	for i, n := range nodes {
		var best split
		for _, part := range all {
			o := part[i*splitRecord:]
			s := split{
				gain:  math.Float64frombits(binary.LittleEndian.Uint64(o)),
				feat:  int(int32(binary.LittleEndian.Uint32(o[8:]))),
				bin:   int(int32(binary.LittleEndian.Uint32(o[12:]))),
				dleft: o[16] == 1,
				gl:    math.Float64frombits(binary.LittleEndian.Uint64(o[17:])),
				hl:    math.Float64frombits(binary.LittleEndian.Uint64(o[25:])),
			}
			s.ok = s.feat >= 0
			if s.better(best) {
				best = s
			}
		}
		n.best = best
	}
	return nil
}

// valid is XGBoost's CPUExpandEntry::IsValid (the depth and leaf limits are
// checked by the callers).
func (gr *grower) valid(s split) bool {
	return s.ok && s.gain > kRtEps && s.gain >= gr.p.Gamma
}

// applySplit turns n into a split node, partitions its rows and returns its
// children (not yet with histograms).
func (gr *grower) applySplit(n *gnode) (l, r *gnode) {
	t := gr.tree
	s := n.best
	li := t.addNode(n.id)
	ri := t.addNode(n.id)
	t.Left[n.id], t.Right[n.id] = li, ri
	t.Feature[n.id] = uint32(s.feat)
	if s.bin < 0 {
		t.Cond[n.id] = gr.cuts.Min[s.feat]
	} else {
		t.Cond[n.id] = gr.cuts.Values[int(gr.cuts.Ptr[s.feat])+s.bin]
	}
	t.DefaultLeft[n.id] = s.dleft
	t.splitBin[n.id] = int32(s.bin)
	t.LossChange[n.id] = float32(s.gain)
	t.BaseWeight[n.id] = float32(calcWeight(gr.p, gr.realG(n.g), gr.realH(n.h)))
	rows := gr.rows[n.begin:n.end]
	nl := gr.m.partition(rows, s.feat, s.bin, s.dleft, gr.tmp)
	l = &gnode{id: li, depth: n.depth + 1, begin: n.begin, end: n.begin + nl, g: s.gl, h: s.hl}
	r = &gnode{id: ri, depth: n.depth + 1, begin: n.begin + nl, end: n.end, g: n.g - s.gl, h: n.h - s.hl}
	for _, c := range []*gnode{l, r} {
		t.SumHess[c.id] = float32(gr.realH(c.h))
		// A leaf's weight until it is split (XGBoost's ExpandNode).
		w := calcWeight(gr.p, gr.realG(c.g), gr.realH(c.h)) * gr.p.Eta
		t.BaseWeight[c.id] = float32(w)
		t.Cond[c.id] = float32(w)
	}
	return l, r
}

// childHists gives the children of split nodes (pairs in kids) their
// histograms: the child with the smaller hessian sum is built and summed
// over ranks, the other is its parent's minus it, in the parent's buffer.
// Children that cannot split get none.
func (gr *grower) childHists(ctx context.Context, parents []*gnode, kids [][2]*gnode) error {
	var build []*gnode
	for _, pr := range kids {
		l, r := pr[0], pr[1]
		small, large := l, r
		if r.h < l.h {
			small, large = r, l
		}
		needS, needL := gr.canSplit(small.h, small.depth), gr.canSplit(large.h, large.depth)
		if needS || needL {
			build = append(build, small)
		}
	}
	if err := gr.buildHists(ctx, build); err != nil {
		return err
	}
	for i, pr := range kids {
		par := parents[i]
		l, r := pr[0], pr[1]
		small, large := l, r
		if r.h < l.h {
			small, large = r, l
		}
		needS, needL := gr.canSplit(small.h, small.depth), gr.canSplit(large.h, large.depth)
		if needL && small.hist != nil {
			sub(par.hist, small.hist)
			large.hist, large.buf = par.hist, par.buf
			par.hist, par.buf = nil, nil
		} else {
			gr.release(par)
		}
		if !needS {
			gr.release(small)
		}
	}
	return nil
}

// grow builds one tree over gr.rows (the sampled rows, all ranks
// together) and records its leaves.
func (gr *grower) grow(ctx context.Context) error {
	gr.tree = &Tree{}
	rootID := gr.tree.addNode(rootParent)
	root := &gnode{id: rootID, begin: 0, end: len(gr.rows)}
	if err := gr.buildHists(ctx, []*gnode{root}); err != nil {
		return err
	}
	root.g, root.h = root.hist[gr.width-2], root.hist[gr.width-1]
	t := gr.tree
	t.SumHess[0] = float32(gr.realH(root.h))
	w := calcWeight(gr.p, gr.realG(root.g), gr.realH(root.h))
	t.BaseWeight[0] = float32(w)
	t.Cond[0] = float32(w * gr.p.Eta)
	if !gr.canSplit(root.h, 0) {
		gr.release(root)
		gr.leaves = append(gr.leaves, root)
		return nil
	}
	if err := gr.evaluate(ctx, []*gnode{root}); err != nil {
		return err
	}
	var err error
	if gr.p.GrowPolicy == Lossguide {
		err = gr.growLossguide(ctx, root)
	} else {
		err = gr.growDepthwise(ctx, root)
	}
	for _, l := range gr.leaves {
		gr.release(l)
	}
	return err
}

// renew recomputes every node's sum of hessians and weight, and the
// leaves' values, from gr.gh (the gradients in the fine fixed point fsg,
// fsh: quantScale), summed over ranks: quantised training chooses the
// splits on coarse sums, and the tree's values are then the same bits as
// the unquantised path gives for the same splits (the root left a leaf
// keeps its weight without eta, as grow writes it).
func (gr *grower) renew(ctx context.Context) error {
	t := gr.tree
	sums := make([]float64, 2*t.NumNodes())
	for _, l := range gr.leaves {
		sums[2*l.id], sums[2*l.id+1] = rowSums(gr.gh, gr.rows[l.begin:l.end])
	}
	if err := allSum(ctx, gr.c, sums); err != nil {
		return err
	}
	// Children come after their parents.
	for i := t.NumNodes() - 1; i > 0; i-- {
		p := t.Parent[i]
		sums[2*p] += sums[2*i]
		sums[2*p+1] += sums[2*i+1]
	}
	for i := range t.NumNodes() {
		G, H := sums[2*i]/gr.fsg, sums[2*i+1]/gr.fsh
		w := calcWeight(gr.p, G, H)
		t.SumHess[i] = float32(H)
		switch {
		case !t.IsLeaf(i):
			t.BaseWeight[i] = float32(w)
		case i == 0:
			t.BaseWeight[i] = float32(w)
			t.Cond[i] = float32(w * gr.p.Eta)
		default:
			t.BaseWeight[i] = float32(w * gr.p.Eta)
			t.Cond[i] = float32(w * gr.p.Eta)
		}
	}
	return nil
}

func (gr *grower) leafLimit(leaves int) bool {
	return gr.p.MaxLeaves > 0 && leaves >= gr.p.MaxLeaves
}

func (gr *grower) growDepthwise(ctx context.Context, root *gnode) error {
	frontier := []*gnode{root}
	leaves := 1
	for len(frontier) > 0 {
		var parents []*gnode
		var kids [][2]*gnode
		var next []*gnode
		for _, n := range frontier {
			if n.hist == nil || !gr.valid(n.best) || gr.leafLimit(leaves) {
				gr.release(n)
				gr.leaves = append(gr.leaves, n)
				continue
			}
			l, r := gr.applySplit(n)
			leaves++
			parents = append(parents, n)
			kids = append(kids, [2]*gnode{l, r})
			next = append(next, l, r)
		}
		if err := gr.childHists(ctx, parents, kids); err != nil {
			return err
		}
		var eval []*gnode
		for _, n := range next {
			if n.hist != nil {
				eval = append(eval, n)
			}
		}
		if err := gr.evaluate(ctx, eval); err != nil {
			return err
		}
		frontier = next
	}
	return nil
}

type nodeHeap []*gnode

func (h nodeHeap) Len() int { return len(h) }
func (h nodeHeap) Less(i, j int) bool {
	if h[i].best.gain != h[j].best.gain {
		return h[i].best.gain > h[j].best.gain
	}
	return h[i].id < h[j].id
}
func (h nodeHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *nodeHeap) Push(x any)   { *h = append(*h, x.(*gnode)) }
func (h *nodeHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

func (gr *grower) growLossguide(ctx context.Context, root *gnode) error {
	q := &nodeHeap{}
	heap.Push(q, root)
	leaves := 1
	for q.Len() > 0 {
		n := heap.Pop(q).(*gnode)
		if !gr.valid(n.best) || gr.leafLimit(leaves) {
			gr.release(n)
			gr.leaves = append(gr.leaves, n)
			continue
		}
		l, r := gr.applySplit(n)
		leaves++
		if err := gr.childHists(ctx, []*gnode{n}, [][2]*gnode{{l, r}}); err != nil {
			return err
		}
		var eval []*gnode
		for _, c := range []*gnode{l, r} {
			if c.hist != nil {
				eval = append(eval, c)
			} else {
				gr.leaves = append(gr.leaves, c)
			}
		}
		if err := gr.evaluate(ctx, eval); err != nil {
			return err
		}
		for _, c := range eval {
			heap.Push(q, c)
		}
	}
	return nil
}

// sampleFeatures picks colsample_bytree's features for (round, group), the
// same on every rank, and keeps this rank's share of them for split finding.
func sampleFeatures(p *Params, nf, round, group, rank, size int) []int {
	all := make([]int, nf)
	for f := range all {
		all[f] = f
	}
	if p.ColsampleBytree < 1 && nf > 0 {
		k := max(1, int(p.ColsampleBytree*float64(nf)))
		keys := make([]uint64, nf)
		for f := range keys {
			keys[f] = hash64(p.Seed, saltColsample, uint64(round), uint64(group), uint64(f))
		}
		sort.Slice(all, func(i, j int) bool {
			a, b := all[i], all[j]
			if keys[a] != keys[b] {
				return keys[a] < keys[b]
			}
			return a < b
		})
		all = all[:k]
		sort.Ints(all)
	}
	var mine []int
	for i, f := range all {
		if i%size == rank {
			mine = append(mine, f)
		}
	}
	return mine
}

const (
	saltSubsample = 0x5375627361
	saltColsample = 0x436f6c7361
)

// hash64 mixes its arguments (splitmix64's finaliser per word).
func hash64(xs ...uint64) uint64 {
	h := uint64(0x9e3779b97f4a7c15)
	for _, x := range xs {
		h ^= x + 0x9e3779b97f4a7c15 + (h << 6) + (h >> 2)
		h = mix64(h)
	}
	return h
}

func mix64(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// sampled reports whether subsample keeps row id in (round, group).
func sampled(p *Params, id uint64, round, group int) bool {
	if p.Subsample >= 1 {
		return true
	}
	u := float64(hash64(p.Seed, saltSubsample, uint64(round), uint64(group), id)>>11) / (1 << 53)
	return u < p.Subsample
}
