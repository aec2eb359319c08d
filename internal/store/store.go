// Package store defines the storage seam of opledger: plain row types and the
// Store interface that every driver (sqlitestore, pgstore) implements.
//
// A store knows nothing about the operation state machine. The root package
// reads rows, decides a transition in Go, and writes the result back with a
// conditional update on the row's revision, so every state change is one
// compare-and-set whatever the driver. Drivers must pass the conformance suite
// in package storetest.
//
// Allowed imports: internal/store/migrate, the standard library.
package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/opledger/opledger/internal/store/migrate"
)

// ErrNotFound is returned when a row does not exist.
var ErrNotFound = errors.New("not found")

// ErrNotLedger is returned by Migrate for a database (or PostgreSQL
// schema) that holds another application's tables and no opledger
// ledger: migrating would mix the ledger's tables with that
// application's. Nothing is written.
var ErrNotLedger = errors.New("not an opledger ledger")

// FirstMigration is the name every ledger records for its version 1: a
// schema_migrations table without it is another application's.
const FirstMigration = "001_init.sql"

// ErrBusy is returned when another connection or process held a lock the
// store needed for longer than the store waits for it (SQLite's busy
// timeout, a PostgreSQL lock_timeout): an operator's VACUUM, another
// process's long write. The transaction was rolled back, so nothing of it
// was written; it may be tried again.
var ErrBusy = errors.New("the ledger is busy: another process holds its write lock; nothing was recorded, try again")

// ErrUnavailable is returned when the database server could not be
// reached: a connection to it could not be made (it is down, restarting
// or failing over, or the network to it is gone), or the connection was
// lost in a read or before the transaction's COMMIT was sent. Nothing was
// written; it may be tried again.
var ErrUnavailable = errors.New("the ledger's store does not answer; nothing was recorded, try again")

// ErrFull is returned when the database's disk (or its size limit) is
// full. The transaction was rolled back, so nothing of it was written;
// writes fail until space is freed.
var ErrFull = errors.New("the ledger's disk is full; nothing was recorded")

// ErrSchemaNewer is returned by a write transaction (Update, and the
// conditional writes) once a newer release has migrated the store's
// schema past the newest migration this build embeds, and by Migrate on
// such a store: this release's writes are made for its own schema, so
// they stop rather than write what the newer schema no longer means.
// Nothing of the transaction was written.
var ErrSchemaNewer = migrate.ErrNewer

// ErrClosed is returned by every method of a Store after Close: the
// ledger was closed, nothing was read or written.
var ErrClosed = errors.New("the ledger is closed")

// ClosedDuring is a call's error err, marked ErrClosed as well when the
// store was closed while the call ran (closed): its connection was closed
// under it, and a caller that stops on ErrClosed stops on this too.
func ClosedDuring(err error, closed bool) error {
	if err != nil && closed && !errors.Is(err, ErrClosed) {
		return fmt.Errorf("%w (%w)", ErrClosed, err)
	}
	return err
}

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
	// StateSince is when the operation entered its state, or, awaiting
	// approval, when the version that awaits it was recorded. Zero on a
	// row that had succeeded before migration 023.
	StateSince time.Time
	// EarlierPayloads is a JSON array of the payloads that revisions
	// replaced while the operation had sensitive fields, oldest first (nil:
	// none; migration 027). They are read only to mask those versions'
	// sensitive values in what is stored and shown, as the payload's.
	EarlierPayloads []byte
	Protected       bool
	// ProtectedUntil is when the protection of a protected retry ends.
	ProtectedUntil time.Time

	DestinationRef   string
	Response         []byte
	LastError        string
	DuplicateEffects int

	// Revision grows by one with every write of the row; a new row starts
	// at its creation time in microseconds, so that a key recorded again
	// never repeats a revision of its earlier life.
	Revision  int64
	CreatedAt time.Time
	UpdatedAt time.Time
}

// Process is one row of the processes table (migration 024): a process
// that maintains the ledger, as it last announced itself.
type Process struct {
	ID        string
	Host      string
	PID       int
	StartedAt time.Time
	SeenAt    time.Time
	// Settings are digests of the settings that act on the whole ledger,
	// by name.
	Settings map[string]string
}

// KeyScope is one row of the key_scopes table (migration 025): the
// settings a destination's operation keys are derived from, by name.
type KeyScope struct {
	Destination string
	Settings    map[string]string
	RecordedAt  time.Time
}

