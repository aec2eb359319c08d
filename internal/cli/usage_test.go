package cli_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/redact"
	"github.com/opledger/opledger/internal/testdb"
)

// usageSuffix ends the line of a usage error: where to read the usage of
// the command run.
var usageSuffix = regexp.MustCompile(` \(see opledger[a-z -]* --help\)$`)

// usageLine checks that errOut is one line, a usage error's, ending in
// where to read the usage, and returns it without that ending.
func usageLine(t *testing.T, errOut string) string {
	t.Helper()
	line, ok := strings.CutSuffix(errOut, "\n")
	require.True(t, ok && !strings.Contains(line, "\n"), "one line: %q", errOut)
	loc := usageSuffix.FindStringIndex(line)
	require.NotNil(t, loc, "the line says where to read the usage: %q", errOut)
	return line[:loc[0]]
}

// TestUsageErrorOneLine: a usage error is one line on stderr, the message
// and where to read the usage of the command run; a failure (1) is the
// message alone.
func TestUsageErrorOneLine(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		line string
	}{
		{[]string{"ops", "list", "--x"}, "opledger: unknown flag: --x (see opledger ops list --help)"},
		{[]string{"ops", "lst"}, `opledger: unknown command "lst" for "opledger ops" (did you mean "list"?) (see opledger ops --help)`},
		{[]string{"serve", "--lease"}, "opledger: flag needs an argument: --lease (see opledger serve --help)"},
		{[]string{"ops", "show"}, ""},
	} {
		out, errOut, code := run(t, tc.args...)
		require.Equal(t, 2, code, "%v: %s%s", tc.args, out, errOut)
		require.Empty(t, out, tc.args)
		if tc.line != "" {
			require.Equal(t, tc.line+"\n", errOut, tc.args)
		}
		usageLine(t, errOut)
	}
	dir := t.TempDir()
	_, errOut, code := run(t, "ops", "list", "--db", "sqlite:"+dir)
	require.Equal(t, 1, code, errOut)
	require.NotRegexp(t, usageSuffix, strings.TrimSuffix(errOut, "\n"), "a failure is no usage error")
	require.Equal(t, 1, strings.Count(errOut, "\n"), errOut)
}

// TestUnknownSubcommand: every command with subcommands prints its help
// when called alone and refuses anything else as an unknown command (2),
// with a one-line message, instead of printing its help and exiting 0.
func TestUnknownSubcommand(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"tokens", "revok", "tok_1"}, `unknown command "revok" for "opledger tokens" (did you mean "revoke"?)`},
		{[]string{"ops", "lst"}, `unknown command "lst" for "opledger ops" (did you mean "list"?)`},
		{[]string{"events", "nope"}, `unknown command "nope" for "opledger events"`},
		{[]string{"lab", "nope"}, `unknown command "nope" for "opledger lab"`},
		{[]string{"completion", "nope"}, `unknown command "nope" for "opledger completion"`},
		{[]string{"completion", "bash", "extra"}, `unknown command "extra" for "opledger completion bash"`},
		{[]string{"serv"}, `unknown command "serv" for "opledger" (did you mean "serve"?)`},
		// A lone "-" and an empty word are words to the flag parser too,
		// not flags: refused alike with --help (not the group's help and
		// 0) or an unknown flag after them (not that flag).
		{[]string{"ops", "-", "--help"}, `unknown command "-" for "opledger ops"`},
		{[]string{"tokens", "", "--help"}, `unknown command "" for "opledger tokens"`},
		{[]string{"ops", "-", "--db", "x", "--bogus"}, `unknown command "-" for "opledger ops"`},
		{[]string{"help", "bogus"}, `no help topic "bogus": 'opledger help' lists the commands`},
		{[]string{"help", "tokens", "revok"}, `no help topic "tokens revok": 'opledger help' lists the commands`},
	} {
		out, errOut, code := run(t, tc.args...)
		require.Equal(t, 2, code, "%v: %s%s", tc.args, out, errOut)
		require.Empty(t, out, tc.args)
		require.Equal(t, "opledger: "+tc.msg, usageLine(t, errOut), tc.args)
	}
	out, errOut, code := run(t, "help", "ops", "list")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "opledger ops list", "help on a command is that command's help")
	for _, parent := range []string{"tokens", "ops", "events", "lab"} {
		out, errOut, code := run(t, parent)
		require.Equal(t, 0, code, "%s alone: %s", parent, errOut)
		require.Contains(t, out, "Available Commands:", "%s alone prints its help", parent)
	}
}

