package data

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tempotrain/tempotrain/data/format"
)

// EnvRequireFashionMNIST makes tests that need Fashion-MNIST fail, not
// skip, when its files are missing (CI sets it).
const EnvRequireFashionMNIST = "TEMPOTRAIN_REQUIRE_FASHION_MNIST"

// fashionDir returns the directory of Fashion-MNIST's IDX files. Without
// them it skips the test, or fails it when TEMPOTRAIN_REQUIRE_FASHION_MNIST=1.
func fashionDir(t testing.TB) string {
	t.Helper()
	dir := format.DefaultFashionMNISTDir
	if d := os.Getenv("TEMPOTRAIN_FASHION_MNIST_DIR"); d != "" {
		dir = d
	}
	for _, name := range []string{"train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"} {
		if _, err := os.Stat(filepath.Join(dir, name+".gz")); err != nil {
			if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
				missingFashion(t, err)
			}
		}
	}
	return dir
}

// missingFashion skips t, or fails it under TEMPOTRAIN_REQUIRE_FASHION_MNIST=1.
func missingFashion(t testing.TB, err error) {
	t.Helper()
	if os.Getenv(EnvRequireFashionMNIST) == "1" {
		t.Fatalf("Fashion-MNIST required (%s=1) but missing: %v", EnvRequireFashionMNIST, err)
	}
	t.Skipf("Fashion-MNIST not installed (apt-get install dataset-fashion-mnist): %v", err)
}

func TestLoadFashionMNIST(t *testing.T) {
	t.Parallel()
	dir := fashionDir(t)
	for _, c := range []struct {
		split string
		n     int
	}{{"train", 60000}, {"t10k", 10000}} {
		ds, err := format.LoadFashionMNIST(dir, c.split)
		if err != nil {
			t.Fatal(err)
		}
		if ds.N != c.n || ds.Rows != 28 || ds.Cols != 28 || len(ds.Images) != c.n*784 || len(ds.Labels) != c.n {
			t.Fatalf("%s: N=%d %dx%d images=%d labels=%d", c.split, ds.N, ds.Rows, ds.Cols, len(ds.Images), len(ds.Labels))
		}
		var counts [10]int
		for _, l := range ds.Labels {
			counts[l]++
		}
		for k, n := range counts {
			// Fashion-MNIST is balanced: 6000 / 1000 per class.
			if n != c.n/10 {
				t.Errorf("%s: class %d has %d items, want %d", c.split, k, n, c.n/10)
			}
		}
		if c.split == "train" {
			// Known values: the mean pixel over the training set is 0.2860 (×255).
			var sum float64
			for _, v := range ds.Images {
				sum += float64(v)
			}
			if mean := sum / float64(len(ds.Images)) / 255; mean < 0.2855 || mean > 0.2865 {
				t.Errorf("mean pixel %.4f, want 0.2860", mean)
			}
		}
	}
}

