package main

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"os"

	"github.com/tempotrain/tempotrain/app"
)

// runCodecServer serves the payload codec (app.EncryptionCodec) over HTTP,
// for the Web UI's "Codec Server" setting and `temporal workflow show
// --codec-endpoint`: with it they show the plaintext of runs whose payloads
// the workers encrypt.
func runCodecServer(args []string) error {
	fs := flag.NewFlagSet("codec-server", flag.ExitOnError)
	keys := fs.String("codec-keys", "", "key file of the payload codec (env "+app.CodecKeysEnv+")")
	listen := fs.String("listen", "127.0.0.1:8081", "address to serve on")
	origins := fs.String("origins", "http://localhost:8233,http://127.0.0.1:8233", "comma-separated origins allowed by CORS: the Web UI's address")
	token := fs.String("auth-token", os.Getenv(codecTokenEnv), "token requests must carry as \"Authorization: Bearer <token>\" (env "+codecTokenEnv+"); required unless -insecure-no-auth")
	insecure := fs.Bool("insecure-no-auth", false, "serve without a token: anyone who reaches the address can decrypt every history and forge payloads")
	hosts := fs.String("hosts", "", "comma-separated host names clients reach the server by, besides the -listen address's IP (and localhost for a loopback one); other Host headers get 403 (DNS rebinding)")
	maxBody := fs.Int64("max-body", app.DefaultCodecMaxBody, "largest request body in bytes; larger gets 413")
	plaintext := fs.Bool("allow-plaintext", false, "decode payloads that are not encrypted (histories written before encryption) instead of refusing them; also \"allow_plaintext\": true in the key file")
	_ = fs.Parse(args)
	path := *keys
	if path == "" {
		path = os.Getenv(app.CodecKeysEnv)
	}
	if path == "" {
		return errors.New("codec-server: -codec-keys or " + app.CodecKeysEnv + " names the key file")
	}
	k, err := app.LoadCodecKeys(path)
	if err != nil {
		return err
	}
	k.AllowPlaintext = k.AllowPlaintext || *plaintext
	codec, err := app.NewEncryptionCodec(k)
	if err != nil {
		return err
	}
	if *token == "" && !*insecure {
		return errors.New("codec-server: -auth-token (or " + codecTokenEnv + ") is required; -insecure-no-auth serves without one")
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	srv, err := app.NewCodecServer(codec, ln.Addr(), app.CodecServerOptions{Token: *token, Insecure: *insecure,
		Origins: splitList(*origins), Hosts: splitList(*hosts), MaxBodyBytes: *maxBody})
	if err != nil {
		_ = ln.Close()
		return fmt.Errorf("codec-server: %w", err)
	}
	fmt.Printf("codec server on http://%s (keys %s, encrypting with %q, token required %v, plaintext allowed %v); Web UI origins %v\n",
		ln.Addr(), path, k.Encrypt, *token != "", k.AllowPlaintext, splitList(*origins))
	return srv.Serve(ln)
}

// codecTokenEnv holds the codec server's token (better than the flag, which
// other users of the machine see in the process list).
const codecTokenEnv = "TEMPOTRAIN_CODEC_AUTH_TOKEN"
