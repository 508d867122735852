package collective

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// marker is a float32 whose bytes are easy to find on the wire.
var marker = math.Float32frombits(binary.LittleEndian.Uint32([]byte("PLTX")))

// allReduceMarkers runs an all-reduce whose buffers hold marker everywhere
// (the sum of three ranks' markers and zeros is marker again).
func allReduceMarkers(t *testing.T, comms []*Comm) {
	t.Helper()
	noErrors(t, "AllReduce", each(len(comms), func(r int) error {
		buf := make([]float32, 64<<10)
		if r == 0 {
			for i := range buf {
				buf[i] = marker
			}
		}
		if err := comms[r].AllReduceFloat32(context.Background(), buf, Sum); err != nil {
			return err
		}
		if buf[len(buf)-1] != marker {
			return errors.New("wrong sum")
		}
		return nil
	}))
}

// With Encrypt, a link's data is ciphertext on the wire (a recording proxy
// between ranks 0 and 1 sees no plaintext, where it sees it without
// Encrypt), the results are the same, and a rank that asks encrypts both of
// its links (its neighbours need not ask).
func TestEncryptedLinks(t *testing.T) {
	t.Parallel()
	for _, encrypt := range []bool{false, true} {
		const n = 3
		lns, peers := listeners(t, n)
		rec := newWireRecorder(t, peers[1])
		dialed := append([]string(nil), peers...)
		dialed[1] = rec.ln.Addr().String()
		comms := make([]*Comm, n)
		noErrors(t, "Connect", each(n, func(r int) error {
			var err error
			// Only rank 0 asks: its links (to 1, from 2) are encrypted.
			comms[r], err = Connect(context.Background(), lns[r], dialed, Options{Rank: r, Size: n, Token: "tok",
				Transport: TransportTCP, Encrypt: encrypt && r == 0, ConnectTimeout: 20 * time.Second})
			return err
		}))
		allReduceMarkers(t, comms)
		for r, c := range comms {
			send, recv := c.Encrypted()
			wantSend, wantRecv := encrypt && (r == 0 || r == 2), encrypt && (r == 0 || r == 1)
			if send != wantSend || recv != wantRecv {
				t.Errorf("encrypt %v: rank %d links encrypted %v/%v, want %v/%v", encrypt, r, send, recv, wantSend, wantRecv)
			}
			_ = c.Close()
		}
		seen := bytes.Contains(rec.bytes(), []byte("PLTXPLTXPLTX"))
		if seen == encrypt {
			t.Errorf("encrypt %v: plaintext on the wire between ranks 0 and 1: %v", encrypt, seen)
		}
	}
}

// A machine in the middle that passes the token handshake through and then
// terminates TLS on both sides (its own sessions with each rank) is caught:
// the sessions' keying material differs, so the token binding fails.
func TestEncryptedLinkRefusesAMachineInTheMiddle(t *testing.T) {
	t.Parallel()
	const n = 2
	lns, peers := listeners(t, n)
	mitm, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = mitm.Close() }()
	cert, err := ephemeralCert()
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Add(1)
	go func() {
		defer wg.Done()
		in, err := mitm.Accept()
		if err != nil {
			return
		}
		defer in.Close()
		out, err := net.Dial("tcp", peers[1])
		if err != nil {
			return
		}
		defer out.Close()
		// The token handshake, relayed as is.
		if !relayHandshake(in, out, func(flags byte) byte { return flags }) {
			return
		}
		// Then TLS with each side on its own.
		cfg := &tls.Config{Certificates: []tls.Certificate{cert}, InsecureSkipVerify: true, ClientAuth: tls.RequireAnyClientCert, MinVersion: tls.VersionTLS13}
		a, b := tls.Server(in, cfg), tls.Client(out, cfg)
		go func() { _, _ = io.Copy(a, b) }()
		_, _ = io.Copy(b, a)
	}()
	dialed := []string{peers[0], mitm.Addr().String()}
	errs := each(n, func(r int) error {
		c, err := Connect(context.Background(), lns[r], dialed, Options{Rank: r, Size: n, Token: "tok",
			Transport: TransportTCP, Encrypt: true, ConnectTimeout: 3 * time.Second})
		if err == nil {
			_ = c.Close()
		}
		return err
	})
	if errs[0] == nil || !strings.Contains(errs[0].Error(), "not bound to the attempt's token") {
		t.Errorf("rank 0 dialing through the machine in the middle: %v, want the token binding to fail", errs[0])
	}
	_ = mitm.Close()
}
