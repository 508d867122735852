//go:build linux

package collective

import (
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// procList reads a space-separated list from a file of /proc/sys/net.
func procList(t *testing.T, name string) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/sys/net/" + name)
	if err != nil {
		t.Skipf("no %s: %v", name, err)
	}
	return strings.Fields(string(b))
}

// Each rank's TCP connections, both ways, get the congestion control the
// Options name (cubic by default), where the kernel has and allows it, and
// keep the kernel's default otherwise; "system" keeps it always.
func TestCongestion(t *testing.T) {
	system := procList(t, "ipv4/tcp_congestion_control")[0]
	available := procList(t, "ipv4/tcp_available_congestion_control")
	allowed := procList(t, "ipv4/tcp_allowed_congestion_control")
	may := func(name string) string { // what a link asking for name gets
		if slices.Contains(available, name) && (os.Geteuid() == 0 || slices.Contains(allowed, name)) {
			return name
		}
		return system
	}
	if may(DefaultCongestion) != DefaultCongestion {
		t.Logf("%s is not available or allowed here: links keep %s", DefaultCongestion, system)
	}
	for _, tc := range []struct {
		asked, env, want string
	}{
		{"", "", may(DefaultCongestion)},
		{"system", "", system},
		{"reno", "", may("reno")}, // reno is built into every kernel
		{"nosuchcc", "", system},
		{"", "reno", may("reno")},
		{"system", "reno", system}, // the Options win over the environment
	} {
		t.Run("asked="+tc.asked+",env="+tc.env, func(t *testing.T) {
			t.Setenv(EnvCongestion, tc.env)
			comms := newGroup(t, 3, Options{Transport: TransportTCP, Congestion: tc.asked})
			for r, c := range comms {
				if got := c.Congestion(); got != tc.want {
					t.Errorf("rank %d: send link %q, want %q", r, got, tc.want)
				}
				if got := congestionOf(c.recv); got != tc.want {
					t.Errorf("rank %d: receive link %q, want %q", r, got, tc.want)
				}
			}
			checkAllReduce(t, comms, 1<<16, Sum, (*Comm).AllReduceFloat32)
		})
	}
	// Shared-memory links carry no TCP data: nothing to report.
	if shmSupported {
		for r, c := range newGroup(t, 2, Options{Transport: TransportSHM}) {
			if got := c.Congestion(); got != "" {
				t.Errorf("shared memory: rank %d: %q, want \"\"", r, got)
			}
		}
	}
}

func TestCongestionNameChecked(t *testing.T) {
	for _, name := range []string{"CUBIC", "cu bic", "../bbr", "averyveryverylong"} {
		errs := tryConnect(t, 2, func(int) Options { return Options{Token: "t", Congestion: name} })
		for r, err := range errs {
			if err == nil || !strings.Contains(err.Error(), "Congestion") || !strings.Contains(err.Error(), name) {
				t.Errorf("Congestion %q: rank %d: %v, want an error naming the field and the value", name, r, err)
			}
		}
	}
	t.Setenv(EnvCongestion, "Bad")
	for r, err := range tryConnect(t, 2, func(int) Options { return Options{Token: "t"} }) {
		if err == nil || !strings.Contains(err.Error(), EnvCongestion) || !strings.Contains(err.Error(), "Bad") {
			t.Errorf("%s=Bad: rank %d: %v", EnvCongestion, r, err)
		}
	}
}

// A group linked by TCP only takes DefaultTCPSocketBuffer where the Options
// leave SocketBuffer, and keeps what they set.
func TestTCPGroupSocketBuffer(t *testing.T) {
	wmax, rmax := procInt(t, "core/wmem_max"), procInt(t, "core/rmem_max")
	sockopt := func(conn net.Conn, opt int) int {
		raw, err := tcpOf(conn).SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		var v int
		var gerr error
		if err := raw.Control(func(fd uintptr) { v, gerr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, opt) }); err != nil || gerr != nil {
			t.Fatal(err, gerr)
		}
		return v
	}
	for _, tc := range []struct {
		set, want int
	}{{0, DefaultTCPSocketBuffer}, {300 << 10, 300 << 10}} {
		for r, c := range newGroup(t, 3, Options{Transport: TransportTCP, SocketBuffer: tc.set}) {
			// The kernel doubles what is set, up to twice the sysctl's cap.
			if got, want := sockopt(c.send, unix.SO_SNDBUF), 2*min(tc.want, wmax); got != want {
				t.Errorf("SocketBuffer %d: rank %d: SO_SNDBUF %d, want %d", tc.set, r, got, want)
			}
			if got, want := sockopt(c.recv, unix.SO_RCVBUF), 2*min(tc.want, rmax); got != want {
				t.Errorf("SocketBuffer %d: rank %d: SO_RCVBUF %d, want %d", tc.set, r, got, want)
			}
			if c.opts.SegmentBytes != DefaultTCPSegmentBytes {
				t.Errorf("rank %d: segment %d, want %d", r, c.opts.SegmentBytes, DefaultTCPSegmentBytes)
			}
		}
	}
}

func procInt(t *testing.T, name string) int {
	t.Helper()
	n, err := strconv.Atoi(procList(t, name)[0])
	if err != nil {
		t.Fatal(err)
	}
	return n
}
