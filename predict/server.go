package predict

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/tempotrain/tempotrain/storage"
)

// Defaults of ServerOptions.
const (
	DefaultMaxRequestBytes   = 64 << 20
	DefaultMaxConnections    = 1024
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultReadTimeout       = time.Minute
	DefaultWriteTimeout      = time.Minute
	DefaultIdleTimeout       = 2 * time.Minute
	// Platform is the "platform" of the model metadata the server reports.
	Platform = "tempotrain"
)

// ServerOptions configure a Server. The zero value is the defaults.
type ServerOptions struct {
	// Name is the model's name in the URLs (/v2/models/{name}/...); default
	// the first loaded predictor's Metadata().Name ("mnist-mlp"), or the
	// name the first repository load gives. It stays the same across
	// reloads.
	Name string
	// Loader loads the checkpoint at a URI for Reload and the repository
	// load endpoint (default Load).
	Loader func(ctx context.Context, uri string) (Predictor, error)
	// Batch configures the Batcher put in front of every loaded predictor
	// (zero: its defaults).
	Batch BatcherOptions
	// NoBatching runs every request alone (Batch.MaxBatch = 1): requests
	// still queue for Batch.Concurrency workers.
	NoBatching bool
	// MaxRequestBytes bounds an inference request's body; a larger one is
	// 413 (default DefaultMaxRequestBytes, 64 MiB).
	MaxRequestBytes int64
	// MaxBytesInFlight bounds the bytes of request bodies all requests hold
	// at once; a request that would pass it is 503 (default 4 ×
	// MaxRequestBytes). A body is counted as it arrives, not by its
	// Content-Length, so slow senders hold only what they sent.
	MaxBytesInFlight int64
	// Token, if not empty, is the bearer token every request must carry
	// ("Authorization: Bearer <token>", compared in constant time) except
	// GET /v2/health/live and /v2/health/ready, which stay open for
	// probes; others get 401 (default: none).
	Token string
	// ModelControl turns on the repository load and unload endpoints
	// (default off: 403). Reload, from Go, works either way.
	ModelControl bool
	// LoadPrefixes are the URI prefixes ("/data/runs", "s3://bucket/models")
	// under which the load endpoint may load a checkpoint, matched by whole
	// path elements; a URI with a ".." element is under none. A URI under
	// none is answered as one that does not exist. Default none: the
	// endpoint can only reload the current checkpoint.
	LoadPrefixes []string
	// MaxConnections bounds the connections Serve holds open at once; at
	// the bound the next one waits to be accepted until one closes
	// (default DefaultMaxConnections, 1024).
	MaxConnections int
	// Timeouts of Serve's connections, as http.Server's (defaults
	// DefaultReadHeaderTimeout 10s, DefaultReadTimeout 1m for a request's
	// headers and body, DefaultWriteTimeout 1m from the end of its headers
	// to the end of its response, DefaultIdleTimeout 2m between requests);
	// negative is none.
	ReadHeaderTimeout, ReadTimeout, WriteTimeout, IdleTimeout time.Duration
	// Logger receives reloads and errors closing a replaced predictor
	// (default slog.Default()).
	Logger *slog.Logger
	// MeterProvider gets the serving metrics (MetricRequests,
	// MetricRequestDuration, MetricBatchSize, MetricQueueDepth); a
	// Prometheus reader on it exposes them (tracing.Config.MetricsAddr).
	// Default nil: none are recorded.
	MeterProvider metric.MeterProvider
}

