//go:build cuda

package main

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/tempotrain/tempotrain/compute"
	"github.com/tempotrain/tempotrain/compute/cuda"
	"github.com/tempotrain/tempotrain/data"
	"github.com/tempotrain/tempotrain/data/format"
)

func init() {
	measure = run
	gpuBackend = func(device int) (compute.Backend, error) { return cuda.New(device, cuda.Options{}) }
}

func emit(r Result) {
	r.Side = "tempotrain"
	b, _ := json.Marshal(r)
	fmt.Println(string(b))
}

func run(f flags) error {
	devs, err := cuda.Devices()
	if err != nil {
		return err
	}
	if f.gpu >= len(devs) {
		return fmt.Errorf("-gpu %d: this machine has %d GPUs", f.gpu, len(devs))
	}
	dev := devs[f.gpu].Name
	var precs []cuda.Precision
	for _, s := range strings.Split(f.precisions, ",") {
		p, err := cuda.ParsePrecision(strings.TrimSpace(s))
		if err != nil {
			return err
		}
		precs = append(precs, p)
	}
	for _, w := range strings.Split(f.what, ",") {
		switch w = strings.TrimSpace(w); w {
		case "gemm":
			for _, p := range precs {
				r, err := gemm(f, p)
				if err != nil {
					return fmt.Errorf("gemm %s: %w", p, err)
				}
				r.Device = dev
				emit(r)
			}
		case "cnn", "resnet18", "mlp":
			for _, p := range precs {
				for _, g := range strings.Split(f.graph, ",") {
					r, err := trainRun(f, w, p, g == "on")
					if err != nil {
						return fmt.Errorf("%s %s: %w", w, p, err)
					}
					r.Device = dev
					emit(r)
				}
			}
		default:
			return fmt.Errorf("-what %q: unknown measurement %q", f.what, w)
		}
	}
	return nil
}

// gemm times C = A·B at n³ (random operands), median over trials of the
// mean over reps, after a warm-up.
func gemm(f flags, p cuda.Precision) (Result, error) {
	be, err := cuda.New(f.gpu, cuda.Options{Precision: p})
	if err != nil {
		return Result{}, err
	}
	defer be.Close()
	n := f.gemmN
	r := rand.New(rand.NewPCG(f.seed, 1))
	h := make([]float32, n*n)
	a, b, c := be.New(n, n), be.New(n, n), be.New(n, n)
	for _, t := range []compute.Tensor{a, b} {
		for i := range h {
			h[i] = float32(r.NormFloat64())
		}
		be.Upload(t, h)
	}
	mm := func() { be.MatMul(false, false, n, n, n, 1, a, n, b, n, 0, c, n) }
	for i := 0; i < 3; i++ {
		mm()
	}
	if err := be.Synchronize(); err != nil {
		return Result{}, err
	}
	times := make([]float64, f.trials)
	for t := range times {
		start := time.Now()
		for i := 0; i < f.gemmReps; i++ {
			mm()
		}
		if err := be.Synchronize(); err != nil {
			return Result{}, err
		}
		times[t] = time.Since(start).Seconds() / float64(f.gemmReps)
	}
	sec := median(times)
	return Result{Kind: "gemm", Precision: p.String(), N: n, Seconds: sec, TFLOPS: 2 * math.Pow(float64(n), 3) / sec / 1e12}, nil
}