// writeIDX writes an IDX file with the given magic, dims and data bytes,
// gzipped when gz.
func writeIDX(t *testing.T, dir, name string, magic uint32, dims []uint32, data []byte, gz bool) string {
	t.Helper()
	var b bytes.Buffer
	binary.Write(&b, binary.BigEndian, magic)
	for _, d := range dims {
		binary.Write(&b, binary.BigEndian, d)
	}
	b.Write(data)
	raw := b.Bytes()
	if gz {
		var z bytes.Buffer
		w := gzip.NewWriter(&z)
		w.Write(raw)
		w.Close()
		raw = z.Bytes()
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestIDXErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	img := make([]byte, 3*2*2)
	good := writeIDX(t, dir, "img.gz", 0x803, []uint32{3, 2, 2}, img, true)
	goodLbl := writeIDX(t, dir, "lbl", 0x801, []uint32{3}, []byte{0, 1, 2}, false)

	ds, err := format.LoadIDXPair(good, goodLbl, 10)
	if err != nil || ds.N != 3 || ds.Rows != 2 {
		t.Fatalf("good pair: %v %+v", err, ds)
	}

	cases := []struct {
		name       string
		img, lbl   string
		wantInErr  []string
		wantFormat bool
	}{
		{"bad magic", writeIDX(t, dir, "magic.gz", 0x804, []uint32{3, 2, 2}, img, true), goodLbl,
			[]string{"magic.gz", "magic 0x00000804", "want 0x00000803"}, true},
		{"labels as images", goodLbl, goodLbl, []string{"lbl", "magic 0x00000801"}, true},
		{"truncated data", writeIDX(t, dir, "trunc.gz", 0x803, []uint32{3, 2, 2}, img[:7], true), goodLbl,
			[]string{"trunc.gz", "data: truncated", "need 12 bytes, file has 7"}, true},
		{"trailing bytes", writeIDX(t, dir, "long.gz", 0x803, []uint32{3, 2, 2}, append(img, 1, 2), true), goodLbl,
			[]string{"long.gz", "longer than dimensions [3 2 2] say"}, true},
		{"truncated header", writeIDX(t, dir, "hdr", 0x803, []uint32{3}, nil, false), goodLbl,
			[]string{"hdr", "dimensions: truncated"}, true},
		{"count mismatch", good, writeIDX(t, dir, "lbl4", 0x801, []uint32{4}, []byte{0, 1, 2, 3}, false),
			[]string{"count mismatch", "img.gz has 3 images", "lbl4 has 4 labels"}, true},
		{"label out of range", good, writeIDX(t, dir, "lbl10", 0x801, []uint32{3}, []byte{0, 10, 2}, false),
			[]string{"lbl10", "label 10 of item 1"}, true},
		{"missing file", filepath.Join(dir, "nope"), goodLbl, []string{"nope"}, false},
	}
	for _, c := range cases {
		_, err := format.LoadIDXPair(c.img, c.lbl, 10)
		if err == nil {
			t.Errorf("%s: no error", c.name)
			continue
		}
		for _, w := range c.wantInErr {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not say %q", c.name, err, w)
			}
		}
		if errors.Is(err, format.ErrFormat) != c.wantFormat {
			t.Errorf("%s: errors.Is(ErrFormat) = %v", c.name, !c.wantFormat)
		}
	}

	// A truncated gzip stream (cut mid-file) is a truncation too.
	raw, _ := os.ReadFile(good)
	cut := filepath.Join(dir, "cut.gz")
	os.WriteFile(cut, raw[:len(raw)-10], 0o644)
	if _, err := format.ReadIDX(cut, 3); err == nil || !strings.Contains(err.Error(), "cut.gz") {
		t.Errorf("cut gzip: %v", err)
	}
}

func synth(n int) *format.Dataset {
	ds := &format.Dataset{N: n, Rows: 1, Cols: 2, Classes: 10, Images: make([]byte, 2*n), Labels: make([]byte, n)}
	for i := 0; i < n; i++ {
		ds.Images[2*i], ds.Images[2*i+1] = byte(i), byte(i>>8)
		ds.Labels[i] = byte(i % 10)
	}
	return ds
}