// TestUsageErrors: a flag value that no run could take is a usage error
// (2) naming the flag, whether the CLI or the ledger finds it wrong, and
// is never replaced by a default.
func TestUsageErrors(t *testing.T) {
	t.Parallel()
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "u.db")
	_, errOut, code := run(t, "migrate", "--db", dsn)
	require.Equal(t, 0, code, errOut)
	db := func(args ...string) []string { return append(args, "--db", dsn) }
	missing := "sqlite:" + filepath.Join(t.TempDir(), "mistyped.db")
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		// Refused by the CLI before the ledger sees them.
		{db("events", "list", "--status", "bogus"), `--status: unknown status "bogus" (statuses: applied, out_of_order, conflict, unmapped)`},
		{[]string{"bench", "--mode", "bogus"}, `--mode takes library, http or proxy (got "bogus")`},
		{db("ops", "list", "--tenant", "a b"), "--tenant takes a name in the operation key syntax: key may contain only letters"},
		{db("tokens", "create", "--tenant", "x@y"), "--tenant takes a name in the operation key syntax: keys must carry no personal data"},
		{db("events", "list", "--tenant", ""), "--tenant is empty: give a tenant's name, or leave the flag out"}, // not the tenant "default"
		// An empty filter or cursor (a script's unset variable) is not
		// "no filter" or "the first page".
		{db("ops", "list", "--owner", ""), "--owner is empty: give an owner, or leave the flag out"},
		{db("ops", "list", "--destination="), "--destination is empty: give a destination, or leave the flag out"},
		{db("ops", "list", "--state", ""), "--state is empty: give states, comma-separated, or leave the flag out"},
		{db("ops", "list", "--cursor", ""), "--cursor is empty: give the next_cursor of the page before, or leave the flag out"},
		{db("ops", "list", "--state", ","), `--state: entry 1 of "," is empty: give states separated by commas`}, // not every state
		{db("ops", "list", "--state", "held,"), `--state: entry 2 of "held," is empty`},
		{db("proxy", "--upstream", "http://127.0.0.1:1", "--owner", ""), "--owner is empty: give an owner, or leave the flag out"},
		{db("proxy", "--upstream", "http://127.0.0.1:1", "--accept-scope-change", ""), "--accept-scope-change is empty: give an upstream's name, or leave the flag out"},
		{db("proxy", "--upstream", "http://127.0.0.1:1", "--accept-scope-change", "a,,b"), "--accept-scope-change has an empty entry: give an upstream's name in each, comma-separated"},
		{db("workflows", "revise", "wf:a", "b", "--version", "2", "--payload", "{}", "--sensitive-field", ""), "--sensitive-field is empty: give a payload path, e.g. customer.email, or leave the flag out"},
		{[]string{"demo", "--no-serve", "--addr", "bogus"}, "--addr is where the demo serves its ledger, and --no-serve serves nothing: give one of them"},
		{db("events", "list", "--source", ""), "--source is empty: give a source, or leave the flag out"},
		{db("events", "list", "--status", ""), "--status is empty: give a status, or leave the flag out"},
		{db("events", "list", "--cursor", ""), "--cursor is empty: give the next_cursor of the page before, or leave the flag out"},
		{db("tokens", "create", "--tenant", "acme", "--name", ""), "--name is empty: give a label, such as the automation using the token, or leave the flag out"},
		{db("ops", "list", "--limit", "-5"), "--limit takes a whole number from 1 to 500 (got -5)"},
		{db("ops", "list", "--limit", "0"), "--limit takes a whole number from 1 to 500 (got 0)"},
		{db("events", "list", "--limit", "501"), "--limit takes a whole number from 1 to 500 (got 501)"},
		{db("serve", "--workers", "0"), "--workers must be at least 1, got 0"},
		{db("serve", "--workers", "-3"), "--workers must be at least 1, got -3"},
		{db("serve", "--workers", "1001"), "--workers takes at most 1000 (got 1001)"},
		{db("serve", "--workers", "2000000000"), "--workers takes at most 1000 (got 2000000000)"},
		{db("serve", "--lease", "0"), "--lease must be more than 0, got 0s"},
		{db("serve", "--lease", "200h"), "--lease must be at most 168h0m0s, got 200h0m0s"},
		{db("serve", "--lease", "1ns"), "--lease must be at least 1s, got 1ns"},
		{db("serve", "--lease", "999ms"), "--lease must be at least 1s, got 999ms"},
		{db("serve", "--sweep-interval", "0"), "--sweep-interval must be more than 0, got 0s"},
		{db("serve", "--sweep-interval", "-1s"), "--sweep-interval must be more than 0, got -1s"},
		{db("serve", "--compact-interval", "0"), "--compact-interval must be more than 0, got 0s"},
		{db("serve", "--max-body-bytes", "-1"), "--max-body-bytes must be at least 1, got -1"},
		{db("proxy", "--upstream", "http://127.0.0.1:1", "--timeout", "0"), "--timeout must be more than 0, got 0s"},
		{db("proxy", "--upstream", "http://127.0.0.1:1", "--timeout", "-5s"), "--timeout must be more than 0, got -5s"},
		{db("proxy", "--upstream", "http://127.0.0.1:1", "--timeout", "1ns"), "--timeout must be at least 100ms, got 1ns"},
		{db("proxy", "--upstream", "http://127.0.0.1:1", "--timeout", "99ms"), "--timeout must be at least 100ms, got 99ms"},
		{db("proxy", "--upstream", "http://127.0.0.1:1", "--max-body-bytes", "0"), "--max-body-bytes must be at least 1, got 0"},
		{db("proxy", "--upstream", "http://127.0.0.1:1", "--reconcile-interval", "0"), "--reconcile-interval must be more than 0, got 0s"},
		{db("proxy", "--upstream", "http://127.0.0.1:1", "--reconcile-interval", "-1s"), "--reconcile-interval must be more than 0, got -1s"},
		{db("proxy", "--upstream", "http://127.0.0.1:1", "--shutdown-timeout", "-1s"), "--shutdown-timeout must be more than 0, got -1s"},
		{db("proxy", "--upstream", "ftp://x"), "--upstream must be an absolute http:// or https:// URL, such as https://api.example.com"},
		{db("proxy", "--upstream", "127.0.0.1:9901"), "--upstream must be an absolute http:// or https:// URL"},
		{db("proxy", "--upstream", "http://127.0.0.1:99999"), "--upstream has port 99999: a port is a number from 1 to 65535, such as https://api.example.com"},
		{db("proxy", "--upstream", "http://127.0.0.1/a%zz"), `--upstream is not a URL: invalid URL escape "%zz", such as https://api.example.com`},
		{db("proxy", "--upstream", "https://api.example.com/?v=2"), "--upstream must not carry a query or fragment, such as https://api.example.com"},
		{db("proxy", "--upstream", "http://u:s3cret@127.0.0.1:1"), "--upstream must not carry a user or password (user:password@): the caller's own headers carry its credential, such as https://api.example.com"},
		{db("proxy", "--upstream", "http://127.0.0.1:1", "--name", "bad@name"), `upstream name "bad@name": invalid key`},
		{db("proxy", "--config", "proxy.yaml", "--name", "crm"), "--name names the --upstream; with --config, name each upstream in the file"},
		{db("proxy", "--config", "proxy.yaml", "--timeout", "1s"), "--timeout is the --upstream's; with --config, set timeout for each upstream in the file"},
		{db("proxy", "--config", "proxy.yaml", "--max-body-bytes", "5"), "--max-body-bytes is the --upstream's; with --config, set max_body_bytes for each upstream in the file"},
		// Refused by the ledger: still the caller's wrong use.
		// An event's source and id: which is wrong, and why, before any
		// store or server is asked (this one would not answer).
		{db("events", "show", "a b", "evt"), "event source is not in the key syntax: key may contain only letters, digits and . _ : / - (byte 2, ' ', is not one of them)"},
		{db("events", "show", "forms", ""), "event id is empty"},
		{[]string{"events", "show", "forms", "evt?1", "--server", "http://127.0.0.1:1", "--token", "t"}, "event id is not in the key syntax: key may contain only letters, digits and . _ : / - (byte 4, '?', is not one of them)"},
		{db("tokens", "create", "--tenant", "acme", "--name", strings.Repeat("n", 300)), "token name is 300 bytes long; at most 200 are allowed"},
		// A --db that names no store, with what to give instead; a
		// password is never repeated.
		{[]string{"migrate", "--db", "/tmp/x.db"}, "--db takes sqlite:PATH or postgres://USER@HOST:PORT/DB: for the SQLite file /tmp/x.db give sqlite:/tmp/x.db"},
		{[]string{"migrate", "--db", "SQLITE:/tmp/x.db"}, "--db takes sqlite:PATH or postgres://USER@HOST:PORT/DB, the scheme in lower case: give sqlite:/tmp/x.db"},
		{[]string{"ops", "list", "--db", "Postgres://u:secret@h/db"}, "a PostgreSQL DSN starts with postgres:// in lower case"},
		{[]string{"tokens", "list", "--db", "mysql://u:secret@h/db"}, "(got a mysql: DSN)"},
		{[]string{"bench", "--db", "x.db"}, "give sqlite:x.db"},
		{[]string{"bench", "--concurrency", "1,2000"}, `--concurrency takes whole numbers from 1 to 1024 separated by commas, e.g. 1,8,32 (got "2000")`},
		{[]string{"migrate", "--db", "sqlite:"}, "--db takes sqlite:PATH or postgres://USER@HOST:PORT/DB: sqlite: names no file; give sqlite:PATH"},
		{[]string{"ops", "list", "--db", "sqlite:"}, "--db takes sqlite:PATH or postgres://USER@HOST:PORT/DB: sqlite: names no file; give sqlite:PATH"},
		{[]string{"ops", "list", "--db", "sqlite://"}, "sqlite:// names no file"},
		{[]string{"ops", "list", "--server", "http://127.0.0.1:1", "--token", "t", "--tenant", "other"}, "--tenant is for the store; with --server the server's store and the token's tenant are used"},
		{[]string{"events", "list", "--server", "http://127.0.0.1:1", "--token", "t", "--db", "sqlite:x.db"}, "--db is for the store; with --server"},
		{[]string{"ops", "list", "--server", "http://127.0.0.1:1"}, "--server needs --token or OPLEDGER_TOKEN"},
		// A --server no request could be sent to, refused before any is,
		// on every command that takes it; its value is not repeated.
		{[]string{"ops", "list", "--server", "http://[::1", "--token", "t"}, "--server must be an http:// or https:// URL with a host, such as http://127.0.0.1:8080: it cannot be parsed as a URL"},
		// The parser would quote part of the password ("invalid port \":pa\"").
		{[]string{"ops", "list", "--server", "http://admin:pa/ss@h:8080", "--token", "t"}, "--server must be an http:// or https:// URL with a host, such as http://127.0.0.1:8080: it cannot be parsed as a URL"},
		{[]string{"ops", "show", "k1", "--server", "ftp://x", "--token", "t"}, "--server must be an http:// or https:// URL with a host, such as http://127.0.0.1:8080: its scheme is ftp, not http or https"},
		{[]string{"ops", "cancel", "k1", "--reason", "r", "--server", "127.0.0.1:8080", "--token", "t"}, "--server must be an http:// or https:// URL with a host, such as http://127.0.0.1:8080: it has no http:// or https:// before the host"},
		{[]string{"ops", "approve", "k1", "--version", "1", "--fingerprint", "sha256:x", "--server", "http://", "--token", "t"}, "--server must be an http:// or https:// URL with a host, such as http://127.0.0.1:8080: it names no host"},
		{[]string{"events", "list", "--server", "http://u:secret@h", "--token", "t"}, "it must not carry a user or password (the API token is given apart from it)"},
		{[]string{"events", "show", "forms", "evt-1", "--server", "http://h/?x=1", "--token", "t"}, "it must not carry a query or fragment"},
		{[]string{"workflows", "list", "--server", "http://h:99999", "--token", "t"}, `its port "99999" is not a number from 1 to 65535`},
		{[]string{"workflows", "show", "wf:1", "--server", "mailto:x", "--token", "t"}, "it has no http:// or https:// before the host"},
		// An approval names a version ops show gave: 1 or more.
		{db("ops", "approve", "k1", "--version", "-1", "--fingerprint", "sha256:x"), "--version must be 1 or more, the version 'ops show' gave, got -1"},
		{db("ops", "approve", "k1", "--version", "0", "--fingerprint", "sha256:x"), "--version must be 1 or more, the version 'ops show' gave, got 0"},
		{db("workflows", "approve", "wf:1", "send", "--version", "-2", "--fingerprint", "sha256:x"), "--version must be 1 or more, the version 'workflows show' gave, got -2"},
		// Lower bounds of the ledger's and server's periods.
		{db("serve", "--retention", "1ns"), "--retention must be at least 1m, got 1ns"},
		{db("serve", "--retention", "59s"), "--retention must be at least 1m, got 59s"},
		{db("proxy", "--upstream", "http://127.0.0.1:1", "--retention", "2s"), "--retention must be at least 1m, got 2s"},
		{db("serve", "--sweep-interval", "1ns"), "--sweep-interval must be at least 100ms, got 1ns"},
		{db("serve", "--sweep-interval", "99ms"), "--sweep-interval must be at least 100ms, got 99ms"},
		{db("serve", "--compact-interval", "1ns"), "--compact-interval must be at least 1m, got 1ns"},
		{db("serve", "--compact-interval", "59s"), "--compact-interval must be at least 1m, got 59s"},
		{db("serve", "--tombstone-retention", "1ns"), "--tombstone-retention must be at least 1m, got 1ns"},
		{db("proxy", "--upstream", "http://127.0.0.1:1", "--tombstone-retention", "59s"), "--tombstone-retention must be at least 1m, got 59s"},
		{db("proxy", "--upstream", "http://127.0.0.1:1", "--reconcile-interval", "1ns"), "--reconcile-interval must be at least 100ms, got 1ns"},
		{db("proxy", "--upstream", "http://127.0.0.1:1", "--reconcile-interval", "99ms"), "--reconcile-interval must be at least 100ms, got 99ms"},
		// Commands that read or decide create no ledger at a mistyped path.
		{[]string{"ops", "list", "--db", missing}, "no ledger at " + strings.TrimPrefix(missing, "sqlite:")},
		{[]string{"ops", "show", "k1", "--db", missing}, "no ledger at"},
		{[]string{"events", "list", "--db", missing}, "no ledger at"},
		{[]string{"tokens", "list", "--db", missing}, "no ledger at"},
		{[]string{"tokens", "revoke", "tok_1", "--db", missing}, "no ledger at"},
	} {
		out, errOut, code := run(t, tc.args...)
		if tc.msg == "" {
			require.Equal(t, 0, code, "%v: %s", tc.args, errOut)
			continue
		}
		require.Equal(t, 2, code, "%v: %s%s", tc.args, out, errOut)
		require.Empty(t, out, tc.args)
		first, _, _ := strings.Cut(errOut, "\n")
		require.True(t, strings.HasPrefix(first, "opledger: "), errOut)
		require.Contains(t, first, tc.msg, tc.args)
		require.NotContains(t, errOut, "secret", "a DSN's password is never printed")
	}
	_, err := os.Stat(strings.TrimPrefix(missing, "sqlite:"))
	require.ErrorIs(t, err, fs.ErrNotExist, "no ledger created at the mistyped path")
}

