package cli_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/testdb"
)

// runEnv is run with extra environment variables (after OPLEDGER_DB=).
func runEnv(t *testing.T, env []string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Dir = t.TempDir()
	cmd.Env = append(append(os.Environ(), "OPLEDGER_DB="), env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return out.String(), errOut.String(), ee.ExitCode()
	}
	require.NoError(t, err)
	return out.String(), errOut.String(), 0
}

// realLedger opens dsn as an application would and records, in tenant
// acme, an operation that is pending (its destination answered 503), and
// returns it.
func realLedger(t *testing.T, dsn string) *opledger.Operation {
	t.Helper()
	ctx := context.Background()
	l, err := opledger.Open(ctx, dsn, opledger.Options{Tenant: "acme"})
	require.NoError(t, err)
	defer l.Close()
	_, err = l.Do(ctx, opledger.Intent{Key: "invoice:9:send", Action: "send", Destination: "crm", Payload: json.RawMessage(`{}`)},
		func(context.Context, opledger.Call) (opledger.Result, error) {
			return opledger.Result{}, opledger.Retryable(errors.New("503"), 0)
		})
	require.Error(t, err, "503")
	op, err := l.Get(ctx, "invoice:9:send")
	require.NoError(t, err)
	require.Equal(t, opledger.StatePending, op.State)
	return op
}

// requireUntouched checks that the operation realLedger recorded is as it
// was: no fake success, no other attempt.
func requireUntouched(t *testing.T, dsn string, want *opledger.Operation) {
	t.Helper()
	ctx := context.Background()
	l, err := opledger.Open(ctx, dsn, opledger.Options{Tenant: "acme"})
	require.NoError(t, err)
	defer l.Close()
	got, err := l.Get(ctx, want.Key)
	require.NoError(t, err)
	require.Equal(t, want.State, got.State)
	require.Equal(t, want.AttemptCount, got.AttemptCount)
	require.True(t, want.UpdatedAt.Equal(got.UpdatedAt), "not written since")
	require.Empty(t, got.DestinationRef)
	page, err := l.List(ctx, opledger.ListOptions{Limit: 10})
	require.NoError(t, err)
	require.Len(t, page.Items, 1, "nothing else recorded in the tenant")
	dflt, err := l.WithTenant(opledger.DefaultTenant)
	require.NoError(t, err)
	page, err = dflt.List(ctx, opledger.ListOptions{Limit: 10})
	require.NoError(t, err)
	require.Empty(t, page.Items, "no demo operations recorded")
}

// TestDemoRefusesAnyLedger: demo on a --db that already holds a ledger,
// with real operations and no demo run, is a one-line usage error naming
// --db, and the ledger is left as it was, its directory too (no -wal or
// -shm file from reading it); a new file, an empty file and an empty
// PostgreSQL schema are taken.
func TestDemoRefusesAnyLedger(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	lite := "sqlite:" + filepath.Join(dir, "real.db")
	pg := testdb.PostgresDSN(t)
	for _, dsn := range []string{lite, pg} {
		op := realLedger(t, dsn)
		before := testdb.FileNames(t, dir)
		out, errOut, code := run(t, "demo", "--db", dsn, "--no-serve")
		require.Equal(t, 2, code, "%s\n%s", out, errOut)
		require.Empty(t, out)
		require.Contains(t, usageLine(t, errOut), "opledger: --db already holds a ledger")
		require.Equal(t, before, testdb.FileNames(t, dir), "the directory is as it was")
		requireUntouched(t, dsn, op)
	}

	empty := filepath.Join(dir, "empty.db")
	require.NoError(t, os.WriteFile(empty, nil, 0o600))
	_, errOut, code := run(t, "demo", "--db", "sqlite:"+empty, "--no-serve")
	require.Equal(t, 0, code, "an empty file is fresh: %s", errOut)

	// An empty schema is fresh; the password of the DSN is not printed.
	u, err := url.Parse(testdb.PostgresDSN(t))
	require.NoError(t, err)
	u.User = url.UserPassword(u.User.Username(), "S3cret") // trust: any password is accepted
	out, errOut, code := run(t, "demo", "--db", u.String(), "--no-serve")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "records created at the CRM: 5 ")
	require.NotContains(t, out+errOut, "S3cret")
}