func (o ServerOptions) withDefaults() ServerOptions {
	if o.Loader == nil {
		o.Loader = Load
	}
	if o.NoBatching {
		o.Batch.MaxBatch = 1
	}
	if o.MaxRequestBytes <= 0 {
		o.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if o.MaxBytesInFlight <= 0 {
		o.MaxBytesInFlight = 4 * o.MaxRequestBytes
	}
	if o.MaxConnections <= 0 {
		o.MaxConnections = DefaultMaxConnections
	}
	for _, t := range []struct {
		d   *time.Duration
		def time.Duration
	}{{&o.ReadHeaderTimeout, DefaultReadHeaderTimeout}, {&o.ReadTimeout, DefaultReadTimeout},
		{&o.WriteTimeout, DefaultWriteTimeout}, {&o.IdleTimeout, DefaultIdleTimeout}} {
		switch {
		case *t.d == 0:
			*t.d = t.def
		case *t.d < 0:
			*t.d = 0 // http.Server's none
		}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

// Server answers the Open Inference Protocol's REST API (KServe v2, Triton,
// MLServer) for one model: a Predictor behind a Batcher. It is an
// http.Handler; Serve runs it on a listener and Shutdown stops it gracefully.
//
//	GET  /v2/health/live                         200
//	GET  /v2/health/ready                        200 once a model is loaded, else 503
//	GET  /v2                                     server metadata
//	GET  /v2/models/{name}[/versions/{v}]        model metadata
//	GET  /v2/models/{name}[/versions/{v}]/ready  200, 503 while not loaded
//	POST /v2/models/{name}[/versions/{v}]/infer  inference
//	POST /v2/repository/index                    the model and its state
//	POST /v2/repository/models/{name}/load       (re)load, optionally {"parameters":{"checkpoint":"<uri>"}}
//	POST /v2/repository/models/{name}/unload     unload
//
// Errors are the protocol's {"error": "..."}: 400 for a bad request (the
// message names the input), 401 without the bearer token (if Token is
// set; the two health endpoints need none), 403 for the load and unload
// endpoints without ModelControl, 404 for an unknown model, version or
// endpoint, or a checkpoint the load endpoint does not find or may not load
// (one message for both), 413 for a body over MaxRequestBytes, 503 while no
// model is loaded, while shutting down, when the queue is full or the
// bodies in flight hold MaxBytesInFlight, 500 for a failed prediction.
//
// Concurrent requests are batched (see Batcher); a batch waits for more
// (at most MaxWait) only until it holds its share of the requests lately in
// flight, so that a lone client is not delayed and every worker is kept
// busy.
//
// A model's version is the number of models loaded so far ("1" for the
// first). A reload swaps the model atomically: requests already holding the
// old one (in Predict or queued in its Batcher) finish on it, new ones go to
// the new one, and the old predictor is closed once they are done. A
// request holds its model only from the end of its body to the end of its
// prediction: a client slow to send or to read cannot keep a replaced
// model open.
type Server struct {
	opts ServerOptions
	mux  *http.ServeMux
	log  *slog.Logger
	// tokenSum is the SHA-256 of opts.Token (nil without one).
	tokenSum []byte
	// inFlight counts the body bytes requests hold (MaxBytesInFlight).
	inFlight atomic.Int64
	met      *serveMetrics // nil without a MeterProvider

	mu      sync.RWMutex
	name    string
	cur     *served
	loads   int // models loaded, the last one's version
	closing bool
	https   []*http.Server

	reload  sync.Mutex     // one Reload at a time
	retired sync.WaitGroup // replaced models not yet closed
}

// served is one loaded model.
type served struct {
	b       *Batcher
	md      Metadata
	version string
	uri     string
	refs    sync.WaitGroup // requests using it
}

// ModelStatus is what a Server serves.
type ModelStatus struct {
	// Name of the model in the URLs.
	Name string
	// Version of the model loaded ("" if none).
	Version string
	// Checkpoint it was loaded from.
	Checkpoint string
	// Ready: a model is loaded and the server is not shutting down.
	Ready bool
}

// NewServer returns a Server for p; nil p is a server that is not ready
// until Reload (or the repository load endpoint) loads a model. The Server
// owns p from here: it closes it when it replaces it or shuts down.
func NewServer(p Predictor, opts ServerOptions) *Server {
	opts = opts.withDefaults()
	s := &Server{opts: opts, log: opts.Logger, name: opts.Name, mux: http.NewServeMux()}
	if opts.Token != "" {
		sum := sha256.Sum256([]byte(opts.Token))
		s.tokenSum = sum[:]
	}
	s.met = newServeMetrics(opts.MeterProvider, s.queueDepth)
	if p != nil {
		s.install(p, p.Metadata().Checkpoint, "")
	}
	for _, h := range []struct {
		pattern string
		f       http.HandlerFunc
	}{
		{"GET /v2/health/live", s.live},
		{"GET /v2/health/ready", s.ready},
		{"GET /v2", s.serverMetadata},
		{"GET /v2/models/{name}", s.modelMetadata},
		{"GET /v2/models/{name}/versions/{version}", s.modelMetadata},
		{"GET /v2/models/{name}/ready", s.modelReady},
		{"GET /v2/models/{name}/versions/{version}/ready", s.modelReady},
		{"POST /v2/models/{name}/infer", s.infer},
		{"POST /v2/models/{name}/versions/{version}/infer", s.infer},
		{"POST /v2/repository/index", s.repositoryIndex},
		{"POST /v2/repository/models/{name}/load", s.repositoryLoad},
		{"POST /v2/repository/models/{name}/unload", s.repositoryUnload},
		{"/", s.notFound},
	} {
		s.mux.HandleFunc(h.pattern, h.f)
	}
	return s
}

// ServeHTTP answers one request of the protocol.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.tokenSum != nil && !healthProbe(r) && !s.authorized(r) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="tempotrain"`)
		writeError(w, http.StatusUnauthorized, errors.New("this server needs a bearer token (Authorization: Bearer <token>); none or another was given"))
		return
	}
	s.mux.ServeHTTP(w, r)
}

// authorized says whether r carries the token. Both sides are hashed first
// so that the comparison takes the same time whatever was sent.
func (s *Server) authorized(r *http.Request) bool {
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	sum := sha256.Sum256([]byte(got))
	return subtle.ConstantTimeCompare(sum[:], s.tokenSum) == 1 && ok
}

// healthProbe: the endpoints that need no token, for liveness and
// readiness probes; they say nothing but whether a model is loaded.
func healthProbe(r *http.Request) bool {
	return r.Method == http.MethodGet && (r.URL.Path == "/v2/health/live" || r.URL.Path == "/v2/health/ready")
}

// Serve answers requests on l until Shutdown, and then returns
// http.ErrServerClosed, as http.Server.Serve does. It holds at most
// MaxConnections connections open, with the options' timeouts.
func (s *Server) Serve(l net.Listener) error {
	o := s.opts
	hs := &http.Server{Handler: s, ReadHeaderTimeout: o.ReadHeaderTimeout, ReadTimeout: o.ReadTimeout,
		WriteTimeout: o.WriteTimeout, IdleTimeout: o.IdleTimeout, MaxHeaderBytes: maxHeaderBytes}
	l = newLimitListener(l, o.MaxConnections)
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		l.Close()
		return http.ErrServerClosed
	}
	s.https = append(s.https, hs)
	s.mu.Unlock()
	return hs.Serve(l)
}

