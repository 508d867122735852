package predict_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/tempotrain/tempotrain/predict"
)

// stump is an XGBoost JSON model (reg:squarederror, base score 0.5) of one
// tree: feature 0 below 0.5 adds -0.25, otherwise +0.25. XGBoost's
// Booster.save_model writes this format; so does tempotrain's gbdt.
const stump = `{"learner":{"attributes":{},"feature_names":[],"feature_types":[],"gradient_booster":{"model":{` +
	`"gbtree_model_param":{"num_parallel_tree":"1","num_trees":"1","size_leaf_vector":"0"},"tree_info":[0],"trees":[{` +
	`"base_weights":[0E0,0E0,0E0],"default_left":[1,0,0],"id":0,"left_children":[1,-1,-1],"loss_changes":[0E0,0E0,0E0],` +
	`"parents":[2147483647,0,0],"right_children":[2,-1,-1],"split_conditions":[5E-1,-2.5E-1,2.5E-1],"split_indices":[0,0,0],` +
	`"split_type":[0,0,0],"sum_hessian":[0E0,0E0,0E0],"tree_param":{"num_deleted":"0","num_feature":"1","num_nodes":"3",` +
	`"size_leaf_vector":"0"}}]},"name":"gbtree"},"learner_model_param":{"base_score":"5E-1","boost_from_average":"1",` +
	`"num_class":"0","num_feature":"1","num_target":"1"},"objective":{"name":"reg:squarederror"}},"version":[1,7,4]}`

// An XGBoost model file predicts a batch: one "features" tensor of shape
// [rows, num_feature].
func ExampleLoadXGBoost() {
	p, err := predict.LoadXGBoost(strings.NewReader(stump))
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()
	out, err := p.Predict(context.Background(), predict.Batch{Inputs: []predict.Tensor{
		{Name: "features", Datatype: predict.FP32, Shape: []int{2, 1}, FP32: []float32{0.2, 0.9}}}})
	if err != nil {
		log.Fatal(err)
	}
	for _, t := range out {
		fmt.Println(t.Name, t.FP32)
	}
	// Output:
	// value [0.25 0.75]
	// margin [0.25 0.75]
}

// A Server answers the Open Inference Protocol (KServe v2 REST) for one
// Predictor, as `starter serve` does for a checkpoint; it is an
// http.Handler.
func ExampleNewServer() {
	p, err := predict.LoadXGBoost(strings.NewReader(stump))
	if err != nil {
		log.Fatal(err)
	}
	srv := httptest.NewServer(predict.NewServer(p, predict.ServerOptions{Name: "stump"}))
	defer srv.Close()

	body := `{"inputs":[{"name":"features","shape":[1,1],"datatype":"FP32","data":[0.9]}],"outputs":[{"name":"value"}]}`
	resp, err := http.Post(srv.URL+"/v2/models/stump/infer", "application/json", strings.NewReader(body))
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.Status)
	fmt.Println(string(b))
	// Output:
	// 200 OK
	// {"model_name":"stump","model_version":"1","outputs":[{"name":"value","datatype":"FP32","shape":[1],"data":[0.75]}]}
}
