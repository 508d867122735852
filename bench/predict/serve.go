package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/tempotrain/tempotrain/builtin"
	"github.com/tempotrain/tempotrain/compute"
	"github.com/tempotrain/tempotrain/data/format"
	"github.com/tempotrain/tempotrain/predict"
	"github.com/tempotrain/tempotrain/storage"
	"github.com/tempotrain/tempotrain/train"
	"github.com/tempotrain/tempotrain/train/trainrt"
)

func benchServe(f flags) error {
	ctx := context.Background()
	if f.blas > 0 {
		compute.SetThreads(f.blas)
	}
	dir, err := os.MkdirTemp("", "bench-predict-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	fmt.Printf("load average before: %s\n", loadAvg())
	defer func() { fmt.Printf("load average after: %s\n", loadAvg()) }()
	var summary []string
	for _, model := range f.models {
		lines, err := benchServeModel(ctx, f, dir, model)
		if err != nil {
			return fmt.Errorf("%s: %w", model, err)
		}
		summary = append(summary, lines...)
	}
	fmt.Printf("\nbatching on/off (median of per-round ratios; range), GOMAXPROCS %d, load generator in the same process:\n", runtime.GOMAXPROCS(0))
	for _, l := range summary {
		fmt.Println(l)
	}
	return nil
}

func benchServeModel(ctx context.Context, f flags, dir, model string) ([]string, error) {
	start := time.Now()
	mdir := dir + "/" + model
	if err := os.MkdirAll(mdir, 0o755); err != nil {
		return nil, err
	}
	uri, acc, err := trainCheckpoint(ctx, mdir, model, f.trainLimit)
	if err != nil {
		return nil, fmt.Errorf("training: %w", err)
	}
	fmt.Printf("\n== %s: 1 epoch on %d training images in %.1fs, test accuracy %.4f; checkpoint %s\n", model, f.trainLimit, time.Since(start).Seconds(), acc, uri)

	bodies, want, err := requests(ctx, uri, f.images, f.binary)
	if err != nil {
		return nil, err
	}
	if err := verify(uri, bodies, want); err != nil {
		return nil, err
	}
	fmt.Printf("%d single-image requests (%d bytes each on average) answered over HTTP with the classes of a direct Predict\n",
		len(bodies), meanLen(bodies))
	if err := predictCost(ctx, uri); err != nil {
		return nil, err
	}
	fmt.Printf("each measurement: %v warm-up, %v measured, fresh server; OpenBLAS threads %d\n\n", f.warmup, f.duration, compute.Threads())

	type key struct {
		clients int
		on      bool
	}
	results := map[key][]result{}
	ratios := map[int][]float64{}
	for r := range f.rounds {
		for _, c := range f.clients {
			modes := []bool{true, false}
			if r%2 == 1 {
				modes = []bool{false, true}
			}
			if f.onlyMode != "both" {
				modes = []bool{f.onlyMode == "on"}
			}
			var rps [2]float64
			for _, on := range modes {
				res, err := measure(uri, bodies, c, on, f)
				if err != nil {
					return nil, err
				}
				results[key{c, on}] = append(results[key{c, on}], res)
				if on {
					rps[1] = res.rps
				} else {
					rps[0] = res.rps
				}
				fmt.Printf("round %d: %2d clients, batching %-3s %8.0f req/s  p50 %7.2fms  p99 %7.2fms  %5.1f rows/Predict  %d errors\n",
					r+1, c, onOff(on), res.rps, ms(res.p50), ms(res.p99), res.rowsPerPredict, res.errors)
			}
			if len(modes) == 2 {
				ratios[c] = append(ratios[c], rps[1]/rps[0])
			}
		}
	}

	fmt.Printf("\n%s, medians over %d rounds (GOMAXPROCS %d, load generator in the same process):\n\n", model, f.rounds, runtime.GOMAXPROCS(0))
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "clients\tbatching\treq/s\tp50 ms\tp99 ms\trows/Predict\terrors\t")
	for _, c := range f.clients {
		for _, on := range []bool{false, true} {
			rs := results[key{c, on}]
			if len(rs) == 0 {
				continue
			}
			errs := 0
			for _, r := range rs {
				errs += r.errors
			}
			fmt.Fprintf(tw, "%d\t%s\t%.0f\t%.2f\t%.2f\t%.1f\t%d\t\n", c, onOff(on),
				median(rs, func(r result) float64 { return r.rps }),
				median(rs, func(r result) float64 { return ms(r.p50) }),
				median(rs, func(r result) float64 { return ms(r.p99) }),
				median(rs, func(r result) float64 { return r.rowsPerPredict }), errs)
		}
	}
	tw.Flush()
	var lines []string
	for _, c := range f.clients {
		rs := ratios[c]
		if len(rs) == 0 {
			continue
		}
		lines = append(lines, fmt.Sprintf("%-9s %2d clients: %.2f× req/s (%.2f–%.2f)", model, c, medianF(rs), slices.Min(rs), slices.Max(rs)))
	}
	return lines, nil
}

