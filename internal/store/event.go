package store

import (
	"context"
	"time"
)

// Event is one row of the events table: an inbound notification, unique by
// (tenant, source, event_id). Only a digest of its payload is kept: the
// payload's content lives on in the operations it produced.
type Event struct {
	Tenant     string
	Source     string
	EventID    string
	Type       string
	OccurredAt time.Time
	// PayloadSHA256 is the hex SHA-256 of the first delivery's payload:
	// of its canonical JSON, or of its raw bytes when it has none or the
	// event was recorded before digests were canonical.
	PayloadSHA256 string
	// Rule is the mapping rule that matched, "" when none did.
	Rule string
	// Status is applied, out_of_order, conflict or unmapped.
	Status string
	// Reason explains a status other than applied.
	Reason string
	// ObjectKey and OrderValue identify the object the event concerns and
	// its position in that object's history, when the rule declares them.
	ObjectKey  string
	OrderValue string
	// Operations are the keys of the operations the event produced (or
	// matched), in the rule's order.
	Operations []string
	ReceivedAt time.Time
}

// Delivery is one row of the deliveries table: one arrival of an event.
type Delivery struct {
	ID         int64
	Tenant     string
	Source     string
	EventID    string
	DeliveryID string
	ReceivedAt time.Time
	// Duplicate is true for every arrival after the first.
	Duplicate bool
	// PayloadSHA256 is the hex SHA-256 of this arrival's payload, as its
	// event's is: on a repeat, the event's own digest when the payload
	// matches it (canonically or by its raw bytes), so that the arrival's
	// payload differs exactly when the two digests do. Deliveries recorded
	// before digests were canonical hold the digest of their raw bytes.
	PayloadSHA256 string
}

// EventObject is one row of the event_objects table: the newest applied
// position of an object that mapping rules track for ordering.
type EventObject struct {
	Tenant     string
	Source     string
	ObjectKey  string
	OrderValue string
	// EventID is the event that set OrderValue.
	EventID   string
	Revision  int64
	UpdatedAt time.Time
}

// Workflow is one row of the workflows table.
type Workflow struct {
	Tenant string
	Key    string
	// Fingerprint is of the steps as first recorded.
	Fingerprint string
	// Definition is the JSON step definitions, including revisions and
	// pre-approvals made since.
	Definition []byte
	Owner      string
	// CurrentStep is the index of the first step that has not succeeded,
	// as of the last advance; CurrentKey is that step's operation key.
	CurrentStep int
	CurrentKey  string
	// Done is true once every step succeeded, or once an operator
	// cancelled the workflow (CurrentStep is then the step it ended at).
	Done      bool
	Revision  int64
	CreatedAt time.Time
	UpdatedAt time.Time
}

// EventListParams filter and page a list of events, newest first.
type EventListParams struct {
	Tenant string
	Source string
	Status string
	// AfterReceivedAt, AfterSource and AfterEventID are the position of the
	// last row of the previous page; zero AfterReceivedAt means the first page.
	AfterReceivedAt time.Time
	AfterSource     string
	AfterEventID    string
	Limit           int
}

// WorkflowListParams filter and page a list of workflows, by key.
type WorkflowListParams struct {
	Tenant string
	// Prefix keeps the workflows whose key starts with it.
	Prefix string
	// Open keeps the workflows not done.
	Open bool
	// AfterKey is the key of the last row of the previous page; empty
	// means the first page.
	AfterKey string
	Limit    int
}

// EventCounts are the event figures of DESIGN.md section 10.
type EventCounts struct {
	// ByStatus counts events by status, those retention forgot included.
	ByStatus map[string]int
	// KeptByStatus counts by status the events still stored (those the
	// event list can show).
	KeptByStatus map[string]int
	// Deliveries counts every arrival, the first ones included.
	Deliveries int
	// DuplicateDeliveries counts arrivals of an event already received.
	DuplicateDeliveries int
}

