// Package console is opledger's operator console: server-rendered HTML
// (html/template, files embedded with go:embed) with a few lines of
// progressive JavaScript, served by opledger serve at /.
//
// Sign-in takes an API token and opens a session of its tenant
// (opledger.Ledger.OpenSession) for SessionDuration; the browser keeps the
// session's secret, never the token, in an HttpOnly, SameSite=Strict
// cookie. Signing out closes the session, and so does signing in again
// from the same browser (the new session replaces it); revoking the token
// ends it;
// a form posted after its session ended does nothing, and its answer says
// so and links to signing in again (signing out then clears the cookie
// and goes to the sign-in page, as it does with a live session).
// Every POST carries a CSRF token derived from the session secret, so a
// page on another site can neither read the session nor forge a decision,
// and every POST, sign-in included, must come from the console's own
// origin (net/http.CrossOriginProtection): a page of a sibling subdomain or
// another port cannot post a sign-in into another tenant either. Over
// HTTPS the cookie is SecureCookieName, which browsers take from no page
// without TLS and no other subdomain; over plain HTTP a page of another
// port of the same host could still set a cookie of its own (browsers do
// not keep cookies apart by port), so serve the console over HTTPS or on a
// host of its own. A request with two session cookies is signed out, and
// the notice a decision leaves is signed with the session. Signed-in
// pages are sent with Cache-Control: no-store, so none stays readable
// through the Back button after signing out.
//
// A decision form carries the operation's UpdatedAt as the page showed it;
// the decision is refused (opledger.ErrStaleDecision) when the operation
// has changed since, so a page left open, or one reached with Back, never
// reverses a decision taken meanwhile. The approval form carries it too,
// beside the version and fingerprint it approves: an operation cancelled
// and given a retry awaits approval of the same content again, and a page
// drawn before that is refused.
//
// A session signed in with a token that may not decide (opledger.ReadOnly
// or opledger.Worker) shows every page, its token's access marked in its
// header, and offers no decision: an operation's page says why, and a
// decision or approval posted anyway is refused (403). Signing out and
// the lab, which plays on a scratch ledger of its own, stay open to it.
//
// An operation's or workflow's key holding a "/" (a workflow's step) is
// put in its page's address with the "/" escaped (%2F), as the API takes
// it; typed with the "/" as it is, the address is sent there (303).
// An address the console has no page at, a static file it does not have
// included, is answered 404 with the console's own page (with its navigation when signed in, and a link back
// to the exception queue), one it has no page for the method at 405 with
// Allow, not with net/http's plain text. An event or operation that is
// not there is answered 404 with a link back to the events or operations
// list too.
//
// Allowed imports: opledger, opledger/lab (the lab page), internal/advance
// (a step marked succeeded moves its workflow on), internal/periodic (the
// rule by which a store outage is logged), internal/redact (keys left out
// of logged errors), the standard library.
package console

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/periodic"
	"github.com/opledger/opledger/internal/redact"
	"github.com/opledger/opledger/lab"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// CookieName is the session cookie over plain HTTP. Over HTTPS (a TLS
// listener, or Options.SecureCookie behind a TLS proxy) the cookie is
// SecureCookieName.
const CookieName = "opledger_session"

// SecureCookieName is the session cookie over HTTPS: Secure, and with the
// __Host- prefix, so that browsers refuse it from a plain-HTTP page or
// with a Domain attribute: no page of another subdomain, and none served
// without TLS, can put its own session in the visitor's browser.
const SecureCookieName = "__Host-" + CookieName

// secure reports whether the console's cookies for r are Secure: behind
// HTTPS (Options.SecureCookie) or on a TLS connection.
func (c *Console) secure(r *http.Request) bool { return c.opts.SecureCookie || r.TLS != nil }

// sessionCookie is the name of the session cookie for r.
func (c *Console) sessionCookie(r *http.Request) string {
	if c.secure(r) {
		return SecureCookieName
	}
	return CookieName
}

// SessionDuration is how long a console sign-in lasts.
const SessionDuration = 12 * time.Hour

// Options configure the console.
type Options struct {
	// SecureCookie marks the session cookie Secure (set it behind HTTPS).
	SecureCookie bool
	// Logger receives errors. Default slog.Default().
	Logger *slog.Logger
	// Reconciled reports whether a reconciler of the process serving the
	// console examines the uncertain operations of destination for
	// tenant (looks them up, retries them under a declared protection,
	// or holds them for a person). The page of an uncertain operation
	// says so; for one it reports false, that nothing here will look it
	// up, and that it stays uncertain until a person decides (or a
	// reconciler of another process sharing the store examines it); the
	// exception queue and the operations list mark each such row "no
	// reconciler here: needs a person", and the queue's caption counts
	// them. It is asked of uncertain operations only, once a row: keep
	// it quick. opledger serve (package server) sets it from its
	// destinations: those it configures that serve the tenant, none when
	// it has no destinations and runs no reconciler. Default nil: the console does
	// not know, the page says an uncertain operation waits for a
	// reconciler that serves its destination, or, without one, for a
	// person, and no row is marked.
	Reconciled func(tenant, destination string) bool
}

// Console serves the operator pages.
type Console struct {
	ledger *opledger.Ledger
	opts   Options
	log    *slog.Logger
	pages  map[string]*template.Template
	mux    *http.ServeMux

	// queueLimit bounds the operations of each state the queue shows.
	queueLimit int
	// pageSize is how many operations a page of the operations list
	// shows.
	pageSize int
	// workflowsPageSize is how many workflows a page of the workflows
	// list shows.
	workflowsPageSize int
	// eventsPageSize is how many events a page of the events list shows.
	eventsPageSize int
	// origins refuses POSTs that did not come from the console's own
	// origin.
	origins *http.CrossOriginProtection

	mu      sync.Mutex
	samples map[string][]Sample        // per tenant
	labs    map[string]*lab.Playground // per tenant and scenario
	// lab is the scratch ledger the lab plays on, opened on first use
	// (labLedger) and removed by Close.
	lab    *opledger.Ledger
	labDir string
	closed bool
}

// Sample is one reading of the headline counters, for the dashboard chart.
type Sample struct {
	At               time.Time
	Unresolved       int
	Attempts         int
	ConfirmedEffects int
}

// maxSamples bounds the chart's history (a day at one sample a minute).
const maxSamples = 24 * 60

