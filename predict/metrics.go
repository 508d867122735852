package predict

import (
	"context"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Metrics of a Server (ServerOptions.MeterProvider). Every series carries
// AttrModel, the served model's name; requests and their duration also
// AttrStatusCode.
const (
	// MetricRequests counts inference requests (POST .../infer) answered.
	MetricRequests = "tempotrain.serve.requests"
	// MetricRequestDuration is an inference request's time, from its
	// headers to its response (reading the body, queueing, predicting).
	MetricRequestDuration = "tempotrain.serve.request.duration"
	// MetricBatchSize is the rows of each batch the model predicted.
	MetricBatchSize = "tempotrain.serve.batch.size"
	// MetricQueueDepth is the requests waiting for a batch now.
	MetricQueueDepth = "tempotrain.serve.queue.depth"
)

// Attribute keys of the serving metrics.
const (
	AttrModel      = attribute.Key("tempotrain.model")
	AttrStatusCode = attribute.Key("http.response.status_code")
)

// scope is the instrumentation scope of the serving metrics.
const scope = "github.com/tempotrain/tempotrain/predict"

// latencyBuckets span a 100 µs batch-of-one MLP to a minute-long request
// (the default write timeout).
var latencyBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
	0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

// batchBuckets are powers of two up to 1024 rows (MaxBatch is 64 by default).
var batchBuckets = []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024}

// serveMetrics are a Server's instruments; nil records nothing.
type serveMetrics struct {
	requests  metric.Int64Counter
	duration  metric.Float64Histogram
	batchSize metric.Int64Histogram
	reg       metric.Registration
	// model caches the attribute set of the served model's name.
	model atomic.Pointer[attribute.Set]
}

// newServeMetrics creates the instruments on mp, with a queue-depth gauge
// that depth reads when the MeterProvider collects. Nil when mp is nil. An
// instrument the SDK refuses is reported to otel's error handler.
func newServeMetrics(mp metric.MeterProvider, depth func() (model string, queued int64, ok bool)) *serveMetrics {
	if mp == nil {
		return nil
	}
	m := mp.Meter(scope)
	var sm serveMetrics
	var errs [5]error
	sm.requests, errs[0] = m.Int64Counter(MetricRequests, metric.WithUnit("{request}"),
		metric.WithDescription("Inference requests answered, by model and HTTP status code"))
	sm.duration, errs[1] = m.Float64Histogram(MetricRequestDuration, metric.WithUnit("s"),
		metric.WithDescription("Inference request time from its headers to its response, by model and HTTP status code"),
		metric.WithExplicitBucketBoundaries(latencyBuckets...))
	sm.batchSize, errs[2] = m.Int64Histogram(MetricBatchSize, metric.WithUnit("{row}"),
		metric.WithDescription("Rows of each batch the model predicted"), metric.WithExplicitBucketBoundaries(batchBuckets...))
	var queue metric.Int64ObservableGauge
	queue, errs[3] = m.Int64ObservableGauge(MetricQueueDepth, metric.WithUnit("{request}"),
		metric.WithDescription("Inference requests waiting for a batch"))
	sm.reg, errs[4] = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		if model, n, ok := depth(); ok {
			o.ObserveInt64(queue, n, metric.WithAttributeSet(*sm.modelSet(model)))
		}
		return nil
	}, queue)
	for _, err := range errs {
		if err != nil {
			otel.Handle(err)
		}
	}
	return &sm
}

func (sm *serveMetrics) modelSet(model string) *attribute.Set {
	if s := sm.model.Load(); s != nil {
		if v, _ := s.Value(AttrModel); v.AsString() == model {
			return s
		}
	}
	s := attribute.NewSet(AttrModel.String(model))
	sm.model.Store(&s)
	return &s
}

// request records an answered inference request.
func (sm *serveMetrics) request(model string, code int, d time.Duration) {
	if sm == nil {
		return
	}
	attrs := metric.WithAttributes(AttrModel.String(model), AttrStatusCode.Int(code))
	sm.requests.Add(context.Background(), 1, attrs)
	sm.duration.Record(context.Background(), d.Seconds(), attrs)
}

// batch records a batch of rows of model.
func (sm *serveMetrics) batch(model string, rows int) {
	if sm == nil {
		return
	}
	sm.batchSize.Record(context.Background(), int64(rows), metric.WithAttributeSet(*sm.modelSet(model)))
}

// stop unregisters the queue gauge.
func (sm *serveMetrics) stop() {
	if sm != nil && sm.reg != nil {
		_ = sm.reg.Unregister()
	}
}
