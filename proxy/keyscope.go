package proxy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/opledger/opledger"
)

// keyScopeState is what a route knows of its key scope in the ledger
// (opledger.Ledger.PinKeyScope): checked once per process, by Run before
// it serves and otherwise by the route's first protected request.
type keyScopeState struct {
	// pinned is set once the ledger's scope is the route's own.
	pinned atomic.Bool
	mu     sync.Mutex
	// refused is the refusal of a changed scope, kept until the proxy is
	// made anew: every protected request of the route is refused.
	refused error
}

// keyScope is what the route's operation keys are derived from besides
// its name: the tenant they are recorded in and the header whose digest
// scopes them. Another value of either gives every earlier request of the
// upstream another key.
func (rt *route) keyScope(tenant string) map[string]string {
	return map[string]string{"tenant": tenant, "credential_header": rt.credHdr}
}

// keyScopeChanged is a route's refusal of a changed key scope, err, with
// what to do about it: logged, and Run's error.
func keyScopeChanged(rt *route, err error) error {
	tenant := ""
	if ce, ok := errors.AsType[*opledger.KeyScopeChangedError](err); ok && ce.Recorded.Settings["tenant"] != "" {
		// Its operations are in the tenant they were recorded in.
		tenant = " --tenant " + ce.Recorded.Settings["tenant"]
	}
	return fmt.Errorf("upstream %s: %w. Under these settings every earlier request of this upstream gets another key, and its repeats would be forwarded again. "+
		"Put the setting back; or, if another proxy sharing this store names an upstream %s too, give one of them another name; "+
		"or let this upstream's operations settle (opledger ops list --destination %s%s --state uncertain,held,in_progress) and start once accepting the change "+
		"(opledger proxy --accept-scope-change %s)", rt.Name, err, rt.Name, destinationName(rt.Name), tenant, rt.Name)
}

// pinKeyScope records the route's key scope in the ledger, or checks it
// against the recorded one, once: a changed scope is refused (and the
// refusal kept, and logged if logRefusal) unless Config.AcceptScopeChange
// names the upstream, when the new scope is recorded and a warning
// logged. An error of the store is returned and not kept: the next call
// tries again.
func (p *Proxy) pinKeyScope(ctx context.Context, rt *route, logRefusal bool) error {
	if rt.scope.pinned.Load() {
		return nil
	}
	rt.scope.mu.Lock()
	defer rt.scope.mu.Unlock()
	if rt.scope.pinned.Load() || rt.scope.refused != nil {
		return rt.scope.refused
	}
	scope := rt.keyScope(p.ledger.Tenant())
	replaced, err := p.ledger.PinKeyScope(ctx, destinationName(rt.Name), scope, p.accept[rt.Name])
	switch {
	case errors.Is(err, opledger.ErrKeyScopeChanged):
		rt.scope.refused = keyScopeChanged(rt, err)
		if !logRefusal {
			return rt.scope.refused
		}
		p.log.Error("the upstream's key settings changed: its protected requests are refused", "upstream", rt.Name, "error", rt.scope.refused)
		return rt.scope.refused
	case err != nil:
		return fmt.Errorf("upstream %s: check the settings its keys are derived from: %w", rt.Name, err)
	case replaced != nil:
		p.log.Warn("the upstream's key settings changed, as accepted: its earlier requests are taken as new", "upstream", rt.Name,
			"was", replaced.Settings, "now", scope, "recorded_at", replaced.RecordedAt)
	}
	rt.scope.pinned.Store(true)
	return nil
}

// pinKeyScopes pins every route's key scope (pinKeyScope) and returns the
// first refusal, not logged, or error: Run's, which says it.
func (p *Proxy) pinKeyScopes(ctx context.Context) error {
	for _, rt := range p.routes {
		if err := p.pinKeyScope(ctx, rt, false); err != nil {
			return err
		}
	}
	return nil
}

// keyScopeRefused answers a protected request of a route whose key scope
// could not be pinned.
func (p *Proxy) keyScopeRefused(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, opledger.ErrKeyScopeChanged) {
		writeProblem(w, r, http.StatusInternalServerError, "key_scope_changed",
			"this upstream's tenant or credential_header differs from the one its operations were recorded under, and repeats of earlier requests would be forwarded again; "+
				"nothing was recorded or forwarded. The proxy's log says what changed", nil)
		return
	}
	p.internal(w, r, p.log, err)
}
