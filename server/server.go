// Package server runs opledger's HTTP server: the API of package httpapi,
// health and metrics endpoints, the operator console at /, and the background loops that keep the
// ledger moving (lease expiry, retention), with a graceful shutdown that
// loses no acknowledged write.
//
// Allowed imports: opledger and its public packages, internal/periodic,
// internal/configfile, the standard library, a YAML decoder.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/console"
	"github.com/opledger/opledger/destination"
	"github.com/opledger/opledger/executor"
	"github.com/opledger/opledger/httpapi"
	"github.com/opledger/opledger/internal/periodic"
	"github.com/opledger/opledger/reconciler"
)

// Config configures a server. Zero values take the documented defaults;
// negative durations and counts are refused by New (and CheckConfig).
type Config struct {
	// Addr is the listen address. Default 127.0.0.1:8080.
	Addr string
	// Listener, when set, is served instead of listening on Addr: a
	// caller that had to know the address is free before doing other
	// work listens itself and hands the listener over. Run closes it, and
	// so does New when it fails after CheckConfig.
	Listener net.Listener
	// Logger receives request and lifecycle logs. Default slog.Default().
	Logger *slog.Logger
	// API tunes the API handler (body and JSON limits). Auth is filled in
	// from the ledger's tokens.
	API httpapi.Options
	// SweepInterval is how often expired leases are settled, workflows
	// advanced and the reconciler's queue examined. 0 means 5 s;
	// negative is refused.
	SweepInterval time.Duration
	// CompactInterval is how often retention runs. 0 means
	// opledger.DefaultCompactInterval (1 h); negative is refused.
	CompactInterval time.Duration
	// Destinations, when set, are executed by a worker pool (the executor)
	// and their uncertain operations reconciled by the reconciler. Open the
	// ledger with Options.DestinationRetryPolicies from the same set.
	// A destination that bounds its calls itself (an HTTP destination's
	// timeout) must bound them below the executor's call limit, two
	// thirds of Lease: see executor.CheckConfig.
	Destinations *destination.Set
	// Settings are the server's settings that every process sharing the
	// store must have too, such as the files it read, by name: it
	// announces a digest of each (opledger.MaintainOptions.Settings), and
	// logs a warning when another process's differs. FileConfig's
	// SharedSettings gives those of a configuration file.
	Settings map[string]string
	// Workers is the executor's pool size. 0 means 4; negative is
	// refused.
	Workers int
	// Lease is how long the executor's claims hold. 0 means 30 s;
	// negative is refused.
	Lease time.Duration
	// SampleInterval is how often the console's chart samples the
	// counters. 0 means 1 min; negative is refused. A sample the store
	// has not answered within the interval (at least 5 s) is given up
	// as store_busy, logged by the outage rule.
	SampleInterval time.Duration
	// SecureCookie marks the console's session cookie Secure (behind HTTPS).
	SecureCookie bool
	// ShutdownTimeout bounds the wait for in-flight requests after a stop
	// signal. 0 means 30 s; negative is refused.
	ShutdownTimeout time.Duration
	// ReadHeaderTimeout, ReadTimeout, WriteTimeout and IdleTimeout bound
	// each connection. 0 means 10 s, 30 s, 60 s, 120 s respectively;
	// negative is refused.
	ReadHeaderTimeout, ReadTimeout, WriteTimeout, IdleTimeout time.Duration
}

// CheckConfig reports the first problem New would find with cfg before it
// listens, without a ledger, so that a command can refuse a configuration
// before it opens (and perhaps creates) the store: a negative duration or
// count, and, with destinations, what executor.CheckConfig refuses (a
// destination timeout not shorter than the executor's call limit).
func CheckConfig(cfg Config) error {
	// 0 is "not set" and takes the default; a negative value is a
	// mistake, never silently replaced.
	if cfg.Workers < 0 {
		return fmt.Errorf("server: Workers is %d: it must be positive (0 means the default, 4)", cfg.Workers)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
		def  time.Duration
	}{
		{"SweepInterval", cfg.SweepInterval, defaultSweepInterval},
		{"CompactInterval", cfg.CompactInterval, opledger.DefaultCompactInterval},
		{"Lease", cfg.Lease, defaultLease},
		{"SampleInterval", cfg.SampleInterval, defaultSampleInterval},
		{"ShutdownTimeout", cfg.ShutdownTimeout, defaultShutdownTimeout},
		{"ReadHeaderTimeout", cfg.ReadHeaderTimeout, defaultReadHeaderTimeout},
		{"ReadTimeout", cfg.ReadTimeout, defaultReadTimeout},
		{"WriteTimeout", cfg.WriteTimeout, defaultWriteTimeout},
		{"IdleTimeout", cfg.IdleTimeout, defaultIdleTimeout},
	} {
		if d.v < 0 {
			return fmt.Errorf("server: %s is %s: it must be positive (0 means the default, %s)", d.name, d.v, d.def)
		}
	}
	if cfg.Destinations != nil && cfg.Destinations.Len() > 0 {
		return executor.CheckConfig(cfg.executorConfig())
	}
	return nil
}

