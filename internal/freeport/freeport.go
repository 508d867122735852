// Package freeport picks TCP ports for servers that bind them later: the
// in-process dev server and its Web UI (app), torch's rendezvous store on
// a Python run's rank 0 (python).
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// Pick returns a TCP port on ip that nothing listens on, chosen below
// the kernel's ephemeral range (net.ipv4.ip_local_port_range). A port the
// kernel hands out for "listen on :0" or for an outgoing connection is
// always in that range, so a port chosen outside it is not taken by the
// next process that asks the kernel for any port between our check and
// the server's bind: the race that killed a whole test binary when the
// Web UI (whose HTTP server exits the process when its bind fails) lost
// its port to a collective ring's listener in another package.
func Pick(ip string) (int, error) {
	lo, hi := 20000, ephemeralLow()-1
	if hi-lo < 1000 { // an unusual range: take any port the kernel offers
		return kernelPort(ip)
	}
	for range 200 {
		p := lo + rand.IntN(hi-lo+1)
		l, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(p)))
		if err != nil {
			continue
		}
		l.Close()
		return p, nil
	}
	return kernelPort(ip)
}

// PickIn returns a TCP port in [lo, hi] on ip that nothing listens on and
// that is not in avoid. Packages that choose many ports at once take a
// range of their own (internal/pgtemporal takes 10000-19999, below Pick's),
// so that two test binaries running side by side do not pick one port
// between one's check and its server's bind.
func PickIn(ip string, lo, hi int, avoid ...int) (int, error) {
	var err error
next:
	for range 200 {
		p := lo + rand.IntN(hi-lo+1)
		for _, a := range avoid {
			if a == p {
				continue next
			}
		}
		var l net.Listener
		if l, err = net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(p))); err != nil {
			continue
		}
		l.Close()
		return p, nil
	}
	return 0, fmt.Errorf("no free port in %d-%d on %s: %v", lo, hi, ip, err)
}

func kernelPort(ip string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		return 0, fmt.Errorf("free port on %s: %w", ip, err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// ephemeralLow is the first port of the kernel's ephemeral range (32768
// where it cannot be read).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 32768
	}
	n, err := strconv.Atoi(f[0])
	if err != nil || n < 1024 {
		return 32768
	}
	return n
}
