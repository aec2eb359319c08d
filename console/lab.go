package console

import (
	"errors"
	"net/http"
	"net/url"

	"github.com/opledger/opledger/lab"
)

// labView is one scenario as the lab page shows it.
type labView struct {
	Scenario lab.Scenario
	Counters lab.ScenarioCounters
	State    string
	Steps    []lab.StepResult
}

// playground returns the signed-in tenant's playground of scenario name,
// starting it on first use. Each lives as long as the console, in memory;
// its operations are in the real store under a "lab-…" tenant of their
// own.
func (c *Console) playground(r *http.Request, s *session, name string) (*lab.Playground, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	id := s.tenant + "/" + name
	if p, ok := c.labs[id]; ok {
		return p, nil
	}
	p, err := lab.NewPlayground(r.Context(), c.ledger, name)
	if err != nil {
		return nil, err
	}
	c.labs[id] = p
	return p, nil
}

// labPage shows the interactive scenarios side by side.
func (c *Console) labPage(w http.ResponseWriter, r *http.Request, s *session) {
	var views []labView
	for _, sc := range lab.Scenarios() {
		p, err := c.playground(r, s, sc.Name)
		if err != nil {
			c.fail(w, r, http.StatusServiceUnavailable, "The lab could not start.", err)
			return
		}
		v := labView{Scenario: sc, Counters: p.Counters(), State: "not recorded yet", Steps: p.History()}
		if n := len(v.Steps); n > 0 {
			v.State = v.Steps[n-1].State
		}
		views = append(views, v)
	}
	c.render(w, http.StatusOK, "lab", map[string]any{"Title": "Lab", "Tenant": s.tenant, "CSRF": s.csrf, "Scenarios": views,
		"Key": lab.OperationKey, "Order": lab.OrderRef})
}

// labAction plays a step, or resets or replays a scenario, then shows the
// page again at that scenario.
func (c *Console) labAction(w http.ResponseWriter, r *http.Request, s *session) {
	name := r.PathValue("scenario")
	if _, ok := lab.FindScenario(name); !ok {
		c.fail(w, r, http.StatusNotFound, "The lab has no such scenario.", nil)
		return
	}
	p, err := c.playground(r, s, name)
	if err != nil {
		c.fail(w, r, http.StatusServiceUnavailable, "The lab could not start.", err)
		return
	}
	switch r.PostForm.Get("do") {
	case "reset":
		err = p.Reset(r.Context())
	case "replay":
		_, err = p.Replay(r.Context())
	default:
		_, err = p.Step(r.Context(), r.PostForm.Get("step"))
		if errors.Is(err, lab.ErrUnknownAction) {
			c.fail(w, r, http.StatusBadRequest, "That scenario has no such step.", nil)
			return
		}
	}
	if err != nil {
		c.fail(w, r, http.StatusServiceUnavailable, "The step could not be played.", err)
		return
	}
	http.Redirect(w, r, "/lab#"+url.PathEscape(name), http.StatusSeeOther)
}
