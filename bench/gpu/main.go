// Command gpubench measures tempotrain's CUDA backend on the GPU machine, the
// PyTorch peer (peer.py) measured the same way on the same GPU in the same
// run (run.sh alternates the two):
//
//   - GEMM: TFLOP/s of one 4096³ float32 product, FP32 and TF32 (cuBLAS
//     underneath both; ours calls cublasGemmEx, PyTorch torch.matmul);
//   - training: samples/s of one epoch of Fashion-MNIST (1×28×28, batch 256,
//     SGD lr 0.05 momentum 0.9) for mnist-cnn and mnist-resnet18, the first
//     -warmup steps untimed, and the test accuracy after the epoch. Ours runs
//     each step through RunGraph (one CUDA graph launch per step) or op by op
//     (-graph=false); no step reads the device (losses are summed there).
//
// Each measurement prints one JSON line. "gpubench report FILE..." reads such
// lines from both sides and prints medians and ratios; it is the only part
// that works in a build without -tags cuda (and on a machine without a GPU).
// bench/gpu/README.md says how to run it all on the GPU machine.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/tempotrain/tempotrain/data/format"
)

// Result is one measurement (peer.py prints the same fields).
type Result struct {
	Side      string  `json:"side"` // "tempotrain" or "pytorch"
	Kind      string  `json:"kind"` // "gemm" or "train"
	Model     string  `json:"model,omitempty"`
	Precision string  `json:"precision"`
	Graph     bool    `json:"graph,omitempty"`
	N         int     `json:"n,omitempty"`
	TFLOPS    float64 `json:"tflops,omitempty"`
	Samples   float64 `json:"samples_per_s,omitempty"`
	TestAcc   float64 `json:"test_accuracy,omitempty"`
	TrainLoss float64 `json:"train_loss,omitempty"`
	Seconds   float64 `json:"seconds,omitempty"`
	Device    string  `json:"device,omitempty"`
	Note      string  `json:"note,omitempty"`
}

type flags struct {
	what, precisions, dataDir string
	gpu, batch, epochs        int
	warmup, gemmN, gemmReps   int
	trials                    int
	lr, momentum              float64
	seed                      uint64
	graph                     string
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "report" {
		if err := report(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "gpubench report:", err)
			os.Exit(1)
		}
		return
	}
	if len(os.Args) > 1 && (os.Args[1] == "worker" || os.Args[1] == "fit" || os.Args[1] == "python") {
		if err := e2eMain(os.Args[1], os.Args[2:]); err != nil {
			fmt.Fprintf(os.Stderr, "gpubench %s: %v\n", os.Args[1], err)
			os.Exit(1)
		}
		return
	}
	var f flags
	flag.StringVar(&f.what, "what", "gemm,cnn,resnet18", "measurements: gemm, cnn, resnet18")
	flag.StringVar(&f.precisions, "precisions", "fp32,tf32", "GEMM precisions (fp32, tf32, bf16)")
	flag.StringVar(&f.graph, "graph", "on,off", "training steps through CUDA graphs (on), op by op (off), or both")
	flag.StringVar(&f.dataDir, "data", format.DefaultFashionMNISTDir, "directory of Fashion-MNIST's IDX files")
	flag.IntVar(&f.gpu, "gpu", 0, "GPU ordinal")
	flag.IntVar(&f.batch, "batch", 256, "batch size")
	flag.IntVar(&f.epochs, "epochs", 1, "epochs per training run")
	flag.IntVar(&f.warmup, "warmup", 10, "untimed steps at the start of a training run")
	flag.IntVar(&f.gemmN, "gemm-n", 4096, "GEMM size (n×n by n×n)")
	flag.IntVar(&f.gemmReps, "gemm-reps", 20, "GEMMs per timed trial")
	flag.IntVar(&f.trials, "trials", 5, "GEMM trials (the median is reported)")
	flag.Float64Var(&f.lr, "lr", 0.05, "learning rate")
	flag.Float64Var(&f.momentum, "momentum", 0.9, "SGD momentum")
	flag.Uint64Var(&f.seed, "seed", 0, "seed of initialisation and shuffling")
	flag.Parse()
	if measure == nil {
		fmt.Fprintln(os.Stderr, "gpubench: built without -tags cuda: only \"gpubench report FILE...\" works")
		os.Exit(2)
	}
	if err := measure(f); err != nil {
		fmt.Fprintln(os.Stderr, "gpubench:", err)
		os.Exit(1)
	}
}

// measure runs the measurements; set by the -tags cuda build.
var measure func(flags) error
