// Command train benchmarks tempotrain's data-parallel training against
// PyTorch DDP, side by side in one invocation (issue 4 item 9):
//
//	go run ./bench/train                      # MLP (15 repetitions) and CNN (5), 1 epoch each
//	go run ./bench/train -models cnn -reps 3
//
// For each model and repetition it runs one epoch of Fashion-MNIST (batch 128
// per rank, SGD momentum 0.9, lr 0.05) twice: tempotrain as two rank
// processes over the real collective on loopback, and PyTorch DDP (gloo) as
// two Python processes, each rank with one compute thread (OpenBLAS and
// OpenMP at 1 thread). The order of the two alternates between repetitions.
// It prints samples/s of each, their ratio within each repetition (median
// over repetitions) and the test accuracy after the epoch. Repetition i uses
// seed+i on both sides: one epoch's test accuracy varies by about a point
// from seed to seed, so the medians over seeds are what compare.
//
// The same binary is its own rank process (-rank), given its listener as
// file descriptor 3 so that all addresses are known before any rank starts.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tempotrain/tempotrain/bench/internal/hostinfo"
	"github.com/tempotrain/tempotrain/builtin"
	"github.com/tempotrain/tempotrain/collective"
	"github.com/tempotrain/tempotrain/train"
	"github.com/tempotrain/tempotrain/train/trainrt"
)

type flags struct {
	models     string
	reps       int
	mlpReps    int
	epochs     int
	world      int
	batch      int
	lr         float64
	momentum   float64
	trainLimit int
	testLimit  int
	python     string
	dataDir    string
	only       string
	cpuProfile string
	seed       uint64
	bucketKiB  int
	buckets    string

	// Rank process.
	rank  int
	model string
	peers string
}

func main() {
	var f flags
	flag.StringVar(&f.models, "models", "mlp,cnn", "models to run (mlp, cnn, resnet18)")
	flag.IntVar(&f.reps, "reps", 5, "repetitions of each measurement")
	flag.IntVar(&f.mlpReps, "mlp-reps", 0, "repetitions of the MLP's (0: 3×reps; its epoch lasts 2-4 s, so short that a burst of other load decides one)")
	flag.IntVar(&f.epochs, "epochs", 1, "epochs per run")
	flag.IntVar(&f.world, "world", 2, "ranks per run")
	flag.IntVar(&f.batch, "batch", 128, "batch size per rank")
	flag.Float64Var(&f.lr, "lr", 0.05, "learning rate")
	flag.Float64Var(&f.momentum, "momentum", 0.9, "SGD momentum")
	flag.IntVar(&f.trainLimit, "train-limit", 0, "use only the first N training items (0: all 60000)")
	flag.IntVar(&f.testLimit, "test-limit", 0, "use only the first N test items (0: all 10000)")
	flag.StringVar(&f.python, "python", "/usr/bin/python3", "Python with torch (Debian python3-torch)")
	flag.StringVar(&f.dataDir, "data", "/usr/share/datasets/fashion-mnist", "Fashion-MNIST directory")
	flag.StringVar(&f.only, "only", "", "run only one side: ours or torch")
	flag.StringVar(&f.cpuProfile, "cpuprofile", "", "write rank 0's CPU profile of our runs to this file")
	flag.IntVar(&f.bucketKiB, "bucket-kib", 0, "our gradient bucket size in KiB (0: builtin default, -1: one flat all-reduce)")
	flag.StringVar(&f.buckets, "buckets", "auto", "our bucketed all-reduce: auto, on or off (builtin.Config.Buckets)")
	flag.Uint64Var(&f.seed, "seed", 0, "seed of both sides' first repetition; repetition i uses seed+i")
	flag.IntVar(&f.rank, "rank", -1, "internal: run as this rank")
	flag.StringVar(&f.model, "model", "", "internal: model of the rank")
	flag.StringVar(&f.peers, "peers", "", "internal: comma-separated rank addresses")
	quiet := hostinfo.Flags(nil)
	flag.Parse()
	log.SetFlags(0)
	if f.rank >= 0 {
		if err := runRank(f); err != nil {
			log.Fatalf("rank %d: %v", f.rank, err)
		}
		return
	}
	host := hostinfo.Start(os.Stdout, quiet)
	if err := bench(f); err != nil {
		log.Fatal(err)
	}
	host.End()
}

// result is one run's rank-0 report after its last epoch.
type result struct {
	SamplesPerS  float64 `json:"samples_per_s"`
	TestAccuracy float64 `json:"test_accuracy"`
	TrainLoss    float64 `json:"train_loss"`
	EpochTime    float64 `json:"epoch_time_s"`
	CPU          float64 `json:"cpu_s"`
}

// perCPU is samples per CPU-second of the rank processes in the training
// loop: the work a sample costs, which other load on the machine disturbs
// far less than wall time.
func (r result) perCPU() float64 { return r.SamplesPerS * r.EpochTime / r.CPU }

