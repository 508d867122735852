package api

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

// Resource names of ScalingConfig.ResourcesPerWorker: Ray's.
const (
	ResourceCPU = "CPU"
	ResourceGPU = "GPU"
)

// MaxResourceCPU and MaxResourceGPU bound ScalingConfig.ResourcesPerWorker:
// what no machine has is a typo, not a request.
const (
	MaxResourceCPU = 4096
	MaxResourceGPU = 64
)

// Resources is what one rank asks of its worker: ScalingConfig's
// ResourcesPerWorker with its defaults applied. The zero value asks for
// nothing: the rank goes to the plain rank queue.
type Resources struct {
	// CPU is how many CPUs the rank holds on its worker while it runs; it
	// may be fractional (Ray's {"CPU": 0.5}). 0: none counted.
	CPU float64 `json:"cpu,omitempty"`
	// GPU is how many GPUs the rank is given, all of them its own.
	GPU int `json:"gpu,omitempty"`
}

// IsZero says whether r asks for nothing.
func (r Resources) IsZero() bool { return r.CPU == 0 && r.GPU == 0 }

// Threads is the thread count r's CPUs give a rank: CPU rounded up, 0 when
// r asks for no CPU.
func (r Resources) Threads() int { return int(math.Ceil(r.CPU)) }

// Shape is the queue shape of r: CPU and GPU each rounded up to a power of
// two (0 stays 0), so that a worker polls a handful of queues, one per
// shape it can hold, rather than one per count.
func (r Resources) Shape() (cpus, gpus int) {
	return pow2Ceil(r.Threads()), pow2Ceil(r.GPU)
}

// String is r in Ray's spelling: {CPU: 4, GPU: 1}, what asks for nothing
// omitted.
func (r Resources) String() string {
	var parts []string
	if r.CPU > 0 {
		parts = append(parts, "CPU: "+strconv.FormatFloat(r.CPU, 'g', -1, 64))
	}
	if r.GPU > 0 {
		parts = append(parts, "GPU: "+strconv.Itoa(r.GPU))
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

func pow2Ceil(n int) int {
	if n <= 0 {
		return 0
	}
	p := 1
	for p < n {
		p <<= 1
	}
	return p
}

// ShapeQueue names the task queue of the ranks of shape (cpus, gpus) taken
// from base, a rank queue: "tempotrain-cpu@cpu4", "tempotrain-gpu@cpu8-gpu2",
// "tempotrain-gpu@gpu1". Shape (0, 0) is base itself. A worker on base polls
// the shape queues it can hold (app.StartWorker).
func ShapeQueue(base string, cpus, gpus int) string {
	var parts []string
	if cpus > 0 {
		parts = append(parts, fmt.Sprintf("cpu%d", cpus))
	}
	if gpus > 0 {
		parts = append(parts, fmt.Sprintf("gpu%d", gpus))
	}
	if len(parts) == 0 {
		return base
	}
	return base + "@" + strings.Join(parts, "-")
}

// Resources is what each rank of s asks of its worker:
// ResourcesPerWorker, with GPU 1 when UseGPU and it names none or 0 (Ray's
// default). Without ResourcesPerWorker it is the zero Resources: a rank
// goes to the plain rank queue and, with UseGPU, is given one GPU there.
func (s ScalingConfig) Resources() Resources {
	if len(s.ResourcesPerWorker) == 0 {
		return Resources{}
	}
	r := Resources{CPU: s.ResourcesPerWorker[ResourceCPU], GPU: int(s.ResourcesPerWorker[ResourceGPU])}
	if r.GPU == 0 && s.UseGPU {
		r.GPU = 1 // Ray too drops zeros, then gives a GPU run 1
	}
	return r
}

func (s ScalingConfig) validateResources() error {
	keys := make([]string, 0, len(s.ResourcesPerWorker))
	for k := range s.ResourcesPerWorker {
		keys = append(keys, k)
	}
	sort.Strings(keys) // the same error every time
	for _, k := range keys {
		v := s.ResourcesPerWorker[k]
		field := "scaling.resources_per_worker." + k
		bad := func(reason string) error { return &InvalidInputError{Field: field, Value: v, Reason: reason} }
		switch {
		case k != ResourceCPU && k != ResourceGPU:
			hint := ""
			if strings.EqualFold(k, ResourceCPU) || strings.EqualFold(k, ResourceGPU) {
				hint = fmt.Sprintf(" (did you mean %q?)", strings.ToUpper(k))
			}
			return bad(fmt.Sprintf(`is not a resource tempotrain knows%s: only "CPU" and "GPU"; Ray's custom resources are not supported (send such ranks to workers that have them with scaling.task_queue)`, hint))
		case math.IsNaN(v) || v < 0:
			return bad("must be at least 0")
		case k == ResourceCPU && v > MaxResourceCPU:
			return bad(fmt.Sprintf("must be at most %d", MaxResourceCPU))
		case k == ResourceGPU && v > MaxResourceGPU:
			return bad(fmt.Sprintf("must be at most %d", MaxResourceGPU))
		case k == ResourceGPU && v != math.Trunc(v):
			return bad("must be a whole number: a rank's GPUs are its own (fractional GPUs are not supported)")
		case k == ResourceGPU && v > 0 && !s.UseGPU:
			return bad("needs scaling.use_gpu true (as in Ray): set it, or remove GPU from scaling.resources_per_worker")
		}
	}
	return nil
}
