package format

import (
	"bytes"
	"context"
	"fmt"
	"image"
	_ "image/jpeg" // decoders registered for image.Decode
	_ "image/png"
	"io"
	"sort"
	"strconv"
	"strings"

	"github.com/tempotrain/tempotrain/api"
)

// imageSource reads a folder of images, one subfolder per class (Keras'
// image_dataset_from_directory, torchvision's ImageFolder): classes are the
// subfolders' names, sorted; images are decoded (PNG, JPEG) and resized
// (bilinear) to Channels×Height×Width bytes.
type imageSource struct {
	files   []*fileRef
	labels  []int
	classes []string
	c, h, w int
	workers int
	unitLen int
}

// imagesPerUnit is how many images a unit of streaming holds.
const imagesPerUnit = 64

func openImages(_ context.Context, spec api.DatasetSpec, opt Options, files []*fileRef) (Source, error) {
	s := &imageSource{c: spec.Image.Channels, h: spec.Image.Height, w: spec.Image.Width, workers: opt.Workers, unitLen: imagesPerUnit}
	index := map[string]int{}
	for _, f := range files {
		class, _, ok := strings.Cut(f.rel, "/")
		if !ok {
			return nil, invalidf("%s: an image outside a class folder (want %s/<class>/<image>)", f.uri, spec.URI)
		}
		if _, seen := index[class]; !seen {
			index[class] = len(s.classes)
			s.classes = append(s.classes, class)
		}
	}
	sort.Strings(s.classes)
	for i, c := range s.classes {
		index[c] = i
	}
	for _, f := range files {
		class, _, _ := strings.Cut(f.rel, "/")
		s.files = append(s.files, f)
		s.labels = append(s.labels, index[class])
	}
	return s, nil
}

func (s *imageSource) Slots() []Slot {
	return []Slot{{Name: "label", Kind: Numeric, label: true}}
}
func (s *imageSource) FixedClasses() []string      { return s.classes }
func (s *imageSource) ImageShape() (c, h, w int)   { return s.c, s.h, s.w }
func (s *imageSource) EstimateRows() (int64, bool) { return int64(len(s.files)), true }
func (s *imageSource) CanStream() bool             { return true }
func (s *imageSource) Close() error                { return nil }

func (s *imageSource) Units(context.Context, UnitTarget) ([]int64, error) {
	var rows []int64
	for lo := 0; lo < len(s.files); lo += s.unitLen {
		rows = append(rows, int64(min(s.unitLen, len(s.files)-lo)))
	}
	return rows, nil
}

func (s *imageSource) LoadAll(ctx context.Context, want []bool, emit func(*Block) error) error {
	for lo := 0; lo < len(s.files); lo += s.unitLen {
		b, err := s.read(ctx, lo, min(lo+s.unitLen, len(s.files)), want)
		if err != nil {
			return err
		}
		if err := emit(b); err != nil {
			return err
		}
	}
	return nil
}

func (s *imageSource) ReadUnit(ctx context.Context, u int, lo, hi int64, want []bool) ([]*Block, int64, error) {
	at := u * s.unitLen
	b, err := s.read(ctx, at+int(lo), min(at+int(hi), len(s.files)), want)
	if err != nil {
		return nil, 0, err
	}
	return []*Block{b}, lo, nil
}

// read decodes images [lo, hi), in parallel.
func (s *imageSource) read(ctx context.Context, lo, hi int, want []bool) (*Block, error) {
	n := hi - lo
	per := s.c * s.h * s.w
	b := &Block{N: n, Num: [][]float32{make([]float32, n)}, Cat: [][]int32{nil}, dicts: []*localDict{nil}}
	for i := range n {
		b.Num[0][i] = float32(s.labels[lo+i])
	}
	if want != nil && !want[0] {
		b.Num[0] = nil
	}
	if want != nil {
		// A scan of the label only: no pixels.
		return b, nil
	}
	b.Px = make([]byte, n*per)
	err := parallel(ctx, n, s.workers, func(i int) error {
		f := s.files[lo+i]
		rc, err := f.open(ctx)
		if err != nil {
			return err
		}
		raw, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", f.uri, err)
		}
		img, err := decodeImage(f.uri, raw)
		if err != nil {
			return err
		}
		resize(img, s.c, s.h, s.w, b.Px[i*per:(i+1)*per])
		return nil
	})
	if err != nil {
		return nil, err
	}
	return b, nil
}

