// Package netns makes test hosts on one machine: network namespaces joined
// to a bridge in the root namespace by veth pairs, each host with its own
// address, and the faults a real network has: a host blackholed, one link
// cut, packet loss (nftables rules in the host's namespace: packets are
// dropped silently, no FIN or RST), rate limits (tc tbf on both ends of its
// veth) and delay (tc netem, where the kernel has it: Impair says when not).
//
// The root namespace is the first "host": its bridge address (.1) is where
// a test serves Temporal and MinIO. Hosts are .2, .3, ... Processes run in a
// host with Host.Command (ip netns exec). Close kills every process left in
// the hosts and deletes the namespaces, the veths and the bridge; Sweep
// removes what an earlier, killed test left.
//
// It needs root, ip netns, tc and nft (and iptables-legacy for delay
// without netem); Available says why not.
package netns

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Available says whether this process can make namespaces: root, ip, tc
// and nft.
func Available() error {
	if os.Geteuid() != 0 {
		return errors.New("netns: needs root (network namespaces, veth pairs, nftables)")
	}
	for _, p := range []string{"ip", "tc", "nft"} {
		if _, err := exec.LookPath(p); err != nil {
			pkg := "iproute2"
			if p == "nft" {
				pkg = "nftables"
			}
			return fmt.Errorf("netns: %s is not installed (apt install %s)", p, pkg)
		}
	}
	probe := fmt.Sprintf("ttprobe%d", os.Getpid())
	if err := run("ip", "netns", "add", probe); err != nil {
		return fmt.Errorf("netns: ip netns add: %w", err)
	}
	_ = run("ip", "netns", "del", probe)
	return nil
}

// Network is a bridge and its hosts.
type Network struct {
	prefix string
	subnet string // "10.X.Y"
	bridge string
	hosts  []*Host
	// queueBase is where the root namespace's delay queue numbers of this
	// network start (nfqueue.go): 10000 + 64 × the subnet's third octet, so
	// that networks that exist at once do not share one.
	queueBase uint16
}

// Host is a network namespace with one veth into the bridge.
type Host struct {
	Name  string // the namespace
	Addr  string // its IPv4 address
	n     *Network
	dev   string // the veth's end in the host ("eth0")
	peer  string // its end in the root namespace, on the bridge
	index int    // in n.hosts
	// queues hold the host's packets for Impairment.Delay where the
	// kernel has no netem (nfqueue.go).
	queues []*delayQueue
}

// New makes a bridge with the address subnet.1/24 (subnet is "10.77.3":
// three octets). prefix names everything it makes (at most 8 characters);
// leftovers of an earlier run with that prefix are swept first.
func New(prefix, subnet string) (*Network, error) {
	if len(prefix) == 0 || len(prefix) > 8 || strings.ContainsAny(prefix, " /") {
		return nil, fmt.Errorf("netns: prefix %q: 1 to 8 characters, no spaces or slashes", prefix)
	}
	if p := strings.Split(subnet, "."); len(p) != 3 {
		return nil, fmt.Errorf("netns: subnet %q: want three octets such as 10.77.3", subnet)
	}
	Sweep(prefix)
	n := &Network{prefix: prefix, subnet: subnet, bridge: prefix + "br"}
	// The bridge gets a fixed MAC address: a bridge without one takes the
	// lowest of its ports' addresses, so its address changed as hosts were
	// added, and a host that had resolved the bridge's address before sent
	// to the old one until its neighbour entry expired (a worker on the
	// first host could not reach the server for about 15 s).
	var oct [3]int
	fmt.Sscanf(subnet, "%d.%d.%d", &oct[0], &oct[1], &oct[2])
	mac := fmt.Sprintf("02:74:74:%02x:%02x:%02x", oct[0]&0xff, oct[1]&0xff, oct[2]&0xff)
	n.queueBase = uint16(10000 + (oct[2]&0xff)*64)
	steps := [][]string{
		{"ip", "link", "add", n.bridge, "address", mac, "type", "bridge"},
		{"ip", "addr", "add", subnet + ".1/24", "dev", n.bridge},
		{"ip", "link", "set", n.bridge, "up"},
	}
	for _, s := range steps {
		if err := run(s...); err != nil {
			n.Close()
			return nil, err
		}
	}
	// Bridged frames must not go through the root namespace's iptables
	// (Docker's FORWARD policy drops them where br_netfilter is on).
	_ = os.WriteFile("/proc/sys/net/bridge/bridge-nf-call-iptables", []byte("0"), 0o644)
	return n, nil
}