// loadAvg is the 1, 5 and 15 minute load averages (Linux), or "?".
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func onOff(on bool) string {
	if on {
		return "on"
	}
	return "off"
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// reporter commits the checkpoints a training run reports, as rank 0 of
// the runtime does, and keeps the last one.
type reporter struct {
	run *storage.Run
	seq int
	uri string
	m   train.Metrics
}

func (r *reporter) Report(ctx context.Context, m train.Metrics, ck *train.Checkpoint) error {
	r.m = m
	if ck == nil {
		return nil
	}
	r.seq++
	if _, err := r.run.CommitCheckpoint(ctx, r.seq, ck.Dir, storage.Manifest{Seq: r.seq, Attempt: 1, Metrics: m, Meta: ck.Meta}); err != nil {
		return err
	}
	r.uri = r.run.CheckpointURI(r.seq)
	return nil
}

// trainCheckpoint trains a built-in model for one epoch on the first
// trainLimit training images, on one rank, and returns its committed
// checkpoint and test accuracy (on 1000 test images).
func trainCheckpoint(ctx context.Context, dir, model string, trainLimit int) (string, float64, error) {
	b, err := storage.Open(ctx, dir)
	if err != nil {
		return "", 0, err
	}
	rep := &reporter{run: storage.NewRun(b, "bench")}
	cfg, _ := json.Marshal(map[string]any{"epochs": 1, "train_limit": trainLimit, "test_limit": 1000, "batch_size": 64, "seed": 1})
	tc := trainrt.NewContext(ctx, trainrt.ContextInfo{RunName: "bench", Attempt: 1, WorldSize: 1, LocalWorldSize: 1,
		Config: cfg, ScratchDir: dir, Device: -1}, nil, rep, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err := builtin.Run(ctx, tc, nil, model, builtin.Options{}); err != nil {
		return "", 0, err
	}
	if rep.uri == "" {
		return "", 0, errors.New("no checkpoint reported")
	}
	return rep.uri, rep.m["test_accuracy"], nil
}

// requests are single-image inference requests for the first n test images
// (keys in the order clients usually send them), and the classes a direct
// Predict gives them.
func requests(ctx context.Context, uri string, n int, bin bool) ([]request, []int64, error) {
	ds, err := format.LoadFashionMNIST(format.DefaultFashionMNISTDir, "t10k")
	if err != nil {
		return nil, nil, err
	}
	ds = ds.Subset(n)
	px := make([]float32, len(ds.Images))
	for i, v := range ds.Images {
		px[i] = float32(v)
	}
	p, err := predict.Load(ctx, uri)
	if err != nil {
		return nil, nil, err
	}
	defer p.Close()
	out, err := p.Predict(ctx, predict.Batch{Inputs: []predict.Tensor{{Name: "pixels", Datatype: predict.FP32, Shape: []int{ds.N, 1, 28, 28}, FP32: px}}})
	if err != nil {
		return nil, nil, err
	}
	bodies := make([]request, ds.N)
	for i := range bodies {
		if bin { // the binary tensor data extension: JSON header, then the pixels as FP32
			h := fmt.Appendf(nil, `{"id":"%d","inputs":[{"name":"pixels","shape":[1,1,28,28],"datatype":"FP32","parameters":{"binary_data_size":%d}}]}`, i, 4*784)
			b := h
			for _, v := range ds.Images[i*784 : (i+1)*784] {
				b = binary.LittleEndian.AppendUint32(b, math.Float32bits(float32(v)))
			}
			bodies[i] = request{body: b, hlen: len(h)}
			continue
		}
		var b bytes.Buffer
		fmt.Fprintf(&b, `{"id":"%d","inputs":[{"name":"pixels","shape":[1,1,28,28],"datatype":"FP32","data":[`, i)
		for j, v := range ds.Images[i*784 : (i+1)*784] {
			if j > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strconv.Itoa(int(v)))
		}
		b.WriteString("]}]}")
		bodies[i] = request{body: b.Bytes()}
	}
	return bodies, out[1].INT64, nil
}

// predictCost prints what one direct Predict of n images costs, per image:
// what batching saves.
func predictCost(ctx context.Context, uri string) error {
	p, err := predict.Load(ctx, uri)
	if err != nil {
		return err
	}
	defer p.Close()
	px := make([]float32, 128*784)
	for i := range px {
		px[i] = float32(i % 251)
	}
	fmt.Print("direct Predict, one at a time, per image:")
	for _, n := range []int{1, 4, 16, 32, 64, 128} {
		in := predict.Batch{Inputs: []predict.Tensor{{Name: "pixels", Datatype: predict.FP32, Shape: []int{n, 1, 28, 28}, FP32: px[:n*784]}}}
		var times []float64
		for range 5 {
			reps := max(1, 256/n)
			start := time.Now()
			for range reps {
				if _, err := p.Predict(ctx, in); err != nil {
					return err
				}
			}
			times = append(times, float64(time.Since(start))/float64(reps*n)/1e3)
		}
		fmt.Printf("  %d: %.0fµs", n, medianF(times))
	}
	fmt.Println()
	return nil
}

func meanLen(bodies []request) int {
	n := 0
	for _, b := range bodies {
		n += len(b.body)
	}
	return n / len(bodies)
}

// server is a predict.Server on a loopback listener, serving the checkpoint
// through a predictor that counts its calls.
type server struct {
	*predict.Server
	url         string
	calls, rows atomic.Int64
}

// counting counts the Predict calls and rows of the predictor it wraps.
type counting struct {
	predict.Predictor
	s *server
}

func (c counting) Predict(ctx context.Context, b predict.Batch) ([]predict.Tensor, error) {
	c.s.calls.Add(1)
	c.s.rows.Add(int64(b.Rows()))
	return c.Predictor.Predict(ctx, b)
}

func startServer(uri string, batching bool, f flags) (*server, error) {
	p, err := predict.Load(context.Background(), uri)
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		p.Close()
		return nil, err
	}
	s := &server{url: "http://" + l.Addr().String() + "/v2/models/" + p.Metadata().Name + "/infer"}
	opts := predict.ServerOptions{NoBatching: !batching, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Batch: predict.BatcherOptions{MaxBatch: f.maxBatch, MaxWait: f.maxWait, Concurrency: f.workers}}
	s.Server = predict.NewServer(counting{Predictor: p, s: s}, opts)
	go s.Serve(l)
	return s, nil
}

