package opledger

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/opledger/opledger/internal/marker"
	"github.com/opledger/opledger/internal/redact"
	"github.com/opledger/opledger/internal/store"
	"github.com/opledger/opledger/internal/store/migrate"
	"github.com/opledger/opledger/internal/store/pgstore"
	"github.com/opledger/opledger/internal/store/sqlitestore"
)

// DefaultDSN is the store opened when none is given: a SQLite file in the
// working directory.
const DefaultDSN = "sqlite:opledger.db"

// DefaultTenant is the tenant of a Ledger that was not given one.
const DefaultTenant = "default"

// The defaults of Options' time limits.
const (
	// DefaultHoldReviewAfter is Options.HoldReviewAfter when unset: 24 hours.
	DefaultHoldReviewAfter = 24 * time.Hour
	// DefaultRetention is Options.Retention when unset: 30 days.
	DefaultRetention = 30 * 24 * time.Hour
	// DefaultTombstoneRetention is Options.TombstoneRetention when unset:
	// 400 days.
	DefaultTombstoneRetention = 400 * 24 * time.Hour
)

// Options configure a Ledger. The zero value is usable: every field has a
// documented default.
type Options struct {
	// Tenant scopes every operation of the returned Ledger. Default "default".
	// Use WithTenant for other tenants on the same store.
	Tenant string
	// Worker names this process in attempts and the timeline: at most
	// 200 bytes of UTF-8 text without NUL bytes (Open refuses others).
	// Default hostname:pid.
	Worker string
	// Lease is how long a claim holds an operation. Default 30 seconds; at
	// most MaxLease.
	Lease time.Duration
	// RetryPolicy applies to retryable outcomes of destinations that have no
	// policy in DestinationRetryPolicies. Default DefaultRetryPolicy.
	RetryPolicy *RetryPolicy
	// DestinationRetryPolicies are per-destination retry policies.
	DestinationRetryPolicies map[string]RetryPolicy
	// DestinationTenants names, for each destination that serves only some
	// tenants, the tenants it serves (destination.Set.Tenants reads them
	// from destinations.yaml). A new operation of another tenant for such
	// a destination is refused with ErrDestinationNotServed, nothing
	// recorded: by Record, a claim with an intent, PutWorkflow (for a new
	// workflow, any of its steps) and ReceiveEvent (a *RuleError). An
	// operation recorded before is not refused: a repeat still gets it,
	// and the executor, which checks at each attempt, sends nothing. A
	// step of a workflow put before is not recorded when its turn comes:
	// the workflow is held (a *StepError from ResumeWorkflow, matching
	// ErrDestinationNotServed; see StuckWorkflows) until the destination
	// serves the tenant again. A destination not named here serves every
	// tenant; a list must name at least one.
	DestinationTenants map[string][]string
	// DestinationsRequiringApproval names the destinations whose every
	// operation waits for an approval before its first attempt, whatever
	// the intent's RequiresApproval says: approval as the server's policy
	// rather than the recorder's choice (opledger serve reads the list
	// from its configuration file's require_approval). A new operation
	// for one is recorded as awaiting_approval, by Record, a claim with
	// an intent, an event's rule and a workflow's step; its timeline says
	// the destination required it. An operation recorded before the list
	// named its destination, pending and never dispatched, is moved to
	// awaiting_approval by a repeat of its intent or a claim (the claim
	// is refused), so nothing reaches the destination unapproved; one
	// already dispatched keeps going. Names take the key syntax (Open
	// refuses others).
	DestinationsRequiringApproval []string
	// DestinationOwners names, per destination, the owner (Intent.Owner:
	// a team or an on-call handle) that a new operation for it is
	// recorded with when its intent names none, so that whoever must
	// decide when automation cannot is named for every operation, whatever
	// the automation that recorded it sent (opledger serve reads them from
	// its configuration file's owners). By Record, a claim with an intent,
	// an event's rule and a workflow's step (after the step's and the
	// workflow's own owner). An operation recorded before keeps the owner
	// it has, or none. Names take the key syntax and owners CheckOwner's
	// rules (Open refuses others); an empty owner is refused.
	DestinationOwners map[string]string
	// HoldReviewAfter sets review_by when an operation becomes held.
	// Default DefaultHoldReviewAfter.
	HoldReviewAfter time.Duration
	// Retention is how long final operations keep their full record before
	// compaction to a tombstone. Default DefaultRetention.
	Retention time.Duration
	// TombstoneRetention is how long tombstones are kept. Default
	// DefaultTombstoneRetention.
	TombstoneRetention time.Duration
	// Clock maps a reading of the store's clock to the time the ledger uses.
	// Nil means the store's clock as it is. Tests and the simulator use it
	// to move time forward without sleeping.
	Clock func(storeNow time.Time) time.Time
	// SQLiteSynchronousNormal opts a SQLite store out of synchronous=FULL.
	// A commit lost to a power cut can then become a duplicate effect.
	SQLiteSynchronousNormal bool
	// SQLiteBusyTimeout is how long a write to a SQLite store waits, in
	// all, for the other processes queued before it on the file's write
	// lock and then for SQLite's own lock (held longer only by a writer
	// outside opledger: a sqlite3 shell, a VACUUM), before the call fails
	// with ErrStoreBusy. Zero or less means 10 seconds.
	SQLiteBusyTimeout time.Duration
	// MigrationProgress, if set, is told after each schema migration Open
	// applies: done of total pending migrations, and the last one's name.
	// opledger migrate draws its progress bar with it.
	MigrationProgress func(done, total int, name string)
	// ExistingOnly refuses to create a ledger: a SQLite file that does not
	// exist, or that exists but holds no ledger (an empty file, another
	// application's database), and a PostgreSQL schema (the first existing
	// one of the search_path) without the ledger's schema_migrations
	// table, is an error (ErrInvalidInput) instead of a new, empty ledger,
	// and is left untouched. A file this process may not read, or cannot
	// read for another reason (a directory), is an error that says why
	// (not ErrInvalidInput). Tools that only read or decide
	// on an existing ledger set it, so that a mistyped path, database or
	// schema fails rather than shows nothing.
	//
	// Nor does it migrate: a ledger whose schema is older than this
	// release uses is refused, and left at its version, so that a newer
	// release's reading tool does not upgrade it under an older release
	// still writing to it. Migrate it with an Open without ExistingOnly
	// (opledger migrate), as docs/operations.md "Upgrading" describes.
	ExistingOnly bool
}

