package console

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"os"
	"path/filepath"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/lab"
)

// labView is one scenario as the lab page shows it.
type labView struct {
	Scenario lab.Scenario
	Counters lab.ScenarioCounters
	State    string
	// Steps are the newest steps played (lab.MaxHistory at most), Earlier
	// counts those played before them.
	Steps   []lab.StepResult
	Earlier int
}

// errConsoleClosed is returned by the lab after Close.
var errConsoleClosed = errors.New("console: closed")

// playground returns the signed-in tenant's playground of scenario name,
// starting it on first use. Each lives as long as the console, in memory,
// and plays on the console's scratch ledger (labLedger), never on the
// store the console serves.
func (c *Console) playground(r *http.Request, s *session, name string) (*lab.Playground, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	id := s.tenant + "/" + name
	if p, ok := c.labs[id]; ok {
		return p, nil
	}
	l, err := c.labLedger(r.Context())
	if err != nil {
		return nil, err
	}
	p, err := lab.NewPlayground(r.Context(), l, name)
	if err != nil {
		return nil, err
	}
	c.labs[id] = p
	return p, nil
}

// labLedger returns the scratch ledger of the lab, opening it on first
// use: a SQLite file in a temporary directory of its own. The lab's
// simulated actions, confirmed effects and unresolved operations stay out
// of the served store, so they count in none of its metrics, lists or
// retention, and no executor of the server ever claims them. The caller
// holds c.mu.
func (c *Console) labLedger(ctx context.Context) (*opledger.Ledger, error) {
	if c.closed {
		return nil, errConsoleClosed
	}
	if c.lab != nil {
		return c.lab, nil
	}
	dir, err := os.MkdirTemp("", "opledger-console-lab-")
	if err != nil {
		return nil, err
	}
	l, err := opledger.Open(ctx, "sqlite:"+filepath.Join(dir, "lab.db"), opledger.Options{})
	if err != nil {
		return nil, errors.Join(err, os.RemoveAll(dir))
	}
	c.lab, c.labDir = l, dir
	return l, nil
}

// Close closes the lab's scratch ledger and removes its file; the lab
// answers 503 afterwards. The ledger the console serves is the caller's
// to close.
func (c *Console) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	c.labs = map[string]*lab.Playground{}
	if c.lab == nil {
		return nil
	}
	err := errors.Join(c.lab.Close(), os.RemoveAll(c.labDir))
	c.lab, c.labDir = nil, ""
	return err
}

// labPage shows the interactive scenarios side by side.
func (c *Console) labPage(w http.ResponseWriter, r *http.Request, s *session) {
	var views []labView
	for _, sc := range lab.Scenarios() {
		p, err := c.playground(r, s, sc.Name)
		if err != nil {
			c.fail(w, r, s, http.StatusServiceUnavailable, "The lab could not start.", err)
			return
		}
		steps, earlier := p.Recent()
		v := labView{Scenario: sc, Counters: p.Counters(), State: "not recorded yet", Steps: steps, Earlier: earlier}
		if n := len(v.Steps); n > 0 {
			v.State = v.Steps[n-1].State
		}
		views = append(views, v)
	}
	c.renderSigned(w, s, http.StatusOK, "lab", map[string]any{"Title": "Lab", "Scenarios": views,
		"Key": lab.OperationKey, "Order": lab.OrderRef})
}

// labResetPage asks before a scenario is reset, which discards its steps
// and counters: the lab page's Reset button opens it (a GET, which
// changes nothing), and only its confirming POST resets.
func (c *Console) labResetPage(w http.ResponseWriter, r *http.Request, s *session) {
	if name, p, ok := c.scenarioOf(w, r, s); ok {
		c.labConfirmReset(w, s, name, p)
	}
}

// scenarioOf is the playground of the request's scenario, or false after
// answering that there is no such scenario or that the lab did not start.
func (c *Console) scenarioOf(w http.ResponseWriter, r *http.Request, s *session) (string, *lab.Playground, bool) {
	name := r.PathValue("scenario")
	if _, ok := lab.FindScenario(name); !ok {
		c.fail(w, r, s, http.StatusNotFound, "The lab has no such scenario.", nil)
		return "", nil, false
	}
	p, err := c.playground(r, s, name)
	if err != nil {
		c.fail(w, r, s, http.StatusServiceUnavailable, "The lab could not start.", err)
		return "", nil, false
	}
	return name, p, true
}

// labConfirmReset renders the confirmation of a reset of scenario name,
// whose playground is p: what it would discard, a form that resets (with
// the session's CSRF token, as every console form) and a way back.
func (c *Console) labConfirmReset(w http.ResponseWriter, s *session, name string, p *lab.Playground) {
	sc, _ := lab.FindScenario(name)
	steps, earlier := p.Recent()
	c.renderSigned(w, s, http.StatusOK, "labreset", map[string]any{"Title": "Reset “" + sc.Title + "”?",
		"Scenario": sc, "Counters": p.Counters(), "Played": len(steps) + earlier})
}

// labAction plays a step, or resets or replays a scenario, then shows the
// page again at that scenario. A reset is done only when the form
// confirms it (confirm=yes, from labResetPage); otherwise it is asked for.
func (c *Console) labAction(w http.ResponseWriter, r *http.Request, s *session) {
	name, p, ok := c.scenarioOf(w, r, s)
	if !ok {
		return
	}
	var err error
	switch r.PostForm.Get("do") {
	case "reset":
		if r.PostForm.Get("confirm") != "yes" {
			// A reset that was not confirmed (a lab page from before
			// Reset asked, or a form of its own) only asks.
			c.labConfirmReset(w, s, name, p)
			return
		}
		err = p.Reset(r.Context())
	case "replay":
		_, err = p.Replay(r.Context())
	default:
		_, err = p.Step(r.Context(), r.PostForm.Get("step"))
		if errors.Is(err, lab.ErrUnknownAction) {
			c.fail(w, r, s, http.StatusBadRequest, "That scenario has no such step.", nil)
			return
		}
	}
	if err != nil {
		c.fail(w, r, s, http.StatusServiceUnavailable, "The step could not be played.", err)
		return
	}
	http.Redirect(w, r, "/lab#"+url.PathEscape(name), http.StatusSeeOther)
}
