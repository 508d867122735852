package netns

import (
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// needNetns skips without root and ip netns, or fails where CI says it has
// them (TEMPOTRAIN_REQUIRE_NETNS=1).
func needNetns(t *testing.T) {
	t.Helper()
	if err := Available(); err != nil {
		if os.Getenv("TEMPOTRAIN_REQUIRE_NETNS") == "1" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
}

// echo serves one echo listener in h and returns its address.
func echo(t *testing.T, listen func(string, string) (net.Listener, error), addr string) string {
	t.Helper()
	l, err := listen("tcp", addr+":0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	return l.Addr().String()
}

// reach dials from h and says whether a byte comes back within d.
func reach(h *Host, addr string, d time.Duration) (time.Duration, bool) {
	start := time.Now()
	c, err := h.DialTimeout("tcp", addr, d)
	if err != nil {
		return 0, false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(d))
	if _, err := c.Write([]byte{7}); err != nil {
		return 0, false
	}
	b := make([]byte, 1)
	if _, err := io.ReadFull(c, b); err != nil || b[0] != 7 {
		return 0, false
	}
	return time.Since(start), true
}

func TestHostsAndFaults(t *testing.T) {
	needNetns(t)
	n, err := New("tttest", "10.77.250")
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	a, err := n.AddHost()
	if err != nil {
		t.Fatal(err)
	}
	b, err := n.AddHost()
	if err != nil {
		t.Fatal(err)
	}
	atB := echo(t, b.Listen, b.Addr)
	atRoot := echo(t, net.Listen, n.BridgeAddr())
	const wait = 700 * time.Millisecond
	check := func(what string, h *Host, addr string, want bool) {
		t.Helper()
		if _, ok := reach(h, addr, wait); ok != want {
			t.Errorf("%s: %s reaches %s: %v, want %v", what, h.Name, addr, ok, want)
		}
	}
	check("fresh", a, atB, true)
	check("fresh", a, atRoot, true)

	if err := a.Cut(b.Addr); err != nil {
		t.Fatal(err)
	}
	if err := b.Cut(a.Addr); err != nil {
		t.Fatal(err)
	}
	check("link a-b cut", a, atB, false)
	check("link a-b cut, the server still reachable", a, atRoot, true)
	check("link a-b cut, the server still reachable", b, atRoot, true)
	if err := a.Heal(); err != nil {
		t.Fatal(err)
	}
	if err := b.Heal(); err != nil {
		t.Fatal(err)
	}
	check("healed", a, atB, true)

	if err := b.Blackhole(); err != nil {
		t.Fatal(err)
	}
	check("b blackholed", a, atB, false)
	check("b blackholed", b, atRoot, false)
	if err := b.Heal(); err != nil {
		t.Fatal(err)
	}
	check("b healed", a, atB, true)

	// 100% loss is a blackhole by another road; 0 removes it.
	if err := a.Impair(Impairment{Loss: 100}); err != nil {
		t.Fatal(err)
	}
	check("a at 100% loss", a, atB, false)
	if err := a.Impair(Impairment{}); err != nil {
		t.Fatal(err)
	}
	check("a's loss removed", a, atB, true)

	// A rate limit: 20 Mbit/s, 2 MB take about 0.8 s.
	if err := a.Impair(Impairment{RateMbit: 20}); err != nil {
		t.Fatal(err)
	}
	if took := sendMB(t, a, atB, 2); took < 600*time.Millisecond || took > 3*time.Second {
		t.Errorf("2 MB at 20 Mbit/s took %v, want about 0.8s", took)
	}
	if err := a.Impair(Impairment{}); err != nil {
		t.Fatal(err)
	}
	if took := sendMB(t, a, atB, 2); took > 300*time.Millisecond {
		t.Errorf("2 MB without a limit took %v", took)
	}

	// Delay: netem, or where the kernel has none the netfilter queue.
	// Dial and echo are two round trips; with netem on both ends of a's
	// link each is 100ms, with the queue (a packet into a waits) 50ms.
	if err := a.Impair(Impairment{Delay: 50 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	want := 100 * time.Millisecond
	if hasNetem() {
		want = 200 * time.Millisecond
	}
	if rtt, ok := reach(a, atB, 2*time.Second); !ok || rtt < want-10*time.Millisecond || rtt > want+200*time.Millisecond {
		t.Errorf("with 50ms delay: dial and echo in %v (reached %v), want about %v", rtt, ok, want)
	}
	// From the root namespace too (the server's side).
	if rtt, ok := reach(a, atRoot, 2*time.Second); !ok || rtt < 190*time.Millisecond || rtt > 400*time.Millisecond {
		t.Errorf("with 50ms delay each way: dial and echo with the root namespace in %v (reached %v), want about 200ms", rtt, ok)
	}
	if took := sendMB(t, a, atB, 2); took > 3*time.Second {
		t.Errorf("2 MB with 50ms delay took %v", took)
	} else {
		t.Logf("2 MB there and back with 50ms delay: %v (netem: %v)", took, hasNetem())
	}
	if err := a.Impair(Impairment{}); err != nil {
		t.Fatal(err)
	}
	if rtt, ok := reach(a, atB, 2*time.Second); !ok || rtt > 50*time.Millisecond {
		t.Errorf("delay removed: dial and echo in %v (reached %v)", rtt, ok)
	}

	// A process in a host sees only the host's address.
	out, err := a.Command("ip", "-4", "-o", "addr", "show", "dev", "eth0").CombinedOutput()
	if err != nil || !strings.Contains(string(out), a.Addr+"/24") {
		t.Errorf("ip addr in %s: %v %s", a.Name, err, out)
	}
	sleeper := b.Command("sleep", "60")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	n.Close()
	done := make(chan error, 1)
	go func() { done <- sleeper.Wait() }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Error("Close left a process of a host running")
	}
	list, _ := exec.Command("ip", "netns", "list").Output()
	if strings.Contains(string(list), "tttesth") {
		t.Errorf("namespaces left after Close: %s", list)
	}
}

// sendMB sends mb megabytes from h to an echo server and reads them back;
// it returns how long that took.
func sendMB(t *testing.T, h *Host, addr string, mb int) time.Duration {
	t.Helper()
	c, err := h.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, mb<<20)
	start := time.Now()
	go func() { _, _ = c.Write(buf) }()
	if _, err := io.ReadFull(c, make([]byte, len(buf))); err != nil {
		t.Fatal(err)
	}
	return time.Since(start)
}

// TestBridgeAddressStays: the bridge keeps one MAC address as hosts join,
// so the first host, which resolved it before the others joined, still
// reaches the root namespace at once (a bridge takes its lowest port's
// address unless it is given one).
func TestBridgeAddressStays(t *testing.T) {
	needNetns(t)
	n, err := New("ttmac", "10.77.99")
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	mac := func() string {
		out, err := exec.Command("cat", "/sys/class/net/"+n.bridge+"/address").Output()
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(out))
	}
	before := mac()
	first, err := n.AddHost()
	if err != nil {
		t.Fatal(err)
	}
	server := echo(t, net.Listen, n.BridgeAddr())
	if _, ok := reach(first, server, 2*time.Second); !ok {
		t.Fatal("the first host does not reach the bridge")
	}
	for range 5 {
		if _, err := n.AddHost(); err != nil {
			t.Fatal(err)
		}
	}
	if after := mac(); after != before {
		t.Fatalf("the bridge's MAC changed from %s to %s as hosts joined", before, after)
	}
	if d, ok := reach(first, server, 2*time.Second); !ok {
		t.Fatal("the first host lost the bridge after others joined")
	} else {
		t.Logf("the first host reaches the bridge in %v after 5 more joined", d)
	}
}