// maxHeaderBytes bounds a request's headers (http.Server's default is 1 MiB
// a connection).
const maxHeaderBytes = 64 << 10

// limitListener accepts at most n connections open at once: at the bound
// Accept waits until one of them closes (as golang.org/x/net/netutil's).
type limitListener struct {
	net.Listener
	sem       chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

func newLimitListener(l net.Listener, n int) *limitListener {
	return &limitListener{Listener: l, sem: make(chan struct{}, n), done: make(chan struct{})}
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.sem <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.sem
		return nil, err
	}
	return &limitConn{Conn: c, release: sync.OnceFunc(func() { <-l.sem })}, nil
}

func (l *limitListener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// limitConn gives its slot back when it is closed.
type limitConn struct {
	net.Conn
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.release()
	return err
}

// ListenAndServe listens on the TCP address addr (":8000") and Serves.
func (s *Server) ListenAndServe(addr string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	return s.Serve(l)
}

// Shutdown stops the server gracefully: it stops accepting connections
// (those of Serve) and requests (503), waits for the requests in flight to
// finish, then closes the predictor. If ctx ends first it returns ctx's
// error; the predictor is then closed in the background once the requests
// still running are done.
func (s *Server) Shutdown(ctx context.Context) error {
	s.met.stop()
	s.mu.Lock()
	s.closing = true
	hss := s.https
	s.mu.Unlock()
	var errs []error
	for _, hs := range hss {
		if err := hs.Shutdown(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	s.mu.Lock()
	m := s.cur
	s.cur = nil
	s.mu.Unlock()
	drained := make(chan struct{})
	go func() {
		if m != nil {
			m.refs.Wait()
		}
		s.retired.Wait()
		close(drained)
	}()
	select {
	case <-drained:
	case <-ctx.Done():
		if m != nil {
			go func() {
				<-drained
				if err := m.b.Close(); err != nil {
					s.log.Error("predict: close model after shutdown", "model", m.md.Name, "err", err)
				}
			}()
		}
		if err := errors.Join(errs...); errors.Is(err, ctx.Err()) {
			return err
		}
		return errors.Join(append(errs, ctx.Err())...)
	}
	if m != nil {
		if err := m.b.Close(); err != nil {
			errs = append(errs, fmt.Errorf("predict: close %s: %w", m.md.Name, err))
		}
	}
	return errors.Join(errs...)
}

// Reload loads the checkpoint at uri with the Loader and swaps it in; ""
// reloads the current checkpoint. A failed load keeps the model being served
// and returns the error. The old model is closed once the requests using it
// are done; Reload does not wait for that. A command can call Reload when
// the URI it watches (a "promoted" pointer) changes.
func (s *Server) Reload(ctx context.Context, uri string) error {
	_, err := s.load(ctx, "", uri)
	return err
}

// Status says which model the server serves.
func (s *Server) Status() ModelStatus {
	s.mu.RLock()
	defer s.mu.RUnlock()
	st := ModelStatus{Name: s.name, Ready: s.cur != nil && !s.closing}
	if s.cur != nil {
		st.Version, st.Checkpoint = s.cur.version, s.cur.uri
	}
	return st
}

// load loads uri ("" the current one) and installs it; name is the name of
// a repository load ("" from Reload).
func (s *Server) load(ctx context.Context, name, uri string) (*served, error) {
	s.reload.Lock()
	defer s.reload.Unlock()
	s.mu.RLock()
	closing, cur := s.closing, s.cur
	s.mu.RUnlock()
	if closing {
		return nil, ErrClosed
	}
	if uri == "" && cur != nil {
		uri = cur.uri
	}
	if uri == "" {
		return nil, fmt.Errorf("%w: no checkpoint to load (give parameters.checkpoint)", ErrInvalidInput)
	}
	start := time.Now()
	p, err := s.opts.Loader(ctx, uri)
	if err != nil {
		return nil, &loaderError{uri: uri, err: err}
	}
	m, err := s.install(p, uri, name)
	if err != nil {
		return nil, err
	}
	s.log.Info("predict: model loaded", "model", s.Status().Name, "version", m.version, "checkpoint", uri, "took", time.Since(start))
	return m, nil
}

// install serves p from now on and retires the model it replaces.
func (s *Server) install(p Predictor, uri, name string) (*served, error) {
	var onBatch func(int)
	if s.met != nil {
		onBatch = func(rows int) { s.met.batch(s.Status().Name, rows) }
	}
	m := &served{b: newBatcher(p, s.opts.Batch, onBatch), md: p.Metadata(), uri: uri}
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		m.b.Close()
		return nil, ErrClosed
	}
	s.loads++
	m.version = strconv.Itoa(s.loads)
	if s.name == "" {
		s.name = name
		if s.name == "" {
			s.name = m.md.Name
		}
	}
	old := s.cur
	s.cur = m
	s.retire(old)
	s.mu.Unlock()
	return m, nil
}

// retire closes m once its requests are done; s.mu is held.
func (s *Server) retire(m *served) {
	if m == nil {
		return
	}
	s.retired.Add(1)
	go func() {
		defer s.retired.Done()
		m.refs.Wait()
		if err := m.b.Close(); err != nil {
			s.log.Error("predict: close replaced model", "model", m.md.Name, "version", m.version, "err", err)
		}
	}()
}

// loaderError is the Loader's error: the load endpoint tells the client
// no more than whether it found the checkpoint, and logs the rest.
type loaderError struct {
	uri string
	err error
}

func (e *loaderError) Error() string { return e.err.Error() }
func (e *loaderError) Unwrap() error { return e.err }

// errUnknownModel is a request for a model or version the server does not
// serve (404).
var errUnknownModel = errors.New("unknown model")

// model returns the model a request names, holding a reference to it when
// hold is set (the caller then calls m.refs.Done). The error's status is
// 404 for a name or version not served, 503 while no model is loaded or the
// server shuts down.
func (s *Server) model(name, version string, hold bool) (*served, int, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	switch {
	case s.closing:
		return nil, http.StatusServiceUnavailable, fmt.Errorf("%w: the server is shutting down", ErrClosed)
	case s.name == "" && s.cur == nil:
		return nil, http.StatusServiceUnavailable, fmt.Errorf("no model loaded yet (asked for %q)", name)
	case name != s.name:
		return nil, http.StatusNotFound, fmt.Errorf("%w %q (this server serves %q)", errUnknownModel, name, s.name)
	case s.cur == nil:
		return nil, http.StatusServiceUnavailable, fmt.Errorf("model %q is not loaded", name)
	case version != "" && version != s.cur.version:
		return nil, http.StatusNotFound, fmt.Errorf("%w %q version %q (serving version %s)", errUnknownModel, name, version, s.cur.version)
	}
	if hold {
		s.cur.refs.Add(1)
	}
	return s.cur, 0, nil
}

func (s *Server) live(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]bool{"live": true})
}