// TestEventNotFound: a missing event is reported as an event, not as an
// operation, from the store and through a server.
func TestEventNotFound(t *testing.T) {
	t.Parallel()
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "e.db")
	_, errOut, code := run(t, "migrate", "--db", dsn)
	require.Equal(t, 0, code, errOut)
	_, errOut, code = run(t, "events", "show", "forms", "evt-1", "--db", dsn, "--tenant", "acme")
	require.Equal(t, 1, code, errOut)
	require.Equal(t, "opledger: event forms/evt-1 not found in tenant \"acme\"\n", errOut)

	out, errOut, code := run(t, "tokens", "create", "--db", dsn, "--tenant", "acme")
	require.Equal(t, 0, code, errOut)
	url, _ := startServe(t, dsn)
	_, errOut, code = run(t, "events", "show", "forms", "evt-1", "--server", url, "--token", strings.TrimSpace(out))
	require.Equal(t, 1, code, errOut)
	require.Equal(t, "opledger: event forms/evt-1 not found\n", errOut)
	_, errOut, code = run(t, "events", "list", "--server", url, "--token", strings.TrimSpace(out), "--limit", "0")
	require.Equal(t, 2, code, errOut)
}

// runIn is run in the working directory dir, with extra environment
// variables (after OPLEDGER_DB=), for a command that must end at once: it
// is killed after a minute (a server that started when it should have
// refused) and the test fails.
func runIn(t *testing.T, dir string, env []string, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "OPLEDGER_DB="), env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	require.NoError(t, ctx.Err(), "%v did not end: killed", args)
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return out.String(), errOut.String(), ee.ExitCode()
	}
	require.NoError(t, err)
	return out.String(), errOut.String(), 0
}