// Attempt is one row of the attempts table: one technical try at an operation.
type Attempt struct {
	ID     string
	Tenant string
	Key    string
	// Destination is the operation's, which never changes once recorded:
	// kept on the attempt so that counting attempts by destination reads
	// the attempts alone.
	Destination    string
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
	// LateOutcome is the outcome of a report that arrived after the attempt
	// had ended; Outcome stays what the attempt ended with.
	LateOutcome string
	// Version is the operation's content version the attempt was claimed
	// for (migration 026); 0 for attempts claimed before, not known.
	Version int64
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
	// DuplicateEffects carries the operation's duplicate-effect count.
	DuplicateEffects int
	// Version is the operation's content version (its fingerprint covers
	// it); 0 for a tombstone written before migration 018.
	Version int64
	// AttemptCount is how many attempts the operation had; 0 for a
	// tombstone written before migration 020.
	AttemptCount int
	CreatedAt    time.Time
	FinishedAt   time.Time
	CompactedAt  time.Time
}

// Compaction is an operation to replace with its tombstone, if the
// operation's revision is still Revision.
type Compaction struct {
	Tombstone
	Revision int64
}

// TimelineCount selects, for Reader.CountTimeline, entries of one
// operation's timeline.
type TimelineCount struct {
	Tenant, Key string
	// SinceState: only the entries after the operation's newest entry
	// into this state (its ToState) count; all of them when it has none.
	SinceState string
	// Event is the event of the entries that count.
	Event string
	// ReasonPrefix is text that the reason of the entries that count
	// starts with (compared byte for byte, no pattern): the reason is
	// their evidence after its first "; ", as a deferral writes it (its
	// next check, then why it was put off); an evidence without "; " has
	// none. "" leaves the evidence out.
	ReasonPrefix string
}

// DueParams selects pending operations that may be claimed now.
type DueParams struct {
	// Tenant limits the search; "" searches all tenants.
	Tenant string
	// Destinations limits the search; empty means all.
	Destinations []string
	// Skip leaves these operations out, due or not (the operations a
	// process is still calling in a call it stopped waiting for); empty
	// leaves none out.
	Skip  []OperationID
	Now   time.Time
	Limit int
}

// Token is an API bearer token; only the SHA-256 of its secret is stored.
type Token struct {
	ID     string
	Tenant string
	Name   string
	Hash   string
	// Access is what the token may do, in the root package's words for
	// it: "read-write", "read-only" or "worker" (migration 022; the
	// stores refuse any other word, the empty one too, and also keep
	// 021's read_only, true unless "read-write", for the processes of the
	// release before).
	Access    string
	CreatedAt time.Time
	RevokedAt time.Time
	// LastUsedAt is when the token was last used, to within the
	// resolution the ledger writes it with; zero if never.
	LastUsedAt time.Time
}

// Session is a console sign-in; only the SHA-256 of its secret is stored.
type Session struct {
	Hash      string
	TokenID   string
	Tenant    string
	CreatedAt time.Time
	ExpiresAt time.Time
	// TokenRevokedAt is when the session's token was revoked (zero while
	// it is active); read, never written.
	TokenRevokedAt time.Time
	// TokenName is the name of the session's token; read, never written.
	TokenName string
	// TokenAccess is the access of the session's token (Token.Access);
	// read, never written.
	TokenAccess string
}

// EventWorkflowCancelled is the timeline event that an operator's
// cancellation of a workflow adds to the failed operation of the step it
// cancels the workflow at: that operation needs no decision any more
// (ListParams.ExceptCancelled).
const EventWorkflowCancelled = "workflow cancelled"

// Recovery is one operator decision on an uncertain or held operation,
// kept for the recovery figures (Stats) after the operation and its
// tombstone are gone: without the operation's key, which the stores
// write as "" (an older release wrote it; ForgetRecoveryKeysBefore clears
// it).
type Recovery struct {
	Tenant   string
	Decision string
	At       time.Time
	Waited   time.Duration
}

// AttemptCount counts attempts of one destination with one outcome.
type AttemptCount struct {
	Destination string
	Outcome     string
	Count       int
}

// Stats are the counted figures of DESIGN.md section 10.
type Stats struct {
	ByState          map[string]int
	Attempts         []AttemptCount
	ConfirmedEffects int
	DuplicateEffects int
	Recoveries       int
	RecoveryTotal    time.Duration
	RecoveryP90      time.Duration
	// RecoveryBuckets[i] counts recoveries that waited at most buckets[i].
	RecoveryBuckets []int
}

