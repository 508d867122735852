// Command predict benchmarks package predict.
//
//	go run ./bench/predict                               # every mode below
//	go run ./bench/predict -batch                        # batch inference vs PyTorch: mlp and cnn
//	go run ./bench/predict -gbdt                         # gbdt prediction vs XGBoost: binary and fashion
//	go run ./bench/predict -serve                        # 1, 16, 64 clients, batching on and off, 5 rounds
//	go run ./bench/predict -serve -rounds 3 -duration 2s  # a quicker look
//
// -batch measures batch inference, samples/s, of the built-in mlp and cnn
// through predict (each trained here for one epoch on the first
// -train-limit Fashion-MNIST training images and loaded from its committed
// checkpoint) against PyTorch 1.13 (Debian python3-torch under -python)
// running the same architecture, PyTorch's own modules, with our
// parameters loaded (bench/predict/torch_peer.py; load_state_dict strict).
// Both sides run one thread (ours: one goroutine, GOMAXPROCS 1, OpenBLAS 1
// thread; PyTorch: torch.set_num_threads(1), OMP/MKL/OpenBLAS 1 thread),
// the same -batch-size (256) and the same -images-batch test images, each
// batch normalised from [0, 255] pixels, run through the model
// (torch.no_grad()), softmaxed and argmaxed; PyTorch's probabilities must
// be within 1e-4 of ours (the same check runs in CI:
// TestTorchMatchesPredictor). A round passes every image once on each
// side, in alternating order; the table gives medians over -rounds. Both
// sides' linear layers are the same OpenBLAS 0.3.21 sgemm calls (PyTorch's
// BLAS is Debian's libblas.so.3, OpenBLAS), so the mlp, whose time is
// almost all in them, can only gain on what surrounds them.
//
// -gbdt measures gbdt prediction, rows/s, through predict.Load of a model
// file (margins, probabilities and classes) against XGBoost 1.7.4's
// Booster.inplace_predict (nthread=1; bench/predict/xgb_peer.py) on the
// same model: ours, trained here on one rank (max_depth 6, eta 0.3, as
// bench/gbdt) and saved in XGBoost's JSON format, which XGBoost loads.
// Tables: "binary", bench/gbdt's generated table of 28 features (trained on
// -gbdt-train-rows rows for -gbdt-rounds rounds; -gbdt-rows rows predicted,
// 1M by default), and "fashion", 10-class multi:softprob on Fashion-MNIST
// (trained on -fashion-train images for -fashion-rounds rounds; the 10,000
// test images predicted). XGBoost's predictions must be within 1e-5 of
// ours. Ours runs on one goroutine with GOMAXPROCS 1. Each side repeats
// the whole prediction for at least a second per round.
//
// -serve measures the Open Inference Protocol server (predict.Server) over
// loopback HTTP: requests/s and p50/p99 latency of single-image
// POST /v2/models/mnist-<model>/infer requests at 1, 16 and 64 concurrent
// clients, with dynamic batching on (the Server's defaults: MaxBatch 64,
// MaxWait 2ms, GOMAXPROCS batches in flight) and off (every request its own
// Predict, through the same queue and the same number of workers).
//
// The models (-models) are the built-in mlp, cnn and resnet18, each trained
// here first, for one epoch on the first -train-limit Fashion-MNIST training
// images (seconds; half a minute for resnet18). They span what batching can
// do: one image through the mlp costs about 23 µs alone and 5 µs in a batch,
// less than the HTTP exchange around it, so its requests are bound by HTTP
// either way; the cnn's convolutions are about as fast one image at a time;
// resnet18 costs about 4 ms alone and 1 ms an image in batches of 32 or
// more, so batching sets its throughput. A model's committed checkpoint is loaded with predict.Load, as
// `serve -checkpoint` does. Requests carry test images, one each, as JSON of
// FP32 numbers in [0, 255] (about 2.3 kB); before timing, every image is
// checked to get the class a direct Predict gives. OpenBLAS runs one thread
// (-blas-threads): the workers already run GOMAXPROCS predictions at once,
// and more threads oversubscribe the cores in the unbatched mode.
//
// It also prints what a direct Predict costs per image at batch sizes 1 to
// 128: what batching can save.
//
// The load generator runs in this process: one goroutine per client, each
// with its own keep-alive connection, sending its next request as soon as
// the last is answered, for -warmup then -duration. It writes prebuilt
// HTTP/1.1 requests and reads the answers' status and Content-Length, as
// wrk does (net/http's client costs about as much CPU per request as the
// server); the check of the answers' classes goes through net/http. It
// shares the machine's cores with the server, as any loopback measurement
// does. Each measurement starts a fresh server; the order of on and off
// alternates between rounds. The table gives each measurement's median over
// -rounds, and the ratio of batching on to off (the median of the
// per-round ratios). The load average is printed before and after: on a
// shared machine it says how much of the cores the measurements had.
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/tempotrain/tempotrain/bench/internal/hostinfo"
)

type flags struct {
	serve  bool
	batch  bool
	gbdt   bool
	python string
	// -batch
	batchModels []string
	batchImages int
	batchSize   int
	// -gbdt
	gbdtTables    []string
	gbdtTrainRows int
	gbdtRows      int
	gbdtRounds    int
	fashionTrain  int
	fashionRounds int
	// -serve
	binary     bool
	models     []string
	clients    []int
	rounds     int
	duration   time.Duration
	warmup     time.Duration
	trainLimit int
	images     int
	maxBatch   int
	maxWait    time.Duration
	workers    int
	blas       int
	cpuProfile string
	onlyMode   string
}

