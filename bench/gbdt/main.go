// Command gbdt benchmarks package gbdt against XGBoost 1.7.4 in the same
// run, with the same parameters (max_depth 6, eta 0.3, max_bin 256, the
// same rounds):
//
//	go run ./bench/gbdt                          # both tables, 3 repetitions
//	go run ./bench/gbdt -rounds 10 -rows 100000  # a quick look
//
// XGBoost runs with tree_method=hist and nthread=2 in a /usr/bin/python3
// subprocess (bench/gbdt/xgb_peer.py, Debian's python3-xgboost), timing
// xgb.train alone. Ours runs 2 ranks of one thread each in this process,
// connected by package collective over loopback (shared memory between the
// ranks, as on one host in production), timing NewTrainer (sketch and
// binning) through the last round; and 1 rank alone. Data loading is
// outside both timings. The tables:
//
//   - fashion: Fashion-MNIST as a table (60,000 × 784 pixel values 0..255,
//     10 classes, multi:softprob); test accuracy on its 10,000 test images.
//   - binary: a generated table of -rows rows × 28 features (fixed seed;
//     normal, uniform and heavy-tailed features, 5% missing values in a few,
//     a logistic label of a nonlinear function), binary:logistic; test AUC
//     and accuracy on -test-rows more rows.
//
// It prints the processor, the kernel path and the load average before and
// after (bench/internal/hostinfo; -wait-quiet waits for a quiet machine),
// each measurement's median over -reps repetitions (the order of the sides
// rotates each repetition), ours/XGBoost ratios of wall and processor time,
// 1-rank/2-rank times, and the processor seconds each training used (all its
// threads; XGBoost's from getrusage around xgb.train). On a machine shared with other work the
// processor seconds are the steadier measure: ranks (and XGBoost's threads)
// meet at every tree level, so one descheduled rank stalls the other.
package main

import (
	"context"
	_ "embed"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/tempotrain/tempotrain/bench/internal/benchdata"
	"github.com/tempotrain/tempotrain/bench/internal/hostinfo"
	"github.com/tempotrain/tempotrain/collective"
	"github.com/tempotrain/tempotrain/data/format"
	"github.com/tempotrain/tempotrain/gbdt"
)

//go:embed xgb_peer.py
var peerScript string

type flags struct {
	datasets   string
	rounds     int
	rows       int
	testRows   int
	fashionN   int
	reps       int
	world      int
	python     string
	dataDir    string
	cpuProfile string
	seed       uint64
	skipXGB    bool
	skipSolo   bool
}

type table struct {
	name     string
	params   map[string]any
	rounds   int
	train    *gbdt.Dataset
	testX    []float32
	testY    []float32
	testRows int
	classes  int
}

type result struct {
	seconds float64
	cpu     float64 // processor seconds of the training (all threads)
	acc     float64
	auc     float64
}

