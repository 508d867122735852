package predict_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tempotrain/tempotrain/predict"
)

// testServer is a Server on a real loopback listener.
type testServer struct {
	*predict.Server
	url    string
	served chan error // Serve's error
}

func startServer(t *testing.T, p predict.Predictor, opts predict.ServerOptions) *testServer {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &testServer{Server: predict.NewServer(p, opts), url: "http://" + l.Addr().String(), served: make(chan error, 1)}
	go func() { s.served <- s.Serve(l) }()
	t.Cleanup(func() {
		// Connections the client dialed but never used would hold Shutdown
		// for 5s (net/http treats them as busy that long).
		srvClient.CloseIdleConnections()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s.Shutdown(ctx)
	})
	return s
}

var srvClient = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 128}, Timeout: 30 * time.Second}

// callJSON sends body (nil: none) and returns the status and the decoded JSON
// answer.
func callJSON(t *testing.T, method, url string, body []byte) (int, map[string]any) {
	t.Helper()
	code, raw, err := callRaw(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if len(raw) > 0 && raw[0] == '{' {
		if err := json.Unmarshal(raw, &v); err != nil {
			t.Fatalf("%s %s: %d %q: %v", method, url, code, raw, err)
		}
	}
	return code, v
}

func callRaw(method, url string, body []byte) (int, []byte, error) {
	return callRawHeader(method, url, body, nil)
}

// callRawHeader is callRaw with more request headers (an empty value is
// not sent).
func callRawHeader(method, url string, body []byte, header map[string]string) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		return 0, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range header {
		if v != "" {
			req.Header.Set(k, v)
		}
	}
	resp, err := srvClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	return resp.StatusCode, raw, err
}

// inferJSON is a request for the fake: fakeBatch(tag, rows, 3), x nested
// as [rows][3] when nested.
func inferJSON(id string, tag, rows int, nested bool, outputs ...string) []byte {
	b := fakeBatch(tag, rows, 3)
	var xdata any = b.Inputs[0].FP32
	if nested {
		var n [][]float32
		for r := range rows {
			n = append(n, b.Inputs[0].FP32[r*3:(r+1)*3])
		}
		xdata = n
	}
	req := map[string]any{
		"id": id,
		"inputs": []map[string]any{
			{"name": "x", "shape": b.Inputs[0].Shape, "datatype": "FP32", "data": xdata},
			{"name": "tag", "shape": b.Inputs[1].Shape, "datatype": "INT64", "data": b.Inputs[1].INT64},
		},
	}
	if outputs != nil {
		var o []map[string]any
		for _, n := range outputs {
			o = append(o, map[string]any{"name": n})
		}
		req["outputs"] = o
	}
	raw, _ := json.Marshal(req)
	return raw
}

// inferResponse is the protocol's response.
type inferResponse struct {
	ModelName    string `json:"model_name"`
	ModelVersion string `json:"model_version"`
	ID           string `json:"id"`
	Outputs      []struct {
		Name     string    `json:"name"`
		Datatype string    `json:"datatype"`
		Shape    []int     `json:"shape"`
		Data     []float64 `json:"data"`
	} `json:"outputs"`
	Error string `json:"error"`
}

// tensors turns the response's outputs back into Tensors.
func (r *inferResponse) tensors() []predict.Tensor {
	var out []predict.Tensor
	for _, o := range r.Outputs {
		t := predict.Tensor{Name: o.Name, Datatype: o.Datatype, Shape: o.Shape}
		for _, v := range o.Data {
			if o.Datatype == predict.INT64 {
				t.INT64 = append(t.INT64, int64(v))
			} else {
				t.FP32 = append(t.FP32, float32(v))
			}
		}
		out = append(out, t)
	}
	return out
}

func infer(url string, body []byte) (int, *inferResponse, error) {
	code, raw, err := callRaw("POST", url, body)
	if err != nil {
		return 0, nil, err
	}
	var r inferResponse
	if err := json.Unmarshal(raw, &r); err != nil {
		return code, nil, fmt.Errorf("%d %q: %v", code, raw, err)
	}
	return code, &r, nil
}