func (s *server) stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return s.Shutdown(ctx)
}

// verify sends every request (16 at a time, batching on) and checks the
// classes of the answers.
func verify(uri string, bodies []request, want []int64) error {
	s, err := startServer(uri, true, flags{})
	if err != nil {
		return err
	}
	defer s.stop()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	defer client.CloseIdleConnections()
	errs := make(chan error, len(bodies))
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for i, body := range bodies {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			raw, err := post(client, s.url, body)
			if err != nil {
				errs <- fmt.Errorf("image %d: %w", i, err)
				return
			}
			var r struct {
				ID      string `json:"id"`
				Outputs []struct {
					Name string    `json:"name"`
					Data []float64 `json:"data"`
				} `json:"outputs"`
			}
			if err := json.Unmarshal(raw, &r); err != nil || len(r.Outputs) != 2 || r.Outputs[1].Name != "class" || len(r.Outputs[1].Data) != 1 {
				errs <- fmt.Errorf("image %d: answer %.200s (%v)", i, raw, err)
				return
			}
			if got := int64(r.Outputs[1].Data[0]); got != want[i] || r.ID != strconv.Itoa(i) {
				errs <- fmt.Errorf("image %d: class %d over HTTP (id %q), %d direct", i, got, r.ID, want[i])
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// post sends one inference request and returns the answer of a 200.
func post(client *http.Client, url string, r request) ([]byte, error) {
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(r.body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if r.hlen > 0 {
		req.Header.Set("Inference-Header-Content-Length", strconv.Itoa(r.hlen))
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("%s: %s", resp.Status, raw)
	}
	return raw, err
}

// result is one measurement.
type result struct {
	rps            float64
	p50, p99       time.Duration
	rowsPerPredict float64
	errors         int
}

// measure runs clients closed-loop clients against a fresh server for
// f.warmup + f.duration and measures the requests started after the
// warm-up.
func measure(uri string, bodies []request, clients int, batching bool, f flags) (result, error) {
	s, err := startServer(uri, batching, f)
	if err != nil {
		return result{}, err
	}
	defer s.stop()
	reqs := make([][]byte, len(bodies))
	for i, b := range bodies {
		reqs[i] = rawRequest(s.url, b)
	}
	conns := make([]*rawConn, clients)
	for c := range conns {
		if conns[c], err = dial(s.url); err != nil {
			return result{}, err
		}
		defer conns[c].Close()
	}
	start := time.Now()
	from, end := start.Add(f.warmup), start.Add(f.warmup+f.duration)
	lats := make([][]time.Duration, clients)
	errs := make([]int, clients)
	var firstErr atomic.Value
	var calls0, rows0 int64
	snap := time.AfterFunc(f.warmup, func() { calls0, rows0 = s.calls.Load(), s.rows.Load() })
	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := c * len(reqs) / clients; ; i++ {
				t := time.Now()
				if !t.Before(end) {
					return
				}
				err := conns[c].do(reqs[i%len(reqs)])
				if !t.Before(from) {
					lats[c] = append(lats[c], time.Since(t))
					if err != nil {
						errs[c]++
						firstErr.CompareAndSwap(nil, err)
					}
				}
				if err != nil && conns[c].broken {
					return
				}
			}
		}()
	}
	wg.Wait()
	snap.Stop()
	calls, rows := s.calls.Load()-calls0, s.rows.Load()-rows0
	var all []time.Duration
	res := result{}
	for c := range clients {
		all = append(all, lats[c]...)
		res.errors += errs[c]
	}
	if err, ok := firstErr.Load().(error); ok {
		fmt.Fprintf(os.Stderr, "first error: %v\n", err)
	}
	if len(all) == 0 {
		return res, errors.New("no request completed")
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	res.rps = float64(len(all)-res.errors) / f.duration.Seconds()
	res.p50, res.p99 = all[len(all)/2], all[len(all)*99/100]
	if calls > 0 {
		res.rowsPerPredict = float64(rows) / float64(calls)
	}
	return res, nil
}

// The measurements' client speaks HTTP/1.1 over one keep-alive connection
// per client with requests built beforehand, as wrk does: net/http's client
// costs about as much CPU per request as the server, which on a loopback
// measurement is CPU taken from the server.

// request is one inference request's body; hlen > 0: the binary tensor
// data extension, the JSON being the first hlen bytes.
type request struct {
	body []byte
	hlen int
}

// rawRequest is the whole POST of r to url.
func rawRequest(url string, r request) []byte {
	u := strings.TrimPrefix(url, "http://")
	host, path, _ := strings.Cut(u, "/")
	req := fmt.Appendf(nil, "POST /%s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n", path, host, len(r.body))
	if r.hlen > 0 {
		req = fmt.Appendf(req, "Inference-Header-Content-Length: %d\r\n", r.hlen)
	}
	req = append(req, "\r\n"...)
	return append(req, r.body...)
}

type rawConn struct {
	net.Conn
	r      *bufio.Reader
	broken bool
}

func dial(url string) (*rawConn, error) {
	host, _, _ := strings.Cut(strings.TrimPrefix(url, "http://"), "/")
	c, err := net.Dial("tcp", host)
	if err != nil {
		return nil, err
	}
	return &rawConn{Conn: c, r: bufio.NewReaderSize(c, 64<<10)}, nil
}

// do sends req and reads the answer, an error unless it is a 200.
func (c *rawConn) do(req []byte) error {
	if _, err := c.Write(req); err != nil {
		c.broken = true
		return err
	}
	status, err := c.r.ReadSlice('\n')
	if err != nil {
		c.broken = true
		return err
	}
	ok := bytes.HasPrefix(status, []byte("HTTP/1.1 200 "))
	statusLine := string(bytes.TrimSpace(status))
	n := -1
	for {
		line, err := c.r.ReadSlice('\n')
		if err != nil {
			c.broken = true
			return err
		}
		if len(line) <= 2 {
			break
		}
		if k, v, found := bytes.Cut(line, []byte(":")); found && strings.EqualFold(string(k), "Content-Length") {
			n, _ = strconv.Atoi(string(bytes.TrimSpace(v)))
		}
	}
	if n < 0 {
		c.broken = true
		return fmt.Errorf("%s without a Content-Length", statusLine)
	}
	if ok {
		_, err = c.r.Discard(n)
		c.broken = err != nil
		return err
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(c.r, body); err != nil {
		c.broken = true
		return err
	}
	return fmt.Errorf("%s: %s", statusLine, body)
}

func median(rs []result, v func(result) float64) float64 {
	var xs []float64
	for _, r := range rs {
		xs = append(xs, v(r))
	}
	return medianF(xs)
}

func medianF(xs []float64) float64 {
	xs = slices.Clone(xs)
	slices.Sort(xs)
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}