func (s *Server) ready(w http.ResponseWriter, _ *http.Request) {
	code, ready := http.StatusOK, s.Status().Ready
	if !ready {
		code = http.StatusServiceUnavailable
	}
	writeJSON(w, code, map[string]bool{"ready": ready})
}

func (s *Server) serverMetadata(w http.ResponseWriter, _ *http.Request) {
	version := "(devel)"
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		version = bi.Main.Version
	}
	writeJSON(w, http.StatusOK, map[string]any{"name": Platform, "version": version, "extensions": []string{"model_repository"}})
}

// modelMetadataResponse is the protocol's model metadata.
type modelMetadataResponse struct {
	Name       string            `json:"name"`
	Versions   []string          `json:"versions"`
	Platform   string            `json:"platform"`
	Inputs     []TensorSpec      `json:"inputs"`
	Outputs    []TensorSpec      `json:"outputs"`
	Parameters map[string]string `json:"parameters,omitempty"`
}

func (s *Server) modelMetadata(w http.ResponseWriter, r *http.Request) {
	m, code, err := s.model(r.PathValue("name"), r.PathValue("version"), false)
	if err != nil {
		writeError(w, code, err)
		return
	}
	params := map[string]string{"format": m.md.Format}
	if m.uri != "" {
		params["checkpoint"] = m.uri
	}
	writeJSON(w, http.StatusOK, modelMetadataResponse{Name: s.Status().Name, Versions: []string{m.version}, Platform: Platform,
		Inputs: m.md.Inputs, Outputs: m.md.Outputs, Parameters: params})
}