// TestServerEndpoints: health, server and model metadata, model readiness,
// the repository index, and JSON errors for what does not exist.
func TestServerEndpoints(t *testing.T) {
	s := startServer(t, newFake(0), predict.ServerOptions{})
	for _, tt := range []struct {
		method, path string
		code         int
		has          string
	}{
		{"GET", "/v2/health/live", 200, `"live":true`},
		{"GET", "/v2/health/ready", 200, `"ready":true`},
		{"GET", "/v2", 200, `"name":"tempotrain"`},
		{"GET", "/v2/models/fake/ready", 200, `"ready":true`},
		{"GET", "/v2/models/fake/versions/1/ready", 200, `"ready":true`},
		{"GET", "/v2/models/other/ready", 404, `unknown model \"other\"`},
		{"GET", "/v2/models/fake/versions/2", 404, `version \"2\"`},
		{"POST", "/v2/repository/index", 200, `[{"name":"fake","version":"1","state":"READY"}]`},
		{"GET", "/v2/nothing", 404, `"error":"no endpoint GET /v2/nothing"`},
		{"GET", "/v2/models/fake/infer", 405, `use POST`},
		{"POST", "/v2/models/other/infer", 404, `unknown model \"other\" (this server serves \"fake\")`},
		{"POST", "/v2/models/fake/versions/7/infer", 404, `version \"7\"`},
	} {
		code, raw, err := callRaw(tt.method, s.url+tt.path, []byte("{}"))
		if err != nil {
			t.Fatal(err)
		}
		if code != tt.code || !strings.Contains(string(raw), tt.has) {
			t.Errorf("%s %s: %d %s, want %d with %s", tt.method, tt.path, code, raw, tt.code, tt.has)
		}
	}
	code, md := callJSON(t, "GET", s.url+"/v2/models/fake", nil)
	want := map[string]any{
		"name": "fake", "versions": []any{"1"}, "platform": "tempotrain",
		"inputs": []any{
			map[string]any{"name": "x", "datatype": "FP32", "shape": []any{-1.0, 3.0}},
			map[string]any{"name": "tag", "datatype": "INT64", "shape": []any{-1.0}},
		},
	}
	for k, v := range want {
		if fmt.Sprint(md[k]) != fmt.Sprint(v) {
			t.Errorf("model metadata %s = %v, want %v", k, md[k], v)
		}
	}
	if code != 200 || len(md["outputs"].([]any)) != 3 {
		t.Errorf("model metadata: %d %v", code, md)
	}
}

// TestServerInferBatching: 64 concurrent single-row requests over HTTP are
// each answered with their own rows (and id), by far fewer Predict calls
// with batching on, by 64 with it off; nested and flat data, and a subset
// of the outputs.
func TestServerInferBatching(t *testing.T) {
	for _, batching := range []bool{true, false} {
		t.Run(fmt.Sprintf("batching=%v", batching), func(t *testing.T) {
			f := newFake(0.5)
			f.delay = 3 * time.Millisecond
			s := startServer(t, f, predict.ServerOptions{NoBatching: !batching, Batch: predict.BatcherOptions{MaxWait: 10 * time.Millisecond}})
			concurrently(64, func(i int) {
				id := fmt.Sprintf("req-%d", i)
				code, r, err := infer(s.url+"/v2/models/fake/infer", inferJSON(id, 10*i, 1, i%2 == 0))
				if err != nil || code != 200 {
					t.Errorf("request %d: %d %+v %v", i, code, r, err)
					return
				}
				if r.ID != id || r.ModelName != "fake" || r.ModelVersion != "1" {
					t.Errorf("request %d: answered as %q by %s version %s", i, r.ID, r.ModelName, r.ModelVersion)
				}
				if err := checkFakeOutputs(r.tensors(), 0.5, 10*i, 1, 3); err != nil {
					t.Errorf("request %d: %v", i, err)
				}
			})
			sizes, _ := f.stats()
			if batching && len(sizes) > 16 || !batching && len(sizes) != 64 {
				t.Errorf("batching %v: 64 requests took %d Predict calls", batching, len(sizes))
			}
			t.Logf("64 concurrent requests: %d Predict calls %v", len(sizes), sizes)
		})
	}
	// A subset of the outputs, in the order asked; several rows at once.
	s := startServer(t, newFake(0), predict.ServerOptions{})
	code, r, err := infer(s.url+"/v2/models/fake/infer", inferJSON("", 7, 4, true, "tag", "sum"))
	if err != nil || code != 200 {
		t.Fatalf("%d %+v %v", code, r, err)
	}
	if len(r.Outputs) != 2 || r.Outputs[0].Name != "tag" || r.Outputs[1].Name != "sum" || fmt.Sprint(r.Outputs[0].Data) != "[7 8 9 10]" ||
		fmt.Sprint(r.Outputs[0].Shape) != "[4]" || r.Outputs[0].Datatype != "INT64" || r.ID != "" {
		t.Errorf("outputs %+v", r)
	}
}