// BridgeAddr is the root namespace's address on the bridge: where hosts
// reach a server the test runs outside the namespaces.
func (n *Network) BridgeAddr() string { return n.subnet + ".1" }

// Hosts returns the hosts made so far.
func (n *Network) Hosts() []*Host { return n.hosts }

// AddHost makes a namespace, joins it to the bridge and sets up its tc
// layout (a prio qdisc whose first band every packet takes, where Netem
// hangs, and drop filters above it).
func (n *Network) AddHost() (*Host, error) {
	i := len(n.hosts)
	h := &Host{Name: fmt.Sprintf("%sh%d", n.prefix, i), Addr: fmt.Sprintf("%s.%d", n.subnet, i+2), n: n, index: i,
		dev: "eth0", peer: fmt.Sprintf("%sv%d", n.prefix, i)}
	tmp := h.peer + "x"
	steps := [][]string{
		{"ip", "netns", "add", h.Name},
		{"ip", "link", "add", h.peer, "type", "veth", "peer", "name", tmp},
		{"ip", "link", "set", tmp, "netns", h.Name},
		{"ip", "-n", h.Name, "link", "set", tmp, "name", h.dev},
		{"ip", "link", "set", h.peer, "master", n.bridge},
		{"ip", "link", "set", h.peer, "up"},
		{"ip", "-n", h.Name, "addr", "add", h.Addr + "/24", "dev", h.dev},
		{"ip", "-n", h.Name, "link", "set", h.dev, "up"},
		{"ip", "-n", h.Name, "link", "set", "lo", "up"},
		{"ip", "-n", h.Name, "route", "add", "default", "via", n.BridgeAddr()},
	}
	n.hosts = append(n.hosts, h)
	for _, s := range steps {
		if err := run(s...); err != nil {
			return nil, err
		}
	}
	// Two pairs of chains: faults (Blackhole, Cut; Heal flushes them) and
	// impairments (Impair's loss), on the host's link only (not lo).
	rules := `table inet tt {
	chain fault_out { type filter hook output priority 0; policy accept; }
	chain fault_in { type filter hook input priority 0; policy accept; }
	chain impair_out { type filter hook output priority 10; policy accept; }
	chain impair_in { type filter hook input priority 10; policy accept; }
}
`
	if err := h.nft(rules); err != nil {
		return nil, err
	}
	return h, nil
}

// nft loads a ruleset into the host's namespace.
func (h *Host) nft(rules string) error {
	c := exec.Command("ip", "netns", "exec", h.Name, "nft", "-f", "-")
	c.Stdin = strings.NewReader(rules)
	if out, err := c.CombinedOutput(); err != nil {
		return fmt.Errorf("netns: nft in %s: %w: %s\n%s", h.Name, err, strings.TrimSpace(string(out)), rules)
	}
	return nil
}

// Listen opens a listener in the host's namespace (the socket is made on
// a thread that joined the namespace; it works from any goroutine after).
func (h *Host) Listen(network, addr string) (net.Listener, error) {
	var l net.Listener
	err := h.do(func() (err error) {
		l, err = net.Listen(network, addr)
		return err
	})
	return l, err
}