// Ledger records operations and moves them through their states. A Ledger
// is safe for concurrent use. It is scoped to one tenant; WithTenant returns
// a Ledger for another tenant sharing the same store.
type Ledger struct {
	*shared
	tenant string
	// credential names what this handle's caller proved itself with
	// (WithCredential); empty for the process's own handle.
	credential string
}

// shared is what all tenant views of one opened ledger have in common.
type shared struct {
	store  store.Store
	opts   Options
	worker string
	// served is Options.DestinationTenants.
	served servedTenants
	// policy is Options.DestinationsRequiringApproval and
	// Options.DestinationOwners.
	policy destinationPolicy
	// snapshots are this ledger's own claims as it last wrote them.
	snapshots *snapshots
	// checkedTokens are the API tokens Authenticate found active lately.
	checkedTokens checkedTokens
	// tokenUses are the writes of tokens' last use in the background.
	tokenUses tokenUses
	// statsReads and eventStatsReads share concurrent reads of the
	// figures, by tenant ("" for all).
	statsReads      sharedReads[*statsRead]
	eventStatsReads sharedReads[*store.EventCounts]
	// life ends the Maintain loops, and the writes in the background,
	// when the ledger is closed.
	life lifecycle
	// self is this process's announcements (Announce).
	self self
}

// lifecycle lets Close stop the Maintain loops and the writes in the
// background (a token's last use), and wait for them, before it closes
// the store, and makes a second Close a no-op.
type lifecycle struct {
	mu sync.Mutex
	// closing ends when Close is called, and with it every loop's
	// context.
	closing  context.Context
	endLoops context.CancelFunc
	loops    sync.WaitGroup
	closeFn  sync.Once
	err      error
}

// newLifecycle returns the lifecycle of a ledger just opened.
func newLifecycle() lifecycle {
	closing, cancel := context.WithCancel(context.Background())
	return lifecycle{closing: closing, endLoops: cancel}
}

// start registers a loop; ok is false once the ledger is closed. The
// returned context ends with ctx or when the ledger is closed, and done
// must be called when the loop has ended.
func (lc *lifecycle) start(ctx context.Context) (_ context.Context, done func(), ok bool) {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	if lc.closing.Err() != nil {
		return nil, nil, false
	}
	lc.loops.Add(1)
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(lc.closing, cancel)
	return ctx, func() { stop(); cancel(); lc.loops.Done() }, true
}

// close ends the loops, waits for them, then runs closeStore, once.
func (lc *lifecycle) close(closeStore func() error) error {
	lc.closeFn.Do(func() {
		lc.mu.Lock()
		lc.endLoops()
		lc.mu.Unlock()
		lc.loops.Wait()
		lc.err = closeStore()
	})
	return lc.err
}

