package data

import (
	"fmt"
	"math/bits"

	"github.com/tempotrain/tempotrain/data/format"
)

// LoaderConfig configures PrepareData. Defaults: World 1, Batch 32.
type LoaderConfig struct {
	// Rank and World place this loader among the data-parallel ranks.
	Rank, World int
	// Batch is the number of items per step on this rank.
	Batch int
	// GlobalBatch, when set, is the number of items per step over all
	// ranks instead (Batch is then ignored): rank r takes GlobalBatch/World
	// of them, one more when r < GlobalBatch%World. It must be at least
	// World.
	GlobalBatch int
	// Seed and the epoch (SetEpoch) fix the shuffle; every rank must use the
	// same seed so that the shards are disjoint.
	Seed uint64
	// Shuffle reorders the dataset every epoch. Without it items are taken in
	// order (evaluation).
	Shuffle bool
	// Pad repeats items from the start of the (shuffled) order so that the
	// total is a multiple of World and every rank gets the same number of
	// items, hence of steps (DistributedSampler with drop_last=False). Without
	// it rank r gets items r, r+World, ... and counts may differ by one
	// (evaluation, where every item must count once).
	Pad bool
	// DropLast drops a final partial batch: with Pad, a final step smaller
	// than a whole one over all ranks; without, each rank's own.
	DropLast bool
	// Normalize maps pixel bytes to floats; nil: v/255.
	Normalize *format.Normalize
}

// Loader yields one rank's batches of a dataset, epoch after epoch.
//
// The items of an epoch are a permutation drawn from (Seed, epoch); step k
// takes the k-th block of Batch·World (or GlobalBatch) items of it, of which
// rank r takes the r-th, (r+World)-th, ... (see split). After k steps the
// items consumed over all ranks are exactly a prefix of the permutation
// (Consumed), so Resume continues an epoch at another world size or batch
// size with every item still seen once.
type Loader struct {
	ds    *format.Dataset
	cfg   LoaderConfig
	perm  []int32 // global order of the epoch
	mine  []int32 // this rank's items from sp.start on, in order
	sp    split
	epoch int
}

// PrepareData returns rank cfg.Rank's loader over ds, positioned at epoch 0.
func PrepareData(ds *format.Dataset, cfg LoaderConfig) (*Loader, error) {
	if cfg.World == 0 {
		cfg.World = 1
	}
	if cfg.Batch == 0 {
		cfg.Batch = 32
	}
	switch {
	case cfg.World < 1 || cfg.Rank < 0 || cfg.Rank >= cfg.World:
		return nil, fmt.Errorf("prepare data: rank %d of world %d", cfg.Rank, cfg.World)
	case cfg.GlobalBatch != 0 && cfg.GlobalBatch < cfg.World:
		return nil, fmt.Errorf("prepare data: a global batch of %d for %d ranks leaves ranks without items", cfg.GlobalBatch, cfg.World)
	case cfg.Batch < 1:
		return nil, fmt.Errorf("prepare data: batch %d", cfg.Batch)
	case ds.N == 0:
		return nil, fmt.Errorf("prepare data: empty dataset")
	}
	if cfg.Normalize == nil {
		cfg.Normalize = format.NewNormalize(0, 1)
	}
	l := &Loader{ds: ds, cfg: cfg, perm: make([]int32, ds.N)}
	per := (ds.N + cfg.World - 1) / cfg.World
	l.mine = make([]int32, 0, per)
	l.SetEpoch(0)
	return l, nil
}

// global is the number of items per step over all ranks.
func (l *Loader) global() int {
	if l.cfg.GlobalBatch > 0 {
		return l.cfg.GlobalBatch
	}
	return l.cfg.Batch * l.cfg.World
}

func (l *Loader) split(start int) split {
	rem := "exact"
	if l.cfg.Pad {
		rem = "pad"
	}
	return newSplit(int64(len(l.perm)), int64(start), l.global(), l.cfg.World, rem, l.cfg.DropLast)
}

// SetEpoch reorders the data for epoch e: a permutation drawn from (Seed, e)
// only, the same on every rank, of which this rank takes every World-th item.
func (l *Loader) SetEpoch(e int) {
	l.resume(e, 0)
}

// Resume is SetEpoch(e) then a skip of the first consumed items of the
// epoch's permutation: they were consumed by the steps before a checkpoint,
// at this world size or another (Consumed gives the number). The steps from
// there on (Steps, Batch) share the rest of the permutation among this
// loader's ranks.
func (l *Loader) Resume(e, consumed int) error {
	if consumed < 0 {
		return fmt.Errorf("data: resume epoch %d after %d items", e, consumed)
	}
	l.resume(e, consumed)
	return nil
}

func (l *Loader) resume(e, consumed int) {
	l.epoch = e
	for i := range l.perm {
		l.perm[i] = int32(i)
	}
	if l.cfg.Shuffle {
		shuffle(l.perm, l.cfg.Seed, uint64(e))
	}
	n := int64(len(l.perm))
	l.sp = l.split(consumed)
	l.mine = l.mine[:0]
	l.sp.offsets(l.cfg.Rank, func(off int64) {
		l.mine = append(l.mine, l.perm[(l.sp.start+off)%n])
	})
}