// maxImagePixels bounds the width × height an image's header may declare
// (64 Mpx: 8192 × 8192, at most 512 MiB decoded at 16 bits a channel):
// the decoders allocate the whole image from the header, before reading
// the pixels.
const maxImagePixels = 64 << 20

// maxPNGPixelsPerByte bounds the pixels one byte of a PNG file can hold:
// deflate expands a byte to at most 1032, and a pixel takes at least one
// bit of the inflated data.
const maxPNGPixelsPerByte = 8 * 1032

// decodeImage decodes a PNG or JPEG image read from uri. The header's
// width and height are checked first, against maxImagePixels and, for a
// PNG, against what the file's bytes can hold, so that a header cannot
// make the decoder allocate more than the file can fill.
func decodeImage(uri string, raw []byte) (image.Image, error) {
	cfg, format, err := image.DecodeConfig(bytes.NewReader(raw))
	if err != nil {
		return nil, invalidf("%s: not a PNG or JPEG image: %v", uri, err)
	}
	if err := checkImageSize(uri, format, cfg.Width, cfg.Height, len(raw)); err != nil {
		return nil, err
	}
	img, _, err := image.Decode(bytes.NewReader(raw))
	if err != nil {
		return nil, invalidf("%s: not a PNG or JPEG image: %v", uri, err)
	}
	return img, nil
}

// checkImageSize refuses a w×h image (of format, read from a file of size
// bytes) that has no pixels, more than maxImagePixels, or, for a PNG,
// more than the file can hold.
func checkImageSize(uri, format string, w, h, size int) error {
	if w <= 0 || h <= 0 {
		return invalidf("%s: a %s image of %dx%d: no pixels", uri, format, w, h)
	}
	if w > maxImagePixels/h {
		return invalidf("%s: a %s image of %dx%d: more than the %d pixels (64 Mpx) an image may have", uri, format, w, h, maxImagePixels)
	}
	if format == "png" && int64(w)*int64(h) > int64(size)*maxPNGPixelsPerByte {
		return invalidf("%s: a png image of %dx%d in %d bytes: the file cannot hold that many pixels", uri, w, h, size)
	}
	return nil
}

// resize samples img bilinearly at h×w into dst, channel-major (C×H×W): 1
// channel is the luminance (ITU-R 601, as image/color's Gray), 3 are R, G, B.
func resize(img image.Image, c, h, w int, dst []byte) {
	bnd := img.Bounds()
	sw, sh := bnd.Dx(), bnd.Dy()
	at := func(x, y int) (r, g, b float64) {
		cr, cg, cb, _ := img.At(bnd.Min.X+x, bnd.Min.Y+y).RGBA()
		return float64(cr) / 257, float64(cg) / 257, float64(cb) / 257
	}
	for y := range h {
		fy := (float64(y)+0.5)*float64(sh)/float64(h) - 0.5
		y0 := clampInt(int(floor(fy)), 0, sh-1)
		y1 := clampInt(y0+1, 0, sh-1)
		ty := fy - floor(fy)
		if fy < 0 {
			ty = 0
		}
		for x := range w {
			fx := (float64(x)+0.5)*float64(sw)/float64(w) - 0.5
			x0 := clampInt(int(floor(fx)), 0, sw-1)
			x1 := clampInt(x0+1, 0, sw-1)
			tx := fx - floor(fx)
			if fx < 0 {
				tx = 0
			}
			r00, g00, b00 := at(x0, y0)
			r01, g01, b01 := at(x1, y0)
			r10, g10, b10 := at(x0, y1)
			r11, g11, b11 := at(x1, y1)
			lerp := func(a, b, c, d float64) float64 {
				return (a*(1-tx)+b*tx)*(1-ty) + (c*(1-tx)+d*tx)*ty
			}
			r := lerp(r00, r01, r10, r11)
			g := lerp(g00, g01, g10, g11)
			bl := lerp(b00, b01, b10, b11)
			if c == 1 {
				dst[y*w+x] = byte(clampF((19595*r+38470*g+7471*bl)/65536 + 0.5))
				continue
			}
			dst[0*h*w+y*w+x] = byte(clampF(r + 0.5))
			dst[1*h*w+y*w+x] = byte(clampF(g + 0.5))
			dst[2*h*w+y*w+x] = byte(clampF(bl + 0.5))
		}
	}
}