// TestServerBadRequestsAmongGood: bad requests sent among good ones get 400
// with an error naming what is wrong; every good one gets 200 and its rows.
func TestServerBadRequestsAmongGood(t *testing.T) {
	f := newFake(0)
	f.delay = time.Millisecond
	s := startServer(t, f, predict.ServerOptions{Batch: predict.BatcherOptions{MaxWait: 5 * time.Millisecond}})
	bad := []struct {
		body string
		code int
		want string
	}{
		{`{"inputs":[{"name":"x","shape":[1,4],"datatype":"FP32","data":[1,2,3,4]},{"name":"tag","shape":[1],"datatype":"INT64","data":[1]}]}`,
			400, `input \"x\" has shape [1 4], the model takes [-1 3]`},
		{`{"inputs":[{"name":"x","shape":[1,3],"datatype":"INT64","data":[1,2,3]},{"name":"tag","shape":[1],"datatype":"INT64","data":[1]}]}`,
			400, `input \"x\" has datatype INT64, the model takes FP32`},
		{`{"inputs":[{"name":"x","shape":[1,3],"datatype":"FP32","data":[1,2,3]}]}`,
			400, `missing input \"tag\"`},
		{`{"inputs":[{"name":"x","shape":[1,3],"datatype":"FP32","data":[1,2,3]},{"name":"tag","shape":[2],"datatype":"INT64","data":[1,2]}]}`,
			400, `input \"tag\" has 2 rows, other inputs 1`},
		{`{"inputs":[{"name":"x","shape":[1,3],"datatype":"FP32","data":[1,"a",3]},{"name":"tag","shape":[1],"datatype":"INT64","data":[1]}]}`,
			400, `input \"x\": data element 1`},
		{`{"inputs":[{"name":"x","shape":[1,3],"datatype":"FP64","data":[1,2,3]},{"name":"tag","shape":[1],"datatype":"INT64","data":[1]}]}`,
			400, `input \"x\" has datatype \"FP64\"`},
		{`{"inputs":[{"name":"x","shape":[1,3],"datatype":"FP32","data":[1,2,3]},{"name":"tag","shape":[1],"datatype":"INT64","data":[1]}],"outputs":[{"name":"nope"}]}`,
			400, `unknown output \"nope\"`},
		{`{"inputs":[{"name":"x","shape":[1,3],"datatype":"FP32","data":[1,2,3]}`, 400, `malformed JSON`},
		{`{"inputs":[{"name":"x","shape":[1,3],"datatype":"FP32","data":[1,2,3]},{"name":"tag","shape":[1],"datatype":"INT64","data":[1]}]}`,
			404, `unknown model`}, // sent to another model
	}
	var bad400, good atomic.Int32
	concurrently(60, func(i int) {
		if i%4 == 1 {
			b := bad[(i/4)%len(bad)]
			url := s.url + "/v2/models/fake/infer"
			if b.code == 404 {
				url = s.url + "/v2/models/fake2/infer"
			}
			code, raw, err := callRaw("POST", url, []byte(b.body))
			if err != nil || code != b.code || !strings.Contains(string(raw), b.want) || !strings.HasPrefix(string(raw), `{"error":"`) {
				t.Errorf("bad request %d: %d %s %v, want %d with %s", i, code, raw, err, b.code, b.want)
			}
			bad400.Add(1)
			return
		}
		code, r, err := infer(s.url+"/v2/models/fake/infer", inferJSON("", 10*i, 1+i%2, false))
		if err != nil || code != 200 {
			t.Errorf("good request %d: %d %+v %v", i, code, r, err)
			return
		}
		if err := checkFakeOutputs(r.tensors(), 0, 10*i, 1+i%2, 3); err != nil {
			t.Errorf("good request %d: %v", i, err)
		}
		good.Add(1)
	})
	if good.Load() != 45 || bad400.Load() != 15 {
		t.Errorf("%d good, %d bad", good.Load(), bad400.Load())
	}
	// Over the size limit.
	s2 := startServer(t, newFake(0), predict.ServerOptions{MaxRequestBytes: 100})
	code, raw, _ := callRaw("POST", s2.url+"/v2/models/fake/infer", inferJSON("", 0, 8, false))
	if code != 413 || !strings.Contains(string(raw), "over 100 bytes") {
		t.Errorf("a large body: %d %s", code, raw)
	}
}

