package app_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/app"
	"github.com/tempotrain/tempotrain/internal/netns"
	"github.com/tempotrain/tempotrain/internal/pgtemporal"
	"github.com/tempotrain/tempotrain/internal/workerproc"
	"github.com/tempotrain/tempotrain/storage"
	"github.com/tempotrain/tempotrain/storage/miniotest"
	"github.com/tempotrain/tempotrain/train"
)

// hosts is a test's machines: worker processes in network namespaces, each
// with its own address, and the production Temporal server on PostgreSQL
// (the topology of docker-compose.yml) in the root namespace, reached by
// the workers over their links.
type hosts struct {
	net     *netns.Network
	cl      client.Client
	addr    string // the server's host:port on the bridge
	tq, rq  string
	env     []string // more environment for the worker processes
	slots   int      // rank slots of each worker process
	workers []*hostWorker
}

type hostWorker struct {
	host  *netns.Host
	child *workerproc.Proc
}

var subnets atomic.Int32

// The production server of the host tests, started by the first of them
// and stopped by TestMain.
var (
	pgOnce   sync.Once
	pgServer *pgtemporal.Server
	pgClient client.Client
	pgErr    error
)

// closeHostsServer stops the host tests' server and removes its state.
func closeHostsServer() {
	if pgClient != nil {
		pgClient.Close()
	}
	if pgServer != nil {
		pgServer.Close()
		_ = os.RemoveAll(pgServer.Dir())
	}
}

// hostsServer returns the address of the host tests' Temporal server and a
// client of it: the production server on PostgreSQL, or, where its programs
// are missing and TEMPOTRAIN_REQUIRE_PGTEMPORAL is not 1, the package's dev
// server, saying why.
func hostsServer(t *testing.T) (string, client.Client) {
	t.Helper()
	if _, _, _, err := pgtemporal.Binaries(); err != nil {
		if os.Getenv("TEMPOTRAIN_REQUIRE_PGTEMPORAL") == "1" {
			t.Fatal(err)
		}
		t.Logf("these hosts use the dev server, not the production one: %v", err)
		return srv.Address, cl
	}
	pgOnce.Do(func() {
		dir, err := os.MkdirTemp("", "tempotrain-pgtemporal-")
		if err != nil {
			pgErr = err
			return
		}
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		pgServer, pgErr = pgtemporal.Start(ctx, pgtemporal.Options{Dir: dir, SearchAttributes: app.TemporalSearchAttributes(),
			DynamicConfig: pgtemporal.RankQueueConfig})
		if pgErr != nil {
			return
		}
		t.Logf("the production Temporal server on PostgreSQL is up at %s in %v (state in %s)", pgServer.Address, time.Since(start).Round(time.Millisecond), dir)
		pgClient, pgErr = dialServer(pgServer.Address)
	})
	if pgErr != nil {
		t.Fatal(pgErr)
	}
	return pgServer.Address, pgClient
}

// startHosts makes n worker hosts and the server; everything goes when the
// test ends, also when it fails.
func startHosts(t *testing.T, n int) *hosts {
	t.Helper()
	return startHostsWith(t, n, hostsConfig{})
}

// hostsConfig is what startHostsWith adds to startHosts.
type hostsConfig struct {
	// env returns more environment for the worker processes, once the
	// network is made.
	env func(nw *netns.Network) []string
	// slots: rank slots per worker process (default 1).
	slots int
}