func (s *Server) modelReady(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	_, code, err := s.model(name, r.PathValue("version"), false)
	if code == http.StatusNotFound {
		writeError(w, code, err)
		return
	}
	ready := err == nil
	if ready {
		code = http.StatusOK
	}
	writeJSON(w, code, map[string]any{"name": name, "ready": ready})
}

// bufPool holds request and response buffers of the infer endpoint.
var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 16<<10); return &b }}

// maxPooledBuf is the largest buffer put back into bufPool.
const maxPooledBuf = 4 << 20

func (s *Server) infer(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	code := s.inferCode(w, r)
	if s.met != nil {
		s.met.request(s.Status().Name, code, time.Since(start))
	}
}

// queueDepth is the requests waiting for a batch of the model served now.
func (s *Server) queueDepth() (model string, queued int64, ok bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.cur == nil {
		return "", 0, false
	}
	return s.name, s.cur.b.queued.Load(), true
}

// inferCode answers an inference request and returns the status code it
// wrote.
func (s *Server) inferCode(w http.ResponseWriter, r *http.Request) int {
	fail := func(code int, err error) int {
		writeError(w, code, err)
		return code
	}
	name, version := r.PathValue("name"), r.PathValue("version")
	// A request for a model not served is answered before its body is read.
	m, code, err := s.model(name, version, false)
	if err != nil {
		return fail(code, err)
	}
	// Its Batcher counts it in flight from here, for the batch sizes (see
	// BatcherOptions.MaxWait).
	defer m.b.enter()()
	bp := bufPool.Get().(*[]byte)
	defer func() {
		if cap(*bp) <= maxPooledBuf {
			*bp = (*bp)[:0]
			bufPool.Put(bp)
		}
	}()
	body, held, err := s.readBody(w, r, (*bp)[:0])
	defer s.inFlight.Add(-held)
	*bp = body
	if err != nil {
		var tooLarge *http.MaxBytesError
		switch {
		case errors.As(err, &tooLarge):
			return fail(http.StatusRequestEntityTooLarge, fmt.Errorf("request body over %d bytes", tooLarge.Limit))
		case errors.Is(err, errBusy):
			return fail(http.StatusServiceUnavailable, err)
		default:
			return fail(http.StatusBadRequest, fmt.Errorf("reading the request body: %w", err))
		}
	}
	// The binary tensor data extension: the JSON is the first
	// Inference-Header-Content-Length bytes, the inputs' binary data follow.
	js, bin := body, []byte(nil)
	if h := r.Header.Get("Inference-Header-Content-Length"); h != "" {
		n, err := strconv.Atoi(h)
		if err != nil || n < 0 || n > len(body) {
			return fail(http.StatusBadRequest, fmt.Errorf("%w: Inference-Header-Content-Length %q: want the JSON's length, at most the body's %d bytes", ErrInvalidInput, h, len(body)))
		}
		js, bin = body[:n], body[n:]
	}
	req, err := decodeInfer(js, bin)
	if err != nil {
		return fail(http.StatusBadRequest, err)
	}
	// body is no longer referenced: the response reuses its buffer.
	resp, code, err := s.answer(r.Context(), name, version, req, body[:0])
	*bp = resp
	if err != nil {
		return fail(code, err)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(resp)))
	w.WriteHeader(http.StatusOK)
	w.Write(resp)
	return http.StatusOK
}

