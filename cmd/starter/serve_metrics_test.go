package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tempotrain/tempotrain/internal/freeport"
)

// stumpModel is an XGBoost JSON regression model of one stump on one
// feature: 0.5 + (-0.25 if x < 0.5 else 0.25).
const stumpModel = `{"learner":{"attributes":{},"feature_names":[],"feature_types":[],"gradient_booster":{"model":{` +
	`"gbtree_model_param":{"num_parallel_tree":"1","num_trees":"1","size_leaf_vector":"0"},"tree_info":[0],"trees":[{` +
	`"base_weights":[0E0,0E0,0E0],"default_left":[1,0,0],"id":0,"left_children":[1,-1,-1],"loss_changes":[0E0,0E0,0E0],` +
	`"parents":[2147483647,0,0],"right_children":[2,-1,-1],"split_conditions":[5E-1,-2.5E-1,2.5E-1],"split_indices":[0,0,0],` +
	`"split_type":[0,0,0],"sum_hessian":[0E0,0E0,0E0],"tree_param":{"num_deleted":"0","num_feature":"1","num_nodes":"3",` +
	`"size_leaf_vector":"0"}}]},"name":"gbtree"},"learner_model_param":{"base_score":"5E-1","boost_from_average":"1",` +
	`"num_class":"0","num_feature":"1","num_target":"1"},"objective":{"name":"reg:squarederror"}},"version":[1,7,4]}`

// TestServeMetricsAddr: serve -metrics-addr exposes the serving metrics of
// the requests it answered at /metrics, in Prometheus's format.
func TestServeMetricsAddr(t *testing.T) {
	model := filepath.Join(t.TempDir(), "model.json")
	if err := os.WriteFile(model, []byte(stumpModel), 0o644); err != nil {
		t.Fatal(err)
	}
	var addrs [2]string
	for i := range addrs {
		p, err := freeport.Pick("127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		addrs[i] = fmt.Sprintf("127.0.0.1:%d", p)
	}
	served := make(chan error, 1)
	go func() {
		served <- runServe([]string{"-checkpoint", model, "-addr", addrs[0], "-metrics-addr", addrs[1]})
	}()
	infer := "http://" + addrs[0] + "/v2/models/xgboost/infer"
	body := []byte(`{"inputs":[{"name":"features","shape":[3,1],"datatype":"FP32","data":[0,1,0.2]}]}`)
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Post(infer, "application/json", bytes.NewReader(body))
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("infer: %s %s", resp.Status, b)
			}
			break
		}
		select {
		case err := <-served:
			t.Fatalf("serve ended: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve did not answer in 30s: %v", err)
		}
	}
	resp, err := http.Post(infer, "application/json", strings.NewReader(`{"inputs":[]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	resp, err = http.Get("http://" + addrs[1] + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	// serve's signal handler is in place since it answered: SIGTERM drains.
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := <-served; err != nil {
		t.Errorf("serve after SIGTERM: %v", err)
	}
	for _, want := range []string{
		`tempotrain_serve_requests_total{http_response_status_code="200",tempotrain_model="xgboost"} 1`,
		`tempotrain_serve_requests_total{http_response_status_code="400",tempotrain_model="xgboost"} 1`,
		`tempotrain_serve_request_duration_seconds_count{http_response_status_code="200",tempotrain_model="xgboost"} 1`,
		`tempotrain_serve_batch_size_sum{tempotrain_model="xgboost"} 3`,
		`tempotrain_serve_queue_depth{tempotrain_model="xgboost"} 0`,
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if t.Failed() {
		t.Logf("/metrics:\n%s", b)
	}
	if _, err := http.Get("http://" + addrs[1] + "/metrics"); err == nil {
		t.Error("/metrics still answers after serve returned")
	}
}
