package hostinfo

import (
	"bytes"
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

const cpuinfo = `processor	: 0
vendor_id	: AuthenticAMD
cpu family	: 25
model		: 17
model name	: AMD EPYC 9R14
flags		: fpu sse sse2 ssse3 sse4_1 sse4_2 avx avx2 avx512f avx512bw

processor	: 1
model name	: something else
`

func TestParseCPUInfo(t *testing.T) {
	c := CPU{Family: -1, Model: -1, CPUs: 2, Kernels: "avx512 + OpenBLAS SkylakeX"}
	c.parse(strings.NewReader(cpuinfo))
	if c.ModelName != "AMD EPYC 9R14" || c.Family != 25 || c.Model != 17 || c.SIMD != "avx512f" {
		t.Fatalf("parsed %+v", c)
	}
	want := "AMD EPYC 9R14 (family 25 model 17), 2 CPUs, avx512f; kernels avx512 + OpenBLAS SkylakeX"
	if got := c.String(); got != want {
		t.Fatalf("String() = %q, want %q", got, want)
	}
	c = CPU{}
	c.parse(strings.NewReader("model name : X\nflags : sse2 avx avx2 fma\n"))
	if c.SIMD != "avx2" {
		t.Fatalf("SIMD = %q, want avx2", c.SIMD)
	}
}

func TestReadCPUHere(t *testing.T) {
	c := ReadCPU()
	if c.CPUs < 1 || c.Kernels == "" {
		t.Fatalf("ReadCPU() = %+v", c)
	}
	if c.ModelName == "" || c.Family < 0 {
		t.Fatalf("ReadCPU() read no model or family from /proc/cpuinfo: %+v", c)
	}
	if l := LoadAvg(); math.IsNaN(l) || l < 0 {
		t.Fatalf("LoadAvg() = %v", l)
	}
}

func TestParseLoad(t *testing.T) {
	if v := parseLoad("2.58 1.87 2.27 3/900 1234\n"); v != 2.58 {
		t.Fatalf("parseLoad = %v, want 2.58", v)
	}
	if v := parseLoad(""); !math.IsNaN(v) {
		t.Fatalf("parseLoad(\"\") = %v, want NaN", v)
	}
}

func TestStartWarnsAndWaits(t *testing.T) {
	loads := []float64{3, 2.5, 0.4}
	var slept time.Duration
	var out bytes.Buffer
	s := &Session{CPU: CPU{CPUs: 2}, w: &out, sleep: func(d time.Duration) { slept += d },
		loadAvg: func() float64 { l := loads[0]; loads = loads[1:]; return l }}
	s.start(&Options{WaitQuiet: time.Minute})
	if s.Busy || s.LoadBefore != 0.4 || slept != 10*time.Second {
		t.Fatalf("after waiting: busy %v load %v slept %v\n%s", s.Busy, s.LoadBefore, slept, out.String())
	}
	// No wait: a busy machine is named.
	out.Reset()
	s = &Session{CPU: CPU{CPUs: 2}, w: &out, sleep: func(time.Duration) { t.Fatal("slept without -wait-quiet") },
		loadAvg: func() float64 { return 1.5 }}
	s.start(nil)
	if !s.Busy || !strings.Contains(out.String(), "WARNING: the machine is busy (load 1.50") {
		t.Fatalf("busy %v, printed:\n%s", s.Busy, out.String())
	}
	s.End()
	if !strings.Contains(out.String(), "load average after: 1.50 (before 1.50)") {
		t.Fatalf("End printed:\n%s", out.String())
	}
}

func TestAlternateRotatesOrder(t *testing.T) {
	var order []string
	side := func(name string, wall float64) Side {
		return Side{Name: name, Run: func(rep int) (Sample, error) {
			order = append(order, name)
			return Sample{Wall: wall + float64(rep), CPU: 2 * (wall + float64(rep))}, nil
		}}
	}
	res, err := Alternate(3, side("ours", 1), side("peer", 10))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(order, ","); got != "ours,peer,peer,ours,ours,peer" {
		t.Fatalf("order %s", got)
	}
	c := Ratio(res[0], res[1])
	if c.Ours.Wall != 2 || c.Peer.Wall != 11 || c.WallRatio != 2.0/11 || c.CPURatio != 4.0/22 {
		t.Fatalf("ratio %+v", c)
	}
	if !strings.Contains(c.String(), "= 0.182×") {
		t.Fatalf("String() = %s", c)
	}
	boom := errors.New("boom")
	_, err = Alternate(2, side("ours", 1), Side{Name: "peer", Run: func(int) (Sample, error) { return Sample{}, boom }})
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "peer, repetition 0") {
		t.Fatalf("err = %v", err)
	}
}

func TestMedian(t *testing.T) {
	v := []float64{3, 1, 2, 10}
	if m := Median(v); m != 2.5 {
		t.Fatalf("Median = %v", m)
	}
	if v[0] != 3 {
		t.Fatal("Median sorted its argument")
	}
	if !math.IsNaN(Median(nil)) {
		t.Fatal("Median(nil) is not NaN")
	}
}

func TestSpread(t *testing.T) {
	v := []float64{9, 1, 8, 2, 7, 3, 6, 4, 5}
	lo, q1, q3, hi, ok := Spread(v)
	if !ok || lo != 1 || q1 != 3 || q3 != 7 || hi != 9 {
		t.Fatalf("Spread(%v) = %v %v %v %v %v, want 1 3 7 9 true", v, lo, q1, q3, hi, ok)
	}
	if v[0] != 9 {
		t.Fatal("Spread sorted its argument")
	}
	if _, _, _, _, ok := Spread(nil); ok {
		t.Fatal("Spread(nil) ok")
	}
}
