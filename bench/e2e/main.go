// Command e2e benchmarks a user's whole job from their files against the
// Python peer doing the same work, both from process start to the final
// model on disk, in the same run (issue 32):
//
//	go run ./bench/e2e                        # gbdt: 1M × 28 train CSV, 100k valid, 100 rounds, 2 repetitions
//	go run ./bench/e2e -rows 100000 -rounds 20 -reps 1   # a quick look
//	go run ./bench/e2e -job mlp               # tabular-mlp: 200k × 28 train CSV, 50k valid, 5 epochs, 3 repetitions
//	go run ./bench/e2e -job mlp -mlp-rows 1000000 -epochs 10   # bigger
//
// gbdt: a generated binary table (bench/internal/benchdata's Binary: the
// table of bench/gbdt) written as CSV with a "label" column, train and
// valid files. Ours runs in a child process (this program, -child ours):
// an in-process Temporal dev server and worker (app.StartLocal, as `starter
// dev` does), then Fit of the gbdt function with 2 ranks, the train and
// valid datasets, max_depth 6, eta 0.3, max_bin 256 and AUC on train and
// valid every round, checkpointing as the function does (every 10 rounds
// and the last) into a local storage path. The peer (xgb_e2e.py, Debian's
// python3-xgboost 1.7 with pandas) reads both files with pandas.read_csv,
// builds DMatrix objects and runs xgb.train with evals=[(train, "train"),
// (valid, "valid")], nthread=2, then saves the model. Each side is timed by
// this process from exec to exit (wall) with the child's user+system time
// (processor seconds); the sides alternate order every repetition
// (bench/internal/hostinfo), which also prints the processor, its kernel
// path and the load average before and after.
//
// tabular-mlp (-job mlp, mlp.go): the same generated table, ours Fit of
// tabular-mlp (its default preprocessors: mean imputation and standard
// scaling, fitted over the ranks; batch_semantics global so that a step
// takes -batch rows on any world size; a checkpoint every epoch; train
// and valid loss and accuracy every epoch), the peer mlp_e2e.py (PyTorch
// 1.13 with pandas: read_csv, the same imputation and standardisation,
// network, optimizer, batch, epochs and metrics, torch.save of the model).
package main

import (
	"bufio"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/tempotrain/tempotrain/activities"
	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/app"
	"github.com/tempotrain/tempotrain/bench/internal/benchdata"
	"github.com/tempotrain/tempotrain/bench/internal/hostinfo"
	"github.com/tempotrain/tempotrain/builtin"
	"github.com/tempotrain/tempotrain/train"
)

//go:embed xgb_e2e.py
var xgbScript string

//go:embed mlp_e2e.py
var mlpScript string

type flags struct {
	job             string
	rows, validRows int
	rounds, reps    int
	world           int
	mlp             mlpFlags
	fn              string
	seed            uint64
	python          string
	dataDir         string
	skipPeer        bool
	child           string
	train, valid    string
	out             string
	config          string
	cpuProfile      string
}

// childResult is what `-child ours` prints.
type childResult struct {
	ServerSeconds float64 `json:"server_seconds"` // StartLocal
	FitSeconds    float64 `json:"fit_seconds"`    // Fit start to its result
	FirstReport   float64 `json:"first_report"`   // Fit start to the first round's report (reading, sketch, round 1)
	PerRound      float64 `json:"per_round"`      // seconds between the first and the last report, per round
	TrainAUC      float64 `json:"train_auc"`
	ValidAUC      float64 `json:"valid_auc"`
	Model         string  `json:"model"`
	// Metrics are the run's last report (tabular-mlp: train_loss,
	// train_accuracy, valid_loss, valid_accuracy, ...).
	Metrics map[string]float64 `json:"metrics"`
	// Timings is rank 0's log line of where its rounds went (trees,
	// evaluation, checkpoint writes, reports).
	Timings string `json:"timings"`
}

// peerResult is what xgb_e2e.py prints.
type peerResult struct {
	InScript float64 `json:"seconds_in_script"`
	Read     float64 `json:"read_seconds"`
	Train    float64 `json:"train_seconds"`
	TrainAUC float64 `json:"train_auc"`
	ValidAUC float64 `json:"valid_auc"`
	Version  string  `json:"version"`
}

