package tracing_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/tempotrain/tempotrain/tracing"
)

// otelEnv are the variables Setup reads; each test starts with them empty.
var otelEnv = []string{"OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_METRICS_EXPORTER",
	"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
	"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
	"OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES", tracing.EnvStepEvery}

func clearEnv(t *testing.T) {
	for _, k := range otelEnv {
		t.Setenv(k, "")
	}
}

func TestSetupIsOffWithoutConfiguration(t *testing.T) {
	clearEnv(t)
	tel, shutdown, err := tracing.Setup(context.Background(), tracing.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if tel.Enabled() {
		t.Error("Setup with no OTEL_* variables gave a Telemetry that is on")
	}
	if err := shutdown(context.Background()); err != nil {
		t.Error(err)
	}
	t.Setenv("OTEL_TRACES_EXPORTER", "console")
	t.Setenv("OTEL_SDK_DISABLED", "true")
	if tel, _, _ := tracing.Setup(context.Background(), tracing.Config{}); tel.Enabled() {
		t.Error("OTEL_SDK_DISABLED=true left tracing on")
	}
}

// The console exporters write spans and metrics where Config.Console says;
// the shutdown function flushes them.
func TestSetupConsole(t *testing.T) {
	clearEnv(t)
	t.Setenv("OTEL_TRACES_EXPORTER", "console")
	t.Setenv("OTEL_METRICS_EXPORTER", "console")
	t.Setenv("OTEL_SERVICE_NAME", "console-test")
	var out bytes.Buffer
	tel, shutdown, err := tracing.Setup(context.Background(), tracing.Config{Console: &out, ServiceName: "overridden"})
	if err != nil {
		t.Fatal(err)
	}
	if !tel.Enabled() {
		t.Fatal("console exporters: tracing is off")
	}
	ctx, span := tel.Tracer().Start(context.Background(), "activity")
	rank := tel.StartRank(ctx, tracing.RankInfo{Run: "c", Attempt: 1, WorldSize: 1})
	rank.Progress(0, 0)
	rank.End(nil)
	span.End()
	if out.Len() != 0 {
		t.Errorf("spans written before the flush: %q", out.String())
	}
	if err := shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"Name":"train.epoch"`, `"Name":"train.step"`, `"Name":"` + tracing.MetricSteps + `"`, `"Value":"console-test"`} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("console output lacks %s:\n%s", want, out.String())
		}
	}
}

func TestSetupRejectsUnknownValues(t *testing.T) {
	for _, env := range [][2]string{
		{"OTEL_TRACES_EXPORTER", "zipkin"},
		{"OTEL_METRICS_EXPORTER", "prometheus"},
		{"OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"},
	} {
		t.Run(env[0], func(t *testing.T) {
			clearEnv(t)
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
			t.Setenv(env[0], env[1])
			_, _, err := tracing.Setup(context.Background(), tracing.Config{})
			if err == nil || !strings.Contains(err.Error(), env[1]) {
				t.Errorf("%s=%s: err %v, want one naming the value", env[0], env[1], err)
			}
		})
	}
}