// startHostsWith is startHosts with more environment or slots.
func startHostsWith(t *testing.T, n int, hc hostsConfig) *hosts {
	t.Helper()
	defer func(t0 time.Time) { t.Logf("%d worker hosts up in %v", n, time.Since(t0).Round(time.Millisecond)) }(time.Now())
	if err := netns.Available(); err != nil {
		if os.Getenv("TEMPOTRAIN_REQUIRE_NETNS") == "1" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	i := subnets.Add(1)
	nw, err := netns.New(fmt.Sprintf("tth%d", i), fmt.Sprintf("10.78.%d", i))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nw.Close)
	server, c := hostsServer(t)
	// The hosts reach the server (on 127.0.0.1 in the root namespace,
	// shared by the package's host tests) through a TCP relay on their
	// bridge, as workers reach a cluster through its load balancer.
	r, err := netns.NewRelay(nw.BridgeAddr(), server)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	addr := r.Addr()
	h := &hosts{net: nw, cl: c, addr: addr}
	if hc.env != nil {
		h.env = hc.env(nw)
	}
	h.slots = max(hc.slots, 1)
	h.tq, h.rq = startWorkerOn(t, c, true, 0) // the controller, in the root namespace
	for range n {
		host, err := nw.AddHost()
		if err != nil {
			t.Fatal(err)
		}
		h.workers = append(h.workers, &hostWorker{host: host, child: h.startWorker(t, host)})
	}
	// A worker process that could not start (a loaded machine can make its
	// first calls to the server time out) is started again at once, twice
	// at most.
	restarts := 0
	deadline := time.Now().Add(2 * time.Minute)
	for !pollersWithin(h.cl, h.rq, n, 500*time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("fewer than %d workers poll %s after 2 minutes", n, h.rq)
		}
		for _, w := range h.workers {
			select {
			case <-w.child.Exited():
				if restarts == 2*n {
					t.Fatalf("the worker process of %s exited at its start again", w.host.Name)
				}
				restarts++
				t.Logf("the worker process of %s exited at its start; starting it again", w.host.Name)
				w.child = h.startWorker(t, w.host)
			default:
			}
		}
	}
	return h
}

// startWorker starts a worker process in host.
func (h *hosts) startWorker(t *testing.T, host *netns.Host) *workerproc.Proc {
	t.Helper()
	c := startChildCmd(t, host.Command(os.Args[0], "-test.run=^$"), host.Name, h.addr, false, h.slots, host.Addr,
		// Separate machines share no memory: ranks link over TCP
		// (namespaces of one machine would find /dev/shm shared).
		append([]string{"TEMPOTRAIN_COLLECTIVE_SHM=0"}, h.env...)...)
	return c
}

// hostOfRank returns the worker whose process runs rank r of the current
// attempt (from the ranks' heartbeats: a worker's identity is pid@host@).
func (h *hosts) hostOfRank(t *testing.T, run *train.Run, r int) *hostWorker {
	t.Helper()
	w, _ := h.findRank(t, run, r)
	if w == nil {
		t.Fatalf("no worker runs rank %d", r)
	}
	return w
}