// Open opens the store named by dsn, applies pending migrations (unless
// opts.ExistingOnly) and returns a Ledger for opts.Tenant. dsn is
// "sqlite:PATH" (an empty dsn means DefaultDSN) or a "postgres://" URL.
// Without ExistingOnly, a SQLite file this process may not write is
// refused, rather than opened read-only to fail every write.
func Open(ctx context.Context, dsn string, opts Options) (*Ledger, error) {
	if dsn == "" {
		dsn = DefaultDSN
	}
	// 0 is "not set" and takes the default; a negative duration is a
	// mistake, never silently replaced.
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"Lease", opts.Lease}, {"HoldReviewAfter", opts.HoldReviewAfter}, {"Retention", opts.Retention}, {"TombstoneRetention", opts.TombstoneRetention}} {
		if d.v < 0 {
			return nil, invalidInput("Options.%s is %s: it must be positive (0 means the default)", d.name, d.v)
		}
	}
	if opts.Lease > MaxLease {
		return nil, invalidInput("Options.Lease is %s: it must be at most %s (MaxLease)", opts.Lease, MaxLease)
	}
	opts = withDefaults(opts)
	if err := validateTenant(opts.Tenant); err != nil {
		return nil, err
	}
	// Every claim records the worker name and refuses one it cannot
	// store: refuse it here, before anything is opened.
	if err := checkWorker(opts.Worker); err != nil {
		return nil, err
	}
	if err := opts.RetryPolicy.validate(); err != nil {
		return nil, err
	}
	for _, name := range slices.Sorted(maps.Keys(opts.DestinationRetryPolicies)) { // the first refusal by name, on every run
		// A name no destination can have would hold a policy that never
		// applies.
		if err := checkDestinationName(name); err != nil {
			return nil, fmt.Errorf("DestinationRetryPolicies: %w", err)
		}
		p := opts.DestinationRetryPolicies[name]
		if err := p.validate(); err != nil {
			return nil, fmt.Errorf("destination %q: %w", name, err)
		}
	}
	served, err := newServedTenants(opts.DestinationTenants)
	if err != nil {
		return nil, err
	}
	policy, err := newDestinationPolicy(opts.DestinationsRequiringApproval, opts.DestinationOwners)
	if err != nil {
		return nil, err
	}
	st, err := openStore(ctx, dsn, opts)
	if err == nil && opts.ExistingOnly {
		if err = checkSchema(ctx, st, dsn); err != nil {
			st.Close()
		}
	} else if err == nil {
		if err = st.Migrate(ctx, opts.MigrationProgress); err != nil {
			st.Close()
			err = fmt.Errorf("migrate %s store: %w", st.Name(), err)
		}
	}
	if errors.Is(err, store.ErrNotLedger) {
		// A dsn that names another application's database.
		return nil, fmt.Errorf("%w: %w; it was left as it is", ErrInvalidInput, err)
	}
	if err != nil {
		return nil, err
	}
	return &Ledger{shared: &shared{store: st, opts: opts, worker: opts.Worker, snapshots: newSnapshots(),
		served: served, policy: policy, life: newLifecycle()}, tenant: opts.Tenant}, nil
}

// checkSchema refuses, reading only, a store whose schema is not at the
// version this release uses: ExistingOnly opens do not migrate.
func checkSchema(ctx context.Context, st store.Store, dsn string) error {
	current, newest, err := st.SchemaVersion(ctx)
	switch {
	case err != nil:
		return fmt.Errorf("%s store: %w", st.Name(), err)
	case current > newest:
		return fmt.Errorf("%s store: %w", st.Name(), migrate.Newer(current, newest))
	case current == newest:
		return nil
	}
	where, first := "the postgres DSN", "if a process of this release is migrating it now, try again in a moment; otherwise stop every process of the older release"
	if path, ok := sqlitestore.DSNPath(dsn); ok {
		where, first = path, "if a process of this release is migrating it now, try again in a moment; otherwise back it up (opledger backup), stop every process of this ledger"
	} else if u, err := url.Parse(dsn); err == nil {
		where = redact.DSN(dsn, u)
	}
	return fmt.Errorf("the ledger at %s has schema version %d, older than this opledger uses (%d), and a command that only reads or decides does not upgrade it: "+
		"%s, then run opledger migrate (see Upgrading in docs/operations.md)", where, current, newest, first)
}

func openStore(ctx context.Context, dsn string, opts Options) (store.Store, error) {
	if path, ok := sqlitestore.DSNPath(dsn); ok {
		return openSQLite(ctx, path, opts)
	}
	if pgstore.IsDSN(dsn) {
		return openPostgres(ctx, dsn, opts)
	}
	u, err := url.Parse(dsn)
	if err != nil || u.Scheme == "" {
		return nil, fmt.Errorf("%w: dsn must start with sqlite: or postgres:// (got no scheme; for a SQLite file give sqlite:PATH)", ErrInvalidInput)
	}
	return nil, fmt.Errorf("%w: dsn must start with sqlite: or postgres://, in lower case (got %q)", ErrInvalidInput, redact.DSN(dsn, u))
}

