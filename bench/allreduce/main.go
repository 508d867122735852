// Command allreduce measures tempotrain's ring all-reduce against PyTorch's
// gloo all_reduce and against iperf3, in the same run, on loopback, with every
// rank a separate OS process:
//
//	go run ./bench/allreduce              # default sweep, a few minutes
//	go run ./bench/allreduce -full        # every power of 4 from 4 KiB to 256 MiB
//	go run ./bench/allreduce -sizes 64M -ranks 2,4 -rounds 9
//
// For each world size and round it spawns the ranks of this same binary
// (-child) and of bench/allreduce/gloo_peer.py (python3 with torch), one after
// the other, so that both meet the same machine load; every size is measured
// once per round as the mean time of iters(size) back-to-back float32
// all-reduces between barriers, and the table shows medians over rounds.
// busbw = bytes * 2(n-1)/n / time, the nccl-tests definition: what each
// rank's link carries. iperf3 (-c 127.0.0.1, one stream) gives the loopback
// TCP ceiling of one flow.
//
// Needs python3 with torch (Debian python3-torch) and iperf3; -gloo=false or
// -iperf=false skip either.
package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tempotrain/tempotrain/collective"
)

var (
	sizesFlag = flag.String("sizes", "4K,64K,1M,16M,64M,256M", "buffer sizes in bytes (K, M suffixes)")
	full      = flag.Bool("full", false, "every power of 4 from 4K to 256M (overrides -sizes)")
	ranksFlag = flag.String("ranks", "2,4,8", "world sizes")
	rounds    = flag.Int("rounds", 5, "rounds: each measures every size once; the table shows medians (at least 5 for reporting)")
	gloo      = flag.Bool("gloo", true, "measure PyTorch gloo")
	iperf     = flag.Bool("iperf", true, "measure iperf3 single-stream loopback")
	python    = flag.String("python", "/usr/bin/python3", "python with torch for the gloo peer")
	segment   = flag.Int("segment", 0, "collective.Options.SegmentBytes (0: default)")
	sockbuf   = flag.Int("sockbuf", 0, "collective.Options.SocketBuffer (0: default, -1: kernel autotuning)")
	child     = flag.Bool("child", false, "internal: run as one rank")
	rank      = flag.Int("rank", 0, "internal: rank of a child")
	world     = flag.Int("world", 0, "internal: world size of a child")
)

// iters is how many all-reduces one measurement averages: enough to last
// tens of milliseconds for small buffers. gloo_peer.py uses the same rule.
func iters(size int) int { return max(1, min(1000, (32<<20)/size)) }

// result is one rank 0 report: seconds per all-reduce, one per measurement.
type result struct {
	Size    int       `json:"size"`
	Ranks   int       `json:"ranks"`
	Seconds []float64 `json:"seconds"`
	// CPU is rank 0's processor time (user, system) per all-reduce, in
	// seconds: what the operation costs, whatever the machine's load.
	User []float64 `json:"user"`
	Sys  []float64 `json:"sys"`
}

func main() {
	log.SetFlags(0)
	flag.Parse()
	sizes, err := parseSizes(*sizesFlag)
	if err != nil {
		log.Fatal(err)
	}
	if *full {
		sizes = nil
		for s := 4 << 10; s <= 256<<20; s *= 4 {
			sizes = append(sizes, s)
		}
	}
	if *child {
		if err := runChild(sizes); err != nil {
			log.Fatalf("rank %d: %v", *rank, err)
		}
		return
	}
	var worlds []int
	for _, f := range strings.Split(*ranksFlag, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 2 {
			log.Fatalf("bad world size %q", f)
		}
		worlds = append(worlds, n)
	}
	if err := run(sizes, worlds); err != nil {
		log.Fatal(err)
	}
}

func parseSizes(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.ToUpper(strings.TrimSpace(f))
		mult := 1
		switch {
		case strings.HasSuffix(f, "K"):
			mult, f = 1<<10, strings.TrimSuffix(f, "K")
		case strings.HasSuffix(f, "M"):
			mult, f = 1<<20, strings.TrimSuffix(f, "M")
		}
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 || n*mult%4 != 0 {
			return nil, fmt.Errorf("bad size %q: want a positive multiple of 4 bytes", f)
		}
		out = append(out, n*mult)
	}
	return out, nil
}