// DialTimeout dials from the host's namespace.
func (h *Host) DialTimeout(network, addr string, timeout time.Duration) (net.Conn, error) {
	var c net.Conn
	err := h.do(func() (err error) {
		c, err = net.DialTimeout(network, addr, timeout)
		return err
	})
	return c, err
}

// do runs f on a thread in the host's namespace. The thread goes back to
// the root namespace after; if it cannot, it is not reused (its goroutine
// ends locked, and the runtime drops the thread).
func (h *Host) do(f func() error) error {
	ch := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		self, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			ch <- err
			return
		}
		defer self.Close()
		target, err := os.Open("/var/run/netns/" + h.Name)
		if err != nil {
			ch <- err
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- fmt.Errorf("netns: setns %s: %w", h.Name, err)
			return
		}
		ferr := f()
		if err := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- errors.Join(ferr, err)
			return // the thread stays locked and dies with the goroutine
		}
		runtime.UnlockOSThread()
		ch <- ferr
	}()
	return <-ch
}

// Command is a command that runs in the host's namespace.
func (h *Host) Command(name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", h.Name, name}, args...)...)
}

// Blackhole drops every packet the host sends or is sent on its link: its
// peers see silence, no FIN or RST, as when a machine drops off the
// network.
func (h *Host) Blackhole() error {
	return h.nft(fmt.Sprintf("add rule inet tt fault_out oifname %q drop\nadd rule inet tt fault_in iifname %q drop\n", h.dev, h.dev))
}

// Cut drops what h receives from addr (another host's address, or the
// bridge's to cut h from the server): h's packets still leave, as on a real
// network that loses them on the way, so the sender's TCP retransmits.
// Cut both hosts to cut a link both ways.
func (h *Host) Cut(addr string) error {
	if net.ParseIP(addr).To4() == nil {
		return fmt.Errorf("netns: cut %s from %q: not an IPv4 address", h.Name, addr)
	}
	return h.nft(fmt.Sprintf("add rule inet tt fault_in ip saddr %s drop\n", addr))
}

// Isolate drops the packets between h and addr both ways, at h: what h
// sends to addr fails in h's own stack (the local sender sees it), what
// addr sends to h is lost. For cutting h from a server in the root
// namespace, which has no rules of its own.
func (h *Host) Isolate(addr string) error {
	if err := h.Cut(addr); err != nil {
		return err
	}
	return h.nft(fmt.Sprintf("add rule inet tt fault_out ip daddr %s drop\n", addr))
}

// Heal removes the host's blackhole and cuts (not its impairments).
func (h *Host) Heal() error {
	return h.nft("flush chain inet tt fault_out\nflush chain inet tt fault_in\n")
}

// Impairment is what Impair adds to a host's link, each way.
type Impairment struct {
	// Loss drops this percent of packets (nftables' random numbers).
	Loss float64
	// RateMbit limits the rate in Mbit/s (tc tbf on both veth ends).
	RateMbit int
	// Delay delays every packet: tc netem, or where the kernel lacks
	// netem a netfilter queue that this process holds each packet in
	// (iptables-legacy's NFQUEUE target; nfqueue.go).
	Delay time.Duration
}

// hasNetem says whether the kernel has the netem qdisc: probed once, on a
// namespace's loopback.
var hasNetem = sync.OnceValue(func() bool {
	probe := fmt.Sprintf("ttnetem%d", os.Getpid())
	if run("ip", "netns", "add", probe) != nil {
		return false
	}
	defer run("ip", "netns", "del", probe)
	return run("ip", "netns", "exec", probe, "tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms") == nil
})