// openSQLite opens the SQLite store at path; with opts.ExistingOnly,
// only if the file holds a ledger already (sqlitestore.HoldsLedger reads
// it without writing), and without, only if this process may write it.
// Only a file that holds no ledger is invalid input: one that cannot be
// read is a failure, with its cause.
func openSQLite(ctx context.Context, path string, opts Options) (store.Store, error) {
	if path == ":memory:" {
		// SQLite would give each connection a database of its own, gone
		// with it: the writer's ledger unseen by the readers, and nothing
		// left after the process.
		return nil, fmt.Errorf("%w: sqlite::memory: is an in-memory database, which opledger does not use: the ledger must outlive the process and be shared by its connections; give a file (sqlite:PATH, in a temporary directory for a throwaway ledger)", ErrInvalidInput)
	}
	if opts.ExistingOnly {
		if path == "" {
			return nil, fmt.Errorf("%w: no ledger at sqlite: the DSN names no file (give sqlite:PATH)", ErrInvalidInput)
		}
		// A file this process may not read is a failure, not a missing
		// ledger: HoldsLedger's SQLite error would not say so.
		if f, err := os.Open(path); errors.Is(err, fs.ErrPermission) {
			return nil, fmt.Errorf("cannot read the ledger at %s: %w", path, err)
		} else if err == nil {
			f.Close()
		}
		holds, err := sqlitestore.HoldsLedger(ctx, path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			if dir := filepath.Dir(path); !sqlitestore.DirExists(dir) {
				// A writing command would not create it either.
				return nil, fmt.Errorf("%w: no ledger at %s: neither the file nor its directory %s exists (a command that writes, such as serve or migrate, creates the file once the directory exists)", ErrInvalidInput, path, dir)
			}
			return nil, fmt.Errorf("%w: no ledger at %s: the file does not exist (a command that writes, such as serve or migrate, creates it)", ErrInvalidInput, path)
		case sqlitestore.IsNotDatabase(err):
			return nil, fmt.Errorf("%w: no ledger at %s: %w; it was left as it is", ErrInvalidInput, path, err)
		case err != nil:
			return nil, fmt.Errorf("cannot read the ledger at %s: %w", path, err)
		case !holds:
			return nil, fmt.Errorf("%w: no ledger at %s: the file is not an opledger ledger (it holds no opledger schema_migrations table); it was left as it is", ErrInvalidInput, path)
		}
		// Every open switches the file to WAL, which SQLite must write:
		// it would fail with "attempt to write a readonly database".
		if rollback, err := sqlitestore.RollbackJournalUnwritable(path); err != nil {
			return nil, fmt.Errorf("cannot read the ledger at %s: %w", path, err)
		} else if rollback {
			return nil, fmt.Errorf("cannot read the ledger at %s: it is in rollback-journal mode (a backup made by an older opledger), "+
				"which opening it switches to WAL, and this process may not write it: open it once as a user who may write it "+
				"(opledger migrate --db sqlite:%s), then read it as before", path, path)
		}
	}
	st, err := sqlitestore.Open(ctx, path, sqlitestore.Options{SynchronousNormal: opts.SQLiteSynchronousNormal,
		BusyTimeout: opts.SQLiteBusyTimeout})
	if err != nil {
		return nil, err
	}
	if !opts.ExistingOnly {
		if err := st.CheckWritable(ctx); err != nil {
			st.Close()
			return nil, err
		}
	}
	return st, nil
}

func withDefaults(o Options) Options {
	if o.Tenant == "" {
		o.Tenant = DefaultTenant
	}
	if o.Worker == "" {
		host, _ := os.Hostname()
		o.Worker = host + ":" + strconv.Itoa(os.Getpid())
	}
	if o.Lease <= 0 {
		o.Lease = 30 * time.Second
	}
	if o.RetryPolicy == nil {
		p := DefaultRetryPolicy
		o.RetryPolicy = &p
	}
	if o.HoldReviewAfter <= 0 {
		o.HoldReviewAfter = DefaultHoldReviewAfter
	}
	if o.Retention <= 0 {
		o.Retention = DefaultRetention
	}
	if o.TombstoneRetention <= 0 {
		o.TombstoneRetention = DefaultTombstoneRetention
	}
	return o
}

// WithTenant returns a Ledger for another tenant on the same store. Closing
// any of them closes the store for all.
func (l *Ledger) WithTenant(tenant string) (*Ledger, error) {
	if err := validateTenant(tenant); err != nil {
		return nil, err
	}
	c := *l
	c.tenant = tenant
	return &c, nil
}

// WithCredential returns a view of the Ledger that records the decisions
// it takes (Resolve, Approve, Revise and their workflow-step forms) as
// taken through credential: the name given in the decision is kept, and
// credential follows it in parentheses, as in "Maria (token ops-laptop,
// tok_0a1b2c3d4e5f)". The HTTP API and the console give the token a
// request or a session was authenticated with, so that a decision names
// who was signed in as well as who they said they were. An empty
// credential records decisions as given. A credential longer than
// MaxCredentialBytes, or one the store cannot keep (a NUL byte, invalid
// UTF-8), is refused with ErrInvalidInput.
func (l *Ledger) WithCredential(credential string) (*Ledger, error) {
	if err := checkLength("credential", credential, MaxCredentialBytes); err != nil {
		return nil, err
	}
	if err := checkText("credential", credential); err != nil {
		return nil, err
	}
	c := *l
	c.credential = credential
	return &c, nil
}