type key struct{ size, ranks int }

func run(sizes, worlds []int) error {
	ours, theirs := map[key]*samples{}, map[key]*samples{}
	var iperfGBs []float64
	start := time.Now()
	for round := range *rounds {
		for _, n := range worlds {
			rs, err := spawnOurs(sizes, n)
			if err != nil {
				return fmt.Errorf("round %d, %d ranks: ours: %w", round, n, err)
			}
			collect(ours, rs)
			if *gloo {
				rs, err := spawnGloo(sizes, n)
				if err != nil {
					return fmt.Errorf("round %d, %d ranks: gloo: %w", round, n, err)
				}
				collect(theirs, rs)
			}
		}
		if *iperf {
			gbs, err := runIperf()
			if err != nil {
				return fmt.Errorf("iperf3: %w", err)
			}
			iperfGBs = append(iperfGBs, gbs)
		}
		log.Printf("round %d of %d done (%v)", round+1, *rounds, time.Since(start).Round(time.Second))
	}
	report(os.Stdout, sizes, worlds, ours, theirs, iperfGBs)
	return nil
}

// samples gathers one side's measurements of one size and world size.
type samples struct{ seconds, user, sys []float64 }

func collect(m map[key]*samples, rs []result) {
	for _, r := range rs {
		k := key{r.Size, r.Ranks}
		if m[k] == nil {
			m[k] = &samples{}
		}
		m[k].seconds = append(m[k].seconds, r.Seconds...)
		m[k].user = append(m[k].user, r.User...)
		m[k].sys = append(m[k].sys, r.Sys...)
	}
}

// time is the median seconds per all-reduce; cpu the median of rank 0's
// processor time per all-reduce, user and system.
func (s *samples) time() float64 {
	if s == nil {
		return math.NaN()
	}
	return median(s.seconds)
}

