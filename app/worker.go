package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"time"

	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/tempotrain/tempotrain/activities"
	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/train"
	"github.com/tempotrain/tempotrain/workflows"
)

// WorkerOptions configure StartWorker. Every field documents its default.
type WorkerOptions struct {
	// Workflows runs the workflow side: the Fit and BatchPredict workflows
	// and the LoadRun and RecordRun activities, on TaskQueue. Default false.
	Workflows bool
	// TaskQueue of the workflow side. Default train.DefaultTaskQueue.
	TaskQueue string
	// RankSlots is how many ranks this worker runs at once; 0 runs none.
	RankSlots int
	// RankQueue the rank slots poll. Default train.DefaultCPUQueue, or
	// train.DefaultGPUQueue when Activities.Devices is not empty. The rank
	// slots also poll the shape queues of RankQueue that this worker can
	// hold (api.ShapeQueue: "tempotrain-cpu@cpu4"), where the ranks of runs
	// with scaling.resources_per_worker go: every CPU count 1, 2, 4, ... up
	// to Activities.CPUs with every GPU count 0, 1, 2, 4, ... up to
	// len(Activities.Devices). A shape's queue takes at most as many ranks
	// at once as the worker holds of that shape (and RankSlots); a rank
	// waits in the worker until its CPUs and GPUs are free.
	RankQueue string
	// PredictSlots is how many BatchPredict shards this worker predicts at
	// once, on PredictQueue. Default 0: the shards of PredictQueue run in
	// the rank slots, when PredictQueue is RankQueue (its default).
	PredictSlots int
	// PredictQueue is where this worker takes BatchPredict's activities
	// (api.BatchPredictInput.TaskQueue). Default RankQueue: a worker with
	// rank slots predicts too, as Fit's ranks go to its queue. Predict slots
	// on the rank slots' queue need a queue of their own.
	PredictQueue string
	// StopTimeout is how long Stop lets running ranks finish: they are told
	// at once (train.Context.Preempted), checkpoint at their next step and
	// end, and are cancelled when it runs out. Default DefaultStopTimeout.
	StopTimeout time.Duration
	// Fit configures the Fit workflows of the workflow side. Default: the
	// zero workflows.Options, with SearchAttributes set when Namespace has
	// api.SearchAttributes registered.
	Fit workflows.Options
	// Namespace of the client, where the search attributes are looked up.
	// Default "default".
	Namespace string
	// WorkflowPollers is how many long polls the workflow side keeps open
	// on TaskQueue for workflow tasks (a run's start, its Updates, Queries
	// and activity results), and as many for its activities (LoadRun,
	// RecordRun). Default DefaultWorkflowPollers.
	WorkflowPollers int
	// Activities configure the ranks (advertised host, node name, scratch
	// dir, GPUs). Activities.Client defaults to the client given to
	// StartWorker.
	Activities activities.Options
}

// DefaultWorkflowPollers is WorkerOptions.WorkflowPollers' default, the
// SDK's, as measured (bench/scale -runs 100 -world 2, docs/scale.md "Many
// runs at once"): on a server that binds, a few pollers admit runs at the
// rate it finishes them. With 2 or 4, 100 runs started at once took 40-49 s,
// 0.29-0.33 s of server processor time each, and none lost an attempt; with
// 8 or 16 the runs formed together on the busy server: 101-129 s, 0.40-0.47 s
// each, aborted Updates, and 1 to 5 runs lost a rank task to it and restarted.
const DefaultWorkflowPollers = 2

// DefaultStopTimeout is WorkerOptions.StopTimeout's default.
const DefaultStopTimeout = 30 * time.Second

// Worker is a running set of Temporal workers.
type Worker struct {
	workers []worker.Worker
	acts    *activities.Activities
}

