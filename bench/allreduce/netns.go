package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/tempotrain/tempotrain/internal/netns"
)

// The -netns mode: every rank on a host of its own (a network namespace
// with one veth into a bridge, internal/netns), both of our ranks and
// gloo's, the links rate-limited with tc tbf on both veth ends, one rate
// after another. Needs root.
var (
	netnsRates = flag.String("netns", "", "run each rank on a network namespace of its own (root), with links limited to each of these rates in Mbit/s in turn (0: unlimited veth), e.g. 1000,5000,10000,0; measures ours-tcp and gloo")
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
	*floor, *iperf, *gloo = false, false, true // the table is ours against gloo
	*transports = "tcp"
	type cell struct {
		rate, n int
		ss      []*side
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
				}
				ss, err := sides()
				if err != nil {
					return err
				}
				if err := measureWorld(sizes, n, ss, nil); err != nil {
					return fmt.Errorf("%d ranks at %s: %w", n, rateName(rate), err)
				}
				cells = append(cells, cell{rate, n, ss})
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
	fmt.Fprintln(w, "| link | ranks | size | ours-tcp ms | ours busbw GB/s | % of link | gloo ms | gloo busbw GB/s | % of link | ours/gloo | rank 0 cpu ms ours / gloo |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|")
	for _, c := range cells {
		for _, size := range sizes {
			k := key{size, c.n}
			ours, gl := c.ss[0].m[k].time(), c.ss[1].m[k].time()
			ob, gb := busbw(size, c.n, ours), busbw(size, c.n, gl)
			pct := func(b float64) string {
				if c.rate == 0 {
					return "-"
				}
				return fmt.Sprintf("%.0f%%", 100*b/(float64(c.rate)/8000))
			}
			ou, os := c.ss[0].m[k].cpu()
			gu, gs := c.ss[1].m[k].cpu()
			fmt.Fprintf(w, "| %s | %d | %s | %.2f | %.3f | %s | %.2f | %.3f | %s | %.2fx | %.1f / %.1f |\n", rateName(c.rate), c.n, human(size),
				ours*1e3, ob, pct(ob), gl*1e3, gb, pct(gb), gl/ours, (ou+os)*1e3, (gu+gs)*1e3)
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
