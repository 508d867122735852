package app

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"github.com/google/uuid"
	"github.com/temporalio/cli/temporalcli/devserver"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/worker"

	"github.com/tempotrain/tempotrain/api"
	"github.com/tempotrain/tempotrain/internal/freeport"
)

// SearchAttributeTypes maps api's search attribute types to Temporal's.
var SearchAttributeTypes = map[api.SearchAttributeType]enumspb.IndexedValueType{
	api.SAKeyword: enumspb.INDEXED_VALUE_TYPE_KEYWORD,
	api.SAInt:     enumspb.INDEXED_VALUE_TYPE_INT,
	api.SADouble:  enumspb.INDEXED_VALUE_TYPE_DOUBLE,
}

// TemporalSearchAttributes is api.SearchAttributes and
// api.TuneSearchAttributes with Temporal's types: what a server registers
// for Fit and Tune (the dev server here, a test's production server,
// `temporal operator search-attribute create`).
func TemporalSearchAttributes() map[string]enumspb.IndexedValueType {
	m := make(map[string]enumspb.IndexedValueType, len(api.SearchAttributes)+len(api.TuneSearchAttributes))
	for name, typ := range api.SearchAttributes {
		m[name] = SearchAttributeTypes[typ]
	}
	for name, typ := range api.TuneSearchAttributes {
		m[name] = SearchAttributeTypes[typ]
	}
	return m
}

// DevServerOptions configure StartDevServer. The zero value starts a headless, in-memory server
// on a free loopback port.
type DevServerOptions struct {
	// IP to listen on. Default 127.0.0.1.
	IP string
	// Port is the gRPC frontend port. Default: a free port.
	Port int
	// UIPort is the Web UI port. 0 means no UI.
	UIPort int
	// DatabaseFile is the SQLite file. Empty means in memory (lost at exit).
	DatabaseFile string
	// Namespace to create besides "default". Optional.
	Namespace string
	// Logger for the server; default discards everything below Error.
	Logger *slog.Logger
}

// Server is a running in-process Temporal server.
type Server struct {
	srv *devserver.Server
	// Address is host:port of the frontend, for client.Dial.
	Address string
	// UIURL is the Web UI address, empty when the UI is off.
	UIURL string
}

// StartDevServer starts a real Temporal server (the Temporal CLI's dev
// server: server v1.29, SQLite persistence, optional Web UI) in this process
// and returns once its frontend accepts connections.
func StartDevServer(o DevServerOptions) (*Server, error) {
	if o.IP == "" {
		o.IP = "127.0.0.1"
	}
	if o.Port == 0 {
		p, err := freeport.Pick(o.IP)
		if err != nil {
			return nil, fmt.Errorf("app: dev server: %w", err)
		}
		o.Port = p
	} else if err := devserver.CheckPortFree(o.IP, o.Port); err != nil {
		return nil, fmt.Errorf("app: dev server: frontend port %d: %w", o.Port, err)
	}
	if o.UIPort != 0 {
		if err := devserver.CheckPortFree(o.IP, o.UIPort); err != nil {
			return nil, fmt.Errorf("app: dev server: UI port %d: %w", o.UIPort, err)
		}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	}
	if o.DatabaseFile != "" {
		if err := os.MkdirAll(filepath.Dir(o.DatabaseFile), 0o755); err != nil {
			return nil, fmt.Errorf("app: dev server: database dir: %w", err)
		}
	}
	metricsPort, err := freeport.Pick(o.IP)
	if err != nil {
		return nil, fmt.Errorf("app: dev server: %w", err)
	}
	namespaces := []string{"default"}
	if o.Namespace != "" && o.Namespace != "default" {
		namespaces = append(namespaces, o.Namespace)
	}
	opts := devserver.StartOptions{
		FrontendIP:             o.IP,
		FrontendPort:           o.Port,
		Namespaces:             namespaces,
		ClusterID:              uuid.NewString(),
		MasterClusterName:      "active",
		CurrentClusterName:     "active",
		InitialFailoverVersion: 1,
		Logger:                 o.Logger,
		LogLevel:               slog.LevelError,
		DatabaseFile:           o.DatabaseFile,
		MetricsPort:            metricsPort,
		// Fit's search attributes (api.SearchAttributes), registered in
		// every namespace.
		SearchAttributes: TemporalSearchAttributes(),
		DynamicConfigValues: map[string]any{
			"system.forceSearchAttributesCacheRefreshOnRead": true,
			"frontend.persistenceMaxQPS":                     10000,
			"history.persistenceMaxQPS":                      45000,
		},
	}
	if o.UIPort != 0 {
		opts.UIIP, opts.UIPort = o.IP, o.UIPort
	}
	setBinaryChecksum()
	srv, err := devserver.Start(opts)
	if err != nil {
		return nil, fmt.Errorf("app: dev server: start: %w", err)
	}
	s := &Server{srv: srv, Address: net.JoinHostPort(o.IP, strconv.Itoa(o.Port))}
	if o.UIPort != 0 {
		s.UIURL = "http://" + net.JoinHostPort(o.IP, strconv.Itoa(o.UIPort))
	}
	return s, nil
}

// checksumOnce guards setBinaryChecksum.
var checksumOnce sync.Once

// setBinaryChecksum gives the Temporal SDK this process's binary
// identifier (the "binary checksum" its workers record as reset points)
// from the executable's path, size and modification time. Otherwise the
// SDK's first worker (here, one the in-process server starts itself)
// reads the whole executable for its MD5: 0.4 s of processor time and 270
// MB read for a binary holding the server, the kernels and the SDK, at the
// start of every `starter dev` run (bench/e2e). A program that set its own
// checksum before starting the dev server loses it to this one.
func setBinaryChecksum() {
	checksumOnce.Do(func() {
		exe, err := os.Executable()
		if err != nil {
			return
		}
		st, err := os.Stat(exe)
		if err != nil {
			return
		}
		h := sha256.Sum256(fmt.Appendf(nil, "%s\x00%d\x00%d", exe, st.Size(), st.ModTime().UnixNano()))
		worker.SetBinaryChecksum(hex.EncodeToString(h[:16]))
	})
}

// Stop stops the server. Safe to call on a nil Server.
func (s *Server) Stop() {
	if s == nil || s.srv == nil {
		return
	}
	s.srv.Stop()
	s.srv = nil
}
