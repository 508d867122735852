package collective

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"sync"
	"time"
)

// EnvTLS set to 1 makes every Comm of the process ask for TLS on its TCP
// links (Options.Encrypt).
const EnvTLS = "TEMPOTRAIN_COLLECTIVE_TLS"

func (o Options) wantTLS() bool { return o.Encrypt || os.Getenv(EnvTLS) == "1" }

// ephemeral is this process's TLS certificate for rank links: self-signed,
// made once. Certificates prove nothing here; the token does (tlsLink).
var ephemeral struct {
	once sync.Once
	cert tls.Certificate
	err  error
}

func ephemeralCert() (tls.Certificate, error) {
	ephemeral.once.Do(func() {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			ephemeral.err = err
			return
		}
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "tempotrain rank"},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(10 * 365 * 24 * time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
		if err != nil {
			ephemeral.err = err
			return
		}
		ephemeral.cert = tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	})
	return ephemeral.cert, ephemeral.err
}

// tlsLink runs a TLS 1.3 session over a link whose token handshake passed,
// and binds it to the token: each end sends HMAC-SHA256(token, its role ||
// the session's exported keying material) inside the session and checks the
// other's. A machine in the middle that terminated TLS on both sides would
// hold two sessions with different keying material and cannot forge the
// MACs without the token; the certificates, self-signed, are not what is
// trusted.
func (c *Comm) tlsLink(raw *net.TCPConn, server bool, deadline time.Time) (net.Conn, error) {
	cert, err := ephemeralCert()
	if err != nil {
		return nil, fmt.Errorf("TLS certificate: %w", err)
	}
	cfg := &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{cert},
		// The peer is authenticated by the token binding below, not by
		// its certificate.
		InsecureSkipVerify: true, //nolint:gosec
		ClientAuth:         tls.RequireAnyClientCert,
	}
	_ = raw.SetDeadline(earliest(deadline, time.Now().Add(handshakeTimeout)))
	var conn *tls.Conn
	mine, theirs := "TTCL tls dialer", "TTCL tls acceptor"
	if server {
		conn = tls.Server(raw, cfg)
		mine, theirs = theirs, mine
	} else {
		conn = tls.Client(raw, cfg)
	}
	if err := conn.Handshake(); err != nil {
		return nil, fmt.Errorf("TLS handshake: %w", err)
	}
	state := conn.ConnectionState()
	ekm, err := state.ExportKeyingMaterial("tempotrain collective link", nil, 32)
	if err != nil {
		return nil, fmt.Errorf("TLS keying material: %w", err)
	}
	binding := func(role string) []byte {
		m := hmac.New(sha256.New, []byte(c.opts.Token))
		m.Write([]byte(role))
		m.Write(ekm)
		return m.Sum(nil)
	}
	if _, err := conn.Write(binding(mine)); err != nil {
		return nil, fmt.Errorf("TLS token binding: %w", err)
	}
	got := make([]byte, sha256.Size)
	if _, err := io.ReadFull(conn, got); err != nil {
		return nil, fmt.Errorf("TLS token binding: %w", err)
	}
	if !hmac.Equal(got, binding(theirs)) {
		return nil, fmt.Errorf("%w: the TLS session is not bound to the attempt's token (a machine in the middle?)", ErrRefused)
	}
	_ = raw.SetDeadline(time.Time{})
	return conn, nil
}