// requireNoFiles checks that dir holds nothing: no ledger was created.
func requireNoFiles(t *testing.T, dir string, msgAndArgs ...any) {
	t.Helper()
	require.Empty(t, testdb.FileNames(t, dir), msgAndArgs...)
}

// TestEmptyFlagValues: a --db, --config or --upstream given with an empty
// value (--db "$UNSET") is a usage error, not the default: an empty --db
// would otherwise ignore $OPLEDGER_DB and create ./opledger.db, an empty
// --config run without the file. Nothing is created.
func TestEmptyFlagValues(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"serve", "--addr", "127.0.0.1:0", "--db", ""}, "--db is empty: give sqlite:PATH or postgres://USER@HOST:PORT/DB, or leave the flag out"},
		{[]string{"proxy", "--listen", "127.0.0.1:0", "--upstream", "http://127.0.0.1:1", "--db="}, "--db is empty"},
		{[]string{"migrate", "--db", ""}, "--db is empty"},
		{[]string{"tokens", "create", "--tenant", "acme", "--db", ""}, "--db is empty"},
		{[]string{"ops", "list", "--db", ""}, "--db is empty"},
		{[]string{"events", "list", "--db", ""}, "--db is empty"},
		{[]string{"demo", "--no-serve", "--db", ""}, "--db is empty"},
		{[]string{"bench", "--concurrency", "1", "--duration", "10ms", "--db", ""}, "--db is empty"},
		// lab run's --db takes a PostgreSQL server only: not "sqlite:PATH".
		{[]string{"lab", "run", "cases.csv", "--db", ""}, "--db is empty: give a postgres:// URL, or leave the flag out"},
		{[]string{"serve", "--addr", "127.0.0.1:0", "--config", ""}, "--config is empty: give a file, or leave the flag out"},
		{[]string{"proxy", "--listen", "127.0.0.1:0", "--config", ""}, "--config is empty: give a file, or leave the flag out"},
		{[]string{"proxy", "--config", "proxy.yaml", "--upstream", ""}, "--upstream is empty: give a URL, or leave the flag out"},
		// An empty --tenant is not the tenant "default" (nor, for tokens
		// list, every tenant): a script's unset variable meant another.
		{[]string{"ops", "list", "--tenant", ""}, "--tenant is empty: give a tenant's name, or leave the flag out"},
		{[]string{"ops", "cancel", "k1", "--reason", "x", "--tenant="}, "--tenant is empty: give a tenant's name, or leave the flag out"},
		{[]string{"ops", "show", "k1", "--tenant", ""}, "--tenant is empty"},
		{[]string{"events", "show", "forms", "evt-1", "--tenant", ""}, "--tenant is empty"},
		{[]string{"workflows", "list", "--stuck", "--open"}, "--stuck takes only --limit: not --prefix, --open or --cursor"},
		{[]string{"workflows", "list", "--tenant", ""}, "--tenant is empty"},
		{[]string{"workflows", "resume", "wf:1", "--tenant", ""}, "--tenant is empty"},
		{[]string{"tokens", "list", "--tenant", ""}, "--tenant is empty: give a tenant's name, or leave the flag out"},
	} {
		dir, envDir := t.TempDir(), t.TempDir()
		out, errOut, code := runIn(t, dir, []string{"OPLEDGER_DB=sqlite:" + filepath.Join(envDir, "env.db")}, tc.args...)
		require.Equal(t, 2, code, "%q: %s%s", tc.args, out, errOut)
		require.Empty(t, out)
		require.Contains(t, usageLine(t, errOut), "opledger: "+tc.msg, tc.args)
		requireNoFiles(t, dir, "%q created a file in its directory", tc.args)
		requireNoFiles(t, envDir, "%q created the ledger of $OPLEDGER_DB", tc.args)
	}
}

