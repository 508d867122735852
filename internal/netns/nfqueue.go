package netns

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Delay without netem: where the kernel has no netem qdisc, iptables'
// NFQUEUE target hands the packets a delayed host receives to a netfilter
// queue in its namespace, and the packets it sends to the root namespace to
// one there (on the bridge, from its address), and this process holds each
// packet for the delay before it lets it go on (a verdict over netlink). The
// kernel keeps the packets; only their ids cross to userspace (copy mode
// "meta"). Packets leave in the order they came, each the delay after it
// came. Packets are held where they arrive, never where they leave: a
// sender's TCP counts a packet held in its own stack against its small
// queue budget (about two packets), which would cap a connection at two
// packets per delay. So a packet waits once per path, not once per link as
// netem on both ends of every veth makes it: host to host and host to root
// namespace are each Delay one way. The rules carry --queue-bypass: a
// packet queued while no reader is bound goes on at once.

// From linux/netfilter/nfnetlink_queue.h.
const (
	nfqnlMsgPacket       = 0
	nfqnlMsgConfig       = 2
	nfqnlMsgVerdictBatch = 3

	nfqaPacketHdr  = 1
	nfqaVerdictHdr = 2

	nfqaCfgCmd         = 1
	nfqaCfgParams      = 2
	nfqaCfgQueueMaxlen = 3
	nfqaCfgMask        = 4
	nfqaCfgFlags       = 5

	nfqnlCfgCmdBind = 1
	nfqnlCopyMeta   = 1

	nfqaCfgFFailOpen = 1 << 0 // a full queue lets packets go on, not drops them
	nfqaCfgFGSO      = 1 << 2 // whole GSO packets, not segmented for us

	nfAccept = 1
)

// delayQueue is the netfilter queue reader of one host.
type delayQueue struct {
	fd    int
	num   uint16
	delay time.Duration
	held  chan held
	stop  chan struct{}
	wg    sync.WaitGroup
	seq   uint32
}

type held struct {
	id  uint32
	due time.Time
}

// iptablesLegacy is the iptables whose NFQUEUE target this kernel has (the
// nftables queue expression is not built in everywhere).
const iptablesLegacy = "iptables-legacy"

// rootQueue is the number of the root namespace's queue of a host: one
// per host (by index, < 64) of its network (Network.queueBase).
func (h *Host) rootQueue() uint16 { return h.n.queueBase + uint16(h.index%64) }

// delayRule is one NFQUEUE rule of a host's delay: in the host's namespace
// (ns) or the root namespace (ns == "").
type delayRule struct {
	ns   string
	num  uint16
	rule []string // after "-t mangle -A"
}

func (h *Host) delayRules() []delayRule {
	q := func(num uint16) []string {
		return []string{"-j", "NFQUEUE", "--queue-num", fmt.Sprint(num), "--queue-bypass"}
	}
	root := h.rootQueue()
	return []delayRule{
		{ns: h.Name, num: 0, rule: append([]string{"PREROUTING", "-i", h.dev}, q(0)...)},
		{ns: "", num: root, rule: append([]string{"PREROUTING", "-i", h.n.bridge, "-s", h.Addr}, q(root)...)},
	}
}

func iptables(ns, op string, rule []string) error {
	args := append([]string{iptablesLegacy, "-w", "-t", "mangle", op}, rule...)
	if ns != "" {
		args = append([]string{"ip", "netns", "exec", ns}, args...)
	}
	return run(args...)
}

// startDelay holds what the host receives, and what it sends to the root
// namespace, for d each.
func (h *Host) startDelay(d time.Duration) error {
	if _, err := exec.LookPath(iptablesLegacy); err != nil {
		return fmt.Errorf("netns: delay without netem needs %s (apt install iptables): %w", iptablesLegacy, err)
	}
	for _, r := range h.delayRules() {
		q := &delayQueue{num: r.num, delay: d, held: make(chan held, 1<<16), stop: make(chan struct{})}
		open := func() (err error) {
			q.fd, err = unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
			return err
		}
		var err error
		if r.ns != "" {
			err = h.do(open)
		} else {
			err = open()
		}
		if err == nil {
			if err = q.bind(); err != nil {
				unix.Close(q.fd)
			}
		}
		if err != nil {
			h.stopDelay()
			return fmt.Errorf("netns: netfilter queue %d for %s: %w", r.num, h.Name, err)
		}
		q.wg.Add(2)
		go q.read()
		go q.release()
		h.queues = append(h.queues, q)
		if err := iptables(r.ns, "-A", r.rule); err != nil {
			h.stopDelay()
			return err
		}
	}
	return nil
}

// stopDelay removes the rules, then the readers (the packets they hold go
// on when their sockets close).
func (h *Host) stopDelay() {
	if len(h.queues) == 0 {
		return
	}
	for _, r := range h.delayRules() {
		for iptables(r.ns, "-D", r.rule) == nil {
		}
	}
	for _, q := range h.queues {
		q.close()
	}
	h.queues = nil
}

func (q *delayQueue) close() {
	select {
	case <-q.stop:
		return
	default:
	}
	close(q.stop)
	q.wg.Wait() // the reader wakes within its receive timeout
	unix.Close(q.fd)
}