func main() {
	var f flags
	flag.StringVar(&f.job, "job", "gbdt", `the job: "gbdt" (against pandas + XGBoost), "mlp" (tabular-mlp against pandas + PyTorch) or "all"`)
	flag.IntVar(&f.rows, "rows", 1_000_000, "gbdt: training rows")
	flag.IntVar(&f.validRows, "valid-rows", 100_000, "gbdt: validation rows")
	flag.IntVar(&f.rounds, "rounds", 100, "gbdt: boosting rounds")
	flag.IntVar(&f.reps, "reps", 0, "repetitions of each side, medians reported (default: gbdt 2, mlp 3)")
	mlpFlagSet(&f.mlp)
	flag.StringVar(&f.fn, "func", builtin.GBDT, "internal: the training function of -child")
	flag.IntVar(&f.world, "world", 2, "ranks of our run")
	flag.Uint64Var(&f.seed, "seed", 1, "seed of the generated table")
	flag.StringVar(&f.python, "python", "/usr/bin/python3", "Python with xgboost 1.7 and pandas")
	flag.StringVar(&f.dataDir, "data", "", "directory for the CSV files (default: a temporary one, removed after)")
	flag.BoolVar(&f.skipPeer, "skip-peer", false, "do not run the Python peer")
	flag.StringVar(&f.child, "child", "", "internal: run one side in this process (ours)")
	flag.StringVar(&f.train, "train", "", "internal: the train CSV of -child")
	flag.StringVar(&f.valid, "valid", "", "internal: the valid CSV of -child")
	flag.StringVar(&f.out, "out", "", "internal: the storage directory of -child")
	flag.StringVar(&f.config, "config", "", "internal: the gbdt config of -child (JSON)")
	flag.StringVar(&f.cpuProfile, "cpuprofile", "", "write a CPU profile of our side's first repetition (its whole process) to this file")
	quiet := hostinfo.Flags(nil)
	flag.Parse()
	log.SetFlags(0)
	if f.child != "" {
		res, err := runChild(&f)
		if err != nil {
			log.Fatalf("child %s: %v", f.child, err)
		}
		b, _ := json.Marshal(res)
		fmt.Println(string(b))
		return
	}
	switch f.job {
	case "gbdt", "mlp", "all":
	default:
		log.Fatalf(`-job %q: want "gbdt", "mlp" or "all"`, f.job)
	}
	if f.job != "mlp" {
		if err := run(&f, quiet); err != nil {
			log.Fatal(err)
		}
	}
	if f.job != "gbdt" {
		if err := runMLP(&f, quiet); err != nil {
			log.Fatal(err)
		}
	}
}

// reps is -reps, or def when unset.
func (f *flags) repsOr(def int) int {
	if f.reps > 0 {
		return f.reps
	}
	return def
}

// params are the parameters both sides train with.
func params(f *flags) map[string]any {
	return map[string]any{"objective": "binary:logistic", "max_depth": 6, "eta": 0.3, "max_bin": 256, "eval_metric": "auc"}
}