// MaxCredentialBytes bounds the credential of WithCredential: room for a
// token's name and ID, and the console's mark.
const MaxCredentialBytes = 2 * maxNameLength

// attributed is the name a decision records for the person who took it:
// with the handle's credential, if any, after it.
func (l *Ledger) attributed(name string) string {
	if l.credential == "" {
		return name
	}
	return name + " (" + l.credential + ")"
}

// Tenant is the tenant this Ledger acts for.
func (l *Ledger) Tenant() string { return l.tenant }

// StoreName is "sqlite" or "postgres".
func (l *Ledger) StoreName() string { return l.store.Name() }

// WriteLockWaits counts, since a Ledger was opened, the write transactions
// of its process that found another process holding the SQLite file's
// write lock and queued for it (docs/scaling.md, "SQLite: one machine,
// several processes"). Transactions of one process never wait for each
// other this way: they share commits. A wait for a writer that does not
// queue (a sqlite3 shell) is not counted.
type WriteLockWaits struct {
	// Waits counts the transactions that queued; TimedOut those of them
	// that gave up at SQLiteBusyTimeout, their calls failing with
	// ErrStoreBusy.
	Waits, TimedOut int64
	// Waited is how long they waited, in all.
	Waited time.Duration
}

// WriteLockWaits returns the counts of the ledger's waits for other
// processes' writes, shared with every tenant's view of it (WithTenant);
// ok is false on PostgreSQL, whose processes take row locks and share no
// one write lock.
func (l *Ledger) WriteLockWaits() (w WriteLockWaits, ok bool) {
	c, ok := l.store.(store.WriteLockWaitCounter)
	if !ok {
		return WriteLockWaits{}, false
	}
	sw := c.WriteLockWaits()
	return WriteLockWaits{Waits: sw.Waits, TimedOut: sw.TimedOut, Waited: sw.Waited}, true
}

// WriterWork counts, since a Ledger was opened, the work of the one writer
// its process has on a SQLite file, which runs the writes of concurrent
// callers in shared transactions (group commit): Busy over the time
// elapsed is the share of that time the writer had work, and near 1 it is
// what limits the process's writes (docs/operations.md, "Is SQLite's
// writer the limit?"); Writes over Batches is how many writes a commit
// carried on average.
type WriterWork struct {
	// Batches counts the shared write transactions the writer ran.
	Batches int64
	// Writes counts the write calls those transactions carried, the
	// failed ones too.
	Writes int64
	// Busy is how long the writer spent on them in all, from taking a
	// batch to answering its callers: waits for other processes' locks
	// (also in WriteLockWaits), the statements and the COMMIT.
	Busy time.Duration
}

// WriterWork returns the counts of the ledger's SQLite writer, shared with
// every tenant's view of it (WithTenant); ok is false on PostgreSQL,
// whose writes run on a pool of connections.
func (l *Ledger) WriterWork() (w WriterWork, ok bool) {
	c, ok := l.store.(store.WriterWorkCounter)
	if !ok {
		return WriterWork{}, false
	}
	sw := c.WriterWork()
	return WriterWork{Batches: sw.Batches, Writes: sw.Writes, Busy: sw.Busy}, true
}

// Ping checks that the store is reachable, and that no newer release has
// migrated its schema past the newest this one knows (ErrSchemaNewer:
// this process's writes are refused from then on, so it is not ready).
func (l *Ledger) Ping(ctx context.Context) error {
	if err := l.store.Ping(ctx); err != nil {
		return err
	}
	current, newest, err := l.store.SchemaVersion(ctx)
	if err != nil {
		return fmt.Errorf("%s store: %w", l.store.Name(), err)
	}
	if current > newest {
		return fmt.Errorf("%s store: %w", l.store.Name(), migrate.Newer(current, newest))
	}
	return nil
}

// Ready checks that the store accepts a write: it commits one write of
// the store's readiness row (the same few bytes every time). A store that
// does not answer fails it, and so does one that answers reads but cannot
// commit (Ping tells the two apart): a full disk
// (ErrStoreFull), a write lock held elsewhere past the busy timeout
// (ErrStoreBusy), a file system gone read-only, a PostgreSQL standby or a
// read-only session after a failover (the store's own error). Each call
// is a durable commit: a caller probing often shares one result (as GET
// /readyz does).
func (l *Ledger) Ready(ctx context.Context) error {
	return l.store.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		now, err := l.now(ctx, tx)
		if err != nil {
			return err
		}
		return tx.ProbeWrite(ctx, now)
	})
}