func bench(f flags) error {
	models := strings.Split(f.models, ",")
	type row struct {
		ours, torch       []result
		ratios, cpuRatios []float64
	}
	rows := map[string]*row{}
	mlpReps := f.mlpReps
	if mlpReps == 0 {
		mlpReps = 3 * f.reps
	}
	for rep := 0; rep < max(f.reps, mlpReps); rep++ {
		for _, m := range models {
			if reps := map[bool]int{true: mlpReps, false: f.reps}[m == "mlp"]; rep >= reps {
				continue
			}
			r := rows[m]
			if r == nil {
				r = &row{}
				rows[m] = r
			}
			sides := []string{"ours", "torch"}
			if rep%2 == 1 {
				sides = []string{"torch", "ours"}
			}
			var o, t *result
			for _, side := range sides {
				if f.only != "" && f.only != side {
					continue
				}
				run := runOurs
				if side == "torch" {
					run = runTorch
				}
				fr := f
				fr.seed = f.seed + uint64(rep)
				res, err := run(fr, m, rep)
				if err != nil {
					return fmt.Errorf("%s %s rep %d: %w", side, m, rep, err)
				}
				log.Printf("rep %d %-8s %-5s %8.0f samples/s  %6.0f samples/CPU-s  test acc %.4f  train loss %.4f (seed %d)",
					rep, m, side, res.SamplesPerS, res.perCPU(), res.TestAccuracy, res.TrainLoss, fr.seed)
				if side == "ours" {
					o = res
					r.ours = append(r.ours, *res)
				} else {
					t = res
					r.torch = append(r.torch, *res)
				}
			}
			if o != nil && t != nil {
				r.ratios = append(r.ratios, o.SamplesPerS/t.SamplesPerS)
				r.cpuRatios = append(r.cpuRatios, o.perCPU()/t.perCPU())
			}
		}
	}
	fmt.Printf("\n%d ranks, batch %d/rank, SGD momentum %g lr %g, %d epoch(s), one compute thread per rank; medians over repetitions (seed = repetition)\n",
		f.world, f.batch, f.momentum, f.lr, f.epochs)
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "model\tours samples/s\tpytorch samples/s\tratio\tratios\tper-CPU-s ratio\tours test acc\tpytorch test acc\t")
	for _, m := range models {
		r := rows[m]
		sp := func(rs []result) string {
			if len(rs) == 0 {
				return "-"
			}
			return fmt.Sprintf("%.0f", median(pick(rs, func(x result) float64 { return x.SamplesPerS })))
		}
		acc := func(rs []result) string {
			if len(rs) == 0 {
				return "-"
			}
			return fmt.Sprintf("%.4f", median(pick(rs, func(x result) float64 { return x.TestAccuracy })))
		}
		ratio, all, cpuRatio := "-", "", "-"
		if len(r.ratios) > 0 {
			ratio = fmt.Sprintf("%.2f×", median(r.ratios))
			cpuRatio = fmt.Sprintf("%.2f×", median(r.cpuRatios))
			var s []string
			for _, x := range r.ratios {
				s = append(s, fmt.Sprintf("%.2f", x))
			}
			all = strings.Join(s, " ")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", m, sp(r.ours), sp(r.torch), ratio, all, cpuRatio, acc(r.ours), acc(r.torch))
	}
	return tw.Flush()
}

func pick(rs []result, f func(result) float64) []float64 {
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = f(r)
	}
	return v
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// oneThread is the environment of every rank process of both sides.
func oneThread() []string {
	return append(os.Environ(), "OMP_NUM_THREADS=1", "OPENBLAS_NUM_THREADS=1", "MKL_NUM_THREADS=1")
}