// TestServerNotReady: a server without a model answers 503 until a
// repository load gives it one; a failed load leaves it as it was.
func TestServerNotReady(t *testing.T) {
	loader := func(_ context.Context, uri string) (predict.Predictor, error) {
		if uri != "ckpt://good" {
			return nil, fmt.Errorf("no checkpoint %s", uri)
		}
		return newFake(2), nil
	}
	s := startServer(t, nil, predict.ServerOptions{Name: "fake", Loader: loader, ModelControl: true, LoadPrefixes: []string{"ckpt://"}})
	for _, path := range []string{"/v2/health/ready", "/v2/models/fake/ready", "/v2/models/fake"} {
		if code, _ := callJSON(t, "GET", s.url+path, nil); code != 503 {
			t.Errorf("GET %s before a load: %d", path, code)
		}
	}
	if code, body := callJSON(t, "POST", s.url+"/v2/models/fake/infer", inferJSON("", 1, 1, false)); code != 503 || !strings.Contains(fmt.Sprint(body["error"]), "not loaded") {
		t.Errorf("infer before a load: %d %v", code, body)
	}
	if code, body := callJSON(t, "POST", s.url+"/v2/repository/models/fake/load", []byte(`{"parameters":{"checkpoint":"ckpt://bad"}}`)); code != 500 || fmt.Sprint(body["error"]) != `the checkpoint at "ckpt://bad" could not be loaded (the server's log says why)` {
		t.Errorf("a failed load: %d %v", code, body)
	}
	if code, body := callJSON(t, "POST", s.url+"/v2/repository/models/fake/load", nil); code != 400 {
		t.Errorf("a load without a checkpoint: %d %v", code, body)
	}
	if s.Status().Ready {
		t.Error("ready after failed loads")
	}
	if code, body := callJSON(t, "POST", s.url+"/v2/repository/models/fake/load", []byte(`{"parameters":{"checkpoint":"ckpt://good"}}`)); code != 200 || body["version"] != "1" {
		t.Errorf("load: %d %v", code, body)
	}
	if code, _ := callJSON(t, "GET", s.url+"/v2/health/ready", nil); code != 200 {
		t.Errorf("ready after the load: %d", code)
	}
	code, r, err := infer(s.url+"/v2/models/fake/infer", inferJSON("a", 1, 1, false))
	if err != nil || code != 200 || checkFakeOutputs(r.tensors(), 2, 1, 1, 3) != nil {
		t.Errorf("infer after the load: %d %+v %v", code, r, err)
	}
	// Unload: not ready again, and the model is closed.
	if code, _ := callJSON(t, "POST", s.url+"/v2/repository/models/fake/unload", nil); code != 200 {
		t.Errorf("unload: %d", code)
	}
	if code, _ := callJSON(t, "GET", s.url+"/v2/models/fake/ready", nil); code != 503 {
		t.Errorf("ready after unload: %d", code)
	}
}