// answer predicts req with the model served now and appends the response to
// buf. It holds that model only meanwhile: a reload while the body was read
// or while the response is written can close the model it replaces.
func (s *Server) answer(ctx context.Context, name, version string, req *inferRequest, buf []byte) ([]byte, int, error) {
	m, code, err := s.model(name, version, true)
	if err != nil {
		return buf, code, err
	}
	defer m.refs.Done()
	outs, err := s.predict(ctx, m, req)
	if err != nil {
		return buf, statusOf(err), err
	}
	buf, err = appendInferResponse(buf, s.Status().Name, m.version, req, outs)
	if err != nil {
		return buf, http.StatusInternalServerError, err
	}
	return buf, http.StatusOK, nil
}

// predict checks req against m and runs it, returning the outputs asked for
// in the order asked (all, in Metadata order, if none were).
func (s *Server) predict(ctx context.Context, m *served, req *inferRequest) ([]Tensor, error) {
	if err := Check(m.md.Inputs, req.batch); err != nil {
		return nil, err
	}
	for _, o := range req.outputs {
		if !hasSpec(m.md.Outputs, o) {
			return nil, fmt.Errorf("%w: unknown output %q (the model gives %s)", ErrInvalidInput, o, specNames(m.md.Outputs))
		}
	}
	outs, err := m.b.predict(ctx, req.batch, true)
	if err != nil || req.outputs == nil {
		return outs, err
	}
	sel := make([]Tensor, 0, len(req.outputs))
	for _, o := range req.outputs {
		i := 0
		for i < len(outs) && outs[i].Name != o {
			i++
		}
		if i == len(outs) {
			return nil, fmt.Errorf("predict: %s gave no output %q", m.md.Name, o)
		}
		sel = append(sel, outs[i])
	}
	return sel, nil
}

func hasSpec(specs []TensorSpec, name string) bool {
	for _, s := range specs {
		if s.Name == name {
			return true
		}
	}
	return false
}

// errBusy is a request whose body would pass MaxBytesInFlight (503).
var errBusy = errors.New("the server holds as many request bytes as it may; retry")

// Body buffers: the first is at most firstRead bytes whatever the
// Content-Length says; each read reserves readAhead bytes of
// MaxBytesInFlight beyond what the body holds.
const (
	firstRead = 64 << 10
	readAhead = 64 << 10
)

