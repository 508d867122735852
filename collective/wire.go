package collective

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"unsafe"
)

// Wire format, protocol version 5. All integers are little endian; float
// payloads travel in the ranks' native byte order, which the handshake checks
// is the same on both ends.
//
// Every rank dials its right neighbour (rank+1 mod size) and accepts its left
// neighbour (rank-1 mod size); each TCP connection carries data one way only,
// from the dialer to the acceptor, after the handshake. On a shared-memory
// link (shm_linux.go) the data frames go through the shared slots instead and
// the connection carries only a goodbye; it stays open as the liveness
// channel.
//
// The handshake proves to each end that the other holds the attempt's token,
// without sending it: a mutual challenge-response (HMAC-SHA256 keyed by the
// token) over both ends' fresh nonces, so a recorded handshake cannot be
// replayed, and nobody who reads the network learns the token. The final
// reply, which says how the link runs (shared memory, TLS), is authenticated
// with the whole transcript, so a relay cannot change what the ends agreed.
//
//	dialer -> acceptor   first flight: hello (its parameters and a nonce Nd)
//	                     and MACh = HMAC(token, "TTCL hello" || hello)
//	acceptor -> dialer   reply; when not refused, a challenge: a nonce Na
//	                     and MACa = HMAC(token, "TTCL acceptor" || hello || Na)
//	dialer -> acceptor   proof: MACd = HMAC(token, "TTCL dialer" || hello || Na)
//	acceptor -> dialer   final reply: accepted (with its flags: shared memory
//	                     taken, TLS) or refused, with the reason; when
//	                     accepted, MACf = HMAC(token, "TTCL final" ||
//	                     transcript), the transcript being every byte both
//	                     ends sent before MACf, the final reply included
//
// hello is the hello's bytes as sent. The dialer checks MACa and MACf, the
// acceptor MACh and MACd; each end refuses a peer that cannot prove the
// token. MACh lets the acceptor tell its neighbour from a stranger as soon
// as the first flight arrives, before the round trip of the challenge
// (connect.go gives a proven connection its own place, out of the slots
// strangers compete for); it cannot be replayed to any effect: a copy
// still has to answer the acceptor's fresh nonce, and the acceptor takes
// each Nd once. A connection is a link only once MACd is checked: a hello
// left in the backlog by a dialer that gave up never sends it, and is
// dropped. A dialer that asked for TLS refuses a final reply that runs the
// link neither over TLS nor over shared memory.
//
// Hello, dialer -> acceptor (56 bytes [+ shm offer]):
//
//	off len field
//	0   4   magic "TTCL"
//	4   2   protocol version (5)
//	6   1   byte order of float payloads (1 little, 2 big)
//	7   1   flags: bit 0 = a shared-memory offer follows the nonce; bit 1 =
//	        the dialer wants the link encrypted (TLS)
//	8   4   world size
//	12  4   rank of the dialer
//	16  4   rank it means to reach
//	20  4   segment size in bytes (must match: both ends cut buffers the same way)
//	24  32  nonce Nd, random
//
// The shared-memory offer (flag bit 0), after the nonce:
//
//	0   2   host identity length, 1..maxHostID; then the identity (boot id and
//	        host name: the acceptor tries the offer only if it is its own)
//	    2   path length, 1..maxShmPath; then the path of the region the
//	        dialer created (shm_linux.go describes its layout)
//	    16  nonce written in the region's header: proof that the acceptor
//	        opened the dialer's region, not a namesake on another host
//	    4   slots in the region
//	    4   payload bytes per slot
//
// MACh (32 bytes) follows the hello (and its offer, if any).
//
// Reply and final reply, acceptor -> dialer (10 bytes + reason):
//
//	0   4   magic "TTCL"
//	4   2   protocol version of the acceptor
//	6   1   status: 0 accepted, 1 refused
//	7   1   flags (final reply, status accepted, only): bit 0 = the
//	        acceptor mapped the offered region: data frames use shared
//	        memory; bit 1 = the link runs TLS: both ends start a TLS 1.3
//	        session on the connection at once (see tlsLink)
//	8   2   reason length, 0..maxReason
//	10  n   reason (UTF-8), why the connection was refused
//
// The challenge (after a reply that is not refused) is Na (32 bytes) and MACa
// (32 bytes); the proof is MACd (32 bytes); MACf (32 bytes) follows a final
// reply that accepts. The acceptor maps a shared-memory region only after the
// dialer's proof.
//
// Then frames, each a 32-byte header and a payload:
//
//	0   1   frame type: 1 data, 2 bye (the sender closed its Comm; payload = reason)
//	1   1   operation (opAllReduceFloat32 ...)
//	2   2   reserved, 0
//	4   4   sequence number of the operation on this Comm (ranks count alike)
//	8   4   unit: index of this frame within the operation
//	12  4   payload length in bytes
//	16  8   total: the operation's element count (all-reduce), byte count
//	        (broadcast, all-gather) or 0, so that ranks passing buffers of
//	        different lengths fail with a clear error instead of garbage
//	24  4   arg: the root of a broadcast, else 0
//	28  4   reserved, 0
//
// On a shared-memory link the same header sits at the start of each slot,
// followed by the payload.
//
// The receiver knows exactly which frame comes next, so every field is checked
// against what it expects; a mismatch means the ranks called different
// collectives (or different lengths or roots) and fails the operation.
const (
	protocolVersion = 5
	helloLen        = 56
	nonceLen        = 32
	macLen          = sha256.Size
	replyLen        = 10
	headerLen       = 32
	maxToken        = 1024
	maxReason       = 1024
	maxHostID       = 512
	maxShmPath      = 4096

	flagShm = 1 // hello: a shared-memory offer follows; reply: it was taken
	flagTLS = 2 // hello: the dialer wants TLS; final reply: the link runs TLS

	frameData = 1
	frameBye  = 2

	statusAccepted = 0
	statusRefused  = 1

	orderLittle = 1
	orderBig    = 2
)