func main() {
	var f flags
	flag.StringVar(&f.datasets, "datasets", "fashion,binary", "tables to run: fashion, binary")
	flag.IntVar(&f.rounds, "rounds", 0, "boosting rounds (0: 10 for fashion, 100 for binary)")
	flag.IntVar(&f.rows, "rows", 1_000_000, "training rows of the generated binary table")
	flag.IntVar(&f.testRows, "test-rows", 200_000, "test rows of the generated binary table")
	flag.IntVar(&f.fashionN, "fashion-rows", 0, "training rows of Fashion-MNIST (0: all 60,000)")
	flag.IntVar(&f.reps, "reps", 3, "repetitions of each measurement (medians reported)")
	flag.IntVar(&f.world, "world", 2, "ranks of our distributed run")
	flag.StringVar(&f.python, "python", "/usr/bin/python3", "Python with xgboost 1.7 (Debian python3-xgboost)")
	flag.StringVar(&f.dataDir, "data", format.DefaultFashionMNISTDir, "Fashion-MNIST directory")
	flag.StringVar(&f.cpuProfile, "cpuprofile", "", "write a CPU profile of our distributed runs to this file")
	flag.Uint64Var(&f.seed, "seed", 1, "seed of the generated table")
	flag.BoolVar(&f.skipXGB, "skip-xgboost", false, "do not run XGBoost")
	flag.BoolVar(&f.skipSolo, "skip-1rank", false, "do not run our 1-rank training")
	quiet := hostinfo.Flags(nil)
	flag.Parse()
	log.SetFlags(0)

	var prof *os.File
	if f.cpuProfile != "" {
		var err error
		if prof, err = os.Create(f.cpuProfile); err != nil {
			log.Fatal(err)
		}
	}
	var tables []*table
	for _, name := range strings.Split(f.datasets, ",") {
		t, err := load(strings.TrimSpace(name), &f)
		if err != nil {
			log.Fatal(err)
		}
		tables = append(tables, t)
	}
	host := hostinfo.Start(os.Stdout, quiet)
	fmt.Printf("GOMAXPROCS %d; ours: %d ranks × 1 thread over loopback; XGBoost: tree_method=hist, nthread=2; %d repetitions in rotating order, medians\n",
		runtime.GOMAXPROCS(0), f.world, f.reps)
	type row struct {
		t               *table
		xgb, dist, solo []result
		xgbVersion      string
	}
	var rows []*row
	for _, t := range tables {
		dir, err := os.MkdirTemp("", "gbdt-bench-")
		if err != nil {
			log.Fatal(err)
		}
		defer os.RemoveAll(dir)
		if !f.skipXGB {
			if err := writeTable(dir, t); err != nil {
				log.Fatal(err)
			}
		}
		r := &row{t: t}
		sides := []hostinfo.Side{{Name: "xgboost", Run: func(rep int) (hostinfo.Sample, error) {
			res, ver, err := xgboost(&f, dir, t)
			if err != nil {
				return hostinfo.Sample{}, err
			}
			r.xgb, r.xgbVersion = append(r.xgb, res), ver
			log.Printf("%s rep %d: xgboost %.2fs (cpu %.2fs) acc %.4f auc %.5f", t.name, rep, res.seconds, res.cpu, res.acc, res.auc)
			return hostinfo.Sample{Wall: res.seconds, CPU: res.cpu}, nil
		}}, {Name: "ours", Run: func(rep int) (hostinfo.Sample, error) {
			if prof != nil {
				if err := pprof.StartCPUProfile(prof); err != nil {
					return hostinfo.Sample{}, err
				}
			}
			res, err := ours(t, f.world)
			if prof != nil {
				pprof.StopCPUProfile()
				prof.Close()
				prof = nil
			}
			if err != nil {
				return hostinfo.Sample{}, fmt.Errorf("%d ranks: %w", f.world, err)
			}
			r.dist = append(r.dist, res)
			log.Printf("%s rep %d: ours %d ranks %.2fs (cpu %.2fs) acc %.4f auc %.5f", t.name, rep, f.world, res.seconds, res.cpu, res.acc, res.auc)
			return hostinfo.Sample{Wall: res.seconds, CPU: res.cpu}, nil
		}}, {Name: "ours 1 rank", Run: func(rep int) (hostinfo.Sample, error) {
			res, err := ours(t, 1)
			if err != nil {
				return hostinfo.Sample{}, err
			}
			r.solo = append(r.solo, res)
			log.Printf("%s rep %d: ours 1 rank %.2fs (cpu %.2fs) acc %.4f auc %.5f", t.name, rep, res.seconds, res.cpu, res.acc, res.auc)
			return hostinfo.Sample{Wall: res.seconds, CPU: res.cpu}, nil
		}}}
		if f.skipSolo {
			sides = sides[:2]
		}
		if f.skipXGB {
			sides = sides[1:]
		}
		if _, err := hostinfo.Alternate(f.reps, sides...); err != nil {
			log.Fatalf("%s: %v", t.name, err)
		}
		rows = append(rows, r)
	}
	fmt.Println()
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "table\trows×cols\trounds\txgboost s\tours %dr s\tours/xgb\tours 1r s\t1r/%dr\txgb cpu s\tours %dr cpu s\tcpu ours/xgb\tours 1r cpu s\txgb acc\tours acc\txgb auc\tours auc\t\n", f.world, f.world, f.world)
	for _, r := range rows {
		t := r.t
		xs, ds, ss := med(r.xgb, secs), med(r.dist, secs), med(r.solo, secs)
		xc, dc := med(r.xgb, cpu), med(r.dist, cpu)
		fmt.Fprintf(tw, "%s\t%d×%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", t.name, t.train.Rows, t.train.Cols, t.rounds,
			num(xs, 2), num(ds, 2), num(ds/xs, 3), num(ss, 2), num(ss/ds, 2),
			num(xc, 1), num(dc, 1), num(dc/xc, 3), num(med(r.solo, cpu), 1),
			num(med(r.xgb, acc), 4), num(med(r.dist, acc), 4), num(med(r.xgb, auc), 5), num(med(r.dist, auc), 5))
	}
	tw.Flush()
	for _, r := range rows {
		if r.xgbVersion != "" {
			fmt.Printf("xgboost version %s\n", r.xgbVersion)
			break
		}
	}
	host.End()
}