// New builds the console over l.
func New(l *opledger.Ledger, opts Options) (*Console, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	c := &Console{ledger: l, opts: opts, log: opts.Logger, pages: map[string]*template.Template{}, mux: http.NewServeMux(),
		samples: map[string][]Sample{}, labs: map[string]*lab.Playground{}, queueLimit: opledger.MaxListLimit,
		pageSize: operationsPageSize, workflowsPageSize: workflowsPageSize, eventsPageSize: opledger.MaxListLimit, origins: http.NewCrossOriginProtection()}
	funcs := template.FuncMap{
		"ts":       timeElement,
		"ago":      ageElement,
		"dash":     func(s string) string { return orDash(s) },
		"stateCSS": func(s opledger.State) string { return "state-" + string(s) },
		"pathKey":  url.PathEscape,
		"free":     freeText,
		"visible":  visibleText,
		"long":     longKey,
	}
	for _, page := range []string{"login", "queue", "operation", "operations", "dashboard", "error", "events", "event", "workflow", "workflows", "lab", "labreset"} {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/"+page+".html")
		if err != nil {
			return nil, err
		}
		c.pages[page] = t
	}
	static, err := fs.Sub(staticFS, "static")
	if err != nil {
		return nil, err
	}
	c.mux.Handle("GET /static/", c.staticFiles(static))
	c.mux.HandleFunc("GET /login", c.loginPage)
	c.mux.HandleFunc("POST /login", c.login)
	c.mux.HandleFunc("POST /logout", c.signedIn(c.logout))
	c.mux.HandleFunc("GET /{$}", c.signedIn(c.queue))
	c.mux.HandleFunc("GET /operations", c.signedIn(c.operations))
	c.mux.HandleFunc("GET /operations/{key}", c.signedIn(c.operation))
	c.mux.HandleFunc("POST /operations/{key}/resolve", c.signedIn(c.deciding(c.resolve)))
	c.mux.HandleFunc("POST /operations/{key}/approve", c.signedIn(c.deciding(c.approve)))
	c.mux.HandleFunc("GET /operations/{key}/resolve", c.signedIn(c.formAddress(operationsPage, "resolve")))
	c.mux.HandleFunc("GET /operations/{key}/approve", c.signedIn(c.formAddress(operationsPage, "approve")))
	c.mux.HandleFunc("GET /dashboard", c.signedIn(c.dashboard))
	c.mux.HandleFunc("GET /events", c.signedIn(c.events))
	c.mux.HandleFunc("GET /events/{source}/{id}", c.signedIn(c.event))
	c.mux.HandleFunc("GET /events/{source}/{id}/{rest...}", c.signedIn(c.eventAddress))
	c.mux.HandleFunc("GET /workflows", c.signedIn(c.workflows))
	c.mux.HandleFunc("GET /workflows/{key}", c.signedIn(c.workflow))
	c.mux.HandleFunc("POST /workflows/{key}/cancel", c.signedIn(c.deciding(c.cancelWorkflow)))
	c.mux.HandleFunc("GET /workflows/{key}/cancel", c.signedIn(c.formAddress(workflowsPage, "cancel")))
	c.mux.HandleFunc("GET /lab", c.signedIn(c.labPage))
	c.mux.HandleFunc("GET /lab/{scenario}/reset", c.signedIn(c.labResetPage))
	c.mux.HandleFunc("POST /lab/{scenario}", c.signedIn(c.labAction))
	return c, nil
}

// ServeHTTP serves the console. A POST from another origin (another
// site, a sibling subdomain, another port of the same host) is refused
// before anything else, sign-in included; every page but the static files
// is sent with Cache-Control: no-store, so that neither the Back button nor
// the browser's cache shows a signed-in page after signing out, or an
// operation as it was before a decision.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'self'; style-src 'self'; script-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	if !strings.HasPrefix(r.URL.Path, "/static/") {
		h.Set("Cache-Control", "no-store")
	}
	if err := c.origins.Check(r); err != nil {
		msg := "This form did not come from the console's own page, so nothing was done. Open the console and try again."
		if r.URL.Path == "/login" {
			msg = "Sign in from the console's own page."
		}
		c.fail(w, r, nil, http.StatusForbidden, msg, nil)
		return
	}
	if h, pattern := c.mux.Handler(r); pattern == "" {
		// No page here, or none for this method: answered with the
		// console's own page rather than net/http's plain text.
		probe := &statusProbe{header: http.Header{}}
		h.ServeHTTP(probe, r)
		if probe.status == http.StatusNotFound {
			if to := keyPage(r); to != "" {
				http.Redirect(w, r, to, http.StatusSeeOther)
				return
			}
		}
		if probe.status == http.StatusNotFound || probe.status == http.StatusMethodNotAllowed {
			c.noPage(w, r, probe.status, probe.header.Get("Allow"))
			return
		}
	}
	c.mux.ServeHTTP(w, r)
}

// staticFiles serves the console's static files, which browsers may
// cache. An address under /static/ that names none of them (a file it
// does not have, or the folder, which it does not list) is answered 404
// with the console's own page, not net/http's plain text, and that page
// is not cached either.
func (c *Console) staticFiles(files fs.FS) http.Handler {
	serve := http.StripPrefix("/static/", http.FileServerFS(files))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st, err := fs.Stat(files, strings.TrimPrefix(r.URL.Path, "/static/"))
		if err != nil || st.IsDir() {
			w.Header().Set("Cache-Control", "no-store")
			c.noPage(w, r, http.StatusNotFound, "")
			return
		}
		serve.ServeHTTP(w, r)
	})
}

// keyPage is the address of the page of an operation or workflow whose
// key holds a "/" (a workflow's step, <workflow>/<step>) typed with the
// "/" as it is, which no route matches: /operations/onb:1/send is the
// page of operation onb:1/send, at /operations/onb:1%2Fsend, the address
// the console's links give. "" for a request that is not a GET or HEAD
// of such an address. An address a route matches is not one: a key
// typed so that it ends in /resolve, /approve or /cancel names a form's
// route, whose GET formAddress answers.
func keyPage(r *http.Request) string {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return ""
	}
	for _, page := range []string{operationsPage, workflowsPage} {
		if key, ok := strings.CutPrefix(r.URL.Path, page); ok && strings.Contains(key, "/") {
			return page + url.PathEscape(key)
		}
	}
	return ""
}