func (s *samples) cpu() (user, sys float64) {
	if s == nil {
		return math.NaN(), math.NaN()
	}
	return median(s.user), median(s.sys)
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func busbw(size, n int, seconds float64) float64 {
	return float64(size) * 2 * float64(n-1) / float64(n) / seconds / 1e9
}

func human(size int) string {
	switch {
	case size >= 1<<20 && size%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", size>>20)
	case size >= 1<<10 && size%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", size>>10)
	}
	return fmt.Sprintf("%dB", size)
}

func report(w io.Writer, sizes, worlds []int, ours, theirs map[key]*samples, iperfGBs []float64) {
	ip := median(iperfGBs)
	fmt.Fprintf(w, "\n%d rounds, medians; busbw = bytes*2(n-1)/n/time; %d CPUs; iperf3 single stream loopback: %.2f GB/s (runs: %s)\n\n",
		*rounds, runtime.NumCPU(), ip, floats(iperfGBs, "%.2f"))
	fmt.Fprintf(w, "%-8s %5s %11s %11s %9s %9s %9s %11s  %-17s %-17s\n", "size", "ranks", "ours µs", "gloo µs",
		"ours GB/s", "gloo GB/s", "ours/gloo", "ours/iperf3", "ours cpu usr+sys", "gloo cpu usr+sys")
	for _, n := range worlds {
		for _, s := range sizes {
			k := key{s, n}
			o, g := ours[k].time(), theirs[k].time()
			ou, os := ours[k].cpu()
			gu, gs := theirs[k].cpu()
			fmt.Fprintf(w, "%-8s %5d %11.1f %11.1f %9.3f %9.3f %9.2f %11.2f  %7.0f+%-7.0fµs %7.0f+%-7.0fµs\n", human(s), n, o*1e6, g*1e6,
				busbw(s, n, o), busbw(s, n, g), g/o, busbw(s, n, o)/ip, ou*1e6, os*1e6, gu*1e6, gs*1e6)
		}
	}
	fmt.Fprintln(w, "(cpu: rank 0's processor time per all-reduce, user+system; wall time above it means waiting on the other ranks or the machine's load)")
	fmt.Fprintln(w, "\nTargets (issue 3):")
	target := func(what string, ok bool, got string) {
		verdict := "MET"
		if !ok {
			verdict = "NOT MET"
		}
		fmt.Fprintf(w, "  %-40s %-8s %s\n", what, verdict, got)
	}
	ratio := func(s, n int) float64 { return theirs[key{s, n}].time() / ours[key{s, n}].time() }
	if slices.Contains(sizes, 64<<20) {
		if slices.Contains(worlds, 2) {
			r := ratio(64<<20, 2)
			target("64 MiB x 2 ranks >= 2.5x gloo", r >= 2.5, fmt.Sprintf("%.2fx", r))
			f := busbw(64<<20, 2, ours[key{64 << 20, 2}].time()) / ip
			target("64 MiB x 2 ranks >= 60% of iperf3", f >= 0.6, fmt.Sprintf("%.0f%%", 100*f))
		}
		if slices.Contains(worlds, 4) {
			r := ratio(64<<20, 4)
			target("64 MiB x 4 ranks >= 2.5x gloo", r >= 2.5, fmt.Sprintf("%.2fx", r))
		}
	}
	if slices.Contains(sizes, 4<<10) {
		for _, n := range worlds {
			o, g := ours[key{4 << 10, n}].time(), theirs[key{4 << 10, n}].time()
			target(fmt.Sprintf("4 KiB x %d ranks latency <= gloo", n), o <= g, fmt.Sprintf("%.1f µs vs %.1f µs", o*1e6, g*1e6))
		}
	}
}

func floats(xs []float64, format string) string {
	var parts []string
	for _, x := range xs {
		parts = append(parts, fmt.Sprintf(format, x))
	}
	return strings.Join(parts, " ")
}

func sizesArg(sizes []int) string {
	var parts []string
	for _, s := range sizes {
		parts = append(parts, strconv.Itoa(s))
	}
	return strings.Join(parts, ",")
}

// spawnOurs runs n ranks of this binary: each prints its listener's address,
// reads everyone's addresses, and rank 0 prints the results as JSON lines.
func spawnOurs(sizes []int, n int) ([]result, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	tok := make([]byte, 16)
	_, _ = rand.Read(tok)
	cmds := make([]*exec.Cmd, n)
	stdins := make([]io.WriteCloser, n)
	outs := make([]*bufio.Reader, n)
	defer func() {
		for _, c := range cmds {
			if c != nil && c.Process != nil {
				_ = c.Process.Kill()
				_ = c.Wait()
			}
		}
	}()
	peers := make([]string, n)
	for r := range n {
		c := exec.Command(self, "-child", "-rank", strconv.Itoa(r), "-world", strconv.Itoa(n),
			"-sizes", sizesArg(sizes), "-rounds", "1", "-segment", strconv.Itoa(*segment), "-sockbuf", strconv.Itoa(*sockbuf))
		c.Env = append(os.Environ(), "ALLREDUCE_TOKEN="+hex.EncodeToString(tok))
		c.Stderr = os.Stderr
		stdins[r], _ = c.StdinPipe()
		stdout, _ := c.StdoutPipe()
		if err := c.Start(); err != nil {
			return nil, err
		}
		cmds[r], outs[r] = c, bufio.NewReader(stdout)
		line, err := outs[r].ReadString('\n')
		if err != nil {
			return nil, fmt.Errorf("rank %d: no address: %w", r, err)
		}
		peers[r] = strings.TrimSpace(line)
	}
	for r := range n {
		if _, err := io.WriteString(stdins[r], strings.Join(peers, " ")+"\n"); err != nil {
			return nil, err
		}
	}
	rs, err := readResults(outs[0])
	if err != nil {
		return nil, err
	}
	for r, c := range cmds {
		if err := c.Wait(); err != nil {
			return nil, fmt.Errorf("rank %d: %w", r, err)
		}
		cmds[r] = nil
	}
	return rs, nil
}

func readResults(r io.Reader) ([]result, error) {
	var rs []result
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		var res result
		if err := json.Unmarshal(sc.Bytes(), &res); err != nil {
			return nil, fmt.Errorf("bad result line %q: %w", sc.Text(), err)
		}
		rs = append(rs, res)
	}
	return rs, sc.Err()
}