// Defaults of Config.
const (
	defaultSweepInterval     = 5 * time.Second
	defaultLease             = 30 * time.Second
	defaultSampleInterval    = time.Minute
	defaultShutdownTimeout   = 30 * time.Second
	defaultReadHeaderTimeout = 10 * time.Second
	defaultReadTimeout       = 30 * time.Second
	defaultWriteTimeout      = 60 * time.Second
	defaultIdleTimeout       = 120 * time.Second
)

// executorConfig is the configuration of the server's executor. The
// server settles expired leases itself (SweepInterval -1).
func (c *Config) executorConfig() executor.Config {
	return executor.Config{Destinations: c.Destinations, Workers: c.Workers, Lease: c.Lease, SweepInterval: -1, Logger: c.Logger}
}

func (c *Config) defaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	if c.Addr == "" {
		c.Addr = "127.0.0.1:8080"
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	def(&c.SweepInterval, defaultSweepInterval)
	def(&c.CompactInterval, opledger.DefaultCompactInterval)
	def(&c.SampleInterval, defaultSampleInterval)
	def(&c.ShutdownTimeout, defaultShutdownTimeout)
	def(&c.ReadHeaderTimeout, defaultReadHeaderTimeout)
	def(&c.ReadTimeout, defaultReadTimeout)
	def(&c.WriteTimeout, defaultWriteTimeout)
	def(&c.IdleTimeout, defaultIdleTimeout)
}

// Server is a running opledger server.
type Server struct {
	console    *console.Console
	executor   *executor.Executor
	reconciler *reconciler.Reconciler
	cfg        Config
	ledger     *opledger.Ledger
	http       *http.Server
	listener   net.Listener
}

// New listens on cfg.Addr (or takes cfg.Listener) and prepares the
// server; Run serves. It refuses what CheckConfig refuses, before it
// listens (a cfg.Listener is then left open: it is the caller's); when it
// fails after that, the listener is closed, a cfg.Listener too.
func New(l *opledger.Ledger, cfg Config) (srv *Server, err error) {
	if err := CheckConfig(cfg); err != nil {
		return nil, err
	}
	ln := cfg.Listener
	var con *console.Console
	defer func() {
		if err != nil {
			if ln != nil {
				ln.Close()
			}
			if con != nil {
				con.Close()
			}
		}
	}()
	cfg.defaults()
	cfg.API.Auth = l
	if cfg.Destinations != nil {
		cfg.API.Destinations = cfg.Destinations.Names()
	}
	if cfg.API.Logger == nil {
		cfg.API.Logger = cfg.Logger
	}
	var exec *executor.Executor
	var rec *reconciler.Reconciler
	if cfg.Destinations != nil && cfg.Destinations.Len() > 0 {
		// The server settles expired leases itself.
		if exec, err = executor.New(l, cfg.executorConfig()); err != nil {
			return nil, err
		}
		if rec, err = reconciler.New(l, reconciler.Config{Destinations: cfg.Destinations, Interval: cfg.SweepInterval,
			Logger: cfg.Logger}); err != nil {
			return nil, err
		}
		cfg.API.AbandonedCalls = exec.AbandonedCalls
		cfg.API.AbandonedLookups = rec.AbandonedLookups
	}
	api, err := httpapi.New(l, cfg.API)
	if err != nil {
		return nil, err
	}
	// The console tells an uncertain operation that this server's
	// reconciler examines from one it never will: a destination the
	// server does not configure, one that serves other tenants, any when
	// it runs no reconciler.
	reconciled := func(tenant, name string) bool {
		if rec == nil {
			return false
		}
		d, ok := cfg.Destinations.Get(name)
		return ok && destination.Serves(d, tenant)
	}
	con, err = console.New(l, console.Options{Logger: cfg.Logger, SecureCookie: cfg.SecureCookie, Reconciled: reconciled})
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	for _, p := range []string{"/v1/", "/healthz", "/readyz", "/metrics"} {
		mux.Handle(p, api)
	}
	mux.Handle("/", con)
	if ln == nil {
		if ln, err = net.Listen("tcp", cfg.Addr); err != nil {
			return nil, fmt.Errorf("listen on %s: %w", cfg.Addr, err)
		}
	}
	hs := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		ReadTimeout:       cfg.ReadTimeout,
		WriteTimeout:      cfg.WriteTimeout,
		IdleTimeout:       cfg.IdleTimeout,
		ErrorLog:          slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelWarn),
	}
	srv = &Server{cfg: cfg, ledger: l, http: hs, listener: ln, console: con}
	srv.executor, srv.reconciler = exec, rec
	return srv, nil
}

