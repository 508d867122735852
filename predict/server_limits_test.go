package predict_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tempotrain/tempotrain/predict"
	"github.com/tempotrain/tempotrain/storage"
)

var quietLog = slog.New(slog.NewTextHandler(io.Discard, nil))

// TestServerToken: with a token every endpoint but the two health probes
// answers 401 to a request without it or with another; with it, 200.
func TestServerToken(t *testing.T) {
	const token = "s3cret-token-of-the-test"
	s := startServer(t, newFake(0), predict.ServerOptions{Token: token})
	for _, tt := range []struct {
		method, path string
		auth         string
		code         int
	}{
		{"GET", "/v2/health/live", "", 200},
		{"GET", "/v2/health/ready", "", 200},
		{"GET", "/v2", "", 401},
		{"GET", "/v2/models/fake", "", 401},
		{"GET", "/v2/models/fake/ready", "", 401},
		{"POST", "/v2/repository/index", "", 401},
		{"POST", "/v2/repository/models/fake/unload", "", 401},
		{"POST", "/v2/models/fake/infer", "", 401},
		{"POST", "/v2/models/fake/infer", "Bearer " + token + "x", 401},
		{"POST", "/v2/models/fake/infer", "Bearer " + token[:len(token)-1], 401},
		{"POST", "/v2/models/fake/infer", token, 401}, // no "Bearer "
		{"POST", "/v2/models/fake/infer", "Basic " + token, 401},
		{"GET", "/v2/nothing", "", 401}, // says nothing about what exists
		{"GET", "/v2", "Bearer " + token, 200},
		{"POST", "/v2/models/fake/infer", "Bearer " + token, 200},
	} {
		body := inferJSON("", 1, 1, false)
		code, raw, err := callRawHeader(tt.method, s.url+tt.path, body, map[string]string{"Authorization": tt.auth})
		if err != nil || code != tt.code {
			t.Errorf("%s %s with %q: %d %s %v, want %d", tt.method, tt.path, tt.auth, code, raw, err, tt.code)
		}
		if code == 401 && !strings.Contains(string(raw), "needs a bearer token") {
			t.Errorf("%s %s: 401 says %s", tt.method, tt.path, raw)
		}
	}
}

