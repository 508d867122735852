// Package hostinfo is what every benchmark says about where it ran and how
// it compared: the processor (model name, family/model, its best SIMD level
// and the kernel path our code chose on it), the load average before and
// after, a warning (or a wait) when the machine is busy, sides run in
// alternating order, and wall and processor-second ratios of medians.
//
// A ratio measured on a busy machine measures the load as much as the code
// (issue 32: XGBoost's OpenMP threads lose more to a busy machine than our
// ranks), so a benchmark prints the load next to its numbers, and the
// processor seconds, which load changes less than wall time.
package hostinfo

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tempotrain/tempotrain/compute"
)

// CPU describes the processor.
type CPU struct {
	ModelName string // /proc/cpuinfo's "model name"
	Family    int    // "cpu family"
	Model     int    // "model"
	CPUs      int    // logical processors (runtime.NumCPU)
	SIMD      string // the widest vector extension it has: avx512f, avx2, sse4_2, sse2
	Kernels   string // compute.KernelPath(): the path our CPU kernels chose
}

// ReadCPU reads /proc/cpuinfo (Linux); fields it cannot read stay empty
// (families -1).
func ReadCPU() CPU {
	c := CPU{Family: -1, Model: -1, CPUs: runtime.NumCPU(), Kernels: compute.KernelPath()}
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return c
	}
	defer f.Close()
	c.parse(f)
	return c
}

// parse takes the first processor's block of a /proc/cpuinfo.
func (c *CPU) parse(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" && c.ModelName != "" {
			return
		}
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		switch k {
		case "model name":
			c.ModelName = v
		case "cpu family":
			c.Family = atoi(v)
		case "model":
			c.Model = atoi(v)
		case "flags":
			has := map[string]bool{}
			for _, fl := range strings.Fields(v) {
				has[fl] = true
			}
			for _, s := range []string{"avx512f", "avx2", "sse4_2", "sse2"} {
				if has[s] {
					c.SIMD = s
					break
				}
			}
		}
	}
}

func atoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		return -1
	}
	return n
}

// String is one line: "AMD EPYC 9R14 (family 25 model 17), 2 CPUs, avx512f;
// kernels avx512 + OpenBLAS SkylakeX".
func (c CPU) String() string {
	name := c.ModelName
	if name == "" {
		name = "unknown processor"
	}
	return fmt.Sprintf("%s (family %d model %d), %d CPUs, %s; kernels %s", name, c.Family, c.Model, c.CPUs, orDash(c.SIMD), c.Kernels)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// LoadAvg returns the 1-minute load average (/proc/loadavg), NaN where it
// cannot be read.
func LoadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return math.NaN()
	}
	return parseLoad(string(b))
}

func parseLoad(s string) float64 {
	f := strings.Fields(s)
	if len(f) == 0 {
		return math.NaN()
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return math.NaN()
	}
	return v
}

// BusyPerCore is the load average per logical processor above which a
// machine counts as busy for a benchmark.
const BusyPerCore = 0.5

// Options are the flags every benchmark shares.
type Options struct {
	// WaitQuiet is how long Start waits for the load to fall to
	// BusyPerCore per processor before it goes on anyway (with the
	// warning). 0: do not wait.
	WaitQuiet time.Duration
}

// Flags registers -wait-quiet on fs (flag.CommandLine if nil).
func Flags(fs *flag.FlagSet) *Options {
	if fs == nil {
		fs = flag.CommandLine
	}
	o := &Options{}
	fs.DurationVar(&o.WaitQuiet, "wait-quiet", 0, fmt.Sprintf("wait up to this long for the 1-minute load average to fall to %.1f per CPU before measuring", BusyPerCore))
	return o
}

// Session is one benchmark run's record of its machine.
type Session struct {
	CPU        CPU
	LoadBefore float64
	LoadAfter  float64
	Busy       bool // LoadBefore was above BusyPerCore per CPU
	w          io.Writer
	loadAvg    func() float64
	sleep      func(time.Duration)
}

// Start reads the processor and the load, waits (o.WaitQuiet) while the
// machine is busy, and prints the processor, the load and, on a busy
// machine, a warning to w.
func Start(w io.Writer, o *Options) *Session {
	s := &Session{CPU: ReadCPU(), w: w, loadAvg: LoadAvg, sleep: time.Sleep}
	s.start(o)
	return s
}

