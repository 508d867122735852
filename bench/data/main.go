// Command data measures tempotrain's dataset readers against pandas, in one
// run, on the same files:
//
//	go run ./bench/data                  # 1M rows, 5 rounds, local disk and MinIO
//	go run ./bench/data -quick           # 100k rows, 3 rounds
//	go run ./bench/data -rows 200000 -rounds 3 -minio=false
//
// It writes a table (a fixed seed: 28 float32 columns, 2 categorical string
// columns, a binary label) as CSV and as Parquet (parquet-go, FLOAT columns,
// dictionary-encoded strings, Snappy, row groups of 128Ki rows), on local
// disk and in a MinIO bucket (the real binary, on loopback; storage's S3
// client). Each round then reads, in an order that rotates from round to
// round:
//
//   - ours, CSV:      data.Open in memory mode (parse, columns, dictionaries,
//     the label's classes), local and from MinIO;
//   - pandas, CSV:    pandas 1.5 read_csv (C engine) under /usr/bin/python3,
//     timed inside the interpreter (its start and import not counted);
//   - ours, Parquet:  data.Open in memory mode, local and from MinIO.
//
// Every number is a median over the rounds: rows per second of wall time,
// and rows per CPU-second (user+system of the reading process, from
// getrusage; for MinIO reads the MinIO server's CPU, from /proc, is added).
// Targets: CSV ≥ 2× pandas rows/s and ≥ 1× its rows per CPU-second;
// Parquet ≥ 3× our CSV rows/s.
//
// With -train, a third comparison: the training throughput of tabular-mlp
// fed by the streaming loader against the same run with the table in memory
// (trainThroughput).
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/parquet-go/parquet-go"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/bench/internal/hostinfo"
	"github.com/tempotrain/tempotrain/builtin"
	"github.com/tempotrain/tempotrain/collective"
	"github.com/tempotrain/tempotrain/data"
	"github.com/tempotrain/tempotrain/storage/miniotest"
	"github.com/tempotrain/tempotrain/train"
	"github.com/tempotrain/tempotrain/train/trainrt"
)

// Config of one run.
type Config struct {
	Rows   int
	Rounds int
	Dir    string
	MinIO  bool
	Pandas bool
	Python string
	Train  bool
}

// Table shape.
const (
	numFloat  = 28
	rowGroup  = 128 << 10
	seedTable = 42
)

func main() {
	var c Config
	quick := flag.Bool("quick", false, "a small quick run: 100k rows, 3 rounds")
	flag.IntVar(&c.Rows, "rows", 1_000_000, "rows of the table")
	flag.IntVar(&c.Rounds, "rounds", 5, "rounds; every number is a median over them")
	flag.StringVar(&c.Dir, "dir", "", "scratch directory (default: a new temp dir, removed at the end)")
	flag.BoolVar(&c.MinIO, "minio", true, "also read from a MinIO bucket")
	flag.BoolVar(&c.Pandas, "pandas", true, "compare with pandas read_csv")
	flag.StringVar(&c.Python, "python", "/usr/bin/python3", "a python3 with pandas 1.5")
	flag.BoolVar(&c.Train, "train", false, "also measure tabular-mlp's training throughput, streaming vs in memory")
	quiet := hostinfo.Flags(nil)
	flag.Parse()
	if *quick {
		c.Rows, c.Rounds = 100_000, 3
	}
	host := hostinfo.Start(os.Stdout, quiet)
	if err := run(context.Background(), c, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "bench/data:", err)
		os.Exit(1)
	}
	host.End()
}

// measure is one timed read.
type measure struct {
	wall, cpu time.Duration
}