var magic = [4]byte{'T', 'T', 'C', 'L'}

// opcode names an operation on the wire and in errors.
type opcode uint8

const (
	opAllReduceFloat32 opcode = iota + 1
	opAllReduceFloat64
	opBroadcast
	opAllGatherLengths
	opAllGather
	opBarrier
	opShare      // AllocShared's exchanges
	opDirect     // a direct all-reduce's entry exchange (shared.go)
	opDirectDone // its exit barrier
	opLinks      // Connect's agreement on the segment size (agreeSegment)
	opMax        = opLinks
)

func (o opcode) String() string {
	switch o {
	case opAllReduceFloat32:
		return "AllReduceFloat32"
	case opAllReduceFloat64:
		return "AllReduceFloat64"
	case opBroadcast:
		return "Broadcast"
	case opAllGatherLengths:
		return "AllGather(lengths)"
	case opAllGather:
		return "AllGather"
	case opBarrier:
		return "Barrier"
	case opShare:
		return "AllocShared"
	case opDirect:
		return "AllReduce(shared buffers, entry)"
	case opDirectDone:
		return "AllReduce(shared buffers, exit)"
	case opLinks:
		return "Connect(links)"
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// nativeOrder is the byte order of this machine's float payloads.
var nativeOrder = func() uint8 {
	x := uint16(1)
	if *(*byte)(unsafe.Pointer(&x)) == 1 {
		return orderLittle
	}
	return orderBig
}()

type hello struct {
	version  uint16
	order    uint8
	size     uint32
	from, to uint32
	segment  uint32
	nonce    [nonceLen]byte
	tls      bool      // the dialer wants TLS
	shm      *shmOffer // nil: TCP only
}

// newNonce returns nonceLen random bytes.
func newNonce() (n [nonceLen]byte) {
	_, _ = rand.Read(n[:])
	return n
}

// Roles in the handshake's MACs: no MAC of one step is valid for another.
const (
	roleHello    = "TTCL hello"
	roleAcceptor = "TTCL acceptor"
	roleDialer   = "TTCL dialer"
	roleFinal    = "TTCL final"
)

// handshakeMAC is HMAC-SHA256(token, role || parts...): the proof of the
// token by the end in role, for the bytes of the handshake it covers (the
// hello and the acceptor's nonce, or the whole transcript).
func handshakeMAC(token, role string, parts ...[]byte) [macLen]byte {
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte(role))
	for _, p := range parts {
		m.Write(p)
	}
	return [macLen]byte(m.Sum(nil))
}

// shmOffer is a dialer's offer of a shared-memory region for its data.
type shmOffer struct {
	host      string
	path      string
	nonce     [16]byte
	slots     uint32
	slotBytes uint32
}

func appendHello(b []byte, h hello) []byte {
	b = append(b, magic[:]...)
	b = binary.LittleEndian.AppendUint16(b, h.version)
	flags := uint8(0)
	if h.shm != nil {
		flags |= flagShm
	}
	if h.tls {
		flags |= flagTLS
	}
	b = append(b, h.order, flags)
	b = binary.LittleEndian.AppendUint32(b, h.size)
	b = binary.LittleEndian.AppendUint32(b, h.from)
	b = binary.LittleEndian.AppendUint32(b, h.to)
	b = binary.LittleEndian.AppendUint32(b, h.segment)
	b = append(b, h.nonce[:]...)
	if o := h.shm; o != nil {
		b = binary.LittleEndian.AppendUint16(b, uint16(len(o.host)))
		b = append(b, o.host...)
		b = binary.LittleEndian.AppendUint16(b, uint16(len(o.path)))
		b = append(b, o.path...)
		b = append(b, o.nonce[:]...)
		b = binary.LittleEndian.AppendUint32(b, o.slots)
		b = binary.LittleEndian.AppendUint32(b, o.slotBytes)
	}
	return b
}

// readString reads a 2-byte length and that many bytes, 1..limit.
func readString(r io.Reader, what string, limit int) (string, error) {
	var n [2]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return "", err
	}
	l := int(binary.LittleEndian.Uint16(n[:]))
	if l == 0 || l > limit {
		return "", fmt.Errorf("%s length %d out of range 1..%d", what, l, limit)
	}
	b := make([]byte, l)
	if _, err := io.ReadFull(r, b); err != nil {
		return "", err
	}
	return string(b), nil
}

