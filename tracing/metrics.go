package tracing

import (
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Attribute keys of tempotrain's spans and metrics.
const (
	AttrRun       = attribute.Key("tempotrain.run")
	AttrAttempt   = attribute.Key("tempotrain.attempt")
	AttrRank      = attribute.Key("tempotrain.rank")
	AttrWorldSize = attribute.Key("tempotrain.world_size")
	AttrEpoch     = attribute.Key("tempotrain.epoch")
	AttrStep      = attribute.Key("tempotrain.step")
	AttrOp        = attribute.Key("tempotrain.op")
	AttrBytes     = attribute.Key("tempotrain.bytes")
	AttrBusBW     = attribute.Key("tempotrain.collective.busbw_gbps")
	AttrAlgBW     = attribute.Key("tempotrain.collective.algbw_gbps")
	// AttrDirect marks an all-reduce that ran the direct algorithm over
	// shared buffers (collective.OpInfo.Direct), not the ring.
	AttrDirect     = attribute.Key("tempotrain.collective.direct")
	AttrSeq        = attribute.Key("tempotrain.checkpoint.seq")
	AttrCheckpoint = attribute.Key("tempotrain.checkpoint")
	AttrPolls      = attribute.Key("tempotrain.rendezvous.polls")
)

// Metric names.
const (
	MetricStepDuration       = "tempotrain.step.duration"
	MetricSteps              = "tempotrain.steps"
	MetricStepsPerSecond     = "tempotrain.steps_per_second"
	MetricSamplesPerSecond   = "tempotrain.samples_per_second"
	MetricSamples            = "tempotrain.samples"
	MetricCollectiveDuration = "tempotrain.collective.duration"
	MetricCollectiveBytes    = "tempotrain.collective.bytes"
	MetricCheckpointDuration = "tempotrain.checkpoint.duration"
	MetricCheckpointBytes    = "tempotrain.checkpoint.bytes"
	MetricRendezvousDuration = "tempotrain.rendezvous.duration"
	MetricRestarts           = "tempotrain.restarts"
)

// SamplesMetric is the reported metric read as samples/s.
const SamplesMetric = "samples_per_s"

// Bucket boundaries, in seconds, of tempotrain's histograms: the SDK's
// default ones are meant for milliseconds. Each bucket is a series a scrape
// converts, encodes and compresses, for every rank and op of every run, so
// each histogram has the few that its durations need.
var (
	// stepBuckets spans a 0.5 ms GPU step to a 10 s one.
	stepBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10}
	// collectiveBuckets spans a 100 µs all-reduce to a 10 s one.
	collectiveBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 10}
	// checkpointBuckets spans a 10 ms write to a 10-minute upload.
	checkpointBuckets = []float64{0.01, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 600}
	// rendezvousBuckets spans a rendezvous of ranks already up (0.1 s) to
	// one that waited 10 minutes for a node.
	rendezvousBuckets = []float64{0.1, 0.5, 1, 5, 10, 30, 60, 300, 600}
	// sdkBuckets are the Temporal SDK's latencies (its timers, in seconds):
	// a 1 ms request to a 60 s long poll.
	sdkBuckets = []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 60}
)

type instruments struct {
	stepDuration       metric.Float64Histogram
	steps              metric.Int64Counter
	stepsPerSecond     metric.Float64Gauge
	samplesPerSecond   metric.Float64Gauge
	samples            metric.Int64Counter
	collectiveDuration metric.Float64Histogram
	collectiveBytes    metric.Int64Counter
	checkpointDuration metric.Float64Histogram
	checkpointBytes    metric.Int64Counter
	rendezvousDuration metric.Float64Histogram
	restarts           metric.Int64Counter
}

// newInstruments creates the instruments on m. An instrument the SDK refuses
// (it does not, for these names) is reported to otel's error handler and
// left a no-op.
func newInstruments(m metric.Meter) *instruments {
	var in instruments
	var errs []error
	hist := func(name, desc string, buckets []float64) metric.Float64Histogram {
		h, err := m.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc), metric.WithExplicitBucketBoundaries(buckets...))
		errs = append(errs, err)
		return h
	}
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, err := m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	gauge := func(name, unit, desc string) metric.Float64Gauge {
		g, err := m.Float64Gauge(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return g
	}
	in.stepDuration = hist(MetricStepDuration, "Time between consecutive SetProgress calls of an epoch", stepBuckets)
	in.steps = counter(MetricSteps, "{step}", "Training steps (SetProgress calls)")
	in.stepsPerSecond = gauge(MetricStepsPerSecond, "{step}/s", "Steps per second since the previous report")
	in.samplesPerSecond = gauge(MetricSamplesPerSecond, "{sample}/s", "Samples per second, as the training function reported it (metric "+SamplesMetric+")")
	in.samples = counter(MetricSamples, "{sample}", "Training samples this rank counted (train.Context.AddSamples), as its heartbeat reads them")
	in.collectiveDuration = hist(MetricCollectiveDuration, "Collective operation time, by tempotrain.op", collectiveBuckets)
	in.collectiveBytes = counter(MetricCollectiveBytes, "By", "Bytes of this rank's buffer in collective operations, by tempotrain.op")
	in.checkpointDuration = hist(MetricCheckpointDuration, "Checkpoint write, upload and restore time, by tempotrain.op", checkpointBuckets)
	in.checkpointBytes = counter(MetricCheckpointBytes, "By", "Checkpoint bytes written, uploaded and restored, by tempotrain.op")
	in.rendezvousDuration = hist(MetricRendezvousDuration, "Time from registering with the workflow until every rank had", rendezvousBuckets)
	in.restarts = counter(MetricRestarts, "{attempt}", "Attempts started after a run's first (restarts after a failure, resumptions), counted by rank 0")
	for _, err := range errs {
		if err != nil {
			otel.Handle(err)
		}
	}
	return &in
}
