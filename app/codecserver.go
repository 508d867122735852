package app

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"go.temporal.io/sdk/converter"
)

// CodecServerOptions configure NewCodecServer. Every field documents its
// default.
type CodecServerOptions struct {
	// Token every request must carry as "Authorization: Bearer <token>"
	// (compared in constant time); a request without it, or with another,
	// gets 401. Required unless Insecure.
	Token string
	// Insecure lets the server run without a Token: anyone who reaches it
	// can decrypt every history (/decode) and forge payloads (/encode).
	// Default false: NewCodecServer refuses an empty Token.
	Insecure bool
	// Origins allowed by CORS: the Web UI's address, e.g.
	// http://localhost:8233. Default none.
	Origins []string
	// Hosts are the names the server is reached by: a request whose Host
	// header names another gets 403, so that a web page whose domain
	// resolves to this machine (DNS rebinding) cannot call it. Default: the
	// listening address's IP, and localhost, 127.0.0.1 and ::1 when it is
	// a loopback address. A server listening on every interface (0.0.0.0,
	// ::) needs Hosts.
	Hosts []string
	// MaxBodyBytes bounds a request's body; a larger one gets 413. Default
	// DefaultCodecMaxBody.
	MaxBodyBytes int64
}

// DefaultCodecMaxBody is CodecServerOptions.MaxBodyBytes's default: room for
// a page of a history's payloads (Temporal's default limit is 2 MiB a
// payload).
const DefaultCodecMaxBody = 8 << 20

// The codec server's timeouts: a client gets CodecReadTimeout to send a
// request (headers within ten seconds), CodecWriteTimeout to take the
// answer, and an idle kept-alive connection is closed after
// CodecIdleTimeout.
const (
	CodecReadTimeout  = 30 * time.Second
	CodecWriteTimeout = 30 * time.Second
	CodecIdleTimeout  = 2 * time.Minute
)

// NewCodecServer returns the HTTP server of codec for a listener at addr, for
// the Web UI ("Codec Server" in its settings) and `temporal workflow show
// --codec-endpoint`: POST /encode and /decode (as
// converter.NewPayloadCodecHTTPHandler serves them), with the checks of o:
// Host header (403), CORS preflight, token (401), body size (413). Serve it
// on the listener.
func NewCodecServer(codec converter.PayloadCodec, addr net.Addr, o CodecServerOptions) (*http.Server, error) {
	if o.Token == "" && !o.Insecure {
		return nil, errors.New("codec server: a token is required (requests carry \"Authorization: Bearer <token>\"); serving without one lets anyone who reaches it decrypt every history, and needs the explicit insecure option")
	}
	if o.MaxBodyBytes == 0 {
		o.MaxBodyBytes = DefaultCodecMaxBody
	}
	if o.MaxBodyBytes < 0 {
		return nil, fmt.Errorf("codec server: max body bytes %d: must be positive", o.MaxBodyBytes)
	}
	hosts, err := codecHosts(addr, o.Hosts)
	if err != nil {
		return nil, err
	}
	return &http.Server{
		Handler:           codecHandler(codec, o, hosts),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       CodecReadTimeout,
		WriteTimeout:      CodecWriteTimeout,
		IdleTimeout:       CodecIdleTimeout,
		MaxHeaderBytes:    64 << 10,
	}, nil
}

// codecHosts is the set of host names a request may name: extra, and those
// of addr.
func codecHosts(addr net.Addr, extra []string) (map[string]bool, error) {
	hosts := map[string]bool{}
	for _, h := range extra {
		if h = strings.ToLower(strings.Trim(strings.TrimSpace(h), "[]")); h != "" {
			hosts[h] = true
		}
	}
	tcp, ok := addr.(*net.TCPAddr)
	if !ok {
		return nil, fmt.Errorf("codec server: listening address %v is not TCP", addr)
	}
	switch {
	case tcp.IP == nil || tcp.IP.IsUnspecified():
		if len(hosts) == 0 {
			return nil, fmt.Errorf("codec server: listening on %v (every interface): name the host names clients reach it by (hosts)", addr)
		}
	case tcp.IP.IsLoopback():
		hosts[tcp.IP.String()] = true
		for _, h := range []string{"localhost", "127.0.0.1", "::1"} {
			hosts[h] = true
		}
	default:
		hosts[tcp.IP.String()] = true
	}
	return hosts, nil
}

func codecHandler(codec converter.PayloadCodec, o CodecServerOptions, hosts map[string]bool) http.Handler {
	h := converter.NewPayloadCodecHTTPHandler(codec)
	want := sha256.Sum256([]byte("Bearer " + o.Token))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		if !hosts[strings.ToLower(strings.Trim(host, "[]"))] {
			http.Error(w, "forbidden: unknown Host", http.StatusForbidden)
			return
		}
		origin := r.Header.Get("Origin")
		for _, o := range o.Origins {
			if o == origin {
				w.Header().Set("Access-Control-Allow-Origin", origin)
				w.Header().Set("Access-Control-Allow-Credentials", "true")
				w.Header().Set("Access-Control-Allow-Headers", "Content-Type,X-Namespace,Authorization")
				w.Header().Set("Access-Control-Allow-Methods", "POST,OPTIONS")
			}
		}
		if r.Method == http.MethodOptions {
			return
		}
		// Hashes of equal length, compared in constant time: neither the
		// token nor its length shows in the response time.
		got := sha256.Sum256([]byte(r.Header.Get("Authorization")))
		if o.Token != "" && subtle.ConstantTimeCompare(got[:], want[:]) != 1 {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		if r.Body != nil {
			body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, o.MaxBodyBytes))
			var tooLarge *http.MaxBytesError
			switch {
			case errors.As(err, &tooLarge):
				http.Error(w, fmt.Sprintf("request body over %d bytes", o.MaxBodyBytes), http.StatusRequestEntityTooLarge)
				return
			case err != nil:
				http.Error(w, "reading the request body: "+err.Error(), http.StatusBadRequest)
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		h.ServeHTTP(w, r)
	})
}