func run(f *flags, quiet *hostinfo.Options) error {
	dir, trainCSV, validCSV, cleanup, err := tables(f, f.rows, f.validRows)
	if err != nil {
		return err
	}
	defer cleanup()

	host := hostinfo.Start(os.Stdout, quiet)
	reps := f.repsOr(2)
	fmt.Printf("gbdt from CSV: train %d × %d, valid %d, %d rounds, depth 6, eta 0.3, 256 bins, AUC on train and valid every round; ours %d ranks, XGBoost nthread=2; %d repetitions in rotating order, medians\n",
		f.rows, benchdata.BinaryCols, f.validRows, f.rounds, f.world, reps)
	cfg := params(f)
	cfg["num_boost_round"] = f.rounds
	cj, _ := json.Marshal(cfg)
	var ours []childResult
	var peers []peerResult
	sides := []hostinfo.Side{{Name: "ours", Run: func(rep int) (hostinfo.Sample, error) {
		s, res, err := runOurs(f, rep, builtin.GBDT, dir, trainCSV, validCSV, cj)
		if err != nil {
			return s, err
		}
		ours = append(ours, res)
		log.Printf("rep %d: ours %.2fs (cpu %.2fs): server %.2fs, Fit %.2fs (first report %.2fs, then %.3fs a round), train AUC %.5f valid AUC %.5f",
			rep, s.Wall, s.CPU, res.ServerSeconds, res.FitSeconds, res.FirstReport, res.PerRound, res.TrainAUC, res.ValidAUC)
		log.Printf("rep %d: ours, rank 0: %s", rep, res.Timings)
		return s, nil
	}}, {Name: "pandas + XGBoost", Run: func(rep int) (hostinfo.Sample, error) {
		script := filepath.Join(dir, "xgb_e2e.py")
		if err := os.WriteFile(script, []byte(xgbScript), 0o644); err != nil {
			return hostinfo.Sample{}, err
		}
		p := params(f)
		p["tree_method"], p["nthread"] = "hist", 2
		pj, _ := json.Marshal(p)
		model := filepath.Join(dir, "xgb-model.json")
		defer os.Remove(model)
		var res peerResult
		s, err := timed(exec.Command(f.python, script, trainCSV, validCSV, "label", string(pj), strconv.Itoa(f.rounds), model), &res)
		if err != nil {
			return s, err
		}
		peers = append(peers, res)
		log.Printf("rep %d: xgboost %.2fs (cpu %.2fs): read+DMatrix %.2fs, train+evals+save %.2fs, train AUC %.5f valid AUC %.5f",
			rep, s.Wall, s.CPU, res.Read, res.Train, res.TrainAUC, res.ValidAUC)
		return s, nil
	}}}
	samples, err := alternate(f, reps, sides)
	if err != nil {
		return err
	}
	fmt.Printf("%s; train AUC %.5f, valid AUC %.5f\n", oursLine(samples[0], ours, "first report", "a round"), ours[0].TrainAUC, ours[0].ValidAUC)
	if !f.skipPeer {
		p := hostinfo.Medians(samples[1])
		fmt.Printf("pandas + XGBoost: wall %.2f s, CPU %.2f s; read + DMatrix %.2f s, train + evals + save %.2f s; train AUC %.5f, valid AUC %.5f (xgboost %s)\n",
			p.Wall, p.CPU, med(peers, func(r peerResult) float64 { return r.Read }), med(peers, func(r peerResult) float64 { return r.Train }),
			peers[0].TrainAUC, peers[0].ValidAUC, peers[0].Version)
		fmt.Printf("ours / peer:      %s; valid AUC difference %+.5f\n", hostinfo.Ratio(samples[0], samples[1]), ours[0].ValidAUC-peers[0].ValidAUC)
	}
	host.End()
	return nil
}

// alternate runs the sides (ours, then the peer's, left out under
// -skip-peer) reps times each in rotating order.
func alternate(f *flags, reps int, sides []hostinfo.Side) ([][]hostinfo.Sample, error) {
	if f.skipPeer {
		sides = sides[:1]
	}
	samples, err := hostinfo.Alternate(reps, sides...)
	if err == nil {
		fmt.Println()
	}
	return samples, err
}

// oursLine starts our side's summary: the medians of its wall and CPU
// time, the server's start, Fit, Fit's first report (named first) and the
// time between reports (per: "a round").
func oursLine(samples []hostinfo.Sample, ours []childResult, first, per string) string {
	o := hostinfo.Medians(samples)
	return fmt.Sprintf("ours:             wall %.2f s, CPU %.2f s; server start %.2f s, Fit %.2f s (%s %.2f s, then %.3f s %s)",
		o.Wall, o.CPU, med(ours, func(r childResult) float64 { return r.ServerSeconds }), med(ours, func(r childResult) float64 { return r.FitSeconds }),
		first, med(ours, func(r childResult) float64 { return r.FirstReport }), med(ours, func(r childResult) float64 { return r.PerRound }), per)
}

