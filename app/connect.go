package app

import (
	"fmt"
	"os"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/contrib/envconfig"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/log"

	"github.com/tempotrain/tempotrain/tracing"
)

// Connection says how a worker or a starter reaches Temporal, as the
// Temporal CLI does: its client configuration (a profile of the TOML file
// at TEMPORAL_CONFIG_FILE or ~/.config/temporalio/temporal.toml, chosen by
// Profile or TEMPORAL_PROFILE), then the environment (TEMPORAL_ADDRESS,
// TEMPORAL_NAMESPACE, TEMPORAL_API_KEY, TEMPORAL_TLS, TEMPORAL_TLS_CLIENT_
// CERT_PATH/_KEY_PATH, TEMPORAL_TLS_SERVER_CA_CERT_PATH,
// TEMPORAL_TLS_SERVER_NAME, TEMPORAL_GRPC_META_*, ...), then the fields
// set here. With CodecKeys (or TEMPOTRAIN_CODEC_KEYS) every payload is
// encrypted (EncryptionCodec).
type Connection struct {
	// Profile of the configuration file; "" uses TEMPORAL_PROFILE or
	// "default".
	Profile string
	// Address and Namespace override the configuration when set.
	Address, Namespace string
	// CodecKeys is the path of the payload codec's key file; "" uses
	// TEMPOTRAIN_CODEC_KEYS, and no encryption when that is unset too.
	CodecKeys string
	// Logger of the SDK.
	Logger log.Logger
}

// ClientOptions returns the client options of the connection, with tel's
// tracing (ClientOptions), for client.Dial.
func (c Connection) ClientOptions(tel *tracing.Telemetry) (client.Options, error) {
	o, err := envconfig.LoadClientOptions(envconfig.LoadClientOptionsRequest{ConfigFileProfile: c.Profile})
	if err != nil {
		return client.Options{}, fmt.Errorf("the Temporal client configuration: %w", err)
	}
	if c.Address != "" {
		o.HostPort = c.Address
	}
	if c.Namespace != "" {
		o.Namespace = c.Namespace
	}
	if o.HostPort == "" {
		o.HostPort = "localhost:7233"
	}
	o.Logger = c.Logger
	keys := c.CodecKeys
	if keys == "" {
		keys = os.Getenv(CodecKeysEnv)
	}
	if keys != "" {
		k, err := LoadCodecKeys(keys)
		if err != nil {
			return client.Options{}, err
		}
		codec, err := NewEncryptionCodec(k)
		if err != nil {
			return client.Options{}, err
		}
		base := o.DataConverter
		if base == nil {
			base = converter.GetDefaultDataConverter()
		}
		o.DataConverter = converter.NewCodecDataConverter(base, codec)
	}
	return ClientOptions(o, tel)
}

// Dial connects with ClientOptions.
func (c Connection) Dial(tel *tracing.Telemetry) (client.Client, error) {
	o, err := c.ClientOptions(tel)
	if err != nil {
		return nil, err
	}
	cl, err := client.Dial(o)
	if err != nil {
		return nil, fmt.Errorf("dial Temporal at %s (namespace %s): %w", o.HostPort, o.Namespace, err)
	}
	return cl, nil
}