// StartWorker starts the workflow side, the rank slots and the predict slots
// of o on c.
func StartWorker(c client.Client, o WorkerOptions) (*Worker, error) {
	if !o.Workflows && o.RankSlots <= 0 && o.PredictSlots <= 0 {
		return nil, errors.New("app: a worker needs the workflow side, rank slots, predict slots, or some of them")
	}
	if o.TaskQueue == "" {
		o.TaskQueue = train.DefaultTaskQueue
	}
	if o.RankQueue == "" {
		o.RankQueue = train.DefaultCPUQueue
		if len(o.Activities.Devices) > 0 {
			o.RankQueue = train.DefaultGPUQueue
		}
	}
	if o.PredictQueue == "" {
		o.PredictQueue = o.RankQueue
	}
	if o.StopTimeout == 0 {
		o.StopTimeout = DefaultStopTimeout
	}
	if o.WorkflowPollers <= 0 {
		o.WorkflowPollers = DefaultWorkflowPollers
	}
	if o.PredictSlots > 0 && o.RankSlots > 0 && o.PredictQueue == o.RankQueue {
		return nil, fmt.Errorf("app: %d predict slots on the rank slots' queue %q: give them a PredictQueue of their own (or no predict slots: the rank slots predict)", o.PredictSlots, o.RankQueue)
	}
	if len(o.Activities.Devices) > 0 && o.RankSlots > len(o.Activities.Devices) {
		return nil, fmt.Errorf("app: %d rank slots but %d GPUs: a GPU worker runs one rank per GPU", o.RankSlots, len(o.Activities.Devices))
	}
	if o.Activities.Client == nil {
		o.Activities.Client = c
	}
	// A worker told its CPUs (cmd/worker -cpus, starter dev) polls the
	// shape queues of runs with resources_per_worker; one that is not (a
	// test's, a program's own) polls only its rank queue: every shape
	// queue is another set of long polls on the server.
	shapes := o.Activities.CPUs > 0
	if o.Activities.CPUs <= 0 {
		o.Activities.CPUs = runtime.NumCPU()
	}
	acts := activities.New(o.Activities)
	w := &Worker{acts: acts}
	if o.Workflows {
		if !o.Fit.SearchAttributes {
			o.Fit.SearchAttributes = HasSearchAttributes(c, o.Namespace)
		}
		if o.Fit.SearchAttributes && !o.Fit.TuneSearchAttribute {
			o.Fit.TuneSearchAttribute = hasAttributes(c, o.Namespace, api.TuneSearchAttributes)
		}
		ww := worker.New(c, o.TaskQueue, worker.Options{
			MaxConcurrentWorkflowTaskPollers: o.WorkflowPollers,
			MaxConcurrentActivityTaskPollers: o.WorkflowPollers,
		})
		workflows.New(o.Fit).Register(ww)
		workflows.NewBatchPredictor(workflows.PredictOptions{}).Register(ww)
		acts.RegisterControl(ww)
		w.workers = append(w.workers, ww)
	}
	if o.RankSlots > 0 {
		queues := []shapeQueue{{o.RankQueue, o.RankSlots}}
		if shapes {
			queues = shapeQueues(o.RankQueue, o.RankSlots, o.Activities.CPUs, len(o.Activities.Devices))
		}
		for i, sq := range queues {
			rw := worker.New(c, sq.queue, worker.Options{
				MaxConcurrentActivityExecutionSize: sq.slots,
				// Stop closes the ranks' worker stop channel (Preempted)
				// and waits this long for them before cancelling them.
				WorkerStopTimeout: o.StopTimeout,
				// Cancellation reaches a rank with a heartbeat's reply
				// (every second up to 64 ranks, every N/64 s past: see
				// api.RankHeartbeatInterval) or, sooner in a large world,
				// through its process's rendezvous poller.
				MaxHeartbeatThrottleInterval:     time.Second,
				DefaultHeartbeatThrottleInterval: time.Second,
			})
			acts.RegisterRank(rw)
			if i == 0 && o.PredictSlots <= 0 && o.PredictQueue == o.RankQueue {
				acts.RegisterPredict(rw)
			}
			w.workers = append(w.workers, rw)
		}
	}
	if o.PredictSlots > 0 {
		pw := worker.New(c, o.PredictQueue, worker.Options{
			MaxConcurrentActivityExecutionSize: o.PredictSlots,
			// Heartbeats carry a shard's rows, and cancellation with their
			// replies.
			MaxHeartbeatThrottleInterval:     time.Second,
			DefaultHeartbeatThrottleInterval: time.Second,
		})
		acts.RegisterPredict(pw)
		w.workers = append(w.workers, pw)
	}
	for i, x := range w.workers {
		if err := x.Start(); err != nil {
			for _, y := range w.workers[:i] {
				y.Stop()
			}
			_ = acts.Close()
			return nil, fmt.Errorf("app: start worker: %w", err)
		}
	}
	return w, nil
}

// shapeQueue is one task queue the rank slots poll and how many of its
// ranks the worker takes at once.
type shapeQueue struct {
	queue string
	slots int
}

// shapeQueues are the queues of a worker's rank slots: base first (its
// ranks ask for nothing, or one GPU), then each shape queue of base the
// worker can hold with cpus CPUs and gpus GPUs.
func shapeQueues(base string, slots, cpus, gpus int) []shapeQueue {
	out := []shapeQueue{{base, slots}}
	for c := 0; c <= cpus; c = nextPow2(c) {
		for g := 0; g <= gpus; g = nextPow2(g) {
			if c == 0 && g == 0 {
				continue
			}
			n := slots
			if c > 0 {
				n = min(n, cpus/c)
			}
			if g > 0 {
				n = min(n, gpus/g)
			}
			out = append(out, shapeQueue{api.ShapeQueue(base, c, g), n})
		}
	}
	return out
}

// nextPow2 is the shape count after n: 0, 1, 2, 4, 8, ...
func nextPow2(n int) int {
	if n == 0 {
		return 1
	}
	return n * 2
}

// Stop stops the workers, then closes the predictors they loaded. Running
// ranks are told at once (train.Context.Preempted) and get StopTimeout to
// checkpoint and end before they are cancelled; shards are cancelled.
func (w *Worker) Stop() {
	// Rank and predict slots first: a rank told to stop checkpoints and
	// reports to its Fit, which this process's workflow side may be
	// running.
	for i := len(w.workers) - 1; i >= 0; i-- {
		w.workers[i].Stop()
	}
	_ = w.acts.Close()
}

// OutboundIP is this machine's IP on its default route, which other machines
// can usually reach, or 127.0.0.1 when there is none. Nothing is sent.
func OutboundIP() string {
	conn, err := net.Dial("udp", "192.0.2.1:9") // TEST-NET-1: never routed
	if err != nil {
		return "127.0.0.1"
	}
	defer conn.Close()
	if a, ok := conn.LocalAddr().(*net.UDPAddr); ok && !a.IP.IsUnspecified() {
		return a.IP.String()
	}
	return "127.0.0.1"
}

// HasSearchAttributes says whether namespace (default "default") has every
// search attribute of api.SearchAttributes registered with its type. A
// server that cannot say (no permission) has none.
func HasSearchAttributes(c client.Client, namespace string) bool {
	return hasAttributes(c, namespace, api.SearchAttributes)
}

// hasAttributes says whether namespace has every search attribute of attrs
// registered with its type.
func hasAttributes(c client.Client, namespace string, attrs map[string]api.SearchAttributeType) bool {
	if namespace == "" {
		namespace = "default"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := c.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: namespace})
	if err != nil {
		return false
	}
	for name, typ := range attrs {
		if resp.GetCustomAttributes()[name] != SearchAttributeTypes[typ] {
			return false
		}
	}
	return true
}