// TestListenPortChecked: a port out of range or unknown in --addr or
// --listen is a usage error (2), like an address without a port, and
// nothing is written to --db.
func TestListenPortChecked(t *testing.T) {
	t.Parallel()
	for _, cmd := range [][]string{
		{"serve", "--addr"},
		{"proxy", "--upstream", "http://127.0.0.1:1", "--listen"},
		{"demo", "--addr"},
	} {
		flag := cmd[len(cmd)-1]
		for _, tc := range []struct{ addr, msg string }{
			{"127.0.0.1:99999", `port "99999" is not a number from 0 to 65535`},
			{"127.0.0.1:65536", `port "65536" is not a number from 0 to 65535`},
			{":-1", `port "-1" is not a number from 0 to 65535`},
			{"127.0.0.1:+80", `port "+80" is not a number from 0 to 65535`},
			{":abc", `port "abc" is neither a number from 0 to 65535 nor a known service name`},
		} {
			dir := t.TempDir()
			args := append(append([]string{}, cmd...), tc.addr, "--db", "sqlite:"+filepath.Join(dir, "ledger.db"))
			out, errOut, code := run(t, args...)
			require.Equal(t, 2, code, "%s %s: %s%s", cmd[0], tc.addr, out, errOut)
			require.Empty(t, out)
			require.Equal(t, "opledger: "+flag+" takes HOST:PORT, e.g. 127.0.0.1:8080: "+tc.msg, usageLine(t, errOut))
			requireNoFiles(t, dir, "%s %s: nothing written to --db", cmd[0], tc.addr)
		}
	}
}