// readBody reads r's body into buf as its bytes arrive, growing buf as
// they come (never by the Content-Length alone), at most MaxRequestBytes.
// held is what it reserved of MaxBytesInFlight, for the caller to give back
// (s.inFlight.Add(-held)) once it is done with the body, whatever the
// error.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request, buf []byte) (body []byte, held int64, err error) {
	limit := s.opts.MaxRequestBytes
	if r.ContentLength > limit {
		return buf, 0, &http.MaxBytesError{Limit: limit}
	}
	if cap(buf) == 0 {
		n := int64(firstRead)
		if r.ContentLength >= 0 {
			n = min(n, r.ContentLength+1) // + 1: EOF without growing
		}
		buf = make([]byte, 0, n)
	}
	rd := http.MaxBytesReader(w, r.Body, limit)
	for {
		if len(buf) == cap(buf) {
			if int64(cap(buf)) > limit {
				return buf, held, &http.MaxBytesError{Limit: limit}
			}
			grown := make([]byte, len(buf), min(int64(max(2*cap(buf), firstRead)), limit+1))
			copy(grown, buf)
			buf = grown
		}
		end := min(cap(buf), len(buf)+readAhead)
		if need := int64(end) - held; need > 0 {
			if !s.reserve(need) {
				return buf, held, fmt.Errorf("%w (%d bytes in flight at most)", errBusy, s.opts.MaxBytesInFlight)
			}
			held += need
		}
		n, err := rd.Read(buf[len(buf):end])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, held, nil
		}
		if err != nil {
			return buf, held, err
		}
	}
}

// reserve takes n bytes of MaxBytesInFlight if they are free.
func (s *Server) reserve(n int64) bool {
	for {
		used := s.inFlight.Load()
		if used+n > s.opts.MaxBytesInFlight {
			return false
		}
		if s.inFlight.CompareAndSwap(used, used+n) {
			return true
		}
	}
}

