package main

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/tempotrain/tempotrain/compute"
	"github.com/tempotrain/tempotrain/data/format"
	"github.com/tempotrain/tempotrain/predict"
)

// torchTolerance is how far PyTorch's probabilities may be from ours: both
// are float32 computed with sums in other orders (OpenBLAS and our kernels;
// oneDNN or PyTorch's own), which leaves differences of about 1e-6.
const torchTolerance = 1e-4

// batchResult is one model's batch inference measurements.
type batchResult struct {
	model        string
	acc          float64
	torchVersion string
	ours, torch  []float64 // samples/s per round, wall time
	ratios       []float64 // ours/torch per round, wall time
	cpuRatios    []float64 // ours/torch per round, processor time
	maxDiff      float64
	agree        int
}

// benchBatch compares batch inference of the built-in mlp and cnn, each
// trained here for one epoch and loaded from its committed checkpoint, with
// PyTorch 1.13 running the same architecture with the same parameters.
func benchBatch(f flags) error {
	ctx := context.Background()
	procs := runtime.GOMAXPROCS(1)
	defer runtime.GOMAXPROCS(procs)
	threads := compute.Threads()
	compute.SetThreads(1)
	defer compute.SetThreads(threads)
	dir, err := os.MkdirTemp("", "bench-predict-batch-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	fmt.Printf("== batch inference: ours (1 goroutine, GOMAXPROCS 1, OpenBLAS 1 thread) vs PyTorch (torch.set_num_threads(1), no_grad)\n")
	fmt.Printf("load average before: %s\n", loadAvg())
	ds, err := format.LoadFashionMNIST(format.DefaultFashionMNISTDir, "t10k")
	if err != nil {
		return err
	}
	ds = ds.Subset(f.batchImages)
	px := make([]float32, len(ds.Images))
	for i, v := range ds.Images {
		px[i] = float32(v)
	}
	var results []batchResult
	for _, model := range f.batchModels {
		r, err := benchBatchModel(ctx, f, dir, model, px, ds.N)
		if err != nil {
			return fmt.Errorf("%s: %w", model, err)
		}
		results = append(results, r)
	}
	fmt.Printf("\nmedians over %d rounds of %d test images, batch %d (each round: every image once):\n\n", f.rounds, ds.N, f.batchSize)
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "model\tours samples/s\tPyTorch samples/s\tours/PyTorch\tper-round ratios\tours/PyTorch, processor time\tmax |Δp|\tsame class\t")
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t%.2f×\t%.2f–%.2f\t%.2f× (%.2f–%.2f)\t%.1e\t%d/%d\t\n", r.model, medianF(r.ours), medianF(r.torch),
			medianF(r.ratios), slices.Min(r.ratios), slices.Max(r.ratios),
			medianF(r.cpuRatios), slices.Min(r.cpuRatios), slices.Max(r.cpuRatios), r.maxDiff, r.agree, ds.N)
	}
	tw.Flush()
	if len(results) > 0 {
		fmt.Printf("PyTorch %s; ratios are medians of the per-round ratios (ours and PyTorch alternate within a round);\n"+
			"processor time: each side's user+system seconds for the round (getrusage, time.process_time), which other work on the machine does not inflate\n",
			results[0].torchVersion)
	}
	fmt.Printf("load average after: %s\n\n", loadAvg())
	return nil
}

