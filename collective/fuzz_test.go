package collective

import (
	"bytes"
	"errors"
	"net"
	"testing"
	"time"
)

// streamConn is a net.Conn that reads a fixed byte stream: the fuzzer's
// bytes stand for what the left neighbour sends.
type streamConn struct{ r *bytes.Reader }

func (s streamConn) Read(b []byte) (int, error)       { return s.r.Read(b) }
func (s streamConn) Write(b []byte) (int, error)      { return len(b), nil }
func (s streamConn) Close() error                     { return nil }
func (s streamConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (s streamConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (s streamConn) SetDeadline(time.Time) error      { return nil }
func (s streamConn) SetReadDeadline(time.Time) error  { return nil }
func (s streamConn) SetWriteDeadline(time.Time) error { return nil }

// fuzzSeeds are well-formed streams: the frames of a small all-reduce as
// rank 1 expects them from rank 0, a goodbye, a hello and a reply.
func fuzzSeeds() [][]byte {
	c := fuzzComm(nil, 0)
	var stream []byte
	for u := range c.p.recvUnits() {
		seg, _, _ := c.p.recvSegment(u)
		h := header{typ: frameData, op: c.p.op, seq: 1, unit: uint32(u), length: uint32(len(seg)), total: c.p.total}
		var b [headerLen]byte
		h.encode(&b)
		stream = append(append(stream, b[:]...), make([]byte, len(seg))...)
	}
	var bye [headerLen]byte
	(&header{typ: frameBye, length: 3}).encode(&bye)
	return [][]byte{
		stream,
		append(bye[:], "bye"...),
		appendHello(nil, hello{version: protocolVersion, order: nativeOrder, size: 2, from: 0, to: 1, segment: 64, nonce: newNonce()}),
		appendHello(nil, hello{version: protocolVersion, order: nativeOrder, size: 2, from: 0, to: 1, segment: 64, nonce: newNonce(),
			shm: &shmOffer{host: "boot/host", path: "/dev/shm/x", nonce: [16]byte{1, 2}, slots: 4, slotBytes: 64}}),
		appendReply(nil, protocolVersion, statusRefused, 0, "wrong token"),
		appendReply(nil, protocolVersion, statusAccepted, flagShm, ""),
	}
}

// fuzzComm is rank 1 of 2 in the middle of an operation chosen by kind,
// receiving data from stream.
func fuzzComm(stream []byte, kind byte) *Comm {
	c := newComm(nil, Options{Rank: 1, Size: 2, Token: "tok", SegmentBytes: 64}.withDefaults())
	c.recv, c.send = streamConn{bytes.NewReader(stream)}, streamConn{bytes.NewReader(nil)}
	c.scratch = make([]byte, 64)
	c.seq = 1
	const count = 40 // elements: 160 or 320 bytes, several 64-byte segments
	switch kind % 4 {
	case 0, 1:
		op, elem := opAllReduceFloat32, 4
		if kind%4 == 1 {
			op, elem = opAllReduceFloat64, 8
		}
		for i := range 3 {
			c.p.bounds[i] = i * count / 2
		}
		c.ringPlan(op, make([]byte, count*elem), elem, 1, count)
		c.p.mean = kind&4 != 0
	case 2:
		p := &c.p
		p.kind, p.op, p.data, p.elem, p.rank, p.size, p.root, p.total = planChain, opBroadcast, make([]byte, 150), 1, 1, 2, 0, 150
		p.setSegments(150, 64)
	case 3:
		c.p.bounds = []int{0, 7, 100}
		c.ringPlan(opAllGather, make([]byte, 100), 1, 0, 100)
	}
	return c
}

// FuzzFrameDecoder feeds arbitrary bytes to the decoders of the wire format:
// a frame header, a hello, a reply, and the receiving half of an operation
// (the stream a left neighbour would send). Nothing may panic or read past
// its frame; whatever decodes must encode back to the same bytes.
//
//	go test ./collective -run '^$' -fuzz FuzzFrameDecoder -fuzztime 30s
func FuzzFrameDecoder(f *testing.F) {
	for i, s := range fuzzSeeds() {
		f.Add(s, byte(i))
	}
	f.Fuzz(func(t *testing.T, data []byte, kind byte) {
		if len(data) >= headerLen {
			var b [headerLen]byte
			copy(b[:], data)
			if h, err := decodeHeader(&b); err == nil {
				var again [headerLen]byte
				h.encode(&again)
				if again != b {
					t.Fatalf("header %x decodes to %+v, which encodes to %x", b, h, again)
				}
				if err := h.expect(&h); err != nil {
					t.Fatalf("header does not match itself: %v", err)
				}
			}
		}
		if h, err := readHello(bytes.NewReader(data)); err == nil {
			if enc := appendHello(nil, h); !bytes.HasPrefix(data, enc) {
				t.Fatalf("hello %+v re-encodes to %x, not a prefix of %x", h, enc, data)
			}
		}
		if rp, err := readReply(bytes.NewReader(data)); err == nil {
			if enc := appendReply(nil, rp.version, rp.status, rp.flags, rp.reason); !bytes.HasPrefix(data, enc) {
				t.Fatalf("reply %+v re-encodes to %x, not a prefix of %x", rp, enc, data)
			}
		}
		c := fuzzComm(data, kind)
		err := c.receive()
		if err == nil && c.recvDone.Load() != int64(c.p.recvUnits()) {
			t.Fatalf("receive succeeded after %d of %d frames", c.recvDone.Load(), c.p.recvUnits())
		}
		if err != nil && errors.Is(err, ErrMismatch) == errors.Is(err, ErrPeerGone) && !bytes.Contains([]byte(err.Error()), []byte("rank 1")) {
			t.Fatalf("error does not name this rank: %v", err)
		}
	})
}