// errBadVersion is returned by readHello for a hello of another protocol
// version: its layout past the version cannot be trusted.
var errBadVersion = errors.New("unsupported protocol version")

// readHello reads and decodes one hello. It checks the layout only; whether
// the hello is welcome is the acceptor's business.
func readHello(r io.Reader) (hello, error) {
	var b [helloLen]byte
	if _, err := io.ReadFull(r, b[:6]); err != nil {
		return hello{}, err
	}
	if [4]byte(b[:4]) != magic {
		return hello{}, fmt.Errorf("bad magic %q: not a tempotrain collective peer", b[:4])
	}
	h := hello{version: binary.LittleEndian.Uint16(b[4:])}
	if h.version != protocolVersion {
		return h, fmt.Errorf("%w %d (this side speaks %d)", errBadVersion, h.version, protocolVersion)
	}
	if _, err := io.ReadFull(r, b[6:]); err != nil {
		return hello{}, err
	}
	h.order = b[6]
	if b[7]&^(flagShm|flagTLS) != 0 {
		return hello{}, fmt.Errorf("unknown hello flags %#x", b[7])
	}
	h.size = binary.LittleEndian.Uint32(b[8:])
	h.from = binary.LittleEndian.Uint32(b[12:])
	h.to = binary.LittleEndian.Uint32(b[16:])
	h.segment = binary.LittleEndian.Uint32(b[20:])
	h.nonce = [nonceLen]byte(b[24:56])
	h.tls = b[7]&flagTLS != 0
	if b[7]&flagShm == 0 {
		return h, nil
	}
	o := &shmOffer{}
	var err error
	if o.host, err = readString(r, "host identity", maxHostID); err != nil {
		return hello{}, err
	}
	if o.path, err = readString(r, "shared memory path", maxShmPath); err != nil {
		return hello{}, err
	}
	var tail [16 + 8]byte
	if _, err := io.ReadFull(r, tail[:]); err != nil {
		return hello{}, err
	}
	o.nonce = [16]byte(tail[:16])
	o.slots = binary.LittleEndian.Uint32(tail[16:])
	o.slotBytes = binary.LittleEndian.Uint32(tail[20:])
	h.shm = o
	return h, nil
}

type reply struct {
	version uint16
	status  uint8
	flags   uint8
	reason  string
}