// OperationID names an operation within the store.
type OperationID struct {
	Tenant string
	Key    string
}

// FinalParams pages the final operations retention may compact.
type FinalParams struct {
	Before time.Time
	// After is the last row of the previous page; the zero FinalRow for
	// the first page.
	After FinalRow
	Limit int
}

// FinalRow names a final operation and when it was last updated.
type FinalRow struct {
	OperationID
	UpdatedAt time.Time
}

// ListParams filters and pages a list of operations: newest first by
// (created_at, key), or, with ByReview, the held operations by (review_by,
// key), earliest review first.
type ListParams struct {
	Tenant      string
	States      []string
	Owner       string
	Destination string
	// Duplicates lists only operations with duplicate effects, through
	// the partial index of those (migration 006).
	Duplicates bool
	// ExceptCancelled leaves out the failed operations that need no
	// decision: those an operator cancelled (failure kind "cancelled"),
	// and the failed step of a workflow an operator cancelled (its
	// timeline holds an entry EventWorkflowCancelled).
	ExceptCancelled bool
	// ByReview lists held operations only (States is not read), earliest
	// review first, from the index of held operations by review time.
	ByReview bool
	// AfterAt and AfterKey are the position of the last row of the
	// previous page: its created_at (its review_by with ByReview) and its
	// key. Zero AfterAt means the first page.
	AfterAt  time.Time
	AfterKey string
	Limit    int
}

// Reader is the read side of the store, usable inside and outside a
// transaction.
type Reader interface {
	EventReader
	// Now returns the store's clock. Inside a transaction it is read once
	// and stays fixed for the transaction.
	Now(ctx context.Context) (time.Time, error)
	GetOperation(ctx context.Context, tenant, key string) (*Operation, error)
	GetTombstone(ctx context.Context, tenant, key string) (*Tombstone, error)
	GetAttempt(ctx context.Context, tenant, key, id string) (*Attempt, error)
	ListOperations(ctx context.Context, p ListParams) ([]*Operation, error)
	ListAttempts(ctx context.Context, tenant, key string) ([]*Attempt, error)
	ListTimeline(ctx context.Context, tenant, key string) ([]*TimelineEntry, error)
	// LastTimelineEntry returns the operation's newest timeline entry
	// (the last ListTimeline lists), reading that one row only;
	// ErrNotFound when the operation has none.
	LastTimelineEntry(ctx context.Context, tenant, key string) (*TimelineEntry, error)
	// CountTimeline counts the entries of an operation's timeline that p
	// selects, reading only the entries after its newest entry into
	// p.SinceState (from the newest back), not those of its earlier
	// spells in that state; 0 for an operation without entries.
	CountTimeline(ctx context.Context, p TimelineCount) (int, error)
	// ExpiredLeases lists in_progress operations whose lease ended before
	// now, in the order of (tenant, key), after the operation after (the
	// zero OperationID for the first page): a sweep pages past the
	// operations it could not settle.
	ExpiredLeases(ctx context.Context, now time.Time, after OperationID, limit int) ([]OperationID, error)
	// DueOperations lists pending operations whose not_before has passed,
	// oldest first.
	DueOperations(ctx context.Context, p DueParams) ([]OperationID, error)
	// UncertainDue lists uncertain operations whose next reconciliation
	// time has passed or is unset, of p.Tenant ("" for all) and
	// p.Destinations (empty for all), longest waiting first.
	UncertainDue(ctx context.Context, p DueParams) ([]OperationID, error)
	// FinalBefore lists succeeded and failed operations last updated
	// before p.Before, oldest first by (updated_at, tenant, key), after
	// p.After: retention pages past the operations it keeps or could not
	// compact.
	FinalBefore(ctx context.Context, p FinalParams) ([]FinalRow, error)
	// CountByState counts a tenant's operations by state.
	CountByState(ctx context.Context, tenant string) (map[string]int, error)
	// CountFailedByKind counts a tenant's failed operations by failure
	// kind; a kind with none is left out.
	CountFailedByKind(ctx context.Context, tenant string) (map[string]int, error)
	// CountFailedNeedingDecision counts a tenant's failed operations that
	// a list with ExceptCancelled keeps.
	CountFailedNeedingDecision(ctx context.Context, tenant string) (int, error)
	// TokenByHash finds an API token by the SHA-256 of its secret.
	TokenByHash(ctx context.Context, hash string) (*Token, error)
	// ListTokens lists the tokens of a tenant ("" for all), oldest first.
	ListTokens(ctx context.Context, tenant string) ([]*Token, error)
	// ListProcesses lists the processes' rows, by start time then ID.
	ListProcesses(ctx context.Context) ([]*Process, error)
	// GetKeyScope reads a destination's key scope (migration 025);
	// ErrNotFound if none is recorded.
	GetKeyScope(ctx context.Context, destination string) (*KeyScope, error)
	// SessionByHash finds a session by the SHA-256 of its secret, with
	// the revocation time of its token; ErrNotFound if there is no such
	// session or its token is gone.
	SessionByHash(ctx context.Context, hash string) (*Session, error)
	// Stats aggregates the figures of DESIGN.md section 10 for a tenant
	// ("" for all tenants).
	Stats(ctx context.Context, tenant string, buckets []time.Duration) (*Stats, error)
	// CountOverdueReviews counts the held operations of a tenant ("" for
	// all) whose review_by is before now.
	CountOverdueReviews(ctx context.Context, tenant string, now time.Time) (int, error)
	// OldestDue returns, of the pending operations of a tenant ("" for
	// all) that are due by now (not_before unset or passed), the one due
	// the longest, and when it became due: its not_before, or when it
	// became pending (state_since) if that is later. The time is zero
	// when none is due.
	OldestDue(ctx context.Context, tenant string, now time.Time) (OperationID, time.Time, error)
	// OldestAwaitingApproval returns, of the operations of a tenant (""
	// for all) awaiting approval, the one that has waited the longest, and
	// since when (its state_since: when it began to await approval, or
	// its last revision). The time is zero when none awaits.
	OldestAwaitingApproval(ctx context.Context, tenant string) (OperationID, time.Time, error)
}

