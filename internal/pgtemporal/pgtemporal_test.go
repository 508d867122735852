package pgtemporal

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// need returns the binaries or skips (fails where
// TEMPOTRAIN_REQUIRE_PGTEMPORAL=1, as in CI).
func need(t *testing.T) {
	t.Helper()
	if _, _, _, err := Binaries(); err != nil {
		if os.Getenv("TEMPOTRAIN_REQUIRE_PGTEMPORAL") == "1" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
}

func sleepy(ctx workflow.Context, d time.Duration) (string, error) {
	if err := workflow.Sleep(ctx, d); err != nil {
		return "", err
	}
	return "done", nil
}

// TestServerSurvivesRestart: the production server on PostgreSQL takes a
// workflow; stopped and started again while the workflow sleeps (a timer
// in the database), it finishes the workflow, and the namespace and the
// search attributes are still registered.
func TestServerSurvivesRestart(t *testing.T) {
	need(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	start := time.Now()
	s, err := Start(ctx, Options{Dir: t.TempDir(),
		SearchAttributes: map[string]enumspb.IndexedValueType{"TestKeyword": enumspb.INDEXED_VALUE_TYPE_KEYWORD}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	t.Logf("PostgreSQL, schemas and temporal-server up in %v at %s", time.Since(start).Round(time.Millisecond), s.Address)

	c, err := client.Dial(client.Options{HostPort: s.Address, Logger: quiet{}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	w := worker.New(c, "pg-test", worker.Options{})
	w.RegisterWorkflow(sleepy)
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "sleepy", TaskQueue: "pg-test"}, sleepy, 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}

	s.Stop()
	restart := time.Now()
	if err := s.Start(ctx); err != nil {
		t.Fatalf("%v\n%s", err, s.LogTail(4000))
	}
	t.Logf("restarted in %v", time.Since(restart).Round(time.Millisecond))
	var got string
	if err := run.Get(ctx, &got); err != nil || got != "done" {
		t.Fatalf("workflow across the restart: %q, %v\n%s", got, err, s.LogTail(4000))
	}
	sa, err := c.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: "default"})
	if err != nil {
		t.Fatal(err)
	}
	if sa.CustomAttributes["TestKeyword"] != enumspb.INDEXED_VALUE_TYPE_KEYWORD {
		t.Errorf("custom search attributes after the restart: %v", sa.CustomAttributes)
	}
}

// TestBinariesMissing: without the programs, Start says what to build.
func TestBinariesMissing(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	t.Setenv("GOPATH", t.TempDir())
	_, err := Start(context.Background(), Options{Dir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "temporal-server (go build") || !strings.Contains(err.Error(), ".ci/setup test") {
		t.Fatalf("Start without the programs: %v", err)
	}
}
