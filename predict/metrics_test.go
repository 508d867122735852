package predict_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/tempotrain/tempotrain/predict"
)

// collect reads the metrics of mr by name.
func collect(t *testing.T, mr *sdkmetric.ManualReader) map[string]metricdata.Aggregation {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := mr.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]metricdata.Aggregation{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			out[m.Name] = m.Data
		}
	}
	return out
}

func attrsOf(s attribute.Set) map[attribute.Key]string {
	out := map[attribute.Key]string{}
	for _, kv := range s.ToSlice() {
		out[kv.Key] = kv.Value.Emit()
	}
	return out
}

// TestServerMetrics: with a MeterProvider the server counts inference
// requests by status code, times them, records each batch's rows, and
// reports the requests queued behind a busy worker.
func TestServerMetrics(t *testing.T) {
	mr := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(mr))
	defer mp.Shutdown(context.Background())
	f := newFake(0)
	f.gate = make(chan struct{})
	f.started = make(chan struct{}, 64)
	s := startServer(t, f, predict.ServerOptions{Name: "served", MeterProvider: mp, Logger: quietLog,
		Batch: predict.BatcherOptions{MaxBatch: 16, Concurrency: 1, MaxWait: -1}})
	url := s.url + "/v2/models/served/infer"
	codes := make(chan int, 8)
	send := func(i, rows int) {
		go func() {
			code, _, err := callRaw("POST", url, inferJSON("", i, rows, false))
			if err != nil {
				t.Error(err)
			}
			codes <- code
		}()
	}
	send(0, 1)
	<-f.started // the only worker is busy until the gate opens
	for i := 1; i <= 5; i++ {
		send(i, 2)
	}
	depth := func() int64 {
		if g, ok := collect(t, mr)[predict.MetricQueueDepth].(metricdata.Gauge[int64]); ok && len(g.DataPoints) == 1 {
			if m := attrsOf(g.DataPoints[0].Attributes)[predict.AttrModel]; m != "served" {
				t.Errorf("queue depth's model %q, want served", m)
			}
			return g.DataPoints[0].Value
		}
		return -1
	}
	deadline := time.Now().Add(10 * time.Second)
	for depth() != 5 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if d := depth(); d != 5 {
		t.Fatalf("%s = %d with 5 requests behind the busy worker, want 5", predict.MetricQueueDepth, d)
	}
	if code, _, _ := callRaw("POST", url, []byte(`{"inputs":[]}`)); code != 400 {
		t.Errorf("an empty request: %d, want 400", code)
	}
	close(f.gate)
	for range 6 {
		if c := <-codes; c != 200 {
			t.Errorf("a request: %d", c)
		}
	}
	m := collect(t, mr)
	reqs := map[string]int64{}
	if d, ok := m[predict.MetricRequests].(metricdata.Sum[int64]); ok {
		for _, p := range d.DataPoints {
			a := attrsOf(p.Attributes)
			reqs[a[predict.AttrModel]+" "+a[predict.AttrStatusCode]] += p.Value
		}
	}
	if reqs["served 200"] != 6 || reqs["served 400"] != 1 || len(reqs) != 2 {
		t.Errorf("%s by model and code: %v, want served 200: 6, served 400: 1", predict.MetricRequests, reqs)
	}
	var timed uint64
	if d, ok := m[predict.MetricRequestDuration].(metricdata.Histogram[float64]); ok {
		for _, p := range d.DataPoints {
			timed += p.Count
			if min, ok := p.Min.Value(); !ok || min <= 0 {
				t.Errorf("%s min %v", predict.MetricRequestDuration, p.Min)
			}
		}
	}
	if timed != 7 {
		t.Errorf("%s counted %d requests, want 7", predict.MetricRequestDuration, timed)
	}
	// The first request ran alone; the 5 queued ones (10 rows) in one batch.
	d, ok := m[predict.MetricBatchSize].(metricdata.Histogram[int64])
	if !ok || len(d.DataPoints) != 1 {
		t.Fatalf("%s: %#v", predict.MetricBatchSize, m[predict.MetricBatchSize])
	}
	p := d.DataPoints[0]
	if mx, _ := p.Max.Value(); p.Count != 2 || p.Sum != 11 || mx != 10 {
		t.Errorf("%s: %d batches of %d rows, largest %d; want 2 of 11, largest 10 (sizes %v)", predict.MetricBatchSize, p.Count, p.Sum, mx, f.sizes)
	}
	if d := depth(); d != 0 {
		t.Errorf("%s = %d once every request was answered", predict.MetricQueueDepth, d)
	}
}
