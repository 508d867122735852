package tracing

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"math/rand/v2"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// StableIDs is an ID generator for a TracerProvider: random IDs, except for
// a span started with a context from withStableKey, whose IDs are a hash of
// its key. A workflow's long-lived spans use it so that a replay on another
// worker re-creates them under the same IDs.
func StableIDs() sdktrace.IDGenerator { return stableIDs{} }

type stableIDs struct{}

type stableKey struct{}

// withStableKey makes the next span started with ctx take its IDs from key.
func withStableKey(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, stableKey{}, key)
}

func (stableIDs) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	if key, ok := ctx.Value(stableKey{}).(string); ok {
		h := sha256.Sum256([]byte(key))
		var tid trace.TraceID
		var sid trace.SpanID
		copy(tid[:], h[:16])
		copy(sid[:], h[16:24])
		return nonZeroTrace(tid), nonZeroSpan(sid)
	}
	var tid trace.TraceID
	binary.NativeEndian.PutUint64(tid[:8], rand.Uint64())
	binary.NativeEndian.PutUint64(tid[8:], rand.Uint64())
	return nonZeroTrace(tid), randomSpanID()
}

func (stableIDs) NewSpanID(ctx context.Context, traceID trace.TraceID) trace.SpanID {
	if key, ok := ctx.Value(stableKey{}).(string); ok {
		h := sha256.New()
		h.Write(traceID[:])
		h.Write([]byte(key))
		var sid trace.SpanID
		copy(sid[:], h.Sum(nil))
		return nonZeroSpan(sid)
	}
	return randomSpanID()
}

func randomSpanID() trace.SpanID {
	var sid trace.SpanID
	binary.NativeEndian.PutUint64(sid[:], rand.Uint64())
	return nonZeroSpan(sid)
}

// An all-zero ID is invalid; the odds are 2^-64, but a stable one would be
// invalid forever.
func nonZeroSpan(s trace.SpanID) trace.SpanID {
	if !s.IsValid() {
		s[7] = 1
	}
	return s
}

func nonZeroTrace(t trace.TraceID) trace.TraceID {
	if !t.IsValid() {
		t[15] = 1
	}
	return t
}
