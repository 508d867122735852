package data

import (
	"context"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/data/format"
)

func writeImage(t *testing.T, path string, w, h int, c color.Color) {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			img.Set(x, y, c)
		}
	}
	mkdir(filepath.Dir(path))
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if filepath.Ext(path) == ".png" {
		err = png.Encode(f, img)
	} else {
		err = jpeg.Encode(f, img, &jpeg.Options{Quality: 100})
	}
	if err != nil {
		t.Fatal(err)
	}
}

// TestImageFolder: one subfolder per class, PNG and JPEG of any size,
// resized to the spec's size; labels are the sorted folders' numbers;
// pixels are normalised per channel; in memory and streamed alike.
func TestImageFolder(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	colors := map[string]color.RGBA{"cat": {200, 10, 10, 255}, "ant": {10, 200, 10, 255}, "dog": {10, 10, 200, 255}}
	for class, c := range colors {
		for i := range 5 {
			ext := ".png"
			if i%2 == 1 {
				ext = ".jpg"
			}
			writeImage(t, filepath.Join(dir, class, fmt.Sprintf("%d%s", i, ext)), 5+i*7, 9+i, c)
		}
	}
	os.WriteFile(filepath.Join(dir, "cat", ".DS_Store"), []byte("x"), 0o644) // skipped
	for _, mode := range []string{"memory", "stream"} {
		no := false
		spec := api.DatasetSpec{URI: dir + "/", Format: "images", Mode: mode, Shuffle: &no, Remainder: "exact",
			Image: api.ImageOptions{Width: 4, Height: 3, Channels: 3, Mean: []float64{0.5, 0.5, 0.5}, Std: []float64{0.5, 0.5, 0.5}}}
		s := mustOpen(t, spec, ShardOptions{BatchSize: 15}, nil)
		if got := s.Shape(); !slices.Equal(got, []int{3, 3, 4}) || s.Width() != 36 {
			t.Fatalf("%s: shape %v width %d, want [3 3 4] 36", mode, got, s.Width())
		}
		if got := s.Label().Classes; !slices.Equal(got, []string{"ant", "cat", "dog"}) {
			t.Fatalf("%s: classes %v", mode, got)
		}
		x, y := make([]float32, 15*36), make([]float32, 15)
		n, err := s.Next(context.Background(), x, y)
		if err != nil || n != 15 {
			t.Fatal(n, err)
		}
		for i := range n {
			class := []string{"ant", "cat", "dog"}[int(y[i])]
			if want := float32(i / 5); y[i] != want {
				t.Fatalf("%s: row %d label %v, want %v", mode, i, y[i], want)
			}
			c := colors[class]
			for ch, v := range []uint8{c.R, c.G, c.B} {
				want := (float32(v)/255 - 0.5) / 0.5
				for k := range 12 {
					if got := x[i*36+ch*12+k]; got < want-0.03 || got > want+0.03 { // JPEG is lossy
						t.Fatalf("%s: row %d (%s) channel %d pixel %d = %v, want %v", mode, i, class, ch, k, got, want)
					}
				}
			}
		}
		_, err = s.Fit(context.Background(), []api.PreprocessorSpec{{Type: "standard_scaler", Columns: []string{"a"}}})
		wantErr(t, err, true, "preprocessors apply to tables")
	}
	// Grayscale: the luminance.
	spec := api.DatasetSpec{URI: dir, Format: "images", Image: api.ImageOptions{Width: 2, Height: 2, Channels: 1}}
	s := mustOpen(t, spec, ShardOptions{BatchSize: 1}, nil)
	if s.Width() != 4 {
		t.Fatalf("grayscale width %d", s.Width())
	}
	// An image outside a class folder.
	writeImage(t, filepath.Join(dir, "loose.png"), 3, 3, color.White)
	_, err := Open(context.Background(), spec, ShardOptions{}, nil)
	wantErr(t, err, true, "loose.png", "outside a class folder")
	// A file that is no image.
	os.Remove(filepath.Join(dir, "loose.png"))
	os.WriteFile(filepath.Join(dir, "dog", "bad.png"), []byte("not an image"), 0o644)
	_, err = Open(context.Background(), spec, ShardOptions{BatchSize: 64}, nil)
	wantErr(t, err, true, "bad.png", "not a PNG or JPEG image")
}