// TestListenAddressCheckedFirst: an address demo, serve or proxy could not
// listen on is refused before anything is written to --db (SQLite creates
// the file when a ledger is opened).
func TestListenAddressCheckedFirst(t *testing.T) {
	t.Parallel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer busy.Close()
	for _, cmd := range [][]string{
		{"demo", "--addr"},
		{"serve", "--addr"},
		{"proxy", "--upstream", "http://127.0.0.1:1", "--listen"},
	} {
		flag := cmd[len(cmd)-1]
		for _, tc := range []struct {
			addr string
			code int
			msg  string
		}{
			{"bogus", 2, "opledger: " + flag + " takes HOST:PORT"},
			{busy.Addr().String(), 1, "opledger: " + flag + ": listen tcp " + busy.Addr().String()},
		} {
			path := filepath.Join(t.TempDir(), "ledger.db")
			args := append(append([]string{}, cmd...), tc.addr, "--db", "sqlite:"+path)
			out, errOut, code := run(t, args...)
			require.Equal(t, tc.code, code, "%s %s: %s%s", cmd[0], tc.addr, out, errOut)
			require.Empty(t, out)
			require.True(t, strings.HasPrefix(errOut, tc.msg), errOut)
			_, err := os.Stat(path)
			require.ErrorIs(t, err, os.ErrNotExist, "%s %s: nothing written to --db", cmd[0], tc.addr)
		}
	}
}