func benchBatchModel(ctx context.Context, f flags, dir, model string, px []float32, rows int) (batchResult, error) {
	res := batchResult{model: model}
	start := time.Now()
	mdir := dir + "/" + model
	if err := os.MkdirAll(mdir, 0o755); err != nil {
		return res, err
	}
	uri, acc, err := trainCheckpoint(ctx, mdir, model, f.trainLimit)
	if err != nil {
		return res, fmt.Errorf("training: %w", err)
	}
	res.acc = acc
	fmt.Printf("%s: 1 epoch on %d training images in %.1fs, test accuracy %.4f\n", model, f.trainLimit, time.Since(start).Seconds(), acc)
	p, err := predict.Load(ctx, uri)
	if err != nil {
		return res, err
	}
	defer p.Close()
	peer, err := startTorch(ctx, f.python, uri, mdir, px, rows, f.batchSize)
	if err != nil {
		return res, err
	}
	defer peer.close()
	res.torchVersion = peer.version

	// The same outputs: PyTorch's probabilities within torchTolerance of ours.
	ours, err := predictImages(ctx, p, px, rows, f.batchSize)
	if err != nil {
		return res, err
	}
	_, probs, err := peer.check()
	if err != nil {
		return res, err
	}
	res.maxDiff = maxDiff(ours.FP32, probs)
	res.agree = sameClass(ours.FP32, probs, 10)
	if res.maxDiff > torchTolerance {
		return res, fmt.Errorf("PyTorch's probabilities differ from ours by up to %.3g (tolerance %g)", res.maxDiff, torchTolerance)
	}
	fmt.Printf("%s: PyTorch's probabilities within %.1e of ours on %d images, the same class for %d\n", model, res.maxDiff, rows, res.agree)

	for r := range f.rounds {
		var ourSec, ourCPU, torchSec, torchCPU float64
		runOurs := func() error {
			s, c := time.Now(), cpuSeconds()
			for lo := 0; lo < rows; lo += f.batchSize {
				if _, err := p.Predict(ctx, imageBatch(px, lo, min(f.batchSize, rows-lo))); err != nil {
					return err
				}
			}
			ourSec, ourCPU = time.Since(s).Seconds(), cpuSeconds()-c
			return nil
		}
		runTorch := func() (err error) {
			torchSec, torchCPU, err = peer.round()
			return err
		}
		if err := alternate(r, runOurs, runTorch); err != nil {
			return res, err
		}
		o, t := float64(rows)/ourSec, float64(rows)/torchSec
		res.ours, res.torch, res.ratios = append(res.ours, o), append(res.torch, t), append(res.ratios, o/t)
		res.cpuRatios = append(res.cpuRatios, torchCPU/ourCPU)
		fmt.Printf("%s round %d: ours %8.0f samples/s, PyTorch %8.0f samples/s, %.2f×; processor time %.2f×\n", model, r+1, o, t, o/t, torchCPU/ourCPU)
	}
	return res, nil
}

// alternate runs a then b in even rounds, b then a in odd ones.
func alternate(round int, a, b func() error) error {
	if round%2 == 1 {
		a, b = b, a
	}
	if err := a(); err != nil {
		return err
	}
	return b()
}

// predictImages runs rows images through p, batch at a time, and returns
// the probabilities.
func predictImages(ctx context.Context, p predict.Predictor, px []float32, rows, batch int) (predict.Tensor, error) {
	probs := predict.Tensor{Name: "probabilities", Datatype: predict.FP32, Shape: []int{rows, 10}, FP32: make([]float32, 0, rows*10)}
	for lo := 0; lo < rows; lo += batch {
		out, err := p.Predict(ctx, imageBatch(px, lo, min(batch, rows-lo)))
		if err != nil {
			return probs, err
		}
		probs.FP32 = append(probs.FP32, out[0].FP32...)
	}
	return probs, nil
}

// imageBatch is images [lo, lo+n) of px as a predictor's input.
func imageBatch(px []float32, lo, n int) predict.Batch {
	return predict.Batch{Inputs: []predict.Tensor{{Name: "pixels", Datatype: predict.FP32, Shape: []int{n, 1, 28, 28},
		FP32: px[lo*784 : (lo+n)*784]}}}
}

// sameClass counts the rows whose first largest probability is at the same
// class in a and b (rows × k).
func sameClass(a, b []float32, k int) int {
	n := 0
	for i := 0; i+k <= len(a); i += k {
		if argmax(a[i:i+k]) == argmax(b[i:i+k]) {
			n++
		}
	}
	return n
}

func argmax(v []float32) int {
	best := 0
	for i, x := range v {
		if x > v[best] {
			best = i
		}
	}
	return best
}
