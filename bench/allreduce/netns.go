package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"math"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tempotrain/tempotrain/collective"
	"github.com/tempotrain/tempotrain/internal/netns"
)

// The -netns mode: every rank on a host of its own (a network namespace
// with one veth into a bridge, internal/netns), both of our ranks and
// gloo's, the links rate-limited with tc tbf on both veth ends, one rate
// after another. Needs root.
var (
	netnsRates = flag.String("netns", "", "run each rank on a network namespace of its own (root), with links limited to each of these rates in Mbit/s in turn (0: unlimited veth), e.g. 1000,5000,10000,0; measures ours-tcp, gloo and the iperf3 ring")
	netnsCC    = flag.String("netns-cc", "", "-netns: the hosts' default TCP congestion control (what gloo and iperf3 use; ours sets -congestion on its sockets); empty: the machine's")
	ringSecs   = flag.Int("ring-seconds", 2, "-netns: length of each iperf3 ring measurement (one after each round of the largest size, at most 3; 0: none)")
	listenHost = flag.String("listen", "127.0.0.1", "internal: the address a child listens on")
)

// rankHosts, in -netns mode, is where each rank runs: rank r in
// rankHosts[r].
var rankHosts []*netns.Host

// runNetns measures every rate of -netns for every world size and prints
// one table.
func runNetns(sizes, worlds []int) error {
	var rates []int
	for _, f := range strings.Split(*netnsRates, ",") {
		r, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || r < 0 {
			return fmt.Errorf("-netns: bad rate %q (Mbit/s, 0 for unlimited)", f)
		}
		rates = append(rates, r)
	}
	if err := netns.Available(); err != nil {
		return err
	}
	*floor, *iperf = false, false // the table is ours against gloo (-gloo=false: ours alone, to profile)
	if *netnsCC != "" {
		restore, err := allowCongestion(*netnsCC)
		if err != nil {
			return err
		}
		defer restore()
	}
	*transports = "tcp"
	type cell struct {
		rate, n int
		ss      []*side
		ring    []float64 // the iperf3 ring's GB/s per link, one per run
		busy    []float64 // the share of the machine's CPU time busy during it
	}
	var cells []cell
	start := time.Now()
	for _, n := range worlds {
		nw, err := netns.New("ttar", "10.79.9")
		if err != nil {
			return err
		}
		err = func() error {
			defer nw.Close()
			rankHosts = nil
			for range n {
				h, err := nw.AddHost()
				if err != nil {
					return err
				}
				rankHosts = append(rankHosts, h)
			}
			for _, rate := range rates {
				for _, h := range rankHosts {
					if err := h.Impair(netns.Impairment{RateMbit: rate}); err != nil {
						return err
					}
					if *netnsCC != "" {
						if out, err := h.Command("sysctl", "-w", "net.ipv4.tcp_congestion_control="+*netnsCC).CombinedOutput(); err != nil {
							return fmt.Errorf("%s: %w: %s", h.Name, err, out)
						}
					}
				}
				ss, err := sides()
				if err != nil {
					return err
				}
				if err := measureWorld(sizes, n, ss, nil); err != nil {
					return fmt.Errorf("%d ranks at %s: %w", n, rateName(rate), err)
				}
				var ring, busy []float64
				for i := 0; *ringSecs > 0 && i < min(*rounds, 3); i++ {
					gbs, b, err := iperfRing(rankHosts, *ringSecs)
					if err != nil {
						return fmt.Errorf("%d hosts at %s: iperf3 ring: %w", n, rateName(rate), err)
					}
					ring, busy = append(ring, gbs), append(busy, b)
				}
				cells = append(cells, cell{rate, n, ss, ring, busy})
				log.Printf("%d ranks at %s done (%v)", n, rateName(rate), time.Since(start).Round(time.Second))
			}
			return nil
		}()
		rankHosts = nil
		if err != nil {
			return err
		}
	}
	w := io.Writer(os.Stdout)
	fmt.Fprintf(w, "\nall-reduce over network namespaces (a host per rank, veth links, tc tbf on both ends), float32 sum, medians of %d rounds\n", *rounds)
	cc := *netnsCC
	if cc == "" {
		b, _ := os.ReadFile("/proc/sys/net/ipv4/tcp_congestion_control")
		cc = strings.TrimSpace(string(b)) + " (the machine's default)"
	}
	ours := *congestion
	if ours == "" {
		ours = collective.DefaultCongestion
	}
	fmt.Fprintf(w, "TCP congestion control: ours %s (Options.Congestion), gloo and iperf3 %s\n", ours, cc)
	fmt.Fprintf(w, "iperf3 ring: every host sends one iperf3 stream (1 MiB writes) to the next host at once, as a ring all-reduce's links carry;\n"+
		"its mean per link is what TCP alone moves over these links on this machine, with no reduction: ours/ring = our busbw / that;\n"+
		"CPUs busy: the share of all %d CPUs' time not idle while the ring ran (/proc/stat).\n", runtime.NumCPU())
	fmt.Fprintln(w, "| link | ranks | size | ours-tcp ms | ours busbw GB/s | % of link | gloo ms | gloo busbw GB/s | % of link | ours/gloo | iperf3 ring GB/s | % of link | ours/ring | CPUs busy | rank 0 cpu ms ours / gloo |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, c := range cells {
		for _, size := range sizes {
			k := key{size, c.n}
			ours, gl := c.ss[0].m[k].time(), math.NaN()
			gu, gs := math.NaN(), math.NaN()
			if len(c.ss) > 1 {
				gl = c.ss[1].m[k].time()
				gu, gs = c.ss[1].m[k].cpu()
			}
			ob, gb := busbw(size, c.n, ours), busbw(size, c.n, gl)
			pct := func(b float64) string {
				if c.rate == 0 {
					return "-"
				}
				return fmt.Sprintf("%.0f%%", 100*b/(float64(c.rate)/8000))
			}
			ou, os := c.ss[0].m[k].cpu()
			ring := median(c.ring)
			fmt.Fprintf(w, "| %s | %d | %s | %.2f | %.3f | %s | %.2f | %.3f | %s | %.2fx | %.3f | %s | %.2fx | %.0f%% | %.1f / %.1f |\n", rateName(c.rate), c.n, human(size),
				ours*1e3, ob, pct(ob), gl*1e3, gb, pct(gb), gl/ours, ring, pct(ring), ob/ring, 100*median(c.busy), (ou+os)*1e3, (gu+gs)*1e3)
		}
	}
	return nil
}

