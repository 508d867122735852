//go:build linux

package collective

import (
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// sendLinkStuck says whether the TCP connection to the right neighbour holds
// data that neighbour has not acknowledged and the kernel is retransmitting:
// the network between the two drops packets (a cut link, a dead host),
// whatever the neighbour does. It reads the socket's TCP_INFO.
func (c *Comm) sendLinkStuck() (string, bool) {
	if c.send == nil || c.sendShm != nil {
		return "", false
	}
	tcp := tcpOf(c.send)
	if tcp == nil {
		return "", false
	}
	raw, err := tcp.SyscallConn()
	if err != nil {
		return "", false
	}
	var info *unix.TCPInfo
	var ierr error
	if err := raw.Control(func(fd uintptr) {
		info, ierr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	}); err != nil || ierr != nil {
		return "", false
	}
	if info.Unacked == 0 || (info.Retransmits == 0 && info.Backoff == 0) {
		return "", false
	}
	return fmt.Sprintf("%d segments sent to rank %d unacknowledged, no acknowledgement for %v, retransmitted %d times",
		info.Unacked, c.right, (time.Duration(info.Last_ack_recv) * time.Millisecond).Round(10*time.Millisecond), info.Retransmits), true
}
