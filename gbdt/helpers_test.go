package gbdt

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/tempotrain/tempotrain/collective"
)

// group connects n ranks over loopback with package collective (real TCP
// handshakes; shared memory between ranks as in production on one host).
// The Comms are closed at the end of the test.
func group(t testing.TB, n int) []Collective {
	t.Helper()
	if n == 1 {
		return []Collective{Local()}
	}
	lns := make([]net.Listener, n)
	peers := make([]string, n)
	for r := range n {
		ln, err := collective.Listen("127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns[r], peers[r] = ln, ln.Addr().String()
	}
	comms := make([]*collective.Comm, n)
	errs := each(n, func(r int) error {
		var err error
		comms[r], err = collective.Connect(context.Background(), lns[r], peers, collective.Options{
			Rank: r, Size: n, Token: "gbdt-test", Timeout: time.Minute,
		})
		return err
	})
	t.Cleanup(func() {
		for _, c := range comms {
			if c != nil {
				_ = c.Close()
			}
		}
	})
	out := make([]Collective, n)
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: Connect: %v", r, err)
		}
		out[r] = comms[r]
	}
	return out
}

// each runs f for every rank at once and returns each rank's error.
func each(n int, f func(r int) error) []error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = f(r)
		}()
	}
	wg.Wait()
	return errs
}

// firstErr returns the first non-nil error, naming its rank.
func firstErr(errs []error) error {
	for r, err := range errs {
		if err != nil {
			return fmt.Errorf("rank %d: %w", r, err)
		}
	}
	return nil
}

// shard cuts d into len(sizes) consecutive shards of the given row counts
// (the rest to the last).
func shard(d *Dataset, sizes ...int) []*Dataset {
	var out []*Dataset
	at := 0
	for i, s := range sizes {
		if i == len(sizes)-1 {
			s = d.Rows - at
		}
		sh := &Dataset{X: d.X[at*d.Cols : (at+s)*d.Cols], Rows: s, Cols: d.Cols, Label: d.Label[at : at+s]}
		if d.Weight != nil {
			sh.Weight = d.Weight[at : at+s]
		}
		if d.RowID != nil {
			sh.RowID = d.RowID[at : at+s]
		}
		out = append(out, sh)
		at += s
	}
	return out
}

// unevenSizes splits rows over n ranks unevenly (about 1:2:3:...).
func unevenSizes(rows, n int) []int {
	tot := n * (n + 1) / 2
	sizes := make([]int, n)
	for r := range n {
		sizes[r] = rows * (r + 1) / tot
	}
	return sizes
}

// trainRanks trains on d split into shards over a group of len(sizes) ranks
// and returns every rank's model JSON and rounds.
func trainRanks(t testing.TB, p Params, d *Dataset, sizes []int, evalSets func(shard int) []Eval) ([][]byte, [][]Round) {
	t.Helper()
	n := len(sizes)
	comms := group(t, n)
	shards := shard(d, sizes...)
	models := make([][]byte, n)
	rounds := make([][]Round, n)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err := firstErr(each(n, func(r int) error {
		var ev []Eval
		if evalSets != nil {
			ev = evalSets(r)
		}
		m, rs, err := Train(ctx, comms[r], p, shards[r], ev...)
		if err != nil {
			return err
		}
		var b bytes.Buffer
		if err := m.SaveJSON(&b); err != nil {
			return err
		}
		models[r], rounds[r] = b.Bytes(), rs
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	return models, rounds
}

// synth makes a table: rows × cols features (normal, a few with missing
// values, one constant, one with few distinct values) and labels for obj.
func synth(rows, cols int, obj string, classes int, seed uint64) *Dataset {
	rng := rand.New(rand.NewPCG(seed, 7))
	d := &Dataset{X: make([]float32, rows*cols), Rows: rows, Cols: cols, Label: make([]float32, rows)}
	for i := range rows {
		x := d.X[i*cols : (i+1)*cols]
		for f := range x {
			switch {
			case f == 1 && cols > 2:
				x[f] = 3 // constant
			case f == 2 && cols > 3:
				x[f] = float32(rng.IntN(5)) // few distinct values
			default:
				x[f] = float32(rng.NormFloat64())
			}
			if f%4 == 3 && rng.Float64() < 0.15 {
				x[f] = float32(math.NaN())
			}
		}
		z := 0.0
		for f, v := range x {
			if v == v && f != 1 {
				z += float64(v) * math.Sin(float64(f+1))
			}
		}
		if x[0] == x[0] && x[0] > 0.5 {
			z += 1.5
		}
		z += 0.3 * rng.NormFloat64()
		switch obj {
		case BinaryLogistic, RegLogistic:
			if z > 0 {
				d.Label[i] = 1
			}
		case MultiSoftprob, MultiSoftmax:
			c := int(math.Floor(z + float64(classes)/2))
			d.Label[i] = float32(min(classes-1, max(0, c)))
		case CountPoisson:
			d.Label[i] = float32(rng.IntN(1 + int(math.Exp(min(z, 3))/2)))
		default:
			d.Label[i] = float32(z)
		}
	}
	return d
}

func mustParams(t testing.TB, js string) Params {
	t.Helper()
	p, err := ParseParams([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	return p
}