// Close stops the ledger's Maintain loops, waits for them, and closes the
// store, for this Ledger and every other tenant's view of it (WithTenant).
// Calls in flight on the store, and every call after Close, fail with
// ErrClosed (a write in flight may have committed all the same: a ledger
// opened again reads what it did); a second Close returns the first's
// result. On SQLite, a Maintain job waiting for another process's write
// lock stops only when that wait ends (at most SQLiteBusyTimeout), so
// Close may take that long.
func (l *Ledger) Close() error { return l.life.close(l.store.Close) }

// now reads the store's clock through the configured Clock.
func (s *shared) now(ctx context.Context, r store.Reader) (time.Time, error) {
	t, err := r.Now(ctx)
	if err != nil {
		return time.Time{}, fmt.Errorf("read store clock: %w", err)
	}
	return s.clock(t), nil
}

// clock maps a reading of the store's clock through the configured Clock.
func (s *shared) clock(t time.Time) time.Time {
	if s.opts.Clock != nil {
		return s.opts.Clock(t).UTC().Truncate(time.Microsecond)
	}
	return t
}

// txn is one decision about one operation inside a store transaction. The
// decision is made in Go on the row as read; the write is conditional on the
// row's revision, so two racing decisions cannot both land.
type txn struct {
	ctx    context.Context
	tx     store.Tx
	now    time.Time
	tenant string
	// holdReview is how long a held operation waits for its owner.
	holdReview time.Duration
	// served refuses a new operation for a destination that does not
	// serve the tenant.
	served servedTenants
	// policy makes operations for some destinations wait for approval,
	// and names their owner.
	policy destinationPolicy
	key    string
	op     *store.Operation // nil when the key has no row
	// tombstone is set when the key has no row but a tombstone.
	tombstone *store.Tombstone
	prevRev   int64
	inserted  bool
	dirty     bool
	// recordingStep is set while a workflow records its own step.
	recordingStep bool
	// workflowUnlocked is set when the transaction read as missing the
	// workflow of which key may be a step, and may hold operations
	// already (an event applying its plan): refuseWorkflowStep then
	// checks with a plain read whether that workflow was stored since,
	// and if it was returns errPlanOutdated instead of locking it out of
	// the order of docs/scaling.md ("One lock order").
	workflowUnlocked bool
	timeline         []*store.TimelineEntry
	// stored is the operation's timeline as stored, read once per
	// transaction (listTimeline): nothing writes it before flush.
	stored []*store.TimelineEntry
	// queued are attempt writes held back until flush, so that they reach
	// the store together with the operation's write (one round trip on
	// PostgreSQL). Reads of attempts write them first (writeQueued).
	queued []store.Write
	// prefetched is the attempt read with the operation (nil: there is no
	// such attempt) when prefetchedID is set; checkAttempt uses it once, and
	// any attempt write before that discards it.
	prefetched   *store.Attempt
	prefetchedID string
	// after is returned to the caller once the transaction has committed:
	// refusals that still record evidence.
	after error
	// spec is set when the decision is made on a snapshot instead of in a
	// store transaction (tx is then nil).
	spec *speculation
	// secrets are what scrub masks, built on first use (a speculative
	// decision starts from its snapshot's).
	secrets secretsMemo
	// attempts are the attempt rows written, in order.
	attempts []*store.Attempt
}

// maxConflictRetries bounds how often a decision is re-made after losing a
// race; each retry sees the winner's write.
const maxConflictRetries = 20

// mutate runs decide on the operation named key in a write transaction and
// commits whatever it changed. A decide that returns an error rolls back.
func (l *Ledger) mutate(ctx context.Context, key string, decide func(t *txn) error) (*Operation, error) {
	return l.mutateAttempt(ctx, key, "", decide)
}

// mutateAttempt is mutate for a decision about attempt attemptID of the
// operation: where the store can, the attempt is read in the same round
// trip as the operation.
func (l *Ledger) mutateAttempt(ctx context.Context, key, attemptID string, decide func(t *txn) error) (*Operation, error) {
	if err := ValidateKey(key); err != nil {
		return nil, err
	}
	if _, ok := storableText("attempt", attemptID); !ok {
		// No attempt has such an ID, and PostgreSQL would refuse to
		// look it up (a NUL byte, invalid UTF-8) with an error of its own.
		return nil, fmt.Errorf("attempt %q of %s: %w", attemptID, key, ErrNotFound)
	}
	var result *Operation
	var after error
	for range maxConflictRetries {
		err := l.store.Update(ctx, func(ctx context.Context, tx store.Tx) error {
			var err error
			result, after, err = l.decideWith(ctx, tx, l.tenant, key, attemptID, decide)
			return err
		})
		if errors.Is(err, store.ErrConflict) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if after != nil {
			return result, after
		}
		return result, nil
	}
	return nil, fmt.Errorf("%s: gave up after %d write conflicts: %w", key, maxConflictRetries, store.ErrConflict)
}