// Addr is the address the server listens on (useful with port 0).
func (s *Server) Addr() string { return s.listener.Addr().String() }

// URL is the server's base URL.
func (s *Server) URL() string { return "http://" + s.Addr() }

// Run serves until ctx is cancelled, then shuts down: it stops accepting
// connections, lets in-flight requests finish (each write is committed
// before its response is sent, so every acknowledged write is durable),
// stops the background loops and returns. The listener is closed when
// Run returns, whatever it returns.
func (s *Server) Run(ctx context.Context) error {
	log := s.cfg.Logger
	loops, stopLoops := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		periodic.Run(loops, s.cfg.SampleInterval, log, "sample counters", periodic.Bounded(periodic.TurnBound(s.cfg.SampleInterval), s.console.Sample))
	}()
	if s.reconciler != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.reconciler.Run(loops); err != nil && loops.Err() == nil {
				log.Error("reconciler stopped", "error", err)
			}
		}()
	}
	if s.executor != nil {
		if err := s.executor.Start(loops); err != nil {
			// Nothing is served: the listener, Run's to close as on
			// every return, and the console go too.
			stopLoops()
			wg.Wait()
			return errors.Join(err, s.closeListener(), s.console.Close())
		}
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.ledger.Maintain(loops, opledger.MaintainOptions{LeaseSweep: s.cfg.SweepInterval, WorkflowSweep: s.cfg.SweepInterval,
			CompactInterval: s.cfg.CompactInterval, Settings: s.cfg.Settings, Logger: log})
	}()

	served := make(chan error, 1)
	go func() { served <- s.http.Serve(s.listener) }()
	log.Info("serving", "url", s.URL(), "store", s.ledger.StoreName(), "executor", s.executor != nil, "reconciler", s.reconciler != nil)
	if s.reconciler == nil {
		// Said once, at start: nothing here settles an uncertain
		// operation, whatever a page says a reconciler does.
		log.Warn("no destinations configured: this server runs no executor and no reconciler; operations wait for workers calling the API, " +
			"and an uncertain one for a reconciler of another process or a person's decision (opledger serve --config)")
	}

	// The executor stops as soon as the server does — it claims nothing
	// more, gives back claims not yet dispatched and lets calls in flight
	// end — while in-flight requests finish, both within the shutdown
	// timeout.
	stopExecutor := func(sctx context.Context) error {
		if s.executor == nil {
			return nil
		}
		return s.executor.Stop(sctx)
	}
	var err error
	select {
	case err = <-served:
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.ShutdownTimeout)
		err = errors.Join(err, stopExecutor(sctx))
		cancel()
	case <-ctx.Done():
		log.Info("shutting down: finishing in-flight requests")
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.ShutdownTimeout)
		stopped := make(chan error, 1)
		go func() { stopped <- stopExecutor(sctx) }()
		err = s.http.Shutdown(sctx)
		if errors.Is(err, context.DeadlineExceeded) {
			_ = s.http.Close() // the callers still waiting are cut off
			err = fmt.Errorf("API requests were still in flight when the shutdown timeout (%s) ended, and were cut off: an operation whose outcome a cut-off request did not record stays in_progress until its lease ends, then becomes uncertain (pending if it was never dispatched)", s.cfg.ShutdownTimeout)
		}
		<-served
		err = errors.Join(err, <-stopped) // the executor's own says what it cancelled
		cancel()
	}
	stopLoops()
	wg.Wait()
	err = errors.Join(err, s.console.Close())
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	log.Info("stopped")
	return err
}

// closeListener closes the server's listener, which http.Server.Serve
// closes when it is served: an error of one closed already is none.
func (s *Server) closeListener() error {
	if err := s.listener.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
		return err
	}
	return nil
}
