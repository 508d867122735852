// Package tracing is tempotrain's OpenTelemetry: the providers and their
// exporters, Temporal's tracing interceptor, and the spans and metrics of a
// rank.
//
// # Setup
//
// Setup builds a TracerProvider and a MeterProvider from the standard
// OTEL_* environment variables (OTEL_TRACES_EXPORTER and
// OTEL_METRICS_EXPORTER = otlp | console | none, OTEL_EXPORTER_OTLP_ENDPOINT,
// OTEL_EXPORTER_OTLP_PROTOCOL = grpc | http/protobuf, OTEL_SERVICE_NAME,
// OTEL_TRACES_SAMPLER, OTEL_BSP_*, OTEL_METRIC_EXPORT_INTERVAL, ...). With
// none of them set it returns a Telemetry that is off: nothing is recorded
// and no Temporal interceptor is installed, so an untraced run pays nothing.
// Its shutdown function flushes what is buffered; call it before exit.
//
// # The trace of a run
//
// One trace runs from the starter to a single all-reduce:
//
//	StartWorkflow:Fit                       starter (Temporal's interceptor)
//	└─ RunWorkflow:Fit                      controller
//	   ├─ fit.attempt  {attempt}            one per attempt, error status when it failed
//	   │  └─ StartActivity:RunRank
//	   │     └─ RunActivity:RunRank         rank worker {run, attempt, rank}
//	   │        ├─ rank.rendezvous          └─ UpdateWorkflow:register → HandleUpdate:register
//	   │        ├─ rank.connect
//	   │        ├─ rank.restore             └─ checkpoint.restore {seq, bytes}, linked to the report that wrote it
//	   │        └─ train.epoch {epoch}      one per epoch value given to SetProgress
//	   │           ├─ train.step {step}     sampled: every StepEvery-th step of an epoch
//	   │           │  └─ collective.allreduce {bytes, world_size, busbw}
//	   │           ├─ (user spans from train.Context.Tracer)
//	   │           └─ train.report
//	   │              ├─ checkpoint.write / checkpoint.upload {seq, bytes}
//	   │              └─ UpdateWorkflow:report → HandleUpdate:report
//	   └─ StartActivity:LoadRun, RecordRun ...
//
// Every tempotrain span carries tempotrain.run, tempotrain.attempt and
// tempotrain.rank where they apply.
//
// A span is exported only when it ends, and a RunRank or a Fit may last for
// hours, so they are never the only thing holding a trace together:
//
//   - Epoch spans end, and are exported, every epoch; steps, all-reduces and
//     checkpoints hang off them, not off the RunRank span.
//   - RunWorkflow:Fit and fit.attempt get span IDs derived from the workflow's
//     run ID (the SDK's idempotency key) and are re-created, with the same IDs
//     and start times, when another worker replays the workflow after a
//     restart; the children exported before the restart keep their parent.
//     An instance that did not see the end live (a worker stopped or evicted
//     it, or a replay for a Query) is dropped, so each is exported once.
//   - A rank's spans link to the StartActivity span that scheduled the rank,
//     which the controller exports at once: if the rank's worker dies, its
//     RunActivity span is lost but its epochs still lead back to the attempt.
//   - checkpoint.restore links to the train.report span that committed the
//     checkpoint (its trace context is kept in the manifest), in another
//     attempt or, for a resumed run, another trace.
//
// Queries are not traced: ranks and the starter poll them.
//
// # Metrics
//
// Per rank (attributes tempotrain.run, tempotrain.rank): step time and steps,
// steps/s and samples/s (a reported "samples_per_s" metric), samples (from
// Rank.Samples), collective seconds and bytes per operation, checkpoint
// seconds and bytes per operation (write, upload, restore), rendezvous
// seconds, and restarts. The Temporal SDK's metrics go through the same
// MeterProvider.
//
// # Prometheus
//
// Config.MetricsAddr adds OpenTelemetry's Prometheus exporter to the
// MeterProvider and serves it at http://MetricsAddr/metrics, with the Go
// runtime's and the process's collectors: every instrument of the process
// (the rank's above, the SDK's, predict's serving metrics) is scraped, with
// or without an OTLP exporter beside it. A Telemetry with metrics only
// installs no Temporal interceptor. docs/prometheus.md lists the series.
package tracing
