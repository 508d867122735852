// Package pgtemporal runs the production Temporal server on PostgreSQL for
// tests and benchmarks: the topology docker-compose.yml describes (a
// postgres database, the temporal server set up with its own SQL tool, the
// default namespace and our search attributes), as local processes, so
// that the compose file's setup is exercised without Docker.
//
// Start makes a private PostgreSQL cluster in a directory of its own
// (Debian's postgresql: initdb, postgres), creates the temporal and
// temporal_visibility databases and their schemas with temporal-sql-tool,
// writes the server's configuration and starts temporal-server, all on
// free ports of one address. The server can be stopped and started again
// (its state is in PostgreSQL); Close removes everything.
//
// The two Temporal programs are built from the go.temporal.io/server
// module that go.mod pins (.ci/setup test installs them):
//
//	go build -o "$(go env GOPATH)/bin/temporal-server" go.temporal.io/server/cmd/server
//	go build -o "$(go env GOPATH)/bin/temporal-sql-tool" go.temporal.io/server/cmd/tools/sql
package pgtemporal

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/tempotrain/tempotrain/internal/freeport"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Options configures Start.
type Options struct {
	// Dir holds the PostgreSQL cluster, the server's configuration and the
	// logs. Required; Close removes what Start made in it.
	Dir string
	// IP the server and PostgreSQL listen on. Default 127.0.0.1.
	IP string
	// Namespace to register. Default "default".
	Namespace string
	// SearchAttributes to add to the namespace.
	SearchAttributes map[string]enumspb.IndexedValueType
	// DynamicConfig values for the server (key: value, YAML scalars).
	DynamicConfig map[string]any
}

// RankQueueConfig is the dynamic configuration tempotrain's tests and
// bench/hosts run the server with, and what README recommends for a
// cluster that runs ranks: search attributes usable as soon as they are
// added, and task queues of one partition. A production server splits
// every task queue into 4 partitions; a rank's activity task that lands in
// a partition where no worker polls waits there until one does, up to a
// long poll (a minute), while the rest of its group waits at the
// rendezvous (seen in CI: a rank not started within 30 s). Rank queues
// carry a few tasks a minute: one partition costs them nothing. On a
// shared cluster, constrain the two partition keys to the rank queues
// (constraints: {taskQueueName: tempotrain-cpu}).
var RankQueueConfig = map[string]any{
	"system.forceSearchAttributesCacheRefreshOnRead": true,
	"matching.numTaskqueueReadPartitions":            1,
	"matching.numTaskqueueWritePartitions":           1,
}

// Server is a running Temporal server on its own PostgreSQL.
type Server struct {
	// Address is the frontend's host:port.
	Address string

	o       Options
	bin     string // temporal-server
	pg      *exec.Cmd
	pgDone  chan struct{}
	pgPort  int
	pgDir   string
	confDir string
	mu      sync.Mutex
	srv     *exec.Cmd
	srvDone chan struct{}
}

// Binaries finds temporal-server and temporal-sql-tool on PATH or in
// $(go env GOPATH)/bin, and PostgreSQL's initdb and postgres in Debian's
// /usr/lib/postgresql/*/bin. The error says what is missing and how to get
// it.
func Binaries() (server, sqlTool, pgBin string, err error) {
	find := func(name string) string {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
		gopath := os.Getenv("GOPATH")
		if gopath == "" {
			if home, err := os.UserHomeDir(); err == nil {
				gopath = filepath.Join(home, "go")
			}
		}
		p := filepath.Join(gopath, "bin", name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return p
		}
		return ""
	}
	var missing []string
	if server = find("temporal-server"); server == "" {
		missing = append(missing, "temporal-server (go build -o $(go env GOPATH)/bin/temporal-server go.temporal.io/server/cmd/server)")
	}
	if sqlTool = find("temporal-sql-tool"); sqlTool == "" {
		missing = append(missing, "temporal-sql-tool (go build -o $(go env GOPATH)/bin/temporal-sql-tool go.temporal.io/server/cmd/tools/sql)")
	}
	if dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb"); len(dirs) > 0 {
		pgBin = filepath.Dir(dirs[len(dirs)-1])
	} else {
		missing = append(missing, "PostgreSQL (apt-get install postgresql)")
	}
	if len(missing) > 0 {
		return "", "", "", fmt.Errorf("pgtemporal: missing %s; .ci/setup test installs them all", strings.Join(missing, ", "))
	}
	return server, sqlTool, pgBin, nil
}