func runChild(sizes []int) error {
	ln, err := collective.Listen("127.0.0.1:0")
	if err != nil {
		return err
	}
	fmt.Println(ln.Addr().String())
	line, err := bufio.NewReader(os.Stdin).ReadString('\n')
	if err != nil {
		return fmt.Errorf("read peers: %w", err)
	}
	ctx := context.Background()
	c, err := collective.Connect(ctx, ln, strings.Fields(line), collective.Options{
		Rank: *rank, Size: *world, Token: os.Getenv("ALLREDUCE_TOKEN"),
		Timeout: 5 * time.Minute, ConnectTimeout: time.Minute,
		SegmentBytes: *segment, SocketBuffer: *sockbuf,
	})
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }()
	enc := json.NewEncoder(os.Stdout)
	for _, size := range sizes {
		buf := make([]float32, size/4)
		for i := range buf {
			buf[i] = 1
		}
		if err := c.AllReduceFloat32(ctx, buf, collective.Sum); err != nil { // warm-up
			return err
		}
		n := iters(size)
		res := result{Size: size, Ranks: *world}
		for range *rounds {
			if err := c.Barrier(ctx); err != nil {
				return err
			}
			t0 := time.Now()
			u0, s0 := cpuTimes()
			for range n {
				if err := c.AllReduceFloat32(ctx, buf, collective.Sum); err != nil {
					return err
				}
			}
			u1, s1 := cpuTimes()
			res.Seconds = append(res.Seconds, time.Since(t0).Seconds()/float64(n))
			res.User = append(res.User, (u1-u0)/float64(n))
			res.Sys = append(res.Sys, (s1-s0)/float64(n))
		}
		if *rank == 0 {
			if err := enc.Encode(res); err != nil {
				return err
			}
		}
	}
	return c.Barrier(ctx)
}

// cpuTimes is this process's user and system CPU time in seconds.
func cpuTimes() (user, sys float64) {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano()).Seconds(), time.Duration(ru.Stime.Nano()).Seconds()
}

// peerScript finds gloo_peer.py next to this command's source.
func peerScript() (string, error) {
	for _, p := range []string{"bench/allreduce/gloo_peer.py", "gloo_peer.py"} {
		if _, err := os.Stat(p); err == nil {
			return filepath.Abs(p)
		}
	}
	return "", fmt.Errorf("gloo_peer.py not found: run from the repository root")
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer func() { _ = ln.Close() }()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func spawnGloo(sizes []int, n int) ([]result, error) {
	script, err := peerScript()
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	cmds := make([]*exec.Cmd, n)
	defer func() {
		for _, c := range cmds {
			if c != nil && c.Process != nil {
				_ = c.Process.Kill()
				_ = c.Wait()
			}
		}
	}()
	var out io.Reader
	for r := range n {
		c := exec.Command(*python, script, strconv.Itoa(r), strconv.Itoa(n), strconv.Itoa(port), sizesArg(sizes), "1")
		c.Stderr = os.Stderr
		if r == 0 {
			out, _ = c.StdoutPipe()
		}
		if err := c.Start(); err != nil {
			return nil, err
		}
		cmds[r] = c
	}
	rs, err := readResults(out)
	if err != nil {
		return nil, err
	}
	for r, c := range cmds {
		if err := c.Wait(); err != nil {
			return nil, fmt.Errorf("rank %d: %w", r, err)
		}
		cmds[r] = nil
	}
	return rs, nil
}

// runIperf measures one 2-second single-stream iperf3 run over loopback, in
// GB/s (the receiver's count).
func runIperf() (float64, error) {
	port, err := freePort()
	if err != nil {
		return 0, err
	}
	srv := exec.Command("iperf3", "-s", "-1", "-p", strconv.Itoa(port))
	if err := srv.Start(); err != nil {
		return 0, err
	}
	defer func() { _ = srv.Process.Kill(); _ = srv.Wait() }()
	var out []byte
	for try := 0; ; try++ { // the server may not listen yet
		out, err = exec.Command("iperf3", "-c", "127.0.0.1", "-p", strconv.Itoa(port), "-t", "2", "-J").Output()
		if err == nil || try == 20 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		return 0, fmt.Errorf("%w: %s", err, out)
	}
	var rep struct {
		End struct {
			SumReceived struct {
				BitsPerSecond float64 `json:"bits_per_second"`
			} `json:"sum_received"`
		} `json:"end"`
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		return 0, err
	}
	return rep.End.SumReceived.BitsPerSecond / 8 / 1e9, nil
}