func TestShardsDisjointEqualSteps(t *testing.T) {
	t.Parallel()
	for _, n := range []int{1, 7, 100, 1001} {
		for _, world := range []int{1, 2, 3, 4} {
			for _, pad := range []bool{true, false} {
				seen := map[int32]int{}
				steps := -1
				for r := 0; r < world; r++ {
					l, err := PrepareData(synth(n), LoaderConfig{Rank: r, World: world, Batch: 8, Seed: 5, Shuffle: true, Pad: pad})
					if err != nil {
						t.Fatal(err)
					}
					l.SetEpoch(3)
					if pad {
						if steps >= 0 && l.Steps() != steps {
							t.Fatalf("n=%d world=%d: rank %d has %d steps, rank 0 has %d", n, world, r, l.Steps(), steps)
						}
						steps = l.Steps()
					}
					for _, i := range l.Indices() {
						seen[i]++
					}
				}
				if len(seen) != n {
					t.Fatalf("n=%d world=%d pad=%v: %d distinct items, want %d", n, world, pad, len(seen), n)
				}
				dups := 0
				for _, c := range seen {
					dups += c - 1
				}
				wantDups := 0
				if pad {
					wantDups = (n+world-1)/world*world - n
				}
				// Padding repeats at most World-1 items; without it none repeat.
				if dups != wantDups {
					t.Fatalf("n=%d world=%d pad=%v: %d repeated items, want %d", n, world, pad, dups, wantDups)
				}
			}
		}
	}
}

func TestShuffleDependsOnSeedAndEpochOnly(t *testing.T) {
	t.Parallel()
	order := func(seed uint64, epoch int) []int32 {
		l, err := PrepareData(synth(500), LoaderConfig{World: 2, Rank: 1, Batch: 10, Seed: seed, Shuffle: true, Pad: true})
		if err != nil {
			t.Fatal(err)
		}
		l.SetEpoch(epoch + 1) // a detour must not matter
		l.SetEpoch(epoch)
		return append([]int32(nil), l.Indices()...)
	}
	same := func(a, b []int32) bool {
		for i := range a {
			if a[i] != b[i] {
				return false
			}
		}
		return len(a) == len(b)
	}
	if !same(order(1, 2), order(1, 2)) {
		t.Fatal("same (seed, epoch) gave different orders")
	}
	if same(order(1, 2), order(1, 3)) {
		t.Fatal("epochs 2 and 3 have the same order")
	}
	if same(order(1, 2), order(2, 2)) {
		t.Fatal("seeds 1 and 2 have the same order")
	}
	// Pinned values: the order is part of the exact-resume contract, across
	// Go releases too.
	if got := order(42, 0)[:5]; !same(got, []int32{430, 82, 222, 254, 122}) {
		t.Fatalf("first items of (seed 42, epoch 0) on rank 1: %v, pinned [430 82 222 254 122]", got)
	}
	// The generator is math/rand/v2's PCG, written out.
	g, ref := pcg{hi: 7, lo: 9}, rand.NewPCG(7, 9)
	for i := 0; i < 100; i++ {
		if a, b := g.next(), ref.Uint64(); a != b {
			t.Fatalf("draw %d: %x, math/rand/v2 PCG gives %x", i, a, b)
		}
	}
}

func TestBatchFillsAndDoesNotAllocate(t *testing.T) {
	ds := synth(50)
	norm := format.NewNormalize(0.5, 0.25)
	l, err := PrepareData(ds, LoaderConfig{Batch: 16, Normalize: norm})
	if err != nil {
		t.Fatal(err)
	}
	if l.Steps() != 4 {
		t.Fatalf("steps %d, want 4", l.Steps())
	}
	x, y := make([]float32, 16*2), make([]float32, 16)
	if n := l.Batch(3, x, y); n != 2 {
		t.Fatalf("last batch has %d items, want 2", n)
	}
	// Item 48: pixels (48, 0), label 8.
	if want := float32((48.0/255 - 0.5) / 0.25); x[0] != want || x[1] != norm[0] || y[0] != 8 {
		t.Fatalf("item 48: x=%v y=%v, want [%v %v] 8", x[:2], y[0], want, norm[0])
	}
	allocs := testing.AllocsPerRun(100, func() {
		for i := 0; i < l.Steps(); i++ {
			l.Batch(i, x, y)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per epoch of batches, want 0", allocs)
	}
	dl, _ := PrepareData(ds, LoaderConfig{Batch: 16, DropLast: true})
	if dl.Steps() != 3 {
		t.Fatalf("drop last: %d steps, want 3", dl.Steps())
	}
}