// OldestDueScan finds, among pending operations read oldest first (by
// created_at), the one due the longest, for the stores' OldestDue. An
// operation became due at its not_before or when it became pending,
// whichever is later, and never before it was created: once the operations read are
// no older than the best found, none after them can beat it, and the
// scan has its answer (Concluded). That takes two rows in a backlog of
// due operations; it would read every pending operation when the oldest
// all wait for a retry time still to come, so the scan gives up after
// OldestDueScanRows, and the store then takes the minimum over the due
// operations by its index of them by not_before instead.
type OldestDueScan struct {
	ID    OperationID
	Since time.Time
	read  int
	done  bool
}

// OldestDueScanRows is how many operations an OldestDueScan reads at most:
// a store asks for one more, to see whether there were more.
const OldestDueScanRows = 1000

// Next takes the next pending operation, oldest first, and reports
// whether the scan should go on.
func (s *OldestDueScan) Next(now time.Time, id OperationID, created, notBefore, pendingSince time.Time) bool {
	if !s.Since.IsZero() && !created.Before(s.Since) {
		s.done = true // became due no earlier than it was created
		return false
	}
	if s.read++; s.read > OldestDueScanRows {
		return false // not concluded: too many waiting for their retry
	}
	if notBefore.After(now) {
		return true // not due yet
	}
	since := created
	for _, t := range []time.Time{notBefore, pendingSince} {
		if t.After(since) {
			since = t
		}
	}
	if s.Since.IsZero() || since.Before(s.Since) {
		s.ID, s.Since = id, since
	}
	return true
}

// Concluded reports whether the scan has its answer: it stopped early, or
// read every pending operation (the rows ended before its limit).
func (s *OldestDueScan) Concluded() bool { return s.done || s.read <= OldestDueScanRows }