func rateName(mbit int) string {
	switch {
	case mbit == 0:
		return "unlimited"
	case mbit%1000 == 0:
		return fmt.Sprintf("%d Gbit/s", mbit/1000)
	}
	return fmt.Sprintf("%d Mbit/s", mbit)
}

// allowCongestion adds name to net.ipv4.tcp_allowed_congestion_control,
// which a network namespace other than the first may take as its default
// only from; restore puts the list back.
func allowCongestion(name string) (restore func(), err error) {
	const path = "/proc/sys/net/ipv4/tcp_allowed_congestion_control"
	old, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	list := strings.Fields(string(old))
	if slices.Contains(list, name) {
		return func() {}, nil
	}
	if err := os.WriteFile(path, []byte(strings.Join(append(list, name), " ")), 0o644); err != nil {
		return nil, fmt.Errorf("-netns-cc %s: %w (is it in tcp_available_congestion_control?)", name, err)
	}
	return func() { _ = os.WriteFile(path, old, 0o644) }, nil
}

// iperfRing measures what TCP alone moves over the hosts' links in a ring
// all-reduce's pattern: host i sends one iperf3 stream to host i+1, all at
// once, for secs seconds. It returns the mean of the streams' GB/s (the
// receivers' counts) and the share of the machine's CPU time that was busy
// meanwhile (the servers' and clients' start included: about 0.1 s).
func iperfRing(hosts []*netns.Host, secs int) (gbs float64, busy float64, err error) {
	var servers []*exec.Cmd
	defer func() {
		for _, s := range servers {
			_ = s.Process.Kill()
			_ = s.Wait()
		}
	}()
	for _, h := range hosts {
		s := h.Command("iperf3", "-s", "-1", "-B", h.Addr, "-p", "5201")
		if err := s.Start(); err != nil {
			return 0, 0, err
		}
		servers = append(servers, s)
	}
	var (
		wg    sync.WaitGroup
		flows = make([]float64, len(hosts))
		errs  = make([]error, len(hosts))
	)
	b0, t0 := machineCPU()
	for i, h := range hosts {
		to := hosts[(i+1)%len(hosts)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			// The server may not listen yet: a refused connection is tried
			// again (iperf3 -J exits 0 then, its report says why).
			for tries := 0; ; tries++ {
				out, err := h.Command("iperf3", "-c", to.Addr, "-p", "5201", "-t", strconv.Itoa(secs), "-l", "1M", "-J").Output()
				if err == nil {
					flows[i], err = iperfGBs(out)
				}
				if err == nil {
					return
				}
				if tries == 20 {
					errs[i] = fmt.Errorf("%s to %s: %w: %s", h.Addr, to.Addr, err, out)
					return
				}
				time.Sleep(50 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	b1, t1 := machineCPU()
	if err := errors.Join(errs...); err != nil {
		return 0, 0, err
	}
	for _, g := range flows {
		gbs += g / float64(len(flows))
	}
	if t1 > t0 {
		busy = float64(b1-b0) / float64(t1-t0)
	}
	return gbs, busy, nil
}

// machineCPU reads the machine's CPU time from /proc/stat in clock ticks: the
// busy part (all but idle and iowait) and the total. Zeros where it cannot.
func machineCPU() (busy, total uint64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 6 || f[0] != "cpu" {
		return 0, 0
	}
	for i, v := range f[1:] {
		n, _ := strconv.ParseUint(v, 10, 64)
		total += n
		if i != 3 && i != 4 { // idle, iowait
			busy += n
		}
	}
	return busy, total
}
