package activities

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/storage"
	"github.com/tempotrain/tempotrain/tracing"
)

// Options configure Activities. Every field documents its default.
type Options struct {
	// Client reaches the Fit workflows (rendezvous and reports). Required for
	// RunRank.
	Client client.Client
	// AdvertiseHost is the host other ranks dial to reach this worker's ranks.
	// Default 127.0.0.1, which only works when every rank is on this machine.
	AdvertiseHost string
	// ListenHost is the interface rank listeners bind. Default AdvertiseHost.
	ListenHost string
	// Node names this machine; ranks with the same Node share LocalRank
	// numbering. Default: the host name.
	Node string
	// ScratchDir holds ranks' private directories (restored checkpoints,
	// checkpoints being written). Default: $TMPDIR/tempotrain.
	ScratchDir string
	// HeartbeatInterval is how often a rank heartbeats. Default 1s.
	HeartbeatInterval time.Duration
	// Devices are the GPU ordinals this worker hands to GPU ranks: one to
	// a GPU rank, or as many as its resources ask for
	// (scaling.resources_per_worker's GPU), each to one rank at a time.
	// Default none.
	Devices []int
	// CPUs is how many CPUs this worker hands to ranks that ask for them
	// (scaling.resources_per_worker's CPU); a rank waits until its CPUs are
	// free. Ranks that ask for none are not counted. Default
	// runtime.NumCPU(); app.StartWorker polls the shape queues of runs
	// with resources only for a worker given its CPUs.
	CPUs int
	// Logger. Default slog.Default().
	Logger *slog.Logger
	// Telemetry records ranks' spans and metrics (rendezvous, epochs, steps,
	// collectives, checkpoints). The Temporal client's interceptor, which
	// makes RunRank's span, is set on Client. Default: off.
	Telemetry *tracing.Telemetry
}

// Activities implements the activities of package workflows.
type Activities struct {
	o  Options
	wf workflowClient // o.Client, unless a test plays the workflow
	// recordHeartbeat is activity.RecordHeartbeat; a test may watch the
	// details too (the SDK's test environment throttles heartbeats to one
	// per 30 s).
	recordHeartbeat func(ctx context.Context, details ...any)
	// predict holds the predictors BatchPredict's shards use, one load per
	// checkpoint (predict.go).
	predict *predictorCache

	// pool holds the CPUs and GPUs ranks ask for (resources.go).
	pool *pool
	// rdv is the rendezvous traffic the process's ranks share
	// (rendezvous.go).
	rdv rendezvousHub

	mu       sync.Mutex
	backends map[string]storage.Backend
}

// New returns Activities with o's defaults filled in.
func New(o Options) *Activities {
	if o.AdvertiseHost == "" {
		o.AdvertiseHost = "127.0.0.1"
	}
	if o.ListenHost == "" {
		o.ListenHost = o.AdvertiseHost
	}
	if o.Node == "" {
		o.Node, _ = os.Hostname()
	}
	if o.ScratchDir == "" {
		o.ScratchDir = filepath.Join(os.TempDir(), "tempotrain")
	}
	if o.HeartbeatInterval <= 0 {
		o.HeartbeatInterval = time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.CPUs <= 0 {
		o.CPUs = runtime.NumCPU()
	}
	a := &Activities{o: o, backends: map[string]storage.Backend{}, pool: newPool(o.CPUs, o.Devices),
		recordHeartbeat: activity.RecordHeartbeat, predict: newPredictorCache()}
	if o.Client != nil {
		a.wf = o.Client
	}
	return a
}

// RegisterRank registers RunRank, for a worker on a rank task queue.
func (a *Activities) RegisterRank(r worker.ActivityRegistry) {
	r.RegisterActivityWithOptions(a.RunRank, activity.RegisterOptions{Name: api.ActivityRunRank})
}

// RegisterControl registers the storage bookkeeping activities, for the
// worker on the workflow task queue.
func (a *Activities) RegisterControl(r worker.ActivityRegistry) {
	r.RegisterActivityWithOptions(a.LoadRun, activity.RegisterOptions{Name: api.ActivityLoadRun})
	r.RegisterActivityWithOptions(a.RecordRun, activity.RegisterOptions{Name: api.ActivityRecordRun})
	r.RegisterActivityWithOptions(a.Promote, activity.RegisterOptions{Name: api.ActivityPromote})
	r.RegisterActivityWithOptions(a.TuneBest, activity.RegisterOptions{Name: api.ActivityTuneBest})
	r.RegisterActivityWithOptions(a.LoadTune, activity.RegisterOptions{Name: api.ActivityLoadTune})
	r.RegisterActivityWithOptions(a.SaveTune, activity.RegisterOptions{Name: api.ActivitySaveTune})
}

// backend returns the storage backend of a path, opened once per process.
func (a *Activities) backend(ctx context.Context, path string) (storage.Backend, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if b, ok := a.backends[path]; ok {
		return b, nil
	}
	b, err := storage.Open(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("open storage %q: %w", path, err)
	}
	a.backends[path] = b
	return b, nil
}

func (a *Activities) run(ctx context.Context, path, name string) (*storage.Run, error) {
	b, err := a.backend(ctx, path)
	if err != nil {
		return nil, err
	}
	return storage.NewRun(b, name), nil
}