// decideIn runs decide on one operation inside the transaction tx and
// writes what it changed. It returns the operation as decided and the
// refusal to report after the commit, if any.
func (l *Ledger) decideIn(ctx context.Context, tx store.Tx, tenant, key string, decide func(t *txn) error) (op *Operation, refusal, err error) {
	return l.decideWith(ctx, tx, tenant, key, "", decide)
}

// decideNewIn is decideIn for a key that the caller read as free earlier
// in the transaction, while it held other operations (an event's plan):
// it reads the row with GetOperationNoWait, so that a row stored there
// since and held by another transaction fails the transaction with
// store.ErrConflict, to be planned again, instead of waiting out of the
// lock order of docs/scaling.md ("One lock order").
func (l *Ledger) decideNewIn(ctx context.Context, tx store.Tx, tenant, key string, decide func(t *txn) error) (op *Operation, refusal, err error) {
	return l.decideRead(ctx, tx, tenant, key, func(*txn) (*store.Operation, error) {
		return tx.GetOperationNoWait(ctx, tenant, key)
	}, decide)
}

// decideWith is decideIn that also reads attempt attemptID (if not "")
// with the operation where the store offers that in one round trip.
func (l *Ledger) decideWith(ctx context.Context, tx store.Tx, tenant, key, attemptID string, decide func(t *txn) error) (op *Operation, refusal, err error) {
	return l.decideRead(ctx, tx, tenant, key, func(t *txn) (*store.Operation, error) {
		g, ok := tx.(store.OperationAttemptGetter)
		if !ok || attemptID == "" {
			return tx.GetOperation(ctx, tenant, key)
		}
		row, a, err := g.GetOperationAndAttempt(ctx, tenant, key, attemptID)
		if err == nil {
			t.prefetched, t.prefetchedID = a, attemptID
		}
		return row, err
	}, decide)
}

// decideRead is decideIn with the operation's row read by read.
func (l *Ledger) decideRead(ctx context.Context, tx store.Tx, tenant, key string, read func(t *txn) (*store.Operation, error), decide func(t *txn) error) (op *Operation, refusal, err error) {
	t := &txn{ctx: ctx, tx: tx, tenant: tenant, key: key, holdReview: l.opts.HoldReviewAfter, served: l.served, policy: l.policy}
	// Read the row first: on stores that lock it, the clock is then read
	// after any earlier writer finished, so times never go back.
	row, err := read(t)
	switch {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		return nil, nil, err
	default:
		t.op = row
		t.prevRev = row.Revision
	}
	if t.now, err = l.now(ctx, tx); err != nil {
		return nil, nil, err
	}
	if err := decide(t); err != nil {
		return nil, nil, err
	}
	if err := t.flush(); err != nil {
		return nil, nil, err
	}
	switch {
	case t.op != nil:
		return toOperation(t.op), t.after, nil
	case t.tombstone != nil:
		return tombstoneOperation(t.tombstone), t.after, nil
	}
	return nil, t.after, nil
}

// firstRevision is the revision of a new operation row: the time it is
// recorded, in microseconds, not 1. A key may be recorded again once its
// tombstone is forgotten, and a snapshot of a claim from the key's earlier
// life (a worker that stalled all that while) is written on the condition
// of its revision alone: revisions that start where the new life starts
// never repeat one of the earlier life, which had as many writes as it
// had, long before.
func firstRevision(now time.Time) int64 { return max(now.UnixMicro(), 1) }

// flush writes the queued attempt writes, the operation row and the
// timeline entries, in that order, as one batch.
func (t *txn) flush() error {
	ws := t.queued
	t.queued = nil
	if t.op == nil || (!t.dirty && len(t.timeline) == 0) {
		return t.writeAll(ws)
	}
	t.op.UpdatedAt = t.now
	if t.inserted {
		t.op.Revision = firstRevision(t.now)
		t.op.CreatedAt = t.now
		// First: a claim's attempt refers to the row it inserts.
		ws = append([]store.Write{{InsertOperation: t.op}}, ws...)
	} else {
		t.op.Revision = t.prevRev + 1
		w := store.Write{UpdateOperation: t.op, PrevRevision: t.prevRev}
		if t.spec != nil {
			w.Previous = t.spec.base
		}
		ws = append(ws, w)
	}
	for _, e := range t.timeline {
		ws = append(ws, store.Write{AppendTimeline: e})
	}
	return t.writeAll(ws)
}

// queue holds an attempt write back until flush.
func (t *txn) queue(w store.Write) {
	t.prefetched, t.prefetchedID = nil, ""
	t.queued = append(t.queued, w)
}