func run(ctx context.Context, c Config, out io.Writer) error {
	if c.Dir == "" {
		d, err := os.MkdirTemp("", "tempotrain-bench-data-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		c.Dir = d
	}
	csvPath := filepath.Join(c.Dir, "table.csv")
	pqPath := filepath.Join(c.Dir, "table.parquet")
	start := time.Now()
	if err := writeTable(c.Rows, csvPath, pqPath); err != nil {
		return err
	}
	csvSt, _ := os.Stat(csvPath)
	pqSt, _ := os.Stat(pqPath)
	fmt.Fprintf(out, "table: %d rows × (%d float32, 2 categorical, 1 label); CSV %.1f MiB, Parquet %.1f MiB; written in %v\n",
		c.Rows, numFloat, mib(csvSt.Size()), mib(pqSt.Size()), time.Since(start).Round(time.Millisecond))
	fmt.Fprintf(out, "machine: %d CPUs (GOMAXPROCS %d), %s\n", runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.Version())

	type reader struct {
		name string
		fn   func() (measure, error)
	}
	var readers []reader
	ours := func(uri string, minioPID int) func() (measure, error) {
		return func() (measure, error) { return readOurs(ctx, uri, c.Rows, minioPID) }
	}
	readers = append(readers, reader{"ours CSV, local", ours(csvPath, 0)})
	if c.Pandas {
		readers = append(readers, reader{"pandas read_csv, local", func() (measure, error) { return readPandas(c.Python, csvPath, c.Rows) }})
	}
	readers = append(readers, reader{"ours Parquet, local", ours(pqPath, 0)})
	if c.MinIO {
		srv, err := miniotest.Launch(filepath.Join(c.Dir, "minio"))
		if err != nil {
			return fmt.Errorf("start minio: %w", err)
		}
		defer srv.Close()
		for _, kv := range srv.Env() {
			k, v, _ := strings.Cut(kv, "=")
			os.Setenv(k, v)
		}
		bucket, err := srv.MakeBucket(ctx, "bench-data")
		if err != nil {
			return err
		}
		for _, p := range []string{csvPath, pqPath} {
			if err := upload(ctx, srv, bucket, p); err != nil {
				return err
			}
		}
		pid := findPID(srv.Endpoint)
		readers = append(readers,
			reader{"ours CSV, MinIO", ours("s3://"+bucket+"/table.csv", pid)},
			reader{"ours Parquet, MinIO", ours("s3://"+bucket+"/table.parquet", pid)})
	}
	res := make([][]measure, len(readers))
	for round := 0; round < c.Rounds; round++ {
		for k := range readers {
			i := (k + round) % len(readers)
			runtime.GC()
			m, err := readers[i].fn()
			if err != nil {
				return fmt.Errorf("%s: %w", readers[i].name, err)
			}
			res[i] = append(res[i], m)
		}
		fmt.Fprintf(os.Stderr, "round %d/%d done\n", round+1, c.Rounds)
	}
	med := make(map[string]measure, len(readers))
	fmt.Fprintf(out, "\nmedians over %d rounds (order rotating):\n", c.Rounds)
	fmt.Fprintf(out, "%-26s %10s %10s %14s %16s\n", "reader", "wall", "CPU", "rows/s", "rows/CPU-s")
	for i, r := range readers {
		m := median(res[i])
		med[r.name] = m
		fmt.Fprintf(out, "%-26s %10s %10s %14s %16s\n", r.name, m.wall.Round(time.Millisecond), m.cpu.Round(time.Millisecond),
			human(float64(c.Rows)/m.wall.Seconds()), human(float64(c.Rows)/m.cpu.Seconds()))
	}
	fmt.Fprintln(out, "\nratios (same run):")
	oc := med["ours CSV, local"]
	if pd, ok := med["pandas read_csv, local"]; ok {
		fmt.Fprintf(out, "  CSV vs pandas, rows/s:          %5.2fx (target >= 2)\n", pd.wall.Seconds()/oc.wall.Seconds())
		fmt.Fprintf(out, "  CSV vs pandas, rows/CPU-s:      %5.2fx (target >= 1)\n", pd.cpu.Seconds()/oc.cpu.Seconds())
	}
	op := med["ours Parquet, local"]
	fmt.Fprintf(out, "  Parquet vs our CSV, rows/s:     %5.2fx (target >= 3)\n", oc.wall.Seconds()/op.wall.Seconds())
	if m, ok := med["ours CSV, MinIO"]; ok {
		fmt.Fprintf(out, "  MinIO vs local, CSV rows/s:     %5.2fx\n", oc.wall.Seconds()/m.wall.Seconds())
		fmt.Fprintf(out, "  MinIO vs local, Parquet rows/s: %5.2fx\n", op.wall.Seconds()/med["ours Parquet, MinIO"].wall.Seconds())
	}
	if c.Train {
		if err := trainThroughput(ctx, c, out); err != nil {
			fmt.Fprintf(out, "\ntraining throughput, streaming vs in memory: %v\n", err)
		}
	}
	return nil
}

// Settings of the training comparison.
const (
	trainRanks     = 2
	trainBatch     = 256
	streamBudget   = 32 // MiB per rank: the 1M-row table needs about 126
	memoryBudget   = 4096
	trainEpochsRun = 1
	// smallRowGroup is the row group of a second Parquet file of the same
	// rows: about a streaming unit's target, window/8 (see trainThroughput).
	smallRowGroup = 8 << 10
)

// trainThroughput is the third comparison: rows per second of tabular-mlp's
// training loop (its samples_per_s: from the first batch read to the last
// optimizer step of the epoch, every rank's rows over the ranks' mean loop
// time) on the Parquet table, fed by a streaming Shard (mode stream, a
// memory budget of streamBudget MiB per rank, a fraction of the table)
// against the same run with the table in memory (mode memory). Two ranks
// in this process over the real collective (loopback TCP and shared
// memory, as the runtime runs ranks of one machine), one epoch, the same
// seed and batch size; the runs alternate, the first rotating; medians of
// c.Rounds. Target: streaming ≥ 95% of memory.
//
// A stream's Parquet units follow the pages (a page is decoded whole): a
// row group here (128Ki rows) holds pages of 64256 rows (32128 for the
// INT64 label), so it is cut where every column starts a page, into units
// of 64256, 64256 and 2560 rows, and a rank decodes every page once an
// epoch, or once per window that takes rows of it (a unit is larger than
// the window of 50k rows here: most pages are decoded twice). The same
// rows written with row groups of smallRowGroup rows (a unit each) are
// measured too.
func trainThroughput(ctx context.Context, c Config, out io.Writer) error {
	builtin.Register()
	pq := filepath.Join(c.Dir, "table.parquet")
	small := filepath.Join(c.Dir, "table-rg8k.parquet")
	if err := writeTableRG(c.Rows, smallRowGroup, "", small); err != nil {
		return err
	}
	type run struct{ name, uri, mode string }
	runs := []run{
		{"memory", pq, "memory"},
		{fmt.Sprintf("stream, row groups of %dKi rows", rowGroup>>10), pq, "stream"},
		{fmt.Sprintf("stream, row groups of %dKi rows", smallRowGroup>>10), small, "stream"},
	}
	wall := make([][]float64, len(runs))
	cpu := make([][]float64, len(runs))
	for round := 0; round < c.Rounds; round++ {
		for k := range runs {
			i := (k + round) % len(runs)
			runtime.GC()
			w, cp, err := trainOnce(ctx, c, runs[i].uri, runs[i].mode)
			if err != nil {
				return fmt.Errorf("%s: %w", runs[i].name, err)
			}
			wall[i], cpu[i] = append(wall[i], w), append(cpu[i], cp)
		}
		fmt.Fprintf(os.Stderr, "training round %d/%d done\n", round+1, c.Rounds)
	}
	fmt.Fprintf(out, "\ntraining throughput: tabular-mlp (hidden %v, batch %d per rank), %d ranks, %d epoch of the Parquet table;\n"+
		"stream budget %d MiB per rank; medians of %d rounds (order rotating):\n",
		builtin.DefaultHidden, trainBatch, trainRanks, trainEpochsRun, streamBudget, c.Rounds)
	fmt.Fprintf(out, "  %-36s %12s %14s   %s\n", "feed", "rows/s", "rows/CPU-s", "rows/s by round")
	for i, r := range runs {
		fmt.Fprintf(out, "  %-36s %12s %14s   %s\n", r.name, human(medianOf(wall[i])), human(medianOf(cpu[i])), rounds(wall[i]))
	}
	for i := 1; i < len(runs); i++ {
		fmt.Fprintf(out, "  %s vs memory: rows/s %5.1f%% (median of the rounds' ratios %5.1f%%), rows/CPU-s %5.1f%%\n", runs[i].name,
			100*medianOf(wall[i])/medianOf(wall[0]), 100*medianRatio(wall[i], wall[0]), 100*medianOf(cpu[i])/medianOf(cpu[0]))
	}
	fmt.Fprintln(out, "  target: streaming >= 95% of memory")
	return nil
}

// medianRatio is the median of a[i]/b[i].
func medianRatio(a, b []float64) float64 {
	r := make([]float64, len(a))
	for i := range a {
		r[i] = a[i] / b[i]
	}
	return medianOf(r)
}

// rounds lists a run's rates in the order measured.
func rounds(v []float64) string {
	var s []string
	for _, x := range v {
		s = append(s, human(x))
	}
	return strings.Join(s, " ")
}

// trainOnce trains tabular-mlp for one epoch and returns the rows per
// second of its training loop (samples_per_s) and per CPU-second of the
// process during the loop (the ranks share this process: each counts all
// of its CPU, so cpu_s is twice the process's, the same in every mode).
func trainOnce(ctx context.Context, c Config, pq, mode string) (float64, float64, error) {
	budget := memoryBudget
	if mode == "stream" {
		budget = streamBudget
	}
	ds := map[string]api.DatasetSpec{"train": {URI: pq, Label: "y", Mode: mode, MemoryBudgetMiB: budget}}
	cfg, _ := json.Marshal(map[string]any{"epochs": trainEpochsRun, "batch_size": trainBatch, "seed": 1})
	comms, err := connect(ctx, trainRanks)
	if err != nil {
		return 0, 0, err
	}
	defer func() {
		for _, cm := range comms {
			cm.Close()
		}
	}()
	scratch, err := os.MkdirTemp(c.Dir, "train-")
	if err != nil {
		return 0, 0, err
	}
	defer os.RemoveAll(scratch)
	rep := &lastReport{}
	errs := make([]error, trainRanks)
	var wg sync.WaitGroup
	for r := range trainRanks {
		var rp trainrt.Reporter
		if r == 0 {
			rp = rep
		}
		info := trainrt.ContextInfo{RunName: "bench", Attempt: 1, WorldRank: r, WorldSize: trainRanks, LocalRank: r, LocalWorldSize: trainRanks,
			Config: cfg, ScratchDir: filepath.Join(scratch, strconv.Itoa(r)), Device: -1, Datasets: ds}
		if err := os.MkdirAll(info.ScratchDir, 0o755); err != nil {
			return 0, 0, err
		}
		tc := trainrt.NewContext(ctx, info, comms[r], rp, nil)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if errs[r] = builtin.Func(builtin.TabularMLP)(ctx, tc); errs[r] != nil {
				for _, cm := range comms {
					cm.Abort()
				}
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return 0, 0, err
	}
	m := rep.m
	v, ok := m["samples_per_s"]
	if !ok || m["epoch"] != trainEpochsRun {
		return 0, 0, fmt.Errorf("last report %v: no epoch %d with samples_per_s", m, trainEpochsRun)
	}
	return v, v * m["epoch_time_s"] / (m["cpu_s"] / trainRanks), nil
}

// lastReport keeps rank 0's last metrics.
type lastReport struct{ m train.Metrics }

func (l *lastReport) Report(_ context.Context, m train.Metrics, _ *train.Checkpoint) error {
	l.m = m
	return nil
}

// connect makes a collective group of world ranks over loopback.
func connect(ctx context.Context, world int) ([]*collective.Comm, error) {
	lns := make([]net.Listener, world)
	peers := make([]string, world)
	for r := range lns {
		ln, err := collective.Listen("127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns[r], peers[r] = ln, ln.Addr().String()
	}
	comms := make([]*collective.Comm, world)
	errs := make([]error, world)
	var wg sync.WaitGroup
	token := fmt.Sprintf("bench-%d", time.Now().UnixNano())
	for r := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			comms[r], errs[r] = collective.Connect(ctx, lns[r], peers, collective.Options{Rank: r, Size: world, Token: token, Timeout: time.Minute})
		}()
	}
	wg.Wait()
	return comms, errors.Join(errs...)
}

func medianOf(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s) == 0 {
		return math.NaN()
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// readOurs opens the dataset in memory mode and returns the time and CPU
// it took (plus MinIO's CPU when minioPID is set).
func readOurs(ctx context.Context, uri string, rows, minioPID int) (measure, error) {
	spec := api.DatasetSpec{URI: uri, Label: "y", Mode: "memory", MemoryBudgetMiB: 8192, Categorical: []string{"cat_a", "cat_b"}}
	srv0 := procCPU(minioPID)
	c0, t0 := cpuTime(), time.Now()
	s, err := data.Open(ctx, spec, data.ShardOptions{}, nil)
	if err != nil {
		return measure{}, err
	}
	m := measure{wall: time.Since(t0), cpu: cpuTime() - c0 + procCPU(minioPID) - srv0}
	n := s.TotalRows()
	s.Close()
	if n != int64(rows) {
		return m, fmt.Errorf("%s: %d rows, want %d", uri, n, rows)
	}
	return m, nil
}

const pandasScript = `
import json, resource, sys, time
import pandas as pd
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
c0, t0 = cpu(), time.perf_counter()
df = pd.read_csv(sys.argv[1], engine="c")
t1, c1 = time.perf_counter(), cpu()
print(json.dumps({"wall": t1 - t0, "cpu": c1 - c0, "rows": len(df), "version": pd.__version__}))
`

func readPandas(python, path string, rows int) (measure, error) {
	cmd := exec.Command(python, "-c", pandasScript, path)
	cmd.Stderr = os.Stderr
	b, err := cmd.Output()
	if err != nil {
		return measure{}, fmt.Errorf("%s: %w", python, err)
	}
	var r struct {
		Wall, CPU float64
		Rows      int
		Version   string
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return measure{}, fmt.Errorf("pandas said %q: %w", b, err)
	}
	if r.Rows != rows {
		return measure{}, fmt.Errorf("pandas read %d rows, want %d", r.Rows, rows)
	}
	if !strings.HasPrefix(r.Version, "1.5") {
		fmt.Fprintf(os.Stderr, "note: pandas %s, not 1.5\n", r.Version)
	}
	return measure{wall: time.Duration(r.Wall * 1e9), cpu: time.Duration(r.CPU * 1e9)}, nil
}

// writeTable writes the same rows as CSV and Parquet.
func writeTable(rows int, csvPath, pqPath string) error {
	return writeTableRG(rows, rowGroup, csvPath, pqPath)
}

// writeTableRG is writeTable with Parquet row groups of rg rows; an empty
// csvPath writes no CSV.
func writeTableRG(rows, rg int, csvPath, pqPath string) error {
	var w *bufio.Writer
	if csvPath == "" {
		w = bufio.NewWriterSize(io.Discard, 1<<20)
	} else {
		cf, err := os.Create(csvPath)
		if err != nil {
			return err
		}
		defer cf.Close()
		w = bufio.NewWriterSize(cf, 1<<20)
	}
	var cols []string
	for j := range numFloat {
		cols = append(cols, fmt.Sprintf("f%02d", j))
	}
	cols = append(cols, "cat_a", "cat_b", "y")
	w.WriteString(strings.Join(cols, ",") + "\n")

	g := parquet.Group{}
	for j := range numFloat {
		g[cols[j]] = parquet.Compressed(parquet.Leaf(parquet.FloatType), &parquet.Snappy)
	}
	g["cat_a"] = parquet.Compressed(parquet.Encoded(parquet.String(), &parquet.RLEDictionary), &parquet.Snappy)
	g["cat_b"] = parquet.Compressed(parquet.Encoded(parquet.String(), &parquet.RLEDictionary), &parquet.Snappy)
	g["y"] = parquet.Compressed(parquet.Int(64), &parquet.Snappy)
	schema := parquet.NewSchema("table", g)
	pf, err := os.Create(pqPath)
	if err != nil {
		return err
	}
	defer pf.Close()
	pw := parquet.NewGenericWriter[any](pf, schema, parquet.MaxRowsPerRowGroup(int64(rg)))
	leaf := map[string]int{}
	for i, p := range schema.Columns() {
		leaf[p[0]] = i
	}

	rng := rand.New(rand.NewPCG(seedTable, 1))
	weights := make([]float64, numFloat)
	for j := range weights {
		weights[j] = rng.NormFloat64()
	}
	vals := make([]float32, numFloat)
	batch := make([]parquet.Row, 0, 4096)
	var line []byte
	for i := range rows {
		line = line[:0]
		logit := 0.0
		for j := range vals {
			v := float32(rng.NormFloat64()*float64(1+j%5) + float64(j))
			vals[j] = v
			logit += weights[j] * (float64(v) - float64(j)) / float64(1+j%5)
			line = strconv.AppendFloat(line, float64(v), 'g', -1, 32)
			line = append(line, ',')
		}
		a := fmt.Sprintf("a%02d", rng.IntN(12))
		b := fmt.Sprintf("b%03d", rng.IntN(200))
		y := 0
		if logit/math.Sqrt(numFloat)+0.3*rng.NormFloat64() > 0 {
			y = 1
		}
		line = append(line, a...)
		line = append(line, ',')
		line = append(line, b...)
		line = append(line, ',')
		line = strconv.AppendInt(line, int64(y), 10)
		line = append(line, '\n')
		w.Write(line)

		row := make(parquet.Row, len(cols))
		for j, v := range vals {
			k := leaf[cols[j]]
			row[k] = parquet.FloatValue(v).Level(0, 0, k)
		}
		row[leaf["cat_a"]] = parquet.ByteArrayValue([]byte(a)).Level(0, 0, leaf["cat_a"])
		row[leaf["cat_b"]] = parquet.ByteArrayValue([]byte(b)).Level(0, 0, leaf["cat_b"])
		row[leaf["y"]] = parquet.Int64Value(int64(y)).Level(0, 0, leaf["y"])
		batch = append(batch, row)
		if len(batch) == cap(batch) || i == rows-1 {
			if _, err := pw.WriteRows(batch); err != nil {
				return err
			}
			batch = batch[:0]
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	return pw.Close()
}

func upload(ctx context.Context, srv *miniotest.Server, bucket, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	st, _ := f.Stat()
	return putObject(ctx, srv, bucket, filepath.Base(path), f, st.Size())
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// findPID finds the MinIO serving endpoint, to count its CPU.
func findPID(endpoint string) int {
	port := endpoint[strings.LastIndex(endpoint, ":")+1:]
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmd, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(cmd), "minio") && strings.Contains(string(cmd), ":"+port) {
			return pid
		}
	}
	return 0
}

// procCPU is a process's user+system time from /proc/PID/stat.
func procCPU(pid int) time.Duration {
	if pid == 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * time.Second / 100 // USER_HZ
}

func median(ms []measure) measure {
	w := make([]time.Duration, len(ms))
	c := make([]time.Duration, len(ms))
	for i, m := range ms {
		w[i], c[i] = m.wall, m.cpu
	}
	sort.Slice(w, func(a, b int) bool { return w[a] < w[b] })
	sort.Slice(c, func(a, b int) bool { return c[a] < c[b] })
	return measure{wall: w[len(w)/2], cpu: c[len(c)/2]}
}

func human(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2fM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.1fk", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }
