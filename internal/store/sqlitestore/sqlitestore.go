// Package sqlitestore is the embedded SQLite driver of opledger, built on the
// pure-Go modernc.org/sqlite so that `go install` needs no C toolchain.
//
// The database runs in WAL mode with synchronous=FULL: a claim or an outcome
// that a power cut rolls back after the caller was told it was durable could
// turn into a duplicate effect, so every commit is fsynced. NORMAL is an
// explicit opt-in (Options.SynchronousNormal) for throwaway ledgers.
//
// All writes go through one connection (one writer, as SQLite allows anyway)
// and every write transaction starts with BEGIN IMMEDIATE, so a transaction
// never has to upgrade a read lock and never fails half-way with SQLITE_BUSY.
// Concurrent callers' write functions share transactions (group commit, see
// Update): one fsync then covers many of them, each in its own savepoint.
// Reads use a separate pool and run concurrently with the writer. Several
// processes may share one file: they queue for its write lock in the
// kernel, on a flock of the file beside it (writeLock, WriteLockSuffix),
// and then wait for SQLite's own lock, which a writer outside opledger may
// hold; both waits together last at most the busy timeout
// (Options.BusyTimeout, lockBudget). Past it the write fails with
// store.ErrBusy, and a full disk fails it with store.ErrFull (classify).
//
// Allowed imports: internal/store, internal/store/migrate, the SQLite driver.
package sqlitestore

import (
	"cmp"
	"context"
	"database/sql"
	"database/sql/driver"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/opledger/opledger/internal/store"
	"github.com/opledger/opledger/internal/store/migrate"
)

//go:embed migrations/*.sql
var migrationsFS embed.FS

var (
	_ store.Store                = (*Store)(nil)
	_ store.WriteLockWaitCounter = (*Store)(nil)
	_ store.WriterWorkCounter    = (*Store)(nil)
)

// Options tune the SQLite store.
type Options struct {
	// SynchronousNormal trades the durability of the last commits on power
	// loss for speed. Never use it for a ledger whose effects matter.
	SynchronousNormal bool
	// BusyTimeout is how long a write waits, in all, for the processes
	// queued before it on the file's write lock and then for SQLite's
	// lock, before failing with store.ErrBusy. Zero or less means 10
	// seconds.
	BusyTimeout time.Duration
}

// Store is a SQLite-backed store.Store.
type Store struct {
	path   string
	writer *sql.DB
	reader *sql.DB
	// wconn is the one writer connection, held for the store's life so
	// that its prepared statements stay valid; wlock admits one write
	// transaction at a time and honours the caller's context while waiting.
	wconn *sql.Conn
	wlock chan struct{}
	// fileLock queues this process's write transactions with other
	// processes' on the same file (writeLock); busy bounds that wait
	// and the one for SQLite's lock after it, together.
	fileLock *writeLock
	busy     time.Duration
	// wbusy is the writer connection's busy_timeout: busy, or what a
	// batch has left of it (lockBudget). Only the writer (wlock) uses it.
	wbusy      time.Duration
	group      groupCommit
	writeStmts *stmtCache
	readStmts  *stmtCache
	// newest is the version of the newest embedded migration: a write
	// transaction refuses a schema past it (checkSchema).
	newest int
	// closed is set by Close: every call after it is store.ErrClosed.
	closed atomic.Bool
}

// checkOpen is store.ErrClosed once Close has been called.
func (s *Store) checkOpen() error {
	if s.closed.Load() {
		return store.ErrClosed
	}
	return nil
}

// settled is a call's error classified (classify), and store.ErrClosed as
// well when Close came while the call ran (store.ClosedDuring); a write
// to a ledger this process may not write says so first.
func (s *Store) settled(err error) error {
	if se := (*sqlite.Error)(nil); errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_READONLY {
		// A process that only opened the ledger to read or decide (no
		// writability check at Open) and may not write it: say so, not
		// the failing statement's step ("record recovery: attempt to
		// write a readonly database").
		err = fmt.Errorf("cannot write the ledger at %s: this process may not write its file, or the -wal and -shm files beside it; nothing was recorded (%w)", s.path, err)
	}
	return store.ClosedDuring(classify(err), s.closed.Load())
}

// DSNPath returns the file a "sqlite:PATH" DSN names, as opledger.Open
// opens it: PATH, taken literally, without a leading "//" (so that
// sqlite://ledger.db names ledger.db and sqlite:///var/ledger.db names
// /var/ledger.db). ok is false when dsn does not start with "sqlite:".
// Anything that opens, checks or removes the file of a sqlite: DSN takes
// its path from here, and opens it through FileURI.
func DSNPath(dsn string) (path string, ok bool) {
	path, ok = strings.CutPrefix(dsn, "sqlite:")
	if !ok {
		return "", false
	}
	return strings.TrimPrefix(path, "//"), true
}

// FileURI is the SQLite URI of the file at path, whatever its name holds:
// SQLite decodes %HH escapes in a URI and ends its path at '?' or '#', so
// those three are escaped, and an absolute path gets an empty authority
// ("file://" + path), so that one starting with "//" is not read as a host.
// Query parameters follow it after a '?'.
func FileURI(path string) string {
	escaped := strings.NewReplacer("%", "%25", "?", "%3F", "#", "%23").Replace(path)
	if strings.HasPrefix(path, "/") {
		return "file://" + escaped
	}
	return "file:" + escaped
}

// HoldsLedger reports whether the existing SQLite file at path holds an
// opledger ledger (checkLedger), reading it without writing anything: an
// empty file, or another application's database, does not. Migrate would
// make an empty file a ledger; it refuses another application's
// (store.ErrNotLedger).
//
// A file that is not a SQLite database is an error that IsNotDatabase
// reports; a directory one that wraps syscall.EISDIR.
func HoldsLedger(ctx context.Context, path string) (bool, error) {
	if fi, err := os.Stat(path); err != nil {
		return false, err
	} else if fi.IsDir() {
		return false, &fs.PathError{Op: "open", Path: path, Err: syscall.EISDIR}
	}
	holds, _, err := inspect(ctx, path)
	return holds, err
}

// RollbackJournalUnwritable reports whether the SQLite file at path is
// not in WAL mode (its header's bytes 18 and 19 are not 2: a ledger
// copied by an older release's backup keeps rollback-journal mode), which
// Open's journal_mode(WAL) must write to switch, and this process may
// not open the file for writing. A file too short to have a header is not: SQLite says what it
// makes of it.
func RollbackJournalUnwritable(path string) (bool, error) {
	rollback, err := rollbackJournal(path)
	if err != nil || !rollback {
		return false, err
	}
	w, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return true, nil
	}
	return false, w.Close()
}

// RollbackJournal reports whether the SQLite file at path is in
// rollback-journal mode (a ledger copied by an older release's backup),
// which Open switches to WAL; false for a file too short to have a header.
func RollbackJournal(path string) (bool, error) { return rollbackJournal(path) }

// rollbackJournal reports whether the header of the SQLite file at path
// says it is not in WAL mode (bytes 18 and 19 not 2); a file too short to
// have a header is not.
func rollbackJournal(path string) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	var h [20]byte
	if _, err := io.ReadFull(f, h[:]); err != nil {
		return false, nil
	}
	return h[18] != 2 || h[19] != 2, nil
}

// IsNotDatabase reports an error of a file that is not a SQLite database
// (SQLITE_NOTADB): some other file, rather than a failure to read one.
func IsNotDatabase(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_NOTADB
}

// inspect runs checkLedger on the file at path, opened read-only, and
// leaves its directory as it found it (leaveAsFound).
func inspect(ctx context.Context, path string) (holds bool, others []string, err error) {
	defer leaveAsFound(ctx, path)()
	db, err := sql.Open("sqlite", FileURI(path)+"?mode=ro&_pragma=busy_timeout(10000)")
	if err != nil {
		return false, nil, fmt.Errorf("open sqlite %s read-only: %w", path, err)
	}
	defer db.Close()
	if holds, others, err = checkLedger(ctx, db); err != nil {
		var se *sqlite.Error
		if errors.As(err, &se) && se.Code() == sqlite3.SQLITE_READONLY_DIRECTORY {
			// A WAL database that no process has open: even a reader
			// creates its -shm file, in a directory it may not write.
			return false, nil, fmt.Errorf("read sqlite %s: no process has it open, so reading it means creating %s-shm beside it, and this process may not write to its directory "+
				"(%w); run this as a user who may, or while a process of the ledger has it open", path, path, err)
		}
		return false, nil, classify(fmt.Errorf("read sqlite %s: %w", path, err))
	}
	return holds, others, nil
}

// namedFile is the file path names: the target of a symbolic link (as
// far as it resolves), beside which SQLite makes the -wal and -shm
// files, and the write lock its own.
func namedFile(path string) string {
	if target, err := filepath.EvalSymlinks(path); err == nil {
		return target
	}
	return path
}

// leaveAsFound notes whether the -wal and -shm files of the SQLite
// database at path exist, and returns the function to call once a
// read-only connection to it is closed. Reading a WAL database that no
// process has open creates both, and a read-only connection cannot
// remove them when it closes (only a connection that may write
// checkpoints and deletes them), so a command that only read the file,
// or refused it, would leave them behind. When neither existed before
// and one does now, the function opens the file read-write (read-only,
// by SQLite's choice, if this process may not write it), reads it and
// closes it: SQLite then removes them itself, and only as the last
// connection to the file, so those of a process that opened the
// database meanwhile stay. The write-ahead log it made is empty: the
// checkpoint on close writes nothing to the database. A path that is a
// symbolic link is looked at where SQLite makes them: beside the file it
// names.
func leaveAsFound(ctx context.Context, path string) func() {
	beside := namedFile(path)
	exists := func(suffix string) bool {
		_, err := os.Lstat(beside + suffix)
		return !errors.Is(err, fs.ErrNotExist)
	}
	if exists("-wal") || exists("-shm") {
		return func() {}
	}
	return func() {
		if !exists("-wal") && !exists("-shm") {
			return
		}
		db, err := sql.Open("sqlite", FileURI(path)+"?mode=rw&_pragma=busy_timeout(10000)")
		if err != nil {
			return
		}
		defer db.Close()
		var n int
		_ = db.QueryRowContext(context.WithoutCancel(ctx), `SELECT count(*) FROM sqlite_master`).Scan(&n)
	}
}

// checkLedger reads whether the database holds an opledger ledger: a
// schema_migrations table with the columns the ledger reads, recording
// store.FirstMigration as version 1 (another application's table of that
// name does not count). When it does not, others names up to six of its
// tables and views, sorted: empty for an empty database.
func checkLedger(ctx context.Context, q querier) (holds bool, others []string, err error) {
	var shaped bool
	err = q.QueryRowContext(ctx, `SELECT count(*) = 2 FROM pragma_table_info('schema_migrations')
		WHERE (name = 'version' AND upper(type) = 'INTEGER') OR (name = 'name' AND upper(type) = 'TEXT')`).Scan(&shaped)
	if err != nil {
		return false, nil, err
	}
	if shaped {
		if err := q.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM schema_migrations WHERE version = 1 AND name = ?)`,
			store.FirstMigration).Scan(&holds); err != nil {
			return false, nil, err
		}
	}
	if holds {
		return true, nil, nil
	}
	rows, err := q.QueryContext(ctx, `SELECT name FROM sqlite_master WHERE type IN ('table', 'view')
		AND name NOT LIKE 'sqlite\_%' ESCAPE '\' ORDER BY name LIMIT 6`)
	if err != nil {
		return false, nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return false, nil, err
		}
		others = append(others, name)
	}
	return false, others, rows.Err()
}

// DirExists reports whether dir is a directory; a path that cannot be
// examined counts as one, and SQLite says what it makes of it. Open
// refuses a file in a directory that does not exist.
func DirExists(dir string) bool {
	fi, err := os.Stat(dir)
	return err != nil && !errors.Is(err, fs.ErrNotExist) || err == nil && fi.IsDir()
}

// Open opens (creating if needed) the SQLite database at path. It does not
// migrate; call Migrate. A new file is created readable and writable by
// its owner only (createPrivate); an existing one keeps its mode.
func Open(ctx context.Context, path string, opts Options) (*Store, error) {
	if path == "" {
		return nil, errors.New("open sqlite: empty path")
	}
	// Another application's database is refused before the first
	// connection would switch it to WAL, and before Migrate would mix
	// the ledger's tables with its own.
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return nil, &fs.PathError{Op: "open sqlite", Path: path, Err: syscall.EISDIR}
	} else if errors.Is(err, fs.ErrNotExist) {
		// SQLite says only "unable to open database file".
		if dir := filepath.Dir(path); !DirExists(dir) {
			return nil, fmt.Errorf("open sqlite %s: the directory %s does not exist: create it, or name a file in another", path, dir)
		}
		if err := createPrivate(path); err != nil {
			return nil, fmt.Errorf("open sqlite %s: %w", path, err)
		}
	} else if err == nil && fi.Mode().IsRegular() && fi.Size() > 0 {
		holds, others, err := inspect(ctx, path)
		if err != nil {
			return nil, err
		}
		if !holds && len(others) > 0 {
			return nil, fmt.Errorf("%w: %s holds other tables (%s) and no opledger ledger; give opledger a file of its own",
				store.ErrNotLedger, path, strings.Join(others, ", "))
		}
	}
	busy := opts.BusyTimeout
	if busy <= 0 {
		busy = 10 * time.Second
	}
	sync := "FULL"
	if opts.SynchronousNormal {
		sync = "NORMAL"
	}
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", busy.Milliseconds()))
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous("+sync+")")
	q.Add("_pragma", "foreign_keys(1)")
	// A large transaction (a migration copying a table, a first retention
	// run) grows the WAL file; SQLite reuses it from the start after a
	// checkpoint but never shrinks it unless told to: this cuts it back to
	// walSizeLimit when it is reset.
	q.Add("_pragma", fmt.Sprintf("journal_size_limit(%d)", walSizeLimit))
	base := FileURI(path) + "?" + q.Encode()

	// Savepoints of the group commit keep a copy of each page they change
	// (the statement journal); in memory rather than a temporary file. It
	// holds nothing needed after a crash: the WAL alone makes a commit
	// durable. Only the writer: the readers' temporary storage is where a
	// large sort (Stats groups every attempt of the ledger) spills, and in
	// memory it would grow with the ledger.
	writer, err := sql.Open("sqlite", base+"&_txlock=immediate&_pragma=temp_store(MEMORY)")
	if err != nil {
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	// One writer connection: SQLite allows one writer at a time anyway, and
	// queueing in the pool is cheaper than spinning on SQLITE_BUSY.
	writer.SetMaxOpenConns(1)
	writer.SetMaxIdleConns(1)
	writer.SetConnMaxLifetime(0)
	writer.SetConnMaxIdleTime(0)

	reader, err := sql.Open("sqlite", base)
	if err != nil {
		writer.Close()
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	reader.SetMaxOpenConns(8)
	reader.SetMaxIdleConns(8)

	wconn, err := writer.Conn(ctx)
	if err != nil {
		reader.Close()
		writer.Close()
		// The connection's journal_mode(WAL) writes a file still in
		// rollback-journal mode, and makes files beside it.
		var se *sqlite.Error
		if errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_READONLY {
			if rollback, _ := rollbackJournal(path); rollback {
				return nil, fmt.Errorf("open sqlite %s: it is in rollback-journal mode (a backup made by an older opledger), which opening it switches to WAL, "+
					"and this process may not write it, or the directory it is in (%w): open it once as a user who may (opledger migrate --db sqlite:%s), "+
					"then read it as before", path, err, path)
			}
		}
		return nil, classify(fmt.Errorf("open sqlite %s: %w", path, err))
	}
	s := &Store{path: path, writer: writer, reader: reader, wconn: wconn, wlock: make(chan struct{}, 1),
		fileLock: newWriteLock(path), busy: busy, wbusy: busy.Truncate(time.Millisecond), writeStmts: newStmtCache(wconn), readStmts: newStmtCache(reader)}
	if s.newest, err = newestVersion(); err != nil {
		s.Close()
		return nil, err
	}
	if err := s.Ping(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// createPrivate creates the empty database file at path, which does not
// exist, with mode 0600: it holds every payload, and the token and session
// hashes, as a backup does (Backup). SQLite would create it with 0644
// under the usual umask, readable by every user of the host, and creates
// its -wal and -shm files (and writeLock its lock file) with the mode of
// the database file, so they follow it. A file another process creates
// there meanwhile is left as it is, and so is the mode of every existing
// file: an operator may have given a group access on purpose. A symbolic
// link to a file that does not exist yet gets its file made where it
// points, as SQLite would.
func createPrivate(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		if _, serr := os.Stat(path); !errors.Is(serr, fs.ErrNotExist) {
			return nil
		}
		f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	}
	if err != nil {
		return err
	}
	return f.Close()
}

// CheckWritable refuses a database that SQLite opened read-only: a file
// this process may not write (its mode and owner, or an immutable
// attribute), which SQLite opens for reading rather than fail to open,
// so that every write would fail instead. So it refuses a -wal or -shm
// file beside it that this process may not write, which SQLite opens
// for reading too: those a process of another user leaves when it read
// the ledger while no process had it open (they take the ledger's mode,
// but that user as owner, and a reader cannot remove them). It reads no
// page and takes no lock.
func (s *Store) CheckWritable(ctx context.Context) error {
	if err := s.checkWritable(ctx); err != nil {
		return err
	}
	beside := namedFile(s.path)
	for _, side := range []string{beside + "-wal", beside + "-shm"} {
		// Asked without opening them: closing a descriptor of a file
		// drops every POSIX lock this process holds on it, SQLite's on
		// the -shm file among them.
		switch err := mayWrite(side); {
		case errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EROFS):
			// SQLite would open it for reading, and every write would
			// fail: "attempt to write a readonly database".
			return fmt.Errorf("cannot write the ledger at %s: its file %s: %w (a process of another user that reads the ledger while no process has it open leaves its own -wal and -shm files): "+
				"while no process has the ledger open, give %s-wal and %s-shm to this user (chown); a process that writes to the ledger (serve, proxy, migrate) needs files it may write",
				s.path, side, err, beside, beside)
		}
	}
	return nil
}

func (s *Store) checkWritable(ctx context.Context) error {
	var readOnly bool
	err := s.wconn.Raw(func(dc any) error {
		c, ok := dc.(interface{ IsReadOnly(string) (bool, error) })
		if !ok {
			return fmt.Errorf("the SQLite driver (%T) does not tell a read-only database", dc)
		}
		var err error
		readOnly, err = c.IsReadOnly("main")
		return err
	})
	if err != nil || !readOnly {
		return err
	}
	// SQLite does not keep why: the error of opening it for writing does.
	cause := "SQLite opened it read-only"
	if f, err := os.OpenFile(s.path, os.O_RDWR, 0); err != nil {
		cause = err.Error()
	} else {
		f.Close()
	}
	return fmt.Errorf("cannot write the ledger at %s: %s; a process that writes to the ledger (serve, proxy, migrate) needs a file it may write", s.path, cause)
}

// WriteLockWaits counts the write transactions of this store that waited
// for another process's write lock on the file (writeLock).
func (s *Store) WriteLockWaits() store.WriteLockWaits { return s.fileLock.counts() }

// WriterWork counts the batches the writer ran for this store's writes
// and how long it was busy with them (groupCommit).
func (s *Store) WriterWork() store.WriterWork {
	return store.WriterWork{Batches: s.group.batches.Load(), Writes: s.group.writes.Load(), Busy: time.Duration(s.group.busyNs.Load())}
}

// Name returns "sqlite".
func (s *Store) Name() string { return "sqlite" }

// Path is the database file.
func (s *Store) Path() string { return s.path }

// Ping checks that the database file can be read.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	if err := s.reader.PingContext(ctx); err != nil {
		return s.settled(fmt.Errorf("ping sqlite %s: %w", s.path, err))
	}
	return nil
}

// walSizeLimit is the size the WAL file is cut back to when SQLite resets
// it after a checkpoint (PRAGMA journal_size_limit).
const walSizeLimit = 64 << 20

// Close closes both connection pools and the write lock's file, once
// the write under way, if any, has ended; writes queued behind it fail
// with store.ErrClosed, none of them run.
func (s *Store) Close() error {
	s.closed.Store(true)
	// Wait for the writer (wlock): a batch under way runs the write
	// statements on the write connection, and closing them under it
	// would free what SQLite is using (a fault that kills the process).
	// Requests still queued have not run: they get ErrClosed, and so
	// does any that a leader takes after (lead).
	s.wlock <- struct{}{}
	defer func() { <-s.wlock }()
	s.group.failQueued(fmt.Errorf("begin: %w", store.ErrClosed))
	return errors.Join(s.readStmts.close(), s.writeStmts.close(), s.wconn.Close(), s.reader.Close(), s.writer.Close(), s.fileLock.close())
}

// Migrate applies the embedded migrations that the database lacks. A
// database that lacks none is told from a read, without the write lock:
// every process opening the ledger migrates, and one that only reads
// (opledger ops list beside a busy serve) would otherwise queue behind
// the writers, and fail past the busy timeout.
func (s *Store) Migrate(ctx context.Context, progress migrate.Progress) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	migs, err := migrate.Load(migrationsFS, "migrations")
	if err != nil {
		return err
	}
	if current, ok, err := s.schemaVersion(ctx); err != nil {
		return s.settled(err)
	} else if ok {
		pending, err := migrate.Pending(migs, current)
		if err != nil || len(pending) == 0 {
			return err
		}
	}
	return s.settled(s.submit(&writeReq{ctx: ctx, migration: true, done: make(chan writeResult, 1), fn: func(ctx context.Context, tx store.Tx) error {
		t := tx.(*sqlTx)
		if _, err := t.q.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
			version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)`); err != nil {
			return fmt.Errorf("create schema_migrations: %w", err)
		}
		var current int
		if err := t.q.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&current); err != nil {
			return fmt.Errorf("read schema version: %w", err)
		}
		pending, err := migrate.Pending(migs, current)
		if err != nil {
			return err
		}
		for i, m := range pending {
			// A migration holds several statements: run it unprepared.
			cq := t.q.(*cachedQuerier)
			if _, err := cq.plain.ExecContext(cq.context(ctx), m.SQL); err != nil {
				return fmt.Errorf("apply migration %s: %w", m.Name, err)
			}
			if _, err := t.q.ExecContext(ctx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`,
				m.Version, m.Name, toMicros(time.Now())); err != nil {
				return fmt.Errorf("record migration %s: %w", m.Name, err)
			}
			progress.Report(i+1, len(pending), m.Name)
		}
		return nil
	}}))
}

// schemaVersion reads the newest migration applied, through the readers;
// ok is false when the database has no schema_migrations table yet.
func (s *Store) schemaVersion(ctx context.Context) (version int, ok bool, err error) {
	var tables int
	if err := s.reader.QueryRowContext(ctx,
		`SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'`).Scan(&tables); err != nil {
		return 0, false, fmt.Errorf("read schema version: %w", err)
	}
	if tables == 0 {
		return 0, false, nil
	}
	if err := s.reader.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&version); err != nil {
		return 0, false, fmt.Errorf("read schema version: %w", err)
	}
	return version, true, nil
}

// SchemaVersion implements store.Store, through the readers; its errors
// are classified as every read's (settled).
func (s *Store) SchemaVersion(ctx context.Context) (current, newest int, err error) {
	if err := s.checkOpen(); err != nil {
		return 0, 0, err
	}
	if current, _, err = s.schemaVersion(ctx); err != nil {
		return 0, 0, s.settled(err)
	}
	return current, s.newest, nil
}

// MigrationVersions lists the versions of the embedded migrations.
func MigrationVersions() ([]int, error) { return migrate.Versions(migrationsFS, "migrations") }

// newestVersion is the version of the newest embedded migration.
var newestVersion = sync.OnceValues(func() (int, error) { return migrate.Newest(migrationsFS, "migrations") })

// View runs fn against the read pool.
func (s *Store) View(ctx context.Context, fn func(context.Context, store.Reader) error) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	return s.settled(fn(ctx, &sqlReader{q: &cachedQuerier{cache: s.readStmts, plain: s.reader}}))
}

// ViewSnapshot implements store.Store with a read transaction on one
// reader connection: in WAL mode its first read fixes the snapshot every
// later read sees. Its statements are prepared on that connection, not
// taken from the readers' cache.
func (s *Store) ViewSnapshot(ctx context.Context, fn func(context.Context, store.Reader) error) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	return s.settled(s.viewSnapshot(ctx, fn))
}

func (s *Store) viewSnapshot(ctx context.Context, fn func(context.Context, store.Reader) error) error {
	conn, err := s.reader.Conn(ctx)
	if err != nil {
		return fmt.Errorf("snapshot connection: %w", err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, `BEGIN`); err != nil {
		return fmt.Errorf("begin snapshot: %w", err)
	}
	err = fn(ctx, &sqlReader{q: conn})
	// A read transaction has nothing to keep: ROLLBACK ends it either way.
	if _, rbErr := conn.ExecContext(context.WithoutCancel(ctx), `ROLLBACK`); rbErr != nil {
		// Never hand the pool a connection still in a transaction.
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		if err == nil {
			err = fmt.Errorf("end snapshot: %w", rbErr)
		}
	}
	return err
}

type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

type sqlReader struct {
	q   querier
	now time.Time
}

type sqlTx struct {
	sqlReader
	// stored holds, for the operations this transaction has read or
	// written, their rows as they are now in the database, so that
	// UpdateOperation can set only the columns that change (see there),
	// and the rowRef of those it wrote (operationRef, appendTimelineSQL).
	// Transactions touch one operation or a few: a slice searched in
	// order.
	stored []*storedOp
}

// inserted records what the INSERT of op (args being opArgs(op)) stored:
// the row, and the row id it was given. A new operation has no timeline
// entries: a deleted operation's went with it, and a new row id is larger
// than any other in the table, or reuses the id of a deleted operation.
func (t *sqlTx) inserted(op *store.Operation, args []any, res sql.Result) {
	id, err := res.LastInsertId()
	if err != nil {
		id = 0 // not known: operationRef looks it up
	}
	t.keep(op, args, rowRef{id: id})
}

// operationRef is the SQL expression of an operation's row id and its
// arguments: the id itself when this transaction wrote the operation, a
// lookup otherwise (which yields NULL, and fails the NOT NULL column it
// fills, when there is no such operation).
func (t *sqlTx) operationRef(tenant, key string) (string, []any) {
	if s := t.written(tenant, key); s != nil {
		return "?", []any{s.id}
	}
	return "(" + operationID + ")", []any{tenant, key}
}

func toMicros(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMicro()
}

func fromMicros(v int64) time.Time {
	if v == 0 {
		return time.Time{}
	}
	return time.UnixMicro(v).UTC()
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func mapErr(err error) error {
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() {
		case sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY, sqlite3.SQLITE_CONSTRAINT_UNIQUE:
			return fmt.Errorf("%w: %v", store.ErrConflict, err)
		}
	}
	return err
}

// classify marks the SQLite errors that are no fault of the request:
// another connection's lock held past the busy timeout (SQLITE_BUSY, and
// SQLITE_LOCKED) with store.ErrBusy, a full disk (SQLITE_FULL) with
// store.ErrFull, keeping the original in the chain. SQLite rolls back the
// transaction such an error ends (and Update rolls back any other), so
// nothing of it was written. Every Store method that runs SQL returns its
// error through it.
func classify(err error) error {
	if err == nil || errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrBusy) || errors.Is(err, store.ErrFull) {
		return err
	}
	if qt := (*queueTimeoutError)(nil); errors.As(err, &qt) {
		return fmt.Errorf("%w (%w)", store.ErrBusy, err)
	}
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return err
	}
	switch se.Code() & 0xff { // the primary code of an extended one (SQLITE_BUSY_TIMEOUT, ...)
	case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
		return fmt.Errorf("%w (%w)", store.ErrBusy, err)
	case sqlite3.SQLITE_FULL:
		return fmt.Errorf("%w (%w)", store.ErrFull, err)
	}
	return err
}

// isBusy reports SQLite's SQLITE_BUSY, of any extended code.
func isBusy(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_BUSY
}

// Now reads the clock of the machine the database file lives on, which for
// an embedded database is this process's machine. It is fixed per
// transaction.
func (r *sqlReader) Now(context.Context) (time.Time, error) {
	if r.now.IsZero() {
		r.now = time.Now().UTC().Truncate(time.Microsecond)
	}
	return r.now, nil
}

const opColumns = `tenant, key, action, destination, version, fingerprint, payload, sensitive_fields,
	owner, source_event, requires_approval, approved_by, state, failure_kind, dispatched,
	first_dispatched_at, attempt_count, fencing_token, current_attempt_id, lease_expires_at,
	not_before, review_by, unresolved_since, protected, destination_ref, response, last_error,
	duplicate_effects, revision, created_at, updated_at, protected_until, state_since, earlier_payloads`

type scanner interface{ Scan(dest ...any) error }

func scanOperation(sc scanner) (*store.Operation, error) {
	var (
		op                                                store.Operation
		sensitive                                         string
		reqApproval, dispatched, protected                int
		firstDisp, lease, notBefore, reviewBy, unresolved int64
		created, updated, protectedUntil, stateSince      int64
	)
	err := sc.Scan(&op.Tenant, &op.Key, &op.Action, &op.Destination, &op.Version, &op.Fingerprint,
		&op.Payload, &sensitive, &op.Owner, &op.SourceEvent, &reqApproval, &op.ApprovedBy, &op.State,
		&op.FailureKind, &dispatched, &firstDisp, &op.AttemptCount, &op.FencingToken,
		&op.CurrentAttemptID, &lease, &notBefore, &reviewBy, &unresolved, &protected,
		&op.DestinationRef, &op.Response, &op.LastError, &op.DuplicateEffects, &op.Revision,
		&created, &updated, &protectedUntil, &stateSince, &op.EarlierPayloads)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal([]byte(sensitive), &op.SensitiveFields); err != nil {
		return nil, fmt.Errorf("decode sensitive_fields of %s: %w", op.Key, err)
	}
	op.RequiresApproval = reqApproval != 0
	op.Dispatched = dispatched != 0
	op.Protected = protected != 0
	op.FirstDispatchedAt = fromMicros(firstDisp)
	op.LeaseExpiresAt = fromMicros(lease)
	op.NotBefore = fromMicros(notBefore)
	op.ReviewBy = fromMicros(reviewBy)
	op.UnresolvedSince = fromMicros(unresolved)
	op.CreatedAt = fromMicros(created)
	op.UpdatedAt = fromMicros(updated)
	op.ProtectedUntil = fromMicros(protectedUntil)
	op.StateSince = fromMicros(stateSince)
	return &op, nil
}

func opArgs(op *store.Operation) ([]any, error) {
	sensitive := op.SensitiveFields
	if sensitive == nil {
		sensitive = []string{}
	}
	sb, err := json.Marshal(sensitive)
	if err != nil {
		return nil, err
	}
	payload := op.Payload
	if payload == nil {
		payload = []byte("null")
	}
	return []any{op.Tenant, op.Key, op.Action, op.Destination, op.Version, op.Fingerprint,
		payload, string(sb), op.Owner, op.SourceEvent, boolInt(op.RequiresApproval), op.ApprovedBy,
		op.State, op.FailureKind, boolInt(op.Dispatched), toMicros(op.FirstDispatchedAt),
		op.AttemptCount, op.FencingToken, op.CurrentAttemptID, toMicros(op.LeaseExpiresAt),
		toMicros(op.NotBefore), toMicros(op.ReviewBy), toMicros(op.UnresolvedSince),
		boolInt(op.Protected), op.DestinationRef, op.Response, op.LastError, op.DuplicateEffects,
		op.Revision, toMicros(op.CreatedAt), toMicros(op.UpdatedAt), toMicros(op.ProtectedUntil), toMicros(op.StateSince),
		op.EarlierPayloads}, nil
}

func (r *sqlReader) GetOperation(ctx context.Context, tenant, key string) (*store.Operation, error) {
	row := r.q.QueryRowContext(ctx, `SELECT `+opColumns+` FROM operations WHERE tenant = ? AND key = ?`, tenant, key)
	op, err := scanOperation(row)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, store.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("get operation: %w", err)
	}
	return op, nil
}

// GetOperation reads the operation and keeps a copy of the row for
// UpdateOperation.
func (t *sqlTx) GetOperation(ctx context.Context, tenant, key string) (*store.Operation, error) {
	op, err := t.sqlReader.GetOperation(ctx, tenant, key)
	if err != nil {
		return nil, err
	}
	args, err := opArgs(op)
	if err != nil {
		return nil, err
	}
	t.keep(op, args, rowRef{})
	return op, nil
}

// GetOperationNoWait is GetOperation: the write transaction holds
// SQLite's only write lock, so no other transaction holds the row.
func (t *sqlTx) GetOperationNoWait(ctx context.Context, tenant, key string) (*store.Operation, error) {
	return t.GetOperation(ctx, tenant, key)
}

func (r *sqlReader) GetTombstone(ctx context.Context, tenant, key string) (*store.Tombstone, error) {
	var t store.Tombstone
	var created, finished, compacted int64
	err := r.q.QueryRowContext(ctx, `SELECT tenant, key, fingerprint, state, failure_kind, destination_ref,
		duplicate_effects, version, attempt_count, created_at, finished_at, compacted_at FROM tombstones WHERE tenant = ? AND key = ?`, tenant, key).
		Scan(&t.Tenant, &t.Key, &t.Fingerprint, &t.State, &t.FailureKind, &t.DestinationRef, &t.DuplicateEffects, &t.Version,
			&t.AttemptCount, &created, &finished, &compacted)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, store.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("get tombstone: %w", err)
	}
	t.CreatedAt, t.FinishedAt, t.CompactedAt = fromMicros(created), fromMicros(finished), fromMicros(compacted)
	return &t, nil
}

// operationID selects the row id of the operation with the tenant and key
// of its two parameters. Attempts and timeline entries are found through
// it (migration 007): ids grow in the order operations are recorded, so
// that the entries of operations recorded together share index pages,
// however scattered their keys are.
const operationID = `SELECT id FROM operations WHERE tenant = ? AND key = ?`

const attemptColumns = `id, tenant, key, number, fencing_token, worker, protected, claimed_at,
	lease_expires_at, dispatched_at, finished_at, outcome, destination_ref, response, error, stale, destination, late_outcome, version`

func scanAttempt(sc scanner) (*store.Attempt, error) {
	var a store.Attempt
	var protected, stale int
	var claimed, lease, dispatched, finished int64
	if err := sc.Scan(&a.ID, &a.Tenant, &a.Key, &a.Number, &a.FencingToken, &a.Worker, &protected,
		&claimed, &lease, &dispatched, &finished, &a.Outcome, &a.DestinationRef, &a.Response, &a.Error, &stale, &a.Destination,
		&a.LateOutcome, &a.Version); err != nil {
		return nil, err
	}
	a.Protected, a.Stale = protected != 0, stale != 0
	a.ClaimedAt, a.LeaseExpiresAt = fromMicros(claimed), fromMicros(lease)
	a.DispatchedAt, a.FinishedAt = fromMicros(dispatched), fromMicros(finished)
	return &a, nil
}

func (r *sqlReader) GetAttempt(ctx context.Context, tenant, key, id string) (*store.Attempt, error) {
	a, err := scanAttempt(r.q.QueryRowContext(ctx, `SELECT `+attemptColumns+` FROM attempts WHERE operation_id = (`+operationID+`) AND id = ?`, tenant, key, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, store.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("get attempt: %w", err)
	}
	return a, nil
}

func (r *sqlReader) ListAttempts(ctx context.Context, tenant, key string) ([]*store.Attempt, error) {
	rows, err := r.q.QueryContext(ctx, `SELECT `+attemptColumns+` FROM attempts WHERE operation_id = (`+operationID+`) ORDER BY number, id`, tenant, key)
	if err != nil {
		return nil, fmt.Errorf("list attempts: %w", err)
	}
	defer rows.Close()
	var out []*store.Attempt
	for rows.Next() {
		a, err := scanAttempt(rows)
		if err != nil {
			return nil, fmt.Errorf("list attempts: %w", err)
		}
		out = append(out, a)
	}
	return out, rows.Err()
}

func (r *sqlReader) ListTimeline(ctx context.Context, tenant, key string) ([]*store.TimelineEntry, error) {
	rows, err := r.q.QueryContext(ctx, `SELECT seq, tenant, key, at, actor, attempt_id, event, from_state, to_state, evidence
		FROM timeline WHERE operation_id = (`+operationID+`) ORDER BY seq`, tenant, key)
	if err != nil {
		return nil, fmt.Errorf("list timeline: %w", err)
	}
	defer rows.Close()
	var out []*store.TimelineEntry
	for rows.Next() {
		var e store.TimelineEntry
		var at int64
		if err := rows.Scan(&e.ID, &e.Tenant, &e.Key, &at, &e.Actor, &e.AttemptID, &e.Event, &e.FromState, &e.ToState, &e.Evidence); err != nil {
			return nil, fmt.Errorf("list timeline: %w", err)
		}
		e.At = fromMicros(at)
		out = append(out, &e)
	}
	return out, rows.Err()
}

// LastTimelineEntry returns the newest timeline entry of an operation.
func (r *sqlReader) LastTimelineEntry(ctx context.Context, tenant, key string) (*store.TimelineEntry, error) {
	var e store.TimelineEntry
	var at int64
	err := r.q.QueryRowContext(ctx, `SELECT seq, tenant, key, at, actor, attempt_id, event, from_state, to_state, evidence
		FROM timeline WHERE operation_id = (`+operationID+`) ORDER BY seq DESC LIMIT 1`, tenant, key).
		Scan(&e.ID, &e.Tenant, &e.Key, &at, &e.Actor, &e.AttemptID, &e.Event, &e.FromState, &e.ToState, &e.Evidence)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, store.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("last timeline entry: %w", err)
	}
	e.At = fromMicros(at)
	return &e, nil
}

// CountTimeline counts the entries of an operation's timeline that p
// selects: by its primary key, back from the newest entry to the newest
// into p.SinceState, then forward from that one.
func (r *sqlReader) CountTimeline(ctx context.Context, p store.TimelineCount) (int, error) {
	var n int
	err := r.q.QueryRowContext(ctx, `WITH op(id) AS (`+operationID+`)
		SELECT count(*) FROM timeline
		WHERE operation_id = (SELECT id FROM op) AND event = ?
		AND (? = '' OR (instr(evidence, '; ') > 0 AND substr(evidence, instr(evidence, '; ') + 2, length(?)) = ?))
		AND seq > COALESCE((SELECT seq FROM timeline WHERE operation_id = (SELECT id FROM op) AND to_state = ? ORDER BY seq DESC LIMIT 1), 0)`,
		p.Tenant, p.Key, p.Event, p.ReasonPrefix, p.ReasonPrefix, p.ReasonPrefix, p.SinceState).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count timeline: %w", err)
	}
	return n, nil
}

func (r *sqlReader) ListOperations(ctx context.Context, p store.ListParams) ([]*store.Operation, error) {
	query, args := listQuery(p)
	rows, err := r.q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("list operations: %w", err)
	}
	defer rows.Close()
	var out []*store.Operation
	for rows.Next() {
		op, err := scanOperation(rows)
		if err != nil {
			return nil, fmt.Errorf("list operations: %w", err)
		}
		out = append(out, op)
	}
	return out, rows.Err()
}

// listQuery builds the statement of ListOperations and its arguments.
//
// States without the succeeded one (the exception queue: held, uncertain,
// failed) are read from operations_not_succeeded, one SELECT per state,
// each in the index's order, merged by SQLite (MERGE (UNION ALL)): the
// list reads about a page of index entries however many operations the
// tenant has, and sorts nothing. Left to choose, SQLite read such a list
// from operations_tenant_created, filtering the tenant's operations in
// creation order, whenever its estimates (with or without ANALYZE, and
// depending on the data) favoured skipping the sort: on a ledger of
// 225,000 operations with a backlog of pending ones and no statistics, a
// median of 96 ms a page instead of 0.43 ms (docs/performance.md).
func listQuery(p store.ListParams) (string, []any) {
	// from names the index of held operations by review time, or of the
	// operations with duplicate effects: without statistics (the store
	// runs no ANALYZE) SQLite could rather read the held ones through
	// operations_not_succeeded and sort them, and the others through an
	// index holding every operation of the tenant.
	from, order := "operations", "created_at DESC, key DESC"
	where := []string{"tenant = ?"}
	args := []any{p.Tenant}
	switch {
	case p.ByReview:
		from, order = "operations INDEXED BY operations_held_review", "review_by, key"
		where = append(where, heldOnly)
	case p.Duplicates:
		// A handful of incidents among all the operations, sorted.
		from = "operations INDEXED BY operations_duplicates"
	case len(p.States) > 0 && !slices.Contains(p.States, store.StateSucceeded):
		var selects []string
		args = nil
		for _, st := range slices.Compact(slices.Sorted(slices.Values(p.States))) {
			w, a := listFilters(p, []string{"tenant = ?", "state = ?", notSucceeded}, []any{p.Tenant, st})
			selects = append(selects, `SELECT `+opColumns+` FROM operations INDEXED BY operations_not_succeeded WHERE `+w)
			args = append(args, a...)
		}
		return strings.Join(selects, " UNION ALL ") + ` ORDER BY ` + order + ` LIMIT ?`, append(args, p.Limit)
	}
	if p.Duplicates {
		where = append(where, "duplicate_effects > 0")
	}
	if len(p.States) > 0 && !p.ByReview {
		where = append(where, "state IN (?"+strings.Repeat(", ?", len(p.States)-1)+")")
		for _, s := range p.States {
			args = append(args, s)
		}
	}
	w, args := listFilters(p, where, args)
	return `SELECT ` + opColumns + ` FROM ` + from + ` WHERE ` + w + ` ORDER BY ` + order + ` LIMIT ?`, append(args, p.Limit)
}

// listFilters adds the owner, destination and cursor conditions of p to
// where and args and returns the conditions joined. Owner and destination
// have no index of their own: a list filtered by them reads its index
// (the tenant's operations, or those in the states asked for) in order
// until the page is full.
func listFilters(p store.ListParams, where []string, args []any) (string, []any) {
	if p.ExceptCancelled {
		where = append(where, notCancelled)
	}
	if p.Owner != "" {
		where = append(where, "owner = ?")
		args = append(args, p.Owner)
	}
	if p.Destination != "" {
		where = append(where, "destination = ?")
		args = append(args, p.Destination)
	}
	if !p.AfterAt.IsZero() {
		c := toMicros(p.AfterAt)
		// The first comparison bounds the index range; the rest picks the
		// operations after the cursor within it.
		if p.ByReview {
			where = append(where, "review_by >= ? AND (review_by > ? OR key > ?)")
		} else {
			where = append(where, "created_at <= ? AND (created_at < ? OR key < ?)")
		}
		args = append(args, c, c, p.AfterKey)
	}
	return strings.Join(where, " AND "), args
}

// notCancelled leaves out the failed operations that need no decision:
// those an operator cancelled, and the failed step of a cancelled
// workflow, found in the operation's own timeline (its primary key).
const notCancelled = "failure_kind <> 'cancelled' AND NOT EXISTS (SELECT 1 FROM timeline t " +
	"WHERE t.operation_id = operations.id AND t.event = '" + store.EventWorkflowCancelled + "')"

// CountFailedByKind counts a tenant's failed operations by failure kind,
// from operations_not_succeeded (whose condition the statement spells as
// the index does).
func (r *sqlReader) CountFailedByKind(ctx context.Context, tenant string) (map[string]int, error) {
	rows, err := r.q.QueryContext(ctx, `SELECT failure_kind, COUNT(*) FROM operations INDEXED BY operations_not_succeeded
		WHERE tenant = ? AND state = 'failed' AND `+notSucceeded+` GROUP BY failure_kind`, tenant)
	if err != nil {
		return nil, fmt.Errorf("count failed operations: %w", err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var kind string
		var n int
		if err := rows.Scan(&kind, &n); err != nil {
			return nil, fmt.Errorf("count failed operations: %w", err)
		}
		out[kind] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("count failed operations: %w", err)
	}
	return out, nil
}

// CountFailedNeedingDecision counts a tenant's failed operations but
// those that need no decision (notCancelled), from
// operations_not_succeeded.
func (r *sqlReader) CountFailedNeedingDecision(ctx context.Context, tenant string) (int, error) {
	var n int
	if err := r.q.QueryRowContext(ctx, `SELECT COUNT(*) FROM operations INDEXED BY operations_not_succeeded
		WHERE tenant = ? AND state = 'failed' AND `+notSucceeded+` AND `+notCancelled, tenant).Scan(&n); err != nil {
		return 0, fmt.Errorf("count failed operations: %w", err)
	}
	return n, nil
}

// CountOverdueReviews counts the held operations whose review_by has
// passed, from the index of held operations by review time.
func (r *sqlReader) CountOverdueReviews(ctx context.Context, tenant string, now time.Time) (int, error) {
	cond, args := tenantFilter("tenant", tenant)
	var n int
	err := r.q.QueryRowContext(ctx, `SELECT COUNT(*) FROM operations INDEXED BY operations_held_review
		WHERE `+cond+` AND `+heldOnly+` AND review_by < ?`, append(args, toMicros(now))...).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count overdue reviews: %w", err)
	}
	return n, nil
}

// OldestDue returns the due pending operation that has waited longest,
// and since when: the tenant's pending operations oldest first, from
// operations_not_succeeded, until no older one can have waited longer
// (store.OldestDueScan); if too many of them wait for their retry, the
// minimum over the due ones, from operations_due.
func (r *sqlReader) OldestDue(ctx context.Context, tenant string, now time.Time) (store.OperationID, time.Time, error) {
	cond, args := tenantFilter("tenant", tenant)
	// The index's own condition (notSucceeded) lets SQLite read it in
	// created_at order rather than sort the tenant's pending operations.
	rows, err := r.q.QueryContext(ctx, `SELECT tenant, key, created_at, not_before, state_since FROM operations
		WHERE state = 'pending' AND `+notSucceeded+` AND `+cond+` ORDER BY created_at, key LIMIT ?`, append(args, store.OldestDueScanRows+1)...)
	if err != nil {
		return store.OperationID{}, time.Time{}, fmt.Errorf("oldest due operation: %w", err)
	}
	defer rows.Close()
	var scan store.OldestDueScan
	for rows.Next() {
		var id store.OperationID
		var created, notBefore, pendingSince int64
		if err := rows.Scan(&id.Tenant, &id.Key, &created, &notBefore, &pendingSince); err != nil {
			return store.OperationID{}, time.Time{}, fmt.Errorf("oldest due operation: %w", err)
		}
		if !scan.Next(now, id, fromMicros(created), fromMicros(notBefore), fromMicros(pendingSince)) {
			break
		}
	}
	if err := rows.Err(); err != nil {
		return store.OperationID{}, time.Time{}, fmt.Errorf("oldest due operation: %w", err)
	}
	rows.Close()
	if scan.Concluded() {
		return scan.ID, scan.Since, nil
	}
	var id store.OperationID
	var since int64
	err = r.q.QueryRowContext(ctx, `SELECT tenant, key, MAX(not_before, state_since) AS since FROM operations
		WHERE `+cond+` AND state = 'pending' AND not_before <= ? ORDER BY since LIMIT 1`, append(args, toMicros(now))...).
		Scan(&id.Tenant, &id.Key, &since)
	if errors.Is(err, sql.ErrNoRows) {
		return store.OperationID{}, time.Time{}, nil
	}
	if err != nil {
		return store.OperationID{}, time.Time{}, fmt.Errorf("oldest due operation: %w", err)
	}
	return id, fromMicros(since), nil
}

// OldestAwaitingApproval returns the operation awaiting approval that
// entered that state (or was revised) the earliest, from
// operations_not_succeeded: the operations awaiting approval are sorted,
// a queue of people's work.
func (r *sqlReader) OldestAwaitingApproval(ctx context.Context, tenant string) (store.OperationID, time.Time, error) {
	cond, args := tenantFilter("tenant", tenant)
	var id store.OperationID
	var since int64
	err := r.q.QueryRowContext(ctx, `SELECT tenant, key, state_since FROM operations
		WHERE state = 'awaiting_approval' AND `+notSucceeded+` AND `+cond+` ORDER BY state_since, key LIMIT 1`, args...).
		Scan(&id.Tenant, &id.Key, &since)
	if errors.Is(err, sql.ErrNoRows) {
		return store.OperationID{}, time.Time{}, nil
	}
	if err != nil {
		return store.OperationID{}, time.Time{}, fmt.Errorf("oldest operation awaiting approval: %w", err)
	}
	return id, fromMicros(since), nil
}

func (r *sqlReader) ids(ctx context.Context, what, query string, args ...any) ([]store.OperationID, error) {
	rows, err := r.q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	defer rows.Close()
	var out []store.OperationID
	for rows.Next() {
		var id store.OperationID
		if err := rows.Scan(&id.Tenant, &id.Key); err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		out = append(out, id)
	}
	return out, rows.Err()
}

func (r *sqlReader) ExpiredLeases(ctx context.Context, now time.Time, after store.OperationID, limit int) ([]store.OperationID, error) {
	// From operations_not_succeeded, which holds lease_expires_at: the
	// running leases it skips cost no row reads. in_progress operations
	// are few (one per running worker), so sorting them by (tenant, key)
	// costs little.
	return r.ids(ctx, "list expired leases", `SELECT tenant, key FROM operations
		WHERE state = 'in_progress' AND `+notSucceeded+` AND lease_expires_at < ? AND (tenant, key) > (?, ?)
		ORDER BY tenant, key LIMIT ?`, toMicros(now), after.Tenant, after.Key, limit)
}

// dueQuery selects operations in state (a constant, never input) whose
// not_before has passed, oldest first, but those of p.Skip.
func dueQuery(state string, p store.DueParams) (string, []any) {
	q := `SELECT tenant, key FROM operations WHERE state = '` + state + `' AND not_before <= ?`
	args := []any{toMicros(p.Now)}
	if p.Tenant != "" {
		q += ` AND tenant = ?`
		args = append(args, p.Tenant)
	}
	if len(p.Destinations) > 0 {
		q += ` AND destination IN (?` + strings.Repeat(", ?", len(p.Destinations)-1) + `)`
		for _, d := range p.Destinations {
			args = append(args, d)
		}
	}
	if len(p.Skip) > 0 {
		// One parameter however many: a JSON array of [tenant, key].
		skip := make([][2]string, len(p.Skip))
		for i, id := range p.Skip {
			skip[i] = [2]string{id.Tenant, id.Key}
		}
		b, _ := json.Marshal(skip) // strings only: cannot fail
		q += ` AND (tenant, key) NOT IN (SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]') FROM json_each(?))`
		args = append(args, string(b))
	}
	q += ` ORDER BY not_before LIMIT ?`
	return q, append(args, p.Limit)
}

func (r *sqlReader) DueOperations(ctx context.Context, p store.DueParams) ([]store.OperationID, error) {
	q, args := dueQuery("pending", p)
	return r.ids(ctx, "list due operations", q, args...)
}

// LockDue needs no row locks on SQLite: the write transaction already holds
// the database's only write lock.
func (t *sqlTx) LockDue(ctx context.Context, p store.DueParams) ([]store.OperationID, error) {
	q, args := dueQuery("pending", p)
	return t.ids(ctx, "lock due operations", q, args...)
}

func (r *sqlReader) UncertainDue(ctx context.Context, p store.DueParams) ([]store.OperationID, error) {
	q, args := dueQuery("uncertain", p)
	return r.ids(ctx, "list uncertain operations", q, args...)
}

func (r *sqlReader) FinalBefore(ctx context.Context, p store.FinalParams) ([]store.FinalRow, error) {
	// operations_final finds the range from p.After's time; the rows of
	// one time (one shared transaction's) are sorted by tenant and key.
	after := toMicros(p.After.UpdatedAt)
	rows, err := r.q.QueryContext(ctx, `SELECT tenant, key, updated_at FROM operations
		WHERE state IN ('succeeded', 'failed') AND updated_at < ?
		AND updated_at >= ? AND (updated_at, tenant, key) > (?, ?, ?)
		ORDER BY updated_at, tenant, key LIMIT ?`,
		toMicros(p.Before), after, after, p.After.Tenant, p.After.Key, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("list final operations: %w", err)
	}
	defer rows.Close()
	var out []store.FinalRow
	for rows.Next() {
		var f store.FinalRow
		var at int64
		if err := rows.Scan(&f.Tenant, &f.Key, &at); err != nil {
			return nil, fmt.Errorf("list final operations: %w", err)
		}
		f.UpdatedAt = fromMicros(at)
		out = append(out, f)
	}
	return out, rows.Err()
}

func (r *sqlReader) CountByState(ctx context.Context, tenant string) (map[string]int, error) {
	out, err := r.countByState(ctx, tenant)
	if err != nil {
		return nil, fmt.Errorf("count operations: %w", err)
	}
	return out, nil
}

// notSucceeded is the condition of operations_not_succeeded (it leaves
// out store.StateSucceeded), which a statement must spell as the index
// does for SQLite to read the index.
const notSucceeded = "state <> 'succeeded'"

// heldOnly is the condition of operations_held_review (migration 014),
// written as a literal so that SQLite can use that index.
const heldOnly = "state = 'held'"

// countByStateSQL counts the operations matching cond by state, but the
// succeeded ones, then, in a row whose state is NULL, all of them: one
// statement, so that both counts come from the same snapshot. It names
// the index: without statistics (the store runs no ANALYZE) SQLite would
// rather read a tenant's rows through operations_tenant_created.
func countByStateSQL(cond string) string {
	return `SELECT state, COUNT(*) FROM operations INDEXED BY operations_not_succeeded
		WHERE ` + cond + ` AND ` + notSucceeded + ` GROUP BY state
		UNION ALL SELECT NULL, COUNT(*) FROM operations WHERE ` + cond
}

// countByState counts a tenant's operations ("" for all tenants) by state,
// from operations_not_succeeded and one count of them all: the succeeded
// ones are the rest. A state with no operation is left out.
func (r *sqlReader) countByState(ctx context.Context, tenant string) (map[string]int, error) {
	cond, args := tenantFilter("tenant", tenant)
	rows, err := r.q.QueryContext(ctx, countByStateSQL(cond), append(slices.Clone(args), args...)...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	byState, all := map[string]int{}, 0
	for rows.Next() {
		var state sql.NullString
		var n int
		if err := rows.Scan(&state, &n); err != nil {
			return nil, err
		}
		if state.Valid {
			byState[state.String] = n
		} else {
			all = n
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return store.WithSucceeded(byState, all), nil
}

func (t *sqlTx) InsertOperation(ctx context.Context, op *store.Operation) error {
	args, err := opArgs(op)
	if err != nil {
		return err
	}
	res, err := t.q.ExecContext(ctx, `INSERT INTO operations (`+opColumns+`) VALUES (`+placeholders(len(args))+`)`, args...)
	if err != nil {
		return fmt.Errorf("insert operation: %w", mapErr(err))
	}
	t.inserted(op, args, res)
	return nil
}

func placeholders(n int) string {
	return "?" + strings.Repeat(", ?", n-1)
}

// UpdateOperation sets only the columns whose values differ from the row
// this transaction last read or wrote, when it has that row at
// prevRevision. SQLite rewrites the entries of every index that covers a
// column of the SET list (or whose WHERE clause reads one), whether or not
// the value changes: setting all columns rewrote all seven indexes of
// operations on every transition. The copy is exact for as long as the
// transaction runs: it holds the database's write lock, every write this
// transaction makes to the row goes through UpdateOperation (which
// refreshes the copy) or deleteOperation (which drops it), and the
// revision check in the WHERE clause still guards the write. Without a copy
// (an update of a row this transaction never read) every column is set.
func (t *sqlTx) UpdateOperation(ctx context.Context, op *store.Operation, prevRevision int64) error {
	args, err := opArgs(op)
	if err != nil {
		return err
	}
	stored := args
	query, args := updateOperationSQL(t.find(op.Tenant, op.Key, prevRevision), op, args, prevRevision)
	var ref rowRef
	err = t.q.QueryRowContext(ctx, query+` RETURNING id, (`+lastSeq+`)`, args...).Scan(&ref.id, &ref.lastSeq)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("update operation %s: %w", op.Key, store.ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("update operation: %w", mapErr(err))
	}
	t.keep(op, stored, ref)
	return nil
}

// LockOperations implements store.Tx. The transaction holds the file's
// write lock, so no operation is held by another; it reads them one by
// one, sorted.
func (t *sqlTx) LockOperations(ctx context.Context, ids []store.OperationID) ([]*store.Operation, error) {
	sorted := slices.SortedFunc(slices.Values(ids), func(a, b store.OperationID) int {
		return cmp.Or(cmp.Compare(a.Tenant, b.Tenant), cmp.Compare(a.Key, b.Key))
	})
	var out []*store.Operation
	for _, id := range sorted {
		op, err := t.GetOperation(ctx, id.Tenant, id.Key)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, op)
	}
	return out, nil
}

// CountAttempts implements store.Tx, one operation at a time.
func (t *sqlTx) CountAttempts(ctx context.Context, ids []store.OperationID) (map[store.OperationID]map[string]int, error) {
	out := map[store.OperationID]map[string]int{}
	for _, id := range ids {
		rows, err := t.q.QueryContext(ctx, `SELECT outcome, count(*) FROM attempts
			WHERE operation_id = (`+operationID+`) GROUP BY outcome`, id.Tenant, id.Key)
		if err != nil {
			return nil, fmt.Errorf("count attempts: %w", err)
		}
		for rows.Next() {
			var outcome string
			var n int
			if err := rows.Scan(&outcome, &n); err != nil {
				rows.Close()
				return nil, fmt.Errorf("count attempts: %w", err)
			}
			if out[id] == nil {
				out[id] = map[string]int{}
			}
			out[id][outcome] = n
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return nil, fmt.Errorf("count attempts: %w", err)
		}
	}
	return out, nil
}

// CompactOperations implements store.Tx, one operation at a time.
func (t *sqlTx) CompactOperations(ctx context.Context, cs []store.Compaction) error {
	for i := range cs {
		if err := t.UpsertTombstone(ctx, &cs[i].Tombstone); err != nil {
			return err
		}
		if err := t.deleteOperation(ctx, cs[i].Tenant, cs[i].Key, cs[i].Revision); err != nil {
			return err
		}
	}
	return nil
}

// deleteOperation removes an operation with its attempts and timeline if
// its revision is still revision; otherwise store.ErrConflict.
func (t *sqlTx) deleteOperation(ctx context.Context, tenant, key string, revision int64) error {
	var id int64
	err := t.q.QueryRowContext(ctx, `DELETE FROM operations WHERE tenant = ? AND key = ? AND revision = ? RETURNING id`,
		tenant, key, revision).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("delete operation %s: %w", key, store.ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("delete operation: %w", err)
	}
	t.forget(tenant, key)
	for _, q := range []string{
		`DELETE FROM timeline WHERE operation_id = ?`,
		`DELETE FROM attempts WHERE operation_id = ?`,
	} {
		if _, err := t.q.ExecContext(ctx, q, id); err != nil {
			return fmt.Errorf("delete operation: %w", err)
		}
	}
	return nil
}

// The statements of InsertAttempt and UpdateAttempt, by the form of the
// operation's row id (operationRef): the id itself, or its lookup.
const (
	insertAttemptSQL   = `INSERT INTO attempts (operation_id, ` + attemptColumns + `) VALUES (`
	insertAttemptByID  = insertAttemptSQL + `?, ?` + attemptValues + `)`
	insertAttemptByKey = insertAttemptSQL + `(` + operationID + `), ?` + attemptValues + `)`
	attemptValues      = `, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?` // 18 more: 19 in all
	updateAttemptSQL   = `UPDATE attempts SET dispatched_at = ?, finished_at = ?, outcome = ?,
		destination_ref = ?, response = ?, error = ?, stale = ?, lease_expires_at = ?, late_outcome = ? WHERE operation_id = `
	updateAttemptByID  = updateAttemptSQL + `? AND id = ?`
	updateAttemptByKey = updateAttemptSQL + `(` + operationID + `) AND id = ?`
)

// appendOperationRef appends to args the arguments of the operation's
// row id (operationRef's), and returns byID or byKey, the statement
// that takes them.
func (t *sqlTx) appendOperationRef(args []any, tenant, key, byID, byKey string) (string, []any) {
	if s := t.written(tenant, key); s != nil {
		return byID, append(args, s.id)
	}
	return byKey, append(args, tenant, key)
}

func (t *sqlTx) InsertAttempt(ctx context.Context, a *store.Attempt) error {
	query, args := t.appendOperationRef(make([]any, 0, 21), a.Tenant, a.Key, insertAttemptByID, insertAttemptByKey)
	_, err := t.q.ExecContext(ctx, query,
		append(args, a.ID, a.Tenant, a.Key, a.Number, a.FencingToken, a.Worker, boolInt(a.Protected), toMicros(a.ClaimedAt),
			toMicros(a.LeaseExpiresAt), toMicros(a.DispatchedAt), toMicros(a.FinishedAt), a.Outcome,
			a.DestinationRef, a.Response, a.Error, boolInt(a.Stale), a.Destination, a.LateOutcome, a.Version)...)
	if err != nil {
		return fmt.Errorf("insert attempt: %w", mapErr(err))
	}
	return nil
}

func (t *sqlTx) UpdateAttempt(ctx context.Context, a *store.Attempt) error {
	args := append(make([]any, 0, 12), toMicros(a.DispatchedAt), toMicros(a.FinishedAt), a.Outcome, a.DestinationRef, a.Response, a.Error,
		boolInt(a.Stale), toMicros(a.LeaseExpiresAt), a.LateOutcome)
	query, args := t.appendOperationRef(args, a.Tenant, a.Key, updateAttemptByID, updateAttemptByKey)
	res, err := t.q.ExecContext(ctx, query, append(args, a.ID)...)
	if err != nil {
		return fmt.Errorf("update attempt: %w", err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return fmt.Errorf("update attempt %s: %w", a.ID, store.ErrNotFound)
	}
	return nil
}

func (t *sqlTx) AppendTimeline(ctx context.Context, e *store.TimelineEntry) error {
	q, args := t.appendTimelineSQL([]*store.TimelineEntry{e})
	if err := t.q.QueryRowContext(ctx, q+` RETURNING seq`, args...).Scan(&e.ID); err != nil {
		return fmt.Errorf("append timeline: %w", err)
	}
	return nil
}

// lastSeq is the largest seq of the timeline entries of the operation row
// being written (0 when it has none), for RETURNING.
const lastSeq = `SELECT COALESCE(MAX(seq), 0) FROM timeline WHERE operation_id = operations.id`

// The parts of appendTimelineSQL's INSERT: the statement's start, each
// row's operation id and seq (known, or looked up), and its other values.
const (
	insertTimelineSQL = `INSERT INTO timeline (operation_id, seq, tenant, key, at, actor, attempt_id, event, from_state, to_state, evidence) VALUES `
	timelineRefByID   = "(?, ?, "
	timelineRefByKey  = "((" + operationID + "), (SELECT COALESCE(MAX(seq), 0) + ? FROM timeline WHERE operation_id = (" + operationID + ")), "
	timelineValues    = "?, ?, ?, ?, ?, ?, ?, ?, ?)"
)

// appendTimelineSQL is the INSERT of entries, one row each, and its
// arguments. An entry's seq follows the largest of its operation's: known
// when this transaction wrote the operation (its rowRef, advanced here),
// looked up otherwise. Entries of one operation looked up in the same
// statement add 1, 2, … to the largest seq, so that their seqs differ
// however SQLite orders the lookups and the inserts.
func (t *sqlTx) appendTimelineSQL(entries []*store.TimelineEntry) (string, []any) {
	var b strings.Builder
	// Room for the longest form of every entry: the text is built in one
	// allocation, then taken as it is (Builder.String).
	b.Grow(len(insertTimelineSQL) + len(entries)*(len(", ")+len(timelineRefByKey)+len(timelineValues)))
	b.WriteString(insertTimelineSQL)
	args := make([]any, 0, 14*len(entries))
	for i, e := range entries {
		if i > 0 {
			b.WriteString(", ")
		}
		if s := t.written(e.Tenant, e.Key); s != nil {
			s.lastSeq++
			b.WriteString(timelineRefByID)
			args = append(args, s.id, s.lastSeq)
		} else {
			n := 1
			for _, prev := range entries[:i] {
				if prev.Tenant == e.Tenant && prev.Key == e.Key {
					n++
				}
			}
			b.WriteString(timelineRefByKey)
			args = append(args, e.Tenant, e.Key, n, e.Tenant, e.Key)
		}
		b.WriteString(timelineValues)
		args = append(args, e.Tenant, e.Key, toMicros(e.At), e.Actor, e.AttemptID, e.Event, e.FromState, e.ToState, e.Evidence)
	}
	return b.String(), args
}

// UpsertTombstone writes the tombstone of a key, replacing any it has,
// and carries its effects into compacted_effects (migration 015).
func (t *sqlTx) UpsertTombstone(ctx context.Context, ts *store.Tombstone) error {
	for {
		res, err := t.q.ExecContext(ctx, `INSERT INTO tombstones (tenant, key, fingerprint, state, failure_kind, destination_ref,
			duplicate_effects, version, attempt_count, created_at, finished_at, compacted_at, counted)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1)
			ON CONFLICT (tenant, key) DO NOTHING`,
			ts.Tenant, ts.Key, ts.Fingerprint, ts.State, ts.FailureKind, ts.DestinationRef, ts.DuplicateEffects, ts.Version,
			ts.AttemptCount, toMicros(ts.CreatedAt), toMicros(ts.FinishedAt), toMicros(ts.CompactedAt))
		if err != nil {
			return fmt.Errorf("write tombstone: %w", err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return fmt.Errorf("write tombstone: %w", err)
		} else if n == 1 {
			return t.addEffects(ctx, ts.Tenant, ts.State, ts.DuplicateEffects, 1)
		}
		// The key has a tombstone already (no operation is recorded under
		// such a key, so compaction does not meet one): take it out with
		// its effects, then write the new one.
		var state string
		var dup, counted int
		if err := t.q.QueryRowContext(ctx, `DELETE FROM tombstones WHERE tenant = ? AND key = ?
			RETURNING state, duplicate_effects, counted`, ts.Tenant, ts.Key).Scan(&state, &dup, &counted); err != nil {
			return fmt.Errorf("replace tombstone: %w", err)
		}
		if counted == 1 {
			if err := t.addEffects(ctx, ts.Tenant, state, dup, -1); err != nil {
				return err
			}
		}
	}
}

// addEffects adds sign times the effects of a compacted operation (its
// state and duplicate effects) to the tenant's totals.
func (t *sqlTx) addEffects(ctx context.Context, tenant, state string, duplicates, sign int) error {
	confirmed := 0
	if state == store.StateSucceeded {
		confirmed = 1
	}
	if confirmed == 0 && duplicates == 0 {
		return nil
	}
	if _, err := t.q.ExecContext(ctx, `INSERT INTO compacted_effects (tenant, confirmed, duplicates) VALUES (?, ?, ?)
		ON CONFLICT (tenant) DO UPDATE SET confirmed = confirmed + excluded.confirmed, duplicates = duplicates + excluded.duplicates`,
		tenant, sign*confirmed, sign*duplicates); err != nil {
		return fmt.Errorf("carry effect counts: %w", err)
	}
	return nil
}

// DeleteTombstonesBefore removes up to limit tombstones compacted before
// t, the oldest first, but for the current step of a workflow not done.
// The effects of those not yet counted (written by an earlier release)
// join compacted_effects first. The store's one writer runs it, so the
// batch its statements select is the same in each.
func (t *sqlTx) DeleteTombstonesBefore(ctx context.Context, before time.Time, limit int) (int, error) {
	const batch = `(tenant, key) IN (SELECT tenant, key FROM tombstones WHERE compacted_at < ?
		AND NOT EXISTS (SELECT 1 FROM workflows w WHERE w.tenant = tombstones.tenant AND w.current_key = tombstones.key AND w.done = 0)
		ORDER BY compacted_at LIMIT ?)`
	if _, err := t.q.ExecContext(ctx, `INSERT INTO compacted_effects (tenant, confirmed, duplicates)
		SELECT tenant, SUM(state = 'succeeded'), SUM(duplicate_effects) FROM tombstones
		WHERE counted = 0 AND `+batch+` GROUP BY tenant
		ON CONFLICT (tenant) DO UPDATE SET confirmed = confirmed + excluded.confirmed, duplicates = duplicates + excluded.duplicates`,
		toMicros(before), limit); err != nil {
		return 0, fmt.Errorf("carry effect counts: %w", err)
	}
	res, err := t.q.ExecContext(ctx, `DELETE FROM tombstones WHERE `+batch, toMicros(before), limit)
	if err != nil {
		return 0, fmt.Errorf("delete tombstones: %w", err)
	}
	n, _ := res.RowsAffected()
	return int(n), nil
}

func (r *sqlReader) TokenByHash(ctx context.Context, hash string) (*store.Token, error) {
	rows, err := r.tokens(ctx, `WHERE hash = ?`, hash)
	if err != nil {
		return nil, err
	}
	if len(rows) == 0 {
		return nil, store.ErrNotFound
	}
	return rows[0], nil
}

func (r *sqlReader) ListTokens(ctx context.Context, tenant string) ([]*store.Token, error) {
	if tenant == "" {
		return r.tokens(ctx, `ORDER BY created_at, id`)
	}
	return r.tokens(ctx, `WHERE tenant = ? ORDER BY created_at, id`, tenant)
}

func (r *sqlReader) tokens(ctx context.Context, where string, args ...any) ([]*store.Token, error) {
	rows, err := r.q.QueryContext(ctx, `SELECT id, tenant, name, hash, access, created_at, revoked_at, last_used_at FROM tokens `+where, args...)
	if err != nil {
		return nil, fmt.Errorf("read tokens: %w", err)
	}
	defer rows.Close()
	var out []*store.Token
	for rows.Next() {
		var t store.Token
		var created, revoked, used int64
		if err := rows.Scan(&t.ID, &t.Tenant, &t.Name, &t.Hash, &t.Access, &created, &revoked, &used); err != nil {
			return nil, fmt.Errorf("read tokens: %w", err)
		}
		t.CreatedAt, t.RevokedAt, t.LastUsedAt = fromMicros(created), fromMicros(revoked), fromMicros(used)
		out = append(out, &t)
	}
	return out, rows.Err()
}

func (t *sqlTx) InsertToken(ctx context.Context, tok *store.Token) error {
	// read_only (021) is kept for the processes of the release before 022,
	// true for every token that may not decide: migration 022.
	_, err := t.q.ExecContext(ctx, `INSERT INTO tokens (id, tenant, name, hash, access, read_only, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)`,
		tok.ID, tok.Tenant, tok.Name, tok.Hash, tok.Access, boolInt(tok.Access != "read-write"), toMicros(tok.CreatedAt))
	if err != nil {
		return fmt.Errorf("insert token: %w", mapErr(err))
	}
	return nil
}

func (t *sqlTx) RevokeToken(ctx context.Context, id string, at time.Time) error {
	res, err := t.q.ExecContext(ctx, `UPDATE tokens SET revoked_at = ? WHERE id = ? AND revoked_at = 0`, toMicros(at), id)
	if err != nil {
		return fmt.Errorf("revoke token: %w", err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return fmt.Errorf("revoke token %s: %w", id, store.ErrNotFound)
	}
	return nil
}

func (t *sqlTx) TouchToken(ctx context.Context, id string, at, notBefore time.Time) error {
	_, err := t.q.ExecContext(ctx, `UPDATE tokens SET last_used_at = ? WHERE id = ? AND last_used_at < ?`,
		toMicros(at), id, toMicros(notBefore))
	if err != nil {
		return fmt.Errorf("note the token's use: %w", mapErr(err))
	}
	return nil
}

func (r *sqlReader) SessionByHash(ctx context.Context, hash string) (*store.Session, error) {
	var s store.Session
	var created, expires, revoked int64
	err := r.q.QueryRowContext(ctx, `SELECT s.hash, s.token_id, t.name, t.access, s.tenant, s.created_at, s.expires_at, t.revoked_at
		FROM sessions s JOIN tokens t ON t.id = s.token_id WHERE s.hash = ?`, hash).
		Scan(&s.Hash, &s.TokenID, &s.TokenName, &s.TokenAccess, &s.Tenant, &created, &expires, &revoked)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, store.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("read session: %w", err)
	}
	s.CreatedAt, s.ExpiresAt, s.TokenRevokedAt = fromMicros(created), fromMicros(expires), fromMicros(revoked)
	return &s, nil
}

func (t *sqlTx) InsertSession(ctx context.Context, s *store.Session) error {
	_, err := t.q.ExecContext(ctx, `INSERT INTO sessions (hash, token_id, tenant, created_at, expires_at) VALUES (?, ?, ?, ?, ?)`,
		s.Hash, s.TokenID, s.Tenant, toMicros(s.CreatedAt), toMicros(s.ExpiresAt))
	if err != nil {
		return fmt.Errorf("insert session: %w", mapErr(err))
	}
	return nil
}

func (t *sqlTx) DeleteSession(ctx context.Context, hash string) error {
	if _, err := t.q.ExecContext(ctx, `DELETE FROM sessions WHERE hash = ?`, hash); err != nil {
		return fmt.Errorf("delete session: %w", err)
	}
	return nil
}

func (t *sqlTx) PutProcess(ctx context.Context, p *store.Process) error {
	settings, err := json.Marshal(p.Settings)
	if err != nil {
		return err
	}
	if _, err := t.q.ExecContext(ctx, `INSERT INTO processes (id, host, pid, started_at, seen_at, settings) VALUES (?, ?, ?, ?, ?, ?)
		ON CONFLICT (id) DO UPDATE SET host = excluded.host, pid = excluded.pid, started_at = excluded.started_at,
			seen_at = excluded.seen_at, settings = excluded.settings`,
		p.ID, p.Host, p.PID, toMicros(p.StartedAt), toMicros(p.SeenAt), string(settings)); err != nil {
		return fmt.Errorf("write the process row: %w", err)
	}
	return nil
}

func (t *sqlTx) DeleteProcesses(ctx context.Context, id string, staleBefore time.Time) (int, error) {
	res, err := t.q.ExecContext(ctx, `DELETE FROM processes WHERE id = ? OR seen_at < ?`, id, toMicros(staleBefore))
	if err != nil {
		return 0, fmt.Errorf("delete process rows: %w", err)
	}
	n, err := res.RowsAffected()
	return int(n), err
}

func (r *sqlReader) ListProcesses(ctx context.Context) ([]*store.Process, error) {
	rows, err := r.q.QueryContext(ctx, `SELECT id, host, pid, started_at, seen_at, settings FROM processes ORDER BY started_at, id`)
	if err != nil {
		return nil, fmt.Errorf("read processes: %w", err)
	}
	defer rows.Close()
	var out []*store.Process
	for rows.Next() {
		var p store.Process
		var started, seen int64
		var settings string
		if err := rows.Scan(&p.ID, &p.Host, &p.PID, &started, &seen, &settings); err != nil {
			return nil, fmt.Errorf("read processes: %w", err)
		}
		if err := json.Unmarshal([]byte(settings), &p.Settings); err != nil {
			return nil, fmt.Errorf("decode the settings of process %s: %w", p.ID, err)
		}
		p.StartedAt, p.SeenAt = fromMicros(started), fromMicros(seen)
		out = append(out, &p)
	}
	return out, rows.Err()
}

func (r *sqlReader) GetKeyScope(ctx context.Context, destination string) (*store.KeyScope, error) {
	k := store.KeyScope{Destination: destination}
	var settings string
	var recorded int64
	err := r.q.QueryRowContext(ctx, `SELECT settings, recorded_at FROM key_scopes WHERE destination = ?`, destination).
		Scan(&settings, &recorded)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, store.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("read the key scope of %s: %w", destination, err)
	}
	if err := json.Unmarshal([]byte(settings), &k.Settings); err != nil {
		return nil, fmt.Errorf("decode the key scope of %s: %w", destination, err)
	}
	k.RecordedAt = fromMicros(recorded)
	return &k, nil
}

func (t *sqlTx) InsertKeyScope(ctx context.Context, k *store.KeyScope) (bool, error) {
	settings, err := json.Marshal(k.Settings)
	if err != nil {
		return false, err
	}
	res, err := t.q.ExecContext(ctx, `INSERT INTO key_scopes (destination, settings, recorded_at) VALUES (?, ?, ?)
		ON CONFLICT (destination) DO NOTHING`, k.Destination, string(settings), toMicros(k.RecordedAt))
	if err != nil {
		return false, fmt.Errorf("record the key scope of %s: %w", k.Destination, err)
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

func (t *sqlTx) UpdateKeyScope(ctx context.Context, k *store.KeyScope) error {
	settings, err := json.Marshal(k.Settings)
	if err != nil {
		return err
	}
	if _, err := t.q.ExecContext(ctx, `UPDATE key_scopes SET settings = ?, recorded_at = ? WHERE destination = ?`,
		string(settings), toMicros(k.RecordedAt), k.Destination); err != nil {
		return fmt.Errorf("replace the key scope of %s: %w", k.Destination, err)
	}
	return nil
}

func (t *sqlTx) ProbeWrite(ctx context.Context, at time.Time) error {
	if _, err := t.q.ExecContext(ctx, `INSERT INTO readiness (id, probed_at) VALUES (1, ?)
		ON CONFLICT (id) DO UPDATE SET probed_at = excluded.probed_at`, toMicros(at)); err != nil {
		return fmt.Errorf("write the readiness row: %w", err)
	}
	return nil
}

func (t *sqlTx) DeleteSessionsBefore(ctx context.Context, before time.Time, limit int) (int, error) {
	res, err := t.q.ExecContext(ctx, `DELETE FROM sessions WHERE hash IN (
		SELECT hash FROM sessions WHERE expires_at < ? ORDER BY expires_at LIMIT ?)`, toMicros(before), limit)
	if err != nil {
		return 0, fmt.Errorf("delete expired sessions: %w", err)
	}
	n, _ := res.RowsAffected()
	return int(n), nil
}

func (t *sqlTx) AppendRecovery(ctx context.Context, rec *store.Recovery) error {
	// No operation key: the row outlives the operation and its
	// tombstone, and nothing reads it.
	_, err := t.q.ExecContext(ctx, `INSERT INTO recoveries (tenant, key, decision, at, waited) VALUES (?, '', ?, ?, ?)`,
		rec.Tenant, rec.Decision, toMicros(rec.At), rec.Waited.Microseconds())
	if err != nil {
		return fmt.Errorf("record recovery: %w", err)
	}
	return nil
}

// ForgetRecoveryKeysBefore clears the keys an older release stored with
// its recoveries. It reads them through recoveries_keyed (migration 028),
// which holds only the rows with a key, so a run costs what there is to
// clear, not a read of every operator decision.
func (t *sqlTx) ForgetRecoveryKeysBefore(ctx context.Context, before time.Time, limit int) (int, error) {
	res, err := t.q.ExecContext(ctx, `UPDATE recoveries SET key = '' WHERE id IN (
		SELECT id FROM recoveries WHERE key <> '' AND at < ? LIMIT ?)`, toMicros(before), limit)
	if err != nil {
		return 0, fmt.Errorf("forget recovery keys: %w", err)
	}
	n, _ := res.RowsAffected()
	return int(n), nil
}

func (t *sqlTx) AddCompactedAttempts(ctx context.Context, tenant, destination, outcome string, n int) error {
	_, err := t.q.ExecContext(ctx, `INSERT INTO compacted_attempts (tenant, destination, outcome, count) VALUES (?, ?, ?, ?)
		ON CONFLICT (tenant, destination, outcome) DO UPDATE SET count = count + excluded.count`, tenant, destination, outcome, n)
	if err != nil {
		return fmt.Errorf("carry attempt counts: %w", err)
	}
	return nil
}

// tenantFilter returns a condition on column col that selects one tenant,
// or every tenant when tenant is "".
func tenantFilter(col, tenant string) (string, []any) {
	if tenant == "" {
		return "1 = 1", nil
	}
	return col + " = ?", []any{tenant}
}

// statsCompactedSQL sums the confirmed and duplicate effects of the
// compacted operations of the tenants matching cond (given twice): the
// running totals, and the tombstones not counted in them yet, which only
// a process of an earlier release writes (migration 015), through their
// partial index.
func statsCompactedSQL(cond string) string {
	return `SELECT COALESCE(SUM(confirmed), 0), COALESCE(SUM(duplicates), 0) FROM (
			SELECT confirmed, duplicates FROM compacted_effects WHERE ` + cond + `
			UNION ALL
			SELECT state = 'succeeded', duplicate_effects FROM tombstones INDEXED BY tombstones_uncounted
			WHERE ` + cond + ` AND counted = 0
		)`
}

// statsDuplicatesSQL sums the duplicate effects of the operations matching
// cond. It names the partial index: without statistics (the store runs no
// ANALYZE) SQLite would rather range over the primary key, which reads
// every operation of the tenant.
func statsDuplicatesSQL(cond string) string {
	return `SELECT COALESCE(SUM(duplicate_effects), 0) FROM operations INDEXED BY operations_duplicates
		WHERE ` + cond + ` AND duplicate_effects > 0`
}

func (r *sqlReader) Stats(ctx context.Context, tenant string, buckets []time.Duration) (*store.Stats, error) {
	cond, args := tenantFilter("tenant", tenant)
	// The counts come from operations_not_succeeded and a count of the
	// tenant's index entries, the duplicates from the partial index of
	// operations that have any (migration 006): none reads the operation
	// rows.
	byState, err := r.countByState(ctx, tenant)
	if err != nil {
		return nil, fmt.Errorf("stats: %w", err)
	}
	st := &store.Stats{ByState: byState, ConfirmedEffects: byState[store.StateSucceeded]}
	var dup int
	if err := r.q.QueryRowContext(ctx, statsDuplicatesSQL(cond), args...).Scan(&dup); err != nil {
		return nil, fmt.Errorf("stats: %w", err)
	}
	st.DuplicateEffects += dup
	// Compacted operations: the running totals, and the tombstones not
	// counted in them yet (migration 015).
	var compactedConfirmed, compactedDup int
	if err := r.q.QueryRowContext(ctx, statsCompactedSQL(cond), append(slices.Clone(args), args...)...).
		Scan(&compactedConfirmed, &compactedDup); err != nil {
		return nil, fmt.Errorf("stats: %w", err)
	}
	st.ConfirmedEffects += compactedConfirmed
	st.DuplicateEffects += compactedDup

	rows, err := r.q.QueryContext(ctx, `SELECT destination, outcome, SUM(n) FROM (
			SELECT destination, outcome, COUNT(*) AS n FROM attempts WHERE `+cond+` GROUP BY destination, outcome
			UNION ALL
			SELECT destination, outcome, count AS n FROM compacted_attempts WHERE `+cond+`
		) GROUP BY destination, outcome ORDER BY destination, outcome`, append(slices.Clone(args), args...)...)
	if err != nil {
		return nil, fmt.Errorf("stats: %w", err)
	}
	for rows.Next() {
		var c store.AttemptCount
		if err := rows.Scan(&c.Destination, &c.Outcome, &c.Count); err != nil {
			rows.Close()
			return nil, fmt.Errorf("stats: %w", err)
		}
		st.Attempts = append(st.Attempts, c)
	}
	rows.Close()

	var total int64
	if err := r.q.QueryRowContext(ctx, `SELECT COUNT(*), COALESCE(SUM(waited), 0) FROM recoveries WHERE `+cond, args...).
		Scan(&st.Recoveries, &total); err != nil {
		return nil, fmt.Errorf("stats: %w", err)
	}
	st.RecoveryTotal = time.Duration(total) * time.Microsecond
	if st.Recoveries > 0 {
		var p90 int64
		if err := r.q.QueryRowContext(ctx, `SELECT waited FROM recoveries WHERE `+cond+` ORDER BY waited LIMIT 1 OFFSET ?`,
			append(args, (st.Recoveries*9+9)/10-1)...).Scan(&p90); err != nil {
			return nil, fmt.Errorf("stats: %w", err)
		}
		st.RecoveryP90 = time.Duration(p90) * time.Microsecond
	}
	st.RecoveryBuckets = make([]int, len(buckets))
	for i, b := range buckets {
		if err := r.q.QueryRowContext(ctx, `SELECT COUNT(*) FROM recoveries WHERE `+cond+` AND waited <= ?`,
			append(args, b.Microseconds())...).Scan(&st.RecoveryBuckets[i]); err != nil {
			return nil, fmt.Errorf("stats: %w", err)
		}
	}
	return st, nil
}