// Tx is a read-write transaction.
type Tx interface {
	Reader
	EventTx
	// OperationExists reports whether an operation is stored at key (a
	// tombstone does not count), without locking its row (GetOperation
	// inside a write transaction may): a transaction that holds other
	// operations already checks with it whether one it read as missing
	// was recorded meanwhile, and takes no lock out of order to do so.
	OperationExists(ctx context.Context, tenant, key string) (bool, error)
	// GetOperationNoWait reads and locks an operation as GetOperation
	// does, for a key the transaction read as free while it held other
	// operations (an event's plan): where GetOperation would wait for a
	// lock another transaction holds on a row stored there since
	// (PostgreSQL), it fails at once with ErrConflict, which ends the
	// transaction. Waiting there would wait out of the lock order of
	// docs/scaling.md ("One lock order"); planned again, the transaction
	// takes that row's lock in order.
	GetOperationNoWait(ctx context.Context, tenant, key string) (*Operation, error)
	// InsertOperation inserts a new row; ErrConflict if the key exists.
	InsertOperation(ctx context.Context, op *Operation) error
	// UpdateOperation writes op if the stored revision still equals
	// prevRevision; otherwise ErrConflict. op.Revision must already hold the
	// new revision.
	UpdateOperation(ctx context.Context, op *Operation, prevRevision int64) error
	// LockDue selects like DueOperations and locks the rows for this
	// transaction; concurrent transactions skip locked rows (FOR UPDATE
	// SKIP LOCKED where the store has it).
	LockDue(ctx context.Context, p DueParams) ([]OperationID, error)
	// LockOperations reads those of the operations ids that exist and
	// locks them for the transaction, in the order of their tenants and
	// keys; an operation another transaction holds is left out (FOR
	// UPDATE SKIP LOCKED where the store has it): it is being changed, or
	// compacted by another process. Retention reads a batch with it.
	LockOperations(ctx context.Context, ids []OperationID) ([]*Operation, error)
	// CountAttempts counts the attempts of each of the operations ids by
	// outcome ("" for an attempt not finished).
	CountAttempts(ctx context.Context, ids []OperationID) (map[OperationID]map[string]int, error)
	// CompactOperations replaces operations with their tombstones: for
	// each, it writes the tombstone as UpsertTombstone does and removes
	// the operation with its attempts and timeline if its revision is
	// still the Compaction's; otherwise ErrConflict, which a store may
	// return, as it does a WriteBatch's, from the transaction's next
	// statement or from Update: the transaction has then failed. It is
	// the only way an operation leaves the store, so that its key is
	// always still known.
	CompactOperations(ctx context.Context, cs []Compaction) error
	InsertAttempt(ctx context.Context, a *Attempt) error
	UpdateAttempt(ctx context.Context, a *Attempt) error
	AppendTimeline(ctx context.Context, e *TimelineEntry) error
	// UpsertTombstone writes or replaces the tombstone of a key, and
	// carries its effects (a confirmed effect if it succeeded, its
	// duplicate effects) into the running totals Stats counts compacted
	// operations from; a replaced tombstone's effects are taken out.
	UpsertTombstone(ctx context.Context, t *Tombstone) error
	// DeleteTombstonesBefore removes tombstones compacted before t, but
	// for the current step of a workflow not done (a failed step): that
	// tombstone is what shows the workflow failed, and keeps the step from
	// being recorded again. The effects of a removed tombstone that are
	// not in the running totals yet (it was written by an earlier
	// release) are carried into them: Stats never goes down. It removes
	// at most limit, the oldest first, so that a run over a large backlog
	// holds the store's writer for one batch at a time.
	DeleteTombstonesBefore(ctx context.Context, t time.Time, limit int) (int, error)
	InsertToken(ctx context.Context, t *Token) error
	// RevokeToken sets revoked_at on an active token; ErrNotFound if there
	// is none with that id.
	RevokeToken(ctx context.Context, id string, at time.Time) error
	// TouchToken sets the token's last_used_at to at, unless it is at or
	// after notBefore already: a token used a moment ago is not written
	// again.
	TouchToken(ctx context.Context, id string, at, notBefore time.Time) error
	InsertSession(ctx context.Context, s *Session) error
	// DeleteSession removes the session with hash, if there is one.
	DeleteSession(ctx context.Context, hash string) error
	// DeleteSessionsBefore removes up to limit sessions that expired
	// before t and returns how many it removed.
	DeleteSessionsBefore(ctx context.Context, t time.Time, limit int) (int, error)
	// ProbeWrite writes the readiness row (migration 019) with at: a
	// commit of it shows the store accepts writes.
	ProbeWrite(ctx context.Context, at time.Time) error
	// PutProcess writes a process's row (migration 024), inserting it or
	// replacing the one with its ID.
	PutProcess(ctx context.Context, p *Process) error
	// DeleteProcesses removes the row of the process id, and those of
	// every process last seen before staleBefore; it returns how many it
	// removed.
	DeleteProcesses(ctx context.Context, id string, staleBefore time.Time) (int, error)
	// InsertKeyScope records a destination's key scope if it has none,
	// and says whether it did: false when one is recorded (by another
	// transaction too, which it waits for), which it leaves as it is.
	InsertKeyScope(ctx context.Context, k *KeyScope) (bool, error)
	// UpdateKeyScope replaces a destination's recorded key scope.
	UpdateKeyScope(ctx context.Context, k *KeyScope) error
	// AppendRecovery records an operator decision on an unresolved
	// operation and how long it had waited.
	AppendRecovery(ctx context.Context, r *Recovery) error
	// ForgetRecoveryKeysBefore clears the operation key of up to limit
	// recoveries decided before t that hold one (written by an older
	// release), keeping the rows, and returns how many it cleared.
	ForgetRecoveryKeysBefore(ctx context.Context, t time.Time, limit int) (int, error)
	// AddCompactedAttempts carries attempt counts of compacted operations
	// into the running totals, so that totals never go down.
	AddCompactedAttempts(ctx context.Context, tenant, destination, outcome string, n int) error
}

