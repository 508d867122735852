// Package spantest records a Telemetry's spans and metrics in memory, for
// tests that assert what tempotrain traces: the span tree (parents, names,
// attributes, links) and the metrics' values.
package spantest

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/tempotrain/tempotrain/tracing"
)

// Recorder is a Telemetry on in-memory providers: ended spans are recorded
// as they end, metrics are read on Collect.
type Recorder struct {
	Telemetry *tracing.Telemetry
	Provider  *sdktrace.TracerProvider
	spans     *tracetest.SpanRecorder
	reader    *sdkmetric.ManualReader
}

// New returns a Recorder whose providers shut down with the test.
func New(t testing.TB, opts ...tracing.Option) *Recorder {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithIDGenerator(tracing.StableIDs()))
	mr := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(mr))
	t.Cleanup(func() {
		_ = tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	})
	return &Recorder{Telemetry: tracing.New(tp, mp, opts...), Provider: tp, spans: rec, reader: mr}
}

// Tree returns the spans ended so far.
func (r *Recorder) Tree() *Tree {
	tr := &Tree{Spans: r.spans.Ended(), byID: map[trace.SpanID]sdktrace.ReadOnlySpan{}}
	sort.SliceStable(tr.Spans, func(i, j int) bool { return tr.Spans[i].StartTime().Before(tr.Spans[j].StartTime()) })
	for _, s := range tr.Spans {
		tr.byID[s.SpanContext().SpanID()] = s
	}
	return tr
}

// Tree indexes ended spans, oldest first.
type Tree struct {
	Spans []sdktrace.ReadOnlySpan
	byID  map[trace.SpanID]sdktrace.ReadOnlySpan
}

// Named returns the spans called name, oldest first.
func (tr *Tree) Named(name string) []sdktrace.ReadOnlySpan {
	return tr.Where(func(s sdktrace.ReadOnlySpan) bool { return s.Name() == name })
}

// Where returns the spans keep accepts, oldest first.
func (tr *Tree) Where(keep func(sdktrace.ReadOnlySpan) bool) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range tr.Spans {
		if keep(s) {
			out = append(out, s)
		}
	}
	return out
}

// Parent is s's parent, or nil when it was not recorded.
func (tr *Tree) Parent(s sdktrace.ReadOnlySpan) sdktrace.ReadOnlySpan {
	return tr.byID[s.Parent().SpanID()]
}

// ParentName is the name of s's parent, or "<missing>".
func (tr *Tree) ParentName(s sdktrace.ReadOnlySpan) string {
	if p := tr.Parent(s); p != nil {
		return p.Name()
	}
	return "<missing>"
}

// Children are the spans whose parent is s, called name ("" for any).
func (tr *Tree) Children(s sdktrace.ReadOnlySpan, name string) []sdktrace.ReadOnlySpan {
	return tr.Where(func(c sdktrace.ReadOnlySpan) bool {
		return c.Parent().SpanID() == s.SpanContext().SpanID() && (name == "" || c.Name() == name)
	})
}

// Ancestor is the nearest ancestor of s called name, or nil.
func (tr *Tree) Ancestor(s sdktrace.ReadOnlySpan, name string) sdktrace.ReadOnlySpan {
	for p := tr.Parent(s); p != nil; p = tr.Parent(p) {
		if p.Name() == name {
			return p
		}
	}
	return nil
}

// Attr is s's attribute k (the zero Value when absent).
func Attr(s sdktrace.ReadOnlySpan, k attribute.Key) attribute.Value {
	for _, kv := range s.Attributes() {
		if kv.Key == k {
			return kv.Value
		}
	}
	return attribute.Value{}
}

// Int is s's integer attribute k.
func Int(s sdktrace.ReadOnlySpan, k attribute.Key) int { return int(Attr(s, k).AsInt64()) }

// Format prints the subtree under s, one span a line, for failure messages.
func (tr *Tree) Format(s sdktrace.ReadOnlySpan) string {
	var b strings.Builder
	var walk func(s sdktrace.ReadOnlySpan, depth int)
	walk = func(s sdktrace.ReadOnlySpan, depth int) {
		fmt.Fprintf(&b, "%s%s", strings.Repeat("  ", depth), s.Name())
		for _, kv := range s.Attributes() {
			if strings.HasPrefix(string(kv.Key), "tempotrain.") && kv.Key != tracing.AttrRun {
				fmt.Fprintf(&b, " %s=%s", strings.TrimPrefix(string(kv.Key), "tempotrain."), kv.Value.Emit())
			}
		}
		b.WriteString("\n")
		for _, c := range tr.Children(s, "") {
			walk(c, depth+1)
		}
	}
	walk(s, 0)
	return b.String()
}

// Metrics is one collection of the Recorder's metrics, by name.
type Metrics map[string]metricdata.Aggregation

// Collect reads the metrics recorded so far.
func (r *Recorder) Collect(t testing.TB) Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := Metrics{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			out[m.Name] = m.Data
		}
	}
	return out
}

// Sum is the total of a counter over the data points match accepts (nil:
// all).
func (m Metrics) Sum(name string, match func(attribute.Set) bool) float64 {
	var total float64
	ok := func(s attribute.Set) bool { return match == nil || match(s) }
	switch d := m[name].(type) {
	case metricdata.Sum[int64]:
		for _, p := range d.DataPoints {
			if ok(p.Attributes) {
				total += float64(p.Value)
			}
		}
	case metricdata.Sum[float64]:
		for _, p := range d.DataPoints {
			if ok(p.Attributes) {
				total += p.Value
			}
		}
	}
	return total
}

// Count is how many values a histogram recorded.
func (m Metrics) Count(name string) uint64 {
	var n uint64
	if d, ok := m[name].(metricdata.Histogram[float64]); ok {
		for _, p := range d.DataPoints {
			n += p.Count
		}
	}
	return n
}

// Gauge is a gauge's first value, or -1 when it has none.
func (m Metrics) Gauge(name string) float64 {
	if d, ok := m[name].(metricdata.Gauge[float64]); ok && len(d.DataPoints) > 0 {
		return d.DataPoints[0].Value
	}
	return -1
}

// Op matches the data points of one tempotrain.op.
func Op(op string) func(attribute.Set) bool {
	return func(s attribute.Set) bool {
		v, ok := s.Value(tracing.AttrOp)
		return ok && v.AsString() == op
	}
}
