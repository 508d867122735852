package tracing_test

import (
	"compress/gzip"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tempotrain/tempotrain/tracing"
)

// TestMetricsEndpoint: Setup with MetricsAddr alone serves the rank's
// metrics in Prometheus's text format, under the names and labels
// docs/prometheus.md lists, and leaves traces (and so Temporal's
// interceptor) off.
func TestMetricsEndpoint(t *testing.T) {
	tel, shutdown := startEndpoint(t, tracing.Config{})
	if !tel.Enabled() || tel.MetricsAddr() == "" {
		t.Fatalf("Setup with MetricsAddr: enabled %v, endpoint %q", tel.Enabled(), tel.MetricsAddr())
	}
	if i, err := tel.Interceptor(tracing.InterceptorOptions{}); i != nil || err != nil {
		t.Errorf("metrics only: Interceptor = %v, %v; want none", i, err)
	}
	ctx := context.Background()
	rank := tel.StartRank(ctx, tracing.RankInfo{Run: "r1", Attempt: 2, Rank: 0, WorldSize: 2})
	_, endRdv := rank.Rendezvous(ctx)
	endRdv(3, nil)
	for s := range 5 {
		rank.Progress(1, s)
		rank.Collective(ctx, "allreduce", 1000, time.Now(), 2*time.Millisecond, nil)
	}
	rank.Samples(100)
	rank.Samples(160)
	rank.Samples(150) // a total never goes down: ignored
	_, done := rank.Report(ctx, map[string]float64{tracing.SamplesMetric: 1234.5}, true)
	done(nil)
	up := rank.BeginCheckpoint(ctx, tracing.CheckpointUpload, 1)
	up.Done(4096, time.Now().Add(time.Millisecond), nil)
	rank.End(nil)

	body := scrape(t, tel.MetricsAddr())
	for _, want := range []string{
		`tempotrain_steps_total{tempotrain_rank="0",tempotrain_run="r1"} 5`,
		`tempotrain_samples_total{tempotrain_rank="0",tempotrain_run="r1"} 160`,
		`tempotrain_step_duration_seconds_count{tempotrain_rank="0",tempotrain_run="r1"} 4`,
		`tempotrain_samples_per_second{tempotrain_rank="0",tempotrain_run="r1"} 1234.5`,
		`tempotrain_collective_bytes_total{tempotrain_op="allreduce",tempotrain_rank="0",tempotrain_run="r1"} 5000`,
		`tempotrain_collective_duration_seconds_count{tempotrain_op="allreduce",tempotrain_rank="0",tempotrain_run="r1"} 5`,
		`tempotrain_checkpoint_bytes_total{tempotrain_op="upload",tempotrain_rank="0",tempotrain_run="r1"} 4096`,
		`tempotrain_checkpoint_duration_seconds_count{tempotrain_op="upload",tempotrain_rank="0",tempotrain_run="r1"} 1`,
		`tempotrain_rendezvous_duration_seconds_count{tempotrain_rank="0",tempotrain_run="r1"} 1`,
		`tempotrain_restarts_total{tempotrain_run="r1"} 1`,
		`tempotrain_steps_per_second{tempotrain_rank="0",tempotrain_run="r1"} `,
		`target_info{`,
		`go_goroutines `,
		`process_resident_memory_bytes `,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if t.Failed() || testing.Verbose() {
		t.Logf("/metrics:\n%s", body)
	}
	if err := shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := http.Get("http://" + tel.MetricsAddr() + tracing.MetricsPath); err == nil {
		t.Error("the endpoint still answers after shutdown")
	}
}

func TestMetricsAddrInUse(t *testing.T) {
	tel, _ := startEndpoint(t, tracing.Config{})
	_, _, err := tracing.Setup(context.Background(), tracing.Config{MetricsAddr: tel.MetricsAddr()})
	if err == nil || !strings.Contains(err.Error(), "-metrics-addr "+tel.MetricsAddr()) {
		t.Errorf("a second endpoint on %s: error %v, want one naming -metrics-addr", tel.MetricsAddr(), err)
	}
}

// startEndpoint is Setup with c and a /metrics endpoint on a free port, shut
// down when the test ends (shutting it down before is harmless).
func startEndpoint(t *testing.T, c tracing.Config) (*tracing.Telemetry, func(context.Context) error) {
	t.Helper()
	clearEnv(t)
	c.MetricsAddr = "127.0.0.1:0"
	tel, shutdown, err := tracing.Setup(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = shutdown(context.Background()) })
	return tel, shutdown
}

func scrape(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + tracing.MetricsPath)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s, %v", tracing.MetricsPath, resp.Status, err)
	}
	return string(b)
}