// findRank is hostOfRank for a run that may end first: then it returns
// nil and true.
func (h *hosts) findRank(t *testing.T, run *train.Run, r int) (*hostWorker, bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var last string
	for time.Now().Before(deadline) {
		st, err := run.Status(context.Background())
		if err == nil {
			if st.Done {
				return nil, true
			}
			last = fmt.Sprintf("attempt %d, ranks %+v", st.Attempt, st.Ranks)
			for _, rs := range st.Ranks {
				if rs.Attempt != st.Attempt || rs.Rank != r {
					continue
				}
				for _, w := range h.workers {
					if strings.HasPrefix(rs.Worker, fmt.Sprintf("%d@", w.child.Cmd.Process.Pid)) {
						return w, false
					}
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("rank %d's worker not found in 30 s; the last status: %s", r, last)
	return nil, false
}

// gatedFault starts a 3-rank run of a gated config on the hosts
// (epochs > 0: that many epochs of 10 steps of 20 ms); once every rank
// waits at the gate (epoch 3), fault breaks something and may return a
// step to take once the gate is open (nil: none). It returns the run's
// Result, its run.json (every checkpoint verified) and when fault
// returned.
func (h *hosts) gatedFault(t *testing.T, name string, epochs int, failure train.FailureConfig,
	fault func(ctx context.Context, run *train.Run) func(), opts ...func(*train.RunConfig)) (*train.Result, api.RunState, time.Time) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	g := newGate(t)
	cfg := g.config()
	if epochs > 0 {
		cfg.Epochs, cfg.StepSleep = epochs, train.Duration(20*time.Millisecond)
	}
	rc := train.RunConfig{Name: name, StoragePath: t.TempDir(), Failure: failure}
	for _, o := range opts {
		o(&rc)
	}
	run, err := train.NewTrainer(h.cl, "e2e-linear", cfg, train.ScalingConfig{NumWorkers: 3, TaskQueue: h.rq},
		rc, train.WithTaskQueue(h.tq)).Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	g.reached(t, 3)
	then := fault(ctx, run)
	at := time.Now()
	g.open(t)
	if then != nil {
		then()
	}
	res, err := run.Wait(ctx)
	if err != nil {
		dumpWorkflow(t, h.cl, run.WorkflowID)
		t.Fatal(err)
	}
	return res, verifyRun(t, res, rc.StoragePath, cfg.Epochs), at
}

// TestHostsBlackholedWorker: four worker hosts, a 3-rank run; the host of
// rank 1 drops off the network (no FIN, no RST). Its peers' collective
// operations time out, the attempt fails, and the run restarts on the three
// hosts left and finishes like an uninterrupted run.
func TestHostsBlackholedWorker(t *testing.T) {
	h := startHosts(t, 4)
	res, st, cut := h.gatedFault(t, "blackholed", 0, train.FailureConfig{MaxFailures: 1,
		HeartbeatTimeout: train.Duration(5 * time.Second), CollectiveTimeout: train.Duration(5 * time.Second)},
		func(_ context.Context, run *train.Run) func() {
			if err := h.hostOfRank(t, run, 1).host.Blackhole(); err != nil {
				t.Fatal(err)
			}
			return nil
		})
	t.Logf("attempt 1: %s", st.History[0].Error)
	recovered := st.History[1].Start.Sub(cut)
	t.Logf("blackhole to attempt 2: %v", recovered)
	if res.Attempts != 2 || res.Failures != 1 {
		t.Errorf("attempts %d failures %d: want 2 and 1", res.Attempts, res.Failures)
	}
	if !strings.Contains(st.History[0].Error, "rank 1") {
		t.Errorf("attempt 1's error does not blame rank 1, the blackholed one: %s", st.History[0].Error)
	}
	if recovered > 15*time.Second {
		t.Errorf("attempt 2 started %v after the blackhole: over the 5s timeouts and the 3s grace", recovered)
	}
}

// TestHostsCutLink: the link between the hosts of ranks 1 and 2 is cut;
// both still reach Temporal and the other ranks. The attempt's error names
// the two ranks of that link (not rank 0, whose ring neighbour stalled but
// whose links work), and the run restarts and finishes (the hosts
// are healed first: a cut link stays cut on real networks too, but a fixed
// group over it could not finish).
func TestHostsCutLink(t *testing.T) {
	h := startHosts(t, 3)
	_, st, _ := h.gatedFault(t, "cut-link", 0, train.FailureConfig{MaxFailures: 1, CollectiveTimeout: train.Duration(5 * time.Second)},
		func(ctx context.Context, run *train.Run) func() {
			a, b := h.hostOfRank(t, run, 1), h.hostOfRank(t, run, 2)
			if err := a.host.Cut(b.host.Addr); err != nil {
				t.Fatal(err)
			}
			if err := b.host.Cut(a.host.Addr); err != nil {
				t.Fatal(err)
			}
			return func() { // heal once attempt 1 failed
				for {
					st, err := run.Status(ctx)
					if err == nil && st.Attempt >= 2 {
						break
					}
					if ctx.Err() != nil {
						t.Fatal("attempt 1 never failed")
					}
					time.Sleep(100 * time.Millisecond)
				}
				if err := a.host.Heal(); err != nil {
					t.Fatal(err)
				}
				if err := b.host.Heal(); err != nil {
					t.Fatal(err)
				}
			}
		})
	e := st.History[0].Error
	t.Logf("attempt 1: %s", e)
	// The ring sends from rank 1 to rank 2 over the cut link: rank 1's
	// kernel retransmits what it sent, and rank 1 says so.
	if !strings.Contains(e, "rank 1 failed") || !strings.Contains(e, "the link from rank 1 to rank 2 is down") {
		t.Errorf("attempt 1's error does not blame the link from rank 1 to rank 2, the cut one: %s", e)
	}
}

// TestHostsLossyLinks: 1% of the packets of every worker host's link are
// dropped, both ways, and every packet is delayed 20 ms (tc netem where the
// kernel has it; here, without netem, a netfilter queue: every path between
// two hosts, or a host and the server, is 20 ms longer each way); the run
// completes in one attempt, with the metrics of the same run on clean links.
func TestHostsLossyLinks(t *testing.T) {
	h := startHosts(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	fit := func(name string) (*train.Result, time.Duration) {
		start := time.Now()
		res, err := train.NewTrainer(h.cl, "e2e-linear", slowLinear, train.ScalingConfig{NumWorkers: 3, TaskQueue: h.rq},
			train.RunConfig{Name: name, StoragePath: t.TempDir()}, train.WithTaskQueue(h.tq)).Fit(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return res, time.Since(start)
	}
	clean, cleanTook := fit("clean-links")
	im := netns.Impairment{Loss: 1, Delay: 20 * time.Millisecond}
	for _, w := range h.workers {
		if err := w.host.Impair(im); err != nil {
			t.Fatal(err)
		}
	}
	// The delay is there: a TCP handshake with the server takes a round
	// trip, 40 ms (the lossy rule may drop a SYN: a few tries).
	rtt := time.Hour
	for range 5 {
		start := time.Now()
		c, err := h.workers[0].host.DialTimeout("tcp", h.addr, 2*time.Second)
		if err == nil {
			rtt = min(rtt, time.Since(start))
			c.Close()
		}
	}
	t.Logf("TCP handshake from a worker host to the server: %v", rtt)
	if rtt < 35*time.Millisecond || rtt > time.Second {
		t.Errorf("TCP handshake from a worker host to the server in %v with 20 ms each way", rtt)
	}
	lossy, took := fit("lossy-links")
	t.Logf("%d epochs on 3 hosts: %v on clean links, %v with %+v on every link (%d attempts)", slowLinear.Epochs, cleanTook, took, im, lossy.Attempts)
	if lossy.Attempts != 1 {
		t.Errorf("%d attempts: a lossy link failed the run", lossy.Attempts)
	}
	if fmt.Sprint(lossy.Metrics) != fmt.Sprint(clean.Metrics) {
		t.Errorf("metrics over lossy links %v, over clean links %v", lossy.Metrics, clean.Metrics)
	}
}

// TestHostsKillWorkerAtRandom: four worker hosts, 3-rank runs; in each
// trial one rank's worker process is SIGKILLed at a random time. Every run
// completes, keeps every committed checkpoint, and ends with the metrics
// of the same run uninterrupted (the parameters are a function of the
// checkpoint and the data, so they are the same bytes). A new worker
// process takes the killed one's host for the next trial.
func TestHostsKillWorkerAtRandom(t *testing.T) {
	h := startHosts(t, 4)
	cfg := slowLinear
	cfg.Epochs, cfg.StepSleep = 8, train.Duration(20*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	start := func(name string) *train.Run {
		run, err := train.NewTrainer(h.cl, "e2e-linear", cfg, train.ScalingConfig{NumWorkers: 3, TaskQueue: h.rq},
			train.RunConfig{Name: name, StoragePath: t.TempDir(), Failure: train.FailureConfig{MaxFailures: 2}},
			train.WithTaskQueue(h.tq)).Start(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return run
	}
	clean, err := start("uninterrupted").Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cleanModel := lastModel(t, clean, verifyRun(t, clean, storageOf(clean), cfg.Epochs))
	const trials = 10
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	var recoveries []time.Duration
	kills := 0
	for trial := range trials {
		run := start(fmt.Sprintf("killed-%d", trial))
		// Wait until the group trains, then kill at a random point.
		for {
			st, err := run.Status(ctx)
			if err == nil && st.Reports >= 1 {
				break
			}
			if ctx.Err() != nil {
				t.Fatal("the run never reported")
			}
			time.Sleep(20 * time.Millisecond)
		}
		time.Sleep(time.Duration(rng.IntN(800)) * time.Millisecond)
		victim, done := h.findRank(t, run, rng.IntN(3))
		if done {
			// The run ended before the kill (a loaded machine is slow to
			// answer the Query): nothing to recover from in this trial.
			t.Logf("trial %d: the run ended before its kill", trial)
			if _, err := run.Wait(ctx); err != nil {
				t.Fatalf("trial %d: %v", trial, err)
			}
			continue
		}
		kills++
		if victim == nil {
			t.Fatalf("trial %d: no worker runs the chosen rank", trial)
		}
		victim.child.Kill()
		killed := time.Now()
		res, err := run.Wait(ctx)
		if err != nil {
			dumpWorkflow(t, h.cl, run.WorkflowID)
			t.Fatalf("trial %d: %v", trial, err)
		}
		st := verifyRun(t, res, storageOf(res), cfg.Epochs)
		if m := lastModel(t, res, st); !bytes.Equal(m, cleanModel) {
			t.Errorf("trial %d: the last checkpoint's parameters differ from the uninterrupted run's", trial)
		}
		if len(st.History) > 1 {
			recoveries = append(recoveries, st.History[1].Start.Sub(killed))
		}
		t.Logf("trial %d: %d attempts, world sizes %v, attempt 1: %s", trial, res.Attempts, res.WorldSizes, st.History[0].Error)
		if fmt.Sprint(res.Metrics) != fmt.Sprint(clean.Metrics) {
			t.Errorf("trial %d: metrics %v, uninterrupted %v", trial, res.Metrics, clean.Metrics)
		}
		// The host gets a new worker process for the next trial.
		victim.child = h.startWorker(t, victim.host)
		waitPollersOn(t, h.cl, h.rq, 4)
	}
	if kills < trials/2 {
		t.Errorf("only %d of %d trials killed a worker before their run ended", kills, trials)
	}
	slices.Sort(recoveries)
	if len(recoveries) > 0 {
		t.Logf("%d trials, %d with a kill, all completed; SIGKILL to the next attempt: median %v, max %v", trials, kills, recoveries[len(recoveries)/2], recoveries[len(recoveries)-1])
	}
}

// TestHostsWorkerCutFromTemporal: the host of rank 1 loses the Temporal
// server but not its peers. Its rank's heartbeats stop reaching the server,
// the heartbeat timeout fails the attempt, and the run restarts on the
// other hosts.
func TestHostsWorkerCutFromTemporal(t *testing.T) {
	h := startHosts(t, 4)
	// 40 epochs of 0.2 s: past the heartbeat timeout.
	res, st, cut := h.gatedFault(t, "cut-from-temporal", 40, train.FailureConfig{MaxFailures: 1, HeartbeatTimeout: train.Duration(5 * time.Second)},
		func(_ context.Context, run *train.Run) func() {
			if err := h.hostOfRank(t, run, 1).host.Isolate(h.net.BridgeAddr()); err != nil {
				t.Fatal(err)
			}
			return nil
		})
	if len(st.History) < 2 {
		t.Fatalf("the run ended in one attempt: the cut host's rank was not noticed (%+v)", st.History)
	}
	t.Logf("attempt 1: %s; attempt 2 started %v after the cut", st.History[0].Error, st.History[1].Start.Sub(cut))
	if res.Attempts != 2 || !strings.Contains(st.History[0].Error, "rank 1 failed: no heartbeat for 5s") {
		t.Errorf("attempts %d, attempt 1 %q: want 2, the first failed for rank 1's heartbeats", res.Attempts, st.History[0].Error)
	}
}

// TestHostsHungRank: rank 1 hangs in the training function (no collective
// call, deaf to cancellation) while its peers wait in an all-reduce. The
// peers time out on healthy links, rank 1 does not stop when cancelled,
// and the attempt's error blames rank 1, not the neighbour that timed out
// first; the run restarts on the other hosts.
func TestHostsHungRank(t *testing.T) {
	h := startHosts(t, 4)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cfg := slowLinear
	cfg.FailRank, cfg.FailEpoch, cfg.FailMode, cfg.FailAttempt = 1, 3, "hang", 1
	dir := t.TempDir()
	res, err := train.NewTrainer(h.cl, "e2e-linear", cfg, train.ScalingConfig{NumWorkers: 3, TaskQueue: h.rq},
		train.RunConfig{Name: "hung-rank", StoragePath: dir, Failure: train.FailureConfig{MaxFailures: 1,
			CollectiveTimeout: train.Duration(5 * time.Second)}},
		train.WithTaskQueue(h.tq)).Fit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	st := verifyRun(t, res, dir, cfg.Epochs)
	e := st.History[0].Error
	t.Logf("attempt 1: %s; attempt 2 started %v after attempt 1", e, st.History[1].Start.Sub(st.History[0].Start))
	if !strings.HasPrefix(e, "attempt 1: rank 1 did not reach AllReduceFloat64 #") || !strings.Contains(e, "its last progress: epoch 3, step ") {
		t.Errorf("attempt 1's error does not lead with rank 1, the hung one, and its progress: %s", e)
	}
}

// TestHostsServerRestart: the Temporal server (production, on PostgreSQL)
// crashes (SIGKILL) while three ranks on three hosts train, and comes back
// 5 s later. The ranks keep training through the outage, their reports
// and heartbeats get through once it is back, and the run finishes in its
// first attempt with every checkpoint.
func TestHostsServerRestart(t *testing.T) {
	h := startHosts(t, 3)
	if pgServer == nil {
		t.Skip("the dev server runs inside this test process and cannot crash on its own: this row needs the production server (.ci/setup test builds it)")
	}
	var down, up time.Time
	res, st, _ := h.gatedFault(t, "server-restart", 8, train.FailureConfig{MaxFailures: 1},
		func(ctx context.Context, _ *train.Run) func() {
			pgServer.Kill()
			down = time.Now()
			return func() {
				time.Sleep(5 * time.Second)
				if err := pgServer.Start(ctx); err != nil {
					t.Fatalf("%v\n%s", err, pgServer.LogTail(4000))
				}
				up = time.Now()
				t.Logf("the server was down %v and took %v to start again", up.Sub(down).Round(time.Millisecond), time.Since(down.Add(5*time.Second)).Round(time.Millisecond))
			}
		})
	t.Logf("the run finished %v after the server was back (%d attempts, %d checkpoints)", time.Since(up).Round(time.Millisecond), res.Attempts, len(st.Checkpoints))
	if res.Attempts != 1 || res.Failures != 0 {
		t.Errorf("attempts %d failures %d: want 1 and 0 (a server outage is not a rank's failure); history %+v", res.Attempts, res.Failures, st.History)
	}
	// The run is found by our search attributes in the server's SQL
	// visibility store (eventually consistent: polled).
	query := "TempotrainRun='server-restart' AND TempotrainStatus='succeeded' AND TempotrainFunc='e2e-linear'"
	if n := waitListed(context.Background(), h.cl, query, train.WorkflowID("server-restart"), 15*time.Second); n != 1 {
		t.Fatalf("%s lists %d runs, want this one alone", query, n)
	}
}

// TestHostsMinIODown: checkpoints go to MinIO (S3) on the server's host,
// uploaded in the background; MinIO crashes while three ranks on three
// hosts train and comes back 30 s later. The uploads are retried (and an
// attempt that ran out of retries restarts from the last committed
// checkpoint); the run finishes with every checkpoint it lists stored and
// restorable.
func TestHostsMinIODown(t *testing.T) {
	mio := miniotest.Start(t)
	bucket := mio.CreateBucket(t, "hosts-minio-down")
	mio.SetEnv(t) // the controller and the checks, in this process
	h := startHostsWith(t, 3, hostsConfig{env: func(nw *netns.Network) []string {
		r, err := netns.NewRelay(nw.BridgeAddr(), strings.TrimPrefix(mio.Endpoint, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(r.Close)
		env := mio.Env()
		for i, kv := range env {
			if strings.HasPrefix(kv, "AWS_ENDPOINT_URL_S3=") {
				env[i] = "AWS_ENDPOINT_URL_S3=http://" + r.Addr()
			}
		}
		return env
	}})
	var down, up time.Time
	res, st, _ := h.gatedFault(t, "minio-down", 8, train.FailureConfig{MaxFailures: 5},
		func(context.Context, *train.Run) func() {
			mio.Stop(t)
			down = time.Now()
			return func() {
				time.Sleep(30 * time.Second)
				mio.StartAgain(t)
				up = time.Now()
			}
		}, func(rc *train.RunConfig) {
			rc.StoragePath = "s3://" + bucket + "/runs"
			rc.Checkpoint.AsyncUpload = true
		})
	t.Logf("MinIO down %v; the run finished %v after it was back: %d attempts, %d failures, %d checkpoints",
		up.Sub(down).Round(time.Millisecond), time.Since(up).Round(time.Millisecond), res.Attempts, res.Failures, len(st.Checkpoints))
	for _, a := range st.History {
		if a.Error != "" {
			t.Logf("attempt %d: %s", a.Attempt, a.Error)
		}
	}
	if last := st.Checkpoints[len(st.Checkpoints)-1]; !strings.Contains(last.URI, bucket) {
		t.Errorf("the last checkpoint is not in MinIO: %s", last.URI)
	}
}

// storageOf is the storage path of a run's Result.
func storageOf(res *train.Result) string { return res.Path[:len(res.Path)-len(res.Name)] }

// lastModel is model.bin of the run's last checkpoint (e2e-linear's
// parameters, as stored), restored from storage.
func lastModel(t *testing.T, res *train.Result, st api.RunState) []byte {
	t.Helper()
	ctx := context.Background()
	b, err := storage.Open(ctx, storageOf(res))
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "last")
	if _, err := storage.NewRun(b, res.Name).RestoreCheckpoint(ctx, st.Checkpoints[len(st.Checkpoints)-1].Seq, dir); err != nil {
		t.Fatal(err)
	}
	m, err := os.ReadFile(filepath.Join(dir, "model.bin"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestHostsLoad: four worker hosts of 25 rank slots each. 50 small runs
// (2 ranks, 3 epochs) started at once all complete; then one run of 64
// ranks (16 per host, every link TCP) completes all its epochs on 64
// ranks.
func TestHostsLoad(t *testing.T) {
	h := startHostsWith(t, 4, hostsConfig{slots: 25})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cfg := slowLinear
	cfg.Epochs, cfg.StepSleep = 3, train.Duration(20*time.Millisecond)
	const runs = 50
	start := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, runs)
	results := make([]*train.Result, runs)
	took := make([]time.Duration, runs)
	for i := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func(t0 time.Time) { took[i] = time.Since(t0) }(time.Now())
			results[i], errs[i] = train.NewTrainer(h.cl, "e2e-linear", cfg, train.ScalingConfig{NumWorkers: 2, TaskQueue: h.rq},
				train.RunConfig{Name: fmt.Sprintf("load-%02d", i), StoragePath: t.TempDir(), Failure: train.FailureConfig{MaxFailures: 1}},
				train.WithTaskQueue(h.tq)).Fit(ctx)
		}()
	}
	wg.Wait()
	var durations []time.Duration
	for i, err := range errs {
		if err != nil {
			t.Errorf("run %d: %v", i, err)
			continue
		}
		if results[i].Metrics["epoch"] != float64(cfg.Epochs) || results[i].Attempts != 1 {
			t.Errorf("run %d: %d attempts, metrics %v", i, results[i].Attempts, results[i].Metrics)
		}
		durations = append(durations, took[i])
	}
	slices.Sort(durations)
	if len(durations) > 0 {
		t.Logf("%d of %d concurrent runs completed in %v; a run's own time median %v, max %v", len(durations), runs,
			time.Since(start).Round(time.Millisecond), durations[len(durations)/2].Round(time.Millisecond), durations[len(durations)-1].Round(time.Millisecond))
	}

	big := cfg
	big.Epochs = 2
	start = time.Now()
	res, err := train.NewTrainer(h.cl, "e2e-linear", big, train.ScalingConfig{NumWorkers: 64, TaskQueue: h.rq},
		train.RunConfig{Name: "load-64", StoragePath: t.TempDir()}, train.WithTaskQueue(h.tq)).Fit(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("64 ranks on 4 hosts: %d epochs in %v (start to finish), world sizes %v", big.Epochs, time.Since(start).Round(time.Millisecond), res.WorldSizes)
	if res.Metrics["epoch"] != float64(big.Epochs) || !slices.Equal(res.WorldSizes, []int{64}) {
		t.Errorf("the 64-rank run: world sizes %v, metrics %v", res.WorldSizes, res.Metrics)
	}
}

// TestHostsElastic: an elastic run (min 2, max 4) on four hosts of the
// production server. The host of rank 3 loses its worker process
// (SIGKILL): the next attempt forms on the three left; the host gets a
// new worker process, which stands by, and the run grows back to four
// ranks at its next checkpoint. World sizes 4, 3, 4.
func TestHostsElastic(t *testing.T) {
	h := startHosts(t, 4)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir, g := t.TempDir(), newGate(t)
	cfg := g.config()
	cfg.Epochs, cfg.StepSleep = 40, train.Duration(20*time.Millisecond)
	cfg.HoldAttempt, cfg.HoldEpoch = 2, 5 // attempt 2 waits for the standby
	run, err := train.NewTrainer(h.cl, "e2e-linear", cfg,
		train.ScalingConfig{MinWorkers: 2, MaxWorkers: 4, LastCall: train.Duration(2 * time.Second), TaskQueue: h.rq},
		train.RunConfig{Name: "hosts-elastic", StoragePath: dir, Failure: train.FailureConfig{MaxFailures: 1}},
		train.WithTaskQueue(h.tq)).Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	g.reached(t, 4)
	victim := h.hostOfRank(t, run, 3)
	victim.child.Kill()
	killed := time.Now()
	g.open(t)
	for {
		st, err := run.Status(ctx)
		if err == nil && st.Attempt == 2 && st.WorldSize == 3 {
			t.Logf("attempt 2 on 3 ranks %v after the SIGKILL", time.Since(killed).Round(time.Millisecond))
			break
		}
		if ctx.Err() != nil {
			dumpWorkflow(t, h.cl, run.WorkflowID)
			t.Fatal("attempt 2 never formed on 3 ranks")
		}
		time.Sleep(50 * time.Millisecond)
	}
	victim.child = h.startWorker(t, victim.host) // capacity comes back
	waitStandby(ctx, t, run)
	g.release(t)
	res, err := run.Wait(ctx)
	if err != nil {
		dumpWorkflow(t, h.cl, run.WorkflowID)
		t.Fatal(err)
	}
	st := verifyRun(t, res, dir, cfg.Epochs)
	if !slices.Equal(res.WorldSizes, []int{4, 3, 4}) || res.Failures != 1 || len(st.History) != 3 || !st.History[1].Grown {
		t.Fatalf("world sizes %v, failures %d, history %+v: want 4, 3, 4 with one failure, attempt 2 grown", res.WorldSizes, res.Failures, st.History)
	}
	t.Logf("world sizes %v; attempt 3 (4 ranks) started %v after the SIGKILL", res.WorldSizes, st.History[2].Start.Sub(killed).Round(time.Millisecond))
}