// TestServerReloadMidTraffic: reloading while clients keep sending fails no
// request; each answer comes from the model its model_version names; the
// old predictor is closed only after its last request ended, and never
// predicts after Close. A failed reload keeps the model.
func TestServerReloadMidTraffic(t *testing.T) {
	var mu sync.Mutex
	models := map[string]*fakeModel{}
	loader := func(_ context.Context, uri string) (predict.Predictor, error) {
		if uri == "bad" {
			return nil, errors.New("bad checkpoint")
		}
		mu.Lock()
		defer mu.Unlock()
		f := newFake(float32(len(models) + 1)) // bias: 1 for v1, 2 for v2...
		f.delay = 4 * time.Millisecond
		models[uri] = f
		return f, nil
	}
	first, _ := loader(context.Background(), "v1")
	s := startServer(t, first, predict.ServerOptions{Loader: loader, Batch: predict.BatcherOptions{MaxBatch: 4}, ModelControl: true, LoadPrefixes: []string{"v2"}})
	stop := make(chan struct{})
	var sent, failed atomic.Int32
	versions := make([]atomic.Int32, 4)
	var wg sync.WaitGroup
	for c := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				tag := 1000*c + i
				code, r, err := infer(s.url+"/v2/models/fake/infer", inferJSON("", tag, 1, false))
				sent.Add(1)
				if err != nil || code != 200 {
					failed.Add(1)
					t.Errorf("during reloads: %d %+v %v", code, r, err)
					continue
				}
				v := int(r.ModelVersion[0] - '0')
				versions[v].Add(1)
				if err := checkFakeOutputs(r.tensors(), float32(v), tag, 1, 3); err != nil {
					t.Errorf("answer of version %d: %v", v, err)
				}
			}
		}()
	}
	time.Sleep(150 * time.Millisecond)
	if code, body := callJSON(t, "POST", s.url+"/v2/repository/models/fake/load", []byte(`{"parameters":{"checkpoint":"v2"}}`)); code != 200 || body["version"] != "2" {
		t.Errorf("load v2: %d %v", code, body)
	}
	time.Sleep(150 * time.Millisecond)
	if err := s.Reload(context.Background(), "bad"); err == nil || !strings.Contains(err.Error(), "bad checkpoint") {
		t.Errorf("a failed reload: %v", err)
	}
	if st := s.Status(); st.Version != "2" || st.Checkpoint != "v2" || !st.Ready {
		t.Errorf("after a failed reload: %+v", st)
	}
	time.Sleep(50 * time.Millisecond)
	if err := s.Reload(context.Background(), "v3"); err != nil {
		t.Error(err)
	}
	time.Sleep(150 * time.Millisecond)
	close(stop)
	wg.Wait()
	t.Logf("%d requests, %d failed; by version: %d %d %d", sent.Load(), failed.Load(), versions[1].Load(), versions[2].Load(), versions[3].Load())
	for v := 1; v <= 3; v++ {
		if versions[v].Load() == 0 {
			t.Errorf("no answer from version %d", v)
		}
	}
	// The replaced models are closed once drained (in the background).
	deadline := time.Now().Add(5 * time.Second)
	for _, uri := range []string{"v1", "v2"} {
		f := models[uri]
		for {
			if _, closed := f.stats(); closed || time.Now().After(deadline) {
				break
			}
			time.Sleep(time.Millisecond)
		}
		f.mu.Lock()
		if !f.closed || f.inflightAtClose != 0 || f.predictsAfterClose != 0 || f.closedAt.Before(f.lastEnd) || f.closes != 1 {
			t.Errorf("%s: closed %v (%d times) with %d in flight, %d Predicts after Close, closed %v after its last Predict",
				uri, f.closed, f.closes, f.inflightAtClose, f.predictsAfterClose, f.closedAt.Sub(f.lastEnd))
		}
		f.mu.Unlock()
	}
	if _, closed := models["v3"].stats(); closed {
		t.Error("the serving model was closed")
	}
}