// pgTables counts the tables of schema.
func pgTables(t *testing.T, schema string) int {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, testdb.PostgresBase())
	require.NoError(t, err)
	defer conn.Close(ctx)
	var n int
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = $1`, schema).Scan(&n))
	return n
}

// TestReadOnlyCommandsCreateNoPostgresLedger: the commands that only read
// or decide refuse an empty PostgreSQL schema as "no ledger" (2) and leave
// it empty, and a search_path naming no schema with a hint to create it;
// the DSN's password is never printed.
func TestReadOnlyCommandsCreateNoPostgresLedger(t *testing.T) {
	t.Parallel()
	u, err := url.Parse(testdb.PostgresDSN(t))
	require.NoError(t, err)
	u.User = url.UserPassword(u.User.Username(), "S3cret")
	dsn := u.String()
	schema := u.Query().Get("search_path")
	for _, args := range [][]string{
		{"ops", "list"}, {"ops", "show", "k1"}, {"ops", "cancel", "k1", "--reason", "r"},
		{"tokens", "list"}, {"tokens", "revoke", "tok_1"}, {"events", "list"}, {"events", "show", "s", "e"},
	} {
		out, errOut, code := run(t, append(args, "--db", dsn)...)
		require.Equal(t, 2, code, "%v: %s%s", args, out, errOut)
		require.Empty(t, out)
		first, _, _ := strings.Cut(errOut, "\n")
		require.Contains(t, first, "no ledger at postgres://", args)
		require.Contains(t, first, "schema "+schema+" holds no opledger ledger", args)
		require.NotContains(t, errOut, "S3cret")
		require.Zero(t, pgTables(t, schema), "%v created tables", args)
	}

	q := u.Query()
	q.Set("search_path", "opltest_missing_schema")
	u.RawQuery = q.Encode()
	_, errOut, code := run(t, "ops", "list", "--db", u.String())
	require.Equal(t, 2, code, errOut)
	require.Contains(t, errOut, "create the schema first: CREATE SCHEMA opltest_missing_schema")
	// A command that writes meets PostgreSQL's own error: it gets the
	// hint too.
	_, errOut, code = run(t, "migrate", "--db", u.String())
	require.Equal(t, 1, code, errOut)
	require.Contains(t, errOut, "SQLSTATE 3F000")
	require.Contains(t, errOut, "create the schema first: CREATE SCHEMA opltest_missing_schema")
	require.NotContains(t, errOut, "S3cret")

	// Once migrated, the same commands read it.
	_, errOut, code = run(t, "migrate", "--db", dsn)
	require.Equal(t, 0, code, errOut)
	out, errOut, code := run(t, "ops", "list", "--db", dsn)
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `^KEY\s+STATE`, out)
}

// TestUnreadableLedger: a ledger file or directory the process may not
// read is a failure (1) that says "permission denied", not a usage error
// claiming there is no ledger. As root (who reads everything) the binary
// runs as nobody.
func TestUnreadableLedger(t *testing.T) {
	t.Parallel()
	// World-readable places: nobody must reach the binary and the files.
	dir, err := os.MkdirTemp("", "opledger-perm-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.Chmod(filepath.Join(dir, "closed"), 0o700); os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o755))
	bin := filepath.Join(dir, "opledger")
	data, err := os.ReadFile(binary)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(bin, data, 0o755))

	unreadable := filepath.Join(dir, "unreadable.db")
	closed := filepath.Join(dir, "closed", "ledger.db")
	require.NoError(t, os.Mkdir(filepath.Dir(closed), 0o755))
	for _, p := range []string{unreadable, closed} {
		_, errOut, code := run(t, "migrate", "--db", "sqlite:"+p)
		require.Equal(t, 0, code, errOut)
	}
	require.NoError(t, os.Chmod(unreadable, 0))
	require.NoError(t, os.Chmod(filepath.Dir(closed), 0o700)) // root's: nobody may not enter

	for _, p := range []string{unreadable, closed} {
		cmd := exec.Command(bin, "ops", "list", "--db", "sqlite:"+p)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "OPLEDGER_DB=")
		if os.Getuid() == 0 {
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		} else {
			require.NoError(t, os.Chmod(filepath.Dir(closed), 0)) // the owner may not enter either
		}
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			if err != nil && os.Getuid() == 0 {
				t.Skipf("cannot run as nobody here: %v", err)
			}
			t.Fatalf("%s: want a failure, got %v: %s", p, err, out.String())
		}
		require.Equal(t, 1, ee.ExitCode(), errOut.String())
		require.Empty(t, out.String())
		require.Regexp(t, `^opledger: cannot read the ledger at `+p+`: .*permission denied\n$`, errOut.String())
		require.NotContains(t, errOut.String(), "no ledger")
	}
}

// TestNoPasswordPrinted: neither --help (whose --db default is
// OPLEDGER_DB) nor the refusal of a DSN without a scheme repeats a
// password.
func TestNoPasswordPrinted(t *testing.T) {
	t.Parallel()
	for env, shown := range map[string]string{
		"postgres://u:S3cret@db.internal/ledger?password=S3cret&sslmode=disable": `(default "postgres://u:xxxxx@db.internal/ledger?password=xxxxx&sslmode=disable")`,
		"host=db user=u password=S3cret dbname=x":                                `(default "$OPLEDGER_DB")`,
		"sqlite:/var/lib/opledger.db":                                            `(default "sqlite:/var/lib/opledger.db")`,
	} {
		for _, args := range [][]string{{"ops", "list", "--help"}, {"serve", "--help"}, {"tokens", "create", "--help"}} {
			out, errOut, code := runEnv(t, []string{"OPLEDGER_DB=" + env}, args...)
			require.Equal(t, 0, code, errOut)
			require.NotContains(t, out, "S3cret", args)
			require.Contains(t, out, shown, args)
		}
	}
	for _, dsn := range []string{"host=db user=u password=S3cret dbname=x", " postgres://u:S3cret@h/db", "u:S3cret@h/db"} {
		out, errOut, code := run(t, "ops", "list", "--db", dsn)
		require.Equal(t, 2, code, errOut)
		require.Empty(t, out)
		require.NotContains(t, errOut, "S3cret", dsn)
		require.Contains(t, errOut, "looks like a PostgreSQL DSN: write it as a URL, postgres://", dsn)
		_, errOut, code = runEnv(t, []string{"OPLEDGER_DB=" + dsn}, "ops", "list")
		require.Equal(t, 2, code, errOut)
		require.NotContains(t, errOut, "S3cret", dsn)
		require.True(t, strings.HasPrefix(errOut, "opledger: OPLEDGER_DB takes"), errOut)
	}
}

// TestErrorsOneLine: failures whose errors span lines (pgx's dial errors,
// YAML's decoding errors) are printed on one line.
func TestErrorsOneLine(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	config := filepath.Join(dir, "opledger.yaml")
	require.NoError(t, os.WriteFile(config, []byte("bogus: 1\nother: 2\n"), 0o600))
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"ops", "list", "--db", "postgres://postgres@127.0.0.1:1/test"}, "connection refused; 127.0.0.1:1"},
		{[]string{"serve", "--config", config, "--db", "sqlite:" + filepath.Join(dir, "l.db")}, "yaml: line 1: unknown field bogus; line 2: unknown field other"},
	} {
		out, errOut, code := run(t, tc.args...)
		require.Equal(t, 1, code, errOut)
		require.Empty(t, out)
		require.Contains(t, errOut, tc.msg)
		require.Equal(t, 1, strings.Count(errOut, "\n"), "one line: %q", errOut)
		require.NotContains(t, errOut, "\t")
	}
}

// TestControlCharactersEscaped: stored values holding newlines, tabs or
// escape sequences are printed escaped in the text tables, one value per
// cell, so they cannot forge lines; --json keeps them as stored.
func TestControlCharactersEscaped(t *testing.T) {
	t.Parallel()
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "c.db")
	ctx := context.Background()
	l, err := opledger.Open(ctx, dsn, opledger.Options{})
	require.NoError(t, err)
	ref := "H42\nFORGED-REF succeeded\x1b[2J"
	_, err = l.Do(ctx, opledger.Intent{Key: "k1", Action: "send", Destination: "crm", Owner: "ops\tteam\nFORGED-OWNER", Payload: json.RawMessage(`{}`)},
		func(context.Context, opledger.Call) (opledger.Result, error) { return opledger.Result{Ref: ref}, nil })
	require.NoError(t, err)
	_, err = l.Do(ctx, opledger.Intent{Key: "k2", Action: "send", Destination: "crm", Payload: json.RawMessage(`{}`)},
		func(context.Context, opledger.Call) (opledger.Result, error) {
			return opledger.Result{}, opledger.Rejected(errors.New("422\nFORGED-ERROR"))
		})
	require.Error(t, err)
	_, _, err = l.Resolve(ctx, "k2", opledger.Decision{Kind: opledger.DecisionAuthorizeRetry, Reason: "checked\nFORGED-REASON", Operator: "me"})
	require.NoError(t, err)
	_, _, err = l.CreateToken(ctx, "n8n\nFORGED-TOKEN\tx", opledger.ReadWrite)
	require.NoError(t, err)
	require.NoError(t, l.Close())

	for _, args := range [][]string{{"ops", "list"}, {"ops", "show", "k1"}, {"ops", "show", "k2"}, {"tokens", "list"}} {
		out, errOut, code := run(t, append(args, "--db", dsn)...)
		require.Equal(t, 0, code, errOut)
		require.Contains(t, out, `\nFORGED-`, args)
		for _, line := range strings.Split(out, "\n") {
			require.False(t, strings.HasPrefix(strings.TrimSpace(line), "FORGED"), "%v: a stored value forged the line %q", args, line)
		}
		require.NotContains(t, out, "\x1b", args)
		require.NotContains(t, out, "\t", args)
	}
	out, _, code := run(t, "ops", "list", "--db", dsn)
	require.Equal(t, 0, code)
	require.Len(t, strings.Split(strings.TrimSpace(out), "\n"), 3, "a header and one line per operation:\n%s", out)
	require.Contains(t, out, `H42\nFORGED-REF succeeded\x1b[2J`)

	out, _, code = run(t, "ops", "show", "k1", "--db", dsn, "--json")
	require.Equal(t, 0, code)
	var shown struct {
		Operation struct {
			DestinationRef string `json:"destination_ref"`
		} `json:"operation"`
	}
	require.NoError(t, json.NewDecoder(strings.NewReader(out)).Decode(&shown))
	require.Equal(t, ref, shown.Operation.DestinationRef, "what is stored is unchanged")
}

// TestAnotherApplicationsDatabaseRefused: --db naming another
// application's database (here one with a sessions table of its own, as
// the ledger has, and a schema_migrations table of golang-migrate's) is
// refused by the commands that create a ledger and by those that only
// read, exit 2, naming its tables, and left as it was on both stores.
func TestAnotherApplicationsDatabaseRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const app = `CREATE TABLE sessions (id int, user_id int, expires_at int); CREATE TABLE schema_migrations (version bigint, dirty bool); INSERT INTO schema_migrations VALUES (18, false)`
	path := filepath.Join(t.TempDir(), "app.db")
	db, err := sql.Open("sqlite", path)
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, app)
	require.NoError(t, err)
	require.NoError(t, db.Close())
	before, err := os.ReadFile(path)
	require.NoError(t, err)

	pg := testdb.PostgresDSN(t)
	conn, err := pgx.Connect(ctx, pg)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, app)
	require.NoError(t, err)
	schema, _ := url.Parse(pg)

	for _, dsn := range []string{"sqlite:" + path, pg} {
		for _, args := range [][]string{{"migrate"}, {"tokens", "create", "--tenant", "acme"}, {"ops", "list"}} {
			out, errOut, code := run(t, append(args, "--db", dsn)...)
			require.Equal(t, 2, code, "%v %s: %s%s", args, dsn, out, errOut)
			require.Empty(t, out)
			first, _, _ := strings.Cut(errOut, "\n")
			if args[0] == "ops" {
				require.Contains(t, first, "no ledger at ", args)
			} else {
				require.Contains(t, first, "holds other tables (schema_migrations, sessions) and no opledger ledger", args)
			}
		}
	}
	after, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, before, after, "the SQLite file is as it was")
	require.NoFileExists(t, path+"-wal")
	require.Equal(t, 2, pgTables(t, schema.Query().Get("search_path")), "no table added to the schema")
	var indexes int
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM pg_indexes WHERE schemaname = current_schema()`).Scan(&indexes))
	require.Zero(t, indexes, "no index added to its tables")
}