// trainRun trains model for f.epochs on Fashion-MNIST and evaluates it.
func trainRun(f flags, model string, p cuda.Precision, graph bool) (res Result, err error) {
	be, err := cuda.New(f.gpu, cuda.Options{Precision: p})
	if err != nil {
		return res, err
	}
	defer be.Close()
	defer func() {
		// Backend ops panic with *cuda.Error on device failures.
		if e, ok := recover().(*cuda.Error); ok {
			err = e
		} else if e != nil {
			panic(e)
		}
	}()
	trainDS, err := format.LoadFashionMNIST(f.dataDir, "train")
	if err != nil {
		return res, err
	}
	testDS, err := format.LoadFashionMNIST(f.dataDir, "t10k")
	if err != nil {
		return res, err
	}
	norm := format.NewNormalize(format.FashionMNISTMean, format.FashionMNISTStd)
	trainL, err := data.PrepareData(trainDS, data.LoaderConfig{Batch: f.batch, Seed: f.seed, Shuffle: true, Normalize: norm})
	if err != nil {
		return res, err
	}
	testL, err := data.PrepareData(testDS, data.LoaderConfig{Batch: f.batch, Normalize: norm})
	if err != nil {
		return res, err
	}
	m, err := compute.NewModel(model, be, f.batch, f.seed)
	if err != nil {
		return res, err
	}
	opt, err := compute.NewOptimizer(m, compute.OptimizerConfig{Momentum: f.momentum})
	if err != nil {
		return res, err
	}
	x, y := be.New(f.batch, 1, 28, 28), be.New(f.batch)
	dl, st, acc, testAcc := be.New(f.batch, 10), be.New(2), be.New(2), be.New(2)
	hx, hy := make([]float32, x.Len()), make([]float32, y.Len())
	load := func(l *data.Loader, i int) (compute.Tensor, compute.Tensor) {
		n := l.Batch(i, hx, hy)
		xs, ys := x.Rows(0, n), y.Rows(0, n)
		be.Upload(xs, hx[:xs.Len()])
		be.Upload(ys, hy[:n])
		return xs, ys
	}
	do := func(fn func()) error {
		if graph {
			return be.RunGraph(fn)
		}
		fn()
		return nil
	}
	if trainL.Steps() <= f.warmup {
		return res, fmt.Errorf("an epoch of %d steps is not longer than -warmup %d", trainL.Steps(), f.warmup)
	}
	var start time.Time
	timed := 0
	for epoch := 0; epoch < f.epochs; epoch++ {
		trainL.SetEpoch(epoch)
		for i := 0; i < trainL.Steps(); i++ {
			if epoch == 0 && i == f.warmup {
				if err := be.Synchronize(); err != nil {
					return res, err
				}
				start = time.Now()
			}
			xs, ys := load(trainL, i)
			n := xs.Dim(0)
			err := do(func() {
				be.SoftmaxCrossEntropy(m.Forward(xs, true), ys, dl.Rows(0, n), st)
				be.AddTo(acc, st)
				m.Backward(dl.Rows(0, n), nil)
				opt.Step(f.lr)
			})
			if err != nil {
				return res, err
			}
			if epoch > 0 || i >= f.warmup {
				timed += n
			}
		}
	}
	if err := be.Synchronize(); err != nil {
		return res, err
	}
	elapsed := time.Since(start).Seconds()
	for i := 0; i < testL.Steps(); i++ {
		xs, ys := load(testL, i)
		if err := do(func() {
			be.SoftmaxCrossEntropy(m.Forward(xs, false), ys, compute.Tensor{}, st)
			be.AddTo(testAcc, st)
		}); err != nil {
			return res, err
		}
	}
	h := make([]float32, 2)
	be.Download(h, testAcc)
	res.TestAcc = float64(h[1]) / float64(testDS.N)
	be.Download(h, acc)
	res.TrainLoss = float64(h[0]) / float64(f.epochs*trainL.Len())
	res.Kind, res.Model, res.Precision, res.Graph = "train", model, p.String(), graph
	res.Seconds, res.Samples = elapsed, float64(timed)/elapsed
	if graph {
		s := be.Stats()
		res.Note = fmt.Sprintf("graphs: %d steps, %d eager, %d captures, %d launches, %d patched nodes, %d capture failures",
			s.Steps, s.Eager, s.Captures, s.Launches, s.Patched, s.CaptureFailures)
		if s.LastCaptureError != nil {
			res.Note += ": " + s.LastCaptureError.Error()
		}
	}
	return res, nil
}