// formAddress answers a GET of the address of a form's route (page
// operationsPage or workflowsPage, the form's name form): the address
// of the operation or workflow whose key holds a "/" and ends in
// /form, typed with the "/" as it is (/operations/onb:1/resolve for the
// step resolve of workflow onb:1, recorded or not yet), is sent to that
// key's page (303), as keyPage sends any other; when no operation,
// workflow step or workflow has that key, the address is the form's,
// which takes no GET (405).
func (c *Console) formAddress(page, form string) sessionHandler {
	return func(w http.ResponseWriter, r *http.Request, s *session) {
		key := r.PathValue("key") + "/" + form
		var err error
		if page == workflowsPage {
			_, err = s.ledger.GetWorkflow(r.Context(), key)
		} else {
			_, err = s.ledger.Get(r.Context(), key)
			if errors.Is(err, opledger.ErrNotFound) {
				// A workflow's step not recorded yet: its page says
				// what it waits for (stepNotRecorded).
				wkey, name, _ := opledger.SplitWorkflowStepKey(key)
				var wf *opledger.Workflow
				if wf, err = s.ledger.GetWorkflow(r.Context(), wkey); err == nil && wf.Step(name) == nil {
					err = opledger.ErrNotFound
				}
			}
		}
		switch {
		case err == nil:
			http.Redirect(w, r, page+url.PathEscape(key), http.StatusSeeOther)
		case errors.Is(err, opledger.ErrNotFound) || errors.Is(err, opledger.ErrInvalidKey) || errors.Is(err, opledger.ErrInvalidInput):
			c.noPage(w, r, http.StatusMethodNotAllowed, http.MethodPost)
		default:
			c.fail(w, r, s, http.StatusServiceUnavailable, "The ledger's store does not answer.", err)
		}
	}
}

// statusProbe is a ResponseWriter that keeps a handler's status and
// header and drops its body: ServeHTTP asks the mux's handler of a path
// it has no pattern for whether it answers 404 or 405 (with Allow).
type statusProbe struct {
	header http.Header
	status int
}

func (p *statusProbe) Header() http.Header { return p.header }

func (p *statusProbe) WriteHeader(status int) {
	if p.status == 0 {
		p.status = status
	}
}

func (p *statusProbe) Write(b []byte) (int, error) {
	p.WriteHeader(http.StatusOK)
	return len(b), nil
}

// noPage answers a request for an address the console has no page at
// (status 404), or none for its method (405, allow the methods it takes),
// with the console's error page: its layout, a link back to the exception
// queue, and for a signed-in session its navigation. The path is not
// echoed.
func (c *Console) noPage(w http.ResponseWriter, r *http.Request, status int, allow string) {
	msg := "The console has no page at this address. The exception queue and the navigation lead to every page it has."
	if status == http.StatusMethodNotAllowed {
		w.Header().Set("Allow", allow)
		msg = "This address takes no " + r.Method + " request (it takes " + allow + ")."
		if r.Method == http.MethodGet && strings.Contains(allow, http.MethodPost) {
			msg = "This address takes a form posted from a page of the console, not a link: nothing was done."
			if r.URL.Path == "/logout" {
				msg = "Signing out takes the Sign out button at the top of every page: you are still signed in."
			}
		}
	}
	data := map[string]any{"Title": http.StatusText(status), "Message": msg}
	s, err := c.readSession(r)
	if err != nil {
		// Not signed in, or the session cannot be read: the page
		// without the navigation.
		c.render(w, status, "error", data)
		return
	}
	c.renderSigned(w, s, status, "error", data)
}

// Sample reads the counters of every tenant that has a token, for the
// dashboard chart. The server calls it once a minute. A tenant whose
// counters cannot be read is logged (at ERROR) and left out of this
// sample; the others are still sampled. A store that could not take the
// read (unavailable, busy or full: periodic.StoreProblem) ends the sample
// instead, with that error: the other tenants would most likely meet it
// too, and the caller's loop logs it by the outage rule (periodic.Run)
// rather than an ERROR per tenant per sample. The error is that, that of
// listing the tenants, or ctx's.
func (c *Console) Sample(ctx context.Context) error {
	toks, err := c.ledger.Tokens(ctx, true)
	if err != nil {
		return err
	}
	seen := map[string]bool{}
	for _, t := range toks {
		if seen[t.Tenant] {
			continue
		}
		seen[t.Tenant] = true
		if err := c.sampleTenant(ctx, t.Tenant); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if periodic.StoreProblem(err) != "" {
				return fmt.Errorf("read the counters of tenant %s: %w", t.Tenant, err)
			}
			c.log.Error("console: sample counters", "tenant", t.Tenant, "error", err)
		}
	}
	return nil
}

// sampleTenant reads and records the counters of one tenant.
func (c *Console) sampleTenant(ctx context.Context, tenant string) error {
	l, err := c.ledger.WithTenant(tenant)
	if err != nil {
		return err
	}
	st, err := l.Stats(ctx, false)
	if err != nil {
		return err
	}
	c.record(tenant, Sample{At: time.Now(), Unresolved: st.Unresolved, Attempts: st.AttemptsTotal, ConfirmedEffects: st.ConfirmedEffects})
	return nil
}

func (c *Console) record(tenant string, s Sample) {
	c.mu.Lock()
	defer c.mu.Unlock()
	list := append(c.samples[tenant], s)
	if len(list) > maxSamples {
		list = list[len(list)-maxSamples:]
	}
	c.samples[tenant] = list
}

// session is the signed-in operator's view of the request.
type session struct {
	secret string
	tenant string
	ledger *opledger.Ledger
	csrf   string
	// access is the access of the session's token. Unless it may decide
	// (opledger.ReadWrite), its pages offer no decision, and a decision
	// posted is refused.
	access opledger.TokenAccess
}

// canDecide reports whether the session may resolve and approve.
func (s *session) canDecide() bool {
	return s.access == opledger.ReadWrite
}

// sessionCredential is what the decisions of a console session record
// after the name typed: the console, and the token the session was signed
// in with, as in "Maria (console, token ops-laptop, tok_0a1b2c3d4e5f)".
func sessionCredential(tok *opledger.TokenInfo) string {
	return "console, " + tok.Credential()
}

// csrfToken derives the form token from the session secret: a cross-site
// page cannot read the HttpOnly cookie, so it cannot compute it.
func csrfToken(secret string) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte("opledger console csrf"))
	return hex.EncodeToString(m.Sum(nil))
}

type sessionHandler func(w http.ResponseWriter, r *http.Request, s *session)

