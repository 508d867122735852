package app

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"
)

func key(b byte) string {
	return base64.StdEncoding.EncodeToString([]byte(strings.Repeat(string(rune(b)), 32)))
}

func TestEncryptionCodec(t *testing.T) {
	c, err := NewEncryptionCodec(CodecKeys{Encrypt: "a", Keys: map[string]string{"a": key('a'), "b": key('b')}})
	if err != nil {
		t.Fatal(err)
	}
	in, err := converter.GetDefaultDataConverter().ToPayload(map[string]string{"token": "s3cret"})
	if err != nil {
		t.Fatal(err)
	}
	enc, err := c.Encode([]*commonpb.Payload{in})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(enc[0].GetData()), "s3cret") || string(enc[0].GetMetadata()["encryption-key-id"]) != "a" {
		t.Fatalf("encoded %q", enc[0])
	}
	dec, err := c.Decode(enc)
	if err != nil || string(dec[0].GetData()) != string(in.GetData()) {
		t.Fatalf("round trip: %v %q", err, dec)
	}
	// A flipped bit, or the payload relabelled with another key: refused.
	bad := &commonpb.Payload{Metadata: enc[0].GetMetadata(), Data: append([]byte(nil), enc[0].GetData()...)}
	bad.Data[len(bad.Data)-1] ^= 1
	if _, err := c.Decode([]*commonpb.Payload{bad}); err == nil {
		t.Error("a tampered payload decoded")
	}
	moved := &commonpb.Payload{Metadata: map[string][]byte{"encoding": []byte("binary/encrypted"), "encryption-key-id": []byte("b")}, Data: enc[0].GetData()}
	if _, err := c.Decode([]*commonpb.Payload{moved}); err == nil {
		t.Error("a payload relabelled with another key decoded")
	}
	// A plain payload is refused (someone who writes to Temporal must not
	// inject inputs that were never encrypted), unless the keys allow it
	// (histories written before encryption).
	if _, err := c.Decode([]*commonpb.Payload{enc[0], in}); !errors.Is(err, ErrPlaintextPayload) || !strings.Contains(err.Error(), "payload 1") {
		t.Errorf("plain payload with a codec: %v, want ErrPlaintextPayload naming payload 1", err)
	}
	migrating, err := NewEncryptionCodec(CodecKeys{Encrypt: "a", Keys: map[string]string{"a": key('a')}, AllowPlaintext: true})
	if err != nil {
		t.Fatal(err)
	}
	if dec, err := migrating.Decode([]*commonpb.Payload{in, enc[0]}); err != nil || dec[0] != in || string(dec[1].GetData()) != string(in.GetData()) {
		t.Errorf("plain payload with allow_plaintext: %v", err)
	}
	for _, k := range []CodecKeys{
		{Encrypt: "a"},
		{Encrypt: "x", Keys: map[string]string{"a": key('a')}},
		{Encrypt: "a", Keys: map[string]string{"a": "not base64!"}},
		{Encrypt: "a", Keys: map[string]string{"a": base64.StdEncoding.EncodeToString([]byte("short"))}},
	} {
		if _, err := NewEncryptionCodec(k); err == nil {
			t.Errorf("keys %+v accepted", k)
		}
	}
}

// AES-GCM's associated data is the key ID and nothing else: the SDK gives
// a PayloadCodec no workflow ID (see the file's doc), so a ciphertext opens
// with the key ID alone, and a copy of it decodes in any workflow's history
// under the same keys (the limit this test pins, and the doc states).
func TestCodecAssociatedDataIsTheKeyID(t *testing.T) {
	c, err := NewEncryptionCodec(CodecKeys{Encrypt: "a", Keys: map[string]string{"a": key('a')}})
	if err != nil {
		t.Fatal(err)
	}
	in, err := converter.GetDefaultDataConverter().ToPayload("input of workflow 1")
	if err != nil {
		t.Fatal(err)
	}
	enc, err := c.Encode([]*commonpb.Payload{in})
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := base64.StdEncoding.DecodeString(key('a'))
	block, _ := aes.NewCipher(raw)
	aead, _ := cipher.NewGCM(block)
	data := enc[0].GetData()
	for _, ad := range []string{"", "workflow-1", "default"} {
		if _, err := aead.Open(nil, data[:aead.NonceSize()], data[aead.NonceSize():], []byte(ad)); err == nil {
			t.Errorf("the ciphertext opens with associated data %q", ad)
		}
	}
	if _, err := aead.Open(nil, data[:aead.NonceSize()], data[aead.NonceSize():], []byte("a")); err != nil {
		t.Errorf("the ciphertext does not open with the key ID as associated data: %v", err)
	}
}

