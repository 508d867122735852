package app

import (
	"encoding/base64"
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
	// Plain payloads pass through (history written before encryption).
	if dec, err := c.Decode([]*commonpb.Payload{in}); err != nil || dec[0] != in {
		t.Errorf("plain payload: %v", err)
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
