package format

import (
	"fmt"
	"os"
	"path/filepath"
)

// DefaultFashionMNISTDir is where Debian's dataset-fashion-mnist installs it.
const DefaultFashionMNISTDir = "/usr/share/datasets/fashion-mnist"

// Fashion-MNIST's pixel statistics over its training set, used by both the
// built-in training functions and the PyTorch peer in bench/train.
const (
	FashionMNISTMean = 0.2860
	FashionMNISTStd  = 0.3530
)

// Dataset is a set of images with class labels, kept as bytes.
type Dataset struct {
	// Images holds N images of Rows×Cols pixels, row-major.
	Images     []byte
	Labels     []byte
	N          int
	Rows, Cols int
	Classes    int
}

// Pixels is the number of pixels of one image.
func (d *Dataset) Pixels() int { return d.Rows * d.Cols }

// Subset returns the first n items (all of them if n ≤ 0 or n ≥ N); it shares
// memory with d.
func (d *Dataset) Subset(n int) *Dataset {
	if n <= 0 || n >= d.N {
		return d
	}
	s := *d
	s.N = n
	s.Images = d.Images[:n*d.Pixels()]
	s.Labels = d.Labels[:n]
	return &s
}

// LoadFashionMNIST reads split "train" or "t10k" of Fashion-MNIST from dir
// ({split}-images-idx3-ubyte.gz and {split}-labels-idx1-ubyte.gz; .gz optional).
func LoadFashionMNIST(dir, split string) (*Dataset, error) {
	if split != "train" && split != "t10k" {
		return nil, fmt.Errorf("fashion-mnist: split %q, want train or t10k", split)
	}
	imgPath, err := find(dir, split+"-images-idx3-ubyte")
	if err != nil {
		return nil, err
	}
	lblPath, err := find(dir, split+"-labels-idx1-ubyte")
	if err != nil {
		return nil, err
	}
	return LoadIDXPair(imgPath, lblPath, 10)
}

func find(dir, base string) (string, error) {
	for _, name := range []string{base + ".gz", base} {
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
			return p, nil
		}
	}
	return "", fmt.Errorf("fashion-mnist: no %s.gz or %s in %s", base, base, dir)
}

// LoadIDXPair reads an image file and its label file and checks that they
// agree: same count, labels below classes.
func LoadIDXPair(imagesPath, labelsPath string, classes int) (*Dataset, error) {
	img, err := ReadIDX(imagesPath, 3)
	if err != nil {
		return nil, err
	}
	lbl, err := ReadIDX(labelsPath, 1)
	if err != nil {
		return nil, err
	}
	if img.Dims[0] != lbl.Dims[0] {
		return nil, fmt.Errorf("%w: count mismatch: %s has %d images, %s has %d labels",
			ErrFormat, imagesPath, img.Dims[0], labelsPath, lbl.Dims[0])
	}
	for i, l := range lbl.Data {
		if int(l) >= classes {
			return nil, fmt.Errorf("%w: %s: label %d of item %d is not below %d classes", ErrFormat, labelsPath, l, i, classes)
		}
	}
	return &Dataset{Images: img.Data, Labels: lbl.Data, N: img.Dims[0], Rows: img.Dims[1], Cols: img.Dims[2], Classes: classes}, nil
}

// Normalize maps a pixel byte v to ((v/255) - mean) / std.
type Normalize [256]float32

// NewNormalize builds the table for mean and std (of pixels scaled to [0, 1]).
func NewNormalize(mean, std float64) *Normalize {
	var t Normalize
	for v := range t {
		t[v] = float32((float64(v)/255 - mean) / std)
	}
	return &t
}
