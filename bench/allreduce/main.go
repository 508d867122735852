// Command allreduce measures tempotrain's ring all-reduce, over each of its
// two transports, against PyTorch's gloo all_reduce and against iperf3, in
// the same run, with every rank a separate OS process on this host:
//
//	go run ./bench/allreduce              # default sweep, a few minutes
//	go run ./bench/allreduce -full        # every power of 4 from 4 KiB to 256 MiB
//	go run ./bench/allreduce -sizes 64M -ranks 2,4 -rounds 9
//
// The sides:
//
//   - ours-tcp: collective.TransportTCP, ranks connected over loopback TCP;
//   - ours-tls (-transports tcp,tls): the same with Options.Encrypt, every
//     link a TLS 1.3 session bound to the token: what encryption costs;
//   - ours-shm: collective.TransportSHM, the same-host shared-memory
//     transport (as NCCL's SHM transport): data through memory mapped by both
//     neighbours, TCP only for the handshake, doorbells and liveness. Its
//     numbers hold for ranks on one host, not across a network;
//   - ours-shared: shared-memory links as ours-shm, and every rank's buffer
//     allocated with Comm.AllocShared, so that every rank can reach every
//     other's (as NCCL's registered buffers): all-reduces of 64 KiB and
//     more then run the direct algorithm of collective/shared.go instead of
//     the ring. On one host only, and only for buffers so allocated (the
//     runtime's gradient buffers are; a caller's own slices take the ring);
//   - gloo: PyTorch's gloo over loopback TCP (bench/allreduce/gloo_peer.py);
//   - mem-floor: not an all-reduce but a reference for one: n threads (one
//     process), each reading and writing its own buffer of the size once, in
//     place, through a block in cache with the runtime's memmove, at the
//     same time. Every rank of an in-place all-reduce must do at least that
//     much memory traffic, and on this VM the threads share the memory
//     bandwidth. It is not a hard bound: a loop faster than memmove's
//     (ours-shared's AVX2 kernels) comes in under it;
//   - iperf3: one loopback TCP stream (-c 127.0.0.1, 1 s), the ceiling of a
//     single TCP flow here, measured after every round of the largest size
//     so that it meets the same load as the all-reduces.
//
// For each world size it starts n ranks of this same binary (-child) per
// transport and n ranks of gloo_peer.py (python3 with torch), all groups
// connected at once and idle until told to measure. For each size and round
// it then measures every side back to back, in an order that rotates from
// round to round, so that all meet the same machine load (other processes on
// a shared machine make single runs unreliable). One measurement is the mean
// time of iters(size) back-to-back float32 all-reduces between barriers; the
// table shows medians over rounds and the ratios of those medians. busbw =
// bytes * 2(n-1)/n / time, the nccl-tests definition: what each rank's link
// carries. The cpu columns are rank 0's processor time per all-reduce: the
// cost of an operation whatever the load.
//
// Needs python3 with torch (Debian python3-torch) and iperf3; -gloo=false or
// -iperf=false skip either; -transports picks ours.
package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
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
	"sync"
	"syscall"
	"time"

	"github.com/tempotrain/tempotrain/bench/internal/hostinfo"
	"github.com/tempotrain/tempotrain/collective"
)

var (
	sizesFlag  = flag.String("sizes", "4K,64K,1M,16M,64M", "buffer sizes in bytes (K, M suffixes)")
	full       = flag.Bool("full", false, "every power of 4 from 4K to 256M (overrides -sizes)")
	ranksFlag  = flag.String("ranks", "2,4,8", "world sizes")
	rounds     = flag.Int("rounds", 5, "measurements of each size and world size, every side back to back; the table shows medians (at least 5 for reporting)")
	transports = flag.String("transports", "tcp,shm,shared", "our sides to measure: tcp (loopback TCP), tls (loopback TCP with Options.Encrypt: TLS 1.3), shm (same-host shared memory), shared (shm with buffers from Comm.AllocShared)")
	gloo       = flag.Bool("gloo", true, "measure PyTorch gloo")
	floor      = flag.Bool("floor", true, "measure the memory floor (n threads each reading and writing its buffer once)")
	floorChild = flag.Bool("floor-child", false, "internal: run the memory floor for -world threads")
	iperf      = flag.Bool("iperf", true, "measure iperf3 single-stream loopback")
	python     = flag.String("python", "/usr/bin/python3", "python with torch for the gloo peer")
	segment    = flag.Int("segment", 0, "collective.Options.SegmentBytes (0: default)")
	sockbuf    = flag.Int("sockbuf", 0, "collective.Options.SocketBuffer (0: default, -1: kernel autotuning)")
	congestion = flag.String("congestion", "", "collective.Options.Congestion: TCP congestion control of our links (empty: the default, cubic; system: the kernel's default)")
	transport  = flag.String("transport", "tcp", "internal: transport of a child (tcp, tls, shm, shared)")
	child      = flag.Bool("child", false, "internal: run as one rank")
	rank       = flag.Int("rank", 0, "internal: rank of a child")
	world      = flag.Int("world", 0, "internal: world size of a child")
)