// Start starts PostgreSQL, sets up the schemas, starts the server and
// registers the namespace and search attributes. It returns once a client
// can start workflows in the namespace.
func Start(ctx context.Context, o Options) (_ *Server, err error) {
	if o.Dir == "" {
		return nil, errors.New("pgtemporal: Options.Dir is required")
	}
	if o.IP == "" {
		o.IP = "127.0.0.1"
	}
	if o.Namespace == "" {
		o.Namespace = "default"
	}
	bin, sqlTool, pgBin, err := Binaries()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, err
	}
	s := &Server{o: o, bin: bin, confDir: filepath.Join(o.Dir, "config")}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	if err := s.startPostgres(ctx, pgBin); err != nil {
		return nil, err
	}
	if err := s.setupSchemas(ctx, sqlTool); err != nil {
		return nil, err
	}
	// A server that exits while it comes up (one of its ten ports taken
	// between our check and its bind, by a process beside it) is started
	// again on fresh ports, twice at most.
	for try := 1; ; try++ {
		if err := s.writeConfig(); err != nil {
			return nil, err
		}
		err := s.Start(ctx)
		if err == nil {
			break
		}
		if try == 3 || !errors.Is(err, errExited) {
			return nil, err
		}
	}
	if err := s.registerNamespace(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// run runs a command, its output in the error.
func run(ctx context.Context, cmd *exec.Cmd) error {
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w: %s", strings.Join(cmd.Args, " "), err, strings.TrimSpace(out.String()))
	}
	return ctx.Err()
}