// TestServerModelControl: the load and unload endpoints are 403 unless
// ModelControl is on; then a load outside the load prefixes, one that
// climbs out with "..", and one of a checkpoint that does not exist get the
// same answer, so the endpoint does not say which paths exist.
func TestServerModelControl(t *testing.T) {
	off := startServer(t, newFake(0), predict.ServerOptions{Logger: quietLog})
	for _, ep := range []string{"load", "unload"} {
		code, raw, _ := callRaw("POST", off.url+"/v2/repository/models/fake/"+ep, []byte(`{"parameters":{"checkpoint":"/x"}}`))
		if code != 403 || !strings.Contains(string(raw), "model control is off") {
			t.Errorf("%s without model control: %d %s", ep, code, raw)
		}
	}
	if !off.Status().Ready {
		t.Error("unloaded without model control")
	}

	dir := t.TempDir()
	allowed, secret := filepath.Join(dir, "allowed"), filepath.Join(dir, "secret")
	// A directory that exists, outside the prefix, with a manifest in it.
	if err := os.MkdirAll(filepath.Join(secret, "r", "checkpoint_000001"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(secret, "r", "checkpoint_000001", "manifest.json"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, newFake(0), predict.ServerOptions{Logger: quietLog, ModelControl: true, LoadPrefixes: []string{allowed}})
	answers := map[string]string{}
	for _, uri := range []string{
		filepath.Join(secret, "r", "checkpoint_000001"),             // exists, not allowed
		filepath.Join(secret, "r", "checkpoint_000002"),             // neither
		allowed + "/../secret/r/checkpoint_000001",                  // climbs out
		"file://" + filepath.Join(secret, "r", "checkpoint_000001"), // the same as a file URI
		filepath.Join(allowed, "r", "checkpoint_000001"),            // allowed, not there
		allowed + "2/r/checkpoint_000001",                           // a sibling with the prefix's name
		"s3://bucket/r/checkpoint_000001",
	} {
		req := fmt.Sprintf(`{"parameters":{"checkpoint":%q}}`, uri)
		code, raw, _ := callRaw("POST", s.url+"/v2/repository/models/fake/load", []byte(req))
		answers[fmt.Sprintf("%d %s", code, strings.ReplaceAll(string(raw), jsonQuoted(uri), "URI"))] += uri + " "
	}
	if len(answers) != 1 {
		t.Errorf("loads outside the prefix and of checkpoints not there get %d different answers:\n%v", len(answers), answers)
	}
	for a := range answers {
		if !strings.HasPrefix(a, "404 ") || !strings.Contains(a, "that this server may load") {
			t.Errorf("answer %s", a)
		}
	}
	if st := s.Status(); !st.Ready || st.Version != "1" {
		t.Errorf("after refused loads: %+v", st)
	}
	// Unload works with model control on.
	if code, _, _ := callRaw("POST", s.url+"/v2/repository/models/fake/unload", nil); code != 200 || s.Status().Ready {
		t.Errorf("unload with model control: %d", code)
	}
}

// jsonQuoted is s as it appears inside a JSON string (no quotes).
func jsonQuoted(s string) string {
	q := fmt.Sprintf("%q", s)
	return strings.ReplaceAll(q[1:len(q)-1], `"`, `\"`)
}

// TestServerSlowClientsDoNotStarve is a bounded load test on loopback: 24
// connections that send nothing and 24 that declare an 8 MiB body and
// trickle it a byte every 20ms do not keep 8 fast clients from answers
// within 1s each, with a bound of 4 MiB of bodies in flight (what the
// tricklers declare is 192 MiB: they hold only what they sent); and a
// reload meanwhile closes the replaced model at once, as no trickling
// request holds it. It stops by itself after about 2s.
func TestServerSlowClientsDoNotStarve(t *testing.T) {
	var mu sync.Mutex
	models := []*fakeModel{newFake(0)}
	loader := func(context.Context, string) (predict.Predictor, error) {
		mu.Lock()
		defer mu.Unlock()
		f := newFake(float32(len(models)))
		models = append(models, f)
		return f, nil
	}
	s := startServer(t, models[0], predict.ServerOptions{Loader: loader, Logger: quietLog,
		MaxBytesInFlight: 4 << 20, MaxConnections: 128, ReadTimeout: 30 * time.Second, ReadHeaderTimeout: 30 * time.Second})
	addr := strings.TrimPrefix(s.url, "http://")
	heapBefore := heapAlloc()
	stop := make(chan struct{})
	var slow sync.WaitGroup
	var conns []net.Conn
	for i := range 48 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		if i%2 == 0 {
			continue // idle: says nothing
		}
		fmt.Fprintf(c, "POST /v2/models/fake/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", 8<<20)
		slow.Add(1)
		go func() {
			defer slow.Done()
			tick := time.NewTicker(20 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
					if _, err := c.Write([]byte(" ")); err != nil {
						t.Errorf("a trickling client was cut: %v", err)
						return
					}
				}
			}
		}()
	}
	defer func() {
		close(stop)
		slow.Wait()
		for _, c := range conns {
			c.Close()
		}
	}()
	time.Sleep(100 * time.Millisecond) // every trickler is in its body
	// Their bodies are not allocated by their Content-Length (24 × 8 MiB).
	if grew := int64(heapAlloc()) - int64(heapBefore); grew > 32<<20 {
		t.Errorf("24 trickling requests grew the heap by %d MiB", grew>>20)
	}

	var answered, failed atomic.Int32
	var slowest atomic.Int64
	deadline := time.Now().Add(1500 * time.Millisecond)
	var fast sync.WaitGroup
	for c := range 8 {
		fast.Add(1)
		go func() {
			defer fast.Done()
			for i := 0; time.Now().Before(deadline); i++ {
				start := time.Now()
				code, r, err := infer(s.url+"/v2/models/fake/infer", inferJSON("", 100*c+i, 1, false))
				took := time.Since(start)
				for old := slowest.Load(); took.Nanoseconds() > old && !slowest.CompareAndSwap(old, took.Nanoseconds()); old = slowest.Load() {
				}
				if err != nil || code != 200 {
					failed.Add(1)
					t.Errorf("a fast client: %d %+v %v", code, r, err)
					time.Sleep(10 * time.Millisecond)
					continue
				}
				answered.Add(1)
			}
		}()
	}
	// A reload while the tricklers trickle: the first model is closed as
	// soon as the fast requests on it are done.
	time.Sleep(300 * time.Millisecond)
	if err := s.Reload(context.Background(), "v2"); err != nil {
		t.Fatal(err)
	}
	reloaded := time.Now()
	var closedAfter time.Duration
	for {
		if _, closed := models[0].stats(); closed {
			closedAfter = time.Since(reloaded)
			break
		}
		if time.Since(reloaded) > time.Second {
			t.Error("the replaced model is still open 1s after the reload, with trickling requests begun on it")
			break
		}
		time.Sleep(time.Millisecond)
	}
	fast.Wait()
	took := time.Duration(slowest.Load())
	t.Logf("with 24 idle and 24 trickling connections: %d fast answers in 1.5s, %d failed, the slowest in %v; the replaced model closed %v after the reload",
		answered.Load(), failed.Load(), took.Round(time.Millisecond), closedAfter.Round(time.Microsecond))
	if answered.Load() < 100 || took > time.Second {
		t.Errorf("%d fast answers, the slowest in %v: want at least 100, each within 1s", answered.Load(), took)
	}
}

