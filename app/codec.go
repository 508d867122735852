package app

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/proto"
)

// A payload codec that encrypts every payload a client sends to Temporal
// (workflow inputs with their Config and dataset specs, rank inputs with the
// attempt's token, reports with metrics, results) with AES-256-GCM, so that
// workflow history, the Web UI and anyone reading the server's database see
// ciphertext. Keys have IDs; each payload names the key that encrypted it,
// so a key can be rotated: add a new key and make it the one that encrypts,
// and keep the old ones for as long as histories encrypted with them are
// read. Workers, starters and the codec server must share the keys.
//
// The key file (CodecKeysEnv names it) is JSON:
//
//	{"encrypt": "2025-11", "keys": {"2025-11": "<base64 of 32 bytes>", "2025-05": "..."}}
//
// Generate a key with `head -c 32 /dev/urandom | base64`.
//
// A payload that is not encrypted is refused on Decode: whoever can write
// to Temporal (start a workflow, signal it) could otherwise hand workers
// plaintext inputs that were never encrypted with the keys.
// "allow_plaintext": true in the key file lets such payloads through, to
// read histories written before encryption was turned on.
//
// AES-GCM's associated data is the key ID alone, not the workflow ID: the
// SDK gives a converter.PayloadCodec nothing but the payloads (Encode and
// Decode take a []*Payload, no context). Context-aware data converters
// (workflow.ContextAware) get a workflow or activity context on some paths
// only: a client's ExecuteWorkflow, SignalWorkflow or schedule calls pass
// the caller's context, which does not say the workflow ID; a child
// workflow's input is encoded in the parent's context and decoded in the
// child's; and the codec server's requests (the Web UI, `temporal
// --codec-endpoint`) carry the payloads and an X-Namespace header, nothing
// about the workflow. A ciphertext can therefore be copied from one
// workflow's history into another's under the same keys and decrypts
// there; it cannot be relabelled with another key's ID, nor altered.

// Codec environment variables.
const (
	// CodecKeysEnv names the key file of the payload codec; unset, payloads
	// travel as they are.
	CodecKeysEnv = "TEMPOTRAIN_CODEC_KEYS"
)

// ErrPlaintextPayload is wrapped by Decode's error for a payload that is not
// encrypted (CodecKeys.AllowPlaintext unset).
var ErrPlaintextPayload = errors.New("payload not encrypted, while a codec is configured")

// Payload metadata the codec writes.
const (
	codecEncoding      = "binary/encrypted"
	codecKeyIDMetadata = "encryption-key-id"
)

// CodecKeys is the key file's content.
type CodecKeys struct {
	// Encrypt is the ID of the key new payloads are encrypted with.
	Encrypt string `json:"encrypt"`
	// Keys by ID, each base64 of 32 bytes (AES-256).
	Keys map[string]string `json:"keys"`
	// AllowPlaintext makes Decode pass payloads that are not encrypted
	// through, to read histories written before encryption (a migration).
	// Default false: Decode refuses them.
	AllowPlaintext bool `json:"allow_plaintext,omitempty"`
}

// LoadCodecKeys reads a key file.
func LoadCodecKeys(path string) (CodecKeys, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return CodecKeys{}, fmt.Errorf("codec keys: %w", err)
	}
	var k CodecKeys
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&k); err != nil {
		return CodecKeys{}, fmt.Errorf("codec keys %s: %w", path, err)
	}
	return k, nil
}

// EncryptionCodec is a converter.PayloadCodec encrypting with AES-256-GCM.
type EncryptionCodec struct {
	encrypt        string
	aeads          map[string]cipher.AEAD
	allowPlaintext bool
}

// NewEncryptionCodec checks keys and returns their codec.
func NewEncryptionCodec(keys CodecKeys) (*EncryptionCodec, error) {
	c := &EncryptionCodec{encrypt: keys.Encrypt, aeads: map[string]cipher.AEAD{}, allowPlaintext: keys.AllowPlaintext}
	if len(keys.Keys) == 0 {
		return nil, errors.New("codec keys: no keys")
	}
	for id, k := range keys.Keys {
		if id == "" {
			return nil, errors.New("codec keys: a key with an empty ID")
		}
		raw, err := base64.StdEncoding.DecodeString(k)
		if err != nil {
			return nil, fmt.Errorf("codec key %q: not base64: %w", id, err)
		}
		if len(raw) != 32 {
			return nil, fmt.Errorf("codec key %q: %d bytes, want 32 (AES-256)", id, len(raw))
		}
		block, err := aes.NewCipher(raw)
		if err != nil {
			return nil, err
		}
		if c.aeads[id], err = cipher.NewGCM(block); err != nil {
			return nil, err
		}
	}
	if _, ok := c.aeads[keys.Encrypt]; !ok {
		return nil, fmt.Errorf("codec keys: encrypt %q names no key", keys.Encrypt)
	}
	return c, nil
}

// Encode encrypts each payload (its metadata and data) with the encrypting
// key; the key's ID is the associated data, so a payload cannot be moved
// under another key's name (the workflow ID is not: see the file's doc).
func (c *EncryptionCodec) Encode(payloads []*commonpb.Payload) ([]*commonpb.Payload, error) {
	out := make([]*commonpb.Payload, len(payloads))
	aead := c.aeads[c.encrypt]
	for i, p := range payloads {
		plain, err := proto.Marshal(p)
		if err != nil {
			return nil, err
		}
		nonce := make([]byte, aead.NonceSize(), aead.NonceSize()+len(plain)+aead.Overhead())
		if _, err := rand.Read(nonce); err != nil {
			return nil, err
		}
		out[i] = &commonpb.Payload{
			Metadata: map[string][]byte{converter.MetadataEncoding: []byte(codecEncoding), codecKeyIDMetadata: []byte(c.encrypt)},
			Data:     aead.Seal(nonce, nonce, plain, []byte(c.encrypt)),
		}
	}
	return out, nil
}

// Decode decrypts payloads this codec encrypted, with the key each names.
// A payload that is not encrypted is an error, unless the keys allow
// plaintext (CodecKeys.AllowPlaintext): then it passes through.
func (c *EncryptionCodec) Decode(payloads []*commonpb.Payload) ([]*commonpb.Payload, error) {
	out := make([]*commonpb.Payload, len(payloads))
	for i, p := range payloads {
		if enc := string(p.GetMetadata()[converter.MetadataEncoding]); enc != codecEncoding {
			if !c.allowPlaintext {
				return nil, fmt.Errorf("%w: payload %d has encoding %q; a history written before encryption is read with \"allow_plaintext\": true in the key file", ErrPlaintextPayload, i, enc)
			}
			out[i] = p
			continue
		}
		id := string(p.GetMetadata()[codecKeyIDMetadata])
		aead, ok := c.aeads[id]
		if !ok {
			return nil, fmt.Errorf("payload encrypted with key %q, which this codec does not have (rotated out?)", id)
		}
		data := p.GetData()
		if len(data) < aead.NonceSize() {
			return nil, fmt.Errorf("encrypted payload of %d bytes: too short", len(data))
		}
		plain, err := aead.Open(nil, data[:aead.NonceSize()], data[aead.NonceSize():], []byte(id))
		if err != nil {
			return nil, fmt.Errorf("payload encrypted with key %q does not decrypt: %w", id, err)
		}
		var dp commonpb.Payload
		if err := proto.Unmarshal(plain, &dp); err != nil {
			return nil, err
		}
		out[i] = &dp
	}
	return out, nil
}