func floor(f float64) float64 {
	i := float64(int(f))
	if i > f {
		i--
	}
	return i
}

func clampInt(v, lo, hi int) int { return min(max(v, lo), hi) }

func clampF(v float64) float64 { return min(max(v, 0), 255) }

// idxSource is Fashion-MNIST from its IDX files: read whole (the files are
// gzipped), held in memory.
type idxSource struct {
	imgs, lbls string
	n          int
}

func openIDX(spec api.DatasetSpec, opt Options) (Source, error) {
	split := strings.TrimPrefix(spec.URI, api.FashionMNISTScheme)
	if split == "test" {
		split = "t10k"
	}
	imgs, err := find(opt.FashionMNISTDir, split+"-images-idx3-ubyte")
	if err != nil {
		return nil, invalidf("%s: %v (Debian's dataset-fashion-mnist installs them in %s)", spec.URI, err, DefaultFashionMNISTDir)
	}
	lbls, err := find(opt.FashionMNISTDir, split+"-labels-idx1-ubyte")
	if err != nil {
		return nil, invalidf("%s: %v", spec.URI, err)
	}
	n := 60000
	if split == "t10k" {
		n = 10000
	}
	return &idxSource{imgs: imgs, lbls: lbls, n: n}, nil
}

func (s *idxSource) Slots() []Slot {
	return []Slot{{Name: "label", Kind: Numeric, label: true}}
}

func (s *idxSource) FixedClasses() []string {
	c := make([]string, 10)
	for i := range c {
		c[i] = strconv.Itoa(i)
	}
	return c
}
func (s *idxSource) ImageShape() (c, h, w int)   { return 1, 28, 28 }
func (s *idxSource) EstimateRows() (int64, bool) { return int64(s.n), false }
func (s *idxSource) CanStream() bool             { return false }
func (s *idxSource) Close() error                { return nil }

func (s *idxSource) Units(context.Context, UnitTarget) ([]int64, error) {
	return nil, fmt.Errorf("data: IDX files are read whole")
}

func (s *idxSource) ReadUnit(context.Context, int, int64, int64, []bool) ([]*Block, int64, error) {
	return nil, 0, fmt.Errorf("data: IDX files are read whole")
}

func (s *idxSource) LoadAll(_ context.Context, _ []bool, emit func(*Block) error) error {
	ds, err := LoadIDXPair(s.imgs, s.lbls, 10)
	if err != nil {
		return err
	}
	if ds.Rows != 28 || ds.Cols != 28 {
		return invalidf("%s: images of %dx%d, want 28x28", s.imgs, ds.Rows, ds.Cols)
	}
	b := &Block{N: ds.N, Num: [][]float32{make([]float32, ds.N)}, Cat: [][]int32{nil}, dicts: []*localDict{nil}, Px: ds.Images}
	for i, l := range ds.Labels {
		b.Num[0][i] = float32(l)
	}
	return emit(b)
}

func (s *imageSource) Digest() string { return digestFiles(s.files) }

func (s *idxSource) Digest() string { return s.imgs + "|" + s.lbls }
