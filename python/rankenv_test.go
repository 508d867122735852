package python

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/train/trainrt"
)

// TestRankEnvResources: a rank's GPUs are all visible to its process, in
// its order; its CPUs set OMP_NUM_THREADS over the worker's Threads, unless
// the spec's env sets it.
func TestRankEnvResources(t *testing.T) {
	t.Setenv("CUDA_VISIBLE_DEVICES", "7")
	t.Setenv("OMP_NUM_THREADS", "9")
	for _, tt := range []struct {
		info    trainrt.ContextInfo
		env     map[string]string
		threads int
		want    []string
	}{
		{trainrt.ContextInfo{Device: -1}, nil, 0, []string{"OMP_NUM_THREADS=9"}},
		{trainrt.ContextInfo{Device: -1}, nil, 2, []string{"OMP_NUM_THREADS=2"}},
		{trainrt.ContextInfo{Device: 3}, nil, 0, []string{"CUDA_VISIBLE_DEVICES=3", "OMP_NUM_THREADS=9"}},
		{trainrt.ContextInfo{Device: 2, Devices: []int{2, 0}, CPUs: 4}, nil, 2, []string{"CUDA_VISIBLE_DEVICES=2,0", "OMP_NUM_THREADS=4"}},
		{trainrt.ContextInfo{Device: -1, CPUs: 4}, map[string]string{"OMP_NUM_THREADS": "1"}, 2, []string{"OMP_NUM_THREADS=1"}},
	} {
		tt.info.WorldSize = 1
		tc := trainrt.NewContext(context.Background(), tt.info, nil, nil, nil)
		var got []string
		for _, kv := range rankEnv(tc, &api.PythonSpec{Env: tt.env}, "/pkg", "/work", "127.0.0.1", 1234, tt.threads) {
			if strings.HasPrefix(kv, "CUDA_VISIBLE_DEVICES=") || strings.HasPrefix(kv, "OMP_NUM_THREADS=") {
				got = append(got, kv)
			}
		}
		slices.Sort(got)
		if tt.info.Device < 0 {
			// The worker's own CUDA_VISIBLE_DEVICES passes to a CPU rank.
			tt.want = append(tt.want, "CUDA_VISIBLE_DEVICES=7")
			slices.Sort(tt.want)
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("%+v env %v threads %d: %v, want %v", tt.info, tt.env, tt.threads, got, tt.want)
		}
	}
}