func secs(r result) float64 { return r.seconds }
func cpu(r result) float64  { return r.cpu }
func acc(r result) float64  { return r.acc }
func auc(r result) float64  { return r.auc }

func med(rs []result, f func(result) float64) float64 {
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = f(r)
	}
	return hostinfo.Median(v)
}

func num(x float64, prec int) string {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return "-"
	}
	return strconv.FormatFloat(x, 'f', prec, 64)
}

func load(name string, f *flags) (*table, error) {
	switch name {
	case "fashion":
		tr, err := format.LoadFashionMNIST(f.dataDir, "train")
		if err != nil {
			return nil, err
		}
		tr = tr.Subset(f.fashionN)
		te, err := format.LoadFashionMNIST(f.dataDir, "t10k")
		if err != nil {
			return nil, err
		}
		conv := func(d *format.Dataset) ([]float32, []float32) {
			x := make([]float32, len(d.Images))
			for i, b := range d.Images {
				x[i] = float32(b)
			}
			y := make([]float32, d.N)
			for i, l := range d.Labels {
				y[i] = float32(l)
			}
			return x, y
		}
		x, y := conv(tr)
		tx, ty := conv(te)
		rounds := f.rounds
		if rounds == 0 {
			rounds = 10
		}
		return &table{name: "fashion", rounds: rounds, classes: 10,
			params: map[string]any{"objective": "multi:softprob", "num_class": 10},
			train:  &gbdt.Dataset{X: x, Rows: tr.N, Cols: tr.Pixels(), Label: y},
			testX:  tx, testY: ty, testRows: te.N}, nil
	case "binary":
		rounds := f.rounds
		if rounds == 0 {
			rounds = 100
		}
		x, y := benchdata.Binary(f.rows, f.seed)
		tx, ty := benchdata.Binary(f.testRows, f.seed+1000)
		return &table{name: "binary", rounds: rounds, classes: 2,
			params: map[string]any{"objective": "binary:logistic"},
			train:  &gbdt.Dataset{X: x, Rows: f.rows, Cols: benchdata.BinaryCols, Label: y},
			testX:  tx, testY: ty, testRows: f.testRows}, nil
	}
	return nil, fmt.Errorf("unknown table %q (fashion, binary)", name)
}

func writeFloats(path string, v []float32) error {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return os.WriteFile(path, b, 0o644)
}

func writeTable(dir string, t *table) error {
	for name, v := range map[string][]float32{"train_x.bin": t.train.X, "train_y.bin": t.train.Label, "test_x.bin": t.testX} {
		if err := writeFloats(filepath.Join(dir, name), v); err != nil {
			return err
		}
	}
	shape, _ := json.Marshal(map[string]int{"cols": t.train.Cols})
	return os.WriteFile(filepath.Join(dir, "shape.json"), shape, 0o644)
}

// commonParams are the parameters both sides train with.
func commonParams(t *table) map[string]any {
	p := map[string]any{"max_depth": 6, "eta": 0.3, "max_bin": 256}
	for k, v := range t.params {
		p[k] = v
	}
	return p
}