// TestFashionMNISTSpec reads Fashion-MNIST through a dataset spec and gets
// the IDX files' images and labels, normalised as the built-ins do.
func TestFashionMNISTSpec(t *testing.T) {
	t.Parallel()
	dir := fashionDir(t)
	ds, err := format.LoadFashionMNIST(dir, "t10k")
	if err != nil {
		t.Fatal(err)
	}
	no := false
	spec := api.DatasetSpec{URI: "fashion-mnist:test", Shuffle: &no, Remainder: "exact",
		Image: api.ImageOptions{Mean: []float64{format.FashionMNISTMean}, Std: []float64{format.FashionMNISTStd}}}
	s := mustOpen(t, spec, ShardOptions{BatchSize: 100, FashionMNISTDir: dir}, nil)
	if s.TotalRows() != 10000 || !slices.Equal(s.Shape(), []int{1, 28, 28}) || len(s.Label().Classes) != 10 {
		t.Fatalf("rows %d shape %v classes %v", s.TotalRows(), s.Shape(), s.Label().Classes)
	}
	l, err := PrepareData(ds, LoaderConfig{Batch: 100, Normalize: format.NewNormalize(format.FashionMNISTMean, format.FashionMNISTStd)})
	if err != nil {
		t.Fatal(err)
	}
	x, y := make([]float32, 100*784), make([]float32, 100)
	wx, wy := make([]float32, 100*784), make([]float32, 100)
	for step := range 3 {
		if _, err := s.Next(context.Background(), x, y); err != nil {
			t.Fatal(err)
		}
		l.Batch(step, wx, wy)
		if !slices.Equal(x, wx) || !slices.Equal(y, wy) {
			t.Fatalf("batch %d differs from the IDX loader's", step)
		}
	}
	// Memory mode only: IDX files are gzipped.
	spec.Mode = "stream"
	if s := mustOpen(t, spec, ShardOptions{FashionMNISTDir: dir}, nil); s.Streaming() {
		t.Fatal("IDX streamed")
	}
	_, err = Open(context.Background(), api.DatasetSpec{URI: "fashion-mnist:train", MemoryBudgetMiB: 16}, ShardOptions{FashionMNISTDir: dir}, nil)
	wantErr(t, err, true, "raise memory_budget_mib")
}

type recordTB struct {
	testing.TB
	fatal, skip string
}

func (r *recordTB) Helper()                        {}
func (r *recordTB) Fatalf(format string, a ...any) { r.fatal = fmt.Sprintf(format, a...) }
func (r *recordTB) Skipf(format string, a ...any)  { r.skip = fmt.Sprintf(format, a...) }

// TestFashionMNISTRequired: without the files, tests that need them skip,
// or fail under TEMPOTRAIN_REQUIRE_FASHION_MNIST=1.
func TestFashionMNISTRequired(t *testing.T) {
	t.Setenv("TEMPOTRAIN_FASHION_MNIST_DIR", t.TempDir())
	t.Setenv(EnvRequireFashionMNIST, "")
	r := &recordTB{TB: t}
	fashionDir(r)
	if r.skip == "" || r.fatal != "" {
		t.Fatalf("without the files: skip %q, fatal %q; want a skip", r.skip, r.fatal)
	}
	t.Setenv(EnvRequireFashionMNIST, "1")
	r = &recordTB{TB: t}
	fashionDir(r)
	if r.fatal == "" {
		t.Fatalf("without the files under %s=1: no failure (skip %q)", EnvRequireFashionMNIST, r.skip)
	}
}