// The endpoint stops serving a run's series MetricsRetention after the last
// of its ranks here ended, serves a run with a rank still running, and
// serves the ended run again, its counts continued, when a rank of it
// starts here again.
func TestMetricsEndpointDropsEndedRuns(t *testing.T) {
	const retention = 200 * time.Millisecond
	tel, _ := startEndpoint(t, tracing.Config{MetricsRetention: retention})
	ctx := context.Background()
	step := func(run string, rank int) *tracing.Rank {
		r := tel.StartRank(ctx, tracing.RankInfo{Run: run, Attempt: 1, Rank: rank, WorldSize: 2})
		r.Progress(0, 0)
		return r
	}
	old0, old1, live := step("old", 0), step("old", 1), step("live", 0)
	old0.End(nil)
	old0.End(nil) // twice: counted once
	const oldSteps = `tempotrain_steps_total{tempotrain_rank="0",tempotrain_run="old"}`
	time.Sleep(2 * retention)
	if body := scrape(t, tel.MetricsAddr()); !strings.Contains(body, oldSteps+" 1") {
		t.Errorf("with rank 1 of run old still running, /metrics lacks %s 1", oldSteps)
	}
	old1.End(nil)
	if body := scrape(t, tel.MetricsAddr()); !strings.Contains(body, oldSteps+" 1") {
		t.Errorf("just after run old's last rank ended, /metrics lacks %s 1", oldSteps)
	}
	time.Sleep(2 * retention)
	body := scrape(t, tel.MetricsAddr())
	if strings.Contains(body, `tempotrain_run="old"`) {
		t.Errorf("%v after run old ended, /metrics still has its series:\n%s", 2*retention, body)
	}
	if !strings.Contains(body, `tempotrain_steps_total{tempotrain_rank="0",tempotrain_run="live"} 1`) {
		t.Error("/metrics lacks the series of run live, whose rank runs")
	}
	again := step("old", 0)
	if body := scrape(t, tel.MetricsAddr()); !strings.Contains(body, oldSteps+" 2") {
		t.Errorf("a rank of run old started again: /metrics lacks %s 2", oldSteps)
	}
	again.End(nil)
	live.End(nil)
}

// The endpoint gzips for a client that accepts gzip (a Prometheus does),
// serves plain text to one that does not or refuses it with q=0, and both
// hold the same series; the Temporal SDK's latency histograms have buckets
// in seconds, not the SDK's default millisecond boundaries.
func TestMetricsEndpointEncodingAndSDKBuckets(t *testing.T) {
	tel, _ := startEndpoint(t, tracing.Config{})
	tel.MetricsHandler().WithTags(map[string]string{"operation": "Poll"}).Timer("temporal_request_latency").Record(30 * time.Millisecond)
	get := func(accept string) (encoding string, body string) {
		req, err := http.NewRequest(http.MethodGet, "http://"+tel.MetricsAddr()+tracing.MetricsPath, nil)
		if err != nil {
			t.Fatal(err)
		}
		if accept != "" {
			req.Header.Set("Accept-Encoding", accept)
		}
		// A Transport of its own, which leaves a gzipped body as it came.
		resp, err := (&http.Transport{DisableCompression: true}).RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var r io.Reader = resp.Body
		if enc := resp.Header.Get("Content-Encoding"); enc == "gzip" {
			if r, err = gzip.NewReader(resp.Body); err != nil {
				t.Fatalf("Accept-Encoding %q: Content-Encoding gzip, body: %v", accept, err)
			}
		}
		b, err := io.ReadAll(r)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("Accept-Encoding %q: %s, %v", accept, resp.Status, err)
		}
		return resp.Header.Get("Content-Encoding"), string(b)
	}
	const bucket = `temporal_request_latency_seconds_bucket{operation="Poll",le="0.05"} 1`
	for accept, wantEnc := range map[string]string{
		"gzip": "gzip", "deflate, gzip;q=0.5": "gzip", "": "", "identity": "", "gzip;q=0": "",
	} {
		enc, body := get(accept)
		if enc != wantEnc {
			t.Errorf("Accept-Encoding %q: Content-Encoding %q, want %q", accept, enc, wantEnc)
		}
		if !strings.Contains(body, bucket) {
			t.Errorf("Accept-Encoding %q: /metrics lacks %s:\n%s", accept, bucket, body)
		}
		if strings.Contains(body, `temporal_request_latency_seconds_bucket{operation="Poll",le="7500"}`) {
			t.Errorf("Accept-Encoding %q: the SDK's latency keeps the default millisecond buckets", accept)
		}
	}
}