func heapAlloc() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestServerTimeoutsAndConnections: a connection that sends nothing is
// closed after ReadHeaderTimeout, one that trickles its body after
// ReadTimeout; at MaxConnections a new connection waits until one closes.
func TestServerTimeoutsAndConnections(t *testing.T) {
	s := startServer(t, newFake(0), predict.ServerOptions{Logger: quietLog, MaxConnections: 2,
		ReadHeaderTimeout: 200 * time.Millisecond, ReadTimeout: 400 * time.Millisecond})
	addr := strings.TrimPrefix(s.url, "http://")
	closedAfter := func(c net.Conn, trickle bool) time.Duration {
		start := time.Now()
		buf := make([]byte, 1)
		for time.Since(start) < 3*time.Second {
			c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
			if trickle {
				c.Write([]byte(" "))
			}
			if _, err := c.Read(buf); err != nil && !os.IsTimeout(err) {
				return time.Since(start)
			}
		}
		return time.Since(start)
	}
	idle, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	trickler, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer trickler.Close()
	fmt.Fprintf(trickler, "POST /v2/models/fake/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n")
	// Both slots are taken: a third connection is not accepted meanwhile.
	third, err := net.Dial("tcp", addr) // the kernel's backlog takes it
	if err != nil {
		t.Fatal(err)
	}
	defer third.Close()
	fmt.Fprintf(third, "GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
	answered := make(chan time.Time, 1)
	go func() {
		resp, err := http.ReadResponse(bufio.NewReader(third), nil)
		if err == nil && resp.StatusCode == 200 {
			answered <- time.Now()
		}
		close(answered)
	}()
	start := time.Now()
	var wg sync.WaitGroup
	var idleFor, trickleFor time.Duration
	wg.Add(2)
	go func() { defer wg.Done(); idleFor = closedAfter(idle, false) }()
	go func() { defer wg.Done(); trickleFor = closedAfter(trickler, true) }()
	wg.Wait()
	at, ok := <-answered
	t.Logf("idle connection closed after %v, trickling one after %v; the third answered %v after the start", idleFor, trickleFor, at.Sub(start))
	if idleFor < 150*time.Millisecond || idleFor > time.Second {
		t.Errorf("a connection that sends nothing closed after %v, ReadHeaderTimeout 200ms", idleFor)
	}
	if trickleFor < 350*time.Millisecond || trickleFor > 1500*time.Millisecond {
		t.Errorf("a trickling body's connection closed after %v, ReadTimeout 400ms", trickleFor)
	}
	if !ok || at.Sub(start) < 150*time.Millisecond {
		t.Errorf("the third connection: answered %v, %v after the start (want after the first slot freed, ~200ms)", ok, at.Sub(start))
	}
}

// TestLoadMissingIsNotFound: the real Load's error for a checkpoint that is
// not there is storage.ErrNotFound, which the load endpoint answers as it
// answers one outside the prefixes (TestServerModelControl relies on it).
func TestLoadMissingIsNotFound(t *testing.T) {
	_, err := predict.Load(context.Background(), filepath.Join(t.TempDir(), "r", "checkpoint_000001"))
	if !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("Load of a missing checkpoint: %v", err)
	}
}