// TestLogLevelNames: --log-level takes the four documented names, in any
// case, and nothing else (slog alone would take "error+100" or "INFO-4").
func TestLogLevelNames(t *testing.T) {
	t.Parallel()
	for _, cmd := range [][]string{{"serve"}, {"proxy", "--upstream", "http://127.0.0.1:1"}} {
		for _, level := range []string{"error+100", "INFO-4", "verbose", "warning", ""} {
			args := append(append([]string{}, cmd...), "--log-level", level, "--db", "sqlite:"+filepath.Join(t.TempDir(), "l.db"))
			out, errOut, code := run(t, args...)
			require.Equal(t, 2, code, "%v: %s%s", args, out, errOut)
			require.Equal(t, fmt.Sprintf("opledger: --log-level must be debug, info, warn or error, got %q", level), usageLine(t, errOut))
		}
		for _, level := range []string{"debug", "INFO", "Warn", "error"} {
			// Accepted: the command goes on to refuse the address instead.
			addrFlag := map[string]string{"serve": "--addr", "proxy": "--listen"}[cmd[0]]
			args := append(append([]string{}, cmd...), "--log-level", level, addrFlag, "bogus")
			_, errOut, code := run(t, args...)
			require.Equal(t, 2, code, "%v: %s", args, errOut)
			require.Contains(t, errOut, "takes HOST:PORT", args)
		}
	}
}