// asPostgres makes cmd run as the postgres user when this process is root
// (PostgreSQL refuses to run as root) and chowns dirs to it.
func asPostgres(cmd *exec.Cmd, dirs ...string) error {
	if os.Geteuid() != 0 {
		return nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return fmt.Errorf("pgtemporal: PostgreSQL cannot run as root and there is no postgres user: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	for _, d := range dirs {
		if err := os.Chown(d, uid, gid); err != nil {
			return err
		}
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	return nil
}

func (s *Server) startPostgres(ctx context.Context, pgBin string) error {
	// The cluster lives in a directory of its own under the system's
	// temporary directory: as root, PostgreSQL runs as the postgres user,
	// who cannot enter a test's private directories.
	pgDir, err := os.MkdirTemp("", "pgtemporal-")
	if err != nil {
		return err
	}
	s.pgDir = pgDir
	data, sock := filepath.Join(pgDir, "data"), filepath.Join(pgDir, "sock")
	for _, d := range []string{data, sock} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	initdb := exec.CommandContext(ctx, filepath.Join(pgBin, "initdb"), "-D", data, "-U", "temporal", "--auth=trust", "-E", "UTF8", "--no-sync")
	if err := asPostgres(initdb, pgDir, data, sock); err != nil {
		return err
	}
	if err := run(ctx, initdb); err != nil {
		return fmt.Errorf("pgtemporal: initdb: %w", err)
	}
	port, err := freeport.PickIn(s.o.IP, portLow, portHigh)
	if err != nil {
		return fmt.Errorf("pgtemporal: %w", err)
	}
	s.pgPort = port
	// A test database: durability off, as the compose file's volume would
	// not be either on a laptop.
	pg := exec.Command(filepath.Join(pgBin, "postgres"), "-D", data, "-p", strconv.Itoa(port), "-k", sock,
		"-h", s.o.IP, "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
		"-c", "max_connections=200")
	if err := asPostgres(pg); err != nil {
		return err
	}
	log, err := os.Create(filepath.Join(s.o.Dir, "postgres.log"))
	if err != nil {
		return err
	}
	pg.Stdout, pg.Stderr = log, log
	if pg.SysProcAttr == nil {
		pg.SysProcAttr = &syscall.SysProcAttr{}
	}
	pg.SysProcAttr.Setpgid = true
	if err := pg.Start(); err != nil {
		log.Close()
		return fmt.Errorf("pgtemporal: postgres: %w", err)
	}
	s.pg, s.pgDone = pg, make(chan struct{})
	go func() { _ = pg.Wait(); log.Close(); close(s.pgDone) }()
	if err := waitTCP(ctx, net.JoinHostPort(s.o.IP, strconv.Itoa(port)), s.pgDone, 30*time.Second); err != nil {
		return fmt.Errorf("pgtemporal: postgres did not listen (log %s): %w", log.Name(), err)
	}
	return nil
}

func (s *Server) setupSchemas(ctx context.Context, sqlTool string) error {
	for _, db := range []struct{ name, schema string }{
		{"temporal", "postgresql/v12/temporal"},
		{"temporal_visibility", "postgresql/v12/visibility"},
	} {
		base := []string{"--plugin", "postgres12", "--ep", s.o.IP, "-p", strconv.Itoa(s.pgPort),
			"-u", "temporal", "-pw", "temporal", "--db", db.name}
		for _, args := range [][]string{
			{"create-database"},
			{"setup-schema", "-v", "0.0"},
			{"update-schema", "--schema-name", db.schema},
		} {
			// Retried: PostgreSQL may accept connections a moment
			// before it accepts logins.
			var err error
			for try := 0; try < 10; try++ {
				if err = run(ctx, exec.CommandContext(ctx, sqlTool, append(base, args...)...)); err == nil || ctx.Err() != nil {
					break
				}
				time.Sleep(300 * time.Millisecond)
			}
			if err != nil {
				return fmt.Errorf("pgtemporal: schema: %w", err)
			}
		}
	}
	return nil
}

func (s *Server) writeConfig() error {
	// Membership ports go into a smallint column of the cluster's
	// membership table: below 32768, so not the kernel's ephemeral ones.
	ports := make([]int, 10)
	taken := []int{s.pgPort}
	for i := range ports {
		p, err := freeport.PickIn(s.o.IP, portLow, portHigh, taken...)
		if err != nil {
			return fmt.Errorf("pgtemporal: %w", err)
		}
		ports[i] = p
		taken = append(taken, p)
	}
	s.Address = net.JoinHostPort(s.o.IP, strconv.Itoa(ports[0]))
	ip, pg := s.o.IP, net.JoinHostPort(s.o.IP, strconv.Itoa(s.pgPort))
	store := func(name string, conns int) string {
		return fmt.Sprintf(`    %s:
      sql:
        pluginName: postgres12
        databaseName: %s
        connectAddr: %q
        connectProtocol: tcp
        user: temporal
        password: temporal
        maxConns: %d
        maxIdleConns: %d
        maxConnLifetime: 1h
`, name, name, pg, conns, conns)
	}
	service := func(name string, grpc, membership int, extra string) string {
		return fmt.Sprintf("  %s:\n    rpc:\n      grpcPort: %d\n      membershipPort: %d\n      bindOnIP: %q\n%s", name, grpc, membership, ip, extra)
	}
	conf := "log:\n  stdout: true\n  level: warn\n\npersistence:\n  defaultStore: temporal\n  visibilityStore: temporal_visibility\n  numHistoryShards: 4\n  datastores:\n" +
		store("temporal", 20) + store("temporal_visibility", 10) +
		fmt.Sprintf("\nglobal:\n  membership:\n    maxJoinDuration: 30s\n    broadcastAddress: %q\n  metrics:\n    prometheus:\n      framework: tally\n      timerType: histogram\n      listenAddress: %q\n",
			ip, net.JoinHostPort(ip, strconv.Itoa(ports[8]))) +
		"\nservices:\n" +
		service("frontend", ports[0], ports[1], fmt.Sprintf("      httpPort: %d\n", ports[7])) +
		service("matching", ports[2], ports[3], "") +
		service("history", ports[4], ports[5], "") +
		service("worker", ports[6], ports[9], "") +
		fmt.Sprintf(`
clusterMetadata:
  enableGlobalNamespace: false
  failoverVersionIncrement: 10
  masterClusterName: active
  currentClusterName: active
  clusterInformation:
    active:
      enabled: true
      initialFailoverVersion: 1
      rpcName: frontend
      rpcAddress: %q

dcRedirectionPolicy:
  policy: noop

dynamicConfigClient:
  filepath: %q
  pollInterval: 10s
`, s.Address, filepath.Join(s.confDir, "dynamicconfig.yaml"))
	var dc strings.Builder
	for k, v := range s.o.DynamicConfig {
		fmt.Fprintf(&dc, "%s:\n  - value: %v\n", k, v)
	}
	if err := os.MkdirAll(s.confDir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(s.confDir, "production.yaml"), []byte(conf), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(s.confDir, "dynamicconfig.yaml"), []byte(dc.String()), 0o644)
}

// Start starts the server process (again, after Stop) and waits until its
// frontend answers.
func (s *Server) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv != nil {
		return errors.New("pgtemporal: the server is running")
	}
	log, err := os.OpenFile(filepath.Join(s.o.Dir, "temporal-server.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(s.bin, "--root", s.o.Dir, "--config", "config", "--env", "production", "--allow-no-auth", "start")
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("pgtemporal: temporal-server: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); log.Close(); close(done) }()
	s.srv, s.srvDone = cmd, done
	if err := s.waitHealthy(ctx, done); err != nil {
		if errors.Is(err, errExited) {
			s.srv = nil
		}
		return fmt.Errorf("pgtemporal: temporal-server did not start (log %s): %w; the log ends:\n%s", log.Name(), err, s.LogTail(3000))
	}
	return nil
}

var errExited = errors.New("the process exited")

// waitHealthy waits until the frontend answers a system-info call.
func (s *Server) waitHealthy(ctx context.Context, done chan struct{}) error {
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	var last error
	for {
		c, err := client.NewLazyClient(client.Options{HostPort: s.Address, Namespace: "temporal-system", Logger: quiet{}})
		if err == nil {
			cctx, ccancel := context.WithTimeout(ctx, 3*time.Second)
			_, err = c.WorkflowService().GetSystemInfo(cctx, &workflowservice.GetSystemInfoRequest{})
			ccancel()
			c.Close()
			if err == nil {
				return nil
			}
		}
		last = err
		select {
		case <-done:
			return errExited
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// registerNamespace registers the namespace and adds the search attributes,
// then waits until the frontend knows both (its namespace cache refreshes
// every few seconds).
func (s *Server) registerNamespace(ctx context.Context) error {
	c, err := client.Dial(client.Options{HostPort: s.Address, Namespace: s.o.Namespace, Logger: quiet{}})
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	_, err = c.WorkflowService().RegisterNamespace(ctx, &workflowservice.RegisterNamespaceRequest{
		Namespace: s.o.Namespace, WorkflowExecutionRetentionPeriod: durationpb.New(24 * time.Hour)})
	if err != nil && !strings.Contains(err.Error(), "already") {
		return fmt.Errorf("pgtemporal: register namespace %s: %w", s.o.Namespace, err)
	}
	// AddSearchAttributes fails until the namespace is in the cache.
	if len(s.o.SearchAttributes) > 0 {
		err = retry(ctx, 500*time.Millisecond, func() error {
			_, err := c.OperatorService().AddSearchAttributes(ctx, &operatorservice.AddSearchAttributesRequest{
				Namespace: s.o.Namespace, SearchAttributes: s.o.SearchAttributes})
			if err != nil && strings.Contains(err.Error(), "already") {
				return nil
			}
			return err
		})
		if err != nil {
			return fmt.Errorf("pgtemporal: add search attributes: %w", err)
		}
	}
	err = retry(ctx, 500*time.Millisecond, func() error {
		_, err := c.WorkflowService().ListWorkflowExecutions(ctx, &workflowservice.ListWorkflowExecutionsRequest{Namespace: s.o.Namespace, PageSize: 1})
		return err
	})
	if err != nil {
		return fmt.Errorf("pgtemporal: namespace %s: %w", s.o.Namespace, err)
	}
	return nil
}

// retry calls f every `every` until it returns nil or ctx ends (then the
// last error).
func retry(ctx context.Context, every time.Duration, f func() error) error {
	for {
		err := f()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(every):
		}
	}
}

// Stop stops the server process (SIGTERM, then SIGKILL after 10 s);
// PostgreSQL and the server's state stay.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv == nil {
		return
	}
	stopGroup(s.srv, s.srvDone, 10*time.Second)
	s.srv = nil
}

// Kill kills the server process at once (SIGKILL): a crash.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv == nil {
		return
	}
	_ = syscall.Kill(-s.srv.Process.Pid, syscall.SIGKILL)
	<-s.srvDone
	s.srv = nil
}

// Close stops the server and PostgreSQL and removes their files.
func (s *Server) Close() {
	s.Stop()
	if s.pg != nil {
		stopGroup(s.pg, s.pgDone, 10*time.Second)
		s.pg = nil
	}
	if s.pgDir != "" {
		_ = os.RemoveAll(s.pgDir)
	}
	_ = os.RemoveAll(s.confDir)
}

// Dir is Options.Dir.
func (s *Server) Dir() string { return s.o.Dir }

// PIDs are the process IDs of temporal-server (0 while stopped) and of
// PostgreSQL's postmaster, whose children are its backends: for a
// benchmark's processor seconds (bench/scale).
func (s *Server) PIDs() (server, postgres int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv != nil {
		server = s.srv.Process.Pid
	}
	if s.pg != nil {
		postgres = s.pg.Process.Pid
	}
	return server, postgres
}

// LogTail is the end of the server's log, for a test's failure message.
func (s *Server) LogTail(n int) string {
	b, _ := os.ReadFile(filepath.Join(s.o.Dir, "temporal-server.log"))
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

func stopGroup(cmd *exec.Cmd, done chan struct{}, grace time.Duration) {
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(grace):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
}

func waitTCP(ctx context.Context, addr string, done chan struct{}, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		select {
		case <-done:
			return errors.New("the process exited")
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Ports of the server and its PostgreSQL: below 32768 (the server's
// membership ports go into a smallint column), and below freeport.Pick's
// range, which the dev servers of tests running beside this one take.
const portLow, portHigh = 10000, 19999

// quiet drops the SDK's log lines while the server comes up.
type quiet struct{}

func (quiet) Debug(string, ...any) {}
func (quiet) Info(string, ...any)  {}
func (quiet) Warn(string, ...any)  {}
func (quiet) Error(string, ...any) {}
