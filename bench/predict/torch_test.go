package main

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/tempotrain/tempotrain/data/format"
	"github.com/tempotrain/tempotrain/predict"
)

// needTorch skips a test when /usr/bin/python3 cannot import torch, or
// fails it under TEMPOTRAIN_REQUIRE_TORCH=1 (CI).
func needTorch(t *testing.T) {
	t.Helper()
	out, err := exec.Command(systemPython, "-c", "import numpy, torch; print(torch.__version__)").CombinedOutput()
	if err == nil {
		return
	}
	msg := fmt.Sprintf("%s cannot import torch and numpy (apt-get install python3-torch): %v: %s", systemPython, err, bytes.TrimSpace(out))
	if os.Getenv("TEMPOTRAIN_REQUIRE_TORCH") == "1" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

func needFashionMNIST(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(format.DefaultFashionMNISTDir, "t10k-images-idx3-ubyte.gz")); err != nil {
		if os.Getenv("TEMPOTRAIN_REQUIRE_FASHION_MNIST") == "1" {
			t.Fatalf("needs Fashion-MNIST (TEMPOTRAIN_REQUIRE_FASHION_MNIST=1): %v", err)
		}
		t.Skipf("needs Fashion-MNIST (apt-get install dataset-fashion-mnist): %v", err)
	}
}

// Issue 16: PyTorch 1.13, running the mlp and the cnn as its own modules
// with a checkpoint's parameters (what -batch times), gives the
// probabilities of our predictor within 1e-4, and the logits of our model
// within 1e-4 (relative above 1), on a small batch of test images in two
// forward passes (a full batch and a partial one); so both sides of the
// benchmark compute the same function.
func TestTorchMatchesPredictor(t *testing.T) {
	needTorch(t)
	needFashionMNIST(t)
	ctx := context.Background()
	ds, err := format.LoadFashionMNIST(format.DefaultFashionMNISTDir, "t10k")
	if err != nil {
		t.Fatal(err)
	}
	ds = ds.Subset(100)
	px := bytesF32(ds.Images)
	const batch = 64
	for _, model := range []string{"mlp", "cnn"} {
		t.Run(model, func(t *testing.T) {
			dir := t.TempDir()
			uri, acc, err := trainCheckpoint(ctx, dir, model, 1024)
			if err != nil {
				t.Fatal(err)
			}
			if acc < 0.3 {
				t.Fatalf("test accuracy %v after training: the checkpoint is not a trained model", acc)
			}
			p, err := predict.Load(ctx, uri)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			ours, err := predictImages(ctx, p, px, ds.N, batch)
			if err != nil {
				t.Fatal(err)
			}
			// Our logits: the checkpoint's model on the normalised pixels.
			m, _, err := checkpointModel(ctx, uri, ds.N)
			if err != nil {
				t.Fatal(err)
			}
			x := m.Backend().New(ds.N, 1, 28, 28)
			norm := format.NewNormalize(format.FashionMNISTMean, format.FashionMNISTStd)
			for i, v := range ds.Images {
				x.Data()[i] = norm[v]
			}
			logits := m.Forward(x, false).Data()

			peer, err := startTorch(ctx, systemPython, uri, dir, px, ds.N, batch)
			if err != nil {
				t.Fatal(err)
			}
			defer peer.close()
			tl, tp, err := peer.check()
			if err != nil {
				t.Fatal(err)
			}
			if d := maxDiff(ours.FP32, tp); d > torchTolerance || math.IsNaN(d) {
				t.Errorf("PyTorch's probabilities differ from the predictor's by up to %.3g (tolerance %g)", d, torchTolerance)
			} else {
				t.Logf("PyTorch %s: probabilities within %.2g of ours", peer.version, d)
			}
			worst := 0.0
			for i := range logits {
				worst = max(worst, math.Abs(float64(logits[i]-tl[i]))/max(1, math.Abs(float64(tl[i]))))
			}
			if worst > torchTolerance || math.IsNaN(worst) {
				t.Errorf("PyTorch's logits differ from ours by up to %.3g (relative above 1; tolerance %g)", worst, torchTolerance)
			} else {
				t.Logf("logits within %.2g", worst)
			}
			if n := sameClass(ours.FP32, tp, 10); n != ds.N {
				t.Errorf("the same class for %d of %d images", n, ds.N)
			}
		})
	}
}
