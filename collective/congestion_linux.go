//go:build linux

package collective

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// setCongestion gives a socket the TCP congestion control name (Options.
// Congestion), unless name is "system". A name the kernel lacks or does not
// allow this process leaves the kernel's default: the link works either
// way, and Comm.Congestion tells.
//
// The sending end (the dialer: a rank sends to the neighbour it dials) is
// set before it connects: the algorithm's init runs when the connection is
// established, and BBR's leaves the socket paced by the kernel's timer
// (sk_pacing_status) after a switch to another algorithm, so a switch once
// connected kept BBR's cost (71% of a 10 Gbit/s link where it gave 87%).
// The accepting end sends only acknowledgements; it is set once accepted.
func setCongestion(raw syscall.RawConn, name string) {
	if name == "system" {
		return
	}
	_ = raw.Control(func(fd uintptr) {
		_ = unix.SetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION, name)
	})
}

// congestionOf reads the congestion control of a TCP connection (through
// TLS), "" where conn is none.
func congestionOf(conn net.Conn) string {
	tcp := tcpOf(conn)
	if tcp == nil {
		return ""
	}
	raw, err := tcp.SyscallConn()
	if err != nil {
		return ""
	}
	var name string
	_ = raw.Control(func(fd uintptr) {
		name, _ = unix.GetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION)
	})
	return name
}