func appendReply(b []byte, version uint16, status, flags uint8, reason string) []byte {
	if len(reason) > maxReason {
		reason = reason[:maxReason]
	}
	b = append(b, magic[:]...)
	b = binary.LittleEndian.AppendUint16(b, version)
	b = append(b, status, flags)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(reason)))
	return append(b, reason...)
}

func readReply(r io.Reader) (reply, error) {
	var b [replyLen]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return reply{}, err
	}
	if [4]byte(b[:4]) != magic {
		return reply{}, fmt.Errorf("bad magic %q: not a tempotrain collective peer", b[:4])
	}
	rp := reply{version: binary.LittleEndian.Uint16(b[4:]), status: b[6], flags: b[7]}
	if rp.status > statusRefused || rp.flags&^(flagShm|flagTLS) != 0 || rp.status == statusRefused && rp.flags != 0 {
		return reply{}, fmt.Errorf("bad reply status %d/%d", b[6], b[7])
	}
	n := int(binary.LittleEndian.Uint16(b[8:]))
	if n > maxReason {
		return reply{}, fmt.Errorf("reason length %d over %d", n, maxReason)
	}
	if n > 0 {
		reason := make([]byte, n)
		if _, err := io.ReadFull(r, reason); err != nil {
			return reply{}, err
		}
		rp.reason = string(reason)
	}
	return rp, nil
}

// header is a decoded frame header.
type header struct {
	typ    uint8
	op     opcode
	seq    uint32
	unit   uint32
	length uint32
	total  uint64
	arg    uint32
}

func (h *header) encode(b *[headerLen]byte) {
	b[0] = h.typ
	b[1] = byte(h.op)
	b[2], b[3] = 0, 0
	binary.LittleEndian.PutUint32(b[4:], h.seq)
	binary.LittleEndian.PutUint32(b[8:], h.unit)
	binary.LittleEndian.PutUint32(b[12:], h.length)
	binary.LittleEndian.PutUint64(b[16:], h.total)
	binary.LittleEndian.PutUint32(b[24:], h.arg)
	binary.LittleEndian.PutUint32(b[28:], 0)
}

// decodeHeader checks the layout of a header; matching it against the frame
// the receiver expects is header.expect's job.
func decodeHeader(b *[headerLen]byte) (header, error) {
	h := header{
		typ:    b[0],
		op:     opcode(b[1]),
		seq:    binary.LittleEndian.Uint32(b[4:]),
		unit:   binary.LittleEndian.Uint32(b[8:]),
		length: binary.LittleEndian.Uint32(b[12:]),
		total:  binary.LittleEndian.Uint64(b[16:]),
		arg:    binary.LittleEndian.Uint32(b[24:]),
	}
	switch {
	case h.typ != frameData && h.typ != frameBye:
		return h, fmt.Errorf("bad frame type %d", h.typ)
	case b[2] != 0 || b[3] != 0 || binary.LittleEndian.Uint32(b[28:]) != 0:
		return h, errors.New("reserved frame header bytes are not 0")
	case h.typ == frameBye && h.length > maxReason:
		return h, fmt.Errorf("bye reason of %d bytes over %d", h.length, maxReason)
	case h.typ == frameData && (h.op == 0 || h.op > opMax):
		return h, fmt.Errorf("bad operation %d", h.op)
	}
	return h, nil
}

// expect compares a received data header with the one the receiver computed
// for the same frame.
func (h *header) expect(want *header) error {
	switch {
	case h.op != want.op || h.seq != want.seq:
		return fmt.Errorf("peer is in %v #%d, this rank in %v #%d: ranks called collectives in different orders", h.op, h.seq, want.op, want.seq)
	case h.total != want.total:
		return fmt.Errorf("%v #%d: peer passed %d, this rank %d (buffer lengths differ across ranks)", h.op, h.seq, h.total, want.total)
	case h.arg != want.arg:
		return fmt.Errorf("%v #%d: peer uses root %d, this rank root %d", h.op, h.seq, h.arg, want.arg)
	case h.unit != want.unit || h.length != want.length:
		return fmt.Errorf("%v #%d: got frame %d of %d bytes, want frame %d of %d bytes", h.op, h.seq, h.unit, h.length, want.unit, want.length)
	}
	return nil
}