// statusOf is the HTTP status of a Predict error.
func statusOf(err error) int {
	switch {
	case errors.Is(err, ErrInvalidInput):
		return http.StatusBadRequest
	case errors.Is(err, ErrQueueFull), errors.Is(err, ErrClosed),
		errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// repositoryIndexEntry is one model of the repository index.
type repositoryIndexEntry struct {
	Name    string `json:"name"`
	Version string `json:"version,omitempty"`
	State   string `json:"state"`
	Reason  string `json:"reason,omitempty"`
}

func (s *Server) repositoryIndex(w http.ResponseWriter, _ *http.Request) {
	st := s.Status()
	e := repositoryIndexEntry{Name: st.Name, Version: st.Version, State: "READY"}
	if !st.Ready {
		e.State, e.Reason = "UNAVAILABLE", "not loaded"
	}
	var idx []repositoryIndexEntry
	if st.Name != "" {
		idx = append(idx, e)
	}
	writeJSON(w, http.StatusOK, idx)
}

// repositoryLoadRequest is the body of a repository load.
type repositoryLoadRequest struct {
	Parameters map[string]any `json:"parameters"`
}

// errModelControl answers the load and unload endpoints without
// ModelControl.
var errModelControl = errors.New("this server does not load or unload models over HTTP (model control is off)")

func (s *Server) repositoryLoad(w http.ResponseWriter, r *http.Request) {
	if !s.opts.ModelControl {
		writeError(w, http.StatusForbidden, errModelControl)
		return
	}
	name := r.PathValue("name")
	if st := s.Status(); st.Name != "" && st.Name != name {
		writeError(w, http.StatusNotFound, fmt.Errorf("%w %q (this server serves %q)", errUnknownModel, name, st.Name))
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
	if err != nil {
		writeError(w, http.StatusBadRequest, fmt.Errorf("reading the request body: %w", err))
		return
	}
	var req repositoryLoadRequest
	if len(body) > 0 {
		if err := json.Unmarshal(body, &req); err != nil {
			writeError(w, http.StatusBadRequest, fmt.Errorf("%w: load request: %v", ErrInvalidInput, err))
			return
		}
	}
	var uri string
	if v, ok := req.Parameters["checkpoint"]; ok {
		if uri, ok = v.(string); !ok || uri == "" {
			writeError(w, http.StatusBadRequest, fmt.Errorf(`%w: parameters.checkpoint must be a checkpoint URI`, ErrInvalidInput))
			return
		}
	}
	if uri != "" && !underPrefix(uri, s.opts.LoadPrefixes) {
		s.log.Warn("predict: load refused: not under a load prefix", "checkpoint", uri, "prefixes", s.opts.LoadPrefixes, "remote", r.RemoteAddr)
		writeError(w, http.StatusNotFound, unavailable(uri))
		return
	}
	m, err := s.load(r.Context(), name, uri)
	var le *loaderError
	switch {
	case err == nil:
		writeJSON(w, http.StatusOK, map[string]string{"name": s.Status().Name, "version": m.version, "checkpoint": m.uri})
	case errors.As(err, &le) && errors.Is(err, storage.ErrNotFound):
		s.log.Warn("predict: load failed", "checkpoint", le.uri, "err", err)
		writeError(w, http.StatusNotFound, unavailable(le.uri))
	case errors.As(err, &le):
		// The reason names files and may come from another system (S3):
		// the log has it.
		s.log.Error("predict: load failed", "checkpoint", le.uri, "err", err)
		writeError(w, http.StatusInternalServerError, fmt.Errorf("the checkpoint at %q could not be loaded (the server's log says why)", le.uri))
	case errors.Is(err, ErrClosed):
		writeError(w, http.StatusServiceUnavailable, err)
	default: // no checkpoint given and none loaded
		writeError(w, http.StatusBadRequest, err)
	}
}

// unavailable is the one answer for a checkpoint outside the load prefixes
// and one that is not there, so that the endpoint cannot probe which paths
// exist.
func unavailable(uri string) error {
	return fmt.Errorf("no checkpoint at %q that this server may load (it loads only under its load prefixes)", uri)
}

// underPrefix says whether uri lies under one of prefixes, by whole path
// elements ("/data/runs" holds "/data/runs/r/checkpoint_000001", not
// "/data/runs2/..."); file:///dir is /dir. A uri with a ".." element, or
// spaces around it (storage trims them), lies under none.
func underPrefix(uri string, prefixes []string) bool {
	if strings.TrimSpace(uri) != uri || strings.ContainsRune(uri, 0) {
		return false
	}
	uri = strings.TrimPrefix(uri, "file://")
	for _, e := range strings.Split(uri, "/") {
		if e == ".." {
			return false
		}
	}
	for _, p := range prefixes {
		p = strings.TrimPrefix(strings.TrimSpace(p), "file://")
		if p == "" {
			continue
		}
		if uri == strings.TrimSuffix(p, "/") || strings.HasPrefix(uri, strings.TrimSuffix(p, "/")+"/") {
			return true
		}
	}
	return false
}

func (s *Server) repositoryUnload(w http.ResponseWriter, r *http.Request) {
	if !s.opts.ModelControl {
		writeError(w, http.StatusForbidden, errModelControl)
		return
	}
	s.reload.Lock()
	defer s.reload.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if name := r.PathValue("name"); name != s.name || s.name == "" {
		writeError(w, http.StatusNotFound, fmt.Errorf("%w %q (this server serves %q)", errUnknownModel, name, s.name))
		return
	}
	if s.closing {
		writeError(w, http.StatusServiceUnavailable, fmt.Errorf("%w: the server is shutting down", ErrClosed))
		return
	}
	s.retire(s.cur)
	s.cur = nil
	writeJSON(w, http.StatusOK, map[string]string{"name": s.name})
}

// notFound answers what no pattern matches: 405 if the path is an endpoint
// of another method, else 404.
func (s *Server) notFound(w http.ResponseWriter, r *http.Request) {
	for _, m := range []string{http.MethodGet, http.MethodPost} {
		if m == r.Method {
			continue
		}
		alt := r.Clone(r.Context())
		alt.Method = m
		if _, pattern := s.mux.Handler(alt); pattern != "/" && pattern != "" {
			w.Header().Set("Allow", m)
			writeError(w, http.StatusMethodNotAllowed, fmt.Errorf("%s %s: use %s", r.Method, r.URL.Path, m))
			return
		}
	}
	writeError(w, http.StatusNotFound, fmt.Errorf("no endpoint %s %s", r.Method, r.URL.Path))
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		code, b = http.StatusInternalServerError, []byte(`{"error":"encoding the response failed"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(code)
	w.Write(b)
}

// writeError writes the protocol's error body.
func writeError(w http.ResponseWriter, code int, err error) {
	if code == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	writeJSON(w, code, map[string]string{"error": err.Error()})
}