// writeQueued writes the queued attempt writes now; every read of attempts
// inside a decision calls it first, so that it sees them.
func (t *txn) writeQueued() error {
	if len(t.queued) > 0 {
		t.prefetched, t.prefetchedID = nil, ""
	}
	ws := t.queued
	t.queued = nil
	return t.writeAll(ws)
}

// move changes the operation's state and records why.
func (t *txn) move(to State, actor, attemptID, event, evidence string) {
	from := State(t.op.State)
	t.op.State = string(to)
	if to != from {
		t.op.StateSince = t.now
	}
	if to.Unresolved() && !from.Unresolved() {
		t.op.UnresolvedSince = t.now
	}
	if !to.Unresolved() {
		t.op.UnresolvedSince = time.Time{}
	}
	if to != StateHeld {
		t.op.ReviewBy = time.Time{}
	}
	if to != StateInProgress {
		t.op.LeaseExpiresAt = time.Time{}
	}
	if to != StateFailed {
		t.op.FailureKind = ""
	}
	switch {
	case to == StateUncertain && from != StateUncertain:
		// Due for reconciliation from now on: ReconcileQueue takes the
		// operation whose check came due the longest ago first, and one
		// without a time would pass before every operation whose lookup
		// was put off (DeferReconcile).
		t.op.NotBefore = t.now
	case to != StatePending && to != StateAwaitingApproval && to != StateUncertain:
		// Awaiting approval, a pending operation keeps the wait its
		// destination asked for (Retry-After): the approval does not
		// lift it.
		t.op.NotBefore = time.Time{}
	}
	t.dirty = true
	t.timeline = append(t.timeline, &store.TimelineEntry{
		Tenant: t.tenant, Key: t.key, At: t.now, Actor: actor, AttemptID: attemptID,
		Event: event, FromState: string(from), ToState: string(to), Evidence: evidence,
	})
}

// scrub masks in s, free text the ledger is about to store (an error, a
// timeline's evidence, a reason), every occurrence of a value of one of
// the operation's sensitive fields of minSecretLength bytes or more, as
// secretText spells it: as it is, JSON-escaped, URL-escaped, and an
// e-mail address in any case. A destination's "invalid address
// ana@example.invalid" is stored as "invalid address ***". Masking at
// write time keeps such values out of every list, log and export that
// shows the text. Operations without sensitive fields pay nothing.
func (t *txn) scrub(s string) string {
	if s == "" || t.op == nil || len(t.op.SensitiveFields) == 0 {
		return s
	}
	return scrubText(t.secrets.of(t.op), s)
}

// scrubText is s with the values secrets knows masked, as txn.scrub masks
// free text about an operation (nil secrets: s as it is).
func scrubText(secrets *secretText, s string) string {
	if secrets == nil || s == "" {
		return s
	}
	// The phrases other parts of opledger read back to decide
	// (marker.Phrases) are kept whole: a secret inside one is masked
	// everywhere but there. Text in which nothing is masked is returned
	// as it is, without a copy.
	var b strings.Builder
	whole, done, masked := s, 0, false // whole[:done] is in b once masked
	for s != "" {
		at, phrase := len(s), ""
		for _, p := range marker.Phrases {
			if i := strings.Index(s, p); i >= 0 && i < at {
				at, phrase = i, p
			}
		}
		if m := secrets.mask(s[:at]); m != s[:at] {
			b.WriteString(whole[done : len(whole)-len(s)])
			b.WriteString(m)
			done, masked = len(whole)-len(s)+at, true
		}
		s = s[at+len(phrase):]
	}
	if !masked {
		return whole
	}
	b.WriteString(whole[done:])
	return b.String()
}

// keep returns free text to store about the operation: its sensitive
// values masked first, then cut to at most n bytes between characters,
// with NUL bytes and invalid UTF-8 replaced. Masking before cutting keeps a
// value that crosses the cut from being stored in part.
func (t *txn) keep(s string, n int) string { return keepableText(t.scrub(s), n) }

// note records evidence without a state change.
func (t *txn) note(actor, attemptID, event, evidence string) {
	t.timeline = append(t.timeline, &store.TimelineEntry{
		Tenant: t.tenant, Key: t.key, At: t.now, Actor: actor, AttemptID: attemptID,
		Event: event, Evidence: evidence,
	})
}

// refuse builds the StateError for the operation's current state.
func (t *txn) refuse(op string) error {
	return &StateError{Op: op, Key: t.key, State: State(t.op.State), Operation: toOperation(t.op)}
}

// refused is err, a refusal of a call on the operation (ErrStaleDecision,
// ErrStaleFinding, ErrAlreadyDispatched), with the operation as it was
// then (OperationOf).
func (t *txn) refused(err error) error {
	return &refusal{err: err, op: toOperation(t.op)}
}

// Actors named in the timeline besides workers and operators.
const (
	ActorSystem     = "system"
	ActorReconciler = "reconciler"
)