// The codec server as it runs (NewCodecServer on a real listener): Host,
// token, body size, and the codec's refusal of plaintext.
func TestCodecServerSecurity(t *testing.T) {
	keys := CodecKeys{Encrypt: "a", Keys: map[string]string{"a": key('a')}}
	c, err := NewEncryptionCodec(keys)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := converter.GetDefaultDataConverter().ToPayload(map[string]string{"token": "s3cret"})
	if err != nil {
		t.Fatal(err)
	}
	enc, err := c.Encode([]*commonpb.Payload{plain})
	if err != nil {
		t.Fatal(err)
	}
	serve := func(t *testing.T, keys CodecKeys, o CodecServerOptions) string {
		codec, err := NewEncryptionCodec(keys)
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv, err := NewCodecServer(codec, ln.Addr(), o)
		if err != nil {
			t.Fatal(err)
		}
		go func() { _ = srv.Serve(ln) }()
		t.Cleanup(func() { _ = srv.Close() })
		return ln.Addr().String()
	}
	body := func(p *commonpb.Payload) []byte {
		b, err := json.Marshal(map[string]any{"payloads": []map[string]any{{
			"metadata": p.GetMetadata(), "data": p.GetData()}}})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	post := func(t *testing.T, addr, host, path, auth string, b []byte) (int, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, "http://"+addr+path, bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		if host != "" {
			req.Host = host
		}
		req.Header.Set("Content-Type", "application/json")
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(out)
	}

	addr := serve(t, keys, CodecServerOptions{Token: "tok", MaxBodyBytes: 64 << 10})
	_, port, _ := net.SplitHostPort(addr)
	for _, c := range []struct {
		name, host, auth string
		body             []byte
		want             int
	}{
		{"no token", "", "", body(enc[0]), http.StatusUnauthorized},
		{"wrong token", "", "Bearer tok2", body(enc[0]), http.StatusUnauthorized},
		{"token without Bearer", "", "tok", body(enc[0]), http.StatusUnauthorized},
		{"right token", "", "Bearer tok", body(enc[0]), http.StatusOK},
		{"localhost", "localhost:" + port, "Bearer tok", body(enc[0]), http.StatusOK},
		{"oversized body", "", "Bearer tok", bytes.Repeat([]byte(" "), 64<<10+1), http.StatusRequestEntityTooLarge},
		{"rebinding Host", "attacker.example:" + port, "Bearer tok", body(enc[0]), http.StatusForbidden},
		{"rebinding Host, no token", "attacker.example", "", body(enc[0]), http.StatusForbidden},
		{"plaintext payload", "", "Bearer tok", body(plain), http.StatusBadRequest},
	} {
		code, out := post(t, addr, c.host, "/decode", c.auth, c.body)
		if code != c.want {
			t.Errorf("%s: HTTP %d %.200q, want %d", c.name, code, out, c.want)
		}
		switch {
		case code == http.StatusOK && !strings.Contains(out, base64.StdEncoding.EncodeToString(plain.GetData())):
			t.Errorf("%s: the answer %.200q lacks the plaintext", c.name, out)
		case code != http.StatusOK && strings.Contains(out, base64.StdEncoding.EncodeToString(plain.GetData())):
			t.Errorf("%s: HTTP %d with the plaintext", c.name, code)
		case c.name == "plaintext payload" && !strings.Contains(out, "not encrypted"):
			t.Errorf("plaintext payload: the error %.200q does not say why", out)
		}
	}

	// The migration option lets a history written before encryption be
	// read.
	migrating := keys
	migrating.AllowPlaintext = true
	addr = serve(t, migrating, CodecServerOptions{Token: "tok"})
	if code, out := post(t, addr, "", "/decode", "Bearer tok", body(plain)); code != http.StatusOK || !strings.Contains(out, base64.StdEncoding.EncodeToString(plain.GetData())) {
		t.Errorf("plaintext payload with allow_plaintext: HTTP %d %.200q", code, out)
	}

	// No token is a refusal to start, unless insecure is explicit.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if _, err := NewCodecServer(c, ln.Addr(), CodecServerOptions{}); err == nil || !strings.Contains(err.Error(), "token is required") {
		t.Errorf("no token: %v, want a refusal", err)
	}
	addr = serve(t, keys, CodecServerOptions{Insecure: true})
	if code, out := post(t, addr, "", "/decode", "", body(enc[0])); code != http.StatusOK {
		t.Errorf("insecure, no token: HTTP %d %.200q", code, out)
	}
	// Every interface: the names it is reached by must be given.
	every, err := net.ResolveTCPAddr("tcp", "0.0.0.0:8081")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewCodecServer(c, every, CodecServerOptions{Token: "tok"}); err == nil || !strings.Contains(err.Error(), "every interface") {
		t.Errorf("0.0.0.0 without hosts: %v, want a refusal", err)
	}
	if _, err := NewCodecServer(c, every, CodecServerOptions{Token: "tok", Hosts: []string{"codec.internal"}}); err != nil {
		t.Errorf("0.0.0.0 with hosts: %v", err)
	}
	// The key file's field.
	path := filepath.Join(t.TempDir(), "keys.json")
	if err := os.WriteFile(path, []byte(`{"encrypt": "a", "keys": {"a": "`+key('a')+`"}, "allow_plaintext": true}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if k, err := LoadCodecKeys(path); err != nil || !k.AllowPlaintext {
		t.Errorf("allow_plaintext in the key file: %+v, %v", k, err)
	}
}
