package main

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

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
	token := fs.String("auth-token", os.Getenv("TEMPOTRAIN_CODEC_AUTH_TOKEN"), "when set, requests must carry \"Authorization: Bearer <token>\" (env TEMPOTRAIN_CODEC_AUTH_TOKEN)")
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
	codec, err := app.NewEncryptionCodec(k)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	var allowed []string
	for _, o := range strings.Split(*origins, ",") {
		if o = strings.TrimSpace(o); o != "" {
			allowed = append(allowed, o)
		}
	}
	fmt.Printf("codec server on http://%s (keys %s, encrypting with %q); Web UI origins %v\n", ln.Addr(), path, k.Encrypt, allowed)
	srv := &http.Server{Handler: app.CodecHandler(codec, allowed, *token), ReadHeaderTimeout: 10 * time.Second}
	return srv.Serve(ln)
}