// TestTypedFlagsRefusedPlainly: a value that is no number, duration or
// boolean for a flag of that type says what the flag takes and what it
// got (a --limit its range), in words, not strconv's.
func TestTypedFlagsRefusedPlainly(t *testing.T) {
	t.Parallel()
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "f.db")
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"ops", "list", "--limit", "x"}, `--limit takes a whole number from 1 to 500 (got "x")`},
		{[]string{"events", "list", "--limit", "1.5"}, `--limit takes a whole number from 1 to 500 (got "1.5")`},
		{[]string{"workflows", "list", "--limit", "99999999999999999999"}, `--limit takes a whole number from 1 to 200 (got "99999999999999999999")`},
		{[]string{"serve", "--workers", "x"}, `--workers takes a whole number (got "x")`},
		{[]string{"serve", "--max-body-bytes", "1k"}, `--max-body-bytes takes a whole number (got "1k")`},
		{[]string{"proxy", "--upstream", "http://127.0.0.1:1", "--max-body-bytes", "1MB"}, `--max-body-bytes takes a whole number (got "1MB")`},
		{[]string{"bench", "--preload", "x"}, `--preload takes a whole number (got "x")`},
		{[]string{"ops", "approve", "k1", "--version", "two", "--fingerprint", "sha256:x"}, `--version takes a whole number (got "two")`},
		{[]string{"serve", "--lease", "30"}, `--lease takes a duration such as 30s, 5m or 1h30m (got "30")`},
		{[]string{"ops", "list", "--json=maybe"}, `--json takes true or false (got "maybe")`},
	} {
		out, errOut, code := run(t, append(tc.args, "--db", dsn)...)
		require.Equal(t, 2, code, "%v: %s%s", tc.args, out, errOut)
		require.Empty(t, out, tc.args)
		require.Equal(t, "opledger: "+tc.msg, usageLine(t, errOut), tc.args)
	}
	_, err := os.Stat(strings.TrimPrefix(dsn, "sqlite:"))
	require.ErrorIs(t, err, fs.ErrNotExist, "nothing ran")
}