// EventReader is the read side of events, deliveries, tracked objects and
// workflows. It is part of Reader.
type EventReader interface {
	// GetEvent reads one event; ErrNotFound if unknown.
	GetEvent(ctx context.Context, tenant, source, eventID string) (*Event, error)
	// ListEvents lists events newest first.
	ListEvents(ctx context.Context, p EventListParams) ([]*Event, error)
	// ListDeliveries lists the arrivals of an event, oldest first.
	ListDeliveries(ctx context.Context, tenant, source, eventID string) ([]*Delivery, error)
	// GetEventObject reads the tracked position of an object; ErrNotFound
	// if none.
	GetEventObject(ctx context.Context, tenant, source, objectKey string) (*EventObject, error)
	// EventCounts counts a tenant's events and deliveries ("" for all
	// tenants).
	EventCounts(ctx context.Context, tenant string) (*EventCounts, error)
	// GetWorkflow reads a workflow; ErrNotFound if unknown. Inside a write
	// transaction stores that lock rows lock it until the transaction ends.
	GetWorkflow(ctx context.Context, tenant, key string) (*Workflow, error)
	// ListWorkflows lists a tenant's workflows by key.
	ListWorkflows(ctx context.Context, p WorkflowListParams) ([]*Workflow, error)
	// WorkflowsReady lists workflows that are not done and whose current
	// step has succeeded (the next step is due to be recorded): tenant's
	// only, or every tenant's when tenant is empty, ordered by (tenant,
	// key) and starting after the position after (zero value: from the
	// start; for a tenant's, only its Key counts). A tenant's list reads
	// none of the other tenants' workflows.
	WorkflowsReady(ctx context.Context, tenant string, after OperationID, limit int) ([]OperationID, error)
}

// EventTx is the write side of events and workflows. It is part of Tx.
type EventTx interface {
	// InsertEvent inserts a new event; ErrConflict if (tenant, source,
	// event_id) exists.
	InsertEvent(ctx context.Context, e *Event) error
	// UpdateEvent writes the outcome of an event this transaction
	// inserted: its rule, status, reason, object key, order value and
	// operations.
	UpdateEvent(ctx context.Context, e *Event) error
	// InsertDelivery appends an arrival and sets its ID.
	InsertDelivery(ctx context.Context, d *Delivery) error
	// EventObjectExists reports whether an object is tracked, without
	// locking its row (GetEventObject inside a write transaction may): an
	// event that holds operations already checks with it whether another
	// event tracked the object meanwhile, and takes no lock out of the
	// order of docs/scaling.md ("One lock order") to do so.
	EventObjectExists(ctx context.Context, tenant, source, objectKey string) (bool, error)
	// WorkflowExists reports whether a workflow is stored, without locking
	// its row (GetWorkflow inside a write transaction may): a transaction
	// that holds operations already checks with it whether a workflow it
	// read as missing was stored meanwhile, and takes no lock out of order
	// to do so.
	WorkflowExists(ctx context.Context, tenant, key string) (bool, error)
	// InsertEventObject inserts a tracked object; ErrConflict if it exists.
	InsertEventObject(ctx context.Context, o *EventObject) error
	// UpdateEventObject writes o if the stored revision still equals
	// prevRevision; otherwise ErrConflict. o.Revision must already hold the
	// new revision.
	UpdateEventObject(ctx context.Context, o *EventObject, prevRevision int64) error
	// LockOperationKey holds a lock on an operation key until the
	// transaction ends, whether or not the operation exists. A transaction
	// that creates a workflow (for each of its step keys, in order) and
	// one that records an operation at one of those keys both take it
	// before they read, so that the second sees what the first wrote. A
	// store whose write transactions run one at a time (SQLite) has
	// nothing to do.
	LockOperationKey(ctx context.Context, tenant, key string) error
	// InsertWorkflow inserts a new workflow; ErrConflict if the key exists.
	InsertWorkflow(ctx context.Context, w *Workflow) error
	// UpdateWorkflow writes w if the stored revision still equals
	// prevRevision; otherwise ErrConflict. w.Revision must already hold the
	// new revision.
	UpdateWorkflow(ctx context.Context, w *Workflow, prevRevision int64) error
	// CompactDeliveriesBefore deletes up to limit deliveries received
	// before t, oldest first, adding them to their tenants' compacted
	// delivery counts (which EventCounts includes); it returns how many it
	// deleted. Transactions running it at once never count one twice.
	CompactDeliveriesBefore(ctx context.Context, t time.Time, limit int) (int, error)
	// ForgetEventsBefore deletes up to limit events received before t,
	// oldest first, with every delivery they still have, adding both to
	// the compacted counts (events by their status); it returns the events
	// deleted. Transactions running it at once never count one twice.
	ForgetEventsBefore(ctx context.Context, t time.Time, limit int) (int, error)
	// ForgetEventObjectsBefore deletes up to limit tracked objects last
	// updated before t; it returns how many it deleted.
	ForgetEventObjectsBefore(ctx context.Context, t time.Time, limit int) (int, error)
	// ForgetWorkflowsBefore deletes up to limit finished (done) workflows
	// last updated before t; it returns how many it deleted.
	ForgetWorkflowsBefore(ctx context.Context, t time.Time, limit int) (int, error)
}
