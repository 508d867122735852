package main

import (
	"context"
	"encoding/json"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/tempotrain/tempotrain/examples/internal/local"
)

// TestExample runs the example as `go run ./examples/gbdt-xgboost` does
// from the repository root, then loads its model.json in XGBoost itself
// (Debian's python3-xgboost under /usr/bin/python3) and compares the
// probabilities. Without xgboost it skips that comparison, and fails
// instead when TEMPOTRAIN_REQUIRE_XGBOOST=1 (as CI sets it).
func TestExample(t *testing.T) {
	o := local.Run(t, 3*time.Minute, func(ctx context.Context, out io.Writer) (*outcome, error) {
		return run(ctx, out, "../data", t.TempDir())
	})
	if auc := o.Result.Metrics["valid_auc"]; auc < 0.85 {
		t.Errorf("valid_auc = %v, want at least 0.85", auc)
	}
	if len(o.Prob) != 100 {
		t.Fatalf("%d probabilities, want 100 (churn_valid.csv's rows)", len(o.Prob))
	}

	py := "/usr/bin/python3"
	if msg, err := exec.Command(py, "-c", "import xgboost").CombinedOutput(); err != nil {
		if os.Getenv("TEMPOTRAIN_REQUIRE_XGBOOST") == "1" {
			t.Fatalf("%s cannot import xgboost: %v: %s", py, err, msg)
		}
		t.Skipf("%s cannot import xgboost (apt-get install python3-xgboost): %v", py, err)
	}
	rows, _ := json.Marshal(o.Rows)
	in := filepath.Join(t.TempDir(), "rows.json")
	if err := os.WriteFile(in, rows, 0o644); err != nil {
		t.Fatal(err)
	}
	script := `import json, sys, numpy as np, xgboost as xgb
X = np.array(json.load(open(sys.argv[2])), dtype=np.float32)
print(json.dumps(xgb.Booster(model_file=sys.argv[1]).predict(xgb.DMatrix(X)).tolist()))`
	got, err := exec.Command(py, "-c", script, o.Model, in).Output()
	if err != nil {
		t.Fatalf("xgboost: %v", err)
	}
	var want []float64
	if err := json.Unmarshal(got, &want); err != nil {
		t.Fatalf("xgboost printed %q: %v", got, err)
	}
	if len(want) != len(o.Prob) {
		t.Fatalf("xgboost gave %d predictions, want %d", len(want), len(o.Prob))
	}
	worst := 0.0
	for i, p := range o.Prob {
		worst = math.Max(worst, math.Abs(float64(p)-want[i]))
	}
	t.Logf("largest difference from XGBoost: %.2g", worst)
	if worst > 1e-5 {
		t.Errorf("probabilities differ from XGBoost's by up to %g, want at most 1e-5", worst)
	}
}