func med[T any](v []T, f func(T) float64) float64 {
	x := make([]float64, len(v))
	for i, e := range v {
		x[i] = f(e)
	}
	return hostinfo.Median(x)
}

// timed runs cmd, decodes the last line of its standard output into res and
// returns its wall time (exec to exit) and processor seconds.
func timed(cmd *exec.Cmd, res any) (hostinfo.Sample, error) {
	var stderr strings.Builder
	cmd.Stderr = &stderr
	start := time.Now()
	out, err := cmd.Output()
	wall := time.Since(start).Seconds()
	if err != nil {
		return hostinfo.Sample{}, fmt.Errorf("%s: %v: %s", filepath.Base(cmd.Path), err, tail(stderr.String()))
	}
	ps := cmd.ProcessState
	s := hostinfo.Sample{Wall: wall, CPU: (ps.UserTime() + ps.SystemTime()).Seconds()}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), res); err != nil {
		return s, fmt.Errorf("%s printed %q: %v", filepath.Base(cmd.Path), tail(string(out)), err)
	}
	return s, nil
}

func tail(s string) string {
	if len(s) > 2000 {
		return "..." + s[len(s)-2000:]
	}
	return s
}

// tables makes a job's data directory (-data, or a temporary one that
// cleanup removes) and writes its train and valid CSV files there (kept if
// there already).
func tables(f *flags, rows, validRows int) (dir, trainCSV, validCSV string, cleanup func(), err error) {
	dir, cleanup = f.dataDir, func() {}
	if dir == "" {
		if dir, err = os.MkdirTemp("", "bench-e2e-"); err != nil {
			return "", "", "", nil, err
		}
		cleanup = func() { os.RemoveAll(dir) }
	}
	trainCSV = filepath.Join(dir, fmt.Sprintf("train-%d-%d.csv", rows, f.seed))
	validCSV = filepath.Join(dir, fmt.Sprintf("valid-%d-%d.csv", validRows, f.seed))
	t0 := time.Now()
	err = writeCSV(trainCSV, rows, f.seed)
	if err == nil {
		err = writeCSV(validCSV, validRows, f.seed+1000)
	}
	var st os.FileInfo
	if err == nil {
		st, err = os.Stat(trainCSV)
	}
	if err != nil {
		cleanup()
		return "", "", "", nil, err
	}
	log.Printf("CSV files ready in %.1fs (train %.0f MB)", time.Since(t0).Seconds(), float64(st.Size())/1e6)
	return dir, trainCSV, validCSV, cleanup, nil
}

// runOurs runs our side once: this program as -child ours, Fit of fn on
// the job's files with config, its storage a fresh directory under dir;
// the first repetition profiled under -cpuprofile.
func runOurs(f *flags, rep int, fn, dir, trainCSV, validCSV string, config []byte) (hostinfo.Sample, childResult, error) {
	var res childResult
	self, err := os.Executable()
	if err != nil {
		return hostinfo.Sample{}, res, err
	}
	out, err := os.MkdirTemp(dir, "runs-")
	if err != nil {
		return hostinfo.Sample{}, res, err
	}
	defer os.RemoveAll(out)
	args := []string{"-child", "ours", "-func", fn, "-train", trainCSV, "-valid", validCSV, "-out", out,
		"-config", string(config), "-world", strconv.Itoa(f.world)}
	if f.cpuProfile != "" && rep == 0 {
		args = append(args, "-cpuprofile", f.cpuProfile)
	}
	s, err := timed(exec.Command(self, args...), &res)
	return s, res, err
}

