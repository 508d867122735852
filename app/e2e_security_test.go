package app_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/proto"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/app"
	"github.com/tempotrain/tempotrain/train"
)

// writeKeys writes a codec key file: ids' keys (fresh random), encrypting
// with the last; it returns the path and the keys by id.
func writeKeys(t *testing.T, keys map[string]string, encrypt string) string {
	t.Helper()
	b, err := json.Marshal(app.CodecKeys{Encrypt: encrypt, Keys: keys})
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "keys.json")
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func newKey() string {
	k := make([]byte, 32)
	_, _ = rand.Read(k)
	return base64.StdEncoding.EncodeToString(k)
}

// history returns a workflow's events.
func history(t *testing.T, c client.Client, workflowID string) []*historypb.HistoryEvent {
	t.Helper()
	var evs []*historypb.HistoryEvent
	it := c.GetWorkflowHistory(context.Background(), workflowID, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, ev)
	}
	return evs
}

// With the payload codec on the workers and the starter, workflow history
// holds ciphertext: read without the codec (as the server, its database, or
// a Web UI without the codec server see it), it holds neither the run's
// Config nor the attempt's token; the codec server decodes it; keys rotate
// (old payloads still decrypt while the old key is kept).
func TestE2EEncryptedPayloads(t *testing.T) {
	k1 := newKey()
	keys := writeKeys(t, map[string]string{"k1": k1}, "k1")
	ctx, cancel := context.WithTimeout(context.Background(), fitTimeout)
	defer cancel()
	enc, err := app.Connection{Address: srv.Address, CodecKeys: keys}.Dial(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	tq, rq := startWorkerOn(t, enc, true, 2)
	const marker = "config-marker-7c1e9a"
	cfg := map[string]any{"epochs": 2, "steps": 5, "dim": 4, "note": marker}
	run, err := train.NewTrainer(enc, "e2e-linear", cfg, train.ScalingConfig{NumWorkers: 2, TaskQueue: rq},
		train.RunConfig{Name: "encrypted", StoragePath: t.TempDir()}, train.WithTaskQueue(tq)).Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	res, err := run.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Attempts != 1 || res.Metrics["epoch"] != 2 {
		t.Fatalf("result %+v", res)
	}

	// The token of the attempt, from the history decoded with the codec.
	codec, err := app.NewEncryptionCodec(app.CodecKeys{Encrypt: "k1", Keys: map[string]string{"k1": k1}})
	if err != nil {
		t.Fatal(err)
	}
	dc := converter.NewCodecDataConverter(converter.GetDefaultDataConverter(), codec)
	var token string
	var plain bytes.Buffer
	var encrypted []*commonpb.Payload
	for _, ev := range history(t, cl, run.WorkflowID) {
		b, _ := proto.Marshal(ev)
		plain.Write(b)
		if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil && a.GetActivityType().GetName() == api.ActivityRunRank {
			var in api.RunRankInput
			if err := dc.FromPayloads(a.GetInput(), &in); err != nil {
				t.Fatalf("decode a rank's input with the codec: %v", err)
			}
			token = in.Token
			encrypted = append(encrypted, a.GetInput().GetPayloads()...)
		}
	}
	if token == "" || len(encrypted) == 0 {
		t.Fatal("no rank input in the history")
	}
	for what, s := range map[string]string{"the token": token, "the config": marker, "the storage path": res.Path} {
		if bytes.Contains(plain.Bytes(), []byte(s)) {
			t.Errorf("%s is in the history in plaintext", what)
		}
	}

	// The codec server, as the Web UI calls it.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cs, err := app.NewCodecServer(codec, ln.Addr(), app.CodecServerOptions{Token: "ui-token", Origins: []string{"http://localhost:8233"}})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = cs.Serve(ln) }()
	defer cs.Close()
	ts := struct{ URL string }{"http://" + ln.Addr().String()}
	body, _ := json.Marshal(map[string]any{"payloads": []json.RawMessage{protoJSON(t, encrypted[0])}})
	decode := func(auth string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, ts.URL+"/decode", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Origin", "http://localhost:8233")
		if auth != "" {
			req.Header.Set("Authorization", "Bearer "+auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := decode(""); code != http.StatusUnauthorized {
		t.Errorf("codec server without the token: HTTP %d, want 401", code)
	}
	code, out := decode("ui-token")
	var decoded struct {
		Payloads []struct {
			Data string `json:"data"`
		} `json:"payloads"`
	}
	if err := json.Unmarshal([]byte(out), &decoded); err != nil || code != http.StatusOK || len(decoded.Payloads) != 1 {
		t.Fatalf("codec server decode: HTTP %d %.200s (%v)", code, out, err)
	}
	if data, _ := base64.StdEncoding.DecodeString(decoded.Payloads[0].Data); !bytes.Contains(data, []byte(`"token":"`+token+`"`)) {
		t.Errorf("the codec server's plaintext %.200q lacks the rank input's token", data)
	}

	// Rotation: k2 encrypts, k1 still decrypts the old run.
	rotated := writeKeys(t, map[string]string{"k1": k1, "k2": newKey()}, "k2")
	enc2, err := app.Connection{Address: srv.Address, CodecKeys: rotated}.Dial(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer enc2.Close()
	var again api.Result
	if err := enc2.GetWorkflow(ctx, run.WorkflowID, "").Get(ctx, &again); err != nil || again.Metrics["epoch"] != 2 {
		t.Errorf("the old run's result with the rotated keys: %+v, %v", again, err)
	}
	onlyNew := writeKeys(t, map[string]string{"k2": newKey()}, "k2")
	enc3, err := app.Connection{Address: srv.Address, CodecKeys: onlyNew}.Dial(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer enc3.Close()
	if err := enc3.GetWorkflow(ctx, run.WorkflowID, "").Get(ctx, &again); err == nil || !strings.Contains(err.Error(), `key "k1"`) {
		t.Errorf("the old run's result without its key: %v, want an error naming key k1", err)
	}
}

func protoJSON(t *testing.T, p *commonpb.Payload) json.RawMessage {
	t.Helper()
	meta := map[string]string{}
	for k, v := range p.GetMetadata() {
		meta[k] = base64.StdEncoding.EncodeToString(v)
	}
	b, err := json.Marshal(map[string]any{"metadata": meta, "data": base64.StdEncoding.EncodeToString(p.GetData())})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// pki is a test CA with a server and a client certificate, as PEM files.
type pki struct{ ca, serverCert, serverKey, clientCert, clientKey string }

func newPKI(t *testing.T) (pki, *tls.Config) {
	t.Helper()
	dir := t.TempDir()
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "tempotrain test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	leaf := func(serial int64, name string, usage x509.ExtKeyUsage) ([]byte, *ecdsa.PrivateKey) {
		k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			DNSNames: []string{name}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		return der, k
	}
	keyDER := func(k *ecdsa.PrivateKey) []byte {
		b, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	sDER, sKey := leaf(2, "temporal.test", x509.ExtKeyUsageServerAuth)
	cDER, cKey := leaf(3, "tempotrain-worker", x509.ExtKeyUsageClientAuth)
	p := pki{
		ca:         write("ca.pem", "CERTIFICATE", caDER),
		serverCert: write("server.pem", "CERTIFICATE", sDER),
		serverKey:  write("server.key", "EC PRIVATE KEY", keyDER(sKey)),
		clientCert: write("client.pem", "CERTIFICATE", cDER),
		clientKey:  write("client.key", "EC PRIVATE KEY", keyDER(cKey)),
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	cert, err := tls.LoadX509KeyPair(p.serverCert, p.serverKey)
	if err != nil {
		t.Fatal(err)
	}
	return p, &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert, NextProtos: []string{"h2"}}
}

// tlsFront is a mutual-TLS endpoint in front of the dev server: it
// terminates TLS, requiring a client certificate of the test CA, and
// forwards the bytes (gRPC over HTTP/2) to the server's plaintext port.
func tlsFront(t *testing.T, cfg *tls.Config, target string) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { _ = ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer in.Close()
				if err := in.(*tls.Conn).Handshake(); err != nil {
					return
				}
				out, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer out.Close()
				done := make(chan struct{}, 2)
				go func() { _, _ = io.Copy(out, in); done <- struct{}{} }()
				go func() { _, _ = io.Copy(in, out); done <- struct{}{} }()
				<-done
			}()
		}
	}()
	return ln.Addr().String()
}

// Workers and starters reach a server that requires mutual TLS with the
// Temporal CLI's environment variables (TEMPORAL_TLS_*): a run goes through
// it; without a client certificate the connection is refused.
func TestE2EMutualTLS(t *testing.T) {
	p, serverTLS := newPKI(t)
	front := tlsFront(t, serverTLS, srv.Address)
	t.Setenv("TEMPORAL_CONFIG_FILE", filepath.Join(t.TempDir(), "none.toml"))
	t.Setenv("TEMPORAL_ADDRESS", front)
	t.Setenv("TEMPORAL_TLS_SERVER_CA_CERT_PATH", p.ca)
	t.Setenv("TEMPORAL_TLS_SERVER_NAME", "temporal.test")

	// No client certificate: refused.
	if c, err := (app.Connection{}).Dial(nil); err == nil {
		c.Close()
		t.Fatal("a client without a certificate reached a server that requires one")
	} else {
		t.Logf("without a client certificate: %v", err)
	}

	t.Setenv("TEMPORAL_TLS_CLIENT_CERT_PATH", p.clientCert)
	t.Setenv("TEMPORAL_TLS_CLIENT_KEY_PATH", p.clientKey)
	c, err := (app.Connection{}).Dial(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tq, rq := startWorkerOn(t, c, true, 2)
	ctx, cancel := context.WithTimeout(context.Background(), fitTimeout)
	defer cancel()
	res, err := train.NewTrainer(c, "e2e-linear", linearConfig{Epochs: 2, Steps: 5, Dim: 4}, train.ScalingConfig{NumWorkers: 2, TaskQueue: rq},
		train.RunConfig{Name: "mtls", StoragePath: t.TempDir()}, train.WithTaskQueue(tq)).Fit(ctx)
	if err != nil || res.Metrics["epoch"] != 2 {
		t.Fatalf("a run over mutual TLS: %+v, %v", res, err)
	}
}