func main() {
	log.SetFlags(0)
	var f flags
	clients := flag.String("clients", "1,16,64", "concurrent clients, comma-separated")
	flag.BoolVar(&f.serve, "serve", false, "benchmark the HTTP server")
	flag.BoolVar(&f.binary, "binary", false, "-serve: send the pixels in the binary tensor data extension (Inference-Header-Content-Length) instead of JSON numbers")
	flag.BoolVar(&f.batch, "batch", false, "benchmark batch inference of the mlp and the cnn against PyTorch")
	flag.BoolVar(&f.gbdt, "gbdt", false, "benchmark gbdt prediction against XGBoost's inplace_predict")
	flag.StringVar(&f.python, "python", "/usr/bin/python3", "Python with torch 1.13 and xgboost 1.7 (Debian python3-torch, python3-xgboost)")
	batchModels := flag.String("batch-models", "mlp,cnn", "-batch: models, comma-separated")
	flag.IntVar(&f.batchImages, "images-batch", 10000, "-batch: test images each round predicts")
	flag.IntVar(&f.batchSize, "batch-size", 256, "-batch: rows per Predict and per PyTorch forward")
	gbdtTables := flag.String("gbdt-tables", "binary,fashion", "-gbdt: tables, comma-separated")
	flag.IntVar(&f.gbdtTrainRows, "gbdt-train-rows", 200_000, "-gbdt: training rows of the binary table")
	flag.IntVar(&f.gbdtRows, "gbdt-rows", 1_000_000, "-gbdt: rows of the binary table predicted")
	flag.IntVar(&f.gbdtRounds, "gbdt-rounds", 100, "-gbdt: boosting rounds of the binary model")
	flag.IntVar(&f.fashionTrain, "fashion-train", 20000, "-gbdt: Fashion-MNIST training images of the fashion model")
	flag.IntVar(&f.fashionRounds, "fashion-rounds", 10, "-gbdt: boosting rounds of the fashion model (10 trees each)")
	models := flag.String("models", "mlp,cnn,resnet18", "-serve: built-in models to train and serve, comma-separated (mlp, cnn, resnet18)")
	flag.IntVar(&f.rounds, "rounds", 5, "rounds; each measures every client count with batching on and off (-serve), each model or table on both sides (-batch, -gbdt)")
	flag.DurationVar(&f.duration, "duration", 3*time.Second, "measured time of one measurement")
	flag.DurationVar(&f.warmup, "warmup", 500*time.Millisecond, "unmeasured time before it")
	flag.IntVar(&f.trainLimit, "train-limit", 4096, "training images of the one epoch that makes the checkpoint")
	flag.IntVar(&f.images, "images", 512, "distinct test images the clients send, in turn")
	flag.IntVar(&f.maxBatch, "max-batch", 0, "Batcher MaxBatch with batching on (0: the default, 64)")
	flag.DurationVar(&f.maxWait, "max-wait", 0, "Batcher MaxWait with batching on (0: the default, 2ms)")
	flag.IntVar(&f.workers, "workers", 0, "Batcher Concurrency, both modes (0: the default, GOMAXPROCS)")
	flag.IntVar(&f.blas, "blas-threads", 1, "OpenBLAS threads (0: leave as is); 1 because the workers already run GOMAXPROCS predictions at once")
	flag.StringVar(&f.cpuProfile, "cpuprofile", "", "write a CPU profile of the measurements here")
	flag.StringVar(&f.onlyMode, "batching", "both", "-serve: measure batching on, off or both (one mode alone: a profile of it, no ratio)")
	flag.Parse()
	if flag.NArg() > 0 {
		log.Fatalf("unexpected arguments %q", flag.Args())
	}
	for _, c := range strings.Split(*clients, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(c))
		if err != nil || n < 1 {
			log.Fatalf("-clients %q: %q is not a positive number", *clients, c)
		}
		f.clients = append(f.clients, n)
	}
	if f.rounds < 1 || f.duration <= 0 || f.images < 1 || f.batchImages < 1 || f.batchSize < 1 || f.gbdtRows < 1 || f.gbdtTrainRows < 1 {
		log.Fatal("-rounds, -duration, -images, -images-batch, -batch-size, -gbdt-rows and -gbdt-train-rows must be positive")
	}
	if f.onlyMode != "both" && f.onlyMode != "on" && f.onlyMode != "off" {
		log.Fatalf("-batching %q: want on, off or both", f.onlyMode)
	}
	f.batchModels = splitList(*batchModels)
	f.models = splitList(*models)
	f.gbdtTables = splitList(*gbdtTables)
	fmt.Printf("processor: %s\n", hostinfo.ReadCPU())
	if f.cpuProfile != "" {
		pf, err := os.Create(f.cpuProfile)
		if err != nil {
			log.Fatal(err)
		}
		if err := pprof.StartCPUProfile(pf); err != nil {
			log.Fatal(err)
		}
		defer pprof.StopCPUProfile()
	}
	fmt.Printf("GOMAXPROCS %d, %s/%s, %s\n", runtime.GOMAXPROCS(0), runtime.GOOS, runtime.GOARCH, runtime.Version())
	// No mode flag runs every mode.
	all := !f.batch && !f.gbdt && !f.serve
	if f.batch || all {
		if err := benchBatch(f); err != nil {
			log.Fatal(err)
		}
	}
	if f.gbdt || all {
		if err := benchGBDT(f); err != nil {
			log.Fatal(err)
		}
	}
	if f.serve || all {
		if err := benchServe(f); err != nil {
			log.Fatal(err)
		}
	}
}

func splitList(s string) []string {
	var out []string
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}