// bind binds the socket to queue q.num: packets' metadata only, a long
// queue that lets packets go on when full, GSO packets whole.
func (q *delayQueue) bind() error {
	if err := unix.Bind(q.fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return err
	}
	_ = unix.SetsockoptInt(q.fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 16<<20)
	// The reader looks at q.stop this often.
	tv := unix.NsecToTimeval((200 * time.Millisecond).Nanoseconds())
	if err := unix.SetsockoptTimeval(q.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return err
	}
	cmd := []byte{nfqnlCfgCmdBind, 0, 0, unix.AF_INET}
	if err := q.request(nfqnlMsgConfig, attr(nfqaCfgCmd, cmd)); err != nil {
		return fmt.Errorf("bind queue %d: %w", q.num, err)
	}
	params := binary.BigEndian.AppendUint32(nil, 0)
	params = append(params, nfqnlCopyMeta)
	flags := binary.BigEndian.AppendUint32(nil, nfqaCfgFFailOpen|nfqaCfgFGSO)
	var b []byte
	b = append(b, attr(nfqaCfgParams, params)...)
	b = append(b, attr(nfqaCfgQueueMaxlen, binary.BigEndian.AppendUint32(nil, 1<<16))...)
	b = append(b, attr(nfqaCfgMask, flags)...)
	b = append(b, attr(nfqaCfgFlags, flags)...)
	if err := q.request(nfqnlMsgConfig, b); err != nil {
		return fmt.Errorf("configure queue %d: %w", q.num, err)
	}
	return nil
}

// attr is a netlink attribute, padded to 4 bytes.
func attr(typ uint16, data []byte) []byte {
	b := binary.NativeEndian.AppendUint16(nil, uint16(4+len(data)))
	b = binary.NativeEndian.AppendUint16(b, typ)
	b = append(b, data...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

// message is a netfilter queue netlink message: header, nfgenmsg, attrs.
func (q *delayQueue) message(typ uint8, flags uint16, attrs []byte) []byte {
	q.seq++
	b := binary.NativeEndian.AppendUint32(nil, uint32(unix.NLMSG_HDRLEN+4+len(attrs)))
	b = binary.NativeEndian.AppendUint16(b, unix.NFNL_SUBSYS_QUEUE<<8|uint16(typ))
	b = binary.NativeEndian.AppendUint16(b, unix.NLM_F_REQUEST|flags)
	b = binary.NativeEndian.AppendUint32(b, q.seq)
	b = binary.NativeEndian.AppendUint32(b, 0)
	b = append(b, unix.AF_UNSPEC, unix.NFNETLINK_V0)
	b = binary.BigEndian.AppendUint16(b, q.num)
	return append(b, attrs...)
}

// request sends a message with NLM_F_ACK and reads the kernel's answer
// (before the reader starts: nothing else arrives yet).
func (q *delayQueue) request(typ uint8, attrs []byte) error {
	if err := unix.Sendto(q.fd, q.message(typ, unix.NLM_F_ACK, attrs), 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return err
	}
	buf := make([]byte, 4096)
	n, _, err := unix.Recvfrom(q.fd, buf, 0)
	if err != nil {
		return err
	}
	msgs, err := syscall.ParseNetlinkMessage(buf[:n])
	if err != nil {
		return err
	}
	for _, m := range msgs {
		if m.Header.Type == unix.NLMSG_ERROR && len(m.Data) >= 4 {
			if code := int32(binary.NativeEndian.Uint32(m.Data)); code != 0 {
				return unix.Errno(-code)
			}
			return nil
		}
	}
	return errors.New("no acknowledgement")
}

// read takes the queued packets' ids in order and hands them to release.
func (q *delayQueue) read() {
	defer q.wg.Done()
	buf := make([]byte, 1<<16)
	for {
		n, _, err := unix.Recvfrom(q.fd, buf, 0)
		if err != nil || n == 0 {
			select {
			case <-q.stop:
				return
			default:
			}
			if errors.Is(err, unix.ENOBUFS) || errors.Is(err, unix.EINTR) || errors.Is(err, unix.EAGAIN) {
				continue // a timeout, or messages lost: a later batch verdict lets their packets go
			}
			return
		}
		now := time.Now()
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			continue
		}
		for _, m := range msgs {
			if m.Header.Type != unix.NFNL_SUBSYS_QUEUE<<8|nfqnlMsgPacket || len(m.Data) < 4 {
				continue
			}
			if id, ok := packetID(m.Data[4:]); ok {
				select {
				case q.held <- held{id: id, due: now.Add(q.delay)}:
				case <-q.stop:
					return
				}
			}
		}
	}
}

// packetID finds NFQA_PACKET_HDR's packet id among attributes.
func packetID(b []byte) (uint32, bool) {
	for len(b) >= 4 {
		l := int(binary.NativeEndian.Uint16(b))
		typ := binary.NativeEndian.Uint16(b[2:]) &^ (unix.NLA_F_NESTED | unix.NLA_F_NET_BYTEORDER)
		if l < 4 || l > len(b) {
			return 0, false
		}
		if typ == nfqaPacketHdr && l >= 8 {
			return binary.BigEndian.Uint32(b[4:]), true
		}
		b = b[(l+3)&^3:]
	}
	return 0, false
}

// release lets each packet go on at its due time: one batch verdict for
// every packet due (ids grow in queue order).
func (q *delayQueue) release() {
	defer q.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var next *held
	for {
		var p held
		if next != nil {
			p, next = *next, nil
		} else {
			select {
			case p = <-q.held:
			case <-q.stop:
				return
			}
		}
		if wait := time.Until(p.due); wait > 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-q.stop:
				return
			}
		}
		last := p.id
	due:
		for {
			select {
			case n := <-q.held:
				if time.Now().Before(n.due) {
					next = &n
					break due
				}
				last = n.id
			default:
				break due
			}
		}
		q.verdict(last)
	}
}

// verdict accepts every queued packet up to id.
func (q *delayQueue) verdict(id uint32) {
	v := binary.BigEndian.AppendUint32(nil, nfAccept)
	v = binary.BigEndian.AppendUint32(v, id)
	_ = unix.Sendto(q.fd, q.message(nfqnlMsgVerdictBatch, 0, attr(nfqaVerdictHdr, v)), 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK})
}
