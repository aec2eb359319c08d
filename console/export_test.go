package console

import (
	"errors"
	"html/template"
)

// BreakPage replaces the template of page with one that writes the start
// of a page, then fails.
func (c *Console) BreakPage(page string) {
	c.pages[page] = template.Must(template.New(page).Funcs(template.FuncMap{
		"fail": func() (string, error) { return "", errors.New("a broken template") },
	}).Parse(`<!doctype html><p id="half">the start of the page</p>{{fail}}`))
}

// SetQueueLimit changes how many operations of each state the queue shows.
func (c *Console) SetQueueLimit(n int) { c.queueLimit = n }

// LabDir is the directory of the lab's scratch ledger, "" until the lab
// is first used and after Close.
func (c *Console) LabDir() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.labDir
}

// SetPageSize changes how many operations a page of the operations list
// shows.
func (c *Console) SetPageSize(n int) { c.pageSize = n }

// SetWorkflowsPageSize changes how many workflows a page of the workflows
// list shows.
func (c *Console) SetWorkflowsPageSize(n int) { c.workflowsPageSize = n }

// SetEventsPageSize changes how many events a page of the events list
// shows.
func (c *Console) SetEventsPageSize(n int) { c.eventsPageSize = n }
