package cli

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/destination"
	"github.com/opledger/opledger/proxy"
)

// MinReconcileInterval is the shortest --reconcile-interval taken, as
// MinSweepInterval is serve's --sweep-interval: each pass reads the
// store for expired leases and uncertain operations, and a shorter
// interval would keep the store busy with passes and little else.
const MinReconcileInterval = MinSweepInterval

func newProxyCmd() *cobra.Command {
	var (
		dsn, listen, admin, upstream, name, owner, configPath, level string
		logJSON                                                      bool
		maxBody                                                      int64
		timeout, reconcileEvery, shutdown                            time.Duration
		lf                                                           ledgerFlags
		acceptScopeChange                                            []string
	)
	cmd := &cobra.Command{
		Use:   "proxy",
		Short: "Run the Idempotency-Key proxy in front of an HTTP API",
		Long: `proxy protects an API that has no idempotency support, without changing the
automation that calls it. Every POST and PATCH must carry an Idempotency-Key
header (IETF draft-ietf-httpapi-idempotency-key-header). The first request is
recorded in the ledger, forwarded once and its answer saved; a repeat with the
same key and request gets the saved answer with "Idempotent-Replayed: true";
the same key with another method, path or body gets 422; a repeat while the
first is in flight gets 409. A response lost after the request was sent makes
the operation uncertain (502 or 504): the reconciler, running inside the
proxy, applies the upstream's declared lookup or idempotency key, or holds the
operation for a person. Nothing is forwarded twice without such a protection.
Other methods pass straight through.

Keys are scoped per upstream name and per caller credential (a SHA-256 of
the Authorization header); the caller's Authorization reaches the upstream
untouched and is never stored or logged. Proxies that share a store must give
their upstreams different names (--name with --upstream). The tenant and each
upstream's credential_header are recorded with its operations: a start with
another is refused, since every earlier request would get another key, unless
--accept-scope-change names the upstream.

--upstream proxies one API with the defaults; --config names a YAML file with
several upstreams by path prefix and their capabilities (docs/proxy.md).
SIGTERM or Ctrl-C stops accepting connections and lets in-flight requests
finish and record their outcome.`,
		Example: `  opledger proxy --upstream https://crm.example.com/api --db sqlite:proxy.db
  opledger proxy --listen 127.0.0.1:8081 --config proxy.yaml --db postgres://opledger@db:5432/opledger
  curl -X POST -H 'Idempotency-Key: order-17' -d '{"amount":120}' http://127.0.0.1:8081/invoices`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := newLogger(cmd.ErrOrStderr(), logJSON, level)
			if err != nil {
				return err
			}
			if err := positiveFlags(cmd, "max-body-bytes", "timeout", "reconcile-interval", "shutdown-timeout"); err != nil {
				return err
			}
			if timeout < proxy.MinTimeout {
				return usageError{fmt.Errorf("--timeout must be at least %s, got %s", proxy.MinTimeout, timeout)}
			}
			if reconcileEvery < MinReconcileInterval {
				return usageError{fmt.Errorf("--reconcile-interval must be at least %s, got %s", MinReconcileInterval, reconcileEvery)}
			}
			if err := nonEmptyFlags(cmd, "config", "upstream", "owner", "accept-scope-change"); err != nil {
				return err
			}
			var fc proxy.FileConfig
			switch {
			case upstream != "" && configPath != "":
				return usageError{errors.New("give either --upstream or --config, not both")}
			case cmd.Flags().Changed("name") && configPath != "":
				return usageError{errors.New("--name names the --upstream; with --config, name each upstream in the file")}
			case cmd.Flags().Changed("owner") && configPath != "":
				return usageError{errors.New("--owner is the --upstream's; with --config, set owner for each upstream in the file")}
			case cmd.Flags().Changed("timeout") && configPath != "":
				return usageError{errors.New("--timeout is the --upstream's; with --config, set timeout for each upstream in the file")}
			case cmd.Flags().Changed("max-body-bytes") && configPath != "":
				return usageError{errors.New("--max-body-bytes is the --upstream's; with --config, set max_body_bytes for each upstream in the file")}
			case upstream != "":
				if _, err := proxy.ParseUpstreamURL(upstream); err != nil {
					// Said of the flag: proxy.CheckUpstreams would name the
					// upstream, here "upstream" unless --name says otherwise.
					return usageError{fmt.Errorf("--upstream %v, such as https://api.example.com", err)}
				}
				fc.Upstreams = []proxy.Upstream{{Name: name, URL: upstream, MaxBodyBytes: maxBody,
					Timeout: destination.Duration(timeout), Owner: owner}}
				if err := proxy.CheckUpstreams(fc.Upstreams); err != nil {
					return usageError{err} // a bad --upstream, --name or --owner
				}
			case configPath != "":
				c, err := proxy.LoadConfig(configPath)
				if err != nil {
					return err
				}
				fc = *c
			default:
				return usageError{errors.New("--upstream URL or --config FILE is required")}
			}
			// A name no upstream has (a typo) is the command line's
			// mistake, said before the ledger is opened (and perhaps
			// created); proxy.New refuses it too.
			for _, accepted := range acceptScopeChange {
				names := make([]string, len(fc.Upstreams))
				for i, u := range fc.Upstreams {
					names[i] = u.Name
				}
				if !slices.Contains(names, accepted) {
					return usageError{fmt.Errorf("--accept-scope-change names upstream %q, which is not configured (upstreams: %s)", accepted, strings.Join(names, ", "))}
				}
			}
			policies, err := proxy.RetryPolicies(fc.Upstreams)
			if err != nil {
				return err
			}
			opts := opledger.Options{Tenant: fc.Tenant, DestinationRetryPolicies: policies}
			if err := lf.apply(&opts); err != nil {
				return err
			}
			// Listened on before the ledger is opened, which may create it.
			ln, err := listenFirst("listen", listen)
			if err != nil {
				return err
			}
			defer ln.Close() // Run closes it too; once more is harmless
			var adminLn net.Listener
			if cmd.Flags().Changed("admin-listen") {
				if adminLn, err = listenFirst("admin-listen", admin); err != nil {
					return err
				}
				defer adminLn.Close()
			}
			opts.MigrationProgress = logMigrations(log)
			l, err := openLedger(cmd.Context(), dsn, opts, func(msg string) { log.Warn(msg) })
			if err != nil {
				return refusedDB(err)
			}
			defer l.Close()
			p, err := proxy.New(l, proxy.Config{Upstreams: fc.Upstreams, Logger: log, ReconcileInterval: reconcileEvery,
				AcceptScopeChange: acceptScopeChange})
			if err != nil {
				return err
			}
			defer p.Close()
			if adminLn != nil {
				h, err := p.AdminHandler()
				if err != nil {
					return err
				}
				hs := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second,
					ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
				go func() { _ = hs.Serve(adminLn) }()
				// Closed once the proxy has stopped: probes are answered
				// while in-flight requests finish.
				defer hs.Close()
				log.Info("probes and metrics", "url", "http://"+adminLn.Addr().String(), "paths", "/healthz /readyz /metrics")
			}
			return p.Run(cmd.Context(), ln, shutdown)
		},
	}
	addDBFlag(cmd, &dsn)
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:8081", "listen address")
	cmd.Flags().StringVar(&admin, "admin-listen", "", "address for GET /healthz, /readyz and /metrics, without a token (every path on --listen is the upstream's); keep it private. Default: none")
	cmd.Flags().StringVar(&upstream, "upstream", "", "base URL of the one API to protect")
	cmd.Flags().StringVar(&owner, "owner", "", "with --upstream: who decides its held operations (their owner), e.g. a team")
	cmd.Flags().StringVar(&name, "name", proxy.DefaultUpstreamName, "with --upstream: the upstream's name, which scopes its keys; proxies sharing a store need different names, and an upstream with operations must keep its name")
	cmd.Flags().StringVar(&configPath, "config", "", "YAML file with upstreams by path prefix and their capabilities (docs/proxy.md)")
	cmd.Flags().Int64Var(&maxBody, "max-body-bytes", proxy.DefaultMaxBodyBytes, "largest protected request body, in bytes, at least 1 (larger: 413); with --upstream")
	cmd.Flags().DurationVar(&timeout, "timeout", proxy.DefaultTimeout, "how long a forwarded request may wait for the upstream in all (its answer and each part of a large one; the caller's download does not count) before it is uncertain (504), at least 100ms; with --upstream")
	cmd.Flags().StringSliceVar(&acceptScopeChange, "accept-scope-change", nil, "upstream NAME whose tenant or credential_header may differ from the ones recorded with its operations: record the new ones, and take every earlier request of it as new (repeatable)")
	cmd.Flags().DurationVar(&reconcileEvery, "reconcile-interval", 5*time.Second, "how often uncertain operations are reconciled and expired leases settled, at least 100ms")
	lf.add(cmd)
	cmd.Flags().DurationVar(&shutdown, "shutdown-timeout", 30*time.Second, "how long in-flight requests may finish after SIGTERM, more than 0")
	cmd.Flags().BoolVar(&logJSON, "log-json", false, "write logs as JSON lines")
	cmd.Flags().StringVar(&level, "log-level", "info", "debug, info, warn or error")
	return cmd
}