// signedIn resolves the session cookie, sends strangers to the sign-in page
// and checks the CSRF token of every POST.
func (c *Console) signedIn(next sessionHandler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s, err := c.readSession(r)
		if errors.Is(err, opledger.ErrUnauthorized) {
			c.toLogin(w, r)
			return
		}
		if errors.Is(err, errSessionUnusable) {
			c.fail(w, r, nil, http.StatusInternalServerError, "The session's tenant or token cannot be used.", err)
			return
		}
		if err != nil {
			c.fail(w, r, nil, http.StatusServiceUnavailable, "The ledger's store does not answer.", err)
			return
		}
		if r.Method == http.MethodPost {
			if err := r.ParseForm(); err != nil {
				c.fail(w, r, s, http.StatusBadRequest, "The form could not be read.", nil)
				return
			}
			if !hmac.Equal([]byte(r.PostForm.Get("csrf")), []byte(s.csrf)) {
				c.fail(w, r, s, http.StatusForbidden, "This form has expired or did not come from the console. Reload the page and try again.", nil)
				return
			}
		}
		next(w, r, s)
	}
}

// errSessionUnusable is readSession's error for a session whose tenant
// or token the ledger cannot be narrowed to.
var errSessionUnusable = errors.New("console: the session's tenant or token cannot be used")

// readSession is the session of r's cookie: opledger.ErrUnauthorized
// when r has none (or several: a page that shares the host, on another
// port, set one of its own beside the console's, and which is which
// cannot be told) or it has ended, errSessionUnusable (wrapped) when its
// tenant or token cannot be used, or the store's error.
func (c *Console) readSession(r *http.Request) (*session, error) {
	cks := r.CookiesNamed(c.sessionCookie(r))
	if len(cks) != 1 || cks[0].Value == "" {
		return nil, opledger.ErrUnauthorized
	}
	ck := cks[0]
	tok, err := c.ledger.SessionToken(r.Context(), ck.Value)
	if err != nil {
		return nil, err
	}
	l, err := c.ledger.WithTenant(tok.Tenant)
	if err == nil {
		l, err = l.WithCredential(sessionCredential(tok))
	}
	if err != nil {
		return nil, errors.Join(errSessionUnusable, err)
	}
	return &session{secret: ck.Value, tenant: tok.Tenant, ledger: l, csrf: csrfToken(ck.Value), access: tok.Access}, nil
}

// deciding refuses the decisions of a session that may not decide (403)
// before anything of them is read.
func (c *Console) deciding(next sessionHandler) sessionHandler {
	return func(w http.ResponseWriter, r *http.Request, s *session) {
		if !s.canDecide() {
			c.fail(w, r, s, http.StatusForbidden, "This session cannot decide: it was signed in with a "+s.access.String()+
				" token, which may look but not resolve or approve. Sign out and sign in with a read-write token to decide.", nil)
			return
		}
		next(w, r, s)
	}
}

