package collective

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"sync/atomic"
	"time"
)

// Transport is how a rank's data reaches its neighbour.
type Transport uint8

const (
	// TransportAuto uses shared memory with a neighbour on the same host
	// when both ends can map a shared file, and TCP otherwise. The default;
	// the environment variable TEMPOTRAIN_COLLECTIVE_SHM=0 turns it into
	// TransportTCP.
	TransportAuto Transport = iota
	// TransportTCP sends all data over the TCP connections.
	TransportTCP
	// TransportSHM requires shared memory on both links: Connect fails if a
	// neighbour cannot use it (it is on another host, has it turned off, or
	// the region cannot be created or mapped). For benchmarks and tests that
	// must not fall back silently.
	TransportSHM
)

func (t Transport) String() string {
	switch t {
	case TransportAuto:
		return "auto"
	case TransportTCP:
		return "tcp"
	case TransportSHM:
		return "shm"
	}
	return fmt.Sprintf("Transport(%d)", int(t))
}

// EnvSHM names the environment variable that turns shared memory off for
// Options.Transport = TransportAuto when set to "0" (an operator's switch,
// read at Connect).
const EnvSHM = "TEMPOTRAIN_COLLECTIVE_SHM"

var errNoShmHere = errors.New("shared memory links are implemented on Linux only")

// wantShm says whether this rank offers and accepts shared memory.
func (o Options) wantShm() bool {
	switch o.Transport {
	case TransportSHM:
		return true
	case TransportAuto:
		return os.Getenv(EnvSHM) != "0" && shmSupported
	}
	return false
}

// Links reports the transport of this rank's link to its right neighbour
// (data it sends) and from its left neighbour (data it receives):
// TransportSHM or TransportTCP. A group of one has no links (TransportTCP).
func (c *Comm) Links() (send, recv Transport) {
	send, recv = TransportTCP, TransportTCP
	if c.sendShm != nil {
		send = TransportSHM
	}
	if c.recvShm != nil {
		recv = TransportSHM
	}
	return send, recv
}

// goneErr is why a shared-memory link's peer is gone, as its TCP connection
// told.
type goneErr struct{ err error }

// shmLink is one end of a shared-memory link: the sender's (c.sendShm) or
// the receiver's (c.recvShm). The layout of the region and the protocol on it
// are in shm_linux.go.
type shmLink struct {
	mem    []byte  // the whole mapping
	ctl    *shmCtl // its first page
	slots  uint32
	stride int    // bytes from one slot to the next
	next   uint32 // frames this end has published (sender) or released (receiver)
	gone   atomic.Pointer[goneErr]

	// forwarded[k%slots] == k+1: the receiver wrote frame k's payload into its
	// slot already (sender's end only).
	forwarded []uint32

	conn     net.Conn      // the link's TCP connection: doorbells, goodbye, liveness
	bell     chan struct{} // capacity 1: rung by watchShmLink
	timer    *time.Timer   // the parked waiter's deadline, reused
	doorbell [1]byte
}

// setConn binds the link to its TCP connection, once it is connected.
func (l *shmLink) setConn(conn net.Conn) {
	l.conn = conn
	l.bell = make(chan struct{}, 1)
	l.timer = time.NewTimer(time.Hour)
	l.timer.Stop()
	l.doorbell[0] = doorbell
	l.forwarded = make([]uint32, l.slots)
}

// tcpOf is the TCP connection under conn (a TLS link's socket), nil if
// there is none.
func tcpOf(conn net.Conn) *net.TCPConn {
	if tc, ok := conn.(*tls.Conn); ok {
		conn = tc.NetConn()
	}
	tcp, _ := conn.(*net.TCPConn)
	return tcp
}

// Congestion is the TCP congestion control of the connection this rank
// sends its data on (to its right neighbour), as the kernel reports it;
// "" for a shared-memory link, a group of one, or where it cannot be read
// (outside Linux). Options.Congestion says what was asked.
func (c *Comm) Congestion() string {
	if c.send == nil || c.sendShm != nil {
		return ""
	}
	return congestionOf(c.send)
}

// Encrypted reports whether this rank's link to its right neighbour (data
// it sends) and from its left neighbour (data it receives) run TLS
// (Options.Encrypt).
func (c *Comm) Encrypted() (send, recv bool) {
	_, send = c.send.(*tls.Conn)
	_, recv = c.recv.(*tls.Conn)
	return send, recv
}