// iters is how many all-reduces one measurement averages: enough to last
// milliseconds for small buffers. gloo_peer.py uses the same rule.
func iters(size int) int { return max(1, min(200, (8<<20)/size)) }

// result is one measurement, reported by rank 0: seconds per all-reduce, and
// rank 0's processor time (user, system) per all-reduce.
type result struct {
	Size    int     `json:"size"`
	Ranks   int     `json:"ranks"`
	Seconds float64 `json:"seconds"`
	User    float64 `json:"user"`
	Sys     float64 `json:"sys"`
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
	if *floorChild {
		if err := runFloor(); err != nil {
			log.Fatalf("floor: %v", err)
		}
		return
	}
	if *child {
		if err := runChild(); err != nil {
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
	host := hostinfo.Start(os.Stdout, quiet)
	if *netnsRates != "" {
		err = runNetns(sizes, worlds)
	} else {
		err = run(sizes, worlds)
	}
	if err != nil {
		log.Fatal(err)
	}
	host.End()
}

// quiet is -wait-quiet.
var quiet = hostinfo.Flags(nil)

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

// side is one contender: a transport of ours, or gloo.
type side struct {
	name  string // "ours-tcp", "ours-shm", "gloo"
	start func(n int) (*group, error)
	m     map[key]*samples
}

func sides() ([]*side, error) {
	var out []*side
	for _, t := range strings.Split(*transports, ",") {
		t = strings.TrimSpace(t)
		if t == "" {
			continue
		}
		if t != "tcp" && t != "tls" && t != "shm" && t != "shared" {
			return nil, fmt.Errorf("unknown transport %q (want tcp, tls, shm, shared)", t)
		}
		out = append(out, &side{name: "ours-" + t, start: func(n int) (*group, error) { return startOurs(n, t) }, m: map[key]*samples{}})
	}
	if *gloo {
		out = append(out, &side{name: "gloo", start: startGloo, m: map[key]*samples{}})
	}
	if *floor {
		out = append(out, &side{name: "mem-floor", start: startFloor, m: map[key]*samples{}})
	}
	if len(out) == 0 {
		return nil, errors.New("nothing to measure")
	}
	return out, nil
}

func run(sizes, worlds []int) error {
	ss, err := sides()
	if err != nil {
		return err
	}
	var ip *iperfServer
	if *iperf {
		if ip, err = startIperf(); err != nil {
			return fmt.Errorf("iperf3: %w", err)
		}
		defer ip.stop()
	}
	start := time.Now()
	for _, n := range worlds {
		if err := measureWorld(sizes, n, ss, ip); err != nil {
			return fmt.Errorf("%d ranks: %w", n, err)
		}
		log.Printf("%d ranks done (%v)", n, time.Since(start).Round(time.Second))
	}
	var iperfGBs []float64
	if ip != nil {
		iperfGBs = ip.gbs
	}
	report(os.Stdout, sizes, worlds, ss, iperfGBs)
	return nil
}

func measureWorld(sizes []int, n int, ss []*side, ip *iperfServer) error {
	groups := make([]*group, len(ss))
	defer func() {
		for _, g := range groups {
			if g != nil {
				g.kill()
			}
		}
	}()
	for i, sd := range ss {
		g, err := sd.start(n)
		if err != nil {
			return fmt.Errorf("%s: %w", sd.name, err)
		}
		groups[i] = g
	}
	for _, size := range sizes {
		for round := range *rounds {
			for i := range ss {
				// Rotate who goes first, so that no side always meets the
				// machine just after another's burst.
				k := (i + round) % len(ss)
				r, err := groups[k].measure(size)
				if err != nil {
					return fmt.Errorf("%s: %w", ss[k].name, err)
				}
				add(ss[k].m, r)
			}
			if ip != nil && size == slices.Max(sizes) {
				if err := ip.measure(); err != nil {
					return err
				}
			}
		}
	}
	for i, g := range groups {
		if err := g.close(); err != nil {
			return fmt.Errorf("%s: %w", ss[i].name, err)
		}
		groups[i] = nil
	}
	return nil
}

// samples gathers one side's measurements of one size and world size.
type samples struct{ seconds, user, sys []float64 }

func add(m map[key]*samples, r result) {
	k := key{r.Size, r.Ranks}
	if m[k] == nil {
		m[k] = &samples{}
	}
	m[k].seconds = append(m[k].seconds, r.Seconds)
	m[k].user = append(m[k].user, r.User)
	m[k].sys = append(m[k].sys, r.Sys)
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

func report(w io.Writer, sizes, worlds []int, ss []*side, iperfGBs []float64) {
	ip := median(iperfGBs)
	fmt.Fprintf(w, "\n%d rounds, medians; busbw = bytes*2(n-1)/n/time; %d CPUs; iperf3 single stream loopback, one 1 s run after each round\n"+
		"of the largest size: median %.2f GB/s (runs: %s)\n", *rounds, runtime.NumCPU(), ip, floats(iperfGBs, "%.2f"))
	fmt.Fprintln(w, "ours-shm: same-host shared-memory transport (as NCCL's SHM), valid for ranks on one host only;")
	fmt.Fprintln(w, "ours-shared: ours-shm with buffers from Comm.AllocShared (>= 64 KiB: direct all-reduce, no ring), one host only;")
	fmt.Fprintln(w, "ours-tcp and gloo: loopback TCP. x gloo = gloo's time / ours (>1: ours faster); % iperf3 = our busbw / iperf3's.")
	fmt.Fprintln(w, "mem-floor: every rank's buffer read and written once by memmove, n threads at once: the traffic an in-place all-reduce needs")
	fmt.Fprintln(w, "  at least, as a reference (a faster kernel than memmove's beats it: ours-shared does here) (cpu: per thread).")
	var gl *side
	var ours []*side
	for _, sd := range ss {
		switch {
		case sd.name == "gloo":
			gl = sd
		case strings.HasPrefix(sd.name, "ours-"):
			ours = append(ours, sd)
		}
	}
	for _, n := range worlds {
		fmt.Fprintf(w, "\n%d ranks\n%-8s %-9s %11s %9s %8s %9s  %s\n", n, "size", "side", "µs", "busGB/s", "x gloo", "% iperf3", "rank 0 cpu usr+sys")
		for _, s := range sizes {
			k := key{s, n}
			for _, sd := range ss {
				t := sd.m[k].time()
				u, sy := sd.m[k].cpu()
				vs := "-"
				if gl != nil && sd != gl {
					vs = fmt.Sprintf("%.2f", gl.m[k].time()/t)
				}
				fmt.Fprintf(w, "%-8s %-9s %11.1f %9.3f %8s %8.0f%%  %6.0f+%-6.0fµs\n", human(s), sd.name, t*1e6, busbw(s, n, t),
					vs, 100*busbw(s, n, t)/ip, u*1e6, sy*1e6)
			}
		}
	}
	fmt.Fprintln(w, "\n(cpu: rank 0's processor time per all-reduce; wall time above it means waiting on the other ranks or the machine's load)")
	if gl == nil {
		return
	}
	fmt.Fprintln(w, "\nTargets (issue 3), per transport:")
	target := func(what string, ok bool, got string) {
		verdict := "MET"
		if !ok {
			verdict = "NOT MET"
		}
		fmt.Fprintf(w, "    %-36s %-8s %s\n", what, verdict, got)
	}
	for _, sd := range ours {
		fmt.Fprintf(w, "  %s\n", sd.name)
		ratio := func(s, n int) float64 { return gl.m[key{s, n}].time() / sd.m[key{s, n}].time() }
		if slices.Contains(sizes, 64<<20) {
			if slices.Contains(worlds, 2) {
				r := ratio(64<<20, 2)
				target("64 MiB x 2 ranks >= 2.5x gloo", r >= 2.5, fmt.Sprintf("%.2fx", r))
				f := busbw(64<<20, 2, sd.m[key{64 << 20, 2}].time()) / ip
				target("64 MiB x 2 ranks >= 60% of iperf3", f >= 0.6, fmt.Sprintf("%.0f%%", 100*f))
			}
			if slices.Contains(worlds, 4) {
				r := ratio(64<<20, 4)
				target("64 MiB x 4 ranks >= 2.5x gloo", r >= 2.5, fmt.Sprintf("%.2fx", r))
			}
		}
		if slices.Contains(sizes, 4<<10) {
			for _, n := range worlds {
				o, g := sd.m[key{4 << 10, n}].time(), gl.m[key{4 << 10, n}].time()
				target(fmt.Sprintf("4 KiB x %d ranks latency <= gloo", n), o <= g, fmt.Sprintf("%.1f µs vs %.1f µs", o*1e6, g*1e6))
			}
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

// group is one side's n rank processes, driven over their stdin: every line
// is a buffer size to measure once, and rank 0 answers with one JSON line.
// End of input ends them.
type group struct {
	cmds   []*exec.Cmd
	stdins []io.WriteCloser
	out    *bufio.Scanner // rank 0's stdout
}

// start launches n ranks; args(r) is rank r's command line. If addresses is
// set, each rank first prints its listener's address and then reads all of
// them (ours); gloo's ranks meet at a TCP port instead.
func start(n int, addresses bool, env []string, args func(r int) []string) (*group, error) {
	g := &group{}
	outs := make([]*bufio.Reader, n)
	for r := range n {
		a := args(r)
		c := exec.Command(a[0], a[1:]...)
		if rankHosts != nil {
			c = rankHosts[r].Command(a[0], a[1:]...)
		}
		c.Env = append(os.Environ(), env...)
		c.Stderr = os.Stderr
		stdin, err := c.StdinPipe()
		if err != nil {
			return nil, err
		}
		var stdout io.Reader
		if r == 0 || addresses {
			if stdout, err = c.StdoutPipe(); err != nil {
				return nil, err
			}
		}
		if err := c.Start(); err != nil {
			g.kill()
			return nil, err
		}
		g.cmds, g.stdins = append(g.cmds, c), append(g.stdins, stdin)
		if stdout != nil {
			outs[r] = bufio.NewReader(stdout)
		}
	}
	if addresses {
		peers := make([]string, n)
		for r := range n {
			line, err := outs[r].ReadString('\n')
			if err != nil {
				g.kill()
				return nil, fmt.Errorf("rank %d: no address: %w", r, err)
			}
			peers[r] = strings.TrimSpace(line)
		}
		if err := g.send(strings.Join(peers, " ")); err != nil {
			g.kill()
			return nil, err
		}
	}
	g.out = bufio.NewScanner(outs[0])
	return g, nil
}

func (g *group) send(line string) error {
	for r, w := range g.stdins {
		if _, err := io.WriteString(w, line+"\n"); err != nil {
			return fmt.Errorf("rank %d: %w", r, err)
		}
	}
	return nil
}

func (g *group) measure(size int) (result, error) {
	var res result
	if err := g.send(strconv.Itoa(size)); err != nil {
		return res, err
	}
	if !g.out.Scan() {
		return res, fmt.Errorf("rank 0 ended without a result: %v (%v)", g.out.Err(), g.wait())
	}
	if err := json.Unmarshal(g.out.Bytes(), &res); err != nil {
		return res, fmt.Errorf("bad result line %q: %w", g.out.Text(), err)
	}
	return res, nil
}

// close ends the ranks by closing their input and waits for them.
func (g *group) close() error {
	for _, w := range g.stdins {
		_ = w.Close()
	}
	return g.wait()
}

func (g *group) wait() error {
	var first error
	for r, c := range g.cmds {
		if c == nil {
			continue
		}
		if err := c.Wait(); err != nil && first == nil {
			first = fmt.Errorf("rank %d: %w", r, err)
		}
		g.cmds[r] = nil
	}
	return first
}

// kill ends whatever ranks are still running (after an error).
func (g *group) kill() {
	for r, c := range g.cmds {
		if c != nil {
			_ = c.Process.Kill()
			_ = c.Wait()
			g.cmds[r] = nil
		}
	}
}

func startOurs(n int, transport string) (*group, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	tok := make([]byte, 16)
	_, _ = rand.Read(tok)
	return start(n, true, []string{"ALLREDUCE_TOKEN=" + hex.EncodeToString(tok)}, func(r int) []string {
		listen := "127.0.0.1"
		if rankHosts != nil {
			listen = rankHosts[r].Addr
		}
		return []string{self, "-child", "-rank", strconv.Itoa(r), "-world", strconv.Itoa(n),
			"-segment", strconv.Itoa(*segment), "-sockbuf", strconv.Itoa(*sockbuf), "-congestion", *congestion, "-transport", transport, "-listen", listen}
	})
}

// startFloor starts one process that measures the memory floor of n ranks
// (see the command's doc), driven like a group.
func startFloor(n int) (*group, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	return start(1, false, nil, func(int) []string {
		return []string{self, "-floor-child", "-world", strconv.Itoa(n)}
	})
}

// runFloor measures, for each size it reads, iters(size) passes in which
// -world goroutines each add a small cached block into their own buffer of
// that size, in place: one read and one write of every byte, the least an
// in-place all-reduce's rank does. It reports the time per pass and the
// processor time per pass and thread.
func runFloor() error {
	n := *world
	enc := json.NewEncoder(os.Stdout)
	block := make([]float32, 64<<10) // 256 KiB: stays in cache
	var bufs [][]float32
	pass := func() {
		var wg sync.WaitGroup
		for _, b := range bufs {
			wg.Go(func() {
				for off := 0; off < len(b); off += len(block) {
					d := b[off:min(off+len(block), len(b))]
					// In place through a block in cache, by the runtime's
					// vector memmove: a read and a write of each byte at
					// memory speed (a scalar += loop here was bound by
					// the processor, not by memory).
					copy(block, d)
					copy(d, block[:len(d)])
				}
			})
		}
		wg.Wait()
	}
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		size, err := strconv.Atoi(in.Text())
		if err != nil {
			return err
		}
		if len(bufs) == 0 || len(bufs[0]) != size/4 {
			bufs = make([][]float32, n)
			for i := range bufs {
				bufs[i] = make([]float32, size/4)
			}
			pass() // warm-up: pages faulted in
		}
		iters := iters(size)
		t0 := time.Now()
		u0, s0 := cpuTimes()
		for range iters {
			pass()
		}
		u1, s1 := cpuTimes()
		per := float64(iters * n)
		if err := enc.Encode(result{Size: size, Ranks: n, Seconds: time.Since(t0).Seconds() / float64(iters),
			User: (u1 - u0) / per, Sys: (s1 - s0) / per}); err != nil {
			return err
		}
	}
	return in.Err()
}

func startGloo(n int) (*group, error) {
	script, err := peerScript()
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	addr, env := "127.0.0.1", []string(nil)
	if rankHosts != nil { // rank 0's host; gloo binds the host's link
		addr, env = rankHosts[0].Addr, []string{"GLOO_SOCKET_IFNAME=eth0"}
	}
	return start(n, false, env, func(r int) []string {
		return []string{*python, script, strconv.Itoa(r), strconv.Itoa(n), strconv.Itoa(port), addr}
	})
}

// runChild is one of our ranks: it prints its address, reads the peers'
// addresses, then measures each size it reads (see group).
func runChild() error {
	ln, err := collective.Listen(net.JoinHostPort(*listenHost, "0"))
	if err != nil {
		return err
	}
	fmt.Println(ln.Addr().String())
	in := bufio.NewScanner(os.Stdin)
	if !in.Scan() {
		return fmt.Errorf("read peers: %v", in.Err())
	}
	ctx := context.Background()
	// Each side is one transport, never a silent mix: shm demands shared
	// memory on every link.
	tr := collective.TransportTCP
	if *transport == "shm" || *transport == "shared" {
		tr = collective.TransportSHM
	}
	c, err := collective.Connect(ctx, ln, strings.Fields(in.Text()), collective.Options{
		Rank: *rank, Size: *world, Token: os.Getenv("ALLREDUCE_TOKEN"),
		Timeout: 5 * time.Minute, ConnectTimeout: time.Minute,
		SegmentBytes: *segment, SocketBuffer: *sockbuf, Congestion: *congestion, Transport: tr, Encrypt: *transport == "tls",
	})
	if err != nil {
		return err
	}
	if *rank == 0 && tr == collective.TransportTCP {
		log.Printf("%s, %d ranks: rank 0 sends with TCP congestion control %q", *transport, *world, c.Congestion())
	}
	defer func() { _ = c.Close() }()
	enc := json.NewEncoder(os.Stdout)
	var buf []float32
	var shared *collective.SharedBuffer
	for in.Scan() {
		size, err := strconv.Atoi(in.Text())
		if err != nil {
			return err
		}
		if size/4 != len(buf) {
			buf = make([]float32, size/4)
			if *transport == "shared" {
				if shared != nil {
					shared.Free()
				}
				if shared, err = c.AllocShared(ctx, size); err != nil {
					return err
				}
				if !shared.Shared() {
					return errors.New("AllocShared: the group could not share memory")
				}
				buf = shared.Float32s()[:size/4]
			}
			for i := range buf {
				buf[i] = 1
			}
			if err := c.AllReduceFloat32(ctx, buf, collective.Sum); err != nil { // warm-up
				return err
			}
		}
		n := iters(size)
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
		res := result{Size: size, Ranks: *world, Seconds: time.Since(t0).Seconds() / float64(n),
			User: (u1 - u0) / float64(n), Sys: (s1 - s0) / float64(n)}
		if *rank == 0 {
			if err := enc.Encode(res); err != nil {
				return err
			}
		}
	}
	if err := in.Err(); err != nil {
		return err
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

// iperfServer is an iperf3 server, measured by one 1-second single-stream
// client run after each round of the largest size, so that the ceiling is
// taken under the same load as the all-reduces it is compared with.
type iperfServer struct {
	port int
	srv  *exec.Cmd
	gbs  []float64 // GB/s, the receiver's count, one per run
}

func startIperf() (*iperfServer, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	srv := exec.Command("iperf3", "-s", "-p", strconv.Itoa(port))
	if err := srv.Start(); err != nil {
		return nil, err
	}
	return &iperfServer{port: port, srv: srv}, nil
}

func (s *iperfServer) measure() error {
	for tries := 0; ; tries++ {
		gbs, err := iperfOnce(s.port)
		if err == nil && gbs > 0 {
			s.gbs = append(s.gbs, gbs)
			return nil
		}
		// The server may not listen yet, or be busy with the last run.
		if tries > 20 {
			return fmt.Errorf("iperf3: no result after %d tries: %v", tries, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (s *iperfServer) stop() {
	_ = s.srv.Process.Kill()
	_ = s.srv.Wait()
}

func iperfOnce(port int) (float64, error) {
	b, err := exec.Command("iperf3", "-c", "127.0.0.1", "-p", strconv.Itoa(port), "-t", "1", "-J").Output()
	if err != nil {
		return 0, fmt.Errorf("%w: %s", err, b)
	}
	return iperfGBs(b)
}

// iperfGBs reads the receiver's GB/s from iperf3's JSON report, or the
// error it reports (iperf3 -J exits 0 when it could not connect).
func iperfGBs(b []byte) (float64, error) {
	var rep struct {
		Error string
		End   struct {
			SumReceived struct {
				BitsPerSecond float64 `json:"bits_per_second"`
			} `json:"sum_received"`
		} `json:"end"`
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		return 0, err
	}
	if rep.Error != "" {
		return 0, errors.New(rep.Error)
	}
	if rep.End.SumReceived.BitsPerSecond <= 0 {
		return 0, errors.New("no bits received")
	}
	return rep.End.SumReceived.BitsPerSecond / 8 / 1e9, nil
}