func (s *Session) start(o *Options) {
	limit := BusyPerCore * float64(s.CPU.CPUs)
	s.LoadBefore = s.loadAvg()
	if o != nil && o.WaitQuiet > 0 && s.LoadBefore > limit {
		fmt.Fprintf(s.w, "load average %.2f > %.2f: waiting up to %s for a quiet machine\n", s.LoadBefore, limit, o.WaitQuiet)
		for waited := time.Duration(0); waited < o.WaitQuiet && s.LoadBefore > limit; waited += 5 * time.Second {
			s.sleep(5 * time.Second)
			s.LoadBefore = s.loadAvg()
		}
	}
	s.Busy = s.LoadBefore > limit
	fmt.Fprintf(s.w, "processor: %s\n", s.CPU)
	fmt.Fprintf(s.w, "load average before: %.2f (%d CPUs)\n", s.LoadBefore, s.CPU.CPUs)
	if s.Busy {
		fmt.Fprintf(s.w, "WARNING: the machine is busy (load %.2f > %.1f per CPU): wall-time ratios measure the load as well as the code; compare the processor seconds\n",
			s.LoadBefore, BusyPerCore)
	}
}

// End reads the load again and prints it.
func (s *Session) End() {
	s.LoadAfter = s.loadAvg()
	fmt.Fprintf(s.w, "load average after: %.2f (before %.2f)\n", s.LoadAfter, s.LoadBefore)
	if s.LoadAfter > BusyPerCore*float64(s.CPU.CPUs) && !s.Busy {
		fmt.Fprintf(s.w, "WARNING: the machine became busy during the run (load %.2f)\n", s.LoadAfter)
	}
}

// Sample is one measurement of one side.
type Sample struct {
	Wall float64 // seconds
	CPU  float64 // processor seconds (all threads)
}

// Side is one contender: Run measures it once.
type Side struct {
	Name string
	Run  func(rep int) (Sample, error)
}

// Alternate runs reps repetitions of every side, rotating their order each
// repetition (rep 0: a, b; rep 1: b, a; ...) so that neither side always
// runs first, on a cold cache or right after the other. It returns the
// samples by side, in the order of sides.
func Alternate(reps int, sides ...Side) ([][]Sample, error) {
	out := make([][]Sample, len(sides))
	for rep := range reps {
		for j := range sides {
			i := (j + rep) % len(sides)
			s, err := sides[i].Run(rep)
			if err != nil {
				return out, fmt.Errorf("%s, repetition %d: %w", sides[i].Name, rep, err)
			}
			out[i] = append(out[i], s)
		}
	}
	return out, nil
}

// Median is the median of v (NaN when empty); v is not modified.
func Median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// Medians returns the medians of the wall and processor seconds of s.
func Medians(s []Sample) Sample {
	w, c := make([]float64, len(s)), make([]float64, len(s))
	for i, x := range s {
		w[i], c[i] = x.Wall, x.CPU
	}
	return Sample{Wall: Median(w), CPU: Median(c)}
}

// Compare is ours against a peer: the medians and their ratios
// (ours/peer: below 1 is faster).
type Compare struct {
	Ours, Peer Sample
	WallRatio  float64
	CPURatio   float64
}

// Ratio compares the medians of ours and peer.
func Ratio(ours, peer []Sample) Compare {
	o, p := Medians(ours), Medians(peer)
	return Compare{Ours: o, Peer: p, WallRatio: o.Wall / p.Wall, CPURatio: o.CPU / p.CPU}
}

// String is "wall 1.23 s vs 2.34 s = 0.53×, CPU 2.0 s vs 4.1 s = 0.49×".
func (c Compare) String() string {
	return fmt.Sprintf("wall %.2f s vs %.2f s = %.3f×, CPU %.2f s vs %.2f s = %.3f×",
		c.Ours.Wall, c.Peer.Wall, c.WallRatio, c.Ours.CPU, c.Peer.CPU, c.CPURatio)
}

// CPUSeconds is this process's user and system time so far.
func CPUSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return math.NaN()
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}
