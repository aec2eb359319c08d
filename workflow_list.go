package opledger

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/opledger/opledger/internal/store"
)

// WorkflowListOptions filter and page ListWorkflows.
type WorkflowListOptions struct {
	// Prefix keeps the workflows whose key starts with it (a business
	// prefix such as "onboarding:").
	Prefix string
	// Open keeps the workflows not finished: some step has not succeeded
	// (running, awaiting approval, held or failed). A workflow whose last
	// step succeeded since the workflow was last advanced is left out of
	// its page, so a page may hold fewer than Limit.
	Open bool
	// Limit is the page size: 0 for 50, at most MaxWorkflowListLimit; a
	// negative one is refused.
	Limit int
	// Cursor continues a previous page (WorkflowPage.NextCursor) of the
	// same filters.
	Cursor string
}

// WorkflowPage is one page of workflows, by key.
type WorkflowPage struct {
	// Items are the page's workflows, by key.
	Items []*Workflow `json:"items"`
	// NextCursor fetches the next page; empty on the last page.
	NextCursor string `json:"next_cursor"`
	// Now is the ledger's clock (Ledger.Now) when the page was read, as
	// Page.Now: what the workflows' times are measured against. Zero in a
	// page from a server older than this field.
	Now time.Time `json:"now"`
}

// MaxWorkflowListLimit is the largest page ListWorkflows returns. It is
// below MaxListLimit because each workflow is read with all its steps.
const MaxWorkflowListLimit = 200

// DefaultWorkflowListLimit is how many workflows a list holds when it is
// given no limit.
const DefaultWorkflowListLimit = 50

// ListWorkflows returns the tenant's workflows in key order, each as
// GetWorkflow returns it (its status, reason and steps), filtered by key
// prefix and by whether it is finished, and paged.
func (l *Ledger) ListWorkflows(ctx context.Context, o WorkflowListOptions) (*WorkflowPage, error) {
	p := store.WorkflowListParams{Tenant: l.tenant, Prefix: o.Prefix, Open: o.Open}
	var err error
	if p.Limit, err = pageLimit(o.Limit, DefaultWorkflowListLimit, MaxWorkflowListLimit); err != nil {
		return nil, err
	}
	if o.Prefix != "" {
		// A prefix is the start of a key, so it is a valid key itself.
		if err := ValidateKey(o.Prefix); err != nil {
			return nil, fmt.Errorf("prefix: %w", err)
		}
	}
	scope := workflowListScope(p)
	if o.Cursor != "" {
		key, err := decodeKeyCursor(o.Cursor, scope)
		if err != nil {
			return nil, err
		}
		p.AfterKey = key
	}
	page := &WorkflowPage{Items: []*Workflow{}}
	// Fetch one more than asked to know whether a next page exists.
	p.Limit++
	err = l.store.View(ctx, func(ctx context.Context, r store.Reader) error {
		rows, err := r.ListWorkflows(ctx, p)
		if err != nil {
			return err
		}
		if page.Now, err = l.now(ctx, r); err != nil {
			return err
		}
		for i, row := range rows {
			if i == p.Limit-1 {
				page.NextCursor = encodeKeyCursor(rows[i-1].Key, scope)
				break
			}
			w, err := l.workflowIn(ctx, r, row)
			if err != nil {
				// Named, the row's key would reach the caller's log,
				// which asked for no key: keys may carry personal data.
				return withoutKey(row.Key, err)
			}
			if o.Open && w.Status == WorkflowSucceeded {
				continue // its last step succeeded since the last advance
			}
			page.Items = append(page.Items, w)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return page, nil
}

// workflowListScope names the list a workflow cursor belongs to, as
// listScope does for operations.
func workflowListScope(p store.WorkflowListParams) string {
	scope := "workflows\x00" + p.Prefix
	if p.Open {
		scope += "\x00open"
	}
	h := sha256.Sum256([]byte(scope))
	return hex.EncodeToString(h[:4])
}

func encodeKeyCursor(key, scope string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(scope + "|" + key))
}

func decodeKeyCursor(c, scope string) (string, error) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err == nil {
		if key, sameList := strings.CutPrefix(string(b), scope+"|"); sameList && ValidateKey(key) == nil {
			return key, nil
		}
	}
	return "", invalidInput("cursor does not continue this list: it was issued for another prefix or open filter, or not by opledger (give the same prefix and open filter, or start without a cursor)")
}