// WriteLockWaits counts, since a store was opened, the write transactions
// that found another process holding the database file's write lock and
// waited for it (SQLite: sqlitestore's queue). Waits of the transactions
// of one process for each other are not counted.
type WriteLockWaits struct {
	// Waits counts the transactions that waited, TimedOut those of them
	// that gave up at the busy timeout (store.ErrBusy).
	Waits, TimedOut int64
	// Waited is how long they waited, in all.
	Waited time.Duration
}

// WriterWork counts, since a store was opened, the work of its one writer
// (SQLite): the shared transactions it ran for this process's writes and
// how long it was busy with them.
type WriterWork struct {
	// Batches counts the shared write transactions run; Writes the write
	// calls they carried, failed ones too (a batch given back to the
	// queue because its leader's caller went away while it waited for
	// another process's lock counts again when it runs).
	Batches, Writes int64
	// Busy is how long the writer spent on them in all, from taking a
	// batch to answering its callers: waits for other processes' locks,
	// the statements and the COMMIT.
	Busy time.Duration
}

// WriterWorkCounter is implemented by a store with one writer per process
// that shares its transactions among concurrent callers (SQLite).
type WriterWorkCounter interface {
	// WriterWork returns the counts since the store was opened.
	WriterWork() WriterWork
}

// WriteLockWaitCounter is implemented by a store whose processes queue for
// one write lock (SQLite).
type WriteLockWaitCounter interface {
	// WriteLockWaits returns the counts since the store was opened.
	WriteLockWaits() WriteLockWaits
}

// Store is a storage driver.
type Store interface {
	// Update runs fn in a read-write transaction and commits it when fn
	// returns nil. Conflicts surface as ErrConflict; a lock held elsewhere
	// past the store's wait as ErrBusy, a full disk as ErrFull (every
	// method's errors do). Once a newer release has migrated the schema,
	// every write transaction fails with ErrSchemaNewer and writes
	// nothing; a migration of a newer release waits for the write
	// transactions under way, and they for it.
	Update(ctx context.Context, fn func(ctx context.Context, tx Tx) error) error
	// View runs fn with a reader outside any write transaction. Each of
	// its reads sees the latest commits, so two reads may disagree about
	// a write committed between them.
	View(ctx context.Context, fn func(ctx context.Context, r Reader) error) error
	// ViewSnapshot runs fn with a reader whose reads all see one snapshot
	// of the store, as of its first read: figures made of several counts
	// (Stats) add up even while retention moves operations into
	// tombstones.
	ViewSnapshot(ctx context.Context, fn func(ctx context.Context, r Reader) error) error
	// Migrate brings the schema to the newest version, telling progress
	// (which may be nil) after each migration it applies.
	Migrate(ctx context.Context, progress migrate.Progress) error
	// SchemaVersion reads, without writing or waiting for the write
	// lock, the version of the newest migration the store has applied
	// (0 when it has none) and of the newest this build embeds.
	SchemaVersion(ctx context.Context) (current, newest int, err error)
	// Ping checks that the store is reachable.
	Ping(ctx context.Context) error
	// Name is the driver's name, "sqlite" or "postgres".
	Name() string
	// Close closes the store; every call after it fails with ErrClosed.
	Close() error
}

// StateSucceeded is the state that the stores' index by state leaves out
// (migration 010): nearly every operation ends in it, so CountByState and
// Stats count it as the rest of the operations (WithSucceeded).
const StateSucceeded = "succeeded"

// WithSucceeded completes counts by state read from an index without the
// succeeded operations: all is the count of every operation in the same
// snapshot, and the succeeded ones are those the other states leave. As a
// GROUP BY would, it leaves out the state when none is succeeded.
func WithSucceeded(byState map[string]int, all int) map[string]int {
	for _, n := range byState {
		all -= n
	}
	if all > 0 {
		byState[StateSucceeded] = all
	}
	return byState
}