// Impair sets the host link's impairments; the zero Impairment removes them.
func (h *Host) Impair(im Impairment) error {
	rules := "flush chain inet tt impair_out\nflush chain inet tt impair_in\n"
	if im.Loss > 0 {
		// numgen gives 0..9999: drop Loss percent of them.
		cond := fmt.Sprintf("numgen random mod 10000 < %d ", int(im.Loss*100))
		if im.Loss >= 100 {
			cond = ""
		}
		rules += fmt.Sprintf("add rule inet tt impair_out oifname %q %sdrop\n", h.dev, cond)
		rules += fmt.Sprintf("add rule inet tt impair_in iifname %q %sdrop\n", h.dev, cond)
	}
	if err := h.nft(rules); err != nil {
		return err
	}
	h.stopDelay()
	if im.Delay > 0 && !hasNetem() {
		if err := h.startDelay(im.Delay); err != nil {
			return err
		}
		im.Delay = 0 // the queue delays; tc below only limits the rate
	}
	for _, d := range []struct{ ns, dev string }{{h.Name, h.dev}, {"", h.peer}} {
		tc := func(args ...string) error {
			if d.ns != "" {
				args = append([]string{"ip", "netns", "exec", d.ns, "tc"}, args...)
			} else {
				args = append([]string{"tc"}, args...)
			}
			return run(args...)
		}
		_ = tc("qdisc", "del", "dev", d.dev, "root")
		switch {
		case im.Delay > 0:
			args := []string{"qdisc", "add", "dev", d.dev, "root", "netem", "limit", "100000", "delay", fmt.Sprintf("%dus", im.Delay.Microseconds())}
			if im.RateMbit > 0 {
				args = append(args, "rate", fmt.Sprintf("%dmbit", im.RateMbit))
			}
			if err := tc(args...); err != nil {
				return err
			}
		case im.RateMbit > 0:
			// A burst of 1 ms at the rate (at least 64 KiB), and packets
			// wait at most 50 ms.
			burst := max(im.RateMbit*1000/8, 64<<10)
			if err := tc("qdisc", "add", "dev", d.dev, "root", "tbf", "rate", fmt.Sprintf("%dmbit", im.RateMbit),
				"burst", strconv.Itoa(burst), "latency", "50ms"); err != nil {
				return err
			}
		}
	}
	return nil
}

// Close kills every process left in the hosts, deletes the namespaces,
// veths and the bridge. It is safe to call twice.
func (n *Network) Close() {
	for _, h := range n.hosts {
		h.stopDelay()
		killAll(h.Name)
		_ = run("ip", "netns", "del", h.Name)
		_ = run("ip", "link", "del", h.peer)
	}
	n.hosts = nil
	_ = run("ip", "link", "del", n.bridge)
}

// Sweep removes the namespaces, veths and bridge an earlier run with this
// prefix left (a test binary killed before its cleanup).
func Sweep(prefix string) {
	out, _ := exec.Command("ip", "netns", "list").Output()
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		if len(f) > 0 && strings.HasPrefix(f[0], prefix+"h") {
			killAll(f[0])
			_ = run("ip", "netns", "del", f[0])
		}
	}
	out, _ = exec.Command("ip", "-o", "link", "show").Output()
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
		if strings.HasPrefix(name, prefix+"v") || name == prefix+"br" {
			_ = run("ip", "link", "del", name)
		}
	}
	// The root namespace's delay rules on the bridge (nfqueue.go).
	out, _ = exec.Command(iptablesLegacy, "-w", "-t", "mangle", "-S", "PREROUTING").Output()
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Fields(l); len(f) > 2 && f[0] == "-A" && strings.Contains(l, "-i "+prefix+"br ") {
			_ = iptables("", "-D", f[1:])
		}
	}
}

// killAll SIGKILLs the processes in a namespace.
func killAll(ns string) {
	out, _ := exec.Command("ip", "netns", "pids", ns).Output()
	for _, f := range strings.Fields(string(out)) {
		if pid, err := strconv.Atoi(f); err == nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

func run(args ...string) error {
	var stderr bytes.Buffer
	c := exec.Command(args[0], args[1:]...)
	c.Stderr = &stderr
	if err := c.Run(); err != nil {
		return fmt.Errorf("netns: %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return nil
}
