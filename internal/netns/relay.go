package netns

import (
	"io"
	"net"
	"sync"
)

// Relay forwards TCP connections made to listenHost (a new port) to target,
// until Close. The hosts reach a server that listens on the root
// namespace's loopback through it (the Temporal dev server's internal
// services do not start on a bridge address).
type Relay struct {
	l    net.Listener
	mu   sync.Mutex
	open map[net.Conn]bool
}

// NewRelay starts a relay; Addr is where the hosts dial.
func NewRelay(listenHost, target string) (*Relay, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(listenHost, "0"))
	if err != nil {
		return nil, err
	}
	r := &Relay{l: l, open: map[net.Conn]bool{}}
	go r.serve(target)
	return r, nil
}

// Addr is the relay's host:port.
func (r *Relay) Addr() string { return r.l.Addr().String() }

func (r *Relay) track(c net.Conn, on bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if on {
		r.open[c] = true
	} else {
		delete(r.open, c)
	}
}

func (r *Relay) serve(target string) {
	for {
		in, err := r.l.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", target)
		if err != nil {
			in.Close()
			continue
		}
		r.track(in, true)
		r.track(out, true)
		pipe := func(dst, src net.Conn) {
			_, _ = io.Copy(dst, src)
			dst.Close()
			src.Close()
			r.track(dst, false)
			r.track(src, false)
		}
		go pipe(out, in)
		go pipe(in, out)
	}
}

// Close stops accepting and closes every connection (a blackholed host's
// never would end by itself).
func (r *Relay) Close() {
	r.l.Close()
	r.mu.Lock()
	defer r.mu.Unlock()
	for c := range r.open {
		c.Close()
	}
}