// TestServerShutdownDrains: Shutdown waits for the requests in flight,
// which succeed; meanwhile the server is not ready and takes no new
// requests; then it closes the predictor and Serve returns.
func TestServerShutdownDrains(t *testing.T) {
	f := newFake(0)
	f.gate = make(chan struct{})
	f.started = make(chan struct{}, 64)
	s := startServer(t, f, predict.ServerOptions{Batch: predict.BatcherOptions{MaxBatch: 1, Concurrency: 4}})
	results := make(chan error, 4)
	for i := range 4 {
		go func() {
			code, r, err := infer(s.url+"/v2/models/fake/infer", inferJSON("", i, 1, false))
			if err == nil && code != 200 {
				err = fmt.Errorf("%d %+v", code, r)
			}
			if err == nil {
				err = checkFakeOutputs(r.tensors(), 0, i, 1, 3)
			}
			results <- err
		}()
	}
	for range 4 {
		<-f.started
	}
	shut := make(chan error, 1)
	go func() { shut <- s.Shutdown(context.Background()) }()
	time.Sleep(50 * time.Millisecond)
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned with 4 requests in flight: %v", err)
	default:
	}
	if st := s.Status(); st.Ready {
		t.Error("ready while shutting down")
	}
	if code, raw, err := callRaw("POST", s.url+"/v2/models/fake/infer", inferJSON("", 9, 1, false)); err == nil && code != 503 {
		t.Errorf("a new request while shutting down: %d %s", code, raw)
	}
	if _, closed := f.stats(); closed {
		t.Error("predictor closed with requests in flight")
	}
	close(f.gate)
	for range 4 {
		if err := <-results; err != nil {
			t.Errorf("an in-flight request: %v", err)
		}
	}
	if err := <-shut; err != nil {
		t.Fatal(err)
	}
	if err := <-s.served; !errors.Is(err, http.ErrServerClosed) {
		t.Errorf("Serve returned %v", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.closed || f.inflightAtClose != 0 || f.closes != 1 {
		t.Errorf("closed %v (%d times), with %d in flight", f.closed, f.closes, f.inflightAtClose)
	}
}

// TestServerShutdownTimeout: a Shutdown whose context ends before the
// requests in flight returns its error; the predictor is closed once they
// are done.
func TestServerShutdownTimeout(t *testing.T) {
	f := newFake(0)
	f.gate = make(chan struct{})
	f.started = make(chan struct{}, 8)
	s := startServer(t, f, predict.ServerOptions{})
	done := make(chan int, 1)
	go func() {
		code, _, _ := callRaw("POST", s.url+"/v2/models/fake/infer", inferJSON("", 1, 1, false))
		done <- code
	}()
	<-f.started
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	if err := s.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Shutdown: %v", err)
	}
	if _, closed := f.stats(); closed {
		t.Error("closed with a request in flight")
	}
	close(f.gate)
	if code := <-done; code != 200 {
		t.Errorf("the request in flight: %d", code)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, closed := f.stats(); closed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the predictor was not closed after its last request")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestServerQueueFull: with the workers busy and the queue full a request is
// 503 with the protocol's error body.
func TestServerQueueFull(t *testing.T) {
	f := newFake(0)
	f.gate = make(chan struct{})
	f.started = make(chan struct{}, 64)
	s := startServer(t, f, predict.ServerOptions{Batch: predict.BatcherOptions{MaxBatch: 1, Concurrency: 1, MaxQueue: 1}})
	type result struct {
		code int
		body string
	}
	results := make(chan result, 8)
	send := func(i int) {
		go func() {
			code, raw, err := callRaw("POST", s.url+"/v2/models/fake/infer", inferJSON("", i, 1, false))
			if err != nil {
				t.Error(err)
			}
			results <- result{code, string(raw)}
		}()
	}
	send(0)
	<-f.started // the only worker is busy until the gate opens
	for i := 1; i < 8; i++ {
		send(i)
	}
	// 1 of the 7 queues, 6 are turned away.
	for range 6 {
		if r := <-results; r.code != 503 || !strings.Contains(r.body, `{"error":"predict: too many requests queued (1)"}`) {
			t.Errorf("with the queue full: %d %s", r.code, r.body)
		}
	}
	close(f.gate)
	for range 2 {
		if r := <-results; r.code != 200 {
			t.Errorf("a request that was running or queued: %d %s", r.code, r.body)
		}
	}
}

// TestServerRealCheckpoint: the mlp trained for one epoch, served over HTTP:
// single-image requests sent concurrently (so batched) and one request of
// 64 images as nested arrays get the classes a direct Predict gives, and
// the same probabilities.
func TestServerRealCheckpoint(t *testing.T) {
	ck, _ := trainOne(t, "mlp", map[string]any{"epochs": 1, "train_limit": 512, "test_limit": 64, "batch_size": 64})
	ctx := context.Background()
	direct, err := predict.Load(ctx, ck.URI)
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	const n = 64
	x, _ := testImages(t, n)
	want, err := direct.Predict(ctx, predict.Batch{Inputs: []predict.Tensor{x}})
	if err != nil {
		t.Fatal(err)
	}
	s := startServer(t, nil, predict.ServerOptions{})
	if err := s.Reload(ctx, ck.URI); err != nil {
		t.Fatal(err)
	}
	if st := s.Status(); st.Name != "mnist-mlp" || st.Checkpoint != ck.URI || !st.Ready {
		t.Errorf("status %+v", st)
	}
	url := s.url + "/v2/models/mnist-mlp/infer"
	check := func(row int, probs []float64, class float64) {
		if int64(class) != want[1].INT64[row] {
			t.Errorf("image %d: class %v over HTTP, %d direct", row, class, want[1].INT64[row])
		}
		for j, p := range probs {
			if math.Abs(p-float64(want[0].FP32[row*10+j])) > 1e-5 {
				t.Errorf("image %d: probabilities %v over HTTP, %v direct", row, probs, want[0].FP32[row*10:row*10+10])
				break
			}
		}
	}
	concurrently(n, func(i int) {
		body, _ := json.Marshal(map[string]any{"inputs": []map[string]any{{
			"name": "pixels", "datatype": "FP32", "shape": []int{1, 1, 28, 28}, "data": x.FP32[i*784 : (i+1)*784]}}})
		code, r, err := infer(url, body)
		if err != nil || code != 200 || len(r.Outputs) != 2 || r.ModelName != "mnist-mlp" {
			t.Errorf("image %d: %d %+v %v", i, code, r, err)
			return
		}
		check(i, r.Outputs[0].Data, r.Outputs[1].Data[0])
	})
	// All 64 in one request, as [64][1][28][28], only the classes.
	nested := make([][][][]float32, n)
	for i := range nested {
		nested[i] = [][][]float32{make([][]float32, 28)}
		for r := range 28 {
			nested[i][0][r] = x.FP32[i*784+r*28 : i*784+(r+1)*28]
		}
	}
	body, _ := json.Marshal(map[string]any{"id": "all", "inputs": []map[string]any{{
		"name": "pixels", "datatype": "FP32", "shape": []int{n, 1, 28, 28}, "data": nested}}, "outputs": []map[string]any{{"name": "class"}}})
	code, r, err := infer(url, body)
	if err != nil || code != 200 || len(r.Outputs) != 1 || len(r.Outputs[0].Data) != n {
		t.Fatalf("%d %+v %v", code, r, err)
	}
	for i, c := range r.Outputs[0].Data {
		if int64(c) != want[1].INT64[i] {
			t.Errorf("image %d in one request: class %v, direct %d", i, c, want[1].INT64[i])
		}
	}
	// A wrong shape names the input.
	code, body2 := callJSON(t, "POST", url, []byte(`{"inputs":[{"name":"pixels","datatype":"FP32","shape":[1,784],"data":[0]}]}`))
	if code != 400 || !strings.Contains(fmt.Sprint(body2["error"]), `input "pixels" has shape [1 784], the model takes [-1 1 28 28]`) {
		t.Errorf("wrong shape: %d %v", code, body2)
	}
}

// binaryRequest is fakeBatch(tag, rows, 3) in the binary tensor data
// extension: the JSON header, then x as little-endian FP32 and tag as
// INT64; sizes may be overridden to make it wrong.
func binaryRequest(tag, rows int, xSize, tagSize int) (header, body []byte) {
	b := fakeBatch(tag, rows, 3)
	var bin []byte
	for _, v := range b.Inputs[0].FP32 {
		bin = binary.LittleEndian.AppendUint32(bin, math.Float32bits(v))
	}
	for _, v := range b.Inputs[1].INT64 {
		bin = binary.LittleEndian.AppendUint64(bin, uint64(v))
	}
	if xSize < 0 {
		xSize = 4 * len(b.Inputs[0].FP32)
	}
	if tagSize < 0 {
		tagSize = 8 * len(b.Inputs[1].INT64)
	}
	header, _ = json.Marshal(map[string]any{"id": "bin", "inputs": []map[string]any{
		{"name": "x", "shape": b.Inputs[0].Shape, "datatype": "FP32", "parameters": map[string]any{"binary_data_size": xSize}},
		{"name": "tag", "shape": b.Inputs[1].Shape, "datatype": "INT64", "parameters": map[string]any{"binary_data_size": tagSize}},
	}})
	return header, append(append([]byte{}, header...), bin...)
}

func postBinary(url string, headerLen string, body []byte) (int, []byte, error) {
	return callRawHeader("POST", url, body, map[string]string{"Inference-Header-Content-Length": headerLen})
}

// TestServerBinaryInputs: the binary tensor data extension (Triton's, which
// KServe v2 clients use to skip JSON numbers): inputs whose bytes follow the
// JSON header give the answer their JSON form gives; a wrong size, bytes
// left over, a header length past the body, or binary_data_size without
// the header are 400s naming what is wrong.
func TestServerBinaryInputs(t *testing.T) {
	s := startServer(t, newFake(0.5), predict.ServerOptions{})
	url := s.url + "/v2/models/fake/infer"
	header, body := binaryRequest(5, 4, -1, -1)
	code, raw, err := postBinary(url, fmt.Sprint(len(header)), body)
	if err != nil || code != 200 {
		t.Fatalf("binary request: %d %s %v", code, raw, err)
	}
	var r inferResponse
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatal(err)
	}
	if err := checkFakeOutputs(r.tensors(), 0.5, 5, 4, 3); err != nil || r.ID != "bin" {
		t.Errorf("binary request answered %+v: %v", r, err)
	}
	_, viaJSON, err := infer(url, inferJSON("bin", 5, 4, false))
	if err != nil || fmt.Sprint(viaJSON.Outputs) != fmt.Sprint(r.Outputs) {
		t.Errorf("binary and JSON inputs differ: %+v against %+v (%v)", r.Outputs, viaJSON.Outputs, err)
	}

	for _, tt := range []struct {
		name     string
		hlen     func(h []byte) string
		xSize    int
		extra    []byte
		wantText string
	}{
		{"x short", nil, 4*12 - 4, nil, `input "x": 44 bytes of binary data for shape [4 3] of FP32`},
		{"left over", nil, -1, []byte{1, 2, 3}, "3 bytes of binary data after"},
		{"header past the body", func([]byte) string { return "100000" }, -1, nil, "Inference-Header-Content-Length \"100000\""},
		{"no header", func([]byte) string { return "" }, -1, nil, ""},
	} {
		h, b := binaryRequest(5, 4, tt.xSize, -1)
		b = append(b, tt.extra...)
		hl := fmt.Sprint(len(h))
		if tt.hlen != nil {
			hl = tt.hlen(h)
		}
		code, raw, err := postBinary(url, hl, b)
		var e struct{ Error string }
		_ = json.Unmarshal(raw, &e)
		if err != nil || code != 400 || e.Error == "" || !strings.Contains(e.Error, tt.wantText) {
			t.Errorf("%s: %d %s %v; want 400 with %q", tt.name, code, raw, err, tt.wantText)
		}
	}
	// binary_data_size in a plain JSON request (no header).
	h, _ := binaryRequest(5, 4, -1, -1)
	code, raw, err = postBinary(url, "", h)
	if err != nil || code != 400 || !strings.Contains(string(raw), "binary_data_size but the request has no Inference-Header-Content-Length") {
		t.Errorf("binary_data_size without the header: %d %s %v", code, raw, err)
	}
}
