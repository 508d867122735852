package dashboard

import (
	"strings"
	"testing"
)

func TestRunsQuery(t *testing.T) {
	t.Parallel()
	q, err := RunsQuery("mnist-mlp", "running", "TempotrainWorldSize > 2")
	if err != nil || q != "WorkflowType = 'Fit' AND TempotrainFunc = 'mnist-mlp' AND TempotrainStatus = 'running' AND (TempotrainWorldSize > 2)" {
		t.Errorf("query %q, %v", q, err)
	}
	if q, _ := RunsQuery("it's", "", ""); q != "WorkflowType = 'Fit' AND TempotrainFunc = 'its'" {
		t.Errorf("a quote in -func: query %q", q)
	}
	if _, err := RunsQuery("", "sleeping", ""); err == nil || !strings.Contains(err.Error(), `status "sleeping"`) {
		t.Errorf("bad status: %v", err)
	}
	// A search's trial its scheduler stopped.
	if q, err := RunsQuery("", "stopped", ""); err != nil || q != "WorkflowType = 'Fit' AND TempotrainStatus = 'stopped'" {
		t.Errorf("status stopped: query %q, %v", q, err)
	}
}
