package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/httpapi"
)

// Run serves the proxy on ln until ctx ends. First it records each
// upstream's key scope in the ledger, or checks it against the recorded
// one, and returns the refusal of a changed one (opledger.ErrKeyScopeChanged,
// with what to do) with nothing served. Meanwhile it runs the
// reconciler over uncertain operations, settles expired leases (a proxy
// that died mid-forward leaves its operation in_progress until then:
// uncertain, never pending, since the request may have been sent) and
// applies retention every CompactInterval. When ctx
// ends it stops accepting connections, lets in-flight requests finish and
// record their outcome for up to shutdownTimeout (0 means 30 s; a negative
// one is refused before anything is served), stops the background loops
// and returns nil; an error that says so when requests were still in
// flight at the end of shutdownTimeout.
func (p *Proxy) Run(ctx context.Context, ln net.Listener, shutdownTimeout time.Duration) error {
	if shutdownTimeout < 0 {
		_ = ln.Close() // as Serve would on return
		return fmt.Errorf("proxy: the shutdown timeout is %s: it must be positive (0 means the default, 30s)", shutdownTimeout)
	}
	if shutdownTimeout == 0 {
		shutdownTimeout = 30 * time.Second
	}
	// Before anything is served: an upstream whose keys would be derived
	// otherwise than its operations' stops the start.
	if err := p.pinKeyScopes(ctx); err != nil {
		_ = ln.Close()
		return err
	}
	loops, stopLoops := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		if err := p.reconciler.Run(loops); err != nil && loops.Err() == nil {
			p.log.Error("reconciler stopped", "error", err)
		}
	}()
	// The proxy records operations for its upstreams only: it is
	// compared with the other processes on their settings alone.
	destinations := p.destinations()
	go func() {
		defer wg.Done()
		p.ledger.Maintain(loops, opledger.MaintainOptions{LeaseSweep: p.cfg.ReconcileInterval, CompactInterval: p.cfg.CompactInterval,
			Destinations: destinations, Logger: p.log})
	}()
	hs := &http.Server{
		Handler:           p,
		ConnContext:       ConnContext,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(p.cfg.Logger.Handler(), slog.LevelWarn),
	}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	p.log.Info("proxying", "url", "http://"+ln.Addr().String(), "upstreams", len(p.routes), "store", p.ledger.StoreName())

	var err error
	select {
	case err = <-served:
	case <-ctx.Done():
		p.log.Info("shutting down: finishing in-flight requests")
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
		err = hs.Shutdown(sctx)
		cancel()
		if errors.Is(err, context.DeadlineExceeded) {
			_ = hs.Close() // the callers still waiting are cut off
			err = fmt.Errorf("proxy: requests were still in flight when the shutdown timeout (%s) ended: each operation whose answer was not recorded stays in_progress until its lease ends (the upstream's timeout plus a minute), then becomes uncertain for the reconciler", shutdownTimeout)
		}
		<-served
	}
	stopLoops()
	wg.Wait()
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	p.log.Info("stopped")
	return err
}

// AdminHandler serves the proxy's ledger to probes and scrapers, for an
// address of its own (every path on the proxy's address is the
// upstream's): GET /healthz, GET /readyz and GET /metrics, answered as
// opledger serve answers them (docs/operations.md), with the attempt
// series of the proxy's upstreams from 0. Any other request gets 404.
// None of them needs a token: serve it on a private address.
func (p *Proxy) AdminHandler() (http.Handler, error) {
	api, err := httpapi.New(p.ledger, httpapi.Options{Auth: p.ledger, Logger: p.log, Destinations: p.destinations(),
		AbandonedLookups: p.reconciler.AbandonedLookups})
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	for _, route := range adminRoutes {
		mux.Handle("GET "+route, api)
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, r, http.StatusNotFound, "not_found",
			"this address serves GET "+strings.Join(adminRoutes, ", ")+" only; the proxy itself listens on its own address", nil)
	})
	return mux, nil
}

// adminRoutes are the paths AdminHandler serves.
var adminRoutes = []string{"/healthz", "/readyz", "/metrics"}

// destinations are the ledger destinations of the proxy's upstreams.
func (p *Proxy) destinations() []string {
	names := make([]string, len(p.routes))
	for i, rt := range p.routes {
		names[i] = destinationName(rt.Name)
	}
	return names
}
