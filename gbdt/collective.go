package gbdt

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"

	"github.com/tempotrain/tempotrain/collective"
)

// Collective is the slice of *collective.Comm that training needs: the
// ranks of one run, each holding a disjoint shard of the rows. Every rank
// calls the same operations in the same order (collective's contract).
type Collective interface {
	Rank() int
	Size() int
	AllReduceFloat64(ctx context.Context, buf []float64, op collective.Op) error
	AllGather(ctx context.Context, in []byte) ([][]byte, error)
}

var _ Collective = (*collective.Comm)(nil)

// Local returns the Collective of a single rank that holds all rows.
func Local() Collective { return local{} }

type local struct{}

func (local) Rank() int { return 0 }
func (local) Size() int { return 1 }
func (local) AllReduceFloat64(ctx context.Context, _ []float64, _ collective.Op) error {
	return ctx.Err()
}
func (local) AllGather(ctx context.Context, in []byte) ([][]byte, error) {
	return [][]byte{append([]byte(nil), in...)}, ctx.Err()
}

// allMax replaces every element of v by its maximum over ranks. Maxima do
// not depend on order, so every rank gets the same bits.
func allMax(ctx context.Context, c Collective, v []float64) error {
	if c.Size() == 1 {
		return ctx.Err()
	}
	b := make([]byte, 8*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(x))
	}
	all, err := c.AllGather(ctx, b)
	if err != nil {
		return fmt.Errorf("gbdt: all-gather of maxima: %w", err)
	}
	for r, p := range all {
		if len(p) != len(b) {
			return fmt.Errorf("gbdt: rank %d sent %d bytes of maxima, want %d: ranks disagree on the work", r, len(p), len(b))
		}
		for i := range v {
			x := math.Float64frombits(binary.LittleEndian.Uint64(p[8*i:]))
			if x > v[i] {
				v[i] = x
			}
		}
	}
	return nil
}

// allSum sums integer-valued float64s over ranks. While every partial sum
// stays below 2^53 in magnitude the sum is exact, so the result does not
// depend on the order of the ranks' additions.
func allSum(ctx context.Context, c Collective, v []float64) error {
	if c.Size() == 1 || len(v) == 0 {
		return ctx.Err()
	}
	if err := c.AllReduceFloat64(ctx, v, collective.Sum); err != nil {
		return fmt.Errorf("gbdt: all-reduce of %d values: %w", len(v), err)
	}
	return nil
}

// quantScale returns the power of two s such that rounding n values of
// magnitude at most maxAbs to integers after multiplying by s gives integers
// whose sum stays below 2^52: the fixed point in which sums over any number
// of ranks, in any order, are exact.
func quantScale(maxAbs float64, n int) float64 {
	if !(maxAbs > 0) || n <= 0 {
		return 1
	}
	// s ≤ 2^52 / (n·maxAbs), a power of two.
	_, e := math.Frexp(float64(n) * maxAbs) // n·maxAbs in [2^(e-1), 2^e)
	return math.Ldexp(1, min(52-e, 1000))
}

// Quantised training: while the rows over all ranks number at most
// maxPackedRows, every row's gradient and hessian are also rounded to a
// coarse fixed point (packedScales) and packed into one int64, g·2^32 + h,
// which the histogram kernel adds with one addition a feature
// (gb_hist_packed_u8). The splits are chosen on those sums, the tree's
// values come from the fine ones (grower.renew). With n rows the gradient
// keeps about 30 - log2(n) bits (10 at a million rows, 8 at maxPackedRows)
// and the hessian one more. packedHist off (tests) always uses the fine
// sums.
const maxPackedRows = 1 << 22

var packedHist = true

// packedScales returns the powers of two sg, sh for n rows whose |g| is at
// most maxG and h (≥ 0) at most maxH: every sum of rounded g·sg over rows
// stays below 2^31 in magnitude, every sum of rounded h·sh below 2^32.
func packedScales(maxG, maxH float64, n int) (sg, sh float64) {
	scale := func(m float64, bits int) float64 {
		if !(m > 0) || n <= 0 {
			return 1
		}
		// n·m < 2^e, so n·m·s < 2^bits; the rounding adds at most n/2.
		_, e := math.Frexp(float64(n) * m)
		return math.Ldexp(1, min(bits-e, 1000))
	}
	return scale(maxG, 30), scale(maxH, 31)
}

// exactSums computes, for each slot j, the sum over all ranks' rows of
// terms[j][i], exactly in a fixed point chosen from the global maximum
// magnitude and row count (quantScale), so that every world size and every
// split of the rows gives the same bits. nTotal is the number of rows over
// all ranks.
func exactSums(ctx context.Context, c Collective, terms [][]float64, nTotal int) ([]float64, error) {
	k := len(terms)
	mx := make([]float64, k)
	for j, t := range terms {
		for _, x := range t {
			if a := math.Abs(x); a > mx[j] {
				mx[j] = a
			}
		}
	}
	if err := allMax(ctx, c, mx); err != nil {
		return nil, err
	}
	sums := make([]float64, k)
	scales := make([]float64, k)
	for j, t := range terms {
		s := quantScale(mx[j], nTotal)
		scales[j] = s
		acc := 0.0
		for _, x := range t {
			acc += math.RoundToEven(x * s)
		}
		sums[j] = acc
	}
	if err := allSum(ctx, c, sums); err != nil {
		return nil, err
	}
	for j := range sums {
		sums[j] /= scales[j]
	}
	return sums, nil
}

// gatherInts all-gathers one int64 per rank.
func gatherInts(ctx context.Context, c Collective, x int64) ([]int64, error) {
	if c.Size() == 1 {
		return []int64{x}, ctx.Err()
	}
	b := binary.LittleEndian.AppendUint64(nil, uint64(x))
	all, err := c.AllGather(ctx, b)
	if err != nil {
		return nil, fmt.Errorf("gbdt: all-gather: %w", err)
	}
	out := make([]int64, len(all))
	for r, p := range all {
		if len(p) != 8 {
			return nil, fmt.Errorf("gbdt: rank %d sent %d bytes, want 8", r, len(p))
		}
		out[r] = int64(binary.LittleEndian.Uint64(p))
	}
	return out, nil
}
