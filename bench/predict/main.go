// Command predict benchmarks package predict.
//
//	go run ./bench/predict -serve                        # 1, 16, 64 clients, batching on and off, 5 rounds
//	go run ./bench/predict -serve -rounds 3 -duration 2s  # a quicker look
//
// -serve measures the Open Inference Protocol server (predict.Server) over
// loopback HTTP: requests/s and p50/p99 latency of single-image
// POST /v2/models/mnist-mlp/infer requests at 1, 16 and 64 concurrent
// clients, with dynamic batching on (the Server's defaults: MaxBatch 64,
// MaxWait 2ms, GOMAXPROCS batches in flight) and off (every request its own
// Predict, through the same queue and the same number of workers).
//
// The model is the built-in mlp (-model cnn: the cnn) trained here first,
// for one epoch on the first -train-limit Fashion-MNIST training images (a
// few seconds); its committed checkpoint is loaded with predict.Load, as
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
)

type flags struct {
	serve      bool
	model      string
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
}

func main() {
	log.SetFlags(0)
	var f flags
	clients := flag.String("clients", "1,16,64", "concurrent clients, comma-separated")
	flag.BoolVar(&f.serve, "serve", false, "benchmark the HTTP server (the only mode so far; also what no mode flag runs)")
	flag.StringVar(&f.model, "model", "mlp", "built-in model to train and serve: mlp or cnn")
	flag.IntVar(&f.rounds, "rounds", 5, "rounds; each measures every client count with batching on and off")
	flag.DurationVar(&f.duration, "duration", 3*time.Second, "measured time of one measurement")
	flag.DurationVar(&f.warmup, "warmup", 500*time.Millisecond, "unmeasured time before it")
	flag.IntVar(&f.trainLimit, "train-limit", 4096, "training images of the one epoch that makes the checkpoint")
	flag.IntVar(&f.images, "images", 512, "distinct test images the clients send, in turn")
	flag.IntVar(&f.maxBatch, "max-batch", 0, "Batcher MaxBatch with batching on (0: the default, 64)")
	flag.DurationVar(&f.maxWait, "max-wait", 0, "Batcher MaxWait with batching on (0: the default, 2ms)")
	flag.IntVar(&f.workers, "workers", 0, "Batcher Concurrency, both modes (0: the default, GOMAXPROCS)")
	flag.IntVar(&f.blas, "blas-threads", 1, "OpenBLAS threads (0: leave as is); 1 because the workers already run GOMAXPROCS predictions at once")
	flag.StringVar(&f.cpuProfile, "cpuprofile", "", "write a CPU profile of the measurements here")
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
	if f.rounds < 1 || f.duration <= 0 || f.images < 1 {
		log.Fatal("-rounds, -duration and -images must be positive")
	}
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
	// -serve is the only mode; no mode flag runs every mode.
	if err := benchServe(f); err != nil {
		log.Fatal(err)
	}
}