// TestPostgresDSNUsage: a postgres:// DSN its driver cannot parse is a
// usage error (2) that says why, on one line, never with its password
// (shown as xxxxx, or the value not at all when it is no URL), from --db
// and from OPLEDGER_DB; one that parses but whose server does not answer
// is a failure (1).
func TestPostgresDSNUsage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"ops", "list", "--db", "postgres://u:secret@h/db?sslmode=bogus"},
			"--db: the PostgreSQL DSN postgres://u:xxxxx@h/db?sslmode=bogus cannot be parsed: failed to configure TLS (sslmode is invalid)"},
		{[]string{"migrate", "--db", "postgres://%zz"},
			`--db: the PostgreSQL DSN (not repeated: it may hold a password) cannot be parsed: failed to parse as URL (invalid percent-encoded token: "%zz")`},
		{[]string{"tokens", "list", "--db", "postgres://u:s%zzecret@h/db"},
			"--db: the PostgreSQL DSN (not repeated: it may hold a password) cannot be parsed: failed to parse as URL (invalid percent-encoded token in password)"},
		{[]string{"serve", "--addr", "127.0.0.1:0", "--db", "postgresql://u:secret@h:99999/db"},
			"--db: the PostgreSQL DSN postgresql://u:xxxxx@h:99999/db cannot be parsed: invalid port"},
		{[]string{"events", "list", "--db", "postgres://u@h/db?password=secret&pool_max_conns=x"},
			"--db: the PostgreSQL DSN postgres://u@h/db?password=xxxxx&pool_max_conns=x cannot be parsed: cannot parse pool_max_conns"},
		{[]string{"tokens", "list", "--db", "postgres://u@127.0.0.1:5432/test?sslpassword=secret&sslmode=bogus"},
			"--db: the PostgreSQL DSN postgres://u@127.0.0.1:5432/test?sslpassword=xxxxx&sslmode=bogus cannot be parsed: failed to configure TLS (sslmode is invalid)"},
		// A password's '@' written as is: the driver took the rest of the
		// password for the host, and printed it ("lookup secret@h").
		{[]string{"ops", "list", "--db", "postgres://u:p@secret@h/db"}, "--db: " + redact.StrayAtReason},
		{[]string{"serve", "--addr", "127.0.0.1:0", "--db", "postgres://u:p@secret@h:5432?sslmode=disable"}, "--db: " + redact.StrayAtReason},
		// A query's '@' with no path before the query: the driver took
		// "h" for the user and printed the rest ("lookup secret").
		{[]string{"ops", "list", "--db", "postgres://h:5432?password=p@secret"}, "--db: " + redact.StrayAtReason},
	} {
		out, errOut, code := runGuarded(t, tc.args...)
		require.Equal(t, 2, code, "%v: %s%s", tc.args, out, errOut)
		require.Empty(t, out, tc.args)
		line := usageLine(t, errOut)
		require.True(t, strings.HasPrefix(line, "opledger: "+tc.msg), "%v: %s", tc.args, line)
		require.NotContains(t, errOut, "secret", "a DSN's password is never printed")
	}
	_, errOut, code := runIn(t, t.TempDir(), []string{"OPLEDGER_DB=postgres://u:secret@h/db?sslmode=nope"}, "ops", "list")
	require.Equal(t, 2, code, errOut)
	require.True(t, strings.HasPrefix(errOut, "opledger: OPLEDGER_DB: the PostgreSQL DSN postgres://u:xxxxx@h/db?sslmode=nope cannot be parsed"), errOut)

	// Parsed, but nothing answers, or a file it names is missing here:
	// a failure of the environment, not a usage error.
	for _, dsn := range []string{"postgres://u:secret@127.0.0.1:1/db?connect_timeout=5",
		"postgres://u:secret@127.0.0.1:1/db?sslmode=verify-full&sslrootcert=/nonexistent/ca.pem&connect_timeout=5"} {
		out, errOut, code := runGuarded(t, "ops", "list", "--db", dsn)
		require.Equal(t, 1, code, "%s%s", out, errOut)
		require.NotContains(t, errOut, "for usage")
		require.NotContains(t, errOut, "secret")
	}
}

// TestInMemoryDBUsageError: --db sqlite::memory: names no store opledger
// opens. The commands that create a ledger (migrate, serve, proxy, demo,
// lab, bench) exited 1 on it, as for a store that failed, while those that
// only read exited 2, and backup said the file ":memory:" did not exist:
// every command now refuses it the same way, a usage error (2) naming the
// flag, before it opens anything.
func TestInMemoryDBUsageError(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"migrate"},
		{"serve", "--addr", "127.0.0.1:0"},
		{"proxy", "--upstream", "http://127.0.0.1:1"},
		{"demo", "--no-serve"},
		{"lab", "scenario", "normal"},
		{"bench", "--duration", "1s"},
		{"backup", "--to", "copy.db"},
		{"tokens", "create", "--tenant", "acme"},
		{"tokens", "list"},
		{"ops", "list"},
		{"workflows", "list"},
		{"events", "list"},
	} {
		for _, dsn := range []string{"sqlite::memory:", "sqlite://:memory:"} {
			args := append(append([]string{}, args...), "--db", dsn)
			out, errOut, code := run(t, args...)
			require.Equal(t, 2, code, "%v: %s%s", args, out, errOut)
			require.Empty(t, out, args)
			require.Contains(t, usageLine(t, errOut), "opledger: --db takes a file: "+dsn+" is an in-memory database", args)
		}
	}
}
