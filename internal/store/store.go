// Package store defines the storage seam of opledger: plain row types and the
// Store interface that every driver (sqlitestore, pgstore) implements.
//
// A store knows nothing about the operation state machine. The root package
// reads rows, decides a transition in Go, and writes the result back with a
// conditional update on the row's revision, so every state change is one
// compare-and-set whatever the driver. Drivers must pass the conformance suite
// in package storetest.
//
// Allowed imports: the standard library only.
package store

import (
	"context"
	"errors"
	"time"
)

// ErrNotFound is returned when a row does not exist.
var ErrNotFound = errors.New("not found")

// ErrConflict is returned when a conditional write lost a race: a unique key
// already exists, or the row's revision moved on. The caller re-reads and
// decides again.
var ErrConflict = errors.New("write conflict")

// Operation is one row of the operations table.
type Operation struct {
	Tenant           string
	Key              string
	Action           string
	Destination      string
	Version          int64
	Fingerprint      string
	Payload          []byte
	SensitiveFields  []string
	Owner            string
	SourceEvent      string
	RequiresApproval bool
	ApprovedBy       string

	State       string
	FailureKind string

	Dispatched        bool
	FirstDispatchedAt time.Time
	AttemptCount      int
	FencingToken      int64
	CurrentAttemptID  string
	LeaseExpiresAt    time.Time
	NotBefore         time.Time
	ReviewBy          time.Time
	UnresolvedSince   time.Time
	Protected         bool

	DestinationRef   string
	Response         []byte
	LastError        string
	DuplicateEffects int

	Revision  int64
	CreatedAt time.Time
	UpdatedAt time.Time
}

// Attempt is one row of the attempts table: one technical try at an operation.
type Attempt struct {
	ID             string
	Tenant         string
	Key            string
	Number         int
	FencingToken   int64
	Worker         string
	Protected      bool
	ClaimedAt      time.Time
	LeaseExpiresAt time.Time
	DispatchedAt   time.Time
	FinishedAt     time.Time
	Outcome        string
	DestinationRef string
	Response       []byte
	Error          string
	Stale          bool
}

// TimelineEntry is one row of the timeline table.
type TimelineEntry struct {
	ID        int64
	Tenant    string
	Key       string
	At        time.Time
	Actor     string
	AttemptID string
	Event     string
	FromState string
	ToState   string
	Evidence  string
}

// Tombstone is what remains of a final operation after its retention period.
type Tombstone struct {
	Tenant         string
	Key            string
	Fingerprint    string
	State          string
	FailureKind    string
	DestinationRef string
	CreatedAt      time.Time
	FinishedAt     time.Time
	CompactedAt    time.Time
}

// OperationID names an operation within the store.
type OperationID struct {
	Tenant string
	Key    string
}

// ListParams filters and pages a list of operations, newest first.
type ListParams struct {
	Tenant      string
	States      []string
	Owner       string
	Destination string
	// After is the position of the last row of the previous page; zero
	// CreatedAt means the first page.
	AfterCreatedAt time.Time
	AfterKey       string
	Limit          int
}

// Reader is the read side of the store, usable inside and outside a
// transaction.
type Reader interface {
	// Now returns the store's clock. Inside a transaction it is read once
	// and stays fixed for the transaction.
	Now(ctx context.Context) (time.Time, error)
	GetOperation(ctx context.Context, tenant, key string) (*Operation, error)
	GetTombstone(ctx context.Context, tenant, key string) (*Tombstone, error)
	GetAttempt(ctx context.Context, tenant, key, id string) (*Attempt, error)
	ListOperations(ctx context.Context, p ListParams) ([]*Operation, error)
	ListAttempts(ctx context.Context, tenant, key string) ([]*Attempt, error)
	ListTimeline(ctx context.Context, tenant, key string) ([]*TimelineEntry, error)
	// ExpiredLeases lists in_progress operations whose lease ended before now.
	ExpiredLeases(ctx context.Context, now time.Time, limit int) ([]OperationID, error)
	// DueOperations lists pending operations of a tenant whose not_before has
	// passed, oldest first, optionally for some destinations only.
	DueOperations(ctx context.Context, tenant string, destinations []string, now time.Time, limit int) ([]OperationID, error)
	// FinalBefore lists succeeded and failed operations last updated before t.
	FinalBefore(ctx context.Context, t time.Time, limit int) ([]OperationID, error)
	// CountByState counts a tenant's operations by state.
	CountByState(ctx context.Context, tenant string) (map[string]int, error)
}

// Tx is a read-write transaction.
type Tx interface {
	Reader
	// InsertOperation inserts a new row; ErrConflict if the key exists.
	InsertOperation(ctx context.Context, op *Operation) error
	// UpdateOperation writes op if the stored revision still equals
	// prevRevision; otherwise ErrConflict. op.Revision must already hold the
	// new revision.
	UpdateOperation(ctx context.Context, op *Operation, prevRevision int64) error
	// DeleteOperation removes an operation with its attempts and timeline.
	DeleteOperation(ctx context.Context, tenant, key string) error
	InsertAttempt(ctx context.Context, a *Attempt) error
	UpdateAttempt(ctx context.Context, a *Attempt) error
	AppendTimeline(ctx context.Context, e *TimelineEntry) error
	// UpsertTombstone writes or replaces the tombstone of a key.
	UpsertTombstone(ctx context.Context, t *Tombstone) error
	// DeleteTombstonesBefore removes tombstones compacted before t.
	DeleteTombstonesBefore(ctx context.Context, t time.Time) (int, error)
}

// Store is a storage driver.
type Store interface {
	// Update runs fn in a read-write transaction and commits it when fn
	// returns nil. Conflicts surface as ErrConflict.
	Update(ctx context.Context, fn func(ctx context.Context, tx Tx) error) error
	// View runs fn with a reader outside any write transaction.
	View(ctx context.Context, fn func(ctx context.Context, r Reader) error) error
	// Migrate brings the schema to the newest version.
	Migrate(ctx context.Context) error
	// Ping checks that the store is reachable.
	Ping(ctx context.Context) error
	// Name is the driver's name, "sqlite" or "postgres".
	Name() string
	Close() error
}