func xgboost(f *flags, dir string, t *table) (result, string, error) {
	p := commonParams(t)
	p["tree_method"] = "hist"
	p["nthread"] = 2
	pj, _ := json.Marshal(p)
	script := filepath.Join(dir, "xgb_peer.py")
	if err := os.WriteFile(script, []byte(peerScript), 0o644); err != nil {
		return result{}, "", err
	}
	out, err := exec.Command(f.python, script, dir, string(pj), strconv.Itoa(t.rounds)).Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			err = fmt.Errorf("%v: %s", err, ee.Stderr)
		}
		return result{}, "", err
	}
	var r struct {
		TrainSeconds float64 `json:"train_seconds"`
		CPUSeconds   float64 `json:"cpu_seconds"`
		Version      string  `json:"version"`
	}
	if err := json.Unmarshal(out, &r); err != nil {
		return result{}, "", fmt.Errorf("xgb_peer.py printed %q: %v", out, err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "xgb_pred.bin"))
	if err != nil {
		return result{}, "", err
	}
	pred := make([]float32, len(b)/4)
	for i := range pred {
		pred[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	res := score(t, pred)
	res.seconds, res.cpu = r.TrainSeconds, r.CPUSeconds
	return res, r.Version, nil
}

// ours trains on world ranks (contiguous shards) and scores rank 0's model.
func ours(t *table, world int) (result, error) {
	pj, _ := json.Marshal(commonParams(t))
	p, err := gbdt.ParseParams(pj)
	if err != nil {
		return result{}, err
	}
	p.NumBoostRound = t.rounds
	comms, closeAll, err := connect(world)
	if err != nil {
		return result{}, err
	}
	defer closeAll()
	d := t.train
	models := make([]*gbdt.Model, world)
	errs := make([]error, world)
	var wg sync.WaitGroup
	runtime.GC()
	cpu0 := hostinfo.CPUSeconds()
	start := time.Now()
	for r := range world {
		lo, hi := d.Rows*r/world, d.Rows*(r+1)/world
		shard := &gbdt.Dataset{X: d.X[lo*d.Cols : hi*d.Cols], Rows: hi - lo, Cols: d.Cols, Label: d.Label[lo:hi]}
		wg.Add(1)
		go func() {
			defer wg.Done()
			models[r], _, errs[r] = gbdt.Train(context.Background(), comms[r], p, shard)
		}()
	}
	wg.Wait()
	elapsed := time.Since(start).Seconds()
	cpu := hostinfo.CPUSeconds() - cpu0
	for r, err := range errs {
		if err != nil {
			return result{}, fmt.Errorf("rank %d: %w", r, err)
		}
	}
	pred, err := models[0].Predict(t.testX, t.testRows)
	if err != nil {
		return result{}, err
	}
	res := score(t, pred)
	res.seconds, res.cpu = elapsed, cpu
	return res, nil
}

func connect(n int) ([]gbdt.Collective, func(), error) {
	if n == 1 {
		return []gbdt.Collective{gbdt.Local()}, func() {}, nil
	}
	lns := make([]net.Listener, n)
	peers := make([]string, n)
	for r := range n {
		ln, err := collective.Listen("127.0.0.1:0")
		if err != nil {
			return nil, nil, err
		}
		lns[r], peers[r] = ln, ln.Addr().String()
	}
	comms := make([]*collective.Comm, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			comms[r], errs[r] = collective.Connect(context.Background(), lns[r], peers, collective.Options{Rank: r, Size: n, Token: "bench-gbdt"})
		}()
	}
	wg.Wait()
	closeAll := func() {
		for _, c := range comms {
			if c != nil {
				_ = c.Close()
			}
		}
	}
	out := make([]gbdt.Collective, n)
	for r, err := range errs {
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		out[r] = comms[r]
	}
	return out, closeAll, nil
}

// score computes test accuracy (and AUC for binary tables) of predictions
// (probabilities: rows × classes, or rows for binary).
func score(t *table, pred []float32) result {
	var res result
	n := t.testRows
	correct := 0
	if t.classes > 2 {
		for i := range n {
			row := pred[i*t.classes : (i+1)*t.classes]
			best := 0
			for c := range row {
				if row[c] > row[best] {
					best = c
				}
			}
			if float32(best) == t.testY[i] {
				correct++
			}
		}
		res.acc = float64(correct) / float64(n)
		res.auc = math.NaN()
		return res
	}
	type py struct {
		p float32
		y bool
	}
	v := make([]py, n)
	for i := range n {
		v[i] = py{pred[i], t.testY[i] == 1}
		if (pred[i] > 0.5) == v[i].y {
			correct++
		}
	}
	res.acc = float64(correct) / float64(n)
	sort.Slice(v, func(i, j int) bool { return v[i].p < v[j].p })
	var pos, neg, area, negBelow float64
	for i := 0; i < n; {
		j := i
		var p, q float64
		for j < n && v[j].p == v[i].p {
			if v[j].y {
				p++
			} else {
				q++
			}
			j++
		}
		area += p * (negBelow + q/2)
		negBelow += q
		pos += p
		neg += q
		i = j
	}
	res.auc = area / (pos * neg)
	return res
}