func runOurs(f flags, model string, rep int) (*result, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	lns := make([]*net.TCPListener, f.world)
	peers := make([]string, f.world)
	for r := range lns {
		ln, err := collective.Listen("127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns[r] = ln.(*net.TCPListener)
		peers[r] = ln.Addr().String()
	}
	cmds := make([]*exec.Cmd, f.world)
	outs := make([]*bytes.Buffer, f.world)
	for r := range cmds {
		lf, err := lns[r].File()
		if err != nil {
			return nil, err
		}
		args := []string{"-rank", strconv.Itoa(r), "-world", strconv.Itoa(f.world), "-model", model,
			"-peers", strings.Join(peers, ","), "-epochs", strconv.Itoa(f.epochs), "-batch", strconv.Itoa(f.batch),
			"-lr", fmt.Sprint(f.lr), "-momentum", fmt.Sprint(f.momentum), "-train-limit", strconv.Itoa(f.trainLimit),
			"-test-limit", strconv.Itoa(f.testLimit), "-data", f.dataDir, "-seed", fmt.Sprint(f.seed),
			"-bucket-kib", strconv.Itoa(f.bucketKiB), "-buckets", f.buckets}
		if r == 0 && f.cpuProfile != "" {
			args = append(args, "-cpuprofile", fmt.Sprintf("%s.%s.%d", f.cpuProfile, model, rep))
		}
		cmds[r] = exec.Command(self, args...)
		cmds[r].Env = oneThread()
		cmds[r].ExtraFiles = []*os.File{lf}
		outs[r] = &bytes.Buffer{}
		cmds[r].Stdout = outs[r]
		cmds[r].Stderr = os.Stderr
		if err := cmds[r].Start(); err != nil {
			return nil, err
		}
		lf.Close()
		lns[r].Close()
	}
	return wait(cmds, outs)
}

// wait waits for every rank and parses rank 0's last JSON line.
func wait(cmds []*exec.Cmd, outs []*bytes.Buffer) (*result, error) {
	var errs []error
	for r, c := range cmds {
		if err := c.Wait(); err != nil {
			errs = append(errs, fmt.Errorf("rank %d: %w", r, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	var last string
	sc := bufio.NewScanner(outs[0])
	for sc.Scan() {
		if l := sc.Text(); strings.HasPrefix(l, "{") {
			if last != "" {
				log.Printf("  earlier epoch: %s", last)
			}
			last = l
		}
	}
	if last == "" {
		return nil, fmt.Errorf("rank 0 reported nothing: %q", outs[0].String())
	}
	var res result
	if err := json.Unmarshal([]byte(last), &res); err != nil {
		return nil, fmt.Errorf("rank 0 report %q: %w", last, err)
	}
	return &res, nil
}

func runTorch(f flags, model string, _ int) (*result, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	script, err := peerScript()
	if err != nil {
		return nil, err
	}
	cmds := make([]*exec.Cmd, f.world)
	outs := make([]*bytes.Buffer, f.world)
	for r := range cmds {
		cmds[r] = exec.Command(f.python, script, "--model", model, "--rank", strconv.Itoa(r), "--world", strconv.Itoa(f.world),
			"--port", strconv.Itoa(port), "--data", f.dataDir, "--epochs", strconv.Itoa(f.epochs), "--batch", strconv.Itoa(f.batch),
			"--lr", fmt.Sprint(f.lr), "--momentum", fmt.Sprint(f.momentum), "--seed", fmt.Sprint(f.seed),
			"--train-limit", strconv.Itoa(f.trainLimit), "--test-limit", strconv.Itoa(f.testLimit))
		cmds[r].Env = oneThread()
		outs[r] = &bytes.Buffer{}
		cmds[r].Stdout = outs[r]
		cmds[r].Stderr = os.Stderr
		if err := cmds[r].Start(); err != nil {
			return nil, err
		}
	}
	return wait(cmds, outs)
}

// peerScript finds ddp.py next to this source file (go run) or the binary.
func peerScript() (string, error) {
	_, file, _, _ := runtime.Caller(0)
	cands := []string{filepath.Join(filepath.Dir(file), "ddp.py"), "bench/train/ddp.py"}
	if exe, err := os.Executable(); err == nil {
		cands = append(cands, filepath.Join(filepath.Dir(exe), "ddp.py"))
	}
	for _, c := range cands {
		if _, err := os.Stat(c); err == nil {
			return c, nil
		}
	}
	return "", fmt.Errorf("ddp.py not found in %v", cands)
}

// printer is the rank processes' trainrt.Reporter: rank 0 prints each report
// as a JSON line.
type printer struct{ w io.Writer }

func (p printer) Report(_ context.Context, m train.Metrics, _ *train.Checkpoint) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(p.w, "%s\n", b)
	return err
}

func runRank(f flags) error {
	if f.cpuProfile != "" {
		pf, err := os.Create(f.cpuProfile)
		if err != nil {
			return err
		}
		defer pf.Close()
		if err := pprof.StartCPUProfile(pf); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	ln, err := net.FileListener(os.NewFile(3, "listener"))
	if err != nil {
		return fmt.Errorf("listener from fd 3: %w", err)
	}
	ctx := context.Background()
	peers := strings.Split(f.peers, ",")
	comm, err := collective.Connect(ctx, ln, peers, collective.Options{Rank: f.rank, Size: f.world, Token: "bench-train", Timeout: 5 * time.Minute})
	if err != nil {
		return err
	}
	defer comm.Close()
	cfg, err := json.Marshal(builtin.Config{Epochs: f.epochs, BatchSize: f.batch, LR: f.lr, Momentum: &f.momentum,
		Seed: f.seed, DataDir: f.dataDir, TrainLimit: f.trainLimit, TestLimit: f.testLimit, Threads: 1, BucketKiB: f.bucketKiB, Buckets: f.buckets})
	if err != nil {
		return err
	}
	scratch, err := os.MkdirTemp("", "bench-train-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(scratch)
	info := trainrt.ContextInfo{RunName: "bench", Attempt: 1, WorldRank: f.rank, WorldSize: f.world, LocalRank: f.rank,
		LocalWorldSize: f.world, Config: cfg, ScratchDir: scratch, Device: -1}
	var rep trainrt.Reporter = printer{io.Discard}
	if f.rank == 0 {
		rep = printer{os.Stdout}
	}
	tc := trainrt.NewContext(ctx, info, comm, rep, nil)
	return builtin.Func(f.model)(ctx, tc)
}