// writeCSV writes rows of benchdata.Binary as CSV: f0..f27 and label, missing
// values as empty fields (NaN to pandas and to our reader). An existing file
// is kept.
func writeCSV(path string, rows int, seed uint64) error {
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	x, y := benchdata.Binary(rows, seed)
	tmp := path + ".tmp"
	fh, err := os.Create(tmp)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(fh, 1<<20)
	cols := benchdata.BinaryCols
	var b []byte
	for c := range cols {
		b = append(b, 'f')
		b = strconv.AppendInt(b, int64(c), 10)
		b = append(b, ',')
	}
	b = append(b, "label\n"...)
	for i := range rows {
		for _, v := range x[i*cols : (i+1)*cols] {
			if !math.IsNaN(float64(v)) {
				b = strconv.AppendFloat(b, float64(v), 'g', -1, 32)
			}
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(y[i]), 10)
		b = append(b, '\n')
		if len(b) > 1<<16 {
			if _, err := w.Write(b); err != nil {
				fh.Close()
				return err
			}
			b = b[:0]
		}
	}
	if _, err := w.Write(b); err != nil {
		fh.Close()
		return err
	}
	if err := w.Flush(); err != nil {
		fh.Close()
		return err
	}
	if err := fh.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// runChild is our side: a dev server and worker in this process, one Fit;
// main prints its result as a JSON line.
func runChild(f *flags) (*childResult, error) {
	if f.child != "ours" {
		return nil, fmt.Errorf("unknown -child %q (ours)", f.child)
	}
	if f.cpuProfile != "" {
		fh, err := os.Create(f.cpuProfile)
		if err != nil {
			return nil, err
		}
		if err := pprof.StartCPUProfile(fh); err != nil {
			return nil, err
		}
		defer func() {
			pprof.StopCPUProfile()
			fh.Close()
		}()
	}
	quietLog := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	slog.SetDefault(quietLog)
	builtin.Register()
	t0 := time.Now()
	local, err := app.StartLocal(app.LocalOptions{
		Worker: &app.WorkerOptions{Workflows: true, RankSlots: f.world, Activities: activities.Options{CPUs: runtime.NumCPU()}},
		Logger: quietLog,
	})
	if err != nil {
		return nil, err
	}
	defer local.Stop()
	res := childResult{ServerSeconds: time.Since(t0).Seconds()}
	spec := func(uri string) train.DatasetSpec { return train.DatasetSpec{URI: uri, Label: "label"} }
	name := "e2e-" + f.fn
	tr := train.NewTrainer(local.Client, f.fn, json.RawMessage(f.config), train.ScalingConfig{NumWorkers: f.world},
		train.RunConfig{Name: name, StoragePath: f.out},
		train.WithDatasets(map[string]train.DatasetSpec{"train": spec(f.train), "valid": spec(f.valid)}))
	t1 := time.Now()
	r, err := tr.Fit(context.Background())
	if err != nil {
		return nil, err
	}
	res.FitSeconds = time.Since(t1).Seconds()
	if r.Checkpoint == nil {
		return nil, errors.New("the run committed no checkpoint")
	}
	res.TrainAUC, res.ValidAUC = r.Metrics["train_auc"], r.Metrics["valid_auc"]
	res.Metrics = r.Metrics
	res.Model = r.Checkpoint.URI
	if res.FirstReport, res.PerRound, err = reportTimes(filepath.Join(f.out, name, "metrics.jsonl"), t1); err != nil {
		return nil, err
	}
	logs, _ := filepath.Glob(filepath.Join(f.out, name, "logs", "attempt-*", "rank-0.log"))
	for _, l := range logs {
		b, _ := os.ReadFile(l)
		for _, line := range strings.Split(string(b), "\n") {
			if i := strings.Index(line, "gbdt: rounds done"); i >= 0 {
				res.Timings = line[i:]
			}
		}
	}
	return &res, nil
}

// reportTimes reads the run's reports: the time from start to the first,
// and the mean time between the first and the last.
func reportTimes(path string, start time.Time) (first, perRound float64, err error) {
	fh, err := os.Open(path)
	if err != nil {
		return 0, 0, err
	}
	defer fh.Close()
	var times []time.Time
	dec := json.NewDecoder(fh)
	for {
		var rec api.ReportRecord
		if err := dec.Decode(&rec); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return 0, 0, fmt.Errorf("%s: %w", path, err)
		}
		times = append(times, rec.Time)
	}
	if len(times) < 2 {
		return 0, 0, fmt.Errorf("%s: %d reports", path, len(times))
	}
	first = times[0].Sub(start).Seconds()
	perRound = times[len(times)-1].Sub(times[0]).Seconds() / float64(len(times)-1)
	return first, perRound, nil
}