// Epoch is the epoch of the current order.
func (l *Loader) Epoch() int { return l.epoch }

// Len is the number of items this rank sees per epoch (from the Resume
// point, after Resume).
func (l *Loader) Len() int { return len(l.mine) }

// Steps is the number of batches of the epoch (from the Resume point, after
// Resume).
func (l *Loader) Steps() int { return int(l.sp.steps(l.cfg.Rank)) }

// EpochSteps is the number of batches of a whole epoch.
func (l *Loader) EpochSteps() int { return int(l.split(0).steps(l.cfg.Rank)) }

// Consumed is the number of items of the epoch's permutation consumed over
// all ranks after step i of the current order (i from 1: after i batches),
// counting the items before a Resume point; from the epoch's last step on
// it is at least the dataset's size.
func (l *Loader) Consumed(i int) int { return int(l.sp.consumed(l.cfg.Rank, int64(i))) }

// StepRows is the number of items of step i over all ranks: what a rank
// whose batch holds n of them weighs its gradient by (n·World/StepRows
// relative to the mean over ranks) when the ranks' batches differ.
func (l *Loader) StepRows(i int) int {
	return int(l.sp.stepRows(l.cfg.Rank, l.off(i)))
}

// BatchSize is the largest batch (Batch, or GlobalBatch/World rounded up).
func (l *Loader) BatchSize() int {
	if l.cfg.GlobalBatch > 0 {
		return int(l.sp.maxBatch())
	}
	return l.cfg.Batch
}

// Indices returns the dataset indices of this rank's items this epoch; the
// slice is the loader's (valid until SetEpoch).
func (l *Loader) Indices() []int32 { return l.mine }

// off is where step i starts in mine.
func (l *Loader) off(i int) int64 {
	b := l.sp.batch(l.cfg.Rank)
	if f := l.sp.full(); int64(i) > f {
		return f*b + int64(i-int(f))*l.sp.lastShare(l.cfg.Rank)
	}
	return int64(i) * b
}

// Batch fills x (BatchSize·Pixels floats) with the normalised images and y
// (BatchSize floats) with the labels of step i of the epoch, and returns how
// many items it holds (less than BatchSize for a final partial batch).
func (l *Loader) Batch(i int, x, y []float32) int {
	lo := int(l.off(i))
	var hi int
	if i >= 0 && i < l.Steps() {
		hi = lo + int(l.sp.batchAt(l.cfg.Rank, int64(lo)))
	}
	if i < 0 || lo >= hi {
		panic(fmt.Sprintf("data: step %d of %d", i, l.Steps()))
	}
	px := l.ds.Pixels()
	lut := l.cfg.Normalize
	x = x[:(hi-lo)*px]
	y = y[:hi-lo]
	for j, idx := range l.mine[lo:hi] {
		src := l.ds.Images[int(idx)*px : (int(idx)+1)*px]
		dst := x[j*px : (j+1)*px]
		for k, v := range src {
			dst[k] = lut[v]
		}
		y[j] = float32(l.ds.Labels[idx])
	}
	return hi - lo
}

// shuffle is Fisher–Yates driven by a PCG-XSL-RR-128 generator seeded
// with (seed, stream), with Lemire's unbiased bounded draws. It is written out
// here, not taken from math/rand, so that an order depends on nothing but
// its inputs.
func shuffle(p []int32, seed, stream uint64) {
	g := pcg{hi: seed, lo: stream ^ 0x9e3779b97f4a7c15}
	g.next()
	for i := len(p) - 1; i > 0; i-- {
		j := g.bounded(uint64(i + 1))
		p[i], p[j] = p[j], p[i]
	}
}

// pcg is PCG with 128-bit state and the DXSM output (the generator of Go's
// math/rand/v2 PCG).
type pcg struct{ hi, lo uint64 }

func (p *pcg) next() uint64 {
	const (
		mulHi = 2549297995355413924
		mulLo = 4865540595714422341
		incHi = 6364136223846793005
		incLo = 1442695040888963407
	)
	hi, lo := bits.Mul64(p.lo, mulLo)
	hi += p.hi*mulLo + p.lo*mulHi
	lo, c := bits.Add64(lo, incLo, 0)
	hi, _ = bits.Add64(hi, incHi, c)
	p.lo, p.hi = lo, hi
	const cheapMul = 0xda942042e4dd58b5
	hi ^= hi >> 32
	hi *= cheapMul
	hi ^= hi >> (64 - 16)
	hi *= lo | 1
	return hi
}

// bounded returns a uniform value in [0, n).
func (p *pcg) bounded(n uint64) uint64 {
	hi, lo := bits.Mul64(p.next(), n)
	if lo < n {
		thr := -n % n
		for lo < thr {
			hi, lo = bits.Mul64(p.next(), n)
		}
	}
	return hi
}