// toLogin sends a request without a session to the sign-in page. A form
// posted without one (its session ended while the page was open) is not
// redirected, which would lose it silently: the page says that nothing
// was done and links to signing in again, back to the operation's page
// for a decision. Signing out is the exception: its session has ended
// already, so what was asked is done once the browser's cookie is
// cleared, as logout clears it.
func (c *Console) toLogin(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost && r.URL.Path == "/logout" {
		c.clearSessionCookie(w, r)
		http.Redirect(w, r, "/login", http.StatusSeeOther)
		return
	}
	if r.Method != http.MethodGet {
		back := "/"
		switch {
		case strings.HasPrefix(r.URL.Path, "/operations/") && r.PathValue("key") != "":
			back = "/operations/" + url.PathEscape(r.PathValue("key"))
		case strings.HasPrefix(r.URL.Path, "/workflows/") && r.PathValue("key") != "":
			back = "/workflows/" + url.PathEscape(r.PathValue("key"))
		case strings.HasPrefix(r.URL.Path, "/lab/"):
			back = "/lab"
		}
		c.render(w, http.StatusUnauthorized, "error", map[string]any{"Title": http.StatusText(http.StatusUnauthorized),
			"Message": "Your session has ended (after " + strconv.Itoa(int(SessionDuration.Hours())) +
				" hours, on signing out, or when its token was revoked), so nothing was done. Sign in again, and look at the page again before deciding.",
			"SignIn": "/login?next=" + url.QueryEscape(back)})
		return
	}
	http.Redirect(w, r, "/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
}

// render writes a page with status.
func (c *Console) render(w http.ResponseWriter, status int, page string, data map[string]any) {
	// The whole page is rendered before anything is sent: a page that
	// fails half way is answered 500 with the error page, never 200 with
	// half a page that looks complete.
	var buf bytes.Buffer
	if err := c.pages[page].Execute(&buf, data); err != nil {
		c.log.Error("console: render", "page", page, "error", err)
		if page == "error" {
			http.Error(w, renderFailed, http.StatusInternalServerError)
			return
		}
		failed := map[string]any{"Title": http.StatusText(http.StatusInternalServerError), "Message": renderFailed}
		for _, k := range []string{"Tenant", "CSRF", "Access"} { // a signed-in page keeps its header
			if v, ok := data[k]; ok {
				failed[k] = v
			}
		}
		c.render(w, http.StatusInternalServerError, "error", failed)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// renderFailed is the message of a page that could not be rendered.
const renderFailed = "This page could not be shown: the server's log says why."

// statusBrowserGone is the status of a page whose browser went away
// before it (nginx's 499, "client closed request"), as the API's
// httpapi.StatusCallerGone; no browser sees it.
const statusBrowserGone = 499

// fail renders an error page; err, if any, goes to the log only.
// s is the signed-in session, if any: the page then keeps the navigation
// and the sign-out.
func (c *Console) fail(w http.ResponseWriter, r *http.Request, s *session, status int, msg string, err error) {
	c.failBack(w, r, s, status, msg, err, nil)
}

// backLink is a link an error page offers before the one back to the
// exception queue: to the list the missing thing would be in.
type backLink struct{ Href, Text string }

// eventsBack leads from an event that is not there to the events list,
// operationsBack from an operation to the operations list.
var (
	eventsBack     = &backLink{Href: "/events", Text: "Back to the events"}
	operationsBack = &backLink{Href: "/operations", Text: "Back to the operations"}
)

// failBack is fail, the page offering back first, if not nil.
func (c *Console) failBack(w http.ResponseWriter, r *http.Request, s *session, status int, msg string, err error, back *backLink) {
	if gone := r.Context().Err(); gone != nil && err != nil && errors.Is(err, gone) {
		// The browser went away (the operator left the page, or closed
		// it) while the ledger worked for it: nobody sees the page, and
		// nothing failed that the operator could mend.
		c.log.Info("page ended: the browser went away before it", "path_pattern", r.Pattern)
		w.WriteHeader(statusBrowserGone)
		return
	}
	if err != nil {
		// The key of the page's path is left out, as the API leaves it
		// out of its logs: keys may carry personal data, and the ledger's
		// errors name the key they are about.
		c.log.Error("console", "path_pattern", r.Pattern, "error", redact.Keys(r.PathValue("key"), err))
	}
	data := map[string]any{"Title": http.StatusText(status), "Message": msg, "Back": back}
	if s == nil {
		c.render(w, status, "error", data)
		return
	}
	c.renderSigned(w, s, status, "error", data)
}

// renderSigned writes a page of a signed-in session: its navigation
// names the tenant, marks a session that may not decide with its token's
// access (Access is empty for one that may), and carries the CSRF token
// of the sign-out form.
func (c *Console) renderSigned(w http.ResponseWriter, s *session, status int, page string, data map[string]any) {
	data["Tenant"], data["CSRF"], data["Access"] = s.tenant, s.csrf, ""
	if !s.canDecide() {
		data["Access"] = s.access.String()
	}
	c.render(w, status, page, data)
}

func (c *Console) loginPage(w http.ResponseWriter, r *http.Request) {
	c.render(w, http.StatusOK, "login", map[string]any{"Title": "Sign in", "Next": safeNext(r.URL.Query().Get("next"))})
}

// safeNext keeps redirects on this site: a path of its own, or "/". A
// backslash or a control character anywhere is refused, not only at the
// start: browsers read "\\" as "/" and drop tabs and newlines, and
// http.Redirect cleans the path ("/x/../\\evil.com" becomes
// "/\\evil.com"), so either could turn a path into another site.
func safeNext(next string) string {
	if !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") ||
		strings.ContainsFunc(next, func(r rune) bool { return r == '\\' || unicode.IsControl(r) }) {
		return "/"
	}
	if u, err := url.Parse(next); err != nil || u.Scheme != "" || u.Host != "" {
		return "/"
	}
	return next
}

func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	// Signing in has no session yet, so no CSRF token: a form on another
	// origin could sign a visitor into the attacker's tenant, where the
	// visitor's decisions would then go. ServeHTTP has refused every POST
	// a browser marks as coming from another origin (Sec-Fetch-Site, or
	// without it an Origin other than the host), a same-site one included.
	if err := r.ParseForm(); err != nil {
		c.fail(w, r, nil, http.StatusBadRequest, "The form could not be read.", nil)
		return
	}
	token := strings.TrimSpace(r.PostForm.Get("token"))
	next := safeNext(r.PostForm.Get("next"))
	refused := func(err error) {
		status, msg := http.StatusUnauthorized, "That token is unknown or revoked."
		if !errors.Is(err, opledger.ErrUnauthorized) {
			status, msg = http.StatusServiceUnavailable, "The ledger's store does not answer."
			c.log.Error("console: sign in", "error", err)
		}
		c.render(w, status, "login", map[string]any{"Title": "Sign in", "Next": next, "Error": msg})
	}
	// A token refused leaves the browser's session as it was.
	if _, err := c.ledger.Authenticate(r.Context(), token); err != nil {
		refused(err)
		return
	}
	// Signing in again from a browser signed in already ends the session
	// its cookie held, which the new cookie replaces: left open, it would
	// last its hours with no browser left to sign it out. It is ended
	// before the new one is opened, so that a store that fails to end it
	// leaves no new session behind either (the browser keeps the old
	// one), and one that fails to open the new session leaves the browser
	// signed out.
	for _, ck := range r.CookiesNamed(c.sessionCookie(r)) {
		if ck.Value == "" {
			continue
		}
		if err := c.ledger.CloseSession(r.Context(), ck.Value); err != nil {
			c.log.Error("console: sign in: end the session signed in before", "error", err)
			c.render(w, http.StatusServiceUnavailable, "login", map[string]any{"Title": "Sign in", "Next": next,
				"Error": "The ledger's store does not answer."})
			return
		}
	}
	secret, _, err := c.ledger.OpenSession(r.Context(), token, SessionDuration)
	if err != nil {
		refused(err)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: c.sessionCookie(r), Value: secret, Path: "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: c.secure(r), MaxAge: int(SessionDuration / time.Second)})
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// logout closes the session and clears the cookie.
func (c *Console) logout(w http.ResponseWriter, r *http.Request, s *session) {
	if err := c.ledger.CloseSession(r.Context(), s.secret); err != nil {
		c.fail(w, r, s, http.StatusServiceUnavailable, "The ledger's store does not answer; you are still signed in.", err)
		return
	}
	c.clearSessionCookie(w, r)
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}

// clearSessionCookie tells the browser to delete its session cookie.
func (c *Console) clearSessionCookie(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: c.sessionCookie(r), Value: "", Path: "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: c.secure(r), MaxAge: -1})
}

// queue is the exception queue: what waits for a person. Held, uncertain
// and failed operations (but those an operator cancelled, and the failed
// step of a cancelled workflow, which need no repair), and those awaiting
// approval, which nothing sends until an approver has looked; the most
// urgent review first. Each state is read on its own, up to queueLimit
// operations each, so that a burst of failures never pushes a held or
// uncertain operation out of the page. The held ones are read by review
// time, so that those shown are the ones due first; the others newest
// first (by creation), so that those shown are the newest. The page shows
// the held ones earliest review first, then the uncertain, those awaiting
// approval and the failed ones, each group oldest first (by creation). Its
// caption counts every operation that needs attention, not only those
// shown, and says which states have more than the page shows.
func (c *Console) queue(w http.ResponseWriter, r *http.Request, s *session) {
	now, err := s.ledger.Now(r.Context())
	if err != nil {
		c.fail(w, r, s, http.StatusServiceUnavailable, "The ledger's store does not answer.", err)
		return
	}
	var counts map[opledger.State]int // read once a state has more than the page
	var rows []queueRow
	sum := queueSummary{Limit: c.queueLimit, States: queueStates}
	for _, st := range queueStates {
		o := opledger.ListOptions{States: []opledger.State{st}, Limit: c.queueLimit}
		switch st {
		case opledger.StateHeld:
			o.Order = opledger.OrderReview
		case opledger.StateFailed:
			// An operator's cancellation, of the operation or of its
			// workflow, needs no repair.
			o.ExceptCancelled = true
		}
		page, err := s.ledger.List(r.Context(), o)
		if err != nil {
			c.fail(w, r, s, http.StatusServiceUnavailable, "The ledger's store does not answer.", err)
			return
		}
		for _, op := range page.Items {
			row := queueRow{Operation: op, Overdue: op.ReviewBy != nil && op.ReviewBy.Before(now), Waiting: waiting(now, op),
				Unreconciled: c.unreconciled(s, op)}
			if row.Unreconciled {
				sum.Unreconciled++
			}
			rows = append(rows, row)
		}
		// A state read whole counts what was read; one with more than
		// the page counts from CountByState (a count of every operation,
		// so read only then): at least one more than shown, whatever
		// moved between the two reads.
		total := len(page.Items)
		if page.NextCursor != "" {
			if counts == nil {
				if counts, err = s.ledger.CountByState(r.Context()); err != nil {
					c.fail(w, r, s, http.StatusServiceUnavailable, "The ledger's store does not answer.", err)
					return
				}
			}
			all := counts[st]
			if st == opledger.StateFailed {
				if all, err = s.ledger.CountFailedNeedingDecision(r.Context()); err != nil {
					c.fail(w, r, s, http.StatusServiceUnavailable, "The ledger's store does not answer.", err)
					return
				}
			}
			total = max(all, total+1)
			sum.Capped = append(sum.Capped, stateTotal{State: st, Total: total})
		}
		sum.Total += total
	}
	sum.Shown = len(rows)
	// Held first by review time, then in queueStates' order; oldest first within.
	rank := map[opledger.State]int{}
	for i, st := range queueStates {
		rank[st] = i
	}
	sort.SliceStable(rows, func(i, j int) bool {
		a, b := rows[i], rows[j]
		if a.ReviewBy != nil && b.ReviewBy != nil && !a.ReviewBy.Equal(*b.ReviewBy) {
			return a.ReviewBy.Before(*b.ReviewBy)
		}
		if (a.ReviewBy != nil) != (b.ReviewBy != nil) {
			return a.ReviewBy != nil
		}
		if rank[a.State] != rank[b.State] {
			return rank[a.State] < rank[b.State]
		}
		return a.CreatedAt.Before(b.CreatedAt)
	})
	// Workflows that cannot go on have no operation in the queue's
	// states: their next step was never recorded.
	// At most a page of the workflow list (each is read whole); the page
	// says when the list may have been cut.
	stuckLimit := min(c.queueLimit, opledger.MaxWorkflowListLimit)
	stuck, err := s.ledger.StuckWorkflows(r.Context(), stuckLimit)
	if err != nil {
		c.fail(w, r, s, http.StatusServiceUnavailable, "The ledger's store does not answer.", err)
		return
	}
	stuckCut := 0
	if len(stuck) == stuckLimit {
		stuckCut = stuckLimit
	}
	// A pending operation nothing claims is in none of them either: a
	// destination nothing serves (a misspelt name) leaves it due for ever.
	var due *dueNotice
	op, waited, err := s.ledger.OldestDue(r.Context())
	if err != nil {
		c.fail(w, r, s, http.StatusServiceUnavailable, "The ledger's store does not answer.", err)
		return
	}
	if op != nil && waited >= DueNoticeAfter {
		due = &dueNotice{Operation: op.Masked(), Waited: humanDuration(waited)}
	}
	c.renderSigned(w, s, http.StatusOK, "queue", map[string]any{"Title": "Exception queue",
		"Items": rows, "Summary": sum, "Stuck": stuck, "StuckCut": stuckCut, "Due": due})
}

// longKeyBytes is the length past which a list's key may wrap within
// its column on a desktop screen, where shorter ones stay on one line.
const longKeyBytes = 40

// longKey reports whether the key made of parts is longer than
// longKeyBytes: one of the longest a key may be, unbroken, would widen
// its list to twice the screen and push every row's other columns out of
// view.
func longKey(parts ...string) bool {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	return n > longKeyBytes
}

// DueNoticeAfter is how long a pending operation may wait for a worker,
// once due, before the exception queue says so: an executor claims a due
// operation within seconds, and a retry's backoff does not count.
const DueNoticeAfter = 5 * time.Minute

// dueNotice is the exception queue's note of the operation due longest.
type dueNotice struct {
	*opledger.Operation
	// Waited is how long it has been due, in words.
	Waited string
}

// queueStates are the states of the exception queue, in its order.
var queueStates = []opledger.State{opledger.StateHeld, opledger.StateUncertain, opledger.StateAwaitingApproval, opledger.StateFailed}

// queueSummary is the caption of the exception queue.
type queueSummary struct {
	// Shown counts the operations the page shows, Total every operation
	// in the queue's states.
	Shown, Total int
	// Limit is the most operations of one state the page shows.
	Limit int
	// Capped are the states with more operations than Limit.
	Capped []stateTotal
	// States are the queue's states, each linked to its whole list.
	States []opledger.State
	// Unreconciled counts the uncertain operations shown that no
	// reconciler of this process examines (queueRow.Unreconciled): of
	// those shown only, as the queue reads no more of them.
	Unreconciled int
}

// stateTotal is how many operations are in a state.
type stateTotal struct {
	State opledger.State
	Total int
}

// queueRow is an operation of the exception queue.
type queueRow struct {
	*opledger.Operation
	// Overdue is true for a held operation whose review time has passed.
	Overdue bool
	// Waiting is how long the operation has waited for someone: since it
	// became uncertain or held, or since it entered its state (failed, or
	// awaiting approval of its version), with the exact time
	// (ageElement).
	Waiting template.HTML
	// Unreconciled is true for an uncertain operation that no reconciler
	// of this process examines (Console.unreconciled): nothing here will
	// look it up, and the row says it needs a person.
	Unreconciled bool
}

// waiting is how long op has waited for someone at now: since it last
// became uncertain or held (UnresolvedSince: a move from uncertain to
// held does not restart the wait), or else since it entered its state.
func waiting(now time.Time, op *opledger.Operation) template.HTML {
	if op.UnresolvedSince != nil {
		return ageElement(now, *op.UnresolvedSince)
	}
	return ageElement(now, op.StateSince)
}

func (c *Console) dashboard(w http.ResponseWriter, r *http.Request, s *session) {
	now, err := s.ledger.Now(r.Context())
	if err != nil {
		c.fail(w, r, s, http.StatusServiceUnavailable, "The ledger's store does not answer.", err)
		return
	}
	st, err := s.ledger.Stats(r.Context(), false)
	if err != nil {
		c.fail(w, r, s, http.StatusServiceUnavailable, "The ledger's store does not answer.", err)
		return
	}
	dups := duplicateList{}
	if st.DuplicateEffects > 0 {
		if dups, err = readDuplicates(r.Context(), s.ledger, st.DuplicateEffects); err != nil {
			c.fail(w, r, s, http.StatusServiceUnavailable, "The ledger's store does not answer.", err)
			return
		}
	}
	// The event figures, as /v1/stats gives them beside the others.
	ev, err := s.ledger.EventStats(r.Context(), false)
	if err != nil {
		c.fail(w, r, s, http.StatusServiceUnavailable, "The ledger's store does not answer.", err)
		return
	}
	// The processes that maintain the store, compared with this server.
	ps, err := s.ledger.Processes(r.Context())
	if err != nil {
		c.fail(w, r, s, http.StatusServiceUnavailable, "The ledger's store does not answer.", err)
		return
	}
	differing := 0
	for _, p := range ps {
		if len(p.OtherSettings) > 0 {
			differing++
		}
	}
	// The total counts attempts still running; /metrics counts them
	// apart (opledger_attempts_open), so the dashboard says how many.
	running := 0
	for _, a := range st.Attempts {
		if a.Outcome == opledger.AttemptOpen {
			running += a.Count
		}
	}
	c.mu.Lock()
	samples := append([]Sample(nil), c.samples[s.tenant]...)
	c.mu.Unlock()
	c.renderSigned(w, s, http.StatusOK, "dashboard", map[string]any{"Title": "Dashboard", "AttemptsRunning": running,
		"Processes": len(ps), "ProcessesDiffering": differing, "ProcessList": ps,
		"Stats": st, "Events": ev, "States": opledger.States, "Chart": chart(samples), "Now": now,
		"RecoveryMean": measuredTime(st.RecoveryMeanSeconds, st.Recoveries),
		"RecoveryP90":  measuredTime(st.RecoveryP90Seconds, st.Recoveries),
		"ApprovalWait": measuredTime(st.OldestApprovalWaitSeconds, st.OperationsByState[opledger.StateAwaitingApproval]),
		"Awaiting":     st.OperationsByState[opledger.StateAwaitingApproval],
		"Dup":          dups})
}

// dashboardDuplicates bounds the operations with duplicate effects the
// dashboard lists.
const dashboardDuplicates = 20

// duplicateList is what the dashboard shows of the operations with
// duplicate effects.
type duplicateList struct {
	// Items are the operations shown, the most recently updated first.
	Items []*opledger.Operation
	// Read counts the operations read, Complete is true when they are
	// every operation with duplicate effects.
	Read     int
	Complete bool
	// Limit is the most operations read.
	Limit int
	// Compacted counts the duplicate effects the counter holds beyond
	// those of the operations read, when they were all read: those of
	// compacted operations, which are counted but no longer listed.
	Compacted int
}

// readDuplicates reads the operations with duplicate effects for the
// dashboard. The ledger lists them by creation only, but each is an
// incident, and the one that matters most is the latest: an old
// operation's late report can come after every other. So up to
// opledger.MaxListLimit of them (one page, the newest by creation) are
// read and the dashboard shows those most recently updated, which for a
// succeeded operation is its latest late report. counted is the
// counter's value (Stats.DuplicateEffects).
func readDuplicates(ctx context.Context, l *opledger.Ledger, counted int) (duplicateList, error) {
	page, err := l.List(ctx, opledger.ListOptions{DuplicateEffects: true, Limit: opledger.MaxListLimit})
	if err != nil {
		return duplicateList{}, err
	}
	ops := page.Items
	d := duplicateList{Read: len(ops), Complete: page.NextCursor == "", Limit: opledger.MaxListLimit}
	listed := 0
	for _, op := range ops {
		listed += op.DuplicateEffects
	}
	if d.Complete {
		// The counter was read first: an incident recorded since can
		// make the list count more than it, and only compaction can
		// make it count less.
		d.Compacted = max(0, counted-listed)
	}
	sort.SliceStable(ops, func(i, j int) bool { return ops[i].UpdatedAt.After(ops[j].UpdatedAt) })
	d.Items = ops[:min(len(ops), dashboardDuplicates)]
	for i, op := range d.Items {
		d.Items[i] = op.Masked() // the dashboard shows their references
	}
	return d, nil
}

// timeElement is a time as the pages show it, t a time.Time or a
// *time.Time: a <time> whose datetime is t in RFC 3339 UTC, which
// programs and assistive technology read, and whose text is formatTime's;
// "-" for none.
func timeElement(t any) template.HTML {
	var at time.Time
	switch v := t.(type) {
	case time.Time:
		at = v
	case *time.Time:
		if v != nil {
			at = *v
		}
	}
	if at.IsZero() {
		return "-"
	}
	return template.HTML(`<time datetime="` + at.UTC().Format(time.RFC3339) + `">` + formatTime(at) + `</time>`)
}

// ageElement is how long before now t was (ago), as the pages show it:
// a <time> whose datetime is t in RFC 3339 UTC and whose title is t
// exact, so that an age ("3 min") also says when it was.
func ageElement(now, t time.Time) template.HTML {
	return template.HTML(`<time datetime="` + t.UTC().Format(time.RFC3339) + `" title="` + formatTime(t) + `">` +
		ago(now, t) + `</time>`)
}

func formatTime(t any) string {
	switch v := t.(type) {
	case time.Time:
		if v.IsZero() {
			return "-"
		}
		return v.UTC().Format("2006-01-02 15:04:05 UTC")
	case *time.Time:
		if v == nil {
			return "-"
		}
		return v.UTC().Format("2006-01-02 15:04:05 UTC")
	}
	return "-"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// freeText is a stored free text (a name, a reason, evidence, a
// reference) as the pages show it: its invisible characters made visible
// (visibleText), and isolated in a <bdi>, so that neither its controls nor
// its right-to-left letters reorder the text beside it.
func freeText(s string) template.HTML {
	return template.HTML("<bdi>" + template.HTMLEscapeString(visibleText(s)) + "</bdi>")
}

// listHref is the link to the list at path with the query params, those
// that are empty left out: a filter link, or a next page's with its
// cursor. The events and workflows pages build theirs with it.
func listHref(path string, params map[string]string) string {
	q := url.Values{}
	for k, v := range params {
		if v != "" {
			q.Set(k, v)
		}
	}
	if len(q) == 0 {
		return path
	}
	return path + "?" + q.Encode()
}

// eventStatuses are the statuses the events page filters by, in the
// order of its filter links.
var eventStatuses = []opledger.EventStatus{opledger.EventApplied, opledger.EventOutOfOrder, opledger.EventConflict, opledger.EventUnmapped}

// eventFilter is one link of the events page's status filter.
type eventFilter struct {
	Status opledger.EventStatus // "" for every status
	Count  int
	Href   string
	Active bool
}

// events lists the tenant's events, newest first, filtered by source and
// status, a page at a time. A filter it cannot give (an unknown status,
// two statuses or sources, a source no event can have) is answered 400
// with the page itself, saying what is wrong, its status filter leading
// to lists it can give, as the operations list answers its own.
func (c *Console) events(w http.ResponseWriter, r *http.Request, s *session) {
	q := r.URL.Query()
	source, status, cursor := q.Get("source"), opledger.EventStatus(q.Get("status")), q.Get("cursor")
	msg := ""
	switch {
	case len(q["status"]) > 1 || len(q["source"]) > 1:
		msg = "Give one status and one source at most."
	case status != "" && !slices.Contains(eventStatuses, status):
		msg = "There is no status “" + visibleText(string(status)) + "”. The statuses are applied, out_of_order, conflict and unmapped."
	case !storable(source):
		msg = "The source holds characters the ledger cannot store (a NUL byte or invalid UTF-8), so no event has it."
	}
	// The filter's links keep what was valid of it.
	if len(q["source"]) > 1 || !storable(source) {
		source = ""
	}
	if len(q["status"]) > 1 || !slices.Contains(eventStatuses, status) {
		status = ""
	}
	var page *opledger.EventPage
	invalid := false
	if msg == "" {
		var err error
		page, err = s.ledger.ListEvents(r.Context(), opledger.EventListOptions{Limit: c.eventsPageSize,
			Source: source, Status: status, Cursor: cursor})
		invalid = errors.Is(err, opledger.ErrInvalidInput)
		switch {
		case invalid && cursor == "":
			// The filter was checked above; this is what the ledger
			// refuses besides.
			msg = consoleWords(strings.TrimPrefix(err.Error(), "invalid input: "))
		case invalid:
			// The filters were valid without the cursor: the cursor is
			// not one of this list's.
			msg = "That page link does not continue this list: it belongs to other filters, or was not made by the console. Start again from the first page."
		case err != nil:
			c.fail(w, r, s, http.StatusServiceUnavailable, "The ledger's store does not answer.", err)
			return
		}
	}
	st, err := s.ledger.EventStats(r.Context(), false)
	if err != nil {
		c.fail(w, r, s, http.StatusServiceUnavailable, "The ledger's store does not answer.", err)
		return
	}
	// The filter and the other pages keep the source (and the first and
	// next pages the status). The counts are the tenant's, of every
	// source (as /v1/stats gives them): on the page of one source the
	// filter links show none, which would not count what they list, and
	// the page says whose its counts are. The links count the events
	// kept, those they list, not those retention has forgotten.
	href := func(st opledger.EventStatus, cursor string) string {
		return listHref("/events", map[string]string{"source": source, "status": string(st), "cursor": cursor})
	}
	filters := []eventFilter{{Count: st.Kept, Href: href("", ""), Active: msg == "" && status == ""}}
	for _, es := range eventStatuses {
		filters = append(filters, eventFilter{Status: es, Count: st.KeptByStatus[es], Href: href(es, ""), Active: msg == "" && status == es})
	}
	data := map[string]any{"Title": "Events", "Source": source, "Status": status, "Filters": filters, "Stats": st,
		"Counted": source == ""}
	if cursor != "" && (msg == "" || invalid) {
		// A later page, or a page link that does not continue the list,
		// links back to the first.
		data["First"] = href(status, "")
	}
	if msg != "" {
		data["Error"] = msg
		c.renderSigned(w, s, http.StatusBadRequest, "events", data)
		return
	}
	data["Items"] = page.Items
	if page.NextCursor != "" {
		data["Next"] = href(status, page.NextCursor)
	}
	c.renderSigned(w, s, http.StatusOK, "events", data)
}

// eventAddress answers the address of an event whose source or id holds
// a "/", typed with the "/" as it is (/events/forms/evt/1 for event evt/1
// of source forms), which the event route does not match: it is sent
// (303) to the event's page, at the address its links give, the "/"
// escaped (/events/forms/evt%2F1), as keyPage sends an operation's. Which
// "/" ends the source cannot be told from the address, so each is tried,
// the first first; none that names an event is answered 404.
func (c *Console) eventAddress(w http.ResponseWriter, r *http.Request, s *session) {
	segs := strings.Split(strings.TrimPrefix(r.URL.EscapedPath(), "/events/"), "/")
	for i, seg := range segs {
		v, err := url.PathUnescape(seg)
		if err != nil {
			segs = nil
			break
		}
		segs[i] = v
	}
	for i := 1; i < len(segs); i++ {
		source, id := strings.Join(segs[:i], "/"), strings.Join(segs[i:], "/")
		if opledger.ValidateKey(source) != nil || opledger.ValidateKey(id) != nil {
			continue
		}
		_, err := s.ledger.GetEvent(r.Context(), source, id)
		if errors.Is(err, opledger.ErrNotFound) {
			continue
		}
		if err != nil {
			c.fail(w, r, s, http.StatusServiceUnavailable, "The ledger's store does not answer.", err)
			return
		}
		http.Redirect(w, r, "/events/"+url.PathEscape(source)+"/"+url.PathEscape(id), http.StatusSeeOther)
		return
	}
	c.failBack(w, r, s, http.StatusNotFound, "No event has that source and id.", nil, eventsBack)
}

func (c *Console) event(w http.ResponseWriter, r *http.Request, s *session) {
	d, err := s.ledger.GetEvent(r.Context(), r.PathValue("source"), r.PathValue("id"))
	if errors.Is(err, opledger.ErrNotFound) || errors.Is(err, opledger.ErrInvalidInput) || errors.Is(err, opledger.ErrInvalidKey) {
		c.failBack(w, r, s, http.StatusNotFound, "No event has that source and id.", nil, eventsBack)
		return
	}
	if err != nil {
		c.fail(w, r, s, http.StatusServiceUnavailable, "The ledger's store does not answer.", err)
		return
	}
	dupes := 0
	for _, dl := range d.Deliveries {
		if dl.Duplicate {
			dupes++
		}
	}
	// Retention deletes the deliveries received more than its period ago
	// and keeps the later ones: the first delivery, never a duplicate,
	// gone means those listed are not all, and the page says so rather
	// than count what is left as every delivery.
	removed := len(d.Deliveries) == 0 || d.Deliveries[0].Duplicate
	c.renderSigned(w, s, http.StatusOK, "event", map[string]any{"Title": visibleText(d.Event.Source + "/" + d.Event.EventID),
		"D": d, "Deliveries": shorten(d.Deliveries, shownItems), "Duplicates": dupes, "Removed": removed,
		"Operations": shorten(d.Operations, shownItems)})
}
